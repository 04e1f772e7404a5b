"""Blocked exact retrieval against dense brute-force references (pure numpy, no Spark)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from pipeline.errors import InputDataError
from pipeline.retrieval import (
    SIMILARITIES,
    cosine_retrieval,
    count_at_or_above_target,
    merge_topk,
    normalize_rows,
    partial_topk,
    ranks_from_counts,
    retrieve,
    target_scores,
    topk_of_scores,
)

# --- independent dense references ------------------------------------------------------------


def dense_cosine(q: np.ndarray, c: np.ndarray) -> np.ndarray:
    """float64 cosine matrix; zero rows give 0."""
    q = np.asarray(q, dtype=np.float64)
    c = np.asarray(c, dtype=np.float64)
    qn = np.linalg.norm(q, axis=1)
    cn = np.linalg.norm(c, axis=1)
    qn[qn == 0] = 1.0
    cn[cn == 0] = 1.0
    return (q / qn[:, None]) @ (c / cn[:, None]).T


def dense_topk(s: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Full sort of every row by (score desc, index asc)."""
    idx = np.array([sorted(range(s.shape[1]), key=lambda j, row=row: (-row[j], j)) for row in s])
    idx = idx[:, :k]
    return np.take_along_axis(s, idx, axis=1), idx


def loop_ranks(s: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """rank = 1 + #(strictly greater) + #(other candidates with an equal score)."""
    out = []
    for i, t in enumerate(targets):
        if t < 0:
            out.append(np.inf)
            continue
        greater = sum(1 for j in range(s.shape[1]) if s[i, j] > s[i, t])
        equal = sum(1 for j in range(s.shape[1]) if j != t and s[i, j] == s[i, t])
        out.append(1.0 + greater + equal)
    return np.array(out)


def assert_topk_matches(ref: np.ndarray, scores: np.ndarray, idx: np.ndarray, k: int) -> None:
    """Scores match; indices match wherever the reference order is not a near-tie."""
    ref_s, ref_i = dense_topk(ref, min(k, ref.shape[1]))
    assert scores.shape == ref_s.shape and idx.shape == ref_i.shape
    np.testing.assert_allclose(scores, ref_s, atol=1e-5)
    np.testing.assert_allclose(np.take_along_axis(ref, idx, axis=1), scores, atol=1e-5)
    full = -np.sort(-ref, axis=1)
    for i in range(ref.shape[0]):
        for j in range(ref_s.shape[1]):
            gaps = [
                abs(full[i, j] - full[i, jj]) for jj in (j - 1, j + 1) if 0 <= jj < ref.shape[1]
            ]
            if min(gaps, default=1.0) > 1e-5:
                assert idx[i, j] == ref_i[i, j], (i, j)


def random_data(n_q: int, n_c: int, r: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((n_q, r)).astype(np.float32)
    c = rng.standard_normal((n_c, r)).astype(np.float32)
    targets = rng.integers(0, n_c, size=n_q)
    # Make targets findable: target = query + noise, so ranks spread over 1..n_c.
    c[targets] = q + rng.uniform(0.5, 3.0, size=(n_q, 1)).astype(np.float32) * c[targets]
    return q, c, targets


def sign_data(
    n_q: int, n_c: int, seed: int, r: int = 16
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """±1 entries with r = 16: normalised entries are ±1/4, every cosine is exact in float32.

    Cosines are multiples of 1/8, so ties are plentiful and every computation order agrees.
    """
    rng = np.random.default_rng(seed)
    q = rng.choice([-1.0, 1.0], size=(n_q, r)).astype(np.float32)
    c = rng.choice([-1.0, 1.0], size=(n_c, r)).astype(np.float32)
    targets = rng.integers(0, n_c, size=n_q)
    return q, c, targets


BLOCKS = [(1, 1), (1, 7), (3, 13), (7, 64), (64, 5), (1000, 1000)]


# --- top-k -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("block_q", "block_c"), BLOCKS)
@pytest.mark.parametrize("k", [1, 5, 10])
def test_blocked_topk_equals_dense_random(block_q: int, block_c: int, k: int) -> None:
    q, c, targets = random_data(23, 157, 12, seed=k + block_q)
    res = cosine_retrieval(q, c, targets, k=k, block_q=block_q, block_c=block_c)
    assert res.scores.dtype == np.float32 and res.indices.dtype == np.int64
    assert_topk_matches(dense_cosine(q, c), res.scores, res.indices, k)


@pytest.mark.parametrize(("block_q", "block_c"), BLOCKS)
def test_blocked_topk_exact_ties_broken_by_lower_index(block_q: int, block_c: int) -> None:
    q, c, targets = sign_data(19, 211, seed=3)
    c[50] = c[10]  # duplicates
    c[120] = c[10]
    c[[5, 77]] = 0.0  # zero candidates (cosine 0)
    q[4] = 0.0  # zero query: everything ties at 0
    res = cosine_retrieval(q, c, targets, k=10, block_q=block_q, block_c=block_c)
    ref_s, ref_i = dense_topk(dense_cosine(q, c), 10)
    np.testing.assert_array_equal(res.indices, ref_i)
    np.testing.assert_array_equal(res.scores, ref_s.astype(np.float32))
    np.testing.assert_array_equal(res.indices[4], np.arange(10))


def test_topk_of_scores_straddling_ties_and_offset() -> None:
    s = np.array([[0.5, 0.9, 0.5, 0.5, 0.1, 0.5], [1.0, 1.0, 1.0, 1.0, 1.0, 1.0]], np.float32)
    scores, idx = topk_of_scores(s, 3, offset=100)
    np.testing.assert_array_equal(idx, [[101, 100, 102], [100, 101, 102]])
    np.testing.assert_array_equal(scores, np.array([[0.9, 0.5, 0.5], [1.0, 1.0, 1.0]], np.float32))
    # k larger than the block: everything, sorted
    scores, idx = topk_of_scores(s[:1], 50)
    np.testing.assert_array_equal(idx, [[1, 0, 2, 3, 5, 4]])


def test_k_larger_than_candidates() -> None:
    q, c, targets = random_data(5, 4, 6, seed=1)
    res = cosine_retrieval(q, c, targets, k=10, block_c=3)
    assert res.indices.shape == (5, 4)
    assert_topk_matches(dense_cosine(q, c), res.scores, res.indices, 10)


def test_adversarial_candidate_order_uses_dense_fallback() -> None:
    # Candidates in increasing similarity to query 0: every block improves its whole top-k.
    q, c, targets = random_data(3, 400, 8, seed=5)
    order = np.argsort(dense_cosine(q[:1], c)[0], kind="stable")
    c = c[order]
    targets = np.argsort(order)[targets]
    res = cosine_retrieval(q, c, targets, k=10, block_c=16)
    assert_topk_matches(dense_cosine(q, c), res.scores, res.indices, 10)
    np.testing.assert_array_equal(res.ranks, loop_ranks(dense_cosine(q, c), targets))


@pytest.mark.parametrize("n_parts", [1, 2, 5, 37])
def test_partial_and_merge_any_order(n_parts: int) -> None:
    q, c, _ = sign_data(11, 150, seed=9)
    c[140] = c[3]
    qn, cn = normalize_rows(q), normalize_rows(c)
    bounds = np.linspace(0, 150, n_parts + 1).astype(int)
    partials = [partial_topk(qn, cn[lo:hi], 10, lo) for lo, hi in itertools.pairwise(bounds)]
    ref_s, ref_i = dense_topk(dense_cosine(q, c), 10)
    rng = np.random.default_rng(0)
    for perm in (range(n_parts), rng.permutation(n_parts)):
        s, i = merge_topk([partials[p] for p in perm], 10)
        np.testing.assert_array_equal(i, ref_i)
        np.testing.assert_array_equal(s, ref_s.astype(np.float32))


# --- ranks -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("block_q", "block_c"), BLOCKS)
def test_ranks_random_match_loop(block_q: int, block_c: int) -> None:
    q, c, targets = random_data(31, 97, 10, seed=block_c)
    targets[[3, 17]] = -1
    res = cosine_retrieval(q, c, targets, block_q=block_q, block_c=block_c)
    expected = loop_ranks(dense_cosine(q, c), targets)
    np.testing.assert_array_equal(res.ranks, expected)
    assert res.n_missing_targets == 2
    assert np.isnan(res.target_scores[[3, 17]]).all()
    assert np.all(expected[np.isfinite(expected)] >= 1) and len(set(expected)) > 5


@pytest.mark.parametrize(("block_q", "block_c"), BLOCKS)
def test_ranks_pessimistic_with_duplicates_and_zeros(block_q: int, block_c: int) -> None:
    q, c, targets = sign_data(12, 60, seed=4)
    targets[0], targets[1], targets[2], targets[3] = 10, 20, 30, -1
    q[0] = c[10]
    c[[11, 40]] = c[10]  # two duplicates of query 0's target: 3-way tie at the top
    q[1] = 0.0  # zero query: all 60 candidates tie at 0
    q[2] = c[30]
    c[30] = 0.0  # zero target: everything with cosine >= 0 ranks ahead of it
    res = cosine_retrieval(q, c, targets, block_q=block_q, block_c=block_c)
    dense = dense_cosine(q, c)
    expected = loop_ranks(dense, targets)
    np.testing.assert_array_equal(res.ranks, expected)
    assert res.ranks[0] == 3.0  # never rank 1 with two identical competitors
    assert res.ranks[1] == 60.0
    assert res.ranks[2] == 1 + np.count_nonzero(np.delete(dense[2], 30) >= 0)
    assert res.ranks[3] == np.inf


def test_all_zero_embeddings_rank_last() -> None:
    q = np.zeros((4, 5), np.float32)
    c = np.zeros((9, 5), np.float32)
    res = cosine_retrieval(q, c, np.array([0, 3, 8, -1]), block_c=4)
    np.testing.assert_array_equal(res.ranks, [9, 9, 9, np.inf])
    assert not np.isnan(res.scores).any() and (res.scores == 0).all()


def test_duplicate_target_tie_survives_rounding() -> None:
    # Gaussian data: the dot product giving the target's score and the blocked GEMM round
    # differently; an exact duplicate of the target must still count as a tie.
    rng = np.random.default_rng(11)
    q = rng.standard_normal((64, 300)).astype(np.float32)
    c = rng.standard_normal((500, 300)).astype(np.float32)
    targets = np.arange(64)
    c[:64] = q + 0.1 * c[:64]
    c[100:164] = c[:64]  # duplicates
    res = cosine_retrieval(q, c, targets, block_q=5, block_c=33)
    np.testing.assert_array_equal(res.ranks, 2.0)
    strict = cosine_retrieval(q, c, targets, block_q=5, block_c=33, tie_tol=0.0)
    assert np.all((strict.ranks == 1) | (strict.ranks == 2))


def test_distributed_counts_add_up() -> None:
    q, c, targets = random_data(17, 120, 9, seed=2)
    targets[5] = -1
    qn, cn = normalize_rows(q), normalize_rows(c)
    ts = target_scores(qn, cn[np.where(targets >= 0, targets, 0)], targets)
    counts = np.zeros(17, np.int64)
    for lo in (90, 0, 45):  # partitions in any order
        counts += count_at_or_above_target(qn @ cn[lo : lo + 45].T, ts, targets, lo)
    np.testing.assert_array_equal(
        ranks_from_counts(counts, targets), loop_ranks(dense_cosine(q, c), targets)
    )


def test_float64_and_int_inputs() -> None:
    q, c, targets = random_data(9, 70, 6, seed=8)
    r32 = cosine_retrieval(q, c, targets, block_c=16)
    r64 = cosine_retrieval(q.astype(np.float64), c.astype(np.float64), targets, block_c=16)
    np.testing.assert_array_equal(r32.indices, r64.indices)
    np.testing.assert_array_equal(r32.ranks, r64.ranks)
    qi, ci, ti = sign_data(5, 30, seed=1)
    ri = cosine_retrieval(qi.astype(np.int8), ci.astype(np.int8), ti)
    np.testing.assert_array_equal(ri.ranks, loop_ranks(dense_cosine(qi, ci), ti))


def test_normalize_rows_zero_rows_stay_zero() -> None:
    # float32 sums of squares that underflow (1e-30) or overflow (3e20) are redone in float64
    x = np.array([[3.0, 4.0], [0.0, 0.0], [1e-30, 0.0], [3e20, -4e20]], np.float32)
    out = normalize_rows(x)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, [[0.6, 0.8], [0, 0], [1, 0], [0.6, -0.8]], rtol=1e-6)
    np.testing.assert_allclose(normalize_rows(x.astype(np.float64)), out, rtol=1e-6)


def test_retrieve_registry() -> None:
    q, c, targets = random_data(6, 40, 5, seed=3)
    assert set(SIMILARITIES) == {"cosine", "csls", "l1"}
    res = retrieve("cosine", q, c, targets, k=3)
    assert res.similarity == "cosine" and res.csls_source is None
    np.testing.assert_array_equal(res.indices, cosine_retrieval(q, c, targets, k=3).indices)
    with pytest.raises(InputDataError, match="similarity must be one of"):
        retrieve("dot", q, c, targets)


# --- validation ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"queries": np.zeros(5, np.float32)}, "queries must be a 2-D"),
        ({"queries": np.zeros((0, 4), np.float32)}, "queries is empty"),
        ({"candidates": np.zeros((8, 3), np.float32)}, "embedding dimension 3, expected 4"),
        ({"candidates": np.full((8, 4), np.nan, np.float32)}, "candidates row 0 contains NaN"),
        ({"queries": np.array([["a"] * 4] * 3)}, "real numbers"),
        ({"targets": np.array([0, 1])}, "length n_queries=3"),
        ({"targets": np.array([0, 1, 8])}, r"targets\[2\] = 8 is out of range"),
        ({"targets": np.array([0, -2, 1])}, "out of range"),
        ({"targets": np.array([0.0, 1.0, 2.0])}, "integer candidate indices"),
        ({"k": 0}, "k must be a positive integer"),
        ({"k": True}, "k must be a positive integer"),
        ({"block_c": 0}, "block_c must be a positive integer"),
        ({"block_q": 2.5}, "block_q must be a positive integer"),
        ({"tie_tol": -1.0}, "tie_tol must be a non-negative"),
    ],
)
def test_validation(kwargs: dict, match: str) -> None:
    args = {
        "queries": np.ones((3, 4), np.float32),
        "candidates": np.ones((8, 4), np.float32),
        "targets": np.array([0, 1, -1]),
    }
    args.update({k: kwargs[k] for k in ("queries", "candidates", "targets") if k in kwargs})
    extra = {k: v for k, v in kwargs.items() if k not in args}
    with pytest.raises(InputDataError, match=match):
        cosine_retrieval(args["queries"], args["candidates"], args["targets"], **extra)


def test_merge_topk_validation() -> None:
    with pytest.raises(InputDataError, match="at least one partial"):
        merge_topk([], 3)
    a = (np.zeros((2, 3)), np.zeros((2, 3), np.int64))
    with pytest.raises(InputDataError, match="query rows"):
        merge_topk([a, (np.zeros((3, 3)), np.zeros((3, 3), np.int64))], 3)
    with pytest.raises(InputDataError, match="equal 2-D shapes"):
        merge_topk([(np.zeros((2, 3)), np.zeros((2, 2), np.int64))], 3)
