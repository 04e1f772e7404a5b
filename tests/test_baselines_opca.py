"""OPCA against a dense generalised eigen-decomposition of (S, N + γI)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg as sla

from pipeline.backends.local import LocalCorpusBackend
from pipeline.baselines.opca import fit_opca
from tests.problems import PROBLEMS

TIGHT = {"cg_rtol": 1e-13, "cg_maxiter": 5000, "eig_rtol": 1e-9, "eig_maxiter": 500}
GAMMA = 1e-2


def dense_opca(corpus, k, gamma, r):
    """S = covariance of all documents; N = mean outer product of deviations from concept means."""
    p = sum(x.shape[1] for x, _ in corpus.values())
    rows, labels, col = [], [], 0
    for x, concepts in corpus.values():
        xd = np.zeros((x.shape[0], p))
        xd[:, col : col + x.shape[1]] = x.astype(np.float64).toarray()
        col += x.shape[1]
        rows.append(xd)
        labels.append(concepts)
    x, labels = np.vstack(rows), np.concatenate(labels)
    n = x.shape[0]
    xc = x - x.mean(axis=0)
    s = xc.T @ xc / n
    dev = x.copy()
    for c in np.unique(labels):
        dev[labels == c] -= x[labels == c].mean(axis=0)
    noise = dev.T @ dev / n
    sig, vec = sla.eigh(s, noise + gamma * np.eye(p))
    return sig[::-1][:r], vec[:, ::-1][:, :r], noise + gamma * np.eye(p)


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_opca_matches_dense_reference(name):
    problem = PROBLEMS[name]
    corpus = problem.corpus()
    k, r = problem.n_concepts, 4
    be = LocalCorpusBackend(corpus, k, dtype="float64")
    res = fit_opca(be, r=r, gamma=GAMMA, oversampling=4, seed=0, **TIGHT)
    want_ev, want_vec, a = dense_opca(corpus, k, GAMMA, r)
    np.testing.assert_allclose(res.eigenvalues, want_ev, rtol=1e-6)
    v = np.vstack([res.components[lang] for lang in problem.sizes]).astype(np.float64)
    for lang, (x, _) in corpus.items():
        assert res.components[lang].shape == (x.shape[1], r)
        assert res.components[lang].dtype == np.float32
    assert np.rad2deg(sla.subspace_angles(v, want_vec).max()) < 0.1
    np.testing.assert_allclose(v.T @ a @ v, np.eye(r), atol=1e-4)  # OPCA's constraint
    h = res.history
    assert h["eigensolver"]["converged"]
    assert h["passes"]["passes"]["gram"] > 0 and h["passes"]["passes"]["xt_gather"] > 0
    assert all(rec["all_converged"] for rec in h["solves"])


def test_opca_paper_tolerances_and_validation():
    problem = PROBLEMS["three_uneven"]
    corpus = problem.corpus()
    be = LocalCorpusBackend(corpus, problem.n_concepts, dtype="float32")
    res = fit_opca(be, r=4, gamma=GAMMA, oversampling=4, seed=0)
    want_ev, *_ = dense_opca(corpus, problem.n_concepts, GAMMA, 4)
    assert res.history["eigensolver"]["converged"]
    assert np.all(res.eigenvalues <= want_ev * (1 + 1e-5))  # Ritz values are lower bounds
    np.testing.assert_allclose(res.eigenvalues, want_ev, rtol=0.1)
    with pytest.raises(ValueError, match="gamma"):
        fit_opca(be, r=2, gamma=-1.0)
    with pytest.raises(ValueError, match="r must be"):
        fit_opca(be, r=10_000)
