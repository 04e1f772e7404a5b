"""Block Lanczos against numpy.linalg.eigh on dense PSD matrices."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg as sla

from pipeline.errors import BreakdownError, ConvergenceWarning
from pipeline.linalg.block_lanczos import block_lanczos
from pipeline.linalg.operator import CallableOperator, DenseOperator


def _psd(kind: str, n: int = 120, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    if kind == "decaying":
        ev = 100.0 * 0.85 ** np.arange(n)
    elif kind == "low_rank":  # exact null space (like M, which has rank <= K - 1)
        ev = np.r_[np.linspace(50, 5, 15), np.zeros(n - 15)]
    elif kind == "clustered":
        ev = np.r_[np.linspace(10, 9.9, 6), np.linspace(2, 0.1, n - 6)]
    else:  # flat spectrum: slow
        ev = np.linspace(2, 1, n)
    return (q * ev) @ q.T


@pytest.mark.parametrize("kind", ["decaying", "low_rank", "clustered", "flat"])
@pytest.mark.parametrize("max_basis", [None, 36])
def test_lanczos_matches_eigh(kind, max_basis):
    a = _psd(kind)
    r = 6
    res = block_lanczos(
        DenseOperator(a), r, block_size=8, rtol=1e-10, maxiter=300, seed=1, max_basis=max_basis
    )
    want, vecs = np.linalg.eigh(a)
    want, vecs = want[::-1][:r], vecs[:, ::-1][:, :r]
    assert res.converged
    np.testing.assert_allclose(res.eigenvalues, want, rtol=1e-8)
    np.testing.assert_allclose(res.eigenvectors.T @ res.eigenvectors, np.eye(r), atol=1e-10)
    assert np.rad2deg(sla.subspace_angles(res.eigenvectors, vecs).max()) < 1e-4
    assert res.ritz_values.shape == (res.n_iter, r)
    assert res.residual_norms[-1].max() <= 1e-10
    if max_basis is not None and res.n_iter > 3:
        assert res.n_restarts > 0


def test_lanczos_is_reproducible_and_seeded():
    a = _psd("decaying")
    op = DenseOperator(a)
    r1 = block_lanczos(op, 4, block_size=6, rtol=1e-3, seed=7)
    r2 = block_lanczos(op, 4, block_size=6, rtol=1e-3, seed=7)
    r3 = block_lanczos(op, 4, block_size=6, rtol=1e-3, seed=8)
    np.testing.assert_array_equal(r1.eigenvectors, r2.eigenvectors)
    assert not np.array_equal(r1.eigenvectors, r3.eigenvectors)


def test_lanczos_one_operator_pass_per_iteration():
    a = _psd("decaying")
    op = DenseOperator(a)
    res = block_lanczos(op, 5, block_size=7, rtol=1e-8, seed=0)
    assert op.n_column_passes == 7 * res.n_iter


def test_lanczos_small_space_exact():
    a = _psd("decaying", n=10)
    res = block_lanczos(DenseOperator(a), 3, block_size=4, rtol=1e-14, maxiter=50)
    np.testing.assert_allclose(res.eigenvalues, np.linalg.eigvalsh(a)[::-1][:3], rtol=1e-10)
    assert res.converged


def test_lanczos_cap_warns_and_validates():
    a = _psd("flat")
    with pytest.warns(ConvergenceWarning, match="did not reach"):
        res = block_lanczos(DenseOperator(a), 4, rtol=1e-12, maxiter=2)
    assert not res.converged and res.n_iter == 2
    with pytest.raises(ValueError, match="max_basis"):
        block_lanczos(DenseOperator(a), 4, block_size=4, max_basis=8)
    with pytest.raises(ValueError, match="r must"):
        block_lanczos(DenseOperator(a), 0)


def test_lanczos_breakdown_on_nan():
    op = CallableOperator((20, 20), lambda v: np.full_like(v, np.nan))
    with pytest.raises(BreakdownError, match="NaN"):
        block_lanczos(op, 2)


def test_lanczos_tolerates_slightly_asymmetric_operator():
    # inner solves at finite tolerance make M symmetric only approximately
    a = _psd("decaying")
    noise = 1e-6 * np.random.default_rng(3).standard_normal(a.shape)
    res = block_lanczos(DenseOperator(a + noise), 5, block_size=8, rtol=1e-4, seed=0)
    np.testing.assert_allclose(res.eigenvalues, np.linalg.eigvalsh(a)[::-1][:5], rtol=1e-5)
