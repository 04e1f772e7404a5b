"""The pencil eigensolver on dense families, and the baselines' shared contract."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.linalg as sla

from pipeline.baselines import BaselineResult, pencil_eigsh
from pipeline.errors import ConvergenceWarning


def pencil(n, seed, *, cond=1e3, indefinite=False):
    rng = np.random.default_rng(seed)
    g = rng.standard_normal((n, n // 2))
    s = g @ g.T / n
    if indefinite:
        s -= 0.3 * np.eye(n)
    q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    a = q @ np.diag(np.logspace(0, np.log10(cond), n)) @ q.T
    return s, a


def solve(s, a, r, **kw):
    def pair(v):
        return s @ v, a @ v

    return pencil_eigsh(pair, lambda rhs: np.linalg.solve(a, rhs), s.shape[0], r, **kw)


@pytest.mark.parametrize("indefinite", [False, True])
@pytest.mark.parametrize("max_basis", [None, 30])
def test_pencil_matches_dense(indefinite, max_basis):
    s, a = pencil(80, 0, indefinite=indefinite)
    res = solve(s, a, 5, block_size=4, rtol=1e-10, maxiter=300, max_basis=max_basis)
    want, vec = sla.eigh(s, a)
    np.testing.assert_allclose(res.eigenvalues, want[::-1][:5], rtol=1e-8)
    y = res.eigenvectors
    np.testing.assert_allclose(y.T @ a @ y, np.eye(5), atol=1e-8)
    assert np.rad2deg(sla.subspace_angles(y, vec[:, ::-1][:, :5]).max()) < 0.1
    assert res.converged
    assert (res.n_restarts > 0) == (max_basis is not None)


def test_pencil_tolerates_inexact_solves():
    s, a = pencil(80, 1)
    rng = np.random.default_rng(5)

    def noisy(rhs):
        x = np.linalg.solve(a, rhs)
        return x * (1 + 0.1 * rng.standard_normal(x.shape))  # a poor "preconditioner"

    res = pencil_eigsh(lambda v: (s @ v, a @ v), noisy, 80, 4, block_size=4, rtol=1e-9, maxiter=300)
    np.testing.assert_allclose(res.eigenvalues, sla.eigh(s, a)[0][::-1][:4], rtol=1e-8)


def test_pencil_warns_at_cap_and_is_seeded():
    s, a = pencil(60, 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = solve(s, a, 4, block_size=2, rtol=1e-14, maxiter=2)
    assert not res.converged
    assert any(issubclass(w.category, ConvergenceWarning) for w in caught)
    one = solve(s, a, 3, rtol=1e-6, seed=7)
    two = solve(s, a, 3, rtol=1e-6, seed=7)
    np.testing.assert_array_equal(one.eigenvectors, two.eigenvectors)
    with pytest.raises(ValueError, match="r must satisfy"):
        solve(s, a, 0)


def test_registry_names_the_fit_functions():
    from pipeline.methods import all_methods
    from pipeline.training.fit import fit_function

    # the baselines: the registered methods but Cr5 and the neural ones, each with its fit
    FIT_FUNCTIONS = {
        spec.name: fit_function(spec)
        for spec in all_methods()
        if spec.name != "cr5" and spec.family != "neural"
    }
    assert set(FIT_FUNCTIONS) == {
        "untranslated",
        "cl_lsi",
        "cca",
        "opca",
        "jplsa",
        "cplsa",
        "s2net",
    }
    assert BaselineResult.__dataclass_fields__.keys() >= {"components", "eigenvalues", "history"}
