"""Retrieval maths (docs/design.md, evaluation protocol): exact blocked top-k, CSLS, P@k and MRR.

Pure numpy, memory-bounded (:mod:`~pipeline.retrieval.topk`, :mod:`~pipeline.retrieval.csls`,
:mod:`~pipeline.retrieval.metrics`, :mod:`~pipeline.retrieval.shared_space`), plus the same
retrieval distributed over Spark executors (:mod:`~pipeline.retrieval.spark`, imported on
demand). The experiment that uses it (splits, models, reports) is :mod:`pipeline.evaluation`.
The primitives (:func:`partial_topk`, :func:`merge_topk`, :func:`count_at_or_above_target`,
...) are the pieces the distributed version reuses.

The two similarities share one signature and are chosen in one place, :data:`SIMILARITIES`::

    result = retrieve("csls", queries, candidates, targets, source="queries")
    metrics = retrieval_metrics(result.ranks)          # P@1, P@5, P@10, MRR
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pipeline.errors import InputDataError
from pipeline.retrieval.csls import (
    CSLS_SOURCES,
    DEFAULT_CSLS_K,
    CSLSTerms,
    csls_block_scores,
    csls_retrieval,
    csls_terms,
    mean_topk_similarity,
)
from pipeline.retrieval.metrics import (
    DEFAULT_PRECISION_KS,
    RetrievalMetrics,
    retrieval_metrics,
)
from pipeline.retrieval.topk import (
    DEFAULT_BLOCK_C,
    DEFAULT_BLOCK_Q,
    DEFAULT_K,
    DEFAULT_TIE_TOL,
    RetrievalResult,
    cosine_retrieval,
    count_at_or_above_target,
    inverse_row_norms,
    merge_topk,
    normalize_rows,
    partial_topk,
    ranks_from_counts,
    target_scores,
    topk_of_scores,
)

__all__ = [
    "CSLS_SOURCES",
    "DEFAULT_BLOCK_C",
    "DEFAULT_BLOCK_Q",
    "DEFAULT_CSLS_K",
    "DEFAULT_K",
    "DEFAULT_PRECISION_KS",
    "DEFAULT_TIE_TOL",
    "SIMILARITIES",
    "CSLSTerms",
    "RetrievalMetrics",
    "RetrievalResult",
    "cosine_retrieval",
    "count_at_or_above_target",
    "csls_block_scores",
    "csls_retrieval",
    "csls_terms",
    "inverse_row_norms",
    "mean_topk_similarity",
    "merge_topk",
    "normalize_rows",
    "partial_topk",
    "ranks_from_counts",
    "retrieval_metrics",
    "retrieve",
    "target_scores",
    "topk_of_scores",
]

SIMILARITIES: dict[str, Callable[..., RetrievalResult]] = {
    "cosine": cosine_retrieval,
    "csls": csls_retrieval,
}
"""Similarity name → retrieval function (same positional signature; CSLS adds keywords)."""


def retrieve(
    similarity: str,
    queries: np.ndarray,
    candidates: np.ndarray,
    targets: np.ndarray,
    **kwargs: object,
) -> RetrievalResult:
    """Run the retrieval function registered for ``similarity`` in :data:`SIMILARITIES`.

    Parameters
    ----------
    similarity : {"cosine", "csls"}
    queries : ndarray of shape (n_q, r)
    candidates : ndarray of shape (n_c, r)
    targets : ndarray of shape (n_q,), int
        ``-1`` for a target missing from the candidates.
    **kwargs
        Keyword arguments of :func:`cosine_retrieval` / :func:`csls_retrieval`.

    Returns
    -------
    RetrievalResult
    """
    try:
        fn = SIMILARITIES[similarity]
    except (KeyError, TypeError):
        raise InputDataError(
            f"similarity must be one of {sorted(SIMILARITIES)}; got {similarity!r}"
        ) from None
    return fn(queries, candidates, targets, **kwargs)
