"""Exact blocked retrieval by L1 distance, the topic models' similarity (JPLSA, CPLSA).

Platt, Toutanova and Yih (2010) compare two documents' topic distributions by the L1
distance ``‖θ_q − θ_c‖₁``. Retrieval ranks the candidates by the score ``−‖q − c‖₁`` (higher
is closer) with the same engine, top-k order and pessimistic target ranks as cosine
(:mod:`pipeline.retrieval.topk`, :mod:`pipeline.ranking`); the vectors are used as given (no
normalisation: a zero vector is at distance ``‖c‖₁`` from every candidate c). Memory is
``O(block_q × block_c + n_q × k)`` besides the inputs, like cosine retrieval.
"""

from __future__ import annotations

import logging

import numpy as np

from pipeline.retrieval.topk import (
    DEFAULT_BLOCK_C,
    DEFAULT_BLOCK_Q,
    DEFAULT_K,
    DEFAULT_TIE_TOL,
    RetrievalResult,
    blocked_search,
    check_common,
    inverse_row_norms,
)

__all__ = ["l1_retrieval"]

logger = logging.getLogger(__name__)


def l1_retrieval(
    queries: np.ndarray,
    candidates: np.ndarray,
    targets: np.ndarray,
    *,
    k: int = DEFAULT_K,
    block_q: int = DEFAULT_BLOCK_Q,
    block_c: int = DEFAULT_BLOCK_C,
    tie_tol: float = DEFAULT_TIE_TOL,
) -> RetrievalResult:
    """Exact blocked retrieval by minus the L1 distance: top-k and pessimistic target ranks.

    Parameters
    ----------
    queries : ndarray of shape (n_q, r)
    candidates : ndarray of shape (n_c, r)
    targets : ndarray of shape (n_q,), int
        Index of each query's true target in ``candidates``, ``-1`` when missing.
    k, block_q, block_c, tie_tol
        As for :func:`~pipeline.retrieval.topk.cosine_retrieval`.

    Returns
    -------
    RetrievalResult
        With ``similarity="l1"``; ``scores`` and ``target_scores`` are ``−‖q − c‖₁``.

    Raises
    ------
    InputDataError
        On malformed inputs (shapes, non-finite values, out-of-range targets, bad parameters).
    """
    q, c, t, k, block_q, block_c, tol = check_common(
        queries, candidates, targets, k, block_q, block_c, tie_tol
    )
    inverse_row_norms(q, name="queries")  # finiteness checks
    inverse_row_norms(c, name="candidates")
    out = blocked_search(
        q,
        np.ones(q.shape[0], dtype=np.float32),
        c,
        np.ones(c.shape[0], dtype=np.float32),
        k=k,
        targets=t,
        block_q=block_q,
        block_c=block_c,
        tie_tol=tol,
        pairwise="neg_l1",
    )
    logger.debug("L1 retrieval: %d queries, %d candidates, k=%d", q.shape[0], c.shape[0], k)
    return RetrievalResult(
        scores=out.scores,
        indices=out.indices,
        ranks=out.ranks,
        target_scores=out.target_scores,
        n_candidates=int(c.shape[0]),
        similarity="l1",
    )
