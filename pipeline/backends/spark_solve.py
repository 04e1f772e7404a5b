"""Fused CG solves on Spark: a language's whole CG solve ``(X_lᵀX_l + λI) X = B`` in one job.

For a language with at most ``train.solve_in_task_max_nnz`` nonzeros (however many row blocks
it is cached in), every solving task runs preconditioned block CG on its share of the
right-hand-side columns against the whole X_l, resident in its Python worker
(:mod:`pipeline.backends.spark_resident`): one job, one broadcast of the right-hand sides,
one result, instead of one job per CG iteration each moving a p_l x b block both ways.
The fixed cost of a Spark job dominates a pass on small data, which is why this pays
(bench/README.md, "Spark per-pass overhead").

Two limits bound a solving task's memory: the nonzeros of the language (its copy of X_l,
``train.solve_in_task_max_nnz``) and the CG's working vectors (the columns run in chunks,
:func:`in_task_chunk`). The columns are independent CGs, so neither the split over tasks nor
the chunking changes a result.
"""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from pipeline.backends.spark_resident import ResidentLanguage
from pipeline.errors import ConvergenceWarning
from pipeline.linalg.block_cg import BlockCGResult, block_cg
from pipeline.linalg.operator import BlockOperator
from pipeline.linalg.sparse_products import gram

__all__ = [
    "CG_ARRAYS_PER_COLUMN",
    "CLUSTER_SOLVE_IN_TASK_MAX_NNZ",
    "SOLVE_IN_TASK_BYTES_PER_NNZ",
    "auto_solve_in_task_max_nnz",
    "fused_solve",
    "fused_tasks",
    "in_task_chunk",
    "merge_cg_results",
]

#: Python memory of one solving task per nonzero of its language, at peak: the unpickled
#: blocks (float32 values, int32 indices: 8 bytes, plus row pointers) and their
#: concatenation into one CSR matrix.
SOLVE_IN_TASK_BYTES_PER_NNZ = 24

#: The cluster default of ``solve_in_task_max_nnz`` (~1.5 GB per solving task).
CLUSTER_SOLVE_IN_TASK_MAX_NNZ = 64_000_000

#: Block CG keeps about this many arrays of p_l rows per right-hand side in its working dtype.
CG_ARRAYS_PER_COLUMN = 9


def auto_solve_in_task_max_nnz(master: str, tasks: int, memory_bytes: int | None = None) -> int:
    """The default of ``train.solve_in_task_max_nnz``.

    In local mode the solving tasks are Python processes on this machine: a quarter of its
    physical memory (``memory_bytes``, default read from the OS) shared by ``tasks`` tasks at
    :data:`SOLVE_IN_TASK_BYTES_PER_NNZ` bytes per nonzero (24 GB, 2 tasks: 125M nonzeros).
    On a cluster the executors' Python memory is not visible from here:
    :data:`CLUSTER_SOLVE_IN_TASK_MAX_NNZ`; set the key with the executors' memory.
    """
    if not master.startswith("local"):
        return CLUSTER_SOLVE_IN_TASK_MAX_NNZ
    if memory_bytes is None:
        memory_bytes = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return int(memory_bytes // 4 // (SOLVE_IN_TASK_BYTES_PER_NNZ * max(1, tasks)))


def fused_tasks(slots: int, languages: int, solve_tasks: int | None = None) -> int:
    """Tasks of one fused job (a solve or pass of one language): ``solve_tasks`` when set,
    else the task slots the languages leave each other, at least 1.

    The solver runs every language's solve or pass at once (a thread, hence a job, per
    language), so with as many languages as slots the slots are busy without splitting a
    language's columns between tasks; and splitting costs, since every task streams all of
    X_l for its share: a sparse product's time goes into reading X_l and gathering rows of
    the dense block more than into the multiply-adds of its width (bench/README.md, "Tasks
    per fused language").
    """
    if solve_tasks:
        return int(solve_tasks)
    return max(1, int(slots) // max(1, int(languages)))


def in_task_chunk(memory_bytes: int, rows: int, dtype: np.dtype | type) -> int:
    """Right-hand-side columns per block CG of an in-task solve: its
    :data:`CG_ARRAYS_PER_COLUMN` working arrays of ``rows`` x chunk in ``dtype`` fit
    ``memory_bytes`` (at least 1). For example p_l = 200k and 512 MB give 74 columns in
    float32, 37 in float64."""
    per_column = CG_ARRAYS_PER_COLUMN * np.dtype(dtype).itemsize * max(rows, 1)
    return max(1, int(memory_bytes // per_column))


# --- executor side ----------------------------------------------------------------------------


class _ResidentGram(BlockOperator):
    """``X_lᵀX_l + λI`` (p_l × p_l) on a worker's resident X_l: products in X_l's dtype,
    accumulated in the CG's dtype (float64, or float32 for a float32 CG)."""

    def __init__(self, resident: ResidentLanguage, lam: float) -> None:
        n_terms = resident.x.shape[1]
        super().__init__((n_terms, n_terms), np.float64)
        self.x, self.lam = resident.x, float(lam)

    def _matmat(self, v: np.ndarray) -> np.ndarray:
        out = self.lam * v
        out += gram(self.x, np.ascontiguousarray(v, dtype=self.x.dtype))
        return out

    _rmatmat = _matmat


def merge_cg_results(parts: list[BlockCGResult]) -> tuple[BlockCGResult, int]:
    """One result for column chunks solved one after the other, and their total passes.

    ``n_iter`` is the longest chunk's (the rows of ``residual_norms``; shorter chunks keep
    their last row, as converged columns do within one solve); the passes over X are the sum.
    """
    rows = max(part.n_iter for part in parts) + 1
    history = np.hstack(
        [
            np.vstack(
                [
                    part.residual_norms,
                    np.repeat(part.residual_norms[-1:], rows - len(part.residual_norms), axis=0),
                ]
            )
            for part in parts
        ]
    )
    merged = BlockCGResult(
        x=np.hstack([part.x for part in parts]),
        converged=np.concatenate([part.converged for part in parts]),
        n_iter=rows - 1,
        residual_norms=history,
        n_column_passes=sum(part.n_column_passes for part in parts),
    )
    return merged, sum(part.n_iter for part in parts)


def solve_columns(
    payload_bc: Any, resident: ResidentLanguage, lo: int, hi: int
) -> tuple[BlockCGResult, int]:
    """One task of a fused solve: preconditioned block CG of the right-hand-side columns
    ``lo:hi`` on the resident X_l, in chunks of at most ``chunk`` columns (bounded working
    memory). Returns the chunks' merged result and the passes over X_l."""
    rhs, precond, lam, rtol, maxiter, name, chunk, x0, dtype = payload_bc.value
    op = _ResidentGram(resident, lam)
    parts = []
    with warnings.catch_warnings():  # the driver re-issues non-convergence
        warnings.simplefilter("ignore", ConvergenceWarning)
        for start in range(lo, max(hi, lo + 1), chunk):
            cols = slice(start, min(start + chunk, hi))
            guess = None if x0 is None else x0[:, cols]
            parts.append(
                block_cg(
                    op,
                    rhs[:, cols],
                    rtol=rtol,
                    maxiter=maxiter,
                    m=precond,
                    name=name,
                    x0=guess,
                    dtype=dtype,
                )
            )
    return merge_cg_results(parts)


# --- driver side ------------------------------------------------------------------------------


def fused_solve(
    sc: Any,
    run: Callable[[Callable, int], list[tuple[int, int, Any]]],
    rhs: np.ndarray,
    *,
    lam: float,
    precond: np.ndarray | BlockOperator,
    rtol: float,
    maxiter: int,
    name: str,
    x0: np.ndarray | None,
    dtype: np.dtype,
    memory_bytes: int,
) -> tuple[BlockCGResult, int]:
    """Solve ``(X_lᵀX_l + λI) X = rhs`` in one job on the language's resident X_l.

    Parameters
    ----------
    sc : pyspark.SparkContext
    run : callable
        ``run(compute, b)`` runs ``compute(resident, lo, hi)`` on shares of b columns of the
        language (:meth:`~pipeline.backends.spark.SparkCorpusBackend._resident`, over
        :func:`~pipeline.backends.spark_resident.run_resident`) and returns the shares'
        ``(lo, hi, result)`` in column order.
    rhs : ndarray of shape (p_l, b)
    lam, precond, rtol, maxiter, name, x0
        As in :func:`~pipeline.linalg.block_cg.block_cg` (``precond`` is its ``m``).
    dtype : numpy.dtype
        The CG's working dtype.
    memory_bytes : int
        Bound on one task's CG vectors (:func:`in_task_chunk`).

    Returns
    -------
    result : BlockCGResult
        All b columns, in order (non-convergence is the caller's to report).
    passes : int
        Passes over X_l made by all tasks (each task's CG iterations).
    """
    chunk = in_task_chunk(memory_bytes, rhs.shape[0], dtype)
    # the right-hand sides and guesses travel in the CG's dtype, which block_cg casts
    # them to first anyway: a float32 CG's broadcast is half the size, same results
    payload = (
        np.ascontiguousarray(rhs, dtype=dtype),
        np.asarray(precond, dtype=np.float64) if isinstance(precond, np.ndarray) else precond,
        float(lam),
        float(rtol),
        int(maxiter),
        name,
        chunk,
        None if x0 is None else np.ascontiguousarray(x0, dtype=dtype),
        dtype.name,
    )
    bc = sc.broadcast(payload)
    try:
        compute = functools.partial(solve_columns, bc)
        parts = run(compute, rhs.shape[1])
    finally:
        bc.destroy()
    result, _ = merge_cg_results([res for _, _, (res, _) in parts])
    return result, sum(passes for _, _, (_, passes) in parts)
