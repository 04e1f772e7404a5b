"""Regularised (multi-set) CCA against a dense generalised eigen-decomposition."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg as sla

from pipeline.backends.local import LocalCorpusBackend
from pipeline.baselines.cca import fit_cca
from tests.problems import PROBLEMS

TIGHT = {"cg_rtol": 1e-13, "cg_maxiter": 5000, "eig_rtol": 1e-9, "eig_maxiter": 500}
GAMMA = 1e-2


def dense_views(corpus, k, min_languages):
    """Centred concept-mean views Ẑ_l (K × p_l) with the module's masks, densely."""
    counts = {lang: np.bincount(c, minlength=k) for lang, (_, c) in corpus.items()}
    kept = sum((n > 0).astype(int) for n in counts.values()) >= min_languages
    views = {}
    for lang, (x, concepts) in corpus.items():
        y = np.zeros((x.shape[0], k))
        y[np.arange(x.shape[0]), concepts] = 1.0
        sums = y.T @ x.astype(np.float64).toarray()
        mask = kept & (counts[lang] > 0)
        z = np.zeros_like(sums)
        z[mask] = sums[mask] / counts[lang][mask, None]
        z[mask] -= z[mask].mean(axis=0)
        views[lang] = z
    return views, int(kept.sum())


def dense_cca(corpus, k, gamma, r, min_languages):
    views, n_rows = dense_views(corpus, k, min_languages)
    z = np.hstack(list(views.values()))
    lhs = z.T @ z / n_rows + gamma * np.eye(z.shape[1])
    d = sla.block_diag(*[v.T @ v / n_rows + gamma * np.eye(v.shape[1]) for v in views.values()])
    lam, vec = sla.eigh(lhs, d)
    return lam[::-1][:r], vec[:, ::-1][:, :r], views, n_rows


CASES = [
    ("tiny_language", None),
    ("steep_zipf", None),
    ("three_uneven", None),
    ("three_uneven", 2),
]


@pytest.mark.parametrize(("name", "min_languages"), CASES)
def test_cca_matches_dense_reference(name, min_languages):
    problem = PROBLEMS[name]
    corpus = problem.corpus()
    k, r = problem.n_concepts, 4
    be = LocalCorpusBackend(corpus, k, dtype="float64")
    res = fit_cca(
        be, r=r, gamma=GAMMA, min_languages=min_languages, oversampling=4, seed=0, **TIGHT
    )
    m = len(corpus) if min_languages is None else min_languages
    want_ev, want_vec, _, n_rows = dense_cca(corpus, k, GAMMA, r, m)
    assert res.history["n_aligned_concepts"] == n_rows
    np.testing.assert_allclose(res.eigenvalues, want_ev, rtol=1e-6)
    a = np.vstack([res.components[lang] for lang in problem.sizes]).astype(np.float64)
    for lang, (x, _) in corpus.items():
        assert res.components[lang].shape == (x.shape[1], r)
        assert res.components[lang].dtype == np.float32
    assert np.rad2deg(sla.subspace_angles(a, want_vec).max()) < 0.1
    assert res.history["eigensolver"]["converged"]


def test_two_language_cca_is_classic_regularised_cca():
    """For L = 2: λ − 1 are the canonical correlations, ρ² = eig(D₁⁻¹C₁₂D₂⁻¹C₂₁)."""
    problem = PROBLEMS["steep_zipf"]
    corpus = problem.corpus()
    k, r = problem.n_concepts, 3
    be = LocalCorpusBackend(corpus, k, dtype="float64")
    res = fit_cca(be, r=r, gamma=GAMMA, oversampling=4, seed=1, **TIGHT)
    views, n_rows = dense_views(corpus, k, 2)
    z1, z2 = views["en"], views["de"]
    d1 = z1.T @ z1 / n_rows + GAMMA * np.eye(z1.shape[1])
    d2 = z2.T @ z2 / n_rows + GAMMA * np.eye(z2.shape[1])
    c12 = z1.T @ z2 / n_rows
    rho2 = np.sort(np.linalg.eigvals(np.linalg.solve(d1, c12) @ np.linalg.solve(d2, c12.T)).real)
    np.testing.assert_allclose(
        res.history["canonical_correlations"], np.sqrt(rho2[::-1][:r]), rtol=1e-6
    )
    a1 = res.components["en"].astype(np.float64)
    a2 = res.components["de"].astype(np.float64)
    # D-normalisation splits evenly between the two views
    np.testing.assert_allclose(np.diag(a1.T @ d1 @ a1), 0.5, rtol=1e-4)
    np.testing.assert_allclose(np.diag(a2.T @ d2 @ a2), 0.5, rtol=1e-4)


def test_cca_default_tolerances_and_validation():
    problem = PROBLEMS["three_uneven"]
    corpus = problem.corpus()
    be = LocalCorpusBackend(corpus, problem.n_concepts, dtype="float32")
    res = fit_cca(be, r=4, gamma=GAMMA, min_languages=2, oversampling=4, seed=0)
    want_ev, *_ = dense_cca(corpus, problem.n_concepts, GAMMA, 4, 2)
    # Ritz values are lower bounds; the clustered spectrum (λ ≈ 2) costs a few percent
    assert np.all(res.eigenvalues <= want_ev * (1 + 1e-6))
    np.testing.assert_allclose(res.eigenvalues, want_ev, rtol=0.1)
    one = PROBLEMS["single_language"]
    with pytest.raises(ValueError, match="at least two languages"):
        fit_cca(LocalCorpusBackend(one.corpus(), one.n_concepts), r=2)
    with pytest.raises(ValueError, match="min_languages"):
        fit_cca(be, r=2, min_languages=4)
    with pytest.raises(ValueError, match="gamma"):
        fit_cca(be, r=2, gamma=0.0)
