"""Retrieval metrics from target ranks: precision at k (P@k) and mean reciprocal rank (MRR).

Every query counts in the denominator, including those whose true target is missing from the
candidate set (rank ``+inf``: a miss for every P@k, reciprocal rank 0), as in the paper's
protocol (Sec. 4.2). Ranks come from :mod:`.retrieval` (pessimistic tie-breaking).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from pipeline.errors import InputDataError

__all__ = ["DEFAULT_PRECISION_KS", "RetrievalMetrics", "retrieval_metrics"]

DEFAULT_PRECISION_KS: tuple[int, ...] = (1, 5, 10)
"""Cut-offs k reported as P@k by default."""


@dataclass(frozen=True)
class RetrievalMetrics:
    """P@k and MRR of one retrieval run.

    Attributes
    ----------
    precision_at : dict of int to float
        ``P@k`` = fraction of queries whose target has rank ≤ k, for each requested k.
    mrr : float
        Mean over queries of ``1 / rank`` (0 for a missing target).
    n_queries : int
        Number of queries (the denominator of every metric).
    n_missing_targets : int
        Queries whose target was not among the candidates (counted as misses).
    """

    precision_at: dict[int, float] = field(default_factory=dict)
    mrr: float = 0.0
    n_queries: int = 0
    n_missing_targets: int = 0

    def as_dict(self) -> dict[str, float | int]:
        """Flat dict: ``{"P@1": ..., "P@5": ..., "MRR": ..., "n_queries": ..., ...}``."""
        out: dict[str, float | int] = {f"P@{k}": v for k, v in self.precision_at.items()}
        out["MRR"] = self.mrr
        out["n_queries"] = self.n_queries
        out["n_missing_targets"] = self.n_missing_targets
        return out

    def to_records(self) -> list[dict[str, object]]:
        """One record per measure: ``{"measure": "precision"|"mrr", "k": int|None, "value"}``.

        The (measure, k, value) columns of the ``evaluation`` dataset.
        """
        records: list[dict[str, object]] = [
            {"measure": "precision", "k": k, "value": v} for k, v in self.precision_at.items()
        ]
        records.append({"measure": "mrr", "k": None, "value": self.mrr})
        return records


def _check_ks(ks: Iterable[int]) -> tuple[int, ...]:
    out = []
    for k in ks:
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise InputDataError(f"precision cut-offs must be positive integers; got {k!r}")
        out.append(int(k))
    if not out:
        raise InputDataError("at least one precision cut-off k is needed")
    return tuple(sorted(set(out)))


def retrieval_metrics(
    ranks: np.ndarray, ks: Iterable[int] = DEFAULT_PRECISION_KS
) -> RetrievalMetrics:
    """Compute P@k for each ``k`` in ``ks`` and MRR from target ranks.

    Parameters
    ----------
    ranks : ndarray of shape (n_queries,)
        Rank of each query's true target (1 = best), ``inf`` when the target is missing.
    ks : iterable of int
        Cut-offs for P@k (default 1, 5, 10).

    Returns
    -------
    RetrievalMetrics

    Raises
    ------
    InputDataError
        If ``ranks`` is empty, not 1-D, or holds NaN or values below 1.
    """
    r = np.asarray(ranks, dtype=np.float64)
    if r.ndim != 1:
        raise InputDataError(f"ranks must be a 1-D array; got shape {r.shape}")
    if r.size == 0:
        raise InputDataError("ranks is empty: no queries to evaluate")
    if np.any(np.isnan(r)) or np.any(r < 1):
        raise InputDataError("ranks must be >= 1 (or inf for a missing target); found NaN or < 1")
    ks = _check_ks(ks)
    n = int(r.size)
    return RetrievalMetrics(
        precision_at={k: float(np.count_nonzero(r <= k)) / n for k in ks},
        mrr=float(np.mean(1.0 / r)),
        n_queries=n,
        n_missing_targets=int(np.count_nonzero(np.isinf(r))),
    )
