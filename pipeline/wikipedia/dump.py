"""Streaming MediaWiki XML dumps: pages out of (a byte range of) a ``.xml.bz2`` file.

A dump is ``<mediawiki><siteinfo>..</siteinfo><page>..</page>..</mediawiki>``. Pages are
cut out of the decompressed byte stream by their ``<page>``/``</page>`` lines and each
is parsed on its own with :mod:`xml.etree.ElementTree` (expat), so one malformed page
costs that page only and memory is bounded by the largest page.

The ``multistream`` variant concatenates independent bz2 streams of 100 pages each; its
index (``offset:page_id:title`` lines) gives the streams' byte offsets, so a file splits
into byte ranges that start and end on stream boundaries (:func:`plan_ranges`). A plain
dump is one bz2 stream, split at its bz2 blocks (:mod:`pipeline.wikipedia.bz2_blocks`)
or read by one task. The decompressed bytes come from
:mod:`pipeline.wikipedia.bz2_streams`.

Every problem is reported as a :class:`Problem` with its location: the file, the byte
offset of the bz2 stream it is in (0 for a single-stream file) and the offset in that
stream's decompressed bytes.
"""

from __future__ import annotations

import bz2
import codecs
import io
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass, field

from pipeline.wikipedia.bz2_blocks import iter_bz2_blocks
from pipeline.wikipedia.bz2_streams import (
    Chunk,
    Location,
    StreamError,
    is_bz2,
    iter_decompressed,
)

_PAGE_OPEN = b"<page>"
_PAGE_CLOSE = b"</page>"
_SITEINFO = re.compile(rb"<siteinfo>.*?</siteinfo>", re.S)
_ROOT = re.compile(rb"<mediawiki\b[^>]*>")
_HEADER_LIMIT = 1 << 24  # decompressed bytes in which <siteinfo> or a <page> must appear


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


# --------------------------------------------------------------------------- encoding


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


class _Utf8Input:
    """The decompressed chunks as UTF-8: a UTF-16 dump is re-encoded and a UTF-8 byte-order
    mark dropped, both found on the first chunk when ``sniff`` (the range starts the file).
    Offsets in a re-encoded UTF-16 dump therefore count UTF-8 bytes."""

    def __init__(self, sniff: bool) -> None:
        self._sniff = sniff
        self._first = True
        self._recode: _Utf16ToUtf8 | None = None

    def __call__(self, data: bytes) -> bytes:
        if self._first:
            self._first = False
            enc = _sniff_encoding(data) if self._sniff else None
            if enc == "utf-16":
                self._recode = _Utf16ToUtf8(enc)
            elif enc == "utf-8-sig":
                data = data[len(codecs.BOM_UTF8) :]
        return self._recode(data) if self._recode is not None else data


# --------------------------------------------------------------------------- pages


class _PageBuffer:
    """Decompressed bytes not yet cut into pages, and where each chunk of them came from.

    ``marks`` holds, per chunk, ``(index in data, stream_offset, offset, kind, owned)``, so
    that any index maps back to a :class:`Location` and to whether the range owns it.
    """

    def __init__(self, path: str, start: int) -> None:
        self.path = path
        self.start = start
        self.data = bytearray()
        self.marks: list[tuple[int, int, int, str, bool]] = []

    def append(self, chunk: Chunk, data: bytes) -> None:
        """Add ``data`` (``chunk``'s bytes, maybe re-encoded) at the end."""
        self.marks.append(
            (len(self.data), chunk.stream_offset, chunk.offset, chunk.kind, chunk.owned)
        )
        self.data += data

    def _mark(self, i: int) -> tuple[int, int, int, str, bool]:
        k = len(self.marks) - 1
        while k > 0 and self.marks[k][0] > i:
            k -= 1
        return self.marks[k] if self.marks else (0, self.start, 0, "stream", True)

    def where(self, i: int) -> Location:
        """The location of byte ``i`` of the buffer."""
        at, stream, off, kind, _ = self._mark(i)
        return Location(self.path, stream, off + i - at, kind)

    def owned(self, i: int) -> bool:
        """Whether byte ``i`` comes from a block the range owns (always, outside block mode)."""
        return self._mark(i)[4]

    def drop_before(self, pos: int) -> None:
        """Forget the bytes before ``pos``; the chunk holding ``pos`` now starts there."""
        del self.data[:pos]
        keep = [m for m in self.marks if m[0] > pos]
        first_kept = [m for m in self.marks if m[0] <= pos][-1:]
        if first_kept:
            at, stream, off, kind, owned = first_kept[0]
            keep.insert(0, (pos, stream, off + pos - at, kind, owned))
        self.marks[:] = [(at - pos, *rest) for at, *rest in keep]


def _read_header(buf: _PageBuffer) -> tuple[int, SiteInfo | Problem | None] | None:
    """The dump's header once the buffer holds it: (where the pages start, the SiteInfo, a
    Problem if it does not parse, or None without a ``<siteinfo>``); None while more bytes
    are needed. Raises :class:`DumpError` for a file that is not a MediaWiki export."""
    data = buf.data
    i = data.find(_PAGE_OPEN)
    m = _SITEINFO.search(data)
    if m is None and i < 0:
        if len(data) > _HEADER_LIMIT:
            raise DumpError(f"{buf.path}: no <siteinfo> or <page> in the first 16 MiB")
        return None
    if not _ROOT.search(data[: i if i >= 0 else len(data)]):
        raise DumpError(
            f"{buf.path} is not a MediaWiki XML dump (no <mediawiki> root before the first <page>)"
        )
    header: SiteInfo | Problem | None = None
    if m is not None:
        try:
            header = SiteInfo.parse(bytes(m.group(0)))
        except ET.ParseError as exc:
            header = Problem(
                "malformed_xml", buf.where(m.start()), f"<siteinfo> does not parse: {exc}"
            )
    return (i if i >= 0 else (m.end() if m else 0)), header


def _cut_pages(buf: _PageBuffer, pos: int) -> Iterator[tuple[bytes, Location] | Problem]:
    """Yield the complete pages in the buffer from ``pos`` on (a ``<page>`` opened again
    before its ``</page>`` is an ``unclosed_page`` problem).

    Returns (as the generator's value) where to resume and whether the next range's first
    page was reached (block mode: a ``<page>`` in a block the range does not own).
    """
    data = buf.data
    while True:
        i = data.find(_PAGE_OPEN, pos)
        if i < 0:
            return max(pos, len(data) - len(_PAGE_OPEN)), False
        if not buf.owned(i):
            return pos, True
        j = data.find(_PAGE_CLOSE, i)
        if j < 0:
            return i, False
        nxt = data.find(_PAGE_OPEN, i + len(_PAGE_OPEN), j)
        loc = buf.where(i)
        if nxt >= 0:
            yield Problem(
                "unclosed_page",
                loc,
                f"<page> is not closed before the next <page> "
                f"(decompressed byte {buf.where(nxt).offset})",
                page_id=_peek_id(data[i:nxt]),
                title=_peek_title(data[i:nxt]),
            )
            pos = nxt
            continue
        yield bytes(data[i : j + len(_PAGE_CLOSE)]), loc
        pos = j + len(_PAGE_CLOSE)


def _past_range(buf: _PageBuffer, pos: int, chunk: Chunk) -> bool:
    """Block mode: ``chunk`` is beyond the range and no page of the range is left open or
    cut at the end of the buffer, so reading stops."""
    if chunk.owned or buf.data.find(_PAGE_OPEN, pos) >= 0:
        return False
    # Done unless a "<page>" of ours is cut at the end of the buffer.
    k = buf.data.find(b"<", max(pos, len(buf.data) - len(_PAGE_OPEN) + 1))
    return k < 0 or not buf.owned(k)


def _lost_page(buf: _PageBuffer, kind: str, location: Location, detail: str) -> Problem:
    """A problem that ends the read; it names the incomplete page left in the buffer."""
    i = buf.data.find(_PAGE_OPEN)
    return Problem(
        kind,
        location,
        detail,
        page_id=_peek_id(buf.data[i:]) if i >= 0 else None,
        title=_peek_title(buf.data[i:]) if i >= 0 else None,
    )


def iter_page_xml(
    path: str, start: int = 0, end: int | None = None, blocks: bool = False
) -> Iterator[tuple[bytes, Location] | Problem | SiteInfo]:
    """Yield the raw bytes of each ``<page>..</page>`` with its location.

    Also yields the :class:`SiteInfo` when the range holds the header, and
    :class:`Problem` records for stream errors and unclosed pages (reading then stops:
    nothing after a broken stream can be trusted).

    ``blocks``: ``path`` is a bz2 file read from the bz2 blocks that start in bytes
    ``[start, end)`` (:func:`~pipeline.wikipedia.bz2_blocks.iter_bz2_blocks`). The range
    owns the pages whose ``<page>`` starts in those blocks: the bytes before its first
    ``<page>`` (the end of a page owned by the range before) are skipped, and reading goes
    on into the next blocks until its last page is closed.
    """
    buf = _PageBuffer(path, start)
    header_done = start > 0
    utf8 = _Utf8Input(sniff=not header_done)
    chunks = iter_bz2_blocks(path, start, end) if blocks else iter_decompressed(path, start, end)
    try:
        for chunk in chunks:
            buf.append(chunk, utf8(chunk.data))
            pos = 0
            if not header_done:
                header = _read_header(buf)
                if header is None:
                    continue
                header_done = True
                pos, info = header
                if info is not None:
                    yield info
            pos, next_range = yield from _cut_pages(buf, pos)
            if next_range or _past_range(buf, pos, chunk):
                return
            buf.drop_before(pos)
    except StreamError as exc:
        lost = buf.data.find(_PAGE_OPEN) >= 0
        detail = exc.detail + ("; an incomplete <page> is lost" if lost else "")
        yield _lost_page(buf, exc.kind, exc.location, detail)
        return
    i = buf.data.find(_PAGE_OPEN)
    if i >= 0:
        yield _lost_page(
            buf, "unclosed_page", buf.where(i), "<page> is not closed before the end of the input"
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
            if buf.find(_PAGE_OPEN) >= 0 or len(buf) > _HEADER_LIMIT:
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
    opener = bz2.open if is_bz2(index_path) else open
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
