"""Sparse products in column chunks whose dense side stays in cache.

A product of a CSR ``X_l`` (n x p_l) with a dense block ``V`` (p_l x b) reads V's rows in
the order of X's column ids, that is at random; ``X_lᵀ Y`` writes the rows of its p_l x b
result at random. While that p_l x b array fits one core's share of the last-level cache
the reads hit; past it, every nonzero waits for memory, and a column of a wide block costs
more than a column of a narrow one. Chunking the columns so that each chunk's p_l x chunk
array stays under :data:`DENSE_CHUNK_BYTES` costs one more read of X per chunk, streamed in
order, which is less than the misses it saves; where the block fits, chunking only adds
those reads, so it is not done (measured on the 2M corpus's English with the full and a
cut vocabulary, and in eigensolver-sized solves: bench/README.md, "What a column of a sparse
product costs").

The chunks are equal and only as many as the budget needs, so a block that fits runs as one
product, with no copy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = [
    "DENSE_CHUNK_BYTES",
    "by_column_chunks",
    "column_chunks",
    "gram",
    "summed_rows",
    "transposed",
]

#: Most bytes of the randomly accessed dense side (rows x chunk columns) of one product:
#: about one core's share of a server's last-level cache, and above a p_l = 200k x 25-column
#: float32 block (20 MB), so the default block width on a 200k vocabulary runs unchunked.
DENSE_CHUNK_BYTES = 24 * 2**20


def column_chunks(rows: int, width: int, itemsize: int, budget: int | None = None) -> list[slice]:
    """Equal column slices of a ``rows`` x ``width`` block, as few as keep each
    ``rows x chunk x itemsize`` under ``budget`` (default :data:`DENSE_CHUNK_BYTES`; one
    slice when it fits, at most one per column)."""
    budget = DENSE_CHUNK_BYTES if budget is None else max(1, int(budget))
    if width <= 0:
        return [slice(0, 0)]
    pieces = min(width, max(1, -(-rows * width * itemsize // budget)))
    step = -(-width // pieces)
    return [slice(lo, min(lo + step, width)) for lo in range(0, width, step)]


def by_column_chunks(
    product: Callable[[np.ndarray], np.ndarray],
    v: np.ndarray,
    rows: int,
    budget: int | None = None,
) -> np.ndarray:
    """``product(v)`` computed on the column chunks of :func:`column_chunks` (``rows``: the
    randomly accessed dense side's rows, p_l) and assembled; ``product`` maps a k-column
    block to a k-column result."""
    chunks = column_chunks(rows, v.shape[1], v.dtype.itemsize, budget)
    if len(chunks) == 1:
        return product(v)
    first = np.asarray(product(np.ascontiguousarray(v[:, chunks[0]])))
    out = np.empty((first.shape[0], v.shape[1]), dtype=first.dtype)
    out[:, chunks[0]] = first
    for s in chunks[1:]:
        out[:, s] = np.asarray(product(np.ascontiguousarray(v[:, s])))
    return out


def gram(x: Any, v: np.ndarray, xt: Any = None) -> np.ndarray:
    """``Xᵀ(X V)``: x CSR (n x p), v (p x b) in x's dtype; shape (p, b). ``xt``: a stored
    ``Xᵀ`` to use instead of ``x.T``."""
    xt = x.T if xt is None else xt
    return by_column_chunks(lambda c: xt @ (x @ c), v, x.shape[1])


def transposed(x: Any, z: np.ndarray, xt: Any = None) -> np.ndarray:
    """``Xᵀ Z``: z (n x b); shape (p, b), its rows written at random."""
    xt = x.T if xt is None else xt
    return by_column_chunks(lambda c: xt @ c, z, x.shape[1])


def summed_rows(yt: Any, x: Any, v: np.ndarray) -> np.ndarray:
    """``Yᵀ(X V)``: the rows of X V summed by ``yt`` (k x n, one-hot columns: per-concept
    sums); shape (k, b)."""
    return by_column_chunks(lambda c: yt @ (x @ c), v, x.shape[1])
