"""CSLS terms, scores, top-k and ranks against the dense formula (pure numpy, no Spark)."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.errors import InputDataError
from pipeline.retrieval import (
    count_at_or_above_target,
    csls_block_scores,
    csls_retrieval,
    csls_terms,
    mean_topk_similarity,
    merge_topk,
    normalize_rows,
    ranks_from_counts,
    retrieve,
    topk_of_scores,
)
from tests.test_retrieval_topk import (
    assert_topk_matches,
    dense_cosine,
    loop_ranks,
    random_data,
)


def dense_mean_topk(s: np.ndarray, k: int) -> np.ndarray:
    """Mean of the k largest entries of each row (full sort)."""
    return np.array([np.mean(sorted(row, reverse=True)[:k]) for row in s])


def dense_csls(q: np.ndarray, c: np.ndarray, source: np.ndarray, k: int) -> np.ndarray:
    """csls(q, c) = 2 cos(q, c) - r_T(q) - r_S(c), on the full float64 matrices."""
    cos = dense_cosine(q, c)
    r_t = dense_mean_topk(cos, k)
    r_s = dense_mean_topk(dense_cosine(c, source), k)
    return 2 * cos - r_t[:, None] - r_s[None, :]


BLOCKS = [(1, 1), (4, 9), (13, 64), (500, 500)]


@pytest.mark.parametrize(("block_q", "block_c"), BLOCKS)
def test_mean_topk_similarity(block_q: int, block_c: int) -> None:
    q, c, _ = random_data(21, 83, 7, seed=1)
    got = mean_topk_similarity(q, c, 10, block_x=block_q, block_y=block_c)
    assert got.dtype == np.float32 and got.shape == (21,)
    np.testing.assert_allclose(got, dense_mean_topk(dense_cosine(q, c), 10), atol=1e-6)


@pytest.mark.parametrize(("block_q", "block_c"), BLOCKS)
def test_csls_terms_both_sources(block_q: int, block_c: int) -> None:
    q, c, _ = random_data(25, 90, 8, seed=2)
    src = np.random.default_rng(3).standard_normal((140, 8)).astype(np.float32)
    t_q = csls_terms(q, c, block_q=block_q, block_c=block_c)
    assert t_q.source == "queries" and t_q.n_source == 25 and t_q.k == 10
    np.testing.assert_allclose(t_q.r_target, dense_mean_topk(dense_cosine(q, c), 10), atol=1e-6)
    np.testing.assert_allclose(t_q.r_source, dense_mean_topk(dense_cosine(c, q), 10), atol=1e-6)
    t_s = csls_terms(
        q, c, k=5, source="collection", source_embeddings=src, block_q=block_q, block_c=block_c
    )
    assert t_s.source == "collection" and t_s.n_source == 140 and t_s.k_source == 5
    np.testing.assert_allclose(t_s.r_target, dense_mean_topk(dense_cosine(q, c), 5), atol=1e-6)
    np.testing.assert_allclose(t_s.r_source, dense_mean_topk(dense_cosine(c, src), 5), atol=1e-6)


@pytest.mark.parametrize(("block_q", "block_c"), BLOCKS)
@pytest.mark.parametrize("source", ["queries", "collection"])
def test_csls_retrieval_matches_dense_formula(block_q: int, block_c: int, source: str) -> None:
    q, c, targets = random_data(30, 120, 10, seed=block_c)
    targets[[0, 7]] = -1
    src = np.random.default_rng(4).standard_normal((75, 10)).astype(np.float32)
    src_emb = src if source == "collection" else None
    res = csls_retrieval(
        q,
        c,
        targets,
        k=10,
        source=source,
        source_embeddings=src_emb,
        block_q=block_q,
        block_c=block_c,
    )
    assert res.similarity == "csls" and res.csls_source == source and res.csls_k == 10
    ref = dense_csls(q, c, src if source == "collection" else q, 10)
    assert_topk_matches(ref, res.scores, res.indices, 10)
    np.testing.assert_array_equal(res.ranks, loop_ranks(ref, targets))
    valid = targets >= 0
    np.testing.assert_allclose(res.target_scores[valid], ref[valid, targets[valid]], atol=1e-5)
    assert res.n_missing_targets == 2


def test_csls_changes_ranking_against_hubs() -> None:
    # A hub candidate close to every query wins under cosine, is demoted by CSLS.
    rng = np.random.default_rng(7)
    q = rng.standard_normal((40, 16)).astype(np.float32)
    c = rng.standard_normal((200, 16)).astype(np.float32)
    c[0] = q.mean(axis=0) * 10
    cos = retrieve("cosine", q, c, np.zeros(40, np.int64) - 1)
    csls = retrieve("csls", q, c, np.zeros(40, np.int64) - 1)
    assert np.count_nonzero(cos.indices[:, 0] == 0) > np.count_nonzero(csls.indices[:, 0] == 0)


def test_csls_block_scores_formula() -> None:
    q, c, _ = random_data(6, 15, 5, seed=5)
    qn, cn = normalize_rows(q), normalize_rows(c)
    rt = np.linspace(0.1, 0.6, 6, dtype=np.float32)
    rs = np.linspace(-0.2, 0.3, 15, dtype=np.float32)
    got = csls_block_scores(qn, cn, rt, rs)
    np.testing.assert_allclose(got, 2 * dense_cosine(q, c) - rt[:, None] - rs, atol=1e-6)
    # distributed pattern: per-block CSLS top-k with global offsets
    s, i = topk_of_scores(got[:, 5:], 3, offset=5)
    assert (i >= 5).all() and s.shape == (6, 3)


def test_csls_duplicate_target_and_zero_rows() -> None:
    rng = np.random.default_rng(9)
    q = rng.standard_normal((20, 50)).astype(np.float32)
    c = rng.standard_normal((300, 50)).astype(np.float32)
    targets = np.arange(20)
    c[:20] = q + 0.2 * c[:20]
    c[200:220] = c[:20]  # exact duplicates of each target
    c[250] = 0.0
    q[19] = 0.0  # zero query: all cosines 0, CSLS order = -r_S
    res = csls_retrieval(q, c, targets, block_q=3, block_c=17)
    assert not np.isnan(res.scores).any() and not np.isnan(res.target_scores).any()
    assert (res.ranks[:19] >= 2).all()  # the duplicate always ties: never rank 1
    np.testing.assert_array_equal(res.ranks[:19], 2.0)
    ref = dense_csls(q, c, q, 10)
    assert_topk_matches(ref, res.scores, res.indices, 10)


def test_small_sets_warn_and_use_all_rows() -> None:
    q, c, targets = random_data(4, 6, 5, seed=6)
    with pytest.warns(UserWarning, match="exceeds the 4 rows of the source set"):
        terms = csls_terms(q, c, k=5)
    assert terms.k_source == 4 and terms.k_target == 5
    with pytest.warns(UserWarning, match="exceeds the 6 rows of the candidate set"):
        res = csls_retrieval(
            q, c, targets, csls_k=8, source="collection", source_embeddings=np.ones((9, 5))
        )
    assert res.indices.shape == (4, 6)


def test_float32_input_kept() -> None:
    q, c, targets = random_data(12, 40, 6, seed=7)
    res = csls_retrieval(q, c, targets)
    assert res.scores.dtype == np.float32 and res.target_scores.dtype == np.float32
    res64 = csls_retrieval(q.astype(np.float64), c.astype(np.float64), targets)
    np.testing.assert_array_equal(res.indices, res64.indices)
    np.testing.assert_allclose(res.scores, res64.scores, atol=1e-6)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"source": "candidates"}, "source must be one of"),
        ({"source": "collection"}, "needs source_embeddings"),
        ({"source_embeddings": np.ones((5, 4))}, "source_embeddings must be None"),
        (
            {"source": "collection", "source_embeddings": np.ones((5, 3))},
            "source_embeddings has embedding dimension 3",
        ),
        ({"csls_k": 0}, "csls_k must be a positive integer"),
    ],
)
def test_validation(kwargs: dict, match: str) -> None:
    q = np.ones((3, 4), np.float32)
    c = np.ones((8, 4), np.float32)
    with pytest.raises(InputDataError, match=match):
        csls_retrieval(q, c, np.array([0, 1, 2]), **kwargs)
    terms_kwargs = {k: v for k, v in kwargs.items() if k != "csls_k"}
    if terms_kwargs:
        with pytest.raises(InputDataError, match=match):
            csls_terms(q, c, **terms_kwargs)
    with pytest.raises(InputDataError, match="must match"):
        csls_block_scores(q, c, np.zeros(3), np.zeros(7))


def test_all_zero_embeddings_rank_last() -> None:
    q = np.zeros((12, 4), np.float32)
    c = np.zeros((30, 4), np.float32)
    res = csls_retrieval(q, c, np.arange(12), block_c=7)
    np.testing.assert_array_equal(res.ranks, 30.0)
    assert (res.scores == 0).all()


def test_distributed_primitives_reproduce_csls_retrieval() -> None:
    """The recipe a partitioned (Spark) version follows gives the local result."""
    q, c, targets = random_data(20, 130, 9, seed=12)
    targets[3] = -1
    local = csls_retrieval(q, c, targets, k=5)
    terms = csls_terms(q, c)  # r_T: merged partial top-k; r_S: local to each partition
    qn, cn = normalize_rows(q), normalize_rows(c)
    safe = np.where(targets >= 0, targets, 0)
    t_scores = csls_block_scores(qn, cn[safe], terms.r_target, terms.r_source[safe]).diagonal()
    t_scores = np.where(targets >= 0, t_scores, np.nan)
    partials, counts = [], np.zeros(20, np.int64)
    for lo, hi in ((100, 130), (0, 40), (40, 100)):  # partitions in any order
        block = csls_block_scores(qn, cn[lo:hi], terms.r_target, terms.r_source[lo:hi])
        partials.append(topk_of_scores(block, 5, offset=lo))
        counts += count_at_or_above_target(block, t_scores, targets, lo)
    scores, indices = merge_topk(partials, 5)
    np.testing.assert_array_equal(indices, local.indices)
    np.testing.assert_allclose(scores, local.scores, atol=1e-6)
    np.testing.assert_array_equal(ranks_from_counts(counts, targets), local.ranks)
