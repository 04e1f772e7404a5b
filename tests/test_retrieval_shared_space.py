"""Densifying sparse cross-side embeddings keeps every cross-side cosine (shared_space)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from pipeline.errors import InputDataError
from pipeline.retrieval import retrieve
from pipeline.retrieval.shared_space import densify_cross_sides


def _rows(n, width, density, seed):
    x = sp.random(n, width, density=density, format="csr", random_state=seed, dtype=np.float64)
    norms = np.sqrt(np.asarray(x.multiply(x).sum(axis=1)).ravel())
    norms[norms == 0] = 1
    return sp.csr_matrix(sp.diags(1 / norms) @ x)


def test_cross_side_products_and_norms_are_exact():
    q, c, s = _rows(30, 2000, 0.01, 1), _rows(80, 2000, 0.01, 2), _rows(20, 2000, 0.01, 3)
    dq, dc, ds = densify_cross_sides(q, c, s, max_bytes=1 << 30)
    assert dq.shape[1] == dc.shape[1] == ds.shape[1] < 2000
    np.testing.assert_allclose(dq @ dc.T, (q @ c.T).toarray(), atol=1e-6)
    np.testing.assert_allclose(ds @ dc.T, (s @ c.T).toarray(), atol=1e-6)
    for dense, sparse in ((dq, q), (dc, c), (ds, s)):
        np.testing.assert_allclose(
            np.linalg.norm(dense, axis=1), sp.linalg.norm(sparse, axis=1), atol=1e-6
        )


@pytest.mark.parametrize("measure", ["cosine", "csls"])
def test_retrieval_on_densified_rows_equals_retrieval_on_the_full_vectors(measure):
    q, c = _rows(40, 600, 0.03, 4), _rows(120, 600, 0.03, 5)
    targets = np.arange(40)
    dense_q, dense_c = (x.toarray().astype(np.float32) for x in (q, c))
    full = retrieve(measure, dense_q, dense_c, targets)
    dq, dc, _ = densify_cross_sides(q, c, max_bytes=1 << 30)
    dense = retrieve(measure, dq, dc, targets)
    np.testing.assert_array_equal(dense.ranks, full.ranks)


def test_zero_rows_stay_zero_and_the_size_limit_is_enforced():
    q = sp.csr_matrix(np.array([[0.0, 0.0, 0.0], [0.6, 0.8, 0.0]]))
    c = sp.csr_matrix(np.array([[0.0, 1.0, 0.0]]))
    dq, dc, _ = densify_cross_sides(q, c, max_bytes=1 << 20)
    assert not dq[0].any()
    np.testing.assert_allclose(dq @ dc.T, [[0.0], [0.8]], atol=1e-7)
    with pytest.raises(InputDataError, match="sparse_dense_limit_mb"):
        densify_cross_sides(q, c, max_bytes=8)
