"""Products of tall dense matrices, split into row chunks that run on a thread pool.

The eigensolver's driver-side work is tall-and-skinny: K x m bases and p x m images times
small m x k coefficient blocks (restarts, Ritz vectors, Φ) and K x m transposed products
(re-orthogonalisation). numpy's ``matmul`` releases the GIL, so row chunks of such a product
run in parallel on threads even when BLAS itself is pinned to one thread — which this project
recommends (``OPENBLAS_NUM_THREADS=1``: BLAS threads of their own would compete with the
language threads and Spark's workers for the same cores). This work happens between the
passes over X, when the language threads are idle, so the cores would otherwise wait.

Chunks are at least :data:`MIN_ROWS` rows (smaller products run in one call) and there are at
most ``os.cpu_count()`` (capped at :data:`MAX_THREADS`) of them. Each chunk works through its
rows :data:`STEP_ROWS` at a time, so the temporaries of a step (a product before it is
written or subtracted, a float64 cast, blocks stacked side by side) stay a few MB whatever
the chunk's height: temporaries of a whole chunk (up to 65,536 x m) would be fresh pages on
every call, and looping over separate blocks would add a chunk-sized temporary per block.
Results equal the one-call product up to the summation order of :func:`tall_t_matmul`'s
partial sums. Operands that live in a file (:mod:`pipeline.linalg.spill`) have each chunk's
pages dropped from the process once the chunk is done, so a product holds the chunks in use,
not the whole operand.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from pipeline.linalg.spill import release_rows

__all__ = [
    "resident_rows",
    "subtract_outer",
    "tall_matmul",
    "tall_matmul_blocks",
    "tall_t_matmul",
]

MIN_ROWS = 4_096
MAX_ROWS = 65_536  # bounds a chunk's height whatever the matrix height
#: rows per step inside a chunk: bounds its temporaries (2,048 x 700 float64 = 11 MB)
STEP_ROWS = 2_048
MAX_THREADS = 8

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None


def _threads() -> int:
    return max(1, min(os.cpu_count() or 1, MAX_THREADS))


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=_threads(), thread_name_prefix="dense")
        return _pool


def resident_rows(n: int) -> int:
    """Rows of an ``n``-row file-backed operand (:mod:`pipeline.linalg.spill`) that a product
    holds in the process at once: a chunk's rows per thread, released when the chunk ends."""
    return min(n, _threads() * MAX_ROWS)


def _chunks(n: int) -> list[slice]:
    """Row ranges: one when n < 2 * MIN_ROWS, else >= MIN_ROWS and <= MAX_ROWS rows each and at
    least as many as there are threads."""
    parts = max(min(_threads(), n // MIN_ROWS), -(-n // MAX_ROWS), 1)
    bounds = np.linspace(0, n, parts + 1).astype(int)
    return [slice(lo, hi) for lo, hi in itertools.pairwise(bounds) if hi > lo]


def _steps(rows: slice) -> Iterator[slice]:
    """``rows`` in consecutive pieces of at most :data:`STEP_ROWS`."""
    for lo in range(rows.start, rows.stop, STEP_ROWS):
        yield slice(lo, min(lo + STEP_ROWS, rows.stop))


def _run(fn, chunks: list[slice]) -> list:
    if len(chunks) == 1:
        return [fn(chunks[0])]
    return [f.result() for f in [_executor().submit(fn, rows) for rows in chunks]]


def tall_matmul(
    a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None, *, subtract: bool = False
) -> np.ndarray:
    """``a @ b`` for a tall ``a`` (n x m) and a small ``b`` (m x k): shape (n, k).

    With ``out``: written there (``out -= a @ b`` with ``subtract``) and returned. ``out``
    may be a view sharing rows with ``a`` (e.g. the first columns of the same buffer): each
    chunk computes its rows' product before writing them.
    """
    n = a.shape[0]
    if out is None:
        out = np.empty((n, b.shape[1]), dtype=np.result_type(a.dtype, b.dtype))
        subtract = False

    def one(rows: slice) -> None:
        for step in _steps(rows):
            if subtract:
                out[step] -= a[step] @ b
            else:
                out[step] = a[step] @ b
        release_rows(a, rows)
        release_rows(out, rows)

    _run(one, _chunks(n))
    return out


def subtract_outer(out: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``out -= outer(x, y)`` in place for a tall ``out`` (n x k), ``x`` (n,), ``y`` (k,):
    in row steps on threads, with no n x k temporary (``np.outer`` makes one, and the
    rank-one corrections of every C-product and Woodbury solve are p x b)."""
    return tall_matmul(x[:, None], np.asarray(y)[None, :], out=out, subtract=True)


def tall_matmul_blocks(blocks: list[np.ndarray], coef: np.ndarray) -> np.ndarray:
    """``hstack(blocks) @ coef`` without concatenating the blocks (all n rows tall), in the
    blocks' dtype (``coef`` is cast to it).

    Each step stacks its rows of all blocks (STEP_ROWS x m) and makes one product with the
    whole ``coef``: several times faster than a product per block summed into the result.
    """
    n = blocks[0].shape[0]
    dtype = blocks[0].dtype
    out = np.empty((n, coef.shape[1]), dtype=dtype)
    coef = np.ascontiguousarray(coef, dtype=dtype)

    def one(rows: slice) -> None:
        for step in _steps(rows):
            stacked = np.concatenate([blk[step] for blk in blocks], axis=1, dtype=dtype)
            np.matmul(stacked, coef, out=out[step])
        for blk in blocks:
            release_rows(blk, rows)

    _run(one, _chunks(n))
    return out


def tall_t_matmul(a: np.ndarray, w: np.ndarray, *, dtype: np.dtype | None = None) -> np.ndarray:
    """``a.T @ w`` for tall ``a`` (n x m) and ``w`` (n x k): shape (m, k), partial sums over
    row chunks added in chunk order (deterministic). ``dtype``: compute in it (each step
    cast, so float32 inputs give a float64 Gram without a float64 copy of the inputs)."""

    def one(rows: slice) -> np.ndarray:
        acc = None
        for step in _steps(rows):
            x, y = a[step], w[step]
            if dtype is not None:
                x, y = x.astype(dtype), y.astype(dtype)
            if acc is None:
                acc = x.T @ y
            else:
                acc += x.T @ y
        release_rows(a, rows)
        release_rows(w, rows)
        return acc

    parts = _run(one, _chunks(a.shape[0]))
    out = parts[0]
    for part in parts[1:]:
        out = out + part
    return out
