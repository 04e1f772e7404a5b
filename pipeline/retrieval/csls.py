"""Cross-domain similarity local scaling (CSLS, Conneau et al. 2018), blocked and exact.

For a query ``q`` (language l1) and a candidate ``c`` (language l2)::

    csls(q, c) = 2 cos(q, c) - r_T(q) - r_S(c)

* ``r_T(q)``: mean cosine of ``q``'s ``k`` nearest **candidates**;
* ``r_S(c)``: mean cosine of ``c``'s ``k`` nearest neighbours in the **source set**, which is
  either the query set itself (``source="queries"``, what the paper's code does; the default) or
  a whole source-language collection passed in (``source="collection"``). The choice is an
  explicit argument and is recorded in the results (:attr:`CSLSTerms.source`,
  :attr:`~.retrieval.RetrievalResult.csls_source`).

Zero embeddings have cosine 0 with everything (see :mod:`.retrieval`). ``k`` defaults to 10;
when a set has fewer than ``k`` rows the mean is over all of them, with a warning.

All terms are computed with the blocked top-k engine of :mod:`.retrieval`, so the
``n_q × n_c`` (or ``n_c × n_source``) matrix is never materialised. :func:`csls_retrieval`
needs two passes in all: one over (candidates × source set) for ``r_S``, and one over
(queries × candidates) that ranks by ``2 cos − r_S`` and, from the same blocks, accumulates each
query's nearest cosines for ``r_T`` (a per-query constant that changes no query's order; it is
added to the reported scores at the end).
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass
from typing import Literal

import numpy as np

from pipeline.errors import InputDataError
from pipeline.retrieval.params import RETRIEVAL_DEFAULTS as _E
from pipeline.retrieval.topk import (
    DEFAULT_BLOCK_C,
    DEFAULT_BLOCK_Q,
    DEFAULT_K,
    DEFAULT_TIE_TOL,
    RetrievalResult,
    blocked_search,
    check_common,
    check_embeddings,
    check_positive_int,
    inverse_row_norms,
)

__all__ = [
    "CSLS_SOURCES",
    "DEFAULT_CSLS_K",
    "CSLSTerms",
    "csls_block_scores",
    "csls_retrieval",
    "csls_terms",
    "effective_k",
    "mean_rows",
    "mean_topk_similarity",
]

logger = logging.getLogger(__name__)

CSLS_SOURCES: tuple[str, ...] = ("queries", "collection")
"""Allowed values of ``source``: which set the ``r_S`` neighbourhoods are taken from."""
DEFAULT_CSLS_K = _E.csls_k
"""Neighbourhood size of the ``r_T`` / ``r_S`` terms (Conneau et al. 2018)."""

CSLSSource = Literal["queries", "collection"]


@dataclass(frozen=True)
class CSLSTerms:
    """The two local-scaling terms of CSLS.

    Attributes
    ----------
    r_target : ndarray of shape (n_q,), float32
        ``r_T(q)``: mean cosine of each query's ``k_target`` nearest candidates.
    r_source : ndarray of shape (n_c,), float32
        ``r_S(c)``: mean cosine of each candidate's ``k_source`` nearest source rows.
    k : int
        Requested neighbourhood size.
    k_target, k_source : int
        Sizes actually used: ``min(k, n_c)`` and ``min(k, n_source)``.
    source : str
        ``"queries"`` or ``"collection"``.
    n_source : int
        Number of rows of the source set.
    """

    r_target: np.ndarray
    r_source: np.ndarray
    k: int
    k_target: int
    k_source: int
    source: str
    n_source: int


def effective_k(k: int, n: int, what: str) -> int:
    if n < k:
        warnings.warn(
            f"CSLS neighbourhood k={k} exceeds the {n} rows of the {what}; "
            f"using the mean over all {n}",
            UserWarning,
            stacklevel=3,
        )
        return n
    return k


def _resolve_source(
    queries: np.ndarray, source: object, source_embeddings: object
) -> tuple[np.ndarray, str]:
    if source not in CSLS_SOURCES:
        raise InputDataError(f"source must be one of {CSLS_SOURCES}; got {source!r}")
    if source == "queries":
        if source_embeddings is not None:
            raise InputDataError(
                "source='queries' computes r_S over the query set; source_embeddings must be "
                "None (pass source='collection' to use a source collection)"
            )
        return queries, "queries"
    if source_embeddings is None:
        raise InputDataError(
            "source='collection' needs source_embeddings (n_source, r): the source-language "
            "collection r_S is computed over"
        )
    return check_embeddings(source_embeddings, "source_embeddings", queries.shape[1]), "collection"


def mean_rows(top: np.ndarray) -> np.ndarray:
    return top.mean(axis=1, dtype=np.float64).astype(np.float32)


def mean_topk_similarity(
    x: np.ndarray,
    y: np.ndarray,
    k: int = DEFAULT_CSLS_K,
    *,
    block_x: int = DEFAULT_BLOCK_Q,
    block_y: int = DEFAULT_BLOCK_C,
) -> np.ndarray:
    """Mean cosine of each row of ``x`` with its ``k`` nearest rows of ``y`` (blocked).

    Parameters
    ----------
    x : ndarray of shape (n_x, r)
    y : ndarray of shape (n_y, r)
    k : int
        Neighbourhood size; the mean is over ``min(k, n_y)`` rows.
    block_x, block_y : int
        Rows of ``x`` and ``y`` per block.

    Returns
    -------
    ndarray of shape (n_x,), float32
    """
    x = check_embeddings(x, "x")
    y = check_embeddings(y, "y", x.shape[1])
    k = check_positive_int(k, "k")
    out = blocked_search(
        x,
        inverse_row_norms(x, name="x"),
        y,
        inverse_row_norms(y, name="y"),
        raw_k=k,
        block_q=check_positive_int(block_x, "block_x"),
        block_c=check_positive_int(block_y, "block_y"),
    )
    return mean_rows(out.raw_scores)


def csls_terms(
    queries: np.ndarray,
    candidates: np.ndarray,
    *,
    k: int = DEFAULT_CSLS_K,
    source: CSLSSource = "queries",
    source_embeddings: np.ndarray | None = None,
    block_q: int = DEFAULT_BLOCK_Q,
    block_c: int = DEFAULT_BLOCK_C,
) -> CSLSTerms:
    """Compute ``r_T`` over the candidates and ``r_S`` over the chosen source set.

    Parameters
    ----------
    queries : ndarray of shape (n_q, r)
    candidates : ndarray of shape (n_c, r)
    k : int
        Neighbourhood size (default 10).
    source : {"queries", "collection"}
        Source set of the ``r_S`` neighbourhoods.
    source_embeddings : ndarray of shape (n_source, r), optional
        Required with ``source="collection"``, forbidden with ``source="queries"``.
    block_q, block_c : int
        Block sizes (rows of the left and right operand of each block product).

    Returns
    -------
    CSLSTerms
    """
    q = check_embeddings(queries, "queries")
    c = check_embeddings(candidates, "candidates", q.shape[1])
    k = check_positive_int(k, "k")
    src, source_name = _resolve_source(q, source, source_embeddings)
    k_t = effective_k(k, c.shape[0], "candidate set")
    k_s = effective_k(k, src.shape[0], f"source set ({source_name})")
    r_t = mean_topk_similarity(q, c, k_t, block_x=block_q, block_y=block_c)
    r_s = mean_topk_similarity(c, src, k_s, block_x=block_q, block_y=block_c)
    return CSLSTerms(
        r_target=r_t,
        r_source=r_s,
        k=k,
        k_target=k_t,
        k_source=k_s,
        source=source_name,
        n_source=int(src.shape[0]),
    )


def csls_block_scores(
    q_block: np.ndarray,
    c_block: np.ndarray,
    r_target_block: np.ndarray,
    r_source_block: np.ndarray,
) -> np.ndarray:
    """CSLS scores of one (query block, candidate block) pair from normalised rows.

    The building block of a distributed version: feed the result to
    :func:`~.retrieval.topk_of_scores` and :func:`~.retrieval.count_at_or_above_target`.

    Parameters
    ----------
    q_block : ndarray of shape (n, r), float32
        L2-normalised queries (:func:`~.retrieval.normalize_rows`).
    c_block : ndarray of shape (m, r), float32
        L2-normalised candidates.
    r_target_block : ndarray of shape (n,)
        ``r_T`` of these queries.
    r_source_block : ndarray of shape (m,)
        ``r_S`` of these candidates.

    Returns
    -------
    ndarray of shape (n, m), float32
        ``2 cos(q, c) - r_T(q) - r_S(c)``.
    """
    q = np.asarray(q_block, dtype=np.float32)
    c = np.asarray(c_block, dtype=np.float32)
    rt = np.asarray(r_target_block, dtype=np.float32)
    rs = np.asarray(r_source_block, dtype=np.float32)
    if q.ndim != 2 or c.ndim != 2 or q.shape[1] != c.shape[1]:
        raise InputDataError(f"q_block {q.shape} and c_block {c.shape} must be (n, r), (m, r)")
    if rt.shape != (q.shape[0],) or rs.shape != (c.shape[0],):
        raise InputDataError(
            f"r_target_block {rt.shape} / r_source_block {rs.shape} must match "
            f"({q.shape[0]},) / ({c.shape[0]},)"
        )
    s = q @ c.T
    s *= np.float32(2.0)
    s -= rt[:, None]
    s -= rs[None, :]
    return s


def csls_retrieval(
    queries: np.ndarray,
    candidates: np.ndarray,
    targets: np.ndarray,
    *,
    k: int = DEFAULT_K,
    csls_k: int = DEFAULT_CSLS_K,
    source: CSLSSource = "queries",
    source_embeddings: np.ndarray | None = None,
    block_q: int = DEFAULT_BLOCK_Q,
    block_c: int = DEFAULT_BLOCK_C,
    tie_tol: float = DEFAULT_TIE_TOL,
) -> RetrievalResult:
    """Exact blocked CSLS retrieval: top-k candidates and pessimistic target ranks.

    Candidates are ordered by ``2 cos(q, c) − r_S(c)`` (ties: lower index first), which is the
    CSLS order since ``r_T(q)`` is constant per query; reported scores are the full
    ``csls(q, c) = 2 cos(q, c) − r_T(q) − r_S(c)``. Ranks use the pessimistic rule and the
    tie tolerance of :mod:`.retrieval` on those scores. (Subtracting ``r_T`` after the
    ordering may round two adjacent reported scores to the same float32 value; their order is
    the order of ``2 cos − r_S``.)

    Parameters
    ----------
    queries : ndarray of shape (n_q, r)
    candidates : ndarray of shape (n_c, r)
    targets : ndarray of shape (n_q,), int
        Index of each query's true target, ``-1`` when missing.
    k : int
        Number of candidates retrieved per query.
    csls_k : int
        Neighbourhood size of ``r_T`` and ``r_S`` (default 10).
    source : {"queries", "collection"}
        Source set of the ``r_S`` neighbourhoods: the queries (default, as in the paper's code)
        or ``source_embeddings``.
    source_embeddings : ndarray of shape (n_source, r), optional
        Required with ``source="collection"``, forbidden with ``source="queries"``.
    block_q, block_c : int
        Rows per block; working memory ``O(block_q × block_c + (n_q + n_c) × k)``.
    tie_tol : float
        Absolute tie tolerance on CSLS scores.

    Returns
    -------
    RetrievalResult
        With ``similarity="csls"``, ``csls_source`` and ``csls_k`` set.
    """
    q, c, t, k, block_q, block_c, tol = check_common(
        queries, candidates, targets, k, block_q, block_c, tie_tol
    )
    csls_k = check_positive_int(csls_k, "csls_k")
    src, source_name = _resolve_source(q, source, source_embeddings)
    k_t = effective_k(csls_k, c.shape[0], "candidate set")
    k_s = effective_k(csls_k, src.shape[0], f"source set ({source_name})")

    q_inv = inverse_row_norms(q, name="queries")
    c_inv = inverse_row_norms(c, name="candidates")
    src_inv = q_inv if source_name == "queries" else inverse_row_norms(src, name="source")
    # Pass 1: r_S(c) over the source set (candidates play the query role).
    r_s = mean_rows(
        blocked_search(
            c, c_inv, src, src_inv, raw_k=k_s, block_q=block_q, block_c=block_c
        ).raw_scores
    )
    # Pass 2: rank by 2 cos - r_S; the plain cosines of the same blocks give r_T.
    out = blocked_search(
        q,
        q_inv,
        c,
        c_inv,
        k=k,
        raw_k=k_t,
        targets=t,
        col_bias=r_s,
        block_q=block_q,
        block_c=block_c,
        tie_tol=tol,
    )
    r_t = mean_rows(out.raw_scores)
    logger.debug(
        "csls retrieval: %d queries, %d candidates, source=%s (%d rows), csls_k=%d",
        q.shape[0],
        c.shape[0],
        source_name,
        src.shape[0],
        csls_k,
    )
    return RetrievalResult(
        scores=(out.scores - r_t[:, None]).astype(np.float32),
        indices=out.indices,
        ranks=out.ranks,
        target_scores=(out.target_scores - r_t).astype(np.float32),
        n_candidates=int(c.shape[0]),
        similarity="csls",
        csls_source=source_name,
        csls_k=csls_k,
    )
