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
"""

from __future__ import annotations

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


def _partition_fn(
    kind: str,
    bc: Any,
    *,
    dim: int,
    k: int,
    raw_k: int,
    block_q: int,
    block_c: int,
    tie_tol: float,
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function of one pass; ``bc`` is a broadcast dict of arrays.

    kind ``"r_source"``: pass 1 of CSLS (``r_S`` of this partition's candidates).
    kind ``"rank"``: top-k, target counts and (``raw_k > 0``) top cosines for ``r_T``.
    """

    def fn(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        b = bc.value
        idx_parts: list[np.ndarray] = []
        rs_parts: list[np.ndarray] = []
        q = b.get("queries")
        top: tuple[np.ndarray, np.ndarray] | None = None
        raw: np.ndarray | None = None
        counts = None
        seen = 0
        for batch in batches:
            if batch.num_rows == 0:
                continue
            idx, vec = _batch_arrays(batch, dim)
            seen += idx.size
            c_inv = inverse_row_norms(vec, name="candidates")
            if kind == "r_source":
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
                continue
            n_q = q.shape[0]
            if counts is None:
                counts = np.zeros(n_q, dtype=np.int64)
            rs_all = b.get("r_source")
            for c_lo in range(0, idx.size, block_c):
                c_hi = min(c_lo + block_c, idx.size)
                c_idx = idx[c_lo:c_hi]
                c_blk = scaled_rows(vec[c_lo:c_hi], c_inv[c_lo:c_hi])
                bias = None
                if rs_all is not None:
                    pos = np.searchsorted(b["r_source_index"], c_idx)
                    bias = rs_all[pos][None, :]
                # Where each query's target sits in this block (-1: elsewhere).
                t_pos = np.searchsorted(c_idx, b["targets"])
                t_pos = np.minimum(t_pos, c_idx.size - 1)
                local_t = np.where(c_idx[t_pos] == b["targets"], t_pos, -1)
                for q_lo in range(0, n_q, block_q):
                    rows = slice(q_lo, min(q_lo + block_q, n_q))
                    s = scaled_rows(q[rows], b["queries_inv"][rows]) @ c_blk.T
                    if raw_k:
                        if raw_k < s.shape[1]:
                            part = -np.partition(-s, raw_k - 1, axis=1)[:, :raw_k]
                        else:
                            part = s.copy()
                        if raw is None:
                            raw = np.full((n_q, raw_k), -np.inf, dtype=np.float32)
                        merged = np.concatenate([raw[rows], part], axis=1)
                        raw[rows] = -np.sort(-merged, axis=1)[:, :raw_k]
                    if bias is not None:
                        s *= np.float32(2.0)
                        s -= bias
                    ps, pi = topk_of_scores(s, k, 0)
                    pi = c_idx[pi]
                    if top is None:
                        top = (
                            np.full((n_q, k), -np.inf, dtype=np.float32),
                            np.full((n_q, k), np.iinfo(np.int64).max, dtype=np.int64),
                        )
                    ms, mi = merge_topk([(top[0][rows], top[1][rows]), (ps, pi)], k)
                    top[0][rows, : ms.shape[1]] = ms
                    top[1][rows, : mi.shape[1]] = mi
                    counts[rows] += count_at_or_above_target(
                        s, b["target_scores"][rows], local_t[rows], 0, tie_tol=tie_tol
                    )
        if seen == 0:
            return
        if kind == "r_source":
            payload = _pack(index=np.concatenate(idx_parts), r_source=np.concatenate(rs_parts))
        else:
            arrays = {"scores": top[0], "indices": top[1], "counts": counts}
            if raw is not None:
                arrays["raw"] = raw
            arrays["n"] = np.array([seen], dtype=np.int64)
            payload = _pack(**arrays)
        yield pa.RecordBatch.from_arrays([pa.array([payload], pa.binary())], names=["payload"])

    return fn


def _run_pass(candidates: DataFrame, fn: Callable, description: str) -> list[dict]:
    sc = candidates.sparkSession.sparkContext
    sc.setJobDescription(description)
    try:
        rows = candidates.mapInArrow(fn, _PAYLOAD_SCHEMA).collect()
    finally:
        sc.setJobDescription(None)
    return [_unpack(bytes(r["payload"])) for r in rows]


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
    block_q = check_positive_int(block_q, "block_q")
    block_c = check_positive_int(block_c, "block_c")
    tol = check_tie_tol(tie_tol)
    t = np.asarray(targets)
    if t.shape != (q.shape[0],) or (t.size and not np.issubdtype(t.dtype, np.integer)):
        raise InputDataError(f"targets must be {q.shape[0]} integer index values; got {t.shape}")
    t = t.astype(np.int64)
    cands = candidates.select(
        F.col(index_col).cast("long").alias("index"),
        F.col(vector_col).cast("array<float>").alias("vector"),
    )
    spark = candidates.sparkSession
    sc = spark.sparkContext
    q_inv = inverse_row_norms(q, name="queries")

    # Target rows (small): their vectors give the target cosines, exactly as locally.
    wanted = sorted(set(t[t >= 0].tolist()))
    t_vec = np.zeros((q.shape[0], dim), dtype=np.float32)
    if wanted:
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
    t_inv = inverse_row_norms(t_vec, name="candidates")
    t_cos = target_scores(scaled_rows(q, q_inv), scaled_rows(t_vec, t_inv), t)

    persisted = False
    if similarity == "csls" and not candidates.is_cached:
        cands = cands.persist()
        persisted = True
    try:
        common = {"dim": dim, "block_q": block_q, "block_c": block_c, "tie_tol": tol}
        rs_index = rs_values = None
        raw_k = 0
        k_s = None
        if similarity == "csls":
            if source not in CSLS_SOURCES:
                raise InputDataError(f"source must be one of {CSLS_SOURCES}; got {source!r}")
            if source == "queries":
                if source_embeddings is not None:
                    raise InputDataError("source='queries' takes no source_embeddings")
                src = q
            else:
                if source_embeddings is None:
                    raise InputDataError("source='collection' needs source_embeddings")
                src = check_embeddings(source_embeddings, "source_embeddings", dim)
            k_s = effective_k(csls_k, src.shape[0], f"source set ({source})")
            bc1 = sc.broadcast({"source": src, "source_inv": inverse_row_norms(src, name="source")})
            try:
                parts = _run_pass(
                    cands,
                    _partition_fn("r_source", bc1, k=0, raw_k=k_s, **common),
                    f"{description}: CSLS r_S",
                )
            finally:
                bc1.unpersist()
            rs_index = np.concatenate([p["index"] for p in parts]) if parts else np.empty(0)
            rs_values = np.concatenate([p["r_source"] for p in parts]) if parts else np.empty(0)
            order = np.argsort(rs_index)
            rs_index, rs_values = rs_index[order].astype(np.int64), rs_values[order]
            n_c = int(rs_index.size)
            if n_c == 0:
                raise InputDataError("candidates is empty; need at least one row")
            raw_k = effective_k(csls_k, n_c, "candidate set")
            valid = t >= 0
            rs_t = np.full(t.shape, np.nan, dtype=np.float32)
            rs_t[valid] = rs_values[np.searchsorted(rs_index, t[valid])]
            t_adj = (np.float32(2.0) * t_cos - rs_t).astype(np.float32)
        else:
            t_adj = t_cos
        payload: dict[str, np.ndarray] = {
            "queries": q,
            "queries_inv": q_inv,
            "targets": t,
            "target_scores": t_adj,
        }
        if rs_index is not None:
            payload.update(r_source_index=rs_index, r_source=rs_values)
        bc2 = sc.broadcast(payload)
        try:
            parts = _run_pass(
                cands,
                _partition_fn("rank", bc2, k=k, raw_k=raw_k, **common),
                f"{description}: {similarity} top-{k}",
            )
        finally:
            bc2.unpersist()
    finally:
        if persisted:
            cands.unpersist()
    if not parts:
        raise InputDataError("candidates is empty; need at least one row")
    n_c = int(sum(int(p["n"][0]) for p in parts))
    kk = min(k, n_c)
    scores, indices = merge_topk([(p["scores"], p["indices"]) for p in parts], k)
    scores, indices = scores[:, :kk], indices[:, :kk]
    counts = np.sum([p["counts"] for p in parts], axis=0)
    ranks = ranks_from_counts(counts, t)
    logger.info(
        "%s: %s retrieval over Spark, %d queries x %d candidates in %d partitions",
        description,
        similarity,
        q.shape[0],
        n_c,
        len(parts),
    )
    if similarity == "cosine":
        return RetrievalResult(
            scores=scores,
            indices=indices,
            ranks=ranks,
            target_scores=t_cos,
            n_candidates=n_c,
            similarity="cosine",
        )
    raw = np.concatenate([p["raw"] for p in parts], axis=1)
    r_t = mean_rows(-np.sort(-raw, axis=1)[:, :raw_k])
    return RetrievalResult(
        scores=(scores - r_t[:, None]).astype(np.float32),
        indices=indices,
        ranks=ranks,
        target_scores=(t_adj - r_t).astype(np.float32),
        n_candidates=n_c,
        similarity="csls",
        csls_source=source,
        csls_k=csls_k,
    )
