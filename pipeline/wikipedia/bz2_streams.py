"""Decompressed bytes of a dump file, in chunks that say where they come from.

A dump is a plain file, one bz2 stream, or (the ``multistream`` variant) several bz2
streams concatenated. :func:`iter_decompressed` yields its decompressed bytes as
:class:`Chunk` objects carrying the stream they belong to, so that every page or problem
found in them gets a :class:`Location` a person can look up. Splitting a single stream at
its bz2 blocks is :mod:`pipeline.wikipedia.bz2_blocks`.
"""

from __future__ import annotations

import bz2
from collections.abc import Iterator
from dataclasses import dataclass

READ_BYTES = 1 << 20
"""Compressed bytes read from the file at a time."""


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


class StreamError(Exception):
    """Compressed bytes that do not decompress; ``kind`` is a
    :data:`pipeline.wikipedia.dump.PROBLEM_KINDS` key (``truncated_stream`` or
    ``corrupt_stream``)."""

    def __init__(self, kind: str, location: Location, detail: str) -> None:
        super().__init__(f"{location}: {detail}")
        self.kind, self.location, self.detail = kind, location, detail


@dataclass
class Chunk:
    """Decompressed bytes with their origin (the fields of a :class:`Location`).

    ``owned`` is for block splitting: pages that start in these bytes belong to the range
    being read (:func:`pipeline.wikipedia.bz2_blocks.iter_bz2_blocks`).
    """

    data: bytes
    stream_offset: int  # compressed offset of the bz2 stream (bit of the block) of data
    offset: int  # decompressed offset of data[0] within that stream (block)
    kind: str = "stream"  # Location.kind
    owned: bool = True


def is_bz2(path: str) -> bool:
    """Whether ``path`` starts with the bz2 magic ``BZh``."""
    with open(path, "rb") as f:
        return f.read(3) == b"BZh"


def iter_decompressed(path: str, start: int = 0, end: int | None = None) -> Iterator[Chunk]:
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
            yield from _plain_chunks(f, remaining)
            return
        yield from _stream_chunks(f, path, start, remaining)


def _plain_chunks(f, remaining: int | None) -> Iterator[Chunk]:
    """An uncompressed file's bytes (``remaining`` of them, None: to the end)."""
    pos = 0
    while True:
        buf = f.read(READ_BYTES if remaining is None else min(READ_BYTES, remaining))
        if not buf:
            return
        yield Chunk(buf, 0, pos, "plain")
        pos += len(buf)
        if remaining is not None:
            remaining -= len(buf)


def _stream_chunks(f, path: str, start: int, remaining: int | None) -> Iterator[Chunk]:
    """Decompress concatenated bz2 streams from file byte ``start`` on; a new decompressor
    starts at each end-of-stream, and the chunks say which stream they came from."""
    stream_offset = start
    consumed = 0  # compressed bytes of this range fed so far
    dec = bz2.BZ2Decompressor()
    out_pos = 0
    fed_in_stream = 0
    while True:
        buf = f.read(READ_BYTES if remaining is None else min(READ_BYTES, remaining))
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
                yield Chunk(data, stream_offset, out_pos)
                out_pos += len(data)
            if not dec.eof:
                buf = b""
                continue
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
                    f"bytes after a bz2 stream are not bz2 data (file byte {stream_offset})",
                )
