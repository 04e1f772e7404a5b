"""End-to-end Cr5 against an independent dense computation, and the estimator wrapper."""

from __future__ import annotations

import logging
import pickle

import numpy as np
import pytest
import scipy.linalg as sla

from pipeline.backends.local import LocalCorpusBackend
from pipeline.linalg.cr5 import (
    Cr5Solver,
    CrossCovariance,
    PathStart,
    concept_frequencies,
    solve_cr5,
)
from pipeline.linalg.woodbury import global_mean
from tests.problems import PROBLEMS, dense_centred

TIGHT = {"cg_rtol": 1e-12, "w_rtol": 1e-13, "cg_maxiter": 5000, "eig_rtol": 1e-9}


def dense_cr5(corpus, k, lam, r):
    """Independent reference: centred dense X̂, Ŷ; Cholesky of Â; SVD of L⁻¹C."""
    xh, yh = dense_centred(corpus, k)
    a_hat = xh.T @ xh + lam * np.eye(xh.shape[1])
    chol = np.linalg.cholesky(a_hat)
    c = xh.T @ yh
    _, s, vt = np.linalg.svd(sla.solve_triangular(chol, c, lower=True), full_matrices=False)
    p = vt[:r].T
    phi_star_t = sla.cho_solve((chol, True), c @ p)
    return s[:r] ** 2, phi_star_t


# (warm start steps, Φ from the eigensolver's solves): the default and the plain method
VARIANTS = {"warm+reuse": (2, True), "random+final_solve": (0, False)}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_cr5_matches_dense_reference(name, variant):
    problem = PROBLEMS[name]
    corpus = problem.corpus()
    k, lam, r = problem.n_concepts, 0.3, 5
    be = LocalCorpusBackend(corpus, k, dtype="float64")
    steps, reuse = VARIANTS[variant]
    res = solve_cr5(
        be, lam=lam, r=r, oversampling=4, seed=0, start_steps=steps, reuse_solves=reuse, **TIGHT
    )
    want_ev, want_phi_t = dense_cr5(corpus, k, lam, r)
    np.testing.assert_allclose(res.eigenvalues, want_ev, rtol=1e-6)
    phi_t = np.vstack([res.components[lang] for lang in problem.sizes]).astype(np.float64)
    for lang, (x, _) in corpus.items():
        assert res.components[lang].shape == (x.shape[1], r)
        assert res.components[lang].dtype == np.float32
    np.testing.assert_allclose(phi_t.T @ phi_t, np.eye(r), atol=1e-5)  # float32 storage
    angle = np.rad2deg(sla.subspace_angles(phi_t, want_phi_t).max())
    assert angle < 0.1
    # Λ, Q of Φ*Φ*ᵀ = QΛQᵀ rebuild the dense Φ*ᵀ = Â⁻¹ C P exactly (P's columns up to sign)
    lam_g, q = res.gram_eigenvalues, res.gram_eigenvectors
    assert lam_g.shape == (r,) and q.shape == (r, r) and np.all(np.diff(lam_g) <= 0)
    np.testing.assert_allclose(q.T @ q, np.eye(r), atol=1e-12)
    np.testing.assert_allclose(
        lam_g, np.linalg.eigvalsh(want_phi_t.T @ want_phi_t)[::-1], rtol=1e-5
    )
    phi_star_t = phi_t @ (np.sqrt(lam_g)[:, None] * q.T)
    signs = np.sign(np.sum(phi_star_t * want_phi_t, axis=0))
    np.testing.assert_allclose(phi_star_t * signs, want_phi_t, atol=1e-5 * np.abs(want_phi_t).max())
    h = res.history
    assert h["eigensolver"]["converged"]
    assert h["passes"]["passes"]["gram"] > 0 and h["passes"]["passes"]["x_scatter"] > 0


def test_cr5_float32_passes():
    problem = PROBLEMS["three_uneven"]
    corpus = problem.corpus()
    want_ev, want_phi_t = dense_cr5(corpus, problem.n_concepts, 0.3, 5)
    be = LocalCorpusBackend(corpus, problem.n_concepts, dtype="float32")
    # paper tolerances (ε_cg = 0.01, ε_eig = 0.1): eigenvalues within a few percent
    res = solve_cr5(be, lam=0.3, r=5, oversampling=5, seed=0)
    np.testing.assert_allclose(res.eigenvalues, want_ev, rtol=0.05)
    # moderate tolerances: float32 passes still give the subspace to < 0.1 degree
    res = solve_cr5(be, lam=0.3, r=5, oversampling=5, seed=0, cg_rtol=1e-4, eig_rtol=1e-3)
    np.testing.assert_allclose(res.eigenvalues, want_ev, rtol=1e-4)
    phi_t = np.vstack([res.components[lang] for lang in problem.sizes]).astype(np.float64)
    assert np.rad2deg(sla.subspace_angles(phi_t, want_phi_t).max()) < 0.1


def test_cross_covariance_matches_dense():
    problem = PROBLEMS["tiny_language"]
    corpus = problem.corpus()
    be = LocalCorpusBackend(corpus, problem.n_concepts, dtype="float64")
    xh, yh = dense_centred(corpus, problem.n_concepts)
    c = CrossCovariance(be, global_mean(be), concept_frequencies(be))
    rng = np.random.default_rng(0)
    pk = rng.standard_normal((problem.n_concepts, 3))
    u = rng.standard_normal((xh.shape[1], 2))
    np.testing.assert_allclose(c.matmat(pk), xh.T @ yh @ pk, atol=1e-10)
    np.testing.assert_allclose(c.H.matmat(u), yh.T @ xh @ u, atol=1e-10)


def test_solver_wrapper_validates_and_fits(caplog):
    problem = PROBLEMS["single_language"]
    be = LocalCorpusBackend(problem.corpus(), problem.n_concepts, dtype="float64")
    with pytest.raises(ValueError, match="'cg_rtol' must be a real number in \\(0, 1\\)"):
        Cr5Solver(lam=1.0, r=3, cg_rtol=2.0).fit(be)
    with pytest.raises(ValueError, match="'lam' must be a real number > 0"):
        Cr5Solver(lam=0, r=3).fit(be)
    with pytest.raises(ValueError, match="'r' must be <= min"):
        Cr5Solver(lam=1.0, r=25).fit(be)
    with pytest.raises(TypeError, match="unexpected keyword argument 'rank'"):
        Cr5Solver(lam=1.0, rank=3)
    events = []
    with caplog.at_level(logging.INFO, logger="pipeline.linalg"):
        solver = Cr5Solver(lam=1.0, r=4, oversampling=3, eig_rtol=1e-6).fit(
            be, callback=lambda stage, it, info: events.append((stage, it))
        )
    assert events and events[0] == ("eigensolver", 1)
    assert any("eta=" in rec.getMessage() for rec in caplog.records)
    x = be.matrix("en")
    emb = solver.transform("en", x)
    assert emb.shape == (x.shape[0], 4)
    assert solver.n_iter_ == len(solver.history_["eigensolver"]["ritz_values"])
    # the driver's resident high-water mark after each phase (Linux), one mark per
    # iteration, and the log names the largest (the kernel may read a mark lower later)
    peaks = solver.history_["driver_peak_mib"]
    marks = [peaks["woodbury_setup"], *peaks["by_iteration"], peaks["iterations"]]
    marks += [peaks["eigensolver"], peaks["phi"]]
    assert len(peaks["by_iteration"]) == solver.n_iter_
    assert all(isinstance(v, float) and v > 0 for v in marks)
    logged = [r.getMessage() for r in caplog.records if "resident peak" in r.getMessage()]
    assert logged and f"resident peak {max(marks):.0f} MiB" in logged[-1]
    assert "r=4" in repr(solver)
    clone = pickle.loads(pickle.dumps(solver))
    np.testing.assert_array_equal(clone.transform("en", x), emb)
    unfitted = pickle.loads(pickle.dumps(Cr5Solver(lam=2.0, r=3)))
    assert unfitted.get_params()["lam"] == 2.0


def test_describe_hook_names_stages():
    problem = PROBLEMS["tiny_language"]
    seen = []

    class Described(LocalCorpusBackend):
        def describe(self, stage, iteration=None):
            seen.append(stage)

    be = Described(problem.corpus(), problem.n_concepts, dtype="float64")
    solve_cr5(be, lam=0.5, r=3, oversampling=2, eig_rtol=1e-3)
    assert "cr5/mean" in seen
    assert any(s.startswith("cr5/w/cg[") for s in seen)
    assert any(s == "cr5/eig1/C[xx]" for s in seen)
    assert any(s == "cr5/eig2/cg[en]" for s in seen)
    assert any(s == "cr5/start1/C[xx]" for s in seen)
    assert any(s == "cr5/start2/Ct[en]" for s in seen)
    # Φ comes from the eigensolver's own solves: no pass after it
    assert not any(s.startswith("cr5/phi") for s in seen)
    seen.clear()
    solve_cr5(be, lam=0.5, r=3, oversampling=2, eig_rtol=1e-3, reuse_solves=False, start_steps=0)
    assert any(s.startswith("cr5/phi/Ct[") or s.startswith("cr5/phi/C[") for s in seen)
    assert not any(s.startswith("cr5/start") for s in seen)


def test_solver_bounds_max_basis_by_the_block_width_it_uses():
    """The smallest cap, max(r, b) + 2b, counts the eigensolver's block b (here the given 3),
    not r + oversampling: the estimator fits with it and restarts, and one column less is a
    SolverArgumentError naming that bound (the training service names train.max_basis)."""
    from pipeline.linalg.errors import SolverArgumentError

    problem = PROBLEMS["three_uneven"]
    be = LocalCorpusBackend(problem.corpus(), problem.n_concepts, dtype="float64")
    r, b = 4, 3
    smallest = max(r, b) + 2 * b
    common = dict(lam=0.3, r=r, oversampling=10, block_size=b, **TIGHT)
    with pytest.raises(
        SolverArgumentError, match=f"max\\(r, b\\) \\+ 2\\*b = {smallest} \\(b = 3"
    ) as info:
        Cr5Solver(max_basis=smallest - 1, **common).fit(be)
    assert info.value.argument == "max_basis"
    solver = Cr5Solver(max_basis=smallest, **common).fit(be)
    assert solver.history_["max_basis"] == smallest
    assert solver.history_["eigensolver"]["n_restarts"] > 0
    want_ev, _ = dense_cr5(problem.corpus(), problem.n_concepts, 0.3, r)
    np.testing.assert_allclose(solver.eigenvalues_, want_ev, rtol=1e-6)


@pytest.mark.parametrize("reuse", [True, False])
def test_cr5_with_thick_restarts_matches_dense_reference(reuse):
    """A small max_basis forces thick restarts: the kept images Â⁻¹CV are transformed with
    the basis, so Φ from them still matches the dense reference."""
    problem = PROBLEMS["three_uneven"]
    corpus = problem.corpus()
    k, lam, r = problem.n_concepts, 0.3, 4
    be = LocalCorpusBackend(corpus, k, dtype="float64")
    b = 3
    res = solve_cr5(
        be, lam=lam, r=r, block_size=b, max_basis=max(r, b) + 2 * b, reuse_solves=reuse, **TIGHT
    )
    assert res.history["eigensolver"]["n_restarts"] > 0
    want_ev, want_phi_t = dense_cr5(corpus, k, lam, r)
    np.testing.assert_allclose(res.eigenvalues, want_ev, rtol=1e-6)
    phi_t = np.vstack([res.components[lang] for lang in problem.sizes]).astype(np.float64)
    assert np.rad2deg(sla.subspace_angles(phi_t, want_phi_t).max()) < 0.1


def test_default_basis_is_bounded_and_gives_the_same_subspace():
    """With no max_basis the eigensolver restarts at max(r, b) + 4b columns (driver memory
    independent of the iteration count) and converges to the subspace an unbounded basis
    finds, which is the dense reference."""
    from pipeline.linalg.cr5 import default_max_basis

    problem = PROBLEMS["three_uneven"]
    corpus = problem.corpus()
    k, lam, r, b = problem.n_concepts, 0.3, 4, 1
    be = LocalCorpusBackend(corpus, k, dtype="float64")
    common = dict(lam=lam, r=r, block_size=b, start_steps=0, **TIGHT)
    bounded = solve_cr5(be, **common)
    unbounded = solve_cr5(be, max_basis=10**6, **common)
    cap = default_max_basis(r, b)
    assert bounded.history["max_basis"] == cap == 8
    assert bounded.history["eigensolver"]["n_restarts"] > 0
    assert unbounded.history["eigensolver"]["n_restarts"] == 0
    assert unbounded.history["eigensolver"]["n_iter"] > cap  # it would have grown past it
    want_ev, want_phi_t = dense_cr5(corpus, k, lam, r)
    for res in (bounded, unbounded):
        np.testing.assert_allclose(res.eigenvalues, want_ev, rtol=1e-6)
        phi_t = np.vstack([res.components[lang] for lang in problem.sizes]).astype(np.float64)
        assert np.rad2deg(sla.subspace_angles(phi_t, want_phi_t).max()) < 0.1


def _column_passes(res) -> int:
    return sum(res.history["passes"]["column_passes"].values())


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_lambda_chain_matches_dense_reference(name):
    """A λ path (largest first) whose fits start from the previous fit's leading Ritz vectors
    (C does not depend on λ) reaches each λ's dense reference (tight tolerances), and at the
    default tolerances costs fewer passes over X than independent fits from the surrogate
    start."""
    problem = PROBLEMS[name]
    corpus = problem.corpus()
    k, r = problem.n_concepts, 5
    be = LocalCorpusBackend(corpus, k, dtype="float64")
    grid = (3.0, 1.0, 0.3, 0.1)
    start = None
    for lam in grid:
        res = solve_cr5(
            be, lam=lam, r=r, oversampling=4, seed=0, start=start, keep_start=True, **TIGHT
        )
        start = res.path_start
        assert start.lam == lam and start.vectors.shape == (k, r + 4)
        np.testing.assert_allclose(start.vectors.T @ start.vectors, np.eye(r + 4), atol=1e-8)
        want_ev, want_phi_t = dense_cr5(corpus, k, lam, r)
        np.testing.assert_allclose(res.eigenvalues, want_ev, rtol=1e-6)
        phi_t = np.vstack([res.components[lang] for lang in problem.sizes]).astype(np.float64)
        assert np.rad2deg(sla.subspace_angles(phi_t, want_phi_t).max()) < 0.1
    be32 = LocalCorpusBackend(corpus, k)
    start, chained, fresh = None, 0, 0
    for lam in grid:
        res = solve_cr5(be32, lam=lam, r=r, seed=0, start=start, keep_start=True)
        start = res.path_start
        chained += _column_passes(res)
        fresh += _column_passes(solve_cr5(be32, lam=lam, r=r, seed=0))
    assert chained < 0.9 * fresh, (chained, fresh)


def test_start_block_of_a_block_narrower_than_r():
    """With b < r (the narrow default block at large r) the kept start is the leading
    r + oversampling Ritz vectors (at most as many as the basis holds); a fit started from
    it applies them b columns at a time, keeping every residual direction, and reaches the
    dense reference."""
    problem = PROBLEMS["three_uneven"]
    corpus, k = problem.corpus(), problem.n_concepts
    be = LocalCorpusBackend(corpus, k, dtype="float64")
    res = solve_cr5(be, lam=1.0, r=6, block_size=3, seed=0, keep_start=True, **TIGHT)
    start = res.path_start.vectors
    # up to r + oversampling leading Ritz vectors: at least r
    assert start.shape[0] == k and 6 <= start.shape[1] <= 6 + 20
    np.testing.assert_allclose(start.T @ start, np.eye(start.shape[1]), atol=1e-8)
    res2 = solve_cr5(be, lam=0.3, r=6, block_size=3, seed=0, start=start, **TIGHT)
    want_ev, want_phi_t = dense_cr5(corpus, k, 0.3, 6)
    np.testing.assert_allclose(res2.eigenvalues, want_ev, rtol=1e-6)
    phi_t = np.vstack([res2.components[lang] for lang in problem.sizes]).astype(np.float64)
    assert np.rad2deg(sla.subspace_angles(phi_t, want_phi_t).max()) < 0.1
    # the 6 start columns are applied b = 3 at a time, then 3 columns per iteration
    widths = [s["n_rhs"] for s in res2.history["solves"] if s["stage"].startswith("cr5/eig")]
    assert set(widths) == {3} and len(widths) == res2.history["eigensolver"]["n_iter"]


def test_start_block_is_validated():
    problem = PROBLEMS["three_uneven"]
    be = LocalCorpusBackend(problem.corpus(), problem.n_concepts, dtype="float64")
    with pytest.raises(ValueError, match="start must have shape"):
        solve_cr5(be, lam=1.0, r=3, start=np.zeros((problem.n_concepts + 1, 2)))


def test_path_start_is_validated():
    problem = PROBLEMS["three_uneven"]
    be = LocalCorpusBackend(problem.corpus(), problem.n_concepts, dtype="float64")
    res = solve_cr5(be, lam=3.0, r=3, seed=0, keep_start=True)
    start = res.path_start
    p = sum(p_l for _, p_l in problem.sizes.values())
    assert start.solves.shape == (p, start.vectors.shape[1]) and start.w.shape == (p,)
    bad = PathStart(start.lam, start.vectors, start.solves[:-1], start.w)
    with pytest.raises(ValueError, match="solves must have shape"):
        solve_cr5(be, lam=1.0, r=3, start=bad)


def test_path_start_solves_and_w_start_the_next_fits_solves():
    """The kept B⁻¹C solves of the start vectors and w = B⁻¹μ are the next λ's initial CG
    guesses: its first solves and its w solve take fewer CG iterations than the same fit
    started from the same vectors without them, and both reach the dense reference."""
    problem = PROBLEMS["three_uneven"]
    corpus, k = problem.corpus(), problem.n_concepts
    be = LocalCorpusBackend(corpus, k, dtype="float64")
    tol = {"cg_rtol": 1e-8, "w_rtol": 1e-10, "eig_rtol": 1e-8, "cg_maxiter": 5000}
    start = solve_cr5(be, lam=3.0, r=4, seed=0, keep_start=True, **tol).path_start
    bare = PathStart(start.lam, start.vectors, None)
    runs = {
        name: solve_cr5(be, lam=2.0, r=4, seed=0, start=s, **tol)
        for name, s in (("guessed", start), ("bare", bare))
    }

    def cg_iterations(res, stage: str) -> int:
        return sum(sum(s["n_iter"].values()) for s in res.history["solves"] if s["stage"] == stage)

    for stage in ("cr5/w", "cr5/eig1"):
        assert cg_iterations(runs["guessed"], stage) < cg_iterations(runs["bare"], stage), stage
    want_ev, _ = dense_cr5(corpus, k, 2.0, 4)
    for res in runs.values():
        np.testing.assert_allclose(res.eigenvalues, want_ev, rtol=1e-6)
