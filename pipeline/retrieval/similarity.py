"""The similarities by name, chosen in one place: :data:`SIMILARITIES` and :func:`retrieve`."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pipeline.errors import InputDataError
from pipeline.retrieval.csls import csls_retrieval
from pipeline.retrieval.l1 import l1_retrieval
from pipeline.retrieval.topk import RetrievalResult, cosine_retrieval

__all__ = ["SIMILARITIES", "retrieve"]

SIMILARITIES: dict[str, Callable[..., RetrievalResult]] = {
    "cosine": cosine_retrieval,
    "csls": csls_retrieval,
    "l1": l1_retrieval,
}
"""Similarity name → retrieval function (same positional signature; CSLS adds keywords).
``l1``: minus the L1 distance, the topic models' similarity (:mod:`pipeline.retrieval.l1`)."""


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
    similarity : {"cosine", "csls", "l1"}
    queries : ndarray of shape (n_q, r)
    candidates : ndarray of shape (n_c, r)
    targets : ndarray of shape (n_q,), int
        ``-1`` for a target missing from the candidates.
    **kwargs
        Keyword arguments of :func:`cosine_retrieval` / :func:`csls_retrieval` /
        :func:`l1_retrieval`.

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
