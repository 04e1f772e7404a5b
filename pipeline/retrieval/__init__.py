"""Retrieval maths (docs/design.md, evaluation protocol): exact blocked top-k, CSLS, P@k and MRR.

Pure numpy, memory-bounded (:mod:`~pipeline.retrieval.topk`, :mod:`~pipeline.retrieval.csls`,
:mod:`~pipeline.retrieval.metrics`, :mod:`~pipeline.retrieval.shared_space`), plus the same
retrieval distributed over Spark executors (:mod:`~pipeline.retrieval.spark`, imported on
demand). The experiment that uses it (splits, models, reports) is :mod:`pipeline.evaluation`.
The primitives (:func:`partial_topk`, :func:`merge_topk`, :func:`count_at_or_above_target`,
...) are the pieces the distributed version reuses.

The similarities (cosine, CSLS, and L1 distance for topic distributions,
:mod:`~pipeline.retrieval.l1`) share one signature and are chosen in one place,
:data:`SIMILARITIES`::

    result = retrieve("csls", queries, candidates, targets, source="queries")
    metrics = retrieval_metrics(result.ranks)          # P@1, P@5, P@10, MRR

The retrieval parameters are declared in :mod:`pipeline.retrieval.params` (the
configuration's ``evaluate`` section embeds them). The names below load on first use
(:mod:`pipeline.lazy`), so that importing that module loads no numpy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.lazy import lazy_exports

if TYPE_CHECKING:
    from pipeline.retrieval.csls import (
        CSLS_SOURCES,
        DEFAULT_CSLS_K,
        CSLSTerms,
        csls_block_scores,
        csls_retrieval,
        csls_terms,
        mean_topk_similarity,
    )
    from pipeline.retrieval.l1 import l1_retrieval
    from pipeline.retrieval.metrics import (
        DEFAULT_PRECISION_KS,
        RetrievalMetrics,
        retrieval_metrics,
    )
    from pipeline.retrieval.params import RetrievalParams
    from pipeline.retrieval.similarity import SIMILARITIES, retrieve
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

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "CSLS_SOURCES": "csls",
        "DEFAULT_CSLS_K": "csls",
        "CSLSTerms": "csls",
        "csls_block_scores": "csls",
        "csls_retrieval": "csls",
        "csls_terms": "csls",
        "mean_topk_similarity": "csls",
        "l1_retrieval": "l1",
        "DEFAULT_PRECISION_KS": "metrics",
        "RetrievalMetrics": "metrics",
        "retrieval_metrics": "metrics",
        "DEFAULT_BLOCK_C": "topk",
        "DEFAULT_BLOCK_Q": "topk",
        "DEFAULT_K": "topk",
        "DEFAULT_TIE_TOL": "topk",
        "RetrievalResult": "topk",
        "cosine_retrieval": "topk",
        "count_at_or_above_target": "topk",
        "inverse_row_norms": "topk",
        "merge_topk": "topk",
        "normalize_rows": "topk",
        "partial_topk": "topk",
        "ranks_from_counts": "topk",
        "target_scores": "topk",
        "topk_of_scores": "topk",
        "SIMILARITIES": "similarity",
        "retrieve": "similarity",
        "RetrievalParams": "params",
    },
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
    "RetrievalParams",
    "RetrievalResult",
    "cosine_retrieval",
    "count_at_or_above_target",
    "csls_block_scores",
    "csls_retrieval",
    "csls_terms",
    "inverse_row_norms",
    "l1_retrieval",
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
