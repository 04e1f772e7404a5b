"""Block CG against dense solves, on matrix families and on the corpus Gram operators."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from pipeline.backends.local import LocalCorpusBackend
from pipeline.errors import BreakdownError, ConvergenceWarning
from pipeline.linalg.block_cg import block_cg
from pipeline.linalg.operator import DenseOperator
from pipeline.linalg.woodbury import GramOperator
from tests.problems import PROBLEMS


def _spd(kind: str, n: int = 60, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    if kind == "well":
        ev = rng.uniform(1, 10, n)
    elif kind == "ill":
        ev = np.logspace(-4, 2, n)
    elif kind == "clustered":
        ev = np.r_[np.full(n - 3, 1.0), 50, 80, 100]
    else:  # badly scaled diagonal: Jacobi helps
        d = np.logspace(-2, 2, n)
        a = q @ np.diag(rng.uniform(1, 3, n)) @ q.T
        return d[:, None] * a * d[None, :]
    return q @ np.diag(ev) @ q.T


FAMILIES = ["well", "ill", "clustered", "scaled"]


@pytest.mark.parametrize("kind", FAMILIES)
@pytest.mark.parametrize("jacobi", [False, True])
def test_block_cg_matches_dense(kind, jacobi):
    a = _spd(kind)
    rng = np.random.default_rng(1)
    b = rng.standard_normal((60, 7))
    b[:, 3] = 0.0  # zero rhs is solved by zero
    m = 1.0 / np.diag(a) if jacobi else None
    res = block_cg(DenseOperator(a), b, rtol=1e-10, maxiter=2000, m=m)
    assert res.converged.all()
    true_res = np.linalg.norm(b - a @ res.x, axis=0)
    assert np.all(true_res <= 1e-7 * np.maximum(np.linalg.norm(b, axis=0), 1e-300) + 1e-12)
    np.testing.assert_array_equal(res.x[:, 3], 0.0)
    assert res.residual_norms.shape == (res.n_iter + 1, 7)
    assert np.all(res.residual_norms[-1] <= 1e-10)


def test_stopping_rule_is_per_column_relative():
    a = _spd("ill")
    b = np.random.default_rng(2).standard_normal((60, 4)) * np.array([1e-3, 1, 1e3, 1e6])
    res = block_cg(DenseOperator(a), b, rtol=1e-2, maxiter=1000)
    rel = np.linalg.norm(b - a @ res.x, axis=0) / np.linalg.norm(b, axis=0)
    assert res.converged.all()
    assert np.all(rel <= 1.01e-2)


def test_deflation_reduces_work():
    # columns of very different difficulty: easy ones leave the block early
    a = _spd("ill", seed=3)
    _, v = np.linalg.eigh(a)
    b = np.hstack([v[:, -3:], np.random.default_rng(0).standard_normal((60, 3))])
    op = DenseOperator(a)
    res = block_cg(op, b, rtol=1e-8, maxiter=1000)
    assert res.converged.all()
    assert op.n_column_passes == res.n_column_passes
    active_per_iter = [(row > 1e-8).sum() for row in res.residual_norms[:-1]]
    assert res.n_column_passes == sum(active_per_iter)
    assert res.n_column_passes < 0.7 * b.shape[1] * res.n_iter


def test_cap_warns():
    a = _spd("ill")
    b = np.ones((60, 2))
    with pytest.warns(ConvergenceWarning, match="did not reach"):
        res = block_cg(DenseOperator(a), b, rtol=1e-12, maxiter=3)
    assert res.n_iter == 3 and not res.converged.any()


def test_breakdown_on_indefinite():
    a = np.diag(np.r_[np.ones(5), -1.0])
    with pytest.raises(BreakdownError, match="positive definite"):
        block_cg(DenseOperator(a), np.ones((6, 1)), rtol=1e-12)


def test_x0_and_callback():
    a = _spd("well")
    b = np.random.default_rng(4).standard_normal((60, 3))
    exact = np.linalg.solve(a, b)
    seen = []
    res = block_cg(
        DenseOperator(a), b, x0=exact + 1e-3, rtol=1e-10, callback=lambda it, r: seen.append(it)
    )
    assert seen == list(range(1, res.n_iter + 1))
    np.testing.assert_allclose(res.x, exact, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("name", sorted(PROBLEMS))
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_gram_solves_on_corpora(name, dtype):
    problem = PROBLEMS[name]
    be = LocalCorpusBackend(problem.corpus(), problem.n_concepts, dtype=dtype)
    lam = 0.1
    for lang, (x, _) in problem.corpus().items():
        xd = x.astype(np.float64).toarray()
        bl = xd.T @ xd + lam * np.eye(x.shape[1])
        rhs = np.random.default_rng(5).standard_normal((x.shape[1], 6))
        jac = 1.0 / (be.column_sq_sums(lang) + lam)
        rtol = 1e-10 if dtype == "float64" else 1e-5
        with warnings.catch_warnings():
            warnings.simplefilter("error", ConvergenceWarning)
            res = block_cg(GramOperator(be, lang, lam), rhs, rtol=rtol, maxiter=2000, m=jac)
        err = np.linalg.norm(res.x - np.linalg.solve(bl, rhs)) / np.linalg.norm(res.x)
        assert err < (1e-7 if dtype == "float64" else 1e-3)


def test_float32_working_precision_reaches_the_tolerance():
    """dtype=float32: every CG vector in float32 (the result too), converged to rtol by the
    true residual (float64), in the iterations float64 needs (well conditioned: rounding
    cannot change the Krylov space the rtol is reached in)."""
    a = _spd("well")
    b = np.random.default_rng(3).standard_normal((60, 5))
    m = 1.0 / np.diag(a)
    ref = block_cg(DenseOperator(a), b, rtol=1e-4, maxiter=500, m=m)
    res = block_cg(DenseOperator(a), b, rtol=1e-4, maxiter=500, m=m, dtype=np.float32)
    assert res.x.dtype == np.float32 and res.converged.all()
    rel = np.linalg.norm(b - a @ res.x.astype(np.float64), axis=0) / np.linalg.norm(b, axis=0)
    assert np.all(rel <= 1.1e-4)  # float32 rounding: ~1e-7 x cond(a) <= 1e-6 of drift
    assert abs(res.n_iter - ref.n_iter) <= 1
    with pytest.raises(ValueError, match="float32 or float64"):
        block_cg(DenseOperator(a), b, dtype=np.float16)
