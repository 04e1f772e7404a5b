"""Spark corpus backend: X_l row-partitioned and cached on the executors as CSR blocks.

Layout
    Each language's tfidf rows are split round-robin into ``partitions_per_language``
    partitions. One ``mapInArrow`` call per partition turns its Arrow batches into the CSR
    arrays of the whole partition (list offsets are ``indptr``, flattened children are
    ``indices``/``data``: no Python loop over rows) and emits **one record**; an RDD map turns
    that record into a :class:`_Block` which is persisted (``MEMORY_AND_DISK``) and
    materialised once. A block stores its rows with *local* column numbers: ``cols`` lists the
    global term ids present in the partition, so a pass reads ``V[cols]`` and returns a
    ``(cols, len(cols) x b)`` partial instead of a dense ``p_l x b`` one; likewise ``concepts``
    lists the concept ids present. The same load job returns column sums, column sums of
    squares, documents per concept and validation counters, cached on the driver: those three
    methods cost no job.

One pass = one Spark job
    The dense block (``V``, p_l x b, or the rows of ``P`` (K x b) of the language's
    concepts) is broadcast in the pass dtype (float32 by default: half the bytes); each
    partition computes its contribution in that dtype — gram ``X_pᵀ(X_p V)``, xt_gather
    ``X_pᵀ P[c_p]``, x_scatter per-concept sums of ``X_p V`` as ``(unique concept ids,
    sums)``, never a dense ``K x b`` — and the compact partials are added into a dense
    float64 result on the driver (beyond ``TREE_REDUCE_ABOVE`` = 8 partitions, or when they
    would not fit ``DRIVER_PARTIALS_MAX_BYTES``, they are first summed on the executors by row
    range, so the driver holds one result). The broadcast is destroyed after the job.
    Passes are thread-safe: the solver runs one language per Python thread, i.e. concurrent
    jobs, and PySpark's pinned threads make :meth:`SparkCorpusBackend.describe` a per-thread
    job description. A language up to ``train.solve_in_task_max_nnz`` nonzeros runs each whole
    CG solve as one job whose tasks gather its blocks (:meth:`SparkCorpusBackend.solve_gram`).

Per-pass overhead
    Nearly all of a pass's cost on one machine is fixed per Spark job (scheduling, Python task
    launch, unpickling the cached block, the broadcast), so it amortises over wide blocks and
    large partitions; this is why single-block languages run whole CG solves in one task
    (:meth:`SparkCorpusBackend.solve_gram`). Task functions must be importable module-level
    functions: a lambda defined in ``__main__`` is pickled by value into every job. Measured
    figures: ``bench/README.md``, "Spark per-pass overhead".

Pickling
    Only sizes and the driver-side statistics are pickled; the SparkContext and the cached RDDs
    stay behind (an unpickled backend answers size and column-statistics queries and raises
    :class:`DetachedBackendError` on a pass). Task closures are ``functools.partial`` objects
    of module-level functions holding only broadcasts and plain values.
"""

from __future__ import annotations

import functools
import itertools
import logging
import math
import os
import re
import warnings
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import scipy.sparse as sp

from pipeline.backends.loader import TfidfLayout, csr_arrays, read_tfidf_layout
from pipeline.errors import ConvergenceWarning, InputDataError, PipelineError
from pipeline.linalg.backend import PASS_DTYPES, CorpusBackend
from pipeline.linalg.block_cg import BlockCGResult, block_cg
from pipeline.linalg.operator import BlockOperator
from pipeline.linalg.params import BACKEND_DEFAULTS as _D

__all__ = [
    "NNZ_PER_PARTITION",
    "SOLVE_IN_TASK_MAX_NNZ",
    "DetachedBackendError",
    "SparkCorpusBackend",
    "auto_solve_in_task_max_nnz",
]

log = logging.getLogger(__name__)

#: Default partition size: ``partitions_per_language = max(defaultParallelism,
#: ceil(nnz_l / NNZ_PER_PARTITION))``. 2M nonzeros are ~16 MB of float32 CSR per block.
NNZ_PER_PARTITION = 2_000_000

#: ``train.solve_in_task_max_nnz``: a language with at most this many nonzeros runs each CG
#: solve as one fused job whose tasks gather all its blocks (see
#: :meth:`SparkCorpusBackend.solve_gram`). None: :func:`auto_solve_in_task_max_nnz`.
SOLVE_IN_TASK_MAX_NNZ = _D.solve_in_task_max_nnz

#: Python memory of one solving task per nonzero of its language, at peak: the unpickled
#: blocks (float32 values, int32 indices: 8 bytes, plus row pointers) and their
#: concatenation into one CSR matrix.
SOLVE_IN_TASK_BYTES_PER_NNZ = 24

#: The cluster default of ``solve_in_task_max_nnz`` (~1.5 GB per solving task).
CLUSTER_SOLVE_IN_TASK_MAX_NNZ = 64_000_000


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


#: ``train.solve_in_task_memory_mb``: working memory of the CG vectors of one in-task solve.
#: Block CG keeps ~9 arrays of p_l rows per right-hand side in its working dtype
#: (``train.cg_dtype``), so an in-task solve runs its columns in chunks of
#: ``memory / (9 * itemsize * p_l)`` (p_l = 200k, 512 MB: 74 columns in float32, 37 in
#: float64); the columns are independent CGs, so chunking changes no result.
SOLVE_IN_TASK_MEMORY_MB = _D.solve_in_task_memory_mb
CG_ARRAYS_PER_COLUMN = 9


def in_task_chunk(memory_bytes: int, rows: int, dtype: np.dtype | type) -> int:
    """Right-hand-side columns per block CG of an in-task solve: its ~9 working arrays of
    ``rows`` x chunk in ``dtype`` fit ``memory_bytes`` (at least 1)."""
    per_column = CG_ARRAYS_PER_COLUMN * np.dtype(dtype).itemsize * max(rows, 1)
    return max(1, int(memory_bytes // per_column))


#: Passes over more partitions than this merge their partials on the executors; up to it
#: the driver adds them into the result directly.
TREE_REDUCE_ABOVE = 8

#: ... and so do passes whose partials would together exceed this many bytes on the driver:
#: merged on the executors by row range (a keyed reduce), the driver receives each row of the
#: result once, so its memory is bounded by the result, not by partitions x result.
DRIVER_PARTIALS_MAX_BYTES = 256 * 2**20

#: Arrow binary values use int32 offsets.
_MAX_BINARY = 2**31 - 1

BLOCK_SCHEMA = (
    "error string, rows binary, concepts binary, indptr binary, indices binary, data binary"
)


class DetachedBackendError(PipelineError, RuntimeError):
    """A pass was requested from an unpickled (or closed) Spark backend."""


# --- executor side: building blocks --------------------------------------------------


def _binary(arr: np.ndarray) -> pa.Array:
    return pa.array([np.ascontiguousarray(arr).tobytes()], pa.binary())


def _arrow_block(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` function: all tfidf rows of a partition -> one record of CSR arrays."""
    batches = [b for b in batches if b.num_rows]
    if not batches:
        return
    table = pa.Table.from_batches(batches)
    rows = table.column("row").to_numpy().astype(np.int64)
    concepts = table.column("concept_index").to_numpy().astype(np.int64)
    error = None
    try:
        indptr, cols, data = csr_arrays(table.column("indices"), table.column("values"))
        if data.nbytes > _MAX_BINARY:
            raise InputDataError(
                f"a partition holds {data.size} nonzeros (> 2 GB per array); "
                "use more partitions_per_language"
            )
    except InputDataError as exc:
        error = str(exc)
        indptr, cols, data = np.zeros(1, np.int64), np.zeros(0, np.int32), np.zeros(0, np.float32)
    yield pa.RecordBatch.from_arrays(
        [
            pa.array([error], pa.string()),
            _binary(rows),
            _binary(concepts),
            _binary(indptr),
            _binary(cols),
            _binary(data),
        ],
        names=["error", "rows", "concepts", "indptr", "indices", "data"],
    )


@dataclass
class _Block:
    """One cached row partition of X_l.

    Attributes
    ----------
    cols : ndarray of int64, shape (m,)
        Sorted global term ids occurring in the partition.
    x : csr_matrix of shape (n_p, m), pass dtype
        The rows, with local column numbers (``x[:, j]`` is term ``cols[j]``).
    concepts : ndarray of int64, shape (k_p,)
        Sorted concept ids of the partition's rows.
    row_concept : ndarray of int32, shape (n_p,)
        Local concept number of each row (``concepts[row_concept[i]]`` is row i's concept).
    yt : csr_matrix of shape (k_p, n_p), pass dtype
        The rows' one-hot labels, transposed (per-concept sums are ``yt @ Z``).
    stats : dict
        Load-time summary (see :func:`_summarise_block`).
    """

    cols: np.ndarray
    x: sp.csr_matrix
    concepts: np.ndarray
    row_concept: np.ndarray
    yt: sp.csr_matrix
    stats: dict = field(default_factory=dict)


def _block_from_record(record: Any, *, dtype: str) -> _Block:
    """RDD map: one ``BLOCK_SCHEMA`` record -> a :class:`_Block` (stats included)."""
    rows = np.frombuffer(record["rows"], dtype=np.int64)
    concept_ids = np.frombuffer(record["concepts"], dtype=np.int64)
    indptr = np.frombuffer(record["indptr"], dtype=np.int64)
    indices = np.frombuffer(record["indices"], dtype=np.int32)
    data = np.frombuffer(record["data"], dtype=np.float32)
    n = rows.shape[0]
    r = rows.astype(np.uint64)
    stats: dict[str, Any] = {
        "error": record["error"],
        "n_docs": n,
        "nnz": int(indices.size),
        "row_min": int(rows.min()),
        "row_max": int(rows.max()),
        "row_sum": int(rows.sum()),
        # Exact modulo 2**64 (uint64 wraps): with count, min, max and sum this catches
        # repeated or missing row numbers without shipping the rows.
        "row_sq": int((r * r).sum(dtype=np.uint64)),
        "index_min": int(indices.min()) if indices.size else 0,
        "index_max": int(indices.max()) if indices.size else -1,
        "concept_min": int(concept_ids.min()),
        "concept_max": int(concept_ids.max()),
        "nonfinite": int(np.count_nonzero(~np.isfinite(data))),
    }
    if stats["error"] is not None:
        indptr = np.zeros(n + 1, np.int64)
    cols, local = np.unique(indices, return_inverse=True)
    x = sp.csr_matrix(
        (data.astype(dtype), local.astype(np.int32).ravel(), indptr), shape=(n, cols.size)
    )
    concepts, row_concept = np.unique(concept_ids, return_inverse=True)
    row_concept = row_concept.astype(np.int32).ravel()
    yt = sp.csr_matrix(
        (np.ones(n, dtype=dtype), (row_concept, np.arange(n))), shape=(concepts.size, n)
    )
    return _Block(cols.astype(np.int64), x, concepts.astype(np.int64), row_concept, yt, stats)


def _summarise_block(block: _Block) -> dict:
    """Column sums / squares, concept counts (compact) and the validation counters."""
    x = block.x
    local = x.indices
    values = x.data.astype(np.float64)
    m = block.cols.size
    sums = np.stack(
        [
            np.bincount(local, weights=values, minlength=m),
            np.bincount(local, weights=values * values, minlength=m),
        ],
        axis=1,
    )
    counts = np.bincount(block.row_concept, minlength=block.concepts.size).astype(np.float64)
    return {
        **block.stats,
        "terms": (block.cols, sums),
        "concept_counts": (block.concepts, counts[:, None]),
    }


def _merge_rows(
    a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """Sum two compact row blocks ``(ids, values)`` (sorted unique ids); float64 result."""
    ia, va = a
    ib, vb = b
    if ia.shape == ib.shape and np.array_equal(ia, ib):
        return ia, va.astype(np.float64) + vb
    ids = np.union1d(ia, ib)
    out = np.zeros((ids.size, va.shape[1]), dtype=np.float64)
    out[np.searchsorted(ids, ia)] += va
    out[np.searchsorted(ids, ib)] += vb
    return ids, out


def _split_rows(
    edges: np.ndarray, part: tuple[np.ndarray, np.ndarray]
) -> Iterator[tuple[int, tuple[np.ndarray, np.ndarray]]]:
    """A compact partial ``(ids, values)`` cut at the row ``edges``: ``(range, piece)`` pairs
    for the keyed reduce of :meth:`SparkCorpusBackend._run`."""
    ids, values = part
    cuts = np.searchsorted(ids, edges)
    for key in range(len(edges) - 1):
        lo, hi = cuts[key], cuts[key + 1]
        if hi > lo:
            yield key, (ids[lo:hi], values[lo:hi])


def _merge_summaries(a: dict, b: dict) -> dict:
    errors = [e for e in (a["error"], b["error"]) if e is not None]
    return {
        "error": errors[0] if errors else None,
        "n_docs": a["n_docs"] + b["n_docs"],
        "nnz": a["nnz"] + b["nnz"],
        "row_min": min(a["row_min"], b["row_min"]),
        "row_max": max(a["row_max"], b["row_max"]),
        "row_sum": a["row_sum"] + b["row_sum"],
        "row_sq": (a["row_sq"] + b["row_sq"]) % 2**64,
        "index_min": min(a["index_min"], b["index_min"]),
        "index_max": max(a["index_max"], b["index_max"]),
        "concept_min": min(a["concept_min"], b["concept_min"]),
        "concept_max": max(a["concept_max"], b["concept_max"]),
        "nonfinite": a["nonfinite"] + b["nonfinite"],
        "terms": _merge_rows(a["terms"], b["terms"]),
        "concept_counts": _merge_rows(a["concept_counts"], b["concept_counts"]),
    }


# --- executor side: passes ------------------------------------------------------------


def _gram_partition(v_bc: Any, blocks: Iterator[_Block]) -> Iterator[tuple]:
    """``(cols, X_pᵀ (X_p V[cols]))`` per block."""
    v = v_bc.value
    for blk in blocks:
        if blk.x.shape[0]:
            yield blk.cols, blk.x.T @ (blk.x @ v[blk.cols])


def _xt_gather_partition(p_bc: Any, blocks: Iterator[_Block]) -> Iterator[tuple]:
    """``(cols, X_pᵀ P[c_p])`` per block; the broadcast holds only the rows of P of the
    language's concepts, ``(P[concepts_l], concepts_l)``."""
    p_l, concepts_l = p_bc.value
    for blk in blocks:
        if blk.x.shape[0]:
            rows = p_l[np.searchsorted(concepts_l, blk.concepts)]
            yield blk.cols, blk.x.T @ rows[blk.row_concept]


def _x_scatter_partition(v_bc: Any, blocks: Iterator[_Block]) -> Iterator[tuple]:
    """``(concepts, per-concept sums of X_p V)`` per block (the broadcast may carry the
    language's concept ids after V, for the compact result of :meth:`_run`)."""
    v = v_bc.value
    if isinstance(v, tuple):
        v = v[0]
    for blk in blocks:
        if blk.x.shape[0]:
            yield blk.concepts, blk.yt @ (blk.x @ v[blk.cols])


class _BlockGram(BlockOperator):
    """``X_lᵀX_l + λI`` (p_l × p_l) of a language from all its cached row blocks, gathered
    into one task (executor side): products in the blocks' dtype, accumulated in the CG's
    dtype (float64, or float32 for a float32 CG), block by block."""

    def __init__(self, blocks: list[_Block], n_terms: int, lam: float) -> None:
        super().__init__((n_terms, n_terms), np.float64)
        self.blocks, self.lam = blocks, float(lam)

    def _matmat(self, v: np.ndarray) -> np.ndarray:
        out = self.lam * v
        for blk in self.blocks:
            if blk.x.shape[0]:
                sub = np.ascontiguousarray(v[blk.cols], dtype=blk.x.dtype)
                out[blk.cols] += blk.x.T @ (blk.x @ sub)
        return out

    _rmatmat = _matmat


def _merge_cg_results(parts: list[BlockCGResult]) -> tuple[BlockCGResult, int]:
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


def _solve_columns(payload_bc: Any, lo: int, hi: int, blocks: Iterator[_Block]) -> Iterator[tuple]:
    """One task of a fused solve: gather every cached block of the language (the task's
    input is the whole RDD, coalesced) and run preconditioned block CG on the
    right-hand-side columns ``lo:hi``, in chunks of at most ``chunk`` columns (bounded
    working memory). Columns are independent CGs, so any split gives the same answer."""
    rhs, precond, lam, rtol, maxiter, name, chunk, x0, dtype = payload_bc.value
    op = _BlockGram(list(blocks), rhs.shape[0], lam)
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
    yield (lo, *_merge_cg_results(parts))


class _ColumnSlice:
    """Stands in for a pass's broadcast inside a fused task: its value restricted to the
    columns ``lo:hi`` (the first element's, for an ``(array, index)`` pair)."""

    def __init__(self, bc: Any, lo: int, hi: int) -> None:
        self._bc, self._lo, self._hi = bc, lo, hi

    @property
    def value(self) -> Any:
        v = self._bc.value
        if isinstance(v, tuple):
            return (v[0][:, self._lo : self._hi], *v[1:])
        return v[:, self._lo : self._hi]


def _fused_pass_columns(
    fn: Any, bc: Any, n_rows: int, compact: bool, lo: int, hi: int, blocks: Iterator[_Block]
) -> Iterator[tuple]:
    """One task of a fused pass: every cached block of the language (the coalesced RDD),
    ``fn``'s partials of the columns ``lo:hi`` summed into one dense float64 array, block by
    block in the same order as the driver would add them. ``compact``: only the rows listed
    in the broadcast's index (``(block, index)``), in that order."""
    rows = bc.value[1] if compact else None
    out = np.zeros((n_rows if rows is None else rows.size, hi - lo), dtype=np.float64)
    for ids, values in fn(_ColumnSlice(bc, lo, hi), blocks):
        out[ids if rows is None else np.searchsorted(rows, ids)] += values
    yield lo, out


def _touch_partition(blocks: Iterator[_Block]) -> Iterator[int]:
    """Deserialise the cached blocks and do nothing (overhead measurement)."""
    yield sum(blk.x.nnz for blk in blocks)


# --- driver side ----------------------------------------------------------------------


def job_description(stage: str, iteration: int | None = None) -> str:
    """Spark job description of a solver stage: ``"cr5/eig3/cg[en]", 7`` ->
    ``"cr5 train: eig 3 / cg[en] / it 7"``."""
    parts = [p for p in stage.split("/") if p]
    if parts and parts[0] == "cr5":
        parts = parts[1:]
    parts = [re.sub(r"^eig(\d+)$", r"eig \1", p) for p in parts]
    if iteration is not None:
        parts.append(f"it {iteration}")
    return "cr5 train: " + " / ".join(parts)


def default_partitions(spark_context: Any, nnz: int) -> int:
    """Cached row blocks of a language: 1 up to ``NNZ_PER_PARTITION`` nonzeros (a pass is
    then one task), else ``max(defaultParallelism, ceil(nnz / NNZ_PER_PARTITION))`` (passes
    spread over the executors; solves still fuse, :meth:`SparkCorpusBackend.solve_gram`)."""
    if nnz <= NNZ_PER_PARTITION:
        return 1
    return max(int(spark_context.defaultParallelism), math.ceil(nnz / NNZ_PER_PARTITION))


def _check_summary(lang: str, s: dict, layout: TfidfLayout) -> None:
    """Raise :class:`InputDataError` unless the load summary of ``lang`` is consistent."""
    fix = "Fix: rerun the tfidf stage."
    if s["error"] is not None:
        raise InputDataError(f"tfidf language {lang!r}: {s['error']}. {fix}")
    n, p, k = layout.n_docs[lang], layout.n_terms[lang], layout.n_concepts
    if s["n_docs"] != n:
        raise InputDataError(
            f"tfidf language {lang!r}: {s['n_docs']} rows but the manifest reports {n}. {fix}"
        )
    if (
        s["row_min"] != 0
        or s["row_max"] != n - 1
        or s["row_sum"] != n * (n - 1) // 2
        or s["row_sq"] != ((n - 1) * n * (2 * n - 1) // 6) % 2**64
    ):
        raise InputDataError(
            f"tfidf language {lang!r}: row numbers are not 0..{n - 1} (found "
            f"{s['row_min']}..{s['row_max']} with repeats or gaps). {fix}"
        )
    if s["nnz"] and (s["index_min"] < 0 or s["index_max"] >= p):
        raise InputDataError(
            f"tfidf language {lang!r}: term index {s['index_min']}..{s['index_max']} outside "
            f"[0, {p}) (the vocabulary size). Fix: rerun the vocabulary and tfidf stages."
        )
    if s["concept_min"] < 0 or s["concept_max"] >= k:
        raise InputDataError(
            f"tfidf language {lang!r}: concept_index {s['concept_min']}..{s['concept_max']} "
            f"outside [0, {k}) (the manifest's concept count). {fix}"
        )
    if s["nonfinite"]:
        raise InputDataError(f"tfidf language {lang!r}: {s['nonfinite']} NaN/Inf values. {fix}")


def _dense(compact: tuple[np.ndarray, np.ndarray], n_rows: int, b: int) -> np.ndarray:
    ids, vals = compact
    out = np.zeros((n_rows, b), dtype=np.float64)
    out[ids] = vals
    return out


class SparkCorpusBackend(CorpusBackend):
    """Spark implementation of :class:`~pipeline.linalg.backend.CorpusBackend`.

    Build it with :meth:`from_tfidf`; the constructor takes already-cached blocks.

    Parameters
    ----------
    spark_context : pyspark.SparkContext
    blocks : dict of str to pyspark.RDD
        Per language, the persisted RDD of :class:`_Block` (one per partition).
    layout : TfidfLayout
        Sizes (languages in order, K, p_l, n_l).
    column_stats : dict of str to ndarray of shape (p_l, 2)
        Column sums and column sums of squares, float64.
    concept_counts : dict of str to ndarray of shape (K,)
    dtype : {"float32", "float64"}
        Arithmetic of the passes (the blocks are stored in it).
    solve_in_task_max_nnz : int or None
        Languages with at most this many nonzeros solve in fused jobs (:meth:`solve_gram`);
        None: :func:`auto_solve_in_task_max_nnz`.
    solve_in_task_memory_mb : int
        Bound on the CG vectors of one solving task (:meth:`solve_gram`).
    solve_tasks : int or None
        Tasks (column groups) of one fused solve; None: the default parallelism.
    """

    def __init__(
        self,
        spark_context: Any,
        blocks: dict[str, Any],
        *,
        layout: TfidfLayout,
        column_stats: dict[str, np.ndarray],
        concept_counts: dict[str, np.ndarray],
        dtype: str = "float32",
        solve_in_task_max_nnz: int | None = SOLVE_IN_TASK_MAX_NNZ,
        solve_in_task_memory_mb: int = SOLVE_IN_TASK_MEMORY_MB,
        solve_tasks: int | None = None,
    ) -> None:
        super().__init__(dtype=dtype)
        if solve_in_task_max_nnz is None:
            solve_in_task_max_nnz = auto_solve_in_task_max_nnz(
                str(spark_context.master), solve_tasks or int(spark_context.defaultParallelism)
            )
        self._solve_max_nnz = int(solve_in_task_max_nnz)
        self._solve_memory_mb = int(solve_in_task_memory_mb)
        self._solve_tasks = solve_tasks
        self._sc = spark_context
        self._blocks = dict(blocks)
        self._layout = layout
        fused = [lang for lang in blocks if self._fuses(lang)]
        log.info(
            "fused CG solves (one job per solve) up to %d nonzeros: %s; one job per CG "
            "iteration: %s",
            self._solve_max_nnz,
            ", ".join(fused) or "none",
            ", ".join(lang for lang in blocks if lang not in fused) or "none",
        )
        self._column_stats = column_stats
        self._concept_count = concept_counts
        # sorted ids of the concepts with a document in each language (xt_gather's rows of P)
        self._language_concepts = {
            lang: np.flatnonzero(counts > 0).astype(np.int64)
            for lang, counts in concept_counts.items()
        }

    # --- construction -------------------------------------------------------------------------
    @classmethod
    def from_tfidf(
        cls,
        spark: Any,
        tfidf_path: str,
        *,
        dtype: str = "float32",
        partitions_per_language: int | None = None,
        solve_in_task_max_nnz: int | None = SOLVE_IN_TASK_MAX_NNZ,
        solve_in_task_memory_mb: int = SOLVE_IN_TASK_MEMORY_MB,
        solve_tasks: int | None = None,
        languages: Sequence[str] | None = None,
    ) -> SparkCorpusBackend:
        """Load, validate and cache the tfidf dataset at ``tfidf_path``: one job per language
        (run concurrently).

        Parameters
        ----------
        spark : SparkSession
        tfidf_path : str
        dtype : {"float32", "float64"}
        partitions_per_language : int, optional
            Row partitions (cached blocks) per language. Default: :func:`default_partitions`.
        solve_in_task_max_nnz : int, optional
            Languages with at most this many nonzeros run each CG solve as one fused job
            (:meth:`solve_gram`); 0: never (one job per CG iteration). Default:
            :func:`auto_solve_in_task_max_nnz`.
        solve_in_task_memory_mb : int
            Bound on the CG vectors of one solving task (columns run in chunks within it).
        solve_tasks : int, optional
            Tasks of one fused solve, each solving a share of the columns with its own copy
            of X_l. Default: the default parallelism.
        languages : sequence of str, optional
            Default: every language with training documents, sorted.

        Raises
        ------
        InputDataError
            Rows not numbered 0..n_l-1, term indices outside the vocabulary, concept indices
            outside ``[0, K)``, ragged lists, NaN/Inf, or counts disagreeing with the manifest.
        """
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        from pipeline.io.datasets import read_dataset
        from pipeline.io.schemas import TFIDF

        if partitions_per_language is not None and (
            isinstance(partitions_per_language, bool)
            or not isinstance(partitions_per_language, int)
            or partitions_per_language < 1
        ):
            raise ValueError(
                f"partitions_per_language must be a positive int or None; "
                f"got {partitions_per_language!r}"
            )
        if dtype not in PASS_DTYPES:
            raise ValueError(f"dtype must be one of {PASS_DTYPES}; got {dtype!r}")
        sc = spark.sparkContext
        layout = read_tfidf_layout(spark, tfidf_path, languages)
        df = read_dataset(spark, TFIDF, tfidf_path)

        def load(lang: str) -> tuple[Any, dict]:
            parts = partitions_per_language or default_partitions(sc, layout.nnz[lang])
            sc.setJobDescription(f"cr5 load: X[{lang}] -> {parts} cached CSR blocks")
            rdd = (
                df.filter(F.col("lang") == lang)
                .select("row", "concept_index", "indices", "values")
                .repartition(parts)
                .mapInArrow(_arrow_block, BLOCK_SCHEMA)
                .rdd.map(functools.partial(_block_from_record, dtype=dtype))
                .setName(f"cr5 X[{lang}] CSR blocks ({dtype})")
                .persist(StorageLevel.MEMORY_AND_DISK)
            )
            try:
                summary = rdd.map(_summarise_block).treeReduce(_merge_summaries)
            except ValueError as exc:  # empty RDD
                rdd.unpersist()
                raise InputDataError(
                    f"tfidf language {lang!r} has no rows at {tfidf_path}"
                ) from exc
            finally:
                sc.setJobDescription(None)
            return rdd, summary

        with ThreadPoolExecutor(len(layout.languages), thread_name_prefix="cr5-load") as pool:
            futures = {lang: pool.submit(load, lang) for lang in layout.languages}
        results, first_error = {}, None
        for lang, fut in futures.items():
            try:
                results[lang] = fut.result()
            except Exception as exc:  # keep going: unpersist whatever was cached
                first_error = first_error or exc
        try:
            if first_error is not None:
                raise first_error
            for lang, (_, summary) in results.items():
                _check_summary(lang, summary, layout)
        except BaseException:
            for rdd, _ in results.values():
                rdd.unpersist()
            raise
        blocks, stats, counts = {}, {}, {}
        for lang, (rdd, s) in results.items():
            blocks[lang] = rdd
            stats[lang] = _dense(s["terms"], layout.n_terms[lang], 2)
            counts[lang] = _dense(s["concept_counts"], layout.n_concepts, 1)[:, 0]
            log.info(
                "cached X[%s]: %d x %d, nnz %d, %d blocks (%s)",
                lang,
                s["n_docs"],
                layout.n_terms[lang],
                s["nnz"],
                rdd.getNumPartitions(),
                dtype,
            )
        return cls(
            sc,
            blocks,
            layout=layout,
            column_stats=stats,
            concept_counts=counts,
            dtype=dtype,
            solve_in_task_max_nnz=solve_in_task_max_nnz,
            solve_in_task_memory_mb=solve_in_task_memory_mb,
            solve_tasks=solve_tasks,
        )

    def close(self) -> None:
        """Unpersist the cached blocks; passes raise :class:`DetachedBackendError` afterwards."""
        for rdd in self._blocks.values():
            rdd.unpersist()
        self._blocks = {}

    # --- pickling: no SparkContext, no RDDs ---------------------------------------------------
    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state["_sc"] = None
        state["_blocks"] = {}
        return state

    # --- sizes --------------------------------------------------------------------------------
    @property
    def languages(self) -> tuple[str, ...]:
        return self._layout.languages

    @property
    def n_concepts(self) -> int:
        return self._layout.n_concepts

    def n_docs(self, lang: str) -> int:
        return self._layout.n_docs[lang]

    def n_terms(self, lang: str) -> int:
        return self._layout.n_terms[lang]

    def n_partitions(self, lang: str) -> int:
        """Number of cached row blocks of ``lang``."""
        return self._rdd(lang).getNumPartitions()

    def describe(self, stage: str, iteration: int | None = None) -> None:
        """Set the Spark job description of the calling thread (see :func:`job_description`)."""
        if self._sc is not None:
            self._sc.setJobDescription(job_description(stage, iteration))

    # --- hooks --------------------------------------------------------------------------------
    def _rdd(self, lang: str) -> Any:
        try:
            return self._blocks[lang]
        except KeyError:
            if lang in self._layout.n_terms:
                raise DetachedBackendError(
                    "this SparkCorpusBackend holds no cached blocks (it was unpickled or "
                    "closed); build it with SparkCorpusBackend.from_tfidf on the driver"
                ) from None
            raise

    def _run(
        self,
        lang: str,
        fn: Any,
        block: np.ndarray,
        n_rows: int,
        *,
        index: np.ndarray | None = None,
        compact: bool = False,
    ) -> np.ndarray:
        """One pass: broadcast ``block`` (with ``index``, the pair), run ``fn`` on every
        cached block of ``lang``, sum the compact partials into a dense float64 array of
        shape (n_rows, b); ``compact``: only the rows ``index`` (sorted), shape (len(index), b).

        Up to :data:`TREE_REDUCE_ABOVE` partitions whose partials fit
        :data:`DRIVER_PARTIALS_MAX_BYTES`, the partials are collected and added straight into
        the output (``out[ids] += values``), which is cheaper than merging them first
        (bench/README.md). Otherwise each partial is cut into row ranges that are summed on
        the executors (``reduceByKey``), so the driver receives every row of the result once.
        """
        rdd = self._rdd(lang)
        value = np.ascontiguousarray(block, dtype=self.dtype)
        bc = self._sc.broadcast(value if index is None else (value, index))
        n_parts = rdd.getNumPartitions()
        partial_bytes = n_rows * block.shape[1] * np.dtype(self.dtype).itemsize
        if n_parts > 1 and self._fuses(lang):
            try:
                return self._run_fused(rdd, fn, bc, n_rows, block.shape[1], compact=compact)
            finally:
                bc.destroy()
        try:
            mapped = rdd.mapPartitions(functools.partial(fn, bc))
            if n_parts > TREE_REDUCE_ABOVE or n_parts * partial_bytes > DRIVER_PARTIALS_MAX_BYTES:
                ranges = max(2, min(n_parts, math.ceil(partial_bytes / (32 * 2**20))))
                edges = np.linspace(0, n_rows, ranges + 1).round().astype(np.int64)
                parts = (
                    mapped.flatMap(functools.partial(_split_rows, edges))
                    .reduceByKey(_merge_rows, numPartitions=ranges)
                    .values()
                    .collect()
                )
            else:
                parts = mapped.collect()
        finally:
            bc.destroy()
        rows = index if compact else None
        out = np.zeros((n_rows if rows is None else rows.size, block.shape[1]), dtype=np.float64)
        for ids, values in parts:
            out[ids if rows is None else np.searchsorted(rows, ids)] += values
        return out

    def _run_fused(
        self, rdd: Any, fn: Any, bc: Any, n_rows: int, b: int, *, compact: bool = False
    ) -> np.ndarray:
        """A pass over a row-partitioned language small enough to gather (the fused-solve
        rule): ``solve_tasks`` tasks each gather all its blocks and sum the partials of a
        share of the columns, so no partial leaves a task and nothing is shuffled.

        Why: partials of row blocks are nearly dense over the vocabulary (a Zipfian 2M-nonzero
        block touches most frequent terms), so the keyed merge of :meth:`_run` shuffled
        ~partitions x p_l x b values per pass: at 1M documents a C pass of the largest
        language (42 blocks) took 160-200 s against ~10 s of products (bench/README.md).
        """
        rows = bc.value[1] if compact else None
        out = np.zeros((n_rows if rows is None else rows.size, b), dtype=np.float64)
        if b == 0:
            return out
        task = functools.partial(_fused_pass_columns, fn, bc, n_rows, compact)
        for lo, part in self._gathered_column_tasks(rdd, b, task):
            out[:, lo : lo + part.shape[1]] = part
        return out

    def _fuses(self, lang: str) -> bool:
        """Whether ``lang`` is small enough for tasks that gather all its blocks."""
        return self._layout.nnz[lang] <= self._solve_max_nnz

    def _gathered_column_tasks(self, rdd: Any, b: int, task: Any) -> list:
        """Split b columns over ``solve_tasks`` tasks, each gathering every block of ``rdd``
        (coalesced) and running ``task(lo, hi, blocks)`` on its columns; one job, the
        collected records of all tasks."""
        tasks = max(1, min(b, self._solve_tasks or int(self._sc.defaultParallelism)))
        edges = np.linspace(0, b, tasks + 1).round().astype(int)
        gathered = rdd.coalesce(1)
        jobs = [
            gathered.mapPartitions(functools.partial(task, int(lo), int(hi)))
            for lo, hi in itertools.pairwise(edges)
            if hi > lo or b == 0
        ]
        return (jobs[0] if len(jobs) == 1 else self._sc.union(jobs)).collect()

    def solve_gram(
        self,
        lang: str,
        rhs: np.ndarray,
        *,
        lam: float,
        precond: np.ndarray | BlockOperator,
        rtol: float,
        maxiter: int,
        name: str = "cg",
        x0: np.ndarray | None = None,
        dtype: np.dtype | type = np.float64,
    ) -> BlockCGResult | None:
        """A fused solve: the whole CG solve of a language in one Spark job.

        For a language with at most ``solve_in_task_max_nnz`` nonzeros (however many row
        blocks it is cached in), every solving task gathers all the language's cached blocks
        and runs the CG on its share of the right-hand-side columns: one job of
        ``solve_tasks`` tasks, one broadcast of the right-hand sides, one result, instead of
        one job per CG iteration each moving a p_l x b block both ways (measured in
        bench/README.md). Bigger languages return None (the caller drives :meth:`gram`
        passes). Every task's iterations count as gram passes (a task traverses X_l once per
        iteration for its columns).
        """
        if not self._fuses(lang):
            return None
        rdd = self._rdd(lang)
        self.describe(f"{name}/in-task", None)
        work = np.dtype(dtype)
        chunk = in_task_chunk(self._solve_memory_mb * 2**20, rhs.shape[0], work)
        # the right-hand sides and guesses travel in the CG's dtype, which block_cg casts
        # them to first anyway: a float32 CG's broadcast is half the size, same results
        payload = (
            np.ascontiguousarray(rhs, dtype=work),
            np.asarray(precond, dtype=np.float64) if isinstance(precond, np.ndarray) else precond,
            float(lam),
            float(rtol),
            int(maxiter),
            name,
            chunk,
            None if x0 is None else np.ascontiguousarray(x0, dtype=work),
            work.name,
        )
        bc = self._sc.broadcast(payload)
        try:
            parts = sorted(
                self._gathered_column_tasks(
                    rdd, rhs.shape[1], functools.partial(_solve_columns, bc)
                ),
                key=lambda part: part[0],
            )
        finally:
            bc.destroy()
        result, _ = _merge_cg_results([res for _, res, _ in parts])
        n_passes = sum(passes for _, _, passes in parts)
        self._count("gram", result.n_column_passes, n_passes=n_passes)
        if not result.converged.all():
            left = int(np.sum(~result.converged))
            warnings.warn(
                f"{name}: {left} of {rhs.shape[1]} columns did not reach rtol={rtol} in "
                f"maxiter={maxiter} iterations (in-task solve)",
                ConvergenceWarning,
                stacklevel=2,
            )
        return result

    def _column_sums(self, lang: str) -> np.ndarray:
        return self._column_stats[lang][:, 0].copy()

    def _column_sq_sums(self, lang: str) -> np.ndarray:
        return self._column_stats[lang][:, 1].copy()

    def _concept_counts(self, lang: str) -> np.ndarray:
        return self._concept_count[lang].copy()

    def _gram(self, lang: str, v: np.ndarray) -> np.ndarray:
        return self._run(lang, _gram_partition, v, self.n_terms(lang))

    def _xt_gather(self, lang: str, p: np.ndarray) -> np.ndarray:
        # Only the language's concepts' rows of P travel: K x b would be broadcast to every
        # language (Wikipedia: millions of concepts), n_l' x b scales with the language.
        concepts = self._language_concepts[lang]
        return self._run(
            lang, _xt_gather_partition, p[concepts], self.n_terms(lang), index=concepts
        )

    def _x_scatter(self, lang: str, v: np.ndarray) -> np.ndarray:
        return self._run(lang, _x_scatter_partition, v, self.n_concepts)

    def _x_scatter_rows(self, lang: str, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # Fused tasks and the driver hold K_l x b, not K x b (the concepts of the language).
        rows = self._language_concepts[lang]
        out = self._run(lang, _x_scatter_partition, v, self.n_concepts, index=rows, compact=True)
        return rows, out

    def _touch(self, lang: str) -> int:
        """One job that deserialises every cached block of ``lang`` and computes nothing."""
        return sum(self._rdd(lang).mapPartitions(_touch_partition).collect())
