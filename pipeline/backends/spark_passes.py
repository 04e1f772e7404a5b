"""One pass over X_l on Spark: broadcast a dense block, map the cached blocks, sum the partials.

One pass = one Spark job
    The dense block (``V``, p_l x b, or the rows of ``P`` (K x b) of the language's
    concepts) is broadcast in the pass dtype (float32 by default: half the bytes); each
    cached block (:class:`~pipeline.backends.spark_blocks.CsrBlock`) computes its contribution
    in that dtype — gram ``X_pᵀ(X_p V)``, xt_gather ``X_pᵀ P[c_p]``, x_scatter per-concept sums
    of ``X_p V`` as ``(unique concept ids, sums)``, never a dense ``K x b`` — and the compact
    partials are added into a dense float64 result. The broadcast is destroyed after the job.

Two routes for the partials (:data:`ROUTES`; the backend picks one per pass,
:meth:`~pipeline.backends.spark.SparkCorpusBackend._pass_route`)
    - ``"driver"``: the partials of a few blocks are collected and added straight into the
      result (``out[ids] += values``), which is cheaper than merging them first
      (bench/README.md, "Spark per-pass overhead");
    - ``"row_ranges"``: each partial is cut into row ranges summed on the executors
      (``reduceByKey``), so the driver receives every row of the result once and its memory
      is bounded by the result, not by partitions x result.

A fused language (within ``train.solve_in_task_max_nnz``) runs its passes on the matrix resident
in the Python workers instead (:mod:`pipeline.backends.spark_resident`).

Nearly all of a pass's cost on one machine is fixed per Spark job (scheduling, Python task
launch, unpickling the cached block, the broadcast), so it amortises over wide blocks and large
partitions (bench/README.md, "Spark per-pass overhead"). Task functions are module-level (a
lambda defined in ``__main__`` is pickled by value into every job) and are shipped as
``functools.partial`` objects holding only broadcasts and plain values.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from pipeline.backends.spark_blocks import CsrBlock, merge_rows
from pipeline.linalg.sparse_products import gram, summed_rows, transposed

__all__ = [
    "ROUTES",
    "gram_partition",
    "run_pass",
    "touch_partition",
    "x_scatter_partition",
    "xt_gather_partition",
]

#: The ways a pass can sum its partials (see the module docstring).
ROUTES = ("driver", "row_ranges")

#: Target size of one row range of the executor-side merge.
_ROW_RANGE_BYTES = 32 * 2**20

#: A pass's executor function: ``fn(broadcast, blocks)`` yields ``(row ids, values)`` partials.
PassFunction = Callable[[Any, Iterator[CsrBlock]], Iterator[tuple]]


# --- executor side: the products of one block -------------------------------------------------


def gram_partition(v_bc: Any, blocks: Iterator[CsrBlock]) -> Iterator[tuple]:
    """``(cols, X_pᵀ (X_p V[cols]))`` per block."""
    v = v_bc.value
    for blk in blocks:
        if blk.x.shape[0]:
            yield blk.cols, gram(blk.x, v[blk.cols])


def xt_gather_partition(p_bc: Any, blocks: Iterator[CsrBlock]) -> Iterator[tuple]:
    """``(cols, X_pᵀ P[c_p])`` per block; the broadcast holds only the rows of P of the
    language's concepts, ``(P[concepts_l], concepts_l)``."""
    p_l, concepts_l = p_bc.value
    for blk in blocks:
        if blk.x.shape[0]:
            rows = p_l[np.searchsorted(concepts_l, blk.concepts)]
            yield blk.cols, transposed(blk.x, rows[blk.row_concept])


def x_scatter_partition(v_bc: Any, blocks: Iterator[CsrBlock]) -> Iterator[tuple]:
    """``(concepts, per-concept sums of X_p V)`` per block (the broadcast may carry the
    language's concept ids after V, for the compact result of :func:`run_pass`)."""
    v = v_bc.value
    if isinstance(v, tuple):
        v = v[0]
    for blk in blocks:
        if blk.x.shape[0]:
            yield blk.concepts, summed_rows(blk.yt, blk.x, v[blk.cols])


def touch_partition(blocks: Iterator[CsrBlock]) -> Iterator[int]:
    """Deserialise the cached blocks and do nothing (overhead measurement)."""
    yield sum(blk.x.nnz for blk in blocks)


# --- executor side: merging by row range -------------------------------------------------------


def _split_rows(
    edges: np.ndarray, part: tuple[np.ndarray, np.ndarray]
) -> Iterator[tuple[int, tuple[np.ndarray, np.ndarray]]]:
    """A compact partial ``(ids, values)`` cut at the row ``edges``: ``(range, piece)`` pairs
    for the keyed reduce of :func:`_sum_by_row_range`."""
    ids, values = part
    cuts = np.searchsorted(ids, edges)
    for key in range(len(edges) - 1):
        lo, hi = cuts[key], cuts[key + 1]
        if hi > lo:
            yield key, (ids[lo:hi], values[lo:hi])


# --- driver side ------------------------------------------------------------------------------


def _sum_by_row_range(mapped: Any, n_rows: int, n_parts: int, partial_bytes: int) -> list:
    """The ``"row_ranges"`` route: partials cut into row ranges, each range summed on the
    executors; returns one compact partial per range."""
    ranges = max(2, min(n_parts, math.ceil(partial_bytes / _ROW_RANGE_BYTES)))
    edges = np.linspace(0, n_rows, ranges + 1).round().astype(np.int64)
    return (
        mapped.flatMap(functools.partial(_split_rows, edges))
        .reduceByKey(merge_rows, numPartitions=ranges)
        .values()
        .collect()
    )


def run_pass(
    sc: Any,
    rdd: Any,
    fn: PassFunction,
    block: np.ndarray,
    n_rows: int,
    *,
    dtype: str,
    route: str,
    index: np.ndarray | None = None,
    compact: bool = False,
) -> np.ndarray:
    """One pass: broadcast ``block`` (with ``index``, the pair), run ``fn`` on every cached
    block of ``rdd``, sum the compact partials into a dense float64 array by ``route``.

    Parameters
    ----------
    sc : pyspark.SparkContext
    rdd : pyspark.RDD of CsrBlock
        One language's cached blocks.
    fn : callable
        The executor function (:func:`gram_partition`, ...).
    block : ndarray of shape (m, b)
        Broadcast in ``dtype``.
    n_rows : int
        Rows of the full result.
    dtype : {"float32", "float64"}
        The pass dtype.
    route : {"driver", "row_ranges"}
        How the partials are summed (module docstring).
    index : ndarray of int64, optional
        Sorted row ids broadcast with ``block``.
    compact : bool
        Return only the rows ``index``, shape (len(index), b).

    Returns
    -------
    ndarray of float64, shape (n_rows, b), or (len(index), b) when ``compact``
    """
    if route not in ROUTES:
        raise ValueError(f"route must be one of {ROUTES}; got {route!r}")
    value = np.ascontiguousarray(block, dtype=dtype)
    bc = sc.broadcast(value if index is None else (value, index))
    b = block.shape[1]
    try:
        mapped = rdd.mapPartitions(functools.partial(fn, bc))
        if route == "row_ranges":
            partial_bytes = n_rows * b * np.dtype(dtype).itemsize
            parts = _sum_by_row_range(mapped, n_rows, rdd.getNumPartitions(), partial_bytes)
        else:
            parts = mapped.collect()
    finally:
        bc.destroy()
    rows = index if compact else None
    out = np.zeros((n_rows if rows is None else rows.size, b), dtype=np.float64)
    for ids, values in parts:
        out[ids if rows is None else np.searchsorted(rows, ids)] += values
    return out
