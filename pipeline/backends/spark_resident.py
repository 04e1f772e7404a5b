"""X_l resident in the Python workers: a fused language gathered once per worker, not per job.

A fused language (one whose nonzeros fit a task, ``train.solve_in_task_max_nnz``) runs every
solve and pass as a job whose tasks each need all of X_l. Read from the JVM's cache, every
such task unpickles all the language's blocks through the worker's socket and multiplies
block by block, in every job. Python workers are reused across tasks
(``spark.python.worker.reuse``), so a worker can keep X_l, as one CSR matrix with global
term numbers, between jobs: the products then cost what they cost in the local backend.

Protocol of one job (:func:`run_resident`)
    1. *probe*: ``tasks`` tasks over a one-element-per-task RDD; a task whose worker holds
       the language computes its share of the columns, any other returns a miss;
    2. *fill*: the column ranges that missed run over the cached blocks (coalesced, each task
       reads them all, as without residency); the task builds the resident matrix, keeps it
       when the worker's budget allows, and computes.
Both steps apply the same function to the same matrix, so where a share ran does not change
its result. Spark assigns tasks to workers freely, so after a few jobs every worker of an
executor holds every fused language that fits its budget: the budget is per worker.

Worker memory
    A resident language costs :data:`RESIDENT_BYTES_PER_NNZ` bytes per nonzero (float32
    values and int32 column numbers) plus :data:`RESIDENT_BYTES_PER_ROW`. The driver decides
    which languages are kept (:func:`kept_languages`: the largest that fit the budget; a
    fixed set, since the solver visits the languages in turn and any eviction order would
    evict the next one needed); a worker forgets the languages of every other backend (its
    ``live`` tokens), so a session that trains several models does not pile them up.
    Building one transiently holds the unpickled blocks as well (:data:`FILL_BYTES_PER_NNZ`
    per nonzero at peak).
"""

from __future__ import annotations

import functools
import itertools
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from pipeline.backends.spark_blocks import CsrBlock
from pipeline.linalg.sparse_products import gram, summed_rows, transposed

__all__ = [
    "FILL_BYTES_PER_NNZ",
    "RESIDENT_BYTES_PER_NNZ",
    "RESIDENT_BYTES_PER_ROW",
    "ResidentLanguage",
    "auto_resident_memory_mb",
    "column_edges",
    "kept_languages",
    "resident_bytes",
    "run_resident",
]

#: A resident X_l per nonzero: float32 value and int32 column number (float64: 12).
RESIDENT_BYTES_PER_NNZ = 8
#: ... and per row: the row pointer, the row's concept number and its label in ``yt``.
RESIDENT_BYTES_PER_ROW = 24
#: Peak per nonzero while a worker builds it: the unpickled blocks plus the matrix.
FILL_BYTES_PER_NNZ = 17

#: The worker's resident languages, by token. Module state of the Python worker process: it
#: lives as long as Spark reuses the worker.
_RESIDENT: dict[str, ResidentLanguage] = {}


def auto_resident_memory_mb(master: str, tasks: int, memory_bytes: int | None = None) -> int:
    """The default of ``train.resident_memory_mb`` without a memory plan: in local mode a
    quarter of the machine's memory (``memory_bytes``, default read from the OS) shared by
    ``tasks`` workers; on a cluster 0, as the executors' Python memory is not visible here."""
    if not master.startswith("local"):
        return 0
    if memory_bytes is None:
        memory_bytes = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return int(memory_bytes // 4 // max(1, tasks) // 2**20)


def resident_bytes(nnz: int, rows: int, itemsize: int = 4) -> int:
    """Worker memory of one resident language of ``nnz`` nonzeros and ``rows`` documents."""
    return (RESIDENT_BYTES_PER_NNZ - 4 + itemsize) * nnz + RESIDENT_BYTES_PER_ROW * rows


def kept_languages(sizes: dict[str, tuple[int, int]], budget_bytes: int, itemsize: int) -> set:
    """The languages kept resident: the largest first, while their total fits the budget.

    Parameters
    ----------
    sizes : dict of str to (nnz, rows)
        The fused languages.
    budget_bytes : int
    itemsize : int
        Bytes of one value (the pass dtype).
    """
    kept, used = set(), 0
    for lang, (nnz, rows) in sorted(sizes.items(), key=lambda kv: -kv[1][0]):
        size = resident_bytes(nnz, rows, itemsize)
        if used + size <= budget_bytes:
            kept.add(lang)
            used += size
    return kept


@dataclass
class ResidentLanguage:
    """One language's X_l in a worker, in the layout of the local backend.

    Attributes
    ----------
    x : csr_matrix of shape (n_l, p_l), pass dtype
        The documents, global term numbers (rows in block order: products do not depend on it).
    concepts : ndarray of int64, shape (K_l,)
        Sorted ids of the concepts with a document in the language.
    row_concept : ndarray of int32, shape (n_l,)
        Each row's position in ``concepts``.
    yt : csr_matrix of shape (K_l, n_l), pass dtype
        The rows' one-hot labels, transposed (per-concept sums are ``yt @ Z``).
    """

    x: sp.csr_matrix
    concepts: np.ndarray
    row_concept: np.ndarray
    yt: sp.csr_matrix

    @classmethod
    def from_blocks(cls, blocks: Iterable[CsrBlock], n_terms: int) -> ResidentLanguage:
        """Concatenate a language's cached blocks (any order) into one matrix."""
        blocks = [blk for blk in blocks if blk.x.shape[0]]
        dtype = blocks[0].x.dtype if blocks else np.float32
        counts = np.array([blk.x.nnz for blk in blocks], dtype=np.int64)
        indptr = np.zeros(sum(blk.x.shape[0] for blk in blocks) + 1, dtype=np.int64)
        row = 0
        for blk, offset in zip(blocks, np.concatenate([[0], np.cumsum(counts)[:-1]])):
            n = blk.x.shape[0]
            indptr[row + 1 : row + n + 1] = blk.x.indptr[1:] + offset
            row += n
        indices = np.concatenate(
            [blk.cols[blk.x.indices].astype(np.int32) for blk in blocks] or [np.zeros(0, np.int32)]
        )
        data = np.concatenate([blk.x.data for blk in blocks] or [np.zeros(0, dtype)])
        ids = np.concatenate(
            [blk.concepts[blk.row_concept] for blk in blocks] or [np.zeros(0, np.int64)]
        )
        del blocks
        if indptr[-1] < 2**31:
            indptr = indptr.astype(np.int32)
        x = sp.csr_matrix((data, indices, indptr), shape=(indptr.size - 1, n_terms))
        concepts, row_concept = np.unique(ids, return_inverse=True)
        row_concept = row_concept.astype(np.int32).ravel()
        n = row_concept.size
        yt = sp.csr_matrix(
            (np.ones(n, dtype=dtype), (row_concept, np.arange(n))), shape=(concepts.size, n)
        )
        return cls(x, concepts.astype(np.int64), row_concept, yt)

    @property
    def nbytes(self) -> int:
        arrays = (self.x.data, self.x.indices, self.x.indptr, self.row_concept, self.concepts)
        yt = (self.yt.data, self.yt.indices, self.yt.indptr)
        return int(sum(a.nbytes for a in arrays + yt))


# --- executor side -----------------------------------------------------------------------------


def _forget_others(live: tuple[str, ...]) -> None:
    for token in [t for t in _RESIDENT if t not in live]:
        del _RESIDENT[token]


def _probe_task(
    token: str, live: tuple[str, ...], compute: Callable, edges: np.ndarray, index: int, _it: Any
) -> Iterator[tuple]:
    """Probe step: ``(lo, hi, result)`` from the worker's resident matrix, or ``(lo, hi, None)``."""
    for _ in _it:  # one element; read it all so that Spark can reuse the worker
        pass
    _forget_others(live)
    lo, hi = int(edges[index]), int(edges[index + 1])
    resident = _RESIDENT.get(token)
    if resident is None:
        yield lo, hi, None
        return
    yield lo, hi, compute(resident, lo, hi)


def _fill_task(
    token: str,
    live: tuple[str, ...],
    keep: bool,
    n_terms: int,
    compute: Callable | None,
    lo: int,
    hi: int,
    blocks: Iterator[CsrBlock],
) -> Iterator[tuple]:
    """Fill step: build (or reuse) the resident matrix from all the language's blocks, keep it
    if asked to, and compute the columns ``lo:hi`` (nothing when ``compute`` is None: a task
    that only makes its worker hold the language)."""
    _forget_others(live)
    resident = _RESIDENT.get(token)
    if resident is None:
        resident = ResidentLanguage.from_blocks(blocks, n_terms)
        if keep:
            _RESIDENT[token] = resident
    else:
        for _ in blocks:  # the worker must read its whole input to be reused
            pass
    if compute is not None:
        yield lo, hi, compute(resident, lo, hi)


# --- driver side -------------------------------------------------------------------------------


def column_edges(b: int, tasks: int) -> np.ndarray:
    """Split b columns into ``min(tasks, b)`` (at least 1) contiguous shares."""
    tasks = max(1, min(b, tasks))
    return np.linspace(0, b, tasks + 1).round().astype(np.int64)


def run_resident(
    sc: Any,
    rdd: Any,
    compute: Callable[[ResidentLanguage, int, int], Any],
    b: int,
    *,
    token: str,
    live: tuple[str, ...],
    n_terms: int,
    tasks: int,
    keep: bool,
    workers: int = 1,
) -> tuple[list[tuple[int, int, Any]], int]:
    """Run ``compute(resident, lo, hi)`` on shares of ``b`` columns, on resident matrices where
    workers hold them and over the cached blocks ``rdd`` elsewhere (module docstring).

    Parameters
    ----------
    sc : pyspark.SparkContext
    rdd : pyspark.RDD of CsrBlock
        The language's cached blocks (read by the fill step only).
    compute : callable
        Module-level function (or ``functools.partial`` of one) of the resident matrix and a
        column range; its result travels back to the driver.
    b : int
        Columns to share out.
    token : str
        Identity of ``rdd`` across the session (application id and RDD id).
    live : tuple of str
        Tokens of every language of the calling backend; workers forget all others.
    n_terms : int
        p_l.
    tasks : int
        Shares (tasks) of the columns.
    keep : bool
        Whether workers keep this language (:func:`kept_languages`); if not, every job
        reads the blocks.
    workers : int
        Python workers that run this backend's tasks (the task slots). A fill step of a kept
        language runs at least this many tasks, the extra ones only building the resident
        matrix, so that every worker comes to hold it. Spark hands idle workers out in turn
        (a queue), so with fewer fill tasks than workers a one-task probe and its one-task
        fill can alternate between two workers forever, the probe always missing.

    Returns
    -------
    records : list of (lo, hi, result), sorted by ``lo``
    filled : int
        Shares that ran in the fill step (read the cached blocks).
    """
    edges = column_edges(b, tasks)
    n = edges.size - 1
    done: list[tuple[int, int, Any]] = []
    missing = [(int(lo), int(hi)) for lo, hi in itertools.pairwise(edges)]
    if keep:
        probe = functools.partial(_probe_task, token, live, compute, edges)
        records = sc.parallelize(range(n), n).mapPartitionsWithIndex(probe).collect()
        done = [rec for rec in records if rec[2] is not None]
        missing = [(lo, hi) for lo, hi, res in records if res is None]
    if missing:
        gathered = rdd.coalesce(1)
        fill = functools.partial(_fill_task, token, live, keep, n_terms, compute)
        jobs = [gathered.mapPartitions(functools.partial(fill, lo, hi)) for lo, hi in missing]
        if keep:
            warm = functools.partial(_fill_task, token, live, keep, n_terms, None, 0, 0)
            jobs += [gathered.mapPartitions(warm) for _ in range(workers - len(missing))]
        done += (jobs[0] if len(jobs) == 1 else sc.union(jobs)).collect()
    return sorted(done, key=lambda rec: rec[0]), len(missing)


# --- the computations (executor side, module-level so that they pickle by reference) -----------


def gram_columns(v_bc: Any, resident: ResidentLanguage, lo: int, hi: int) -> np.ndarray:
    """``X_lᵀ(X_l V[:, lo:hi])`` in the pass dtype, shape (p_l, hi - lo)."""
    v = np.ascontiguousarray(v_bc.value[:, lo:hi], dtype=resident.x.dtype)
    return gram(resident.x, v)


def xt_gather_columns(p_bc: Any, resident: ResidentLanguage, lo: int, hi: int) -> np.ndarray:
    """``X_lᵀ P[c_l, lo:hi]`` (the broadcast holds ``(P[concepts_l], concepts_l)``), shape
    (p_l, hi - lo)."""
    p_l, concepts_l = p_bc.value
    rows = p_l[np.searchsorted(concepts_l, resident.concepts), lo:hi]
    rows = np.ascontiguousarray(rows[resident.row_concept], dtype=resident.x.dtype)
    return transposed(resident.x, rows)


def x_scatter_columns(
    v_bc: Any, resident: ResidentLanguage, lo: int, hi: int
) -> tuple[np.ndarray, np.ndarray]:
    """``(concepts_l, per-concept sums of X_l V[:, lo:hi])``: K_l rows."""
    v = v_bc.value
    v = v[0] if isinstance(v, tuple) else v
    v = np.ascontiguousarray(v[:, lo:hi], dtype=resident.x.dtype)
    return resident.concepts, summed_rows(resident.yt, resident.x, v)
