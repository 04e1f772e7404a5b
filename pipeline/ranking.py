"""The one ranking rule of the project: top-k order and pessimistic target ranks.

Every place that ranks candidates by score uses these functions: crosslingual retrieval
(:mod:`pipeline.retrieval`), the eigensolver's validation P@1 (:mod:`pipeline.linalg.monitor`)
and the word-map neighbourhoods and dictionaries (:mod:`pipeline.wordmap.mapping`). The module
is numpy only and imports nothing from the application above :mod:`pipeline.errors`, so the
maths packages can use it.

Setting: ``n`` queries scored against ``m`` candidates, a score block ``scores`` of shape
``(n, m)`` whose column ``j`` is candidate ``offset + j``; optionally each query's true target,
a global candidate index or ``-1`` when the target is not among the candidates.

Top-k order
    By score descending; equal scores are ordered by **lower candidate index first**, so a
    top-k list (and top-1, its ``k = 1`` case) is deterministic and independent of how the
    candidates are split into blocks.
Rank of the true target (pessimistic ties)
    ``rank = 1 + #{c ≠ target : score(c) >= s_t - tie_tol}``, where ``s_t`` is the target's
    score. Every other candidate that ties with the target counts *against* it, so degenerate
    embeddings (all zeros, duplicates, everything tied) score as badly as they should and never
    reach rank 1 by luck of the index order. ``tie_tol`` absorbs rounding when ``s_t`` is
    computed apart from the score block (a row-wise dot product beside a blocked matrix
    product); when ``s_t`` is read from the same scores, ``tie_tol=0`` is the exact rule. A
    query whose target is missing (``-1``) gets ``rank = +inf``. P@1 is the fraction of
    queries with ``rank == 1``.

Counts of disjoint candidate blocks add up (:func:`count_at_or_above_target`), so a blocked or
distributed search sums them and calls :func:`ranks_from_counts`; :func:`pessimistic_ranks` does
both for one whole score matrix.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pipeline.errors import InputDataError

__all__ = [
    "DEFAULT_TIE_TOL",
    "check_positive_int",
    "check_tie_tol",
    "count_at_or_above_target",
    "merge_topk",
    "pessimistic_ranks",
    "ranks_from_counts",
    "sort_topk",
    "top1_indices",
    "topk_of_scores",
]

DEFAULT_TIE_TOL = 2e-6
"""Default absolute tolerance under which two float32 scores count as tied (≈ 16 float32 ulps
at 1.0): the rounding difference between a blocked product and a row-wise dot product is well
below it, so an exact duplicate of the target always counts as a tie."""


# --- parameter checks ------------------------------------------------------------------------


def check_positive_int(value: object, name: str) -> int:
    """``value`` as an int; :class:`InputDataError` naming ``name`` unless it is one >= 1."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise InputDataError(f"{name} must be a positive integer; got {value!r}")
    return int(value)


def check_tie_tol(tie_tol: object) -> float:
    """``tie_tol`` as a float; :class:`InputDataError` unless it is finite and >= 0."""
    try:
        tol = float(tie_tol)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InputDataError(f"tie_tol must be a non-negative float; got {tie_tol!r}") from None
    if not np.isfinite(tol) or tol < 0:
        raise InputDataError(f"tie_tol must be a non-negative finite float; got {tie_tol!r}")
    return tol


# --- top-k order -----------------------------------------------------------------------------


def sort_topk(scores: np.ndarray, indices: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Sort each row by (score desc, index asc) and keep the first ``k`` columns.

    Parameters
    ----------
    scores : ndarray of shape (n, m)
    indices : ndarray of shape (n, m), int
        Candidate index of each score.
    k : int
        Columns kept (``k <= m``).

    Returns
    -------
    scores : ndarray of shape (n, k)
    indices : ndarray of shape (n, k)
    """
    order = np.lexsort((indices, -scores), axis=-1)[:, :k]
    return (
        np.take_along_axis(scores, order, axis=1),
        np.take_along_axis(indices, order, axis=1),
    )


def topk_of_scores(scores: np.ndarray, k: int, offset: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k of each row of a score block whose column ``j`` is candidate ``offset + j``.

    For ``k = 1`` this is ``argmax`` (the first maximum is the lowest tied index). Otherwise
    ``argpartition`` finds the k-th largest value ``v`` of each row; rows where ties at ``v``
    straddle the cut are resolved by taking the tied columns of lowest index; the ``k`` selected
    entries are then sorted by (score desc, index asc).

    Parameters
    ----------
    scores : ndarray of shape (n, m)
        Finite scores of ``n`` queries against ``m`` consecutive candidates.
    k : int
        Number of entries to keep; ``min(k, m)`` are returned.
    offset : int
        Global index of the block's first candidate.

    Returns
    -------
    scores : ndarray of shape (n, min(k, m))
    indices : ndarray of shape (n, min(k, m)), int64
        Global candidate indices.
    """
    scores = np.asarray(scores)
    if scores.ndim != 2:
        raise InputDataError(f"scores must be 2-D (n, m); got shape {scores.shape}")
    k = check_positive_int(k, "k")
    n, m = scores.shape
    kk = min(k, m)
    if n == 0 or kk == 0:
        return (
            np.empty((n, kk), dtype=scores.dtype),
            np.empty((n, kk), dtype=np.int64),
        )
    if kk == 1:
        local = np.argmax(scores, axis=1)[:, None].astype(np.int64)
        return np.take_along_axis(scores, local, axis=1), local + np.int64(offset)
    if kk == m:
        local = np.broadcast_to(np.arange(m, dtype=np.int64), (n, m))
    else:
        local = _partition_topk(scores, kk)
    sel_scores = np.take_along_axis(scores, local, axis=1)
    return sort_topk(sel_scores, local + np.int64(offset), kk)


def _partition_topk(scores: np.ndarray, kk: int) -> np.ndarray:
    """Local column indices of the top ``kk < m`` entries per row, tied cut: lowest indices."""
    m = scores.shape[1]
    local = np.argpartition(scores, m - kk, axis=1)[:, m - kk :]
    kth = np.take_along_axis(scores, local, axis=1).min(axis=1)
    n_ge = np.count_nonzero(scores >= kth[:, None], axis=1)
    straddle = np.flatnonzero(n_ge > kk)
    if straddle.size:
        # Ties at the cut: keep everything above v, then the tied columns of lowest index.
        sub = scores[straddle]
        v = kth[straddle][:, None]
        above = sub > v
        tied = sub == v
        need = kk - np.count_nonzero(above, axis=1)
        keep = above | (tied & (np.cumsum(tied, axis=1) <= need[:, None]))
        local = local.copy()
        local[straddle] = (np.flatnonzero(keep) % m).reshape(straddle.size, kk)
    return local


def top1_indices(scores: np.ndarray, offset: int = 0) -> np.ndarray:
    """Best candidate of each row under the top-k order (the lowest index among tied maxima).

    Parameters
    ----------
    scores : ndarray of shape (n, m)
        Finite scores; column ``j`` is candidate ``offset + j``.
    offset : int
        Global index of the block's first candidate.

    Returns
    -------
    ndarray of shape (n,), int64
    """
    return topk_of_scores(scores, 1, offset)[1][:, 0]


def merge_topk(
    partials: Sequence[tuple[np.ndarray, np.ndarray]], k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Merge per-block top-k lists of the same queries into the global top-k.

    The result does not depend on the order of ``partials`` (ties: lower index first), so
    partial results may arrive from distributed partitions in any order.

    Parameters
    ----------
    partials : sequence of (scores, indices)
        Each ``scores`` of shape (n, k_i) and ``indices`` of shape (n, k_i), int; every partial
        covers disjoint candidates of the same ``n`` queries.
    k : int
        Number of entries to keep.

    Returns
    -------
    scores : ndarray of shape (n, min(k, Σ k_i))
    indices : ndarray of shape (n, min(k, Σ k_i)), int64
    """
    k = check_positive_int(k, "k")
    if len(partials) == 0:
        raise InputDataError("merge_topk needs at least one partial (scores, indices) pair")
    n = None
    for i, (s, ix) in enumerate(partials):
        s, ix = np.asarray(s), np.asarray(ix)
        if s.ndim != 2 or s.shape != ix.shape:
            raise InputDataError(
                f"partial {i}: scores {s.shape} and indices {ix.shape} must be equal 2-D shapes"
            )
        if n is None:
            n = s.shape[0]
        elif s.shape[0] != n:
            raise InputDataError(f"partial {i} has {s.shape[0]} query rows, expected {n}")
    scores = np.concatenate([np.asarray(s) for s, _ in partials], axis=1)
    indices = np.concatenate([np.asarray(ix, dtype=np.int64) for _, ix in partials], axis=1)
    return sort_topk(scores, indices, min(k, scores.shape[1]))


# --- pessimistic ranks -----------------------------------------------------------------------


def count_at_or_above_target(
    scores: np.ndarray,
    target_scores: np.ndarray,
    targets: np.ndarray,
    offset: int = 0,
    *,
    tie_tol: float = DEFAULT_TIE_TOL,
) -> np.ndarray:
    """Per query, the number of *other* candidates of one block that tie with or beat the target.

    Counts ``#{j : scores[i, j] >= target_scores[i] - tie_tol, offset + j != targets[i]}``.
    Counts of disjoint candidate blocks add up; ``1 +`` their sum is the pessimistic rank
    (:func:`ranks_from_counts`).

    Parameters
    ----------
    scores : ndarray of shape (n, m)
        Scores of ``n`` queries against candidates ``offset, ..., offset + m - 1``.
    target_scores : ndarray of shape (n,)
        Score of each query's target (``nan`` when missing: the count is then 0).
    targets : ndarray of shape (n,), int
        Global target indices (``-1`` when missing).
    offset : int
        Global index of the block's first candidate.
    tie_tol : float
        Absolute tie tolerance (see the module docstring).

    Returns
    -------
    ndarray of shape (n,), int64
    """
    scores = np.asarray(scores)
    ts = np.asarray(target_scores)
    tg = np.asarray(targets)
    if scores.ndim != 2 or ts.shape != (scores.shape[0],) or tg.shape != ts.shape:
        raise InputDataError(
            f"scores {scores.shape}, target_scores {ts.shape} and targets {tg.shape} "
            "must have shapes (n, m), (n,), (n,)"
        )
    tol = check_tie_tol(tie_tol)
    threshold = (ts - tol).astype(scores.dtype, copy=False)
    counts = np.count_nonzero(scores >= threshold[:, None], axis=1).astype(np.int64)
    local = tg - offset
    inside = np.flatnonzero((local >= 0) & (local < scores.shape[1]))
    if inside.size:
        own = scores[inside, local[inside]]
        counts[inside] -= (own >= threshold[inside]).astype(np.int64)
    return counts


def ranks_from_counts(counts: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Pessimistic ranks from the summed :func:`count_at_or_above_target` counts.

    Parameters
    ----------
    counts : ndarray of shape (n_q,), int
        Number of other candidates tying with or beating each target, over all candidates.
    targets : ndarray of shape (n_q,), int
        Target indices, ``-1`` when missing.

    Returns
    -------
    ndarray of shape (n_q,), float64
        ``1 + counts``, or ``inf`` for a missing target.
    """
    counts = np.asarray(counts)
    targets = np.asarray(targets)
    if counts.shape != targets.shape or counts.ndim != 1:
        raise InputDataError(
            f"counts {counts.shape} and targets {targets.shape} must be equal 1-D shapes"
        )
    return np.where(targets >= 0, 1.0 + counts.astype(np.float64), np.inf)


def pessimistic_ranks(
    scores: np.ndarray, targets: np.ndarray, *, tie_tol: float = 0.0
) -> np.ndarray:
    """Pessimistic rank of each query's target in one whole score matrix.

    The target's score is read from ``scores`` itself, so the default ``tie_tol=0`` compares
    exactly: any other candidate scoring at least as high as the target counts against it.

    Parameters
    ----------
    scores : ndarray of shape (n_q, n_c)
        Scores of every query against every candidate.
    targets : ndarray of shape (n_q,), int
        Index of each query's target in ``[0, n_c)``, ``-1`` when missing.
    tie_tol : float
        Absolute tie tolerance (see the module docstring).

    Returns
    -------
    ndarray of shape (n_q,), float64
        ``1`` = best; ``inf`` for a missing target.
    """
    scores = np.asarray(scores)
    targets = np.asarray(targets, dtype=np.int64)
    if scores.ndim != 2 or targets.shape != (scores.shape[0],):
        raise InputDataError(
            f"scores {scores.shape} and targets {targets.shape} must have shapes (n, m), (n,)"
        )
    if np.any((targets < -1) | (targets >= scores.shape[1])):
        raise InputDataError(f"targets must lie in [-1, {scores.shape[1]}); got {targets}")
    valid = targets >= 0
    own = np.full(targets.shape, np.nan, dtype=np.float64)
    own[valid] = scores[np.flatnonzero(valid), targets[valid]]
    counts = count_at_or_above_target(scores, own, targets, tie_tol=tie_tol)
    return ranks_from_counts(counts, targets)
