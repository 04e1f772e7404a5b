"""Exact retrieval with the candidates distributed over Spark (queries broadcast).

The same definitions as the local engine (:mod:`.retrieval`, :mod:`.csls`): top-k by score
with ties to the lower candidate index, pessimistic target ranks with the tie tolerance.
The candidates are a DataFrame of ``(index long, vector array<float>)``: any distinct
indices (they need not be 0..n_c-1), in any partitioning. Each partition streams its
Arrow batches in blocks of ``block_c`` candidate rows, so executor memory stays
``O(batch + block_q × block_c + n_q × (r + k))`` whatever the number of candidates, and
sends back one small payload: its partial top-k (:func:`~.retrieval.topk_of_scores`), the
per-query counts of candidates tying with or beating the target
(:func:`~.retrieval.count_at_or_above_target`, integers that add up exactly) and, for CSLS,
its partial top-``csls_k`` cosines of every query. The driver merges them
(:func:`~.retrieval.merge_topk`) and turns the summed counts into ranks.

Passes over the candidates:

- cosine: one (the target scores come from the target rows, fetched first by a filter);
- CSLS: two. Pass 1 computes ``r_S(c)`` of every candidate against the broadcast source
  set (the queries, or a source collection) -- local to each partition -- and returns
  them; the driver forms the target scores ``2 cos(q, t) − r_S(t)``; pass 2 ranks by
  ``2 cos − r_S`` (``r_S`` broadcast back) and yields the partial top cosines of ``r_T``.

Task functions are module-level, shipped as ``functools.partial`` objects holding a broadcast
and plain values.
"""

from __future__ import annotations

import functools
import io
import logging
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pipeline.errors import InputDataError
from pipeline.retrieval.csls import CSLS_SOURCES, DEFAULT_CSLS_K, effective_k, mean_rows
from pipeline.retrieval.topk import (
    DEFAULT_BLOCK_C,
    DEFAULT_BLOCK_Q,
    DEFAULT_K,
    DEFAULT_TIE_TOL,
    RetrievalResult,
    blocked_search,
    check_embeddings,
    check_positive_int,
    check_tie_tol,
    count_at_or_above_target,
    inverse_row_norms,
    merge_topk,
    ranks_from_counts,
    scaled_rows,
    target_scores,
    topk_of_scores,
)

__all__ = ["retrieve_spark"]

logger = logging.getLogger(__name__)

_PAYLOAD_SCHEMA = "payload binary"


def _pack(**arrays: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _unpack(blob: bytes) -> dict[str, np.ndarray]:
    with np.load(io.BytesIO(blob), allow_pickle=False) as z:
        return {name: z[name] for name in z.files}


def _payload_batch(**arrays: np.ndarray) -> pa.RecordBatch:
    """A partition's one-record answer (:data:`_PAYLOAD_SCHEMA`)."""
    return pa.RecordBatch.from_arrays([pa.array([_pack(**arrays)], pa.binary())], ["payload"])


# --- executor side ----------------------------------------------------------------------------


def _batch_arrays(batch: pa.RecordBatch, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """(indices (m,), vectors (m, dim)) of one Arrow batch, sorted by index."""
    idx = batch.column("index").to_numpy(zero_copy_only=False).astype(np.int64)
    vec_col = batch.column("vector")
    flat = vec_col.flatten().to_numpy(zero_copy_only=False).astype(np.float32, copy=False)
    if flat.size != idx.size * dim:
        raise InputDataError(
            f"candidate vectors must all have length {dim} (the queries' dimension)"
        )
    vec = flat.reshape(idx.size, dim)
    order = np.argsort(idx, kind="stable")
    return idx[order], vec[order]


def _candidate_batches(
    batches: Iterator[pa.RecordBatch], dim: int
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """``(indices, vectors, inverse norms)`` of each non-empty Arrow batch of a partition."""
    for batch in batches:
        if batch.num_rows == 0:
            continue
        idx, vec = _batch_arrays(batch, dim)
        yield idx, vec, inverse_row_norms(vec, name="candidates")


def _r_source_partition(
    bc: Any,
    batches: Iterator[pa.RecordBatch],
    *,
    dim: int,
    raw_k: int,
    block_q: int,
    block_c: int,
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` function of CSLS pass 1: ``r_S`` of the partition's candidates, the mean
    of their ``raw_k`` best cosines against the broadcast source set."""
    b = bc.value
    idx_parts: list[np.ndarray] = []
    rs_parts: list[np.ndarray] = []
    for idx, vec, c_inv in _candidate_batches(batches, dim):
        out = blocked_search(
            vec,
            c_inv,
            b["source"],
            b["source_inv"],
            raw_k=raw_k,
            block_q=block_q,
            block_c=block_c,
        )
        idx_parts.append(idx)
        rs_parts.append(mean_rows(out.raw_scores))
    if idx_parts:
        yield _payload_batch(index=np.concatenate(idx_parts), r_source=np.concatenate(rs_parts))


class _PartialRanking:
    """A partition's running answer for every query: its top-k (score desc, index asc), the
    number of its candidates tying with or beating the target and, when ``raw_k > 0``, its top
    ``raw_k`` cosines (CSLS's ``r_T``)."""

    def __init__(self, n_q: int, k: int, raw_k: int) -> None:
        self.k, self.raw_k = k, raw_k
        self.scores = np.full((n_q, k), -np.inf, dtype=np.float32)
        self.indices = np.full((n_q, k), np.iinfo(np.int64).max, dtype=np.int64)
        self.counts = np.zeros(n_q, dtype=np.int64)
        self.raw = np.full((n_q, raw_k), -np.inf, dtype=np.float32) if raw_k else None
        self.seen = 0

    def add_cosines(self, rows: slice, s: np.ndarray) -> None:
        """Merge the cosines ``s`` (queries ``rows`` x a candidate block) into the top raw_k."""
        raw_k = self.raw_k
        if raw_k < s.shape[1]:
            s = -np.partition(-s, raw_k - 1, axis=1)[:, :raw_k]
        merged = np.concatenate([self.raw[rows], s], axis=1)
        self.raw[rows] = -np.sort(-merged, axis=1)[:, :raw_k]

    def add_scores(
        self,
        rows: slice,
        s: np.ndarray,
        c_idx: np.ndarray,
        t_scores: np.ndarray,
        local_t: np.ndarray,
        tie_tol: float,
    ) -> None:
        """Merge the ranking scores ``s`` of the candidates ``c_idx`` into the top-k and count
        those at or above each query's target score (``local_t``: the target's column in
        ``s``, -1 when elsewhere)."""
        ps, pi = topk_of_scores(s, self.k, 0)
        pi = c_idx[pi]
        ms, mi = merge_topk([(self.scores[rows], self.indices[rows]), (ps, pi)], self.k)
        self.scores[rows, : ms.shape[1]] = ms
        self.indices[rows, : mi.shape[1]] = mi
        self.counts[rows] += count_at_or_above_target(s, t_scores, local_t, 0, tie_tol=tie_tol)

    def payload(self) -> pa.RecordBatch:
        arrays = {"scores": self.scores, "indices": self.indices, "counts": self.counts}
        if self.raw is not None:
            arrays["raw"] = self.raw
        arrays["n"] = np.array([self.seen], dtype=np.int64)
        return _payload_batch(**arrays)


def _rank_block(
    acc: _PartialRanking,
    b: dict[str, np.ndarray],
    c_idx: np.ndarray,
    c_blk: np.ndarray,
    *,
    block_q: int,
    tie_tol: float,
) -> None:
    """Score one block of normalised candidates ``c_blk`` (indices ``c_idx``) against every
    query, ``block_q`` queries at a time: cosine, or ``2 cos − r_S`` when ``b`` carries r_S."""
    q = b["queries"]
    n_q = q.shape[0]
    bias = None
    if "r_source" in b:
        pos = np.searchsorted(b["r_source_index"], c_idx)
        bias = b["r_source"][pos][None, :]
    # Where each query's target sits in this block (-1: elsewhere).
    t_pos = np.searchsorted(c_idx, b["targets"])
    t_pos = np.minimum(t_pos, c_idx.size - 1)
    local_t = np.where(c_idx[t_pos] == b["targets"], t_pos, -1)
    for q_lo in range(0, n_q, block_q):
        rows = slice(q_lo, min(q_lo + block_q, n_q))
        s = scaled_rows(q[rows], b["queries_inv"][rows]) @ c_blk.T
        if acc.raw_k:
            acc.add_cosines(rows, s)
        if bias is not None:
            s *= np.float32(2.0)
            s -= bias
        acc.add_scores(rows, s, c_idx, b["target_scores"][rows], local_t[rows], tie_tol)


def _rank_partition(
    bc: Any,
    batches: Iterator[pa.RecordBatch],
    *,
    dim: int,
    k: int,
    raw_k: int,
    block_q: int,
    block_c: int,
    tie_tol: float,
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` function of the ranking pass: the partition's :class:`_PartialRanking`,
    its candidates taken ``block_c`` rows at a time."""
    b = bc.value
    acc = _PartialRanking(b["queries"].shape[0], k, raw_k)
    for idx, vec, c_inv in _candidate_batches(batches, dim):
        acc.seen += idx.size
        for c_lo in range(0, idx.size, block_c):
            c_hi = min(c_lo + block_c, idx.size)
            c_blk = scaled_rows(vec[c_lo:c_hi], c_inv[c_lo:c_hi])
            _rank_block(acc, b, idx[c_lo:c_hi], c_blk, block_q=block_q, tie_tol=tie_tol)
    if acc.seen:
        yield acc.payload()


# --- driver side ------------------------------------------------------------------------------


def _run_pass(candidates: DataFrame, fn: Callable, description: str) -> list[dict]:
    """One ``mapInArrow`` job of ``fn`` under ``description``; the unpacked payloads."""
    sc = candidates.sparkSession.sparkContext
    sc.setJobDescription(description)
    try:
        rows = candidates.mapInArrow(fn, _PAYLOAD_SCHEMA).collect()
    finally:
        sc.setJobDescription(None)
    return [_unpack(bytes(r["payload"])) for r in rows]


def _broadcast_pass(
    candidates: DataFrame,
    value: dict[str, np.ndarray],
    fn: Callable,
    description: str,
    **options: Any,
) -> list[dict]:
    """One pass: broadcast ``value``, run ``fn(broadcast, batches, **options)`` on every
    partition of the candidates, unpersist the broadcast; the partitions' unpacked payloads."""
    bc = candidates.sparkSession.sparkContext.broadcast(value)
    try:
        return _run_pass(candidates, functools.partial(fn, bc, **options), description)
    finally:
        bc.unpersist()


def _checked_blocks(block_q: int, block_c: int, dim: int) -> dict[str, int]:
    """The block sizes and embedding dimension every partition function takes."""
    return {
        "dim": dim,
        "block_q": check_positive_int(block_q, "block_q"),
        "block_c": check_positive_int(block_c, "block_c"),
    }


def _checked_targets(targets: np.ndarray, n_q: int) -> np.ndarray:
    """``targets`` as int64 of shape (n_q,) (index values, -1 for a missing target)."""
    t = np.asarray(targets)
    if t.shape != (n_q,) or (t.size and not np.issubdtype(t.dtype, np.integer)):
        raise InputDataError(f"targets must be {n_q} integer index values; got {t.shape}")
    return t.astype(np.int64)


def _csls_source_set(
    queries: np.ndarray, source: str, source_embeddings: np.ndarray | None, dim: int
) -> np.ndarray:
    """The set ``r_S`` is computed against: the queries or a source collection."""
    if source not in CSLS_SOURCES:
        raise InputDataError(f"source must be one of {CSLS_SOURCES}; got {source!r}")
    if source == "queries":
        if source_embeddings is not None:
            raise InputDataError("source='queries' takes no source_embeddings")
        return queries
    if source_embeddings is None:
        raise InputDataError("source='collection' needs source_embeddings")
    return check_embeddings(source_embeddings, "source_embeddings", dim)


def _target_vectors(cands: DataFrame, t: np.ndarray, dim: int) -> np.ndarray:
    """The vector of each query's target (zeros where ``t`` is -1), fetched by one filter
    job; the target scores are computed from them exactly as locally."""
    wanted = sorted(set(t[t >= 0].tolist()))
    t_vec = np.zeros((t.shape[0], dim), dtype=np.float32)
    if not wanted:
        return t_vec
    got = cands.filter(F.col("index").isin(wanted)).toArrow()
    g_idx = got.column("index").to_numpy().astype(np.int64)
    g_vec = (
        got.column("vector")
        .combine_chunks()
        .flatten()
        .to_numpy(zero_copy_only=False)
        .astype(np.float32)
        .reshape(-1, dim)
    )
    if np.unique(g_idx).size != g_idx.size:
        raise InputDataError("candidate index values must be distinct")
    missing = sorted(set(wanted) - set(g_idx.tolist()))
    if missing:
        raise InputDataError(
            f"{len(missing)} target index value(s) are not among the candidates, e.g. "
            f"{missing[:5]}; pass -1 for a target missing from the candidate set"
        )
    order = np.argsort(g_idx)
    g_idx, g_vec = g_idx[order], g_vec[order]
    valid = t >= 0
    t_vec[valid] = g_vec[np.searchsorted(g_idx, t[valid])]
    return t_vec


def _target_cosines(
    cands: DataFrame, q: np.ndarray, q_inv: np.ndarray, t: np.ndarray
) -> np.ndarray:
    """``cos(q, t)`` of each query with its target, from the target rows exactly as locally."""
    t_vec = _target_vectors(cands, t, q.shape[1])
    t_inv = inverse_row_norms(t_vec, name="candidates")
    return target_scores(scaled_rows(q, q_inv), scaled_rows(t_vec, t_inv), t)


def _r_source_pass(
    cands: DataFrame, src: np.ndarray, *, k_s: int, blocks: dict[str, int], description: str
) -> tuple[np.ndarray, np.ndarray]:
    """CSLS pass 1: ``r_S`` of every candidate, as (sorted candidate indices, r_S values)."""
    value = {"source": src, "source_inv": inverse_row_norms(src, name="source")}
    parts = _broadcast_pass(cands, value, _r_source_partition, description, raw_k=k_s, **blocks)
    rs_index = np.concatenate([p["index"] for p in parts]) if parts else np.empty(0)
    rs_values = np.concatenate([p["r_source"] for p in parts]) if parts else np.empty(0)
    order = np.argsort(rs_index)
    rs_index, rs_values = rs_index[order].astype(np.int64), rs_values[order]
    if rs_index.size == 0:
        raise InputDataError("candidates is empty; need at least one row")
    return rs_index, rs_values


def _csls_target_scores(
    t: np.ndarray, t_cos: np.ndarray, rs_index: np.ndarray, rs_values: np.ndarray
) -> np.ndarray:
    """``2 cos(q, t) − r_S(t)`` of each query's target (NaN where ``t`` is -1)."""
    valid = t >= 0
    rs_t = np.full(t.shape, np.nan, dtype=np.float32)
    rs_t[valid] = rs_values[np.searchsorted(rs_index, t[valid])]
    return (np.float32(2.0) * t_cos - rs_t).astype(np.float32)


def _merged_result(
    similarity: str,
    parts: list[dict],
    *,
    k: int,
    t: np.ndarray,
    t_scores: np.ndarray,
    raw_k: int,
    source: str,
    csls_k: int,
) -> RetrievalResult:
    """The partitions' answers merged: top-k, ranks from the summed counts and, for CSLS,
    scores and target scores less ``r_T`` (the mean of each query's ``raw_k`` best cosines
    over all partitions). ``t_scores``: the targets' ranking scores."""
    if not parts:
        raise InputDataError("candidates is empty; need at least one row")
    n_c = int(sum(int(p["n"][0]) for p in parts))
    kk = min(k, n_c)
    scores, indices = merge_topk([(p["scores"], p["indices"]) for p in parts], k)
    scores, indices = scores[:, :kk], indices[:, :kk]
    counts = np.sum([p["counts"] for p in parts], axis=0)
    ranks = ranks_from_counts(counts, t)
    if similarity == "cosine":
        return RetrievalResult(
            scores=scores,
            indices=indices,
            ranks=ranks,
            target_scores=t_scores,
            n_candidates=n_c,
            similarity="cosine",
        )
    raw = np.concatenate([p["raw"] for p in parts], axis=1)
    r_t = mean_rows(-np.sort(-raw, axis=1)[:, :raw_k])
    return RetrievalResult(
        scores=(scores - r_t[:, None]).astype(np.float32),
        indices=indices,
        ranks=ranks,
        target_scores=(t_scores - r_t).astype(np.float32),
        n_candidates=n_c,
        similarity="csls",
        csls_source=source,
        csls_k=csls_k,
    )


def retrieve_spark(
    similarity: str,
    queries: np.ndarray,
    candidates: DataFrame,
    targets: np.ndarray,
    *,
    k: int = DEFAULT_K,
    csls_k: int = DEFAULT_CSLS_K,
    source: str = "queries",
    source_embeddings: np.ndarray | None = None,
    block_q: int = DEFAULT_BLOCK_Q,
    block_c: int = DEFAULT_BLOCK_C,
    tie_tol: float = DEFAULT_TIE_TOL,
    index_col: str = "index",
    vector_col: str = "vector",
    description: str = "evaluate",
) -> RetrievalResult:
    """Exact top-k and target ranks with the candidates distributed over Spark.

    Parameters
    ----------
    similarity : {"cosine", "csls"}
    queries : ndarray of shape (n_q, r)
        Broadcast to every task (with their inverse norms).
    candidates : DataFrame
        Columns ``index_col`` (long, distinct) and ``vector_col`` (array<float> of length r).
        Persisted for the two CSLS passes when not cached already.
    targets : ndarray of shape (n_q,), int
        The **index value** of each query's true target, ``-1`` when missing; every other
        value must be present among the candidates.
    k, csls_k, source, source_embeddings, block_q, block_c, tie_tol
        As in :func:`~.retrieval.cosine_retrieval` / :func:`~.csls.csls_retrieval`; the
        source set of ``r_S`` is broadcast too.

    Returns
    -------
    RetrievalResult
        ``indices`` hold candidate index values. Identical ranks, indices and (to float32
        rounding of the block products) scores as the local engine on the same data, where
        the local candidate ``i`` is the one with the ``i``-th smallest index.
    """
    if similarity not in ("cosine", "csls"):
        raise InputDataError(f"similarity must be 'cosine' or 'csls'; got {similarity!r}")
    q = check_embeddings(queries, "queries")
    dim = q.shape[1]
    k = check_positive_int(k, "k")
    csls_k = check_positive_int(csls_k, "csls_k")
    blocks = _checked_blocks(block_q, block_c, dim)
    tol = check_tie_tol(tie_tol)
    t = _checked_targets(targets, q.shape[0])
    if similarity == "csls":
        src = _csls_source_set(q, source, source_embeddings, dim)
        k_s = effective_k(csls_k, src.shape[0], f"source set ({source})")
    cands = candidates.select(
        F.col(index_col).cast("long").alias("index"),
        F.col(vector_col).cast("array<float>").alias("vector"),
    )
    q_inv = inverse_row_norms(q, name="queries")
    t_cos = _target_cosines(cands, q, q_inv, t)
    rank_value = {"queries": q, "queries_inv": q_inv, "targets": t, "target_scores": t_cos}
    raw_k = 0
    persisted = similarity == "csls" and not candidates.is_cached
    if persisted:
        cands = cands.persist()
    try:
        if similarity == "csls":
            rs_index, rs_values = _r_source_pass(
                cands, src, k_s=k_s, blocks=blocks, description=f"{description}: CSLS r_S"
            )
            raw_k = effective_k(csls_k, int(rs_index.size), "candidate set")
            rank_value.update(
                target_scores=_csls_target_scores(t, t_cos, rs_index, rs_values),
                r_source_index=rs_index,
                r_source=rs_values,
            )
        parts = _broadcast_pass(
            cands,
            rank_value,
            _rank_partition,
            f"{description}: {similarity} top-{k}",
            k=k,
            raw_k=raw_k,
            tie_tol=tol,
            **blocks,
        )
    finally:
        if persisted:
            cands.unpersist()
    result = _merged_result(
        similarity,
        parts,
        k=k,
        t=t,
        t_scores=rank_value["target_scores"],
        raw_k=raw_k,
        source=source,
        csls_k=csls_k,
    )
    logger.info(
        "%s: %s retrieval over Spark, %d queries x %d candidates in %d partitions",
        description,
        similarity,
        q.shape[0],
        result.n_candidates,
        len(parts),
    )
    return result
