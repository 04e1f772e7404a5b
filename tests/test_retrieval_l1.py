"""L1 retrieval (the topic models' similarity) against a dense reference, through the
similarity registry, with the project's ranking rule."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.errors import InputDataError
from pipeline.ranking import pessimistic_ranks
from pipeline.retrieval import SIMILARITIES, retrieve
from pipeline.retrieval.l1 import l1_retrieval


def test_l1_retrieval_equals_the_dense_reference_for_any_blocks():
    rng = np.random.default_rng(0)
    q = rng.dirichlet(np.ones(6), size=37).astype(np.float32)
    c = rng.dirichlet(np.ones(6), size=101).astype(np.float32)
    c[5] = c[7]  # an exact tie ...
    q[0] = c[5]  # ... at distance 0 from query 0, whose target is 5
    t = rng.integers(0, 101, size=37)
    t[0], t[1] = 5, -1
    dense = -np.abs(q[:, None, :].astype(np.float64) - c[None, :, :]).sum(axis=2)
    want = pessimistic_ranks(dense, t, tie_tol=2e-6)
    for bq, bc in ((1024, 4096), (8, 16), (1, 7)):
        res = l1_retrieval(q, c, t, k=10, block_q=bq, block_c=bc)
        np.testing.assert_array_equal(res.ranks, want)
        order = np.argsort(-dense, axis=1, kind="stable")[:, :10]
        np.testing.assert_array_equal(res.indices, order)
        np.testing.assert_allclose(res.scores, np.take_along_axis(dense, order, 1), atol=1e-5)
        assert res.similarity == "l1" and res.csls_source is None
    assert res.ranks[0] == 2  # the tie with candidate 7 counts against the target
    assert np.isinf(res.ranks[1]) and np.isnan(res.target_scores[1])


def test_l1_is_a_registered_similarity_and_checks_its_inputs():
    assert "l1" in SIMILARITIES
    q = np.eye(3, dtype=np.float32)
    res = retrieve("l1", q, q, np.arange(3))
    assert np.all(res.ranks == 1)
    with pytest.raises(InputDataError, match="NaN"):
        retrieve("l1", q * np.nan, q, np.arange(3))
    with pytest.raises(InputDataError, match="similarity must be one of"):
        retrieve("l2", q, q, np.arange(3))
