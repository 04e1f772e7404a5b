"""Splitting a single bz2 stream at its blocks, so that one plain dump feeds many tasks.

A bz2 stream is ``BZh<level>``, then blocks, each starting with the 48-bit magic
0x314159265359 and its 32-bit CRC, then the end-of-stream magic 0x177245385090 and the
combined CRC. Blocks are bit-aligned, not byte-aligned, and independent: one block, cut
out at its bit offsets and wrapped as a stream of its own (header, the block, the
end-of-stream magic and, as combined CRC, the block's CRC), decompresses alone. This is
how ``bzip2recover`` finds blocks too. The magic can occur by chance inside compressed
data (2^-48 per bit); a candidate boundary that does not decode is merged with the next
one.
"""

from __future__ import annotations

import bz2
import os
from collections.abc import Iterator
from typing import BinaryIO

from pipeline.wikipedia.bz2_streams import Chunk, Location, StreamError

_BLOCK_MAGIC = 0x314159265359
_EOS_MAGIC = 0x177245385090
_SCAN_WINDOW = 1 << 22

Mark = tuple[int, bool]
"""A magic found in the file: ``(file bit, is_block)`` (False: end of stream)."""


def _magic_patterns(magic: int) -> list[tuple[int, bytes, int, int, int, int]]:
    """Per bit shift s: (s, the 5 whole bytes, first byte, its mask, last byte, its mask)."""
    out = []
    for shift in range(8):
        value = (magic << (8 - shift)).to_bytes(7, "big")
        mask = (((1 << 48) - 1) << (8 - shift)).to_bytes(7, "big")
        out.append((shift, value[1:6], value[0], mask[0], value[6], mask[6]))
    return out


_PATTERNS = ((_magic_patterns(_BLOCK_MAGIC), True), (_magic_patterns(_EOS_MAGIC), False))


def find_bz2_marks(data: bytes, base: int, limit_bit: int | None = None) -> list[Mark]:
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


def _iter_marks(f: BinaryIO, start: int, first: int = _SCAN_WINDOW) -> Iterator[Mark]:
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


def decode_bz2_block(f: BinaryIO, bit_start: int, bit_end: int) -> bytes:
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


class _Lookahead:
    """The marks of :func:`_iter_marks` with a window of the next ones (peek, drop)."""

    def __init__(self, marks: Iterator[Mark]) -> None:
        self._marks = marks
        self._ahead: list[Mark] = []

    def peek(self, k: int) -> Mark | None:
        """The ``k``-th next mark, or None past the last one."""
        while len(self._ahead) <= k:
            m = next(self._marks, None)
            if m is None:
                return None
            self._ahead.append(m)
        return self._ahead[k]

    def drop(self, n: int) -> None:
        """Consume the next ``n`` marks (``n`` already peeked)."""
        del self._ahead[:n]


def _decode_from(f: BinaryIO, path: str, bit: int, marks: _Lookahead, size: int) -> bytes:
    """The block starting at file bit ``bit``, ended by the next candidate mark; a
    candidate that does not decode is merged with up to two following ones (a false magic
    inside compressed data). Raises :class:`StreamError` when none decodes."""
    error: Exception | None = None
    for extra in range(3):
        nxt = marks.peek(extra)
        stop = nxt[0] if nxt is not None else size * 8
        try:
            data = decode_bz2_block(f, bit, stop)
        except (OSError, ValueError, EOFError) as exc:
            error = error or exc
            if nxt is None:
                break
            continue
        marks.drop(extra)
        return data
    cut = marks.peek(0) is None
    raise StreamError(
        "truncated_stream" if cut else "corrupt_stream",
        Location(path, bit, 0, "block"),
        (
            "the last bz2 block has no end-of-stream marker after it (file truncated)"
            if cut
            else f"the bz2 block does not decompress: {error}"
        ),
    )


def iter_bz2_blocks(path: str, start: int, end: int | None) -> Iterator[Chunk]:
    """Decompressed bz2 blocks of ``path`` that start in file bytes ``[start, end)``
    (``owned``), then the blocks after them (not owned) for as long as the caller reads.

    Raises :class:`~pipeline.wikipedia.bz2_streams.StreamError` for a block that does not
    decode (after trying to merge it with up to two following candidate boundaries) or is
    cut by the end of the file.
    """
    size = os.path.getsize(path)
    end_bit = (size if end is None else end) * 8
    with open(path, "rb") as f:
        marks = _Lookahead(_iter_marks(f, start, (end_bit // 8) - start + 1))
        while marks.peek(0) is not None:
            bit, is_block = marks.peek(0)
            marks.drop(1)
            if not is_block:
                continue
            data = _decode_from(f, path, bit, marks, size)
            yield Chunk(data, bit, 0, "block", bit < end_bit)
