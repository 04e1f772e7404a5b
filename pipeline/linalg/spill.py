"""The eigensolver's large driver arrays on local disk: memory-mapped files, paged out as used.

The Lanczos basis (K x max_basis) and the kept images (p x max_basis) are the driver's
largest arrays, and they grow with the corpus: at the paper's 28 languages they would be
most of a ~29 GB driver (docs/scaling.md). Every operation on them is a tall product taken
row step by row step (:mod:`pipeline.linalg.dense`), so they need not be resident at once.
:func:`spilled_empty` places such an array in a file of ``directory`` (an unlinked temporary
file: it disappears with the process, whatever ends it) mapped into memory; the product
loops call :func:`release_rows` on the rows they have finished, which drops those pages
from the process (``madvise(MADV_DONTNEED)``: for a shared file mapping the data stays in
the OS page cache and the file, and the next access reads it back). The driver's Python then
holds the chunks in use, not the arrays, and the OS keeps as much of the files cached as
memory allows: the arrays are bounded by the driver's local disk, not by its memory.

Only whole pages inside the rows given are dropped, so concurrent row chunks of one product
(on threads, disjoint rows) never drop a page another thread is writing.
"""

from __future__ import annotations

import mmap
import os
import tempfile

import numpy as np

from pipeline.linalg.params import SPILL_AUTO

__all__ = [
    "COPY_STEP_ROWS",
    "copy_rows",
    "in_memory",
    "local_scratch_dir",
    "mapping_of",
    "release",
    "release_rows",
    "resolve_dir",
    "spilled_empty",
]

_PAGE = mmap.PAGESIZE


def local_scratch_dir() -> str:
    """The local scratch directory Spark gives this process: the first of
    ``SPARK_LOCAL_DIRS`` (set by Spark on Kubernetes and standalone workers), else of YARN's
    ``LOCAL_DIRS`` (a container's local disks), else the temporary directory (``TMPDIR``,
    ``/tmp``)."""
    for var in ("SPARK_LOCAL_DIRS", "LOCAL_DIRS"):
        first = os.environ.get(var, "").split(",")[0].strip()
        if first and os.path.isdir(first):
            return first
    return tempfile.gettempdir()


def resolve_dir(directory: str) -> str:
    """``directory``, or :func:`local_scratch_dir` for ``auto``
    (:data:`~pipeline.linalg.params.SPILL_AUTO`)."""
    return local_scratch_dir() if directory == SPILL_AUTO else directory


def spilled_empty(
    shape: tuple[int, int], dtype: np.dtype | type, *, directory: str, order: str = "C"
) -> np.ndarray:
    """A zero-filled ``shape`` array of ``dtype`` backed by a temporary file in ``directory``
    (``auto``: :func:`local_scratch_dir`).

    The file is unlinked at once: the mapping keeps it alive, and the space returns to the
    file system when the array and its views are gone (or the process ends). It is sparse
    until written.

    Raises
    ------
    OSError
        When ``directory`` does not exist or is not writable, naming it.
    """
    dtype = np.dtype(dtype)
    nbytes = max(1, int(np.prod(shape)) * dtype.itemsize)
    directory = resolve_dir(directory)
    try:
        fd, path = tempfile.mkstemp(prefix="cr5-spill-", suffix=".bin", dir=directory)
    except OSError as err:
        raise OSError(
            f"train.spill_dir: cannot create a file in {directory!r} ({err}); give a "
            "writable local directory, or unset train.spill_dir to keep the eigensolver's "
            "arrays in memory"
        ) from err
    try:
        os.unlink(path)
        os.ftruncate(fd, nbytes)
        buf = mmap.mmap(fd, nbytes, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(fd)
    return np.ndarray(shape, dtype=dtype, buffer=buf, order=order)


def mapping_of(a: np.ndarray) -> mmap.mmap | None:
    """The file mapping behind ``a`` (a :func:`spilled_empty` array or a view of one), else
    None."""
    base = a
    while base is not None:
        if isinstance(base, mmap.mmap):
            return base
        if isinstance(base, memoryview):
            base = base.obj
            continue
        base = getattr(base, "base", None)
    return None


def _drop(mm: mmap.mmap, start: int, lo: int, hi: int) -> None:
    """Drop the whole pages of bytes ``[lo, hi)`` (addresses) of ``mm`` (mapped at ``start``)."""
    first = -(-(lo - start) // _PAGE) * _PAGE
    last = ((hi - start) // _PAGE) * _PAGE
    if last > first:
        mm.madvise(mmap.MADV_DONTNEED, first, last - first)


def release_rows(a: np.ndarray, rows: slice) -> None:
    """Drop from the process the pages holding only rows ``rows`` of ``a`` (2-D), when ``a``
    is file-backed (:func:`spilled_empty`); nothing otherwise. Row-major views drop the
    pages their rows span, column-major ones each column's segment."""
    mm = mapping_of(a)
    if mm is None or a.ndim != 2 or a.size == 0:
        return
    lo, hi = rows.start or 0, a.shape[0] if rows.stop is None else rows.stop
    if hi <= lo:
        return
    start = np.frombuffer(mm, dtype=np.uint8).ctypes.data
    ptr = a.__array_interface__["data"][0]
    s0, s1 = a.strides
    item = a.dtype.itemsize
    if s1 == item:  # rows are contiguous runs: one range from row lo to the end of row hi - 1
        _drop(mm, start, ptr + lo * s0, ptr + (hi - 1) * s0 + a.shape[1] * item)
    elif s0 == item:  # columns are contiguous: each column's segment
        for j in range(a.shape[1]):
            _drop(mm, start, ptr + j * s1 + lo * item, ptr + j * s1 + hi * item)


def release(a: np.ndarray | None) -> None:
    """Drop every page of the mapping behind ``a`` from the process (nothing for an
    in-memory array). Only where no other thread is using the mapping."""
    mm = None if a is None else mapping_of(a)
    if mm is not None:
        mm.madvise(mmap.MADV_DONTNEED, 0, len(mm))


#: Rows per step of :func:`copy_rows` into a file-backed array.
COPY_STEP_ROWS = 65_536


def copy_rows(dst: np.ndarray, src: np.ndarray) -> np.ndarray:
    """``dst[...] = src``, returning ``dst``; when either is file-backed, row step by row
    step, each step's pages dropped from the process once copied (a block appended to a
    row-major basis, or read from it, touches every page of it)."""
    if mapping_of(dst) is None and mapping_of(src) is None:
        dst[...] = src
        return dst
    for lo in range(0, dst.shape[0], COPY_STEP_ROWS):
        rows = slice(lo, min(lo + COPY_STEP_ROWS, dst.shape[0]))
        dst[rows] = src[rows]
        release_rows(dst, rows)
        release_rows(src, rows)
    return dst


def in_memory(a: np.ndarray) -> np.ndarray:
    """``a`` itself when it is in memory; a copy in memory of a file-backed ``a``, made row
    step by row step with its pages dropped (for an operand read whole by code that does not
    work in row chunks, e.g. the operator's products)."""
    if mapping_of(a) is None:
        return a
    return copy_rows(np.empty(a.shape, dtype=a.dtype), a)
