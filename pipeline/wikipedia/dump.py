"""Streaming MediaWiki XML dumps: pages out of (a byte range of) a ``.xml.bz2`` file.

A dump is ``<mediawiki><siteinfo>..</siteinfo><page>..</page>..</mediawiki>``. Pages are
cut out of the decompressed byte stream by their ``<page>``/``</page>`` lines and each
is parsed on its own with :mod:`xml.etree.ElementTree` (expat), so one malformed page
costs that page only and memory is bounded by the largest page.

The ``multistream`` variant concatenates independent bz2 streams of 100 pages each; its
index (``offset:page_id:title`` lines) gives the streams' byte offsets, so a file splits
into byte ranges that start and end on stream boundaries (:func:`plan_ranges`). A plain
dump is one bz2 stream and is read by one task.

Every problem is reported as a :class:`Problem` with its location: the file, the byte
offset of the bz2 stream it is in (0 for a single-stream file) and the offset in that
stream's decompressed bytes.
"""

from __future__ import annotations

import bz2
import codecs
import io
import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass, field

_READ = 1 << 20
_PAGE_OPEN = b"<page>"
_PAGE_CLOSE = b"</page>"
_SITEINFO = re.compile(rb"<siteinfo>.*?</siteinfo>", re.S)
_ROOT = re.compile(rb"<mediawiki\b[^>]*>")


@dataclass(frozen=True)
class Location:
    """Where something is in a dump.

    ``kind`` says what the two offsets count: ``plain`` (uncompressed file: ``offset`` is
    the file byte), ``stream`` (``stream_offset`` is the file byte where the bz2 stream
    starts, ``offset`` the byte in that stream's decompressed output; for a single-stream
    file that is the decompressed offset in the whole dump), ``block`` (a single-stream
    dump split at bz2 blocks: ``stream_offset`` is the file *bit* where the block starts,
    ``offset`` the byte in that block's decompressed output).
    """

    path: str
    stream_offset: int
    offset: int
    kind: str = "stream"

    def __str__(self) -> str:
        if self.kind == "plain":
            return f"{self.path} at byte {self.offset}"
        if self.kind == "block":
            return (
                f"{self.path} in the bz2 block at file bit {self.stream_offset} (byte "
                f"{self.stream_offset // 8}), decompressed byte {self.offset} of that block"
            )
        return (
            f"{self.path} at bz2 stream byte {self.stream_offset}, decompressed byte {self.offset}"
        )


@dataclass(frozen=True)
class Page:
    """One ``<page>`` with its latest revision."""

    page_id: int
    title: str
    ns: int
    redirect: str | None
    text: str
    model: str
    revision_id: int | None
    timestamp: str | None
    location: Location


@dataclass(frozen=True)
class Problem:
    """Something that could not be read; ``kind`` names it (see :data:`PROBLEM_KINDS`)."""

    kind: str
    location: Location
    detail: str
    page_id: int | None = None
    title: str | None = None


PROBLEM_KINDS = {
    "malformed_xml": "a <page> element that is not well-formed XML",
    "missing_field": "a <page> without a title, id or revision",
    "unknown_namespace": "a page whose <ns> is not declared in the dump's <siteinfo>",
    "truncated_stream": "a bz2 stream that ends before its end-of-stream marker",
    "corrupt_stream": "bytes that are not bz2 data",
    "unclosed_page": "a <page> whose </page> never comes",
}


@dataclass(frozen=True)
class SiteInfo:
    """The ``<siteinfo>`` header: database name and namespaces (key -> local name)."""

    dbname: str | None = None
    namespaces: dict[int, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, xml: bytes) -> SiteInfo:
        root = ET.fromstring(xml)
        spaces = {}
        for el in root.iter():
            if _local(el.tag) == "namespace" and el.get("key") is not None:
                spaces[int(el.get("key"))] = (el.text or "").strip()
        db = next((el.text for el in root.iter() if _local(el.tag) == "dbname"), None)
        return cls(dbname=db, namespaces=spaces)


class DumpError(Exception):
    """A dump cannot be read at all (not bz2, not a MediaWiki export)."""


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


# --------------------------------------------------------------------------- bytes


@dataclass
class _Chunk:
    data: bytes
    stream_offset: int  # compressed offset of the bz2 stream (bit of the block) of data
    offset: int  # decompressed offset of data[0] within that stream (block)
    kind: str = "stream"  # Location.kind
    owned: bool = True  # block mode: pages starting in these bytes belong to this range


def _is_bz2(path: str) -> bool:
    with open(path, "rb") as f:
        return f.read(3) == b"BZh"


def iter_decompressed(path: str, start: int = 0, end: int | None = None) -> Iterator[_Chunk]:
    """Decompressed bytes of ``path[start:end]``, one or more concatenated bz2 streams.

    An uncompressed file is passed through (``stream_offset`` 0). Raises
    :class:`StreamError` on a truncated or corrupt stream, after yielding every byte
    that decompressed.
    """
    with open(path, "rb") as f:
        f.seek(start)
        head = f.read(3)
        f.seek(start)
        remaining = None if end is None else end - start
        if head != b"BZh" and start == 0:
            pos = 0
            while True:
                buf = f.read(_READ if remaining is None else min(_READ, remaining))
                if not buf:
                    return
                yield _Chunk(buf, 0, pos, "plain")
                pos += len(buf)
                if remaining is not None:
                    remaining -= len(buf)
        stream_offset = start
        consumed = 0  # compressed bytes of this range fed so far
        dec = bz2.BZ2Decompressor()
        out_pos = 0
        fed_in_stream = 0
        while True:
            buf = f.read(_READ if remaining is None else min(_READ, remaining))
            if remaining is not None:
                remaining -= len(buf)
            if not buf:
                if fed_in_stream and not dec.eof:
                    raise StreamError(
                        "truncated_stream",
                        Location(path, stream_offset, out_pos),
                        f"bz2 stream ends without its end-of-stream marker at file byte "
                        f"{start + consumed} (file truncated or range cut mid-stream)",
                    )
                return
            while buf:
                try:
                    data = dec.decompress(buf)
                except OSError as exc:
                    raise StreamError(
                        "corrupt_stream",
                        Location(path, stream_offset, out_pos),
                        f"invalid bz2 data near file byte {start + consumed}: {exc}",
                    ) from None
                used = len(buf) - (len(dec.unused_data) if dec.eof else 0)
                consumed += used
                fed_in_stream += used
                if data:
                    yield _Chunk(data, stream_offset, out_pos)
                    out_pos += len(data)
                if dec.eof:
                    buf = dec.unused_data
                    stream_offset = start + consumed
                    dec = bz2.BZ2Decompressor()
                    out_pos = 0
                    fed_in_stream = 0
                    if len(buf) >= 3 and not buf.startswith(b"BZh"):
                        # Trailing garbage after the last stream.
                        raise StreamError(
                            "corrupt_stream",
                            Location(path, stream_offset, 0),
                            f"bytes after a bz2 stream are not bz2 data (file byte "
                            f"{stream_offset})",
                        )
                else:
                    buf = b""


# --------------------------------------------------------------------------- bz2 blocks
# A bz2 stream is "BZh<level>", then blocks, each starting with the 48-bit magic
# 0x314159265359 and its 32-bit CRC, then the end-of-stream magic 0x177245385090 and the
# combined CRC. Blocks are bit-aligned, not byte-aligned, and independent: one block,
# cut out at its bit offsets and wrapped as a stream of its own (header, the block, the
# end-of-stream magic and, as combined CRC, the block's CRC), decompresses alone. This is
# how a single-stream dump is split into parallel tasks (bzip2recover finds blocks the
# same way). The magic can occur by chance inside compressed data (2^-48 per bit); a
# candidate boundary that does not decode is merged with the next one.

_BLOCK_MAGIC = 0x314159265359
_EOS_MAGIC = 0x177245385090
_SCAN_WINDOW = 1 << 22


def _magic_patterns(magic: int) -> list[tuple[int, bytes, int, int, int, int]]:
    """Per bit shift s: (s, the 5 whole bytes, first byte, its mask, last byte, its mask)."""
    out = []
    for shift in range(8):
        value = (magic << (8 - shift)).to_bytes(7, "big")
        mask = (((1 << 48) - 1) << (8 - shift)).to_bytes(7, "big")
        out.append((shift, value[1:6], value[0], mask[0], value[6], mask[6]))
    return out


_PATTERNS = ((_magic_patterns(_BLOCK_MAGIC), True), (_magic_patterns(_EOS_MAGIC), False))


def find_bz2_marks(data: bytes, base: int, limit_bit: int | None = None) -> list[tuple[int, bool]]:
    """Block (True) and end-of-stream (False) magics in ``data`` (file bytes from ``base``):
    sorted ``(file bit, is_block)`` for magics starting before ``limit_bit``."""
    found = []
    n = len(data)
    for patterns, is_block in _PATTERNS:
        for shift, middle, first, first_mask, last, last_mask in patterns:
            i = data.find(middle, 1)
            while i >= 0:
                j = i - 1
                if (data[j] & first_mask) == first and (
                    not last_mask or (i + 5 < n and (data[i + 5] & last_mask) == last)
                ):
                    bit = (base + j) * 8 + shift
                    if limit_bit is None or bit < limit_bit:
                        found.append((bit, is_block))
                i = data.find(middle, i + 1)
    return sorted(found)


def _iter_marks(f, start: int, first: int = _SCAN_WINDOW) -> Iterator[tuple[int, bool]]:
    """Magics from file byte ``start`` on, scanning windows (overlapping by 7 bytes); the
    first window is ``first`` bytes (the task's range), the next ones smaller."""
    w, size = start, max(1, min(first, _SCAN_WINDOW))
    while True:
        f.seek(w)
        data = f.read(size + 7)
        yield from find_bz2_marks(data, w, (w + size) * 8)
        if len(data) < size + 7:
            return
        w += size
        size = _SCAN_WINDOW // 4


def decode_bz2_block(f, bit_start: int, bit_end: int) -> bytes:
    """Decompress the bz2 block in file bits ``[bit_start, bit_end)`` (raises OSError or
    ValueError if those bits are not one or more whole blocks)."""
    b0, b1 = bit_start // 8, (bit_end + 7) // 8
    f.seek(b0)
    raw = f.read(b1 - b0)
    nbits = bit_end - bit_start
    if len(raw) < b1 - b0 or nbits < 80:
        raise ValueError("block bits beyond the end of the file")
    block = (int.from_bytes(raw, "big") >> (len(raw) * 8 - (bit_end - b0 * 8))) & ((1 << nbits) - 1)
    crc = (block >> (nbits - 80)) & 0xFFFFFFFF
    value = (((block << 48) | _EOS_MAGIC) << 32) | crc
    total = nbits + 80
    pad = (-total) % 8
    return bz2.decompress(b"BZh9" + (value << pad).to_bytes((total + pad) // 8, "big"))


def iter_bz2_blocks(path: str, start: int, end: int | None) -> Iterator[_Chunk]:
    """Decompressed bz2 blocks of ``path`` that start in file bytes ``[start, end)``
    (``owned``), then the blocks after them (not owned) for as long as the caller reads.

    Raises :class:`StreamError` for a block that does not decode (after trying to merge it
    with up to two following candidate boundaries) or is cut by the end of the file.
    """
    size = os.path.getsize(path)
    end_bit = (size if end is None else end) * 8
    with open(path, "rb") as f:
        marks = _iter_marks(f, start, (end_bit // 8) - start + 1)
        ahead: list[tuple[int, bool]] = []

        def peek(k: int) -> tuple[int, bool] | None:
            while len(ahead) <= k:
                m = next(marks, None)
                if m is None:
                    return None
                ahead.append(m)
            return ahead[k]

        while peek(0) is not None:
            bit, is_block = ahead.pop(0)
            if not is_block:
                continue
            data = None
            error: Exception | None = None
            for extra in range(3):
                nxt = peek(extra)
                stop = nxt[0] if nxt is not None else size * 8
                try:
                    data = decode_bz2_block(f, bit, stop)
                except (OSError, ValueError, EOFError) as exc:
                    error = error or exc
                    if nxt is None:
                        break
                    continue
                del ahead[:extra]
                break
            if data is None:
                cut = peek(0) is None
                raise StreamError(
                    "truncated_stream" if cut else "corrupt_stream",
                    Location(path, bit, 0, "block"),
                    (
                        "the last bz2 block has no end-of-stream marker after it (file truncated)"
                        if cut
                        else f"the bz2 block does not decompress: {error}"
                    ),
                )
            yield _Chunk(data, bit, 0, "block", bit < end_bit)


class StreamError(Exception):
    def __init__(self, kind: str, location: Location, detail: str) -> None:
        super().__init__(f"{location}: {detail}")
        self.kind, self.location, self.detail = kind, location, detail


class _Utf16ToUtf8:
    """Re-encode a UTF-16 dump (with BOM) as UTF-8, chunk by chunk."""

    def __init__(self, encoding: str) -> None:
        self._dec = codecs.getincrementaldecoder(encoding)()

    def __call__(self, data: bytes) -> bytes:
        return self._dec.decode(data).encode("utf-8")


def _sniff_encoding(data: bytes) -> str | None:
    if data.startswith(codecs.BOM_UTF16_LE) or data.startswith(codecs.BOM_UTF16_BE):
        return "utf-16"
    if data.startswith(codecs.BOM_UTF8):
        return "utf-8-sig"
    return None


# --------------------------------------------------------------------------- pages


def iter_page_xml(
    path: str, start: int = 0, end: int | None = None, blocks: bool = False
) -> Iterator[tuple[bytes, Location] | Problem | SiteInfo]:
    """Yield the raw bytes of each ``<page>..</page>`` with its location.

    Also yields the :class:`SiteInfo` when the range holds the header, and
    :class:`Problem` records for stream errors and unclosed pages (reading then stops:
    nothing after a broken stream can be trusted).

    ``blocks``: ``path`` is a bz2 file read from the bz2 blocks that start in bytes
    ``[start, end)`` (:func:`iter_bz2_blocks`). The range owns the pages whose ``<page>``
    starts in those blocks: the bytes before its first ``<page>`` (the end of a page
    owned by the range before) are skipped, and reading goes on into the next blocks
    until its last page is closed.
    """
    buf = bytearray()
    # Where the bytes of buf come from, per chunk: (index in buf, stream_offset, offset,
    # kind, owned).
    marks: list[tuple[int, int, int, str, bool]] = []

    def mark(i: int) -> tuple[int, int, int, str, bool]:
        k = len(marks) - 1
        while k > 0 and marks[k][0] > i:
            k -= 1
        return marks[k] if marks else (0, start, 0, "stream", True)

    def where(i: int) -> Location:
        at, stream, off, kind, _ = mark(i)
        return Location(path, stream, off + i - at, kind)

    header_done = start > 0
    recode = None
    first = True
    chunks = iter_bz2_blocks(path, start, end) if blocks else iter_decompressed(path, start, end)
    try:
        for chunk in chunks:
            data = chunk.data
            if first:
                first = False
                enc = _sniff_encoding(data) if not header_done else None
                if enc:
                    recode = _Utf16ToUtf8(enc) if enc == "utf-16" else None
                    if enc == "utf-8-sig":
                        data = data[len(codecs.BOM_UTF8) :]
            if recode is not None:
                data = recode(data)
            # (Offsets in a re-encoded UTF-16 dump count UTF-8 bytes.)
            marks.append((len(buf), chunk.stream_offset, chunk.offset, chunk.kind, chunk.owned))
            buf += data
            pos = 0
            if not header_done:
                i = buf.find(_PAGE_OPEN)
                m = _SITEINFO.search(buf)
                if m is not None or i >= 0:
                    header_done = True
                    if not _ROOT.search(buf[: i if i >= 0 else len(buf)]):
                        raise DumpError(
                            f"{path} is not a MediaWiki XML dump (no <mediawiki> root before "
                            "the first <page>)"
                        )
                    if m is not None:
                        try:
                            yield SiteInfo.parse(bytes(m.group(0)))
                        except ET.ParseError as exc:
                            yield Problem(
                                "malformed_xml",
                                where(m.start()),
                                f"<siteinfo> does not parse: {exc}",
                            )
                    pos = i if i >= 0 else (m.end() if m else 0)
                elif len(buf) > 1 << 24:
                    raise DumpError(f"{path}: no <siteinfo> or <page> in the first 16 MiB")
                else:
                    continue
            while True:
                i = buf.find(_PAGE_OPEN, pos)
                if i < 0:
                    pos = max(pos, len(buf) - len(_PAGE_OPEN))
                    break
                if not mark(i)[4]:
                    return  # the next range's first page
                j = buf.find(_PAGE_CLOSE, i)
                if j < 0:
                    pos = i
                    break
                nxt = buf.find(_PAGE_OPEN, i + len(_PAGE_OPEN), j)
                loc = where(i)
                if nxt >= 0:
                    yield Problem(
                        "unclosed_page",
                        loc,
                        f"<page> is not closed before the next <page> "
                        f"(decompressed byte {where(nxt).offset})",
                        page_id=_peek_id(buf[i:nxt]),
                        title=_peek_title(buf[i:nxt]),
                    )
                    pos = nxt
                    continue
                yield bytes(buf[i : j + len(_PAGE_CLOSE)]), loc
                pos = j + len(_PAGE_CLOSE)
            if not chunk.owned and buf.find(_PAGE_OPEN, pos) < 0:
                # Past the range: done unless a "<page>" of ours is cut at the end of buf.
                k = buf.find(b"<", max(pos, len(buf) - len(_PAGE_OPEN) + 1))
                if k < 0 or not mark(k)[4]:
                    return
            del buf[:pos]
            keep = [m for m in marks if m[0] > pos]
            first_kept = [m for m in marks if m[0] <= pos][-1:]
            if first_kept:
                at, stream, off, kind, owned = first_kept[0]
                keep.insert(0, (pos, stream, off + pos - at, kind, owned))
            marks[:] = [(at - pos, *rest) for at, *rest in keep]
    except StreamError as exc:
        i = buf.find(_PAGE_OPEN)
        yield Problem(
            exc.kind,
            exc.location,
            exc.detail + ("; an incomplete <page> is lost" if i >= 0 else ""),
            page_id=_peek_id(buf[i:]) if i >= 0 else None,
            title=_peek_title(buf[i:]) if i >= 0 else None,
        )
        return
    i = buf.find(_PAGE_OPEN)
    if i >= 0:
        yield Problem(
            "unclosed_page",
            where(i),
            "<page> is not closed before the end of the input",
            page_id=_peek_id(buf[i:]),
            title=_peek_title(buf[i:]),
        )


_TITLE = re.compile(rb"<title>([^<]{0,300})</title>")
_ID = re.compile(rb"<id>\s*(\d{1,18})\s*</id>")


def _peek_id(raw: bytes | bytearray) -> int | None:
    """The page id of a raw ``<page>`` (its first ``<id>``, before the revision's)."""
    m = _ID.search(raw[:8192])
    return int(m.group(1)) if m else None


def _peek_title(raw: bytes | bytearray) -> str | None:
    m = _TITLE.search(raw[:4096])
    return m.group(1).decode("utf-8", "replace") if m else None


def parse_page(raw: bytes, location: Location, namespaces: dict[int, str]) -> Page | Problem:
    """Parse one ``<page>`` element; the latest revision (by timestamp) wins."""
    try:
        el = ET.fromstring(raw)
    except ET.ParseError as exc:
        line, col = exc.position
        return Problem(
            "malformed_xml",
            location,
            f"page XML does not parse: {exc.msg if hasattr(exc, 'msg') else exc} "
            f"(line {line}, column {col} of the page)",
            page_id=_peek_id(raw),
            title=_peek_title(raw),
        )
    title = el.findtext("title")
    id_text = el.findtext("id")
    revisions = el.findall("revision")
    if not title or not id_text or not id_text.strip().isdigit() or not revisions:
        missing = [
            n
            for n, ok in (
                ("title", bool(title)),
                ("id", bool(id_text and id_text.strip().isdigit())),
                ("revision", bool(revisions)),
            )
            if not ok
        ]
        return Problem(
            "missing_field",
            location,
            f"page lacks {', '.join(missing)}",
            page_id=_peek_id(raw),
            title=title or None,
        )
    page_id = int(id_text)
    ns_text = el.findtext("ns")
    if ns_text is None:
        ns = _ns_from_title(title, namespaces)
    else:
        try:
            ns = int(ns_text)
        except ValueError:
            return Problem("unknown_namespace", location, f"<ns> is {ns_text!r}", page_id, title)
    if namespaces and ns not in namespaces:
        return Problem(
            "unknown_namespace",
            location,
            f"namespace {ns} is not declared in <siteinfo> (known: {sorted(namespaces)[:8]}...)",
            page_id,
            title,
        )
    redirect_el = el.find("redirect")
    redirect = None
    if redirect_el is not None:
        redirect = redirect_el.get("title") or ""
    latest = max(revisions, key=lambda r: r.findtext("timestamp") or "")
    text_el = latest.find("text")
    text = (text_el.text or "") if text_el is not None else ""
    rev_id = latest.findtext("id")
    return Page(
        page_id=page_id,
        title=title,
        ns=ns,
        redirect=redirect,
        text=text,
        model=latest.findtext("model") or "wikitext",
        revision_id=int(rev_id) if rev_id and rev_id.isdigit() else None,
        timestamp=latest.findtext("timestamp"),
        location=location,
    )


def _ns_from_title(title: str, namespaces: dict[int, str]) -> int:
    """Namespace of a title in exports without ``<ns>`` (export-0.3 and older)."""
    prefix, sep, _ = title.partition(":")
    if sep:
        for key, name in namespaces.items():
            if name and name.lower() == prefix.lower():
                return key
    return 0


def iter_pages(
    path: str,
    start: int = 0,
    end: int | None = None,
    namespaces: dict[int, str] | None = None,
    blocks: bool = False,
) -> Iterator[Page | Problem | SiteInfo]:
    """Pages and problems of ``path[start:end]`` in file order (plus the header's SiteInfo).

    ``blocks``: the pages of the bz2 blocks starting in ``[start, end)`` (see
    :func:`iter_page_xml`).
    """
    spaces = dict(namespaces or {})
    for item in iter_page_xml(path, start, end, blocks):
        if isinstance(item, SiteInfo):
            if item.namespaces:
                spaces = item.namespaces
            yield item
        elif isinstance(item, Problem):
            yield item
        else:
            yield parse_page(item[0], item[1], spaces)


# --------------------------------------------------------------------------- planning


def read_siteinfo(path: str) -> SiteInfo:
    """Read the header of a dump (the first bz2 stream or first megabytes only)."""
    buf = bytearray()
    recode = None
    try:
        for n, chunk in enumerate(iter_decompressed(path, 0, None)):
            data = chunk.data
            if n == 0:
                enc = _sniff_encoding(data)
                if enc == "utf-16":
                    recode = _Utf16ToUtf8(enc)
            buf += recode(data) if recode else data
            m = _SITEINFO.search(buf)
            if m is not None:
                return SiteInfo.parse(bytes(m.group(0)))
            if buf.find(_PAGE_OPEN) >= 0 or len(buf) > 1 << 24:
                break
    except StreamError:
        # Truncated or corrupt before the header is complete: nothing to tell here; the
        # pages' read reports the stream error with its location.
        return SiteInfo()
    except ET.ParseError as exc:
        raise DumpError(f"{path}: <siteinfo> does not parse: {exc}") from None
    if not _ROOT.search(buf[:65536]) and not buf.lstrip().startswith(b"<"):
        raise DumpError(f"{path} is not a MediaWiki XML dump (no <mediawiki> root)")
    return SiteInfo()


def read_index_offsets(index_path: str) -> list[int]:
    """Distinct stream offsets of a multistream index (``offset:page_id:title`` lines)."""
    opener = bz2.open if _is_bz2(index_path) else open
    offsets: list[int] = []
    last = -1
    with opener(index_path, "rb") as f:
        for n, line in enumerate(io.BufferedReader(f) if opener is bz2.open else f, 1):
            head, sep, _ = line.partition(b":")
            if not sep or not head.strip().isdigit():
                if not line.strip():
                    continue
                raise DumpError(
                    f"{index_path} line {n}: not an index line offset:page_id:title: {line[:80]!r}"
                )
            off = int(head)
            if off != last:
                offsets.append(off)
                last = off
    offsets = sorted(set(offsets))
    return offsets


def plan_ranges(
    offsets: list[int], file_size: int, split_bytes: int, ratio: float = 4.0
) -> list[tuple[int, int]]:
    """Group consecutive streams into ``(start, end)`` byte ranges of the compressed file.

    ``split_bytes`` is the target decompressed size; ``ratio`` the assumed compression
    ratio (bz2 on wikitext: about 4-5). The first range starts at the first page stream
    (the header stream before it is read by :func:`read_siteinfo`); the last one runs to
    the end of the file (it holds the closing ``</mediawiki>``).
    """
    if not offsets:
        return [(0, file_size)]
    target = max(1, int(split_bytes / ratio))
    ranges = []
    begin = offsets[0]
    for off in offsets[1:]:
        if off - begin >= target:
            ranges.append((begin, off))
            begin = off
    ranges.append((begin, file_size))
    return ranges
