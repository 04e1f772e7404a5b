"""The CG preconditioner: Jacobi with the top of the scaled spectrum deflated."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from pipeline.linalg.block_cg import block_cg
from pipeline.linalg.operator import BlockOperator
from pipeline.linalg.preconditioner import SpectralJacobi, spectral_jacobi


class _Dense(BlockOperator):
    def __init__(self, a: np.ndarray) -> None:
        super().__init__(a.shape, np.float64)
        self.a = a

    def _matmat(self, v: np.ndarray) -> np.ndarray:
        return self.a @ v

    _rmatmat = _matmat


def _gram(n: int = 600, p: int = 150, seed: int = 0, lam: float = 0.5) -> np.ndarray:
    """X_lᵀX_l + λI of L2-normalised rows of a Zipfian sparse X: a few frequent terms
    give the scaled matrix a few large eigenvalues, like real TF-IDF."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, p + 1)
    rows = []
    for _ in range(n):
        terms = rng.choice(p, size=12, replace=False, p=weights / weights.sum())
        row = np.zeros(p)
        row[terms] = rng.uniform(0.5, 1.5, 12)
        rows.append(row / np.linalg.norm(row))
    x = sp.csr_matrix(np.array(rows))
    return (x.T @ x).toarray() + lam * np.eye(p)


def test_spectral_jacobi_is_the_stated_spd_operator_and_deflates_the_top():
    """M = S (I + U (W⁻¹ − I) Uᵀ) S, dense: symmetric positive definite; with the exact top
    eigenvectors of S B S, M B has eigenvalue 1 k times and keeps the rest of S B S's."""
    b = _gram()
    jac = 1.0 / np.diag(b)
    s = np.sqrt(jac)
    sbs = s[:, None] * b * s[None, :]
    vals, vecs = np.linalg.eigh(sbs)
    k = 5
    u, w = vecs[:, -k:], vals[-k:]
    m = SpectralJacobi(jac, u, w)
    dense = m.matmat(np.eye(b.shape[0]))
    want = np.diag(s) @ (np.eye(b.shape[0]) + u @ np.diag(1 / w - 1) @ u.T) @ np.diag(s)
    np.testing.assert_allclose(dense, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dense, dense.T, atol=1e-12)
    assert np.linalg.eigvalsh(dense).min() > 0
    spectrum = np.sort(np.linalg.eigvals(dense @ b).real)
    expect = np.sort(np.concatenate([np.ones(k), vals[:-k]]))
    np.testing.assert_allclose(spectrum, expect, rtol=1e-8, atol=1e-10)
    assert vals[-1] > 3 * vals[-k - 1]  # the deflated part is an outlying top


def test_randomized_build_solves_exactly_in_fewer_iterations():
    """block_cg with the built preconditioner reaches the dense solution at the tolerance, in
    fewer iterations than plain Jacobi; the build costs steps + 1 products."""
    b = _gram(seed=1)
    jac = 1.0 / np.diag(b)
    op = _Dense(b)
    calls = []

    def gram(v: np.ndarray) -> np.ndarray:
        calls.append(v.shape[1])
        return b @ v

    m = spectral_jacobi(gram, jac, 8, oversampling=8, steps=3, seed=0)
    assert m.rank == 8 and calls == [16] * 4
    np.testing.assert_allclose(m.basis.T @ m.basis, np.eye(8), atol=1e-10)
    rhs = np.random.default_rng(2).standard_normal((b.shape[0], 6))
    exact = np.linalg.solve(b, rhs)
    plain = block_cg(op, rhs, rtol=1e-8, maxiter=500, m=jac)
    deflated = block_cg(op, rhs, rtol=1e-8, maxiter=500, m=m)
    for res in (plain, deflated):
        assert res.converged.all()
        err = np.linalg.norm(res.x - exact, axis=0) / np.linalg.norm(exact, axis=0)
        assert err.max() < 1e-6  # ≤ cond(B) x rtol; cond(B) < 100 here
    assert deflated.n_iter < plain.n_iter


def test_rank_zero_and_small_vocabularies_are_plain_jacobi():
    jac = np.linspace(0.5, 2.0, 30)
    r = np.random.default_rng(0).standard_normal((30, 3))
    for m in (
        spectral_jacobi(lambda v: v, jac, 0),
        spectral_jacobi(lambda v: v, jac, 8, oversampling=8),  # p = 30 < 2 x 16
    ):
        assert m.rank == 0
        np.testing.assert_array_equal(m.matmat(r), jac[:, None] * r)


def test_invalid_deflation_is_refused():
    with pytest.raises(ValueError, match="positive"):
        SpectralJacobi(np.ones(4), np.eye(4)[:, :2], np.array([1.0, 0.0]))
    with pytest.raises(ValueError, match="shape"):
        SpectralJacobi(np.ones(4), np.eye(4)[:, :2], np.array([1.0]))


def test_float32_deflation_products_match_float64_and_cg_converges_the_same():
    """dtype=float32 (a float32 backend's pass dtype) rounds only the deflation products:
    M agrees with the float64 M to float32 precision, stays symmetric to it, and PCG
    reaches the same solution in the same number of iterations."""
    a = _gram(seed=3)
    jac = 1.0 / np.diag(a)
    m64 = spectral_jacobi(_Dense(a).matmat, jac, 8, seed=0)
    m32 = spectral_jacobi(_Dense(a).matmat, jac, 8, seed=0, dtype=np.float32)
    assert m32.rank == m64.rank == 8
    eye = np.eye(a.shape[0])
    d64, d32 = m64.matmat(eye), m32.matmat(eye)
    assert np.abs(d32 - d64).max() <= 1e-6 * np.abs(d64).max()
    assert np.abs(d32 - d32.T).max() <= 1e-6 * np.abs(d64).max()
    b = np.random.default_rng(1).standard_normal((a.shape[0], 3))
    runs = [block_cg(_Dense(a), b, m=m, rtol=1e-6) for m in (m64, m32)]
    assert runs[0].n_iter == runs[1].n_iter
    want = np.linalg.solve(a, b)
    for res in runs:
        assert np.linalg.norm(res.x - want) <= 1e-5 * np.linalg.norm(want)
    with pytest.raises(ValueError, match="float32 or float64"):
        SpectralJacobi(jac, dtype=np.float16)
