"""X_l on Spark as cached CSR row blocks: building them from the tfidf dataset and checking them.

Layout
    Each language's tfidf rows are split round-robin into ``partitions_per_language``
    partitions. One ``mapInArrow`` call per partition turns its Arrow batches into the CSR
    arrays of the whole partition (list offsets are ``indptr``, flattened children are
    ``indices``/``data``: no Python loop over rows) and emits **one record**; an RDD map turns
    that record into a :class:`CsrBlock`, which is persisted (``MEMORY_AND_DISK``) and
    materialised once. A block stores its rows with *local* column numbers: ``cols`` lists the
    global term ids present in the partition, so a pass reads ``V[cols]`` and returns a
    ``(cols, len(cols) x b)`` partial instead of a dense ``p_l x b`` one; likewise ``concepts``
    lists the concept ids present.

Load summary
    The job that materialises the blocks also returns, per language, the column sums, column
    sums of squares, documents per concept and validation counters (row numbers, index ranges,
    non-finite values), merged on the executors (``treeReduce``). The driver checks them
    against the manifest (:func:`check_summary`) and keeps the statistics, so the backend's
    statistics methods cost no job.

Executor-side functions are module-level (a lambda defined in ``__main__`` is pickled by value
into every job) and are shipped as ``functools.partial`` objects holding plain values.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import scipy.sparse as sp

from pipeline.backends.loader import TfidfLayout, csr_arrays
from pipeline.errors import InputDataError

__all__ = [
    "BLOCK_SCHEMA",
    "NNZ_PER_PARTITION",
    "CachedBlocks",
    "CsrBlock",
    "check_summary",
    "default_partitions",
    "load_blocks",
    "merge_rows",
]

log = logging.getLogger(__name__)

#: Default partition size: ``partitions_per_language = max(defaultParallelism,
#: ceil(nnz_l / NNZ_PER_PARTITION))``. 2M nonzeros are ~16 MB of float32 CSR per block.
NNZ_PER_PARTITION = 2_000_000

#: Arrow binary values use int32 offsets.
_MAX_BINARY = 2**31 - 1

#: The one record per partition that ``mapInArrow`` emits: a load error (or null) and the
#: partition's row numbers, concept ids and CSR arrays as raw bytes.
BLOCK_SCHEMA = (
    "error string, rows binary, concepts binary, indptr binary, indices binary, data binary"
)


# --- executor side: Arrow batches -> one block per partition ---------------------------------


def _binary(arr: np.ndarray) -> pa.Array:
    return pa.array([np.ascontiguousarray(arr).tobytes()], pa.binary())


def arrow_block_record(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` function: all tfidf rows of a partition -> one :data:`BLOCK_SCHEMA`
    record of CSR arrays (a conversion error travels in its ``error`` field, so the driver
    reports it with the language's name)."""
    batches = [b for b in batches if b.num_rows]
    if not batches:
        return
    # In row order: the rows of a partition come from the shuffle in the order its blocks
    # were fetched, which differs when a lost executor's partition is recomputed; sorted,
    # a retried block (and every sum over it) is the same to the bit.
    table = pa.Table.from_batches(batches).sort_by("row")
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
class CsrBlock:
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
        Load-time validation counters (see :func:`block_from_record`).
    """

    cols: np.ndarray
    x: sp.csr_matrix
    concepts: np.ndarray
    row_concept: np.ndarray
    yt: sp.csr_matrix
    stats: dict = field(default_factory=dict)


def _record_stats(
    error: str | None,
    rows: np.ndarray,
    concept_ids: np.ndarray,
    indices: np.ndarray,
    data: np.ndarray,
) -> dict[str, Any]:
    """Validation counters of one block's raw arrays (merged by :func:`merge_summaries`)."""
    r = rows.astype(np.uint64)
    return {
        "error": error,
        "n_docs": rows.shape[0],
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


def block_from_record(record: Any, *, dtype: str) -> CsrBlock:
    """RDD map: one :data:`BLOCK_SCHEMA` record -> a :class:`CsrBlock` in ``dtype``, with its
    validation counters."""
    rows = np.frombuffer(record["rows"], dtype=np.int64)
    concept_ids = np.frombuffer(record["concepts"], dtype=np.int64)
    indptr = np.frombuffer(record["indptr"], dtype=np.int64)
    indices = np.frombuffer(record["indices"], dtype=np.int32)
    data = np.frombuffer(record["data"], dtype=np.float32)
    n = rows.shape[0]
    stats = _record_stats(record["error"], rows, concept_ids, indices, data)
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
    return CsrBlock(cols.astype(np.int64), x, concepts.astype(np.int64), row_concept, yt, stats)


# --- executor side: the load summary ---------------------------------------------------------


def summarise_block(block: CsrBlock) -> dict:
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


def merge_rows(
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


def merge_summaries(a: dict, b: dict) -> dict:
    """``treeReduce`` of two load summaries (:func:`summarise_block`)."""
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
        "terms": merge_rows(a["terms"], b["terms"]),
        "concept_counts": merge_rows(a["concept_counts"], b["concept_counts"]),
    }


# --- driver side ------------------------------------------------------------------------------


def default_partitions(spark_context: Any, nnz: int) -> int:
    """Cached row blocks of a language: 1 up to ``NNZ_PER_PARTITION`` nonzeros (a pass is
    then one task), else ``max(defaultParallelism, ceil(nnz / NNZ_PER_PARTITION))`` (passes
    spread over the executors; solves still fuse,
    :meth:`~pipeline.backends.spark.SparkCorpusBackend.solve_gram`)."""
    if nnz <= NNZ_PER_PARTITION:
        return 1
    return max(int(spark_context.defaultParallelism), math.ceil(nnz / NNZ_PER_PARTITION))


def check_summary(lang: str, s: dict, layout: TfidfLayout) -> None:
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


@dataclass
class CachedBlocks:
    """The cached blocks of every language and the statistics of their load job.

    Attributes
    ----------
    rdds : dict of str to pyspark.RDD
        Per language, the persisted RDD of :class:`CsrBlock` (one per partition).
    column_stats : dict of str to ndarray of shape (p_l, 2)
        Column sums and column sums of squares, float64.
    concept_counts : dict of str to ndarray of shape (K,)
        Documents per concept, float64.
    """

    rdds: dict[str, Any]
    column_stats: dict[str, np.ndarray]
    concept_counts: dict[str, np.ndarray]


def _load_language(
    sc: Any, df: Any, lang: str, *, parts: int, dtype: str, tfidf_path: str
) -> tuple[Any, dict]:
    """One job: cache ``lang``'s rows as ``parts`` blocks and return the RDD and its merged
    load summary (the RDD is unpersisted again when the language has no rows)."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    sc.setJobDescription(f"cr5 load: X[{lang}] -> {parts} cached CSR blocks")
    rdd = (
        df.filter(F.col("lang") == lang)
        .select("row", "concept_index", "indices", "values")
        .repartition(parts)
        .mapInArrow(arrow_block_record, BLOCK_SCHEMA)
        .rdd.map(functools.partial(block_from_record, dtype=dtype))
        .setName(f"cr5 X[{lang}] CSR blocks ({dtype})")
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    try:
        summary = rdd.map(summarise_block).treeReduce(merge_summaries)
    except ValueError as exc:  # empty RDD
        rdd.unpersist()
        raise InputDataError(f"tfidf language {lang!r} has no rows at {tfidf_path}") from exc
    finally:
        sc.setJobDescription(None)
    return rdd, summary


def _load_all(
    sc: Any, df: Any, layout: TfidfLayout, partitions: dict[str, int], **load: Any
) -> dict[str, tuple[Any, dict]]:
    """Load every language concurrently (one job each) and check the summaries; on any error
    unpersist whatever was cached and raise the first error."""
    with ThreadPoolExecutor(len(layout.languages), thread_name_prefix="cr5-load") as pool:
        futures = {
            lang: pool.submit(_load_language, sc, df, lang, parts=partitions[lang], **load)
            for lang in layout.languages
        }
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
            check_summary(lang, summary, layout)
    except BaseException:
        for rdd, _ in results.values():
            rdd.unpersist()
        raise
    return results


def load_blocks(
    spark: Any,
    tfidf_path: str,
    layout: TfidfLayout,
    *,
    dtype: str,
    partitions_per_language: int | None,
) -> CachedBlocks:
    """Read, cache and validate the languages of ``layout`` from the tfidf dataset at
    ``tfidf_path``: one job per language, run concurrently.

    Parameters
    ----------
    spark : SparkSession
    tfidf_path : str
    layout : TfidfLayout
        The dataset's sizes (its manifest); the loaded rows are checked against them.
    dtype : {"float32", "float64"}
        Storage and pass arithmetic of the blocks.
    partitions_per_language : int or None
        Blocks per language; None: :func:`default_partitions`.

    Raises
    ------
    InputDataError
        A language without rows, or a summary that fails :func:`check_summary`.
    """
    from pipeline.io.datasets import read_dataset
    from pipeline.io.schemas import TFIDF

    sc = spark.sparkContext
    df = read_dataset(spark, TFIDF, tfidf_path)
    partitions = {
        lang: partitions_per_language or default_partitions(sc, layout.nnz[lang])
        for lang in layout.languages
    }
    results = _load_all(sc, df, layout, partitions, dtype=dtype, tfidf_path=tfidf_path)
    cached = CachedBlocks({}, {}, {})
    for lang, (rdd, s) in results.items():
        cached.rdds[lang] = rdd
        cached.column_stats[lang] = _dense(s["terms"], layout.n_terms[lang], 2)
        cached.concept_counts[lang] = _dense(s["concept_counts"], layout.n_concepts, 1)[:, 0]
        log.info(
            "cached X[%s]: %d x %d, nnz %d, %d blocks (%s)",
            lang,
            s["n_docs"],
            layout.n_terms[lang],
            s["nnz"],
            rdd.getNumPartitions(),
            dtype,
        )
    return cached
