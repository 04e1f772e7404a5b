"""P@k and MRR against a direct loop-based computation (pure numpy, no Spark)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pipeline.errors import InputDataError
from pipeline.retrieval import cosine_retrieval, retrieval_metrics


def loop_metrics(ranks: list[float], ks: list[int]) -> dict[str, float]:
    n = len(ranks)
    out: dict[str, float] = {}
    for k in ks:
        hits = 0
        for r in ranks:
            if r <= k:
                hits += 1
        out[f"P@{k}"] = hits / n
    total = 0.0
    for r in ranks:
        total += 0.0 if math.isinf(r) else 1.0 / r
    out["MRR"] = total / n
    return out


@pytest.mark.parametrize("seed", range(5))
def test_metrics_match_loop(seed: int) -> None:
    rng = np.random.default_rng(seed)
    ranks = rng.integers(1, 30, size=57).astype(float)
    ranks[rng.random(57) < 0.1] = np.inf
    ks = [1, 3, 5, 10, 100]
    m = retrieval_metrics(ranks, ks)
    ref = loop_metrics(list(ranks), ks)
    for k in ks:
        assert m.precision_at[k] == pytest.approx(ref[f"P@{k}"], abs=1e-12)
    assert m.mrr == pytest.approx(ref["MRR"], abs=1e-12)
    assert m.n_queries == 57
    assert m.n_missing_targets == int(np.isinf(ranks).sum())


def test_defaults_and_records() -> None:
    m = retrieval_metrics(np.array([1, 2, 6, 11, np.inf]))
    assert m.precision_at == {1: 0.2, 5: 0.4, 10: 0.6}
    assert m.mrr == pytest.approx((1 + 1 / 2 + 1 / 6 + 1 / 11) / 5)
    d = m.as_dict()
    assert d["P@1"] == 0.2 and d["n_queries"] == 5 and d["n_missing_targets"] == 1
    recs = m.to_records()
    assert recs[-1] == {"measure": "mrr", "k": None, "value": m.mrr}
    assert [r["k"] for r in recs[:-1]] == [1, 5, 10]


def test_end_to_end_perfect_and_degenerate() -> None:
    rng = np.random.default_rng(0)
    c = rng.standard_normal((100, 8)).astype(np.float32)
    targets = np.arange(20)
    perfect = retrieval_metrics(cosine_retrieval(c[:20], c, targets).ranks)
    assert perfect.precision_at[1] == 1.0 and perfect.mrr == 1.0
    zeros = retrieval_metrics(
        cosine_retrieval(np.zeros((20, 8), np.float32), np.zeros((100, 8)), targets).ranks
    )
    assert zeros.precision_at[10] == 0.0 and zeros.mrr == pytest.approx(0.01)


@pytest.mark.parametrize(
    ("ranks", "ks", "match"),
    [
        (np.array([]), (1,), "no queries"),
        (np.ones((2, 2)), (1,), "1-D"),
        (np.array([0.0, 1.0]), (1,), ">= 1"),
        (np.array([np.nan]), (1,), ">= 1"),
        (np.array([1.0]), (0,), "positive integers"),
        (np.array([1.0]), (), "at least one"),
    ],
)
def test_validation(ranks: np.ndarray, ks: tuple, match: str) -> None:
    with pytest.raises(InputDataError, match=match):
        retrieval_metrics(ranks, ks)
