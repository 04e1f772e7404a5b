"""Block Lanczos against numpy.linalg.eigh on dense PSD matrices."""

from __future__ import annotations

import weakref

import numpy as np
import pytest
import scipy.linalg as sla

from pipeline.errors import BreakdownError, ConvergenceWarning
from pipeline.linalg.block_lanczos import (
    LanczosState,
    block_lanczos,
    initial_state,
    orthonormal_columns,
)
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


class _Factored(DenseOperator):
    """A = Gᵀ F with dense G, F; ``matmat_with_image`` returns (A V, F V) like Cr5's M."""

    def __init__(self, g: np.ndarray, f: np.ndarray) -> None:
        super().__init__(g.T @ f)
        self.g, self.f = g, f

    def matmat_with_image(self, v):
        image = self.f @ v
        return self.g.T @ image, image


@pytest.mark.parametrize("max_basis", [None, 30])
def test_tracked_images_are_f_of_the_eigenvectors(max_basis):
    # symmetric A = Gᵀ F with F = S G, S SPD (the Cr5 shape: M = Cᵀ Â⁻¹ C)
    rng = np.random.default_rng(5)
    g = rng.standard_normal((40, 90)) * (0.9 ** np.arange(90))
    s = _psd("decaying", n=40, seed=2) + np.eye(40)
    op = _Factored(g, s @ g)
    res = block_lanczos(
        op,
        5,
        block_size=6,
        rtol=1e-9,
        maxiter=200,
        seed=0,
        max_basis=max_basis,
        track_images=True,
    )
    assert res.converged
    if max_basis is not None:
        assert res.n_restarts > 0
    # an independent application of F to the returned eigenvectors
    np.testing.assert_allclose(res.images, op.f @ res.eigenvectors, atol=1e-9)


def test_tracked_images_survive_a_checkpoint_round_trip():
    rng = np.random.default_rng(6)
    g = rng.standard_normal((30, 60)) * (0.85 ** np.arange(60))
    op = _Factored(g, g.copy())
    saved = []
    full = block_lanczos(op, 4, block_size=5, rtol=1e-8, seed=3, track_images=True)
    with pytest.warns(ConvergenceWarning):
        block_lanczos(
            op,
            4,
            block_size=5,
            rtol=1e-8,
            seed=3,
            maxiter=2,
            track_images=True,
            checkpoint=lambda st: saved.append(
                LanczosState.from_parts(
                    {k: v.copy() for k, v in st.arrays().items()}, dict(st.meta())
                )
            ),
        )
    resumed = block_lanczos(
        op, 4, block_size=5, rtol=1e-8, seed=3, state=saved[-1], track_images=True
    )
    np.testing.assert_allclose(resumed.eigenvalues, full.eigenvalues, rtol=1e-10)
    np.testing.assert_allclose(resumed.images, op.f @ resumed.eigenvectors, atol=1e-9)
    # a state without images cannot resume a tracking run
    bare = LanczosState.from_parts(
        {k: v for k, v in saved[-1].arrays().items() if k != "images"}, saved[-1].meta()
    )
    with pytest.raises(ValueError, match="no tracked images"):
        block_lanczos(op, 4, block_size=5, state=bare, track_images=True)
    with pytest.raises(TypeError, match="matmat_with_image"):
        block_lanczos(DenseOperator(op.g.T @ op.f), 4, track_images=True)


def test_warm_start_block_is_orthonormal_and_used():
    a = _psd("decaying")
    want = np.linalg.eigh(a)[1][:, ::-1][:, :4]

    # warm map = three steps of subspace iteration on A itself
    def warm(q):
        for _ in range(3):
            q = a @ q
        return q

    cold = block_lanczos(DenseOperator(a), 4, block_size=6, rtol=1e-8, seed=0)
    st = initial_state(a.shape[0], 6, seed=0, warm=warm)
    np.testing.assert_allclose(st.basis.T @ st.basis, np.eye(6), atol=1e-12)
    hot = block_lanczos(DenseOperator(a), 4, block_size=6, rtol=1e-8, seed=0, state=st)
    assert hot.n_iter < cold.n_iter
    assert np.rad2deg(sla.subspace_angles(hot.eigenvectors, want).max()) < 1e-3


@pytest.mark.parametrize("cond", [1.0, 1e4, 1e9, 1e15])
def test_orthonormal_columns_spans_the_input(cond):
    rng = np.random.default_rng(0)
    u, _ = np.linalg.qr(rng.standard_normal((500, 12)))
    v, _ = np.linalg.qr(rng.standard_normal((12, 12)))
    q = (u * np.geomspace(1.0, 1.0 / cond, 12)) @ v.T
    o = orthonormal_columns(q)
    np.testing.assert_allclose(o.T @ o, np.eye(12), atol=1e-12)
    # same span as Householder QR (the fallback handles the ill-conditioned cases)
    ref = np.linalg.qr(q)[0]
    assert np.linalg.norm(ref - o @ (o.T @ ref)) < 1e-8


def test_bounded_basis_peak_memory_is_one_basis():
    """With max_basis the driver holds one n x max_basis float64 buffer: appending a block
    and thick restarts work in place (the previous np.hstack held two bases at once)."""
    import tracemalloc

    n, r, b, cap = 40_000, 4, 8, 40
    rng = np.random.default_rng(0)
    diag = np.sort(rng.uniform(1.0, 2.0, n))[::-1]  # flat spectrum: many restarts
    op = CallableOperator((n, n), lambda v: diag[:, None] * v)
    tracemalloc.start()
    try:
        with pytest.warns(ConvergenceWarning):
            res = block_lanczos(op, r, block_size=b, rtol=1e-12, maxiter=12, seed=0, max_basis=cap)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert res.n_restarts >= 2
    one_basis = n * cap * 8
    # the buffer, plus a few n x b blocks (operator output, orthogonalisation, the result)
    assert peak < one_basis + 8 * n * b * 8, (peak / one_basis, res.n_restarts)


def _true_relative_residuals(a: np.ndarray, res) -> np.ndarray:
    y, theta = res.eigenvectors, res.eigenvalues
    return np.linalg.norm(a @ y - y * theta, axis=0) / theta


@pytest.mark.parametrize("max_basis", [None, 40])
@pytest.mark.parametrize("kind", ["decaying", "clustered", "flat"])
def test_wide_start_is_applied_in_turns_with_exact_residuals(kind, max_basis):
    """A start block three times the block width (a λ path's previous Ritz vectors) is
    applied b columns at a time; every residual direction is kept, so the residual
    estimates equal the true ‖A y − θ y‖ / θ at every stop (loose and tight) and the
    result matches eigh."""
    a = _psd(kind)
    r, b = 8, 4
    # a start near, not at, the top subspace: the top 12 eigenvectors of a perturbed A
    rng = np.random.default_rng(3)
    noise = rng.standard_normal(a.shape) * 0.05 * np.abs(a).max()
    start = np.linalg.eigh(a + noise + noise.T)[1][:, ::-1][:, :12]
    widths: list[int] = []

    def apply(v: np.ndarray) -> np.ndarray:
        widths.append(v.shape[1])
        return a @ v

    op = CallableOperator(a.shape, apply)
    for rtol in (0.05, 1e-9):
        widths.clear()
        st = initial_state(a.shape[0], 12, seed=0, start=start)
        res = block_lanczos(
            op, r, block_size=b, rtol=rtol, maxiter=400, seed=0, state=st, max_basis=max_basis
        )
        assert res.converged and set(widths) == {b}
        true = _true_relative_residuals(a, res)
        np.testing.assert_allclose(res.residual_norms[-1], true, rtol=1e-6, atol=1e-12)
        assert true.max() <= rtol * (1 + 1e-6)
    want = np.linalg.eigh(a)[0][::-1][:r]
    np.testing.assert_allclose(res.eigenvalues, want, rtol=1e-8)


def test_wide_start_restarts_leave_room_for_two_blocks():
    """With a λ path's basis cap (max(r, b) + start width + 2 b) the start's residual
    directions keep waiting; a restart keeps at least r Ritz vectors and room for two
    blocks before the next one (keeping more left room for one: a restart every
    iteration, which cost a DDTP λ path 2,000 column-passes) — and the residuals stay
    exact."""
    a = _psd("flat", n=200)
    r, b, width = 8, 4, 12
    cap = max(r, b) + width + 2 * b
    start = np.linalg.eigh(a + 0.02 * np.diag(np.linspace(1, 0, 200)))[1][:, ::-1][:, :width]
    restarts: list[int] = []
    st = initial_state(a.shape[0], width, seed=0, start=start)
    res = block_lanczos(
        DenseOperator(a),
        r,
        block_size=b,
        rtol=1e-6,
        maxiter=400,
        seed=0,
        state=st,
        max_basis=cap,
        checkpoint=lambda state: restarts.append(state.n_restarts),
    )
    assert res.converged and res.n_restarts >= 3
    steps = np.diff([0, *restarts])
    # never a restart on two consecutive iterations
    assert not np.any((steps[1:] > 0) & (steps[:-1] > 0)), restarts
    true = _true_relative_residuals(a, res)
    np.testing.assert_allclose(res.residual_norms[-1], true, rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(res.eigenvalues, np.linalg.eigh(a)[0][::-1][:r], rtol=1e-8)


@pytest.mark.parametrize("kind", ["decaying", "clustered", "flat"])
def test_wide_start_converges_like_a_fresh_start_at_tight_tolerance(kind):
    """A λ path's start leaves width − b residual directions waiting, which never drain (b
    applied, b new, every iteration). Restarts cut them to as many as the Ritz vectors
    kept (the rest are orthogonal to every kept residual), so the path's basis is not
    left full of waiting columns: at rtol 1e-9 it converges in about the iterations of a
    fresh start. Before the cut it kept only r Ritz vectors per restart and did not
    converge in 400 iterations (flat, clustered: 170-180 from scratch)."""
    a = _psd(kind, n=200)
    r, b, width = 8, 4, 12
    start = np.linalg.eigh(a + 0.02 * np.diag(np.linspace(1, 0, 200)))[1][:, ::-1][:, :width]
    st = initial_state(a.shape[0], width, seed=0, start=start)
    common = {"block_size": b, "rtol": 1e-9, "maxiter": 400, "seed": 0}
    path = block_lanczos(
        DenseOperator(a), r, state=st, max_basis=max(r, b) + width + 2 * b, **common
    )
    fresh = block_lanczos(DenseOperator(a), r, max_basis=max(r, b) + 4 * b, **common)
    assert path.converged and fresh.converged and path.n_restarts >= 3
    assert path.n_iter <= 1.5 * fresh.n_iter, (path.n_iter, fresh.n_iter)
    true = _true_relative_residuals(a, path)
    np.testing.assert_allclose(path.residual_norms[-1], true, rtol=1e-5, atol=1e-12)
    np.testing.assert_allclose(path.eigenvalues, np.linalg.eigh(a)[0][::-1][:r], rtol=1e-8)


def test_wide_start_needs_room_in_a_bounded_basis():
    a = _psd("decaying")
    st = initial_state(a.shape[0], 12, seed=0)
    with pytest.raises(ValueError, match="start width 12"):
        block_lanczos(DenseOperator(a), 8, block_size=4, max_basis=20, state=st)


def test_initial_state_from_given_columns():
    """Given columns come first (their span is kept), completed with random ones up to the
    block width; too many columns, or columns together with a warm map, are refused."""
    n = 40
    start = np.random.default_rng(3).standard_normal((n, 5))
    st = initial_state(n, 8, seed=0, start=start)
    q = st.basis
    assert q.shape == (n, 8)
    np.testing.assert_allclose(q.T @ q, np.eye(8), atol=1e-12)
    assert np.rad2deg(sla.subspace_angles(q[:, :5], start).max()) < 1e-6
    full = initial_state(n, 5, seed=0, start=start).basis
    assert np.rad2deg(sla.subspace_angles(full, start).max()) < 1e-6
    with pytest.raises(ValueError, match="c <= 4"):
        initial_state(n, 4, seed=0, start=start)
    with pytest.raises(ValueError, match="without warm"):
        initial_state(n, 8, seed=0, start=start, warm=lambda q: q)


def test_orthonormal_columns_keeps_an_orthonormal_block_and_fixes_a_nearly_orthonormal_one():
    q = np.linalg.qr(np.random.default_rng(5).standard_normal((300, 12)))[0]
    assert orthonormal_columns(q) is q  # nothing to do: no copy, no rounding
    off = q + 1e-8 * np.random.default_rng(6).standard_normal(q.shape)
    fixed = orthonormal_columns(off)
    np.testing.assert_allclose(fixed.T @ fixed, np.eye(12), atol=1e-14)
    assert np.rad2deg(sla.subspace_angles(fixed, off).max()) < 1e-9


@pytest.mark.parametrize("kind", ["decaying", "clustered"])
def test_float32_basis_matches_eigh_to_float32_rounding(kind):
    """A float32 basis (Cr5's, with float32 passes) with restarts: the eigenpairs of a dense
    eigh to float32's reach, the residual estimates still the true residuals, the basis
    stored as float32."""
    a = _psd(kind)
    r = 6
    seen = []
    res = block_lanczos(
        DenseOperator(a),
        r,
        block_size=8,
        rtol=1e-4,
        maxiter=300,
        seed=1,
        max_basis=36,
        basis_dtype=np.float32,
        monitor=lambda st, *_: seen.append(st.basis.dtype) and False,
    )
    want, vecs = np.linalg.eigh(a)
    want, vecs = want[::-1][:r], vecs[:, ::-1][:, :r]
    assert res.converged and res.n_restarts > 0
    assert set(seen) == {np.dtype(np.float32)}
    assert res.eigenvectors.dtype == np.float32
    # eigenvalue errors are second order in the vectors' (rtol 1e-4): 1e-6 relative is a
    # bound with room; the vectors are float32-orthonormal
    np.testing.assert_allclose(res.eigenvalues, want, rtol=1e-6)
    y = res.eigenvectors.astype(np.float64)
    np.testing.assert_allclose(y.T @ y, np.eye(r), atol=1e-5)
    true = _true_relative_residuals(a, res)
    assert true.max() <= 1e-4 + 1e-5  # the estimate that stopped it, up to float32 rounding
    assert np.rad2deg(sla.subspace_angles(y, vecs).max()) < 0.05


def test_vectors_false_returns_no_ritz_vectors_but_their_images():
    rng = np.random.default_rng(5)
    g = rng.standard_normal((40, 90)) * (0.9 ** np.arange(90))
    op = _Factored(g, g.copy())
    kw = {"block_size": 6, "rtol": 1e-9, "maxiter": 200, "seed": 0, "track_images": True}
    full = block_lanczos(op, 5, **kw)
    bare = block_lanczos(op, 5, vectors=False, **kw)
    assert bare.eigenvectors is None and bare.leading_block is None
    np.testing.assert_array_equal(bare.images, full.images)
    np.testing.assert_array_equal(bare.eigenvalues, full.eigenvalues)
    # a leading block asked for is still returned
    lead = block_lanczos(op, 5, vectors=False, n_vectors=7, **kw)
    assert lead.eigenvectors is None and lead.leading_block.shape == (90, 7)


@pytest.mark.parametrize("max_basis", [None, 30])
def test_tracked_images_stay_f_of_the_basis_in_one_buffer_through_restarts(max_basis):
    """The kept images are column blocks of one buffer, rotated in place at each thick
    restart (no second n_img x keep array), and stay exactly ``F V`` of the applied basis
    columns; an unbounded basis grows the buffer instead (its blocks follow it)."""
    rng = np.random.default_rng(7)
    g = rng.standard_normal((40, 90)) * (0.9 ** np.arange(90))
    s = _psd("decaying", n=40, seed=2) + np.eye(40)
    f = s @ g
    op = _Factored(g, f)
    seen = []

    def check(st):
        v = st.basis[:, : st.n_applied]
        images = np.hstack(st.images)
        np.testing.assert_allclose(images, f @ v, rtol=0, atol=1e-10 * np.abs(f).max())
        bases = {id(blk.base) for blk in st.images}
        assert len(bases) == 1 and all(blk.base is not None for blk in st.images)
        seen.append(st.n_restarts)

    res = block_lanczos(
        op, 5, block_size=6, rtol=1e-8, maxiter=200, seed=0, max_basis=max_basis,
        track_images=True, checkpoint=check, on_finish=check,
    )  # fmt: skip
    assert res.converged
    if max_basis is not None:
        assert res.n_restarts > 0 and max(seen) > 0


def test_a_result_without_vectors_frees_the_basis_before_its_images(monkeypatch):
    """Without Ritz vectors the basis buffer is dropped before the images' Ritz combination
    is made (the end of a large fit holds no K x m array beside them), even though the
    caller still holds the state; ``on_finish`` sees the whole final state first. With
    Ritz vectors the caller's state keeps its basis."""
    import pipeline.linalg.block_lanczos as bl

    rng = np.random.default_rng(5)
    g = rng.standard_normal((40, 90)) * (0.9 ** np.arange(90))
    op = _Factored(g, g.copy())
    kw = {"block_size": 6, "rtol": 1e-9, "maxiter": 200, "seed": 0, "track_images": True}
    alive_at_images = []
    real = bl.ritz_images

    def spy(state, coef):
        alive_at_images.append(buffers[-1]() is not None)
        return real(state, coef)

    monkeypatch.setattr(bl, "ritz_images", spy)
    buffers, finished = [], []

    def on_finish(st):
        finished.append((st.basis.shape, st.n_applied))
        buffers.append(weakref.ref(st.basis.base))  # the buffer the basis is a view of

    for vectors in (False, True):
        st = initial_state(90, 6, 0)
        block_lanczos(op, 5, state=st, vectors=vectors, on_finish=on_finish, **kw)
        assert finished[-1][0][1] >= finished[-1][1] > 0  # the full basis, once
        if vectors:
            assert alive_at_images[-1] and buffers[-1]() is not None
            assert st.basis.shape == finished[-1][0]
        else:
            assert not alive_at_images[-1] and buffers[-1]() is None
            assert st.basis.shape == (90, 0)
    assert len(finished) == 2
