"""CL-LSI against a dense SVD of the concept × stacked-term matrix."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg as sla

from pipeline.backends.local import LocalCorpusBackend
from pipeline.baselines import fit_cl_lsi
from tests.problems import PROBLEMS

TIGHT = {"eig_rtol": 1e-10, "eig_maxiter": 500}


def dense_concept_matrix(corpus, k, *, center):
    """D = YᵀX (K × p) from dense blocks, or ŶᵀX̂ with explicit global centring."""
    xs, ys = [], []
    p = sum(x.shape[1] for x, _ in corpus.values())
    col = 0
    for x, concepts in corpus.values():
        xd = np.zeros((x.shape[0], p))
        xd[:, col : col + x.shape[1]] = x.astype(np.float64).toarray()
        col += x.shape[1]
        y = np.zeros((x.shape[0], k))
        y[np.arange(x.shape[0]), concepts] = 1.0
        xs.append(xd)
        ys.append(y)
    x, y = np.vstack(xs), np.vstack(ys)
    if center:
        x, y = x - x.mean(axis=0), y - y.mean(axis=0)
    return y.T @ x


@pytest.mark.parametrize("name", sorted(PROBLEMS))
@pytest.mark.parametrize("side", ["terms", "concepts"])
@pytest.mark.parametrize("center", [False, True])
def test_cl_lsi_matches_dense_svd(name, side, center):
    problem = PROBLEMS[name]
    corpus = problem.corpus()
    k, r = problem.n_concepts, 5
    be = LocalCorpusBackend(corpus, k, dtype="float64")
    res = fit_cl_lsi(be, r=r, side=side, center=center, oversampling=4, seed=0, **TIGHT)
    _, s, vt = np.linalg.svd(dense_concept_matrix(corpus, k, center=center))
    np.testing.assert_allclose(res.eigenvalues, s[:r] ** 2, rtol=1e-6)
    v = np.vstack([res.components[lang] for lang in problem.sizes]).astype(np.float64)
    for lang, (x, _) in corpus.items():
        assert res.components[lang].shape == (x.shape[1], r)
        assert res.components[lang].dtype == np.float32
    np.testing.assert_allclose(v.T @ v, np.eye(r), atol=1e-5)
    assert np.rad2deg(sla.subspace_angles(v, vt[:r].T).max()) < 0.1
    assert res.history["side"] == side
    assert res.history["eigensolver"]["converged"]
    assert (res.mean is not None) == center


def test_cl_lsi_auto_side_picks_smaller_dimension():
    problem = PROBLEMS["three_uneven"]  # K = 40 < p = 185
    be = LocalCorpusBackend(problem.corpus(), problem.n_concepts, dtype="float64")
    res = fit_cl_lsi(be, r=3, seed=0)
    assert res.history["side"] == "concepts"


def test_cl_lsi_is_seeded_and_validates():
    problem = PROBLEMS["tiny_language"]
    be = LocalCorpusBackend(problem.corpus(), problem.n_concepts, dtype="float64")
    a = fit_cl_lsi(be, r=4, seed=3)
    b = fit_cl_lsi(be, r=4, seed=3)
    for lang in a.components:
        np.testing.assert_array_equal(a.components[lang], b.components[lang])
    with pytest.raises(ValueError, match="side"):
        fit_cl_lsi(be, r=4, side="rows")
    with pytest.raises(ValueError, match="r must be"):
        fit_cl_lsi(be, r=10_000)
