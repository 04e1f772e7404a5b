"""Distributed retrieval (candidates over Spark) equals the local blocked engine."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.retrieval import cosine_retrieval, csls_retrieval
from pipeline.retrieval.spark import retrieve_spark


def _frame(spark, index: np.ndarray, vectors: np.ndarray, partitions: int):
    rows = [(int(i), v.tolist()) for i, v in zip(index, vectors)]
    df = spark.createDataFrame(rows, "index long, vector array<float>")
    return df.repartition(partitions)  # hash-partitioned: indices scattered over partitions


def _problem(seed: int, n_q: int = 60, n_c: int = 700, r: int = 12):
    rng = np.random.default_rng(seed)
    c = rng.standard_normal((n_c, r)).astype(np.float32)
    targets = rng.choice(n_c, size=n_q, replace=False)
    q = (c[targets] + 0.9 * rng.standard_normal((n_q, r))).astype(np.float32)
    c[5] = 0.0  # a zero candidate (cosine 0 with everything)
    c[7] = c[targets[0]]  # an exact duplicate of a target: a tie counted against it
    targets = targets.astype(np.int64)
    targets[3] = -1  # a query whose target is not among the candidates
    return q, c, targets


@pytest.mark.parametrize(
    ("similarity", "source"), [("cosine", None), ("csls", "queries"), ("csls", "collection")]
)
def test_spark_retrieval_equals_local(spark, similarity, source):
    q, c, targets = _problem(1)
    src = np.random.default_rng(2).standard_normal((90, q.shape[1])).astype(np.float32)
    # Non-contiguous, shuffled index values: local candidate i has the i-th smallest index.
    index = 3 * np.arange(c.shape[0], dtype=np.int64) + 11
    df = _frame(spark, index, c, partitions=4)
    kw = {"k": 10, "block_q": 16, "block_c": 50}
    if similarity == "cosine":
        local = cosine_retrieval(q, c, targets, **kw)
        dist = retrieve_spark("cosine", q, df, np.where(targets >= 0, index[targets], -1), **kw)
    else:
        extra = {"source": source, "source_embeddings": src if source == "collection" else None}
        local = csls_retrieval(q, c, targets, csls_k=10, **extra, **kw)
        dist = retrieve_spark(
            "csls", q, df, np.where(targets >= 0, index[targets], -1), csls_k=10, **extra, **kw
        )
        assert dist.csls_source == source
    np.testing.assert_array_equal(dist.ranks, local.ranks)
    np.testing.assert_array_equal(dist.indices, index[local.indices])
    np.testing.assert_allclose(dist.scores, local.scores, atol=2e-6)
    np.testing.assert_allclose(dist.target_scores, local.target_scores, atol=2e-6)
    assert dist.n_candidates == local.n_candidates == c.shape[0]
    assert np.isinf(dist.ranks[3])


def test_spark_retrieval_fewer_candidates_than_k(spark):
    rng = np.random.default_rng(3)
    q = rng.standard_normal((8, 5)).astype(np.float32)
    c = rng.standard_normal((6, 5)).astype(np.float32)
    targets = np.arange(8) % 6
    df = _frame(spark, np.arange(6), c, partitions=3)
    with pytest.warns(UserWarning):
        local = csls_retrieval(q, c, targets, k=10, csls_k=10)
    with pytest.warns(UserWarning):
        dist = retrieve_spark("csls", q, df, targets, k=10, csls_k=10)
    np.testing.assert_array_equal(dist.ranks, local.ranks)
    np.testing.assert_array_equal(dist.indices, local.indices)
    assert dist.indices.shape == (8, 6)
