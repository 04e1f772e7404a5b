"""Exact, blocked crosslingual retrieval: top-k candidates and the rank of each true target.

Setting: ``n_q`` query embeddings (language l1), each with the index of its true target among
``n_c`` candidate embeddings (language l2), or ``-1`` when the target is not in the candidate set.
Everything here is pure numpy, float32, and **memory-bounded**: candidates are processed in
blocks of ``block_c`` rows and queries in blocks of ``block_q`` rows, so besides the inputs the
peak working memory is ``O(block_q × block_c + n_q × k)``; the ``n_q × n_c`` score matrix is never
materialised when the blocks are smaller than the inputs.

Definitions (shared by the local path here and a distributed version built on the primitives)
----------------------------------------------------------------------------------------------
Cosine similarity
    Rows are L2-normalised (:func:`normalize_rows`); a **zero row stays zero**, so its cosine with
    anything is defined as **0** (never NaN).
Top-k order and rank of the true target
    The project's one rule, :mod:`pipeline.ranking`: scores descending, ties by lower candidate
    index; the target's rank is pessimistic (every other candidate that ties with it counts
    against it; a missing target has rank ``+inf``). The target's score is a row-wise dot
    product while the other scores come from blocked matrix products, so scores are compared
    with the tolerance ``tie_tol`` (default :data:`DEFAULT_TIE_TOL`) under which an exact
    duplicate of the target always counts as a tie; ``tie_tol=0`` gives the exact comparison.

Primitives for a distributed version
------------------------------------
A Spark job holding candidate partitions reuses: :func:`normalize_rows`,
:func:`partial_topk` (or :func:`topk_of_scores` on an already adjusted score block) per
partition, :func:`merge_topk` on the driver; :func:`target_scores` once on the gathered target
vectors, :func:`count_at_or_above_target` per partition (integer counts that simply add up) and
:func:`ranks_from_counts` on the sums.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from pipeline.errors import InputDataError
from pipeline.ranking import (
    DEFAULT_TIE_TOL,
    check_positive_int,
    check_tie_tol,
    count_at_or_above_target,
    merge_topk,
    ranks_from_counts,
    topk_of_scores,
)
from pipeline.retrieval.params import RETRIEVAL_DEFAULTS as _E

__all__ = [
    "DEFAULT_BLOCK_C",
    "DEFAULT_BLOCK_Q",
    "DEFAULT_K",
    "DEFAULT_TIE_TOL",
    "PAIRWISE",
    "RetrievalResult",
    "cosine_retrieval",
    "count_at_or_above_target",
    "inverse_row_norms",
    "merge_topk",
    "neg_l1_block",
    "neg_l1_targets",
    "normalize_rows",
    "partial_topk",
    "ranks_from_counts",
    "target_scores",
    "topk_of_scores",
]

logger = logging.getLogger(__name__)

DEFAULT_K = 10
"""Default number of retrieved candidates per query (enough for P@1, P@5, P@10)."""
DEFAULT_BLOCK_Q = _E.block_q
"""Default number of query rows per block."""
DEFAULT_BLOCK_C = _E.block_c
"""Default number of candidate rows per block (a 1024 × 4096 float32 block is 16 MiB)."""

_PAD_INDEX = np.iinfo(np.int64).max  # index of the -inf padding entries of a running top-k
_NORM_CHUNK = 65536  # rows per chunk when computing norms (bounds the float64 temporary)
_F32_SAFE_MIN_NORM = 1e-15  # below this a float32 sum of squares may have lost precision


# --- results ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class RetrievalResult:
    """Result of a retrieval run (:func:`cosine_retrieval` or :func:`~.csls.csls_retrieval`).

    Attributes
    ----------
    scores : ndarray of shape (n_q, k_eff), float32
        Top-k scores per query, descending; ``k_eff = min(k, n_c)``.
    indices : ndarray of shape (n_q, k_eff), int64
        Candidate indices of those scores (ties: lower index first).
    ranks : ndarray of shape (n_q,), float64
        Pessimistic rank of each query's true target (1 = best); ``inf`` when missing.
    target_scores : ndarray of shape (n_q,), float32
        Score of each query's true target; ``nan`` when missing.
    n_candidates : int
        Number of candidates ``n_c``.
    similarity : str
        ``"cosine"`` or ``"csls"``.
    csls_source : str or None
        For CSLS, which set the ``r_S`` term was computed over: ``"queries"`` or
        ``"collection"``; ``None`` for cosine.
    csls_k : int or None
        For CSLS, the neighbourhood size of the ``r_T`` / ``r_S`` terms.
    """

    scores: np.ndarray
    indices: np.ndarray
    ranks: np.ndarray
    target_scores: np.ndarray
    n_candidates: int
    similarity: str
    csls_source: str | None = None
    csls_k: int | None = None

    @property
    def n_queries(self) -> int:
        """Number of queries ``n_q``."""
        return int(self.ranks.shape[0])

    @property
    def n_missing_targets(self) -> int:
        """Number of queries whose true target is not among the candidates."""
        return int(np.count_nonzero(np.isinf(self.ranks)))


# --- validation ------------------------------------------------------------------------------


def check_embeddings(x: object, name: str, dim: int | None = None) -> np.ndarray:
    """Return ``x`` as a 2-D float array (float32 kept, other floats later cast per block)."""
    arr = np.asarray(x)
    if arr.ndim != 2:
        raise InputDataError(f"{name} must be a 2-D array (n, r); got shape {arr.shape}")
    if arr.shape[0] == 0:
        raise InputDataError(f"{name} is empty (shape {arr.shape}); need at least one row")
    if arr.shape[1] == 0:
        raise InputDataError(f"{name} has zero columns (shape {arr.shape})")
    if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise InputDataError(f"{name} must hold real numbers; got dtype {arr.dtype}")
    if dim is not None and arr.shape[1] != dim:
        raise InputDataError(
            f"{name} has embedding dimension {arr.shape[1]}, expected {dim} (same as the queries)"
        )
    if arr.dtype != np.float32 and not np.issubdtype(arr.dtype, np.floating):
        arr = arr.astype(np.float32)
    return arr


def _check_targets(targets: object, n_q: int, n_c: int) -> np.ndarray:
    t = np.asarray(targets)
    if t.ndim != 1 or t.shape[0] != n_q:
        raise InputDataError(
            f"targets must be a 1-D array of length n_queries={n_q}; got shape {t.shape}"
        )
    if t.size and not np.issubdtype(t.dtype, np.integer):
        raise InputDataError(f"targets must be integer candidate indices; got dtype {t.dtype}")
    t = t.astype(np.int64)
    bad = (t < -1) | (t >= n_c)
    if np.any(bad):
        i = int(np.flatnonzero(bad)[0])
        raise InputDataError(
            f"targets[{i}] = {int(t[i])} is out of range: must be in [0, {n_c}) "
            "or -1 for a target missing from the candidate set"
        )
    return t


# --- normalisation ---------------------------------------------------------------------------


def inverse_row_norms(x: np.ndarray, *, name: str = "embeddings") -> np.ndarray:
    """Inverse L2 norms of the rows of ``x``, with 0 for zero rows; also checks finiteness.

    Computed over chunks of rows (bounded temporary memory): a float32 sum of squares, with the
    rows where it may have over- or underflowed (and zero rows) recomputed in float64.

    Parameters
    ----------
    x : ndarray of shape (n, r)
        Embeddings.
    name : str
        Name used in error messages.

    Returns
    -------
    ndarray of shape (n,), float32
        ``1 / ||x_i||`` or 0 when ``x_i == 0``.

    Raises
    ------
    InputDataError
        If ``x`` holds NaN or infinite values.
    """
    x = np.asarray(x)
    out = np.empty(x.shape[0], dtype=np.float32)
    for lo in range(0, x.shape[0], _NORM_CHUNK):
        chunk = x[lo : lo + _NORM_CHUNK]
        if chunk.dtype == np.float32:
            # Fast path; rows whose float32 sum of squares over- or underflows (or is NaN/inf,
            # or is exactly 0) are recomputed in float64 below.
            with np.errstate(over="ignore", invalid="ignore"):
                sq = np.einsum("ij,ij->i", chunk, chunk)
            norms = np.sqrt(sq.astype(np.float64))
            redo = np.flatnonzero(~np.isfinite(norms) | (norms < _F32_SAFE_MIN_NORM))
        else:
            norms = np.empty(chunk.shape[0])
            redo = np.arange(chunk.shape[0])
        if redo.size:
            sub = chunk[redo].astype(np.float64)
            norms[redo] = np.sqrt(np.einsum("ij,ij->i", sub, sub))
        if not np.all(np.isfinite(norms)):
            i = lo + int(np.flatnonzero(~np.isfinite(norms))[0])
            raise InputDataError(f"{name} row {i} contains NaN or infinite values")
        with np.errstate(divide="ignore"):
            inv = np.where(norms > 0, 1.0 / np.where(norms > 0, norms, 1.0), 0.0)
        out[lo : lo + _NORM_CHUNK] = inv
    return out


def scaled_rows(x: np.ndarray, inv_norms: np.ndarray) -> np.ndarray:
    """``x * inv_norms[:, None]`` in float32 (the one normalisation formula used everywhere)."""
    return np.asarray(x, dtype=np.float32) * inv_norms[:, None]


def normalize_rows(x: np.ndarray) -> np.ndarray:
    """L2-normalise the rows of ``x`` (float32 copy); zero rows stay zero (cosine 0, not NaN).

    Parameters
    ----------
    x : ndarray of shape (n, r)
        Embeddings (any real dtype).

    Returns
    -------
    ndarray of shape (n, r), float32
    """
    x = check_embeddings(x, "embeddings")
    return scaled_rows(x, inverse_row_norms(x))


# --- top-k primitives ------------------------------------------------------------------------


def partial_topk(
    q_block: np.ndarray, c_block: np.ndarray, k: int, offset: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Top-k inner products of a query block against one candidate block.

    For cosine similarity pass L2-normalised rows (:func:`normalize_rows`).

    Parameters
    ----------
    q_block : ndarray of shape (n, r), float32
        Queries.
    c_block : ndarray of shape (m, r), float32
        Candidates ``offset, ..., offset + m - 1``.
    k : int
        Number of entries to keep per query; ``min(k, m)`` are returned.
    offset : int
        Global index of ``c_block[0]``.

    Returns
    -------
    scores : ndarray of shape (n, min(k, m)), float32
        Descending; ties ordered by lower candidate index.
    indices : ndarray of shape (n, min(k, m)), int64
        Global candidate indices.
    """
    q_block = check_embeddings(q_block, "q_block")
    c_block = check_embeddings(c_block, "c_block", q_block.shape[1])
    scores = np.asarray(q_block, dtype=np.float32) @ np.asarray(c_block, dtype=np.float32).T
    return topk_of_scores(scores, k, offset)


# --- ranks -----------------------------------------------------------------------------------


def target_scores(
    queries: np.ndarray, target_vectors: np.ndarray, targets: np.ndarray
) -> np.ndarray:
    """Row-wise inner product of each query with its own target vector.

    Parameters
    ----------
    queries : ndarray of shape (n_q, r), float32
        Normalised queries.
    target_vectors : ndarray of shape (n_q, r), float32
        Row ``i`` is the (normalised) candidate ``targets[i]``; rows of missing targets are
        ignored (any value).
    targets : ndarray of shape (n_q,), int
        Target indices, ``-1`` when missing.

    Returns
    -------
    ndarray of shape (n_q,), float32
        ``nan`` where the target is missing.
    """
    q = np.asarray(queries, dtype=np.float32)
    tv = np.asarray(target_vectors, dtype=np.float32)
    t = np.asarray(targets)
    if q.shape != tv.shape or q.ndim != 2 or t.shape != (q.shape[0],):
        raise InputDataError(
            f"queries {q.shape}, target_vectors {tv.shape} and targets {t.shape} "
            "must have shapes (n_q, r), (n_q, r), (n_q,)"
        )
    s = np.einsum("ij,ij->i", q, tv).astype(np.float32)
    s[t < 0] = np.nan
    return s


def neg_l1_block(q_block: np.ndarray, c_block: np.ndarray) -> np.ndarray:
    """``-‖q_i − c_j‖₁`` for a query block against a candidate block.

    Parameters
    ----------
    q_block : ndarray of shape (n, r)
    c_block : ndarray of shape (m, r)

    Returns
    -------
    ndarray of shape (n, m), float32
        Accumulated one dimension at a time (memory ``n × m``, not ``n × m × r``).
    """
    q = np.asarray(q_block, dtype=np.float32)
    c = np.asarray(c_block, dtype=np.float32)
    out = np.zeros((q.shape[0], c.shape[0]), dtype=np.float32)
    diff = np.empty_like(out)
    for j in range(q.shape[1]):
        np.subtract(q[:, j : j + 1], c[None, :, j], out=diff)
        np.abs(diff, out=diff)
        out -= diff
    return out


def neg_l1_targets(
    queries: np.ndarray, target_vectors: np.ndarray, targets: np.ndarray
) -> np.ndarray:
    """``-‖q_i − t_i‖₁`` of each query with its own target vector; ``nan`` where the target
    is missing (shapes as :func:`target_scores`)."""
    q = np.asarray(queries, dtype=np.float32)
    tv = np.asarray(target_vectors, dtype=np.float32)
    s = -np.abs(q - tv).sum(axis=1, dtype=np.float32)
    s[np.asarray(targets) < 0] = np.nan
    return s


#: Pairwise scores of :func:`blocked_search`: name -> (block scores, target scores).
PAIRWISE = {
    "dot": (lambda q, c: q @ c.T, target_scores),
    "neg_l1": (neg_l1_block, neg_l1_targets),
}


# --- the blocked engine (shared by cosine and CSLS) ------------------------------------------


class _RunningTopk:
    """Top-k of every query so far, padded with (-inf, _PAD_INDEX); blocks arrive by offset."""

    def __init__(self, n: int, k: int, *, values_only: bool = False) -> None:
        self.k = k
        self.values_only = values_only  # only the scores matter (means for r_T / r_S)
        self.scores = np.full((n, k), -np.inf, dtype=np.float32)
        self.indices = np.full((n, k), _PAD_INDEX, dtype=np.int64)

    def update(self, rows: slice, block: np.ndarray, offset: int) -> None:
        """Merge one score block (candidate indices ``offset + j``, all above earlier blocks).

        A new candidate enters a query's list only if its score is strictly above the current
        k-th score (an equal score loses the tie: its index is higher). Few entries pass that
        filter after the first block, so they are merged sparsely; when many do (first block,
        adversarial orders), the block goes through :func:`topk_of_scores` instead.
        """
        run_s = self.scores[rows]
        run_i = self.indices[rows]
        n, k = run_s.shape
        if np.isneginf(run_s[:, -1]).any():  # first block(s): everything would pass
            flat = None
        else:
            # flatnonzero on the raveled mask: much cheaper than 2-D np.nonzero when sparse.
            flat = np.flatnonzero(block > run_s[:, -1:])
            if flat.size == 0:
                return
        if flat is None or flat.size > max(8 * n * k, block.size // 16):
            if self.values_only:
                # np.partition on values is cheaper than argpartition; indices stay padding.
                m = block.shape[1]
                if k < m:
                    part = np.negative(block)
                    part.partition(k - 1, axis=1)  # in place on the negated copy
                    part = -part[:, :k]
                else:
                    part = block
                merged = np.concatenate([run_s, part], axis=1)
                self.scores[rows] = -np.sort(-merged, axis=1)[:, :k]
                return
            part = topk_of_scores(block, k, offset)
            new_s, new_i = merge_topk([(run_s, run_i), part], k)
        else:
            r_idx, c_idx = np.divmod(flat, block.shape[1])
            all_rows = np.concatenate([np.repeat(np.arange(n), k), r_idx])
            all_s = np.concatenate([run_s.ravel(), block.reshape(-1)[flat]])
            all_i = np.concatenate([run_i.ravel(), c_idx.astype(np.int64) + offset])
            order = np.lexsort((all_i, -all_s, all_rows))
            sorted_rows = all_rows[order]
            starts = np.searchsorted(sorted_rows, np.arange(n))
            pos_in_row = np.arange(order.size) - starts[sorted_rows]
            keep = order[pos_in_row < k]  # row-major, k per row (rows hold >= k entries)
            new_s = all_s[keep].reshape(n, k)
            new_i = all_i[keep].reshape(n, k)
        self.scores[rows] = new_s
        self.indices[rows] = new_i


@dataclass(frozen=True)
class _SearchOutput:
    scores: np.ndarray | None  # (n_q, k) top-k of the adjusted scores, or None
    indices: np.ndarray | None
    raw_scores: np.ndarray | None  # (n_q, raw_k) top-k of the plain inner products
    ranks: np.ndarray | None
    target_scores: np.ndarray | None  # adjusted target scores


def blocked_search(
    queries: np.ndarray,
    q_inv_norms: np.ndarray,
    candidates: np.ndarray,
    c_inv_norms: np.ndarray,
    *,
    k: int = 0,
    raw_k: int = 0,
    targets: np.ndarray | None = None,
    col_bias: np.ndarray | None = None,
    block_q: int = DEFAULT_BLOCK_Q,
    block_c: int = DEFAULT_BLOCK_C,
    tie_tol: float = DEFAULT_TIE_TOL,
    pairwise: str = "dot",
) -> _SearchOutput:
    """One pass over all (query block, candidate block) pairs; validated inputs only.

    With ``S = cos(Q, C)`` on a block, the *adjusted* score is ``S`` (``col_bias is None``) or
    ``2 S - col_bias[None, :]`` (CSLS without its per-query ``r_T`` term, which does not change
    any query's order). Per block it updates the top-``k`` of the adjusted scores, the top-
    ``raw_k`` of ``S`` and the target-rank counts. Candidate blocks form the outer loop so each
    is normalised once. ``pairwise="neg_l1"``: ``S`` is minus the L1 distance of the rows
    scaled by the given inverse norms (pass ones for the raw vectors) instead of their dot
    product (:data:`PAIRWISE`).
    """
    block_scores, row_scores = PAIRWISE[pairwise]
    n_q = queries.shape[0]
    n_c = candidates.shape[0]
    top = _RunningTopk(n_q, k) if k else None
    raw = _RunningTopk(n_q, raw_k, values_only=True) if raw_k else None
    counts = t_scores = None
    if targets is not None:
        valid = targets >= 0
        safe = np.where(valid, targets, 0)
        t_scores = np.empty(n_q, dtype=np.float32)
        for q_lo in range(0, n_q, block_q):  # by query block: O(block_q × r) memory
            rows = slice(q_lo, min(q_lo + block_q, n_q))
            t_scores[rows] = row_scores(
                scaled_rows(queries[rows], q_inv_norms[rows]),
                scaled_rows(candidates[safe[rows]], c_inv_norms[safe[rows]]),
                targets[rows],
            )
        if col_bias is not None:
            t_scores = np.float32(2.0) * t_scores - np.where(valid, col_bias[safe], np.nan)
            t_scores = t_scores.astype(np.float32)
        counts = np.zeros(n_q, dtype=np.int64)
    for c_lo in range(0, n_c, block_c):
        c_hi = min(c_lo + block_c, n_c)
        c_blk = scaled_rows(candidates[c_lo:c_hi], c_inv_norms[c_lo:c_hi])
        bias = None if col_bias is None else col_bias[c_lo:c_hi][None, :]
        for q_lo in range(0, n_q, block_q):
            rows = slice(q_lo, min(q_lo + block_q, n_q))
            q_blk = scaled_rows(queries[rows], q_inv_norms[rows])
            s = block_scores(q_blk, c_blk)
            if raw is not None:
                raw.update(rows, s, c_lo)
            if bias is not None:
                s *= np.float32(2.0)
                s -= bias
            if top is not None:
                top.update(rows, s, c_lo)
            if counts is not None:
                counts[rows] += count_at_or_above_target(
                    s, t_scores[rows], targets[rows], c_lo, tie_tol=tie_tol
                )
    kk, rk = min(k, n_c), min(raw_k, n_c)
    return _SearchOutput(
        scores=None if top is None else top.scores[:, :kk],
        indices=None if top is None else top.indices[:, :kk],
        raw_scores=None if raw is None else raw.scores[:, :rk],
        ranks=None if counts is None else ranks_from_counts(counts, targets),
        target_scores=t_scores,
    )


def check_common(
    queries: object,
    candidates: object,
    targets: object,
    k: object,
    block_q: object,
    block_c: object,
    tie_tol: object,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int, int, float]:
    q = check_embeddings(queries, "queries")
    c = check_embeddings(candidates, "candidates", q.shape[1])
    t = _check_targets(targets, q.shape[0], c.shape[0])
    return (
        q,
        c,
        t,
        check_positive_int(k, "k"),
        check_positive_int(block_q, "block_q"),
        check_positive_int(block_c, "block_c"),
        check_tie_tol(tie_tol),
    )


def cosine_retrieval(
    queries: np.ndarray,
    candidates: np.ndarray,
    targets: np.ndarray,
    *,
    k: int = DEFAULT_K,
    block_q: int = DEFAULT_BLOCK_Q,
    block_c: int = DEFAULT_BLOCK_C,
    tie_tol: float = DEFAULT_TIE_TOL,
) -> RetrievalResult:
    """Exact blocked cosine retrieval: top-k candidates and pessimistic target ranks.

    Parameters
    ----------
    queries : ndarray of shape (n_q, r)
        Query embeddings (float32 preferred; other real dtypes are cast per block).
    candidates : ndarray of shape (n_c, r)
        Candidate embeddings.
    targets : ndarray of shape (n_q,), int
        Index of each query's true target in ``candidates``, ``-1`` when missing.
    k : int
        Number of candidates retrieved per query (``min(k, n_c)`` returned).
    block_q, block_c : int
        Query and candidate rows per block; working memory is
        ``O(block_q × block_c + n_q × k)`` besides the inputs.
    tie_tol : float
        Absolute tolerance under which a score ties with the target's (module docstring).

    Returns
    -------
    RetrievalResult
        With ``similarity="cosine"``.

    Raises
    ------
    InputDataError
        On malformed inputs (shapes, non-finite values, out-of-range targets, bad parameters).
    """
    q, c, t, k, block_q, block_c, tol = check_common(
        queries, candidates, targets, k, block_q, block_c, tie_tol
    )
    out = blocked_search(
        q,
        inverse_row_norms(q, name="queries"),
        c,
        inverse_row_norms(c, name="candidates"),
        k=k,
        targets=t,
        block_q=block_q,
        block_c=block_c,
        tie_tol=tol,
    )
    logger.debug("cosine retrieval: %d queries, %d candidates, k=%d", q.shape[0], c.shape[0], k)
    return RetrievalResult(
        scores=out.scores,
        indices=out.indices,
        ranks=out.ranks,
        target_scores=out.target_scores,
        n_candidates=int(c.shape[0]),
        similarity="cosine",
    )
