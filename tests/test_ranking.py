"""The one ranking rule (pipeline.ranking) and the three places that rank: retrieval, the
eigensolver's validation P@1 and the word-map neighbourhoods agree, ties included."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from pipeline.errors import InputDataError
from pipeline.linalg.monitor import ValidationSet
from pipeline.ranking import (
    DEFAULT_TIE_TOL,
    pessimistic_ranks,
    sort_topk,
    top1_indices,
    topk_of_scores,
)
from pipeline.retrieval import cosine_retrieval
from pipeline.wordmap.mapping import mutual_nn_dictionary, topk_dot


def _ranks_by_loop(scores: np.ndarray, targets: np.ndarray) -> np.ndarray:
    out = np.empty(len(targets))
    for i, t in enumerate(targets):
        if t < 0:
            out[i] = np.inf
            continue
        others = np.delete(scores[i], t)
        out[i] = 1 + np.count_nonzero(others >= scores[i, t])
    return out


def test_pessimistic_ranks_match_a_loop_with_ties_and_missing_targets():
    rng = np.random.default_rng(0)
    s = rng.integers(0, 4, size=(30, 12)).astype(np.float64)  # many exact ties
    t = rng.integers(-1, 12, size=30)
    np.testing.assert_array_equal(pessimistic_ranks(s, t), _ranks_by_loop(s, t))
    with pytest.raises(InputDataError):
        pessimistic_ranks(s, np.full(30, 12))


def test_pessimistic_ranks_equal_blocked_retrieval_ranks():
    rng = np.random.default_rng(1)
    q = rng.standard_normal((40, 8)).astype(np.float32)
    c = rng.standard_normal((90, 8)).astype(np.float32)
    c[60] = c[7]  # a duplicate of some queries' target
    t = rng.integers(-1, 90, size=40)
    t[:5] = 7
    res = cosine_retrieval(q, c, t, block_q=7, block_c=16)
    qn = q / np.linalg.norm(q, axis=1, keepdims=True)
    cn = c / np.linalg.norm(c, axis=1, keepdims=True)
    want = pessimistic_ranks(qn @ cn.T, t, tie_tol=DEFAULT_TIE_TOL)
    np.testing.assert_array_equal(res.ranks, want)
    assert np.all(res.ranks[:5] >= 2)  # the duplicate counts against the target


def test_top1_is_the_first_of_the_topk_order():
    rng = np.random.default_rng(2)
    s = rng.integers(0, 3, size=(50, 9)).astype(np.float32)
    idx = np.broadcast_to(np.arange(9), s.shape)
    _, want = sort_topk(s, idx, 1)
    np.testing.assert_array_equal(top1_indices(s, offset=5), want[:, 0] + 5)
    np.testing.assert_array_equal(topk_of_scores(s, 1)[1], topk_of_scores(s, 4)[1][:, :1])


# --- the three sites on one tie case ----------------------------------------------------------


def _tie_case() -> tuple[np.ndarray, np.ndarray]:
    """Two queries, two identical candidates: each query's target ties with the other one."""
    queries = np.array([[1.0, 0.0], [0.0, 1.0]])
    candidates = np.array([[1.0, 1.0], [1.0, 1.0]])
    return queries, candidates


def test_the_three_sites_agree_on_an_exact_tie():
    queries, candidates = _tie_case()
    targets = np.array([0, 1])
    # retrieval: a tie counts against the target, so neither query is a hit
    res = cosine_retrieval(queries, candidates, targets, k=2)
    np.testing.assert_array_equal(res.ranks, [2.0, 2.0])
    retrieval_p1 = float(np.mean(res.ranks == 1))
    # monitor: validation P@1 of the same embeddings (identity maps, concepts 0 and 1)
    validation = ValidationSet(
        {"a": sp.csr_matrix(queries), "b": sp.csr_matrix(candidates)},
        {"a": np.arange(2), "b": np.arange(2)},
    )
    _, per = validation.p_at_1({"a": np.eye(2), "b": np.eye(2)})
    assert per["a->b"] == retrieval_p1 == 0.0
    # word maps: the same top-k order (the tie keeps the lower index)
    qn = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    cn = candidates / np.linalg.norm(candidates, axis=1, keepdims=True)
    for k in (1, 2):
        np.testing.assert_array_equal(topk_dot(qn, cn, k, block=1), res.indices[:, :k])
    # mutual nearest neighbours: every CSLS score ties, so each side's nearest is index 0
    np.testing.assert_array_equal(mutual_nn_dictionary(qn, cn, k=1), [[0, 0]])


def test_topk_dot_keeps_the_lower_index_when_a_tie_straddles_the_cut():
    q = np.array([[1.0, 0.0]], np.float32)
    c = np.array([[0.5, 0.0], [1.0, 0.0], [0.5, 0.0], [0.5, 0.0]], np.float32)
    for block in (1, 2, 3, 4):
        np.testing.assert_array_equal(topk_dot(q, c, 2, block=block), [[1, 0]])
