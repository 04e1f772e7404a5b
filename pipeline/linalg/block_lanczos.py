r"""Top eigenpairs of a symmetric PSD operator by block Lanczos with full re-orthogonalisation.

Each iteration applies the operator **once** to the newest block Q_a (n × b) — for Cr5 that is
one C-product, one Woodbury solve and one Cᵀ-product — and orthogonalises ``W = A Q_a`` twice
against the whole basis V (classical Gram–Schmidt, twice is enough). The projection
coefficients ``Vᵀ(A Q_a)`` are kept, so the Rayleigh quotient ``H = Vᵀ A V`` is available
exactly (not only its block-tridiagonal part); it is symmetrised, ``T = (H + Hᵀ)/2``, which
makes the method robust to an operator that is symmetric only up to the inner solves'
tolerance. Rank-deficient blocks (invariant subspaces, null space of A) are completed with
seeded random directions. With ``max_basis`` set, the basis is thick-restarted from the
leading Ritz vectors (Krylov–Schur style), bounding memory to ``n · max_basis`` numbers.

Basis precision. The basis may be kept in float32 (``basis_dtype``; Cr5 keeps it in its
passes' dtype): half the driver's largest array. Every product with it is computed in
float64 row step by row step (:mod:`~pipeline.linalg.dense`), so the projections,
the Rayleigh quotient and the residual estimates are those of the stored basis itself,
whose columns are orthonormal to float32's rounding (~1e-7): far below any tolerance the
solver is run at with float32 passes, whose own products carry errors of that size.

Wide starts. A start block wider than b (a λ path starts from the previous λ's r Ritz
vectors) is applied b columns at a time, in order, and every residual direction of every
application joins the basis behind the columns still waiting. So ``A V_applied ⊂ span(V)``
holds exactly at every step, the Rayleigh quotient and the residual estimates below stay
exact, and after the start the solver continues b columns at a time. (Keeping only b of a
wide block's residual directions would break that relation: the residual estimates would
miss the dropped part and stop early, and the symmetrised ``T`` would no longer be a
Rayleigh quotient.)

Tracked images. When the operator factors as ``A = Gᵀ F`` and ``F`` of the eigenvectors is
wanted too (Cr5: ``F = Â⁻¹C``, whose image of the eigenvectors is Φ*ᵀ), an operator with
``matmat_with_image(V) -> (A V, F V)`` and ``track_images=True`` keep ``F V`` for every applied
column, transformed with the basis at restarts. Ritz vectors are ``V S``, so their images are
``(F V) S``: no further application of F (which for Cr5 would be r more inner solves).

Stopping rule. With Ritz pairs ``(θ_i, y_i = V s_i)``, θ_1 ≥ θ_2 ≥ …, the residual satisfies
``A y_i − θ_i y_i = Q_new (R s_i)`` (up to the operator's asymmetry), so the solver stops at
the first iteration where

.. math::  \rho_i = \frac{\|R\, s_i^{\text{last}}\|_2}{\theta_i} \le \varepsilon
           \quad \text{for all } i = 1..r

(ρ_i is the residual relative to its own eigenvalue; paper: ε = 0.1, cap T = 250 iterations).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import scipy.linalg as sla

from pipeline.errors import BreakdownError, ConvergenceWarning
from pipeline.linalg.checkpoint import ColumnBlocks
from pipeline.linalg.dense import tall_matmul, tall_matmul_blocks, tall_t_matmul
from pipeline.linalg.operator import BlockOperator
from pipeline.linalg.params import CR5_DEFAULTS as _D
from pipeline.linalg.progress import ProgressClock, format_seconds
from pipeline.linalg.spill import copy_rows, in_memory, mapping_of, release, spilled_empty

__all__ = [
    "LanczosResult",
    "LanczosState",
    "block_lanczos",
    "initial_state",
    "orthonormal_columns",
    "restart_due",
    "ritz_images",
]

logger = logging.getLogger(__name__)

_FLOAT64 = np.dtype(np.float64)


@dataclass
class LanczosState:
    """Complete, checkpointable state between two iterations.

    Attributes
    ----------
    basis : ndarray of shape (n, m)
        Orthonormal basis V; its first ``n_applied`` columns have been multiplied by A, the
        rest is the next block to apply.
    h : ndarray of shape (m, n_applied)
        ``Vᵀ A V[:, :n_applied]``.
    n_applied : int
    n_iter : int
    n_restarts : int
    ritz_history, residual_history : list of ndarray of shape (r,)
    rng_state : dict
        State of the numpy ``PCG64`` generator (JSON-serialisable).
    images : list of ndarray, shapes (n_img, b_i) with sum(b_i) = n_applied
        ``F V[:, :n_applied]`` in column blocks when images are tracked (module docstring),
        kept as a list so that an iteration appends instead of copying them all.
    """

    basis: np.ndarray
    h: np.ndarray
    n_applied: int
    n_iter: int = 0
    n_restarts: int = 0
    ritz_history: list[np.ndarray] = field(default_factory=list)
    residual_history: list[np.ndarray] = field(default_factory=list)
    rng_state: dict = field(default_factory=dict)
    images: list[np.ndarray] = field(default_factory=list)

    def arrays(self) -> dict[str, np.ndarray | ColumnBlocks]:
        """The array part (for ``.npy`` files). The images are :class:`ColumnBlocks` of the
        kept blocks: a checkpoint streams them into one file instead of stacking a copy of
        them all (a copy that would be the driver's peak memory when the last iteration is
        saved)."""
        r = len(self.ritz_history[0]) if self.ritz_history else 0
        out = {
            # a file-backed basis is streamed too, so that saving it pages it through
            "basis": ColumnBlocks([self.basis])
            if mapping_of(self.basis) is not None
            else self.basis,
            "h": self.h,
            "ritz_history": np.array(self.ritz_history).reshape(-1, r),
            "residual_history": np.array(self.residual_history).reshape(-1, r),
        }
        if self.images:
            out["images"] = ColumnBlocks(self.images)
        return out

    def meta(self) -> dict:
        """The scalar part (for JSON)."""
        return {
            "n_applied": self.n_applied,
            "n_iter": self.n_iter,
            "n_restarts": self.n_restarts,
            "rng_state": self.rng_state,
        }

    @classmethod
    def from_parts(cls, arrays: dict[str, np.ndarray], meta: dict) -> LanczosState:
        return cls(
            basis=arrays["basis"],
            h=arrays["h"],
            n_applied=int(meta["n_applied"]),
            n_iter=int(meta["n_iter"]),
            n_restarts=int(meta["n_restarts"]),
            ritz_history=list(arrays["ritz_history"]),
            residual_history=list(arrays["residual_history"]),
            rng_state=meta["rng_state"],
            images=[np.asarray(arrays["images"])] if "images" in arrays else [],
        )


@dataclass
class LanczosResult:
    """Result of :func:`block_lanczos`.

    Attributes
    ----------
    eigenvalues : ndarray of shape (r,)
        Descending Ritz values.
    eigenvectors : ndarray of shape (n, r) or None
        Orthonormal Ritz vectors, in the basis dtype; None when not wanted
        (``vectors=False``: a caller that needs only their images spares an n x r array).
    n_iter : int
        Operator applications (each on one block).
    converged : bool
    ritz_values : ndarray of shape (n_iter, r)
        Leading Ritz values after each iteration.
    residual_norms : ndarray of shape (n_iter, r)
        Relative residual estimates ρ_i after each iteration.
    n_restarts : int
    images : ndarray of shape (n_img, r) or None
        ``F`` of the eigenvectors when images were tracked.
    leading_block : ndarray of shape (n, n_vectors) or None
        The leading ``n_vectors`` Ritz vectors when ``n_vectors`` was given (fewer or more
        than r; they share memory with ``eigenvectors``): a start block for a related
        problem.
    leading_images : ndarray of shape (n_img, n_vectors) or None
        Their tracked images, when images were tracked (sharing memory with ``images``).
    stopped_by : {"residual", "maxiter", "monitor"}
        What ended the iteration (``"residual"`` also when the basis spans the space).
    """

    eigenvalues: np.ndarray
    eigenvectors: np.ndarray | None
    n_iter: int
    converged: bool
    ritz_values: np.ndarray
    residual_norms: np.ndarray
    n_restarts: int = 0
    images: np.ndarray | None = None
    leading_block: np.ndarray | None = None
    leading_images: np.ndarray | None = None
    stopped_by: str = "residual"

    def to_history(self) -> dict:
        """JSON-ready summary; Ritz values and residuals not available yet (NaN/inf while the
        basis is narrower than r) are recorded as -1, so the history is strict JSON."""
        return {
            "n_iter": self.n_iter,
            "converged": self.converged,
            "n_restarts": self.n_restarts,
            "stopped_by": self.stopped_by,
            "eigenvalues": self.eigenvalues.tolist(),
            "ritz_values": np.where(np.isfinite(self.ritz_values), self.ritz_values, -1.0).tolist(),
            "residual_norms": np.where(
                np.isfinite(self.residual_norms), self.residual_norms, -1.0
            ).tolist(),
        }


#: |QᵀQ − I| below which :func:`orthonormal_columns` returns Q as it is
ORTHONORMAL_TOL = 1e-12


def orthonormal_columns(q: np.ndarray) -> np.ndarray:
    """An orthonormal basis of span(q) (shape of q, full column rank assumed); q itself when
    its columns are orthonormal to :data:`ORTHONORMAL_TOL` (a λ path's start: its Ritz
    vectors need no second orthonormalisation).

    CholeskyQR2 (two passes of ``Q ← Q L⁻ᵀ`` with ``L Lᵀ = QᵀQ``): two GEMMs and two
    triangular solves, several times faster than Householder QR on tall blocks, and as
    accurate when QᵀQ is not near-singular; falls back to Householder QR when Cholesky fails
    or the block is ill-conditioned.
    """
    for attempt in range(2):
        g = q.T @ q
        if attempt == 0 and np.abs(g - np.eye(g.shape[0])).max() <= ORTHONORMAL_TOL:
            return q  # already orthonormal (e.g. a λ path's Ritz vectors): nothing to do
        d = np.sqrt(np.diag(g))
        if not np.all(d > 0):
            return np.linalg.qr(q)[0]
        # scaled Gram matrix: its condition number decides whether CholeskyQR is safe
        gs = g / np.outer(d, d)
        try:
            chol = np.linalg.cholesky(gs)
        except np.linalg.LinAlgError:
            return np.linalg.qr(q)[0]
        if np.min(np.diag(chol)) < 1e-6:  # cond(gs) > ~1e12: CholeskyQR loses orthogonality
            return np.linalg.qr(q)[0]
        q = sla.solve_triangular(chol, (q / d).T, lower=True, check_finite=False).T
    return q


def initial_state(
    n: int,
    block_size: int,
    seed: int,
    warm: Callable[[np.ndarray], np.ndarray] | None = None,
    *,
    start: np.ndarray | None = None,
) -> LanczosState:
    """Seeded start: an orthonormal block of shape (n, block_size).

    The block is random; ``warm(Q)`` (shape-preserving, e.g. a few steps of subspace
    iteration on a cheap approximation of the operator) is applied to it before the final
    orthonormalisation. ``start`` (n x c, c <= block_size; not with ``warm``): its columns
    come first, completed with random ones (none drawn when c = block_size, which spares a
    λ path's fit orthonormalising a random block it would not use). The generator state
    after drawing is kept in the state.
    """
    rng = np.random.default_rng(seed)
    if start is not None:
        if warm is not None or start.shape[0] != n or start.shape[1] > block_size:
            raise ValueError(
                f"start must have shape ({n}, c) with c <= {block_size}, without warm; "
                f"got {start.shape}"
            )
        extra = rng.standard_normal((n, block_size - start.shape[1]))
        q = orthonormal_columns(np.hstack([np.asarray(start, dtype=np.float64), extra]))
    else:
        q = orthonormal_columns(rng.standard_normal((n, block_size)))
    if warm is not None:
        q = orthonormal_columns(np.asarray(warm(q), dtype=np.float64))
    return LanczosState(
        basis=q, h=np.zeros((block_size, 0)), n_applied=0, rng_state=rng.bit_generator.state
    )


def _orthogonalise(basis: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two classical Gram–Schmidt passes; returns (coefficients, residual block)."""
    coef = tall_t_matmul(basis, w)
    w = tall_matmul(basis, coef, out=w.copy(), subtract=True)
    coef2 = tall_t_matmul(basis, w)
    tall_matmul(basis, coef2, out=w, subtract=True)
    return coef + coef2, w


def _new_block(
    basis: np.ndarray, w: np.ndarray, width: int, scale: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Orthonormal Q_new (n × k) and coupling R (k × b) with ``W ≈ Q_new R``.

    Numerically dependent directions are dropped from R and replaced by random directions
    orthogonal to everything (coupling 0), keeping the block ``width`` wide if space allows.
    """
    n = basis.shape[0]
    room = n - basis.shape[1]
    width = min(width, room)
    if width <= 0:
        return np.zeros((n, 0)), np.zeros((0, w.shape[1]))
    q, r, piv = sla.qr(w, mode="economic", pivoting=True)
    diag = np.abs(np.diag(r))
    rank = int(np.sum(diag > 1e-10 * max(scale, np.finfo(float).tiny)))
    rank = min(rank, width)
    r_unpiv = np.zeros_like(r)
    r_unpiv[:, piv] = r
    q, r_unpiv = q[:, :rank], r_unpiv[:rank]
    if rank < width:
        extra = rng.standard_normal((n, width - rank))
        full = np.hstack([basis, q])
        for _ in range(2):
            extra -= full @ (full.T @ extra)
        extra, _ = np.linalg.qr(extra)
        q = np.hstack([q, extra])
        r_unpiv = np.vstack([r_unpiv, np.zeros((width - rank, w.shape[1]))])
    return q, r_unpiv


def _ritz(state: LanczosState, r: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Descending Ritz values θ (all), vectors S of T, and relative residuals ρ (top r)."""
    m = state.n_applied
    hm = state.h[:m, :m]
    t = 0.5 * (hm + hm.T)
    theta, s = np.linalg.eigh(t)
    theta, s = theta[::-1], s[:, ::-1]
    coupling = state.h[m:, :m] @ s[:, :r]
    res = np.linalg.norm(coupling, axis=0)
    ref = np.where(np.abs(theta[:r]) > 0, np.abs(theta[:r]), max(abs(theta[0]), 1e-300))
    return theta, s, res / ref


def block_lanczos(
    a: BlockOperator,
    r: int,
    *,
    block_size: int | None = None,
    rtol: float = _D.eig_rtol,
    maxiter: int = _D.eig_maxiter,
    seed: int = _D.seed,
    max_basis: int | None = None,
    state: LanczosState | None = None,
    checkpoint: Callable[[LanczosState], None] | None = None,
    checkpoint_every: int = 1,
    callback: Callable[[int, np.ndarray, np.ndarray], None] | None = None,
    track_images: bool = False,
    n_vectors: int | None = None,
    monitor: Callable[[LanczosState, np.ndarray, np.ndarray], bool] | None = None,
    name: str = "lanczos",
    basis_dtype: np.dtype | type = np.float64,
    vectors: bool = True,
    on_finish: Callable[[LanczosState], None] | None = None,
    spill_dir: str | None = None,
) -> LanczosResult:
    """Leading ``r`` eigenpairs of a symmetric positive semi-definite operator.

    Parameters
    ----------
    a : BlockOperator of shape (n, n)
        Symmetric PSD; only ``a.matmat`` on (n, block_size) blocks is used.
    r : int
        Number of eigenpairs, ``1 <= r <= n``.
    block_size : int, optional
        Block width b (default ``r``); ``r + oversampling`` speeds up convergence.
    rtol : float
        ε of the stopping rule (module docstring). Paper: 0.1.
    maxiter : int
        Cap on operator applications T. Paper: 250. Reaching it warns.
    seed : int
        Seeds the start block (and any random completion): results are reproducible.
    max_basis : int, optional
        Thick-restart when the basis would exceed this many columns (must be
        ``>= max(r, block_size) + 2 * block_size``, or with a start block of c > block_size
        columns ``>= max(r, block_size) + c + block_size``). Default: no restart.
    state : LanczosState, optional
        Resume from this state (e.g. loaded from a checkpoint), or a start from
        :func:`initial_state`, whose block may be wider than ``block_size``: it is then
        applied ``block_size`` columns at a time (module docstring).
    checkpoint : callable, optional
        ``checkpoint(state)`` every ``checkpoint_every`` iterations (after the update, before
        ``callback``).
    checkpoint_every : int
    callback : callable, optional
        ``callback(iteration, ritz_values, residuals)`` each iteration (shapes (r,)); may raise.
    track_images : bool
        Keep ``F V`` from ``a.matmat_with_image`` (module docstring); the result's ``images``
        are then F of the eigenvectors.
    n_vectors : int, optional
        Also return the leading ``n_vectors`` Ritz vectors as ``leading_block`` (e.g. to
        start the eigensolver of a neighbouring problem; with a block narrower than r, fewer
        than r). Default: none.
    monitor : callable, optional
        ``monitor(state, theta, s)`` after each iteration, before any restart, with the Ritz
        values θ (all, descending) and the eigenvectors S of the projected matrix (the Ritz
        vectors are ``state.basis[:, :state.n_applied] @ S``); returning True stops the
        iteration (an outside stopping rule, e.g. validation retrieval; the result's
        ``stopped_by`` is then ``"monitor"``).
    name : str
        Label for log lines.
    basis_dtype : {float64, float32}
        Storage of the basis (module docstring, "Basis precision").
    vectors : bool
        Return the Ritz vectors (``eigenvectors``); False: None, unless ``n_vectors`` asks
        for a leading block. Without Ritz vectors nothing in the result needs the basis, so
        it is freed before the result is formed (``state.basis`` keeps its rows and no
        columns): the end of the eigensolver then holds the kept images and their Ritz
        combination, not the K x m basis beside them.
    on_finish : callable, optional
        ``on_finish(state)`` once, after the last iteration and before the result is formed:
        the last moment the whole final state exists (a final checkpoint).
    spill_dir : str, optional
        Keep the basis and the tracked images in files of this local directory, mapped into
        memory and paged out row chunk by row chunk as they are used
        (:mod:`pipeline.linalg.spill`): the process then holds the chunks in use, not the
        K x max_basis and n_img x max_basis arrays. Same results. Default: in memory.

    Returns
    -------
    LanczosResult

    Raises
    ------
    BreakdownError
        NaN/Inf from the operator.
    """
    b, state = _checked_start(
        a, r, block_size, seed, max_basis, state, checkpoint_every, track_images
    )
    run = _LanczosRun(
        a,
        r,
        b,
        state,
        rtol=rtol,
        maxiter=maxiter,
        max_basis=max_basis,
        name=name,
        basis_dtype=np.dtype(basis_dtype),
        spill_dir=spill_dir,
    )
    converged, stopped = run.iterate(
        track_images=track_images,
        checkpoint=checkpoint,
        checkpoint_every=checkpoint_every,
        callback=callback,
        monitor=monitor,
    )
    if on_finish is not None:
        on_finish(run.state)
    return run.result(n_vectors, converged=converged, stopped=stopped, vectors=vectors)


def _checked_start(
    a: BlockOperator,
    r: int,
    block_size: int | None,
    seed: int,
    max_basis: int | None,
    state: LanczosState | None,
    checkpoint_every: int,
    track_images: bool,
) -> tuple[int, LanczosState]:
    """The block width b and the state to start from (a fresh one without ``state``), after
    checking the arguments of :func:`block_lanczos` against the operator and each other."""
    n = a.shape[0]
    if a.shape != (n, n):
        raise ValueError(f"operator must be square; got shape {a.shape}")
    if not 1 <= r <= n:
        raise ValueError(f"r must satisfy 1 <= r <= {n}; got {r}")
    b = r if block_size is None else int(block_size)
    if not 1 <= b <= n:
        raise ValueError(f"block_size must satisfy 1 <= block_size <= {n}; got {block_size}")
    # the columns not yet applied: b, or the width of a wider start block
    waiting = b if state is None else max(b, state.basis.shape[1] - state.n_applied)
    if max_basis is not None and max_basis < max(r, b) + waiting + b:
        rule = "2*block_size" if waiting == b else f"start width {waiting} + block_size"
        raise ValueError(
            f"max_basis must be >= max(r, block_size) + {rule} = {max(r, b) + waiting + b}; "
            f"got {max_basis}"
        )
    if checkpoint_every < 1:
        raise ValueError(f"checkpoint_every must be >= 1; got {checkpoint_every}")
    if track_images and not hasattr(a, "matmat_with_image"):
        raise TypeError(f"track_images needs an operator with matmat_with_image; got {a!r}")
    if state is None:
        state = initial_state(n, b, seed)
    elif state.basis.shape[0] != n:
        raise ValueError(f"resume state has {state.basis.shape[0]} rows; operator has {n}")
    if track_images and state.n_applied > 0 and not state.images:
        raise ValueError("resume state has no tracked images; start afresh or track none")
    return b, state


class _LanczosRun:
    """The iteration of :func:`block_lanczos` on one state, which it updates in place (after
    the run it holds the final state), with the random generator, the basis buffer and the
    progress clock that go with it."""

    def __init__(
        self,
        a: BlockOperator,
        r: int,
        b: int,
        state: LanczosState,
        *,
        rtol: float,
        maxiter: int,
        max_basis: int | None,
        name: str,
        basis_dtype: np.dtype = _FLOAT64,
        spill_dir: str | None = None,
    ) -> None:
        if basis_dtype not in (np.float32, np.float64):
            raise ValueError(f"basis_dtype must be float32 or float64; got {basis_dtype}")
        self.a, self.r, self.b, self.state = a, r, b, state
        self.rtol, self.maxiter, self.max_basis, self.name = rtol, maxiter, max_basis, name
        self.rng = np.random.default_rng()
        self.rng.bit_generator.state = state.rng_state
        # The basis lives in one preallocated buffer (state.basis is a view of its first
        # columns): appending a block or restarting copies no more than the block, so the
        # driver's peak is one K x max_basis array, not two while np.hstack builds the next.
        self.buf = _BasisBuffer(state.basis, max_basis, basis_dtype, spill_dir)
        state.basis = self.buf.view()
        # the tracked images likewise, so that a restart rotates them in place
        self.images = _ImageBuffer(state.images, max_basis, spill_dir)
        state.images = self.images.blocks
        self.clock = ProgressClock(maxiter, rtol, start_iteration=state.n_iter)

    def iterate(
        self,
        *,
        track_images: bool,
        checkpoint: Callable[[LanczosState], None] | None,
        checkpoint_every: int,
        callback: Callable[[int, np.ndarray, np.ndarray], None] | None,
        monitor: Callable[[LanczosState, np.ndarray, np.ndarray], bool] | None,
    ) -> tuple[bool, bool]:
        """Iterate until the stopping rule, the monitor or ``maxiter``; returns
        ``(converged, stopped by the monitor)``."""
        state, r, b, rtol = self.state, self.r, self.b, self.rtol
        converged = False
        stopped = False
        theta = s = rho = None
        if state.n_applied > 0:
            theta, s, rho = _ritz(state, r)
            converged = state.n_applied >= r and bool(np.all(rho <= rtol))
        while not converged and not stopped and state.n_iter < self.maxiter:
            # at most b columns per application: a start wider than b (a λ path's previous
            # Ritz vectors) is applied in turns, its residual directions waiting behind it
            if state.basis.shape[1] - state.n_applied > b and state.n_applied >= r:
                if theta is None:  # a restart replaced the decomposition
                    theta, s, rho = _ritz(state, r)
                _most_wanted_first(state, s, theta, rho, r, b, rtol, self.buf)
            k = self._expand(track_images)
            if k is None:  # the basis spans the whole space: Ritz pairs are exact
                converged = True
                break
            theta, s, rho = _ritz(state, r)
            if not np.all(np.isfinite(theta)):
                raise BreakdownError(
                    f"{self.name}: NaN in the Ritz values at iteration {state.n_iter}"
                )
            ritz_r, rho_r = self._record(theta, rho)
            # no room for new directions and none waiting: the basis spans the space, exact
            spans = k == 0 and state.n_applied == state.basis.shape[1]
            converged = (state.n_applied >= r and bool(np.all(rho <= rtol))) or spans
            self._log(theta, ritz_r, rho_r)
            if monitor is not None:
                stopped = bool(monitor(state, theta, s)) and not converged
            if not converged and not stopped:
                if restart_due(state, b, self.max_basis):
                    keep = self._restart_size(self.max_basis)
                    _thick_restart(
                        state, theta, s, keep=keep, buf=self.buf, b=b, images=self.images
                    )
                    theta = s = rho = None
                state.rng_state = self.rng.bit_generator.state
                if checkpoint is not None and state.n_iter % checkpoint_every == 0:
                    checkpoint(state)
            if callback is not None:
                callback(state.n_iter, ritz_r, rho_r)
            self.release()
        return converged, stopped

    def release(self) -> None:
        """Page out file-backed buffers (``spill_dir``) between iterations: what the
        iteration touched outside the row-chunked products (the appended block, the
        monitor's rows, a checkpoint) leaves the process; nothing for in-memory buffers."""
        release(self.buf.data)
        release(self.images.data)

    def _expand(self, track_images: bool) -> int | None:
        """Apply the operator to the next block Q_a, orthogonalise ``W = A Q_a`` against the
        basis and append the new directions; returns their number k, or None when no column
        waits (the basis spans the whole space)."""
        state, b = self.state, self.b
        m_total = state.basis.shape[1]
        # a file-backed basis: the operator reads a copy, so the passes over X do not keep
        # the basis's pages (a row-major block spans all of them) in the process
        q_a = in_memory(state.basis[:, state.n_applied : state.n_applied + b])
        if q_a.shape[1] == 0:
            return None
        n_a = q_a.shape[1]
        if track_images:
            w, image = self.a.matmat_with_image(q_a)
            w = np.asarray(w, dtype=np.float64)
            state.images = self.images.append(image)
        else:
            w = np.asarray(self.a.matmat(q_a), dtype=np.float64)
        if not np.all(np.isfinite(w)):
            raise BreakdownError(
                f"{self.name}: NaN/Inf from the operator at iteration {state.n_iter + 1}"
            )
        scale = float(np.max(np.linalg.norm(w, axis=0), initial=0.0))
        coef, w = _orthogonalise(state.basis, w)
        q_new, r_new = _new_block(state.basis, w, b, scale, self.rng)
        k = q_new.shape[1]
        # rows: every basis column; columns: the applied ones. Q_new is orthogonal to the
        # whole basis, which holds A V of every earlier applied column: their rows are 0.
        applied = state.n_applied + n_a
        h = np.zeros((m_total + k, applied))
        h[: state.h.shape[0], : state.n_applied] = state.h
        h[:m_total, state.n_applied : applied] = coef
        h[m_total:, state.n_applied : applied] = r_new
        state.h = h
        state.basis = self.buf.append(q_new)
        state.n_applied = applied
        state.n_iter += 1
        return k

    def _record(self, theta: np.ndarray, rho: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The leading r Ritz values and residuals (NaN / inf where the basis is narrower than
        r), appended to the state's history."""
        r, state = self.r, self.state
        rr = min(r, state.n_applied)
        ritz_r = np.full(r, np.nan)
        ritz_r[:rr] = theta[:rr]
        rho_r = np.full(r, np.inf)
        rho_r[: rho.shape[0]] = rho
        state.ritz_history.append(ritz_r)
        state.residual_history.append(rho_r)
        return ritz_r, rho_r

    def _log(self, theta: np.ndarray, ritz_r: np.ndarray, rho_r: np.ndarray) -> None:
        state = self.state
        max_rho = float(np.max(rho_r))
        logger.info(
            "%s it=%d/%d basis=%d theta_1=%.6g theta_r=%.6g max_rel_res=%.3e n_conv=%d/%d "
            "elapsed=%s eta=%s",
            self.name,
            state.n_iter,
            self.maxiter,
            state.n_applied,
            theta[0],
            ritz_r[-1],
            max_rho,
            int(np.sum(rho_r <= self.rtol)),
            self.r,
            format_seconds(self.clock.elapsed()),
            format_seconds(self.clock.eta(state.n_iter, max_rho)),
        )

    def _restart_size(self, max_basis: int) -> int:
        """Ritz vectors a thick restart keeps.

        Room for two blocks after the restart: with a wide start's residual directions waiting
        (a λ path), room for one restarted every iteration (a restart cuts the waiting
        directions to as many as the Ritz vectors it keeps, hence the second bound:
        2 keep + 2 b <= max_basis).
        """
        b = self.b
        waiting = self.state.basis.shape[1] - self.state.n_applied
        room = max(max_basis - waiting - 2 * b, (max_basis - 2 * b) // 2)
        return max(self.r, min(room, max_basis // 2))

    def free_basis(self) -> None:
        """Drop the basis buffer: ``state.basis`` becomes an empty (K, 0) array of its
        dtype (a view of the buffer would keep all of it alive)."""
        n, dtype = self.state.basis.shape[0], self.state.basis.dtype
        self.buf = None
        self.state.basis = np.empty((n, 0), dtype=dtype)

    def result(
        self, n_vectors: int | None, *, converged: bool, stopped: bool, vectors: bool = True
    ) -> LanczosResult:
        """The Ritz pairs of the final (possibly just restarted) basis; warns when neither
        the residual rule nor the monitor ended the run. ``vectors=False`` without
        ``n_vectors``: no Ritz vectors (only values and images), and the basis is freed
        first."""
        state, r, rtol = self.state, self.r, self.rtol
        if state.n_applied == 0:  # maxiter == 0 on a fresh start
            raise ValueError("maxiter must be >= 1 for a fresh start")
        theta, s, rho = _ritz(state, r)
        if not vectors and n_vectors is None:
            self.free_basis()
        if not converged and not stopped:
            warnings.warn(
                f"{self.name}: {int(np.sum(rho > rtol))} of {r} Ritz pairs did not reach "
                f"rtol={rtol} in maxiter={self.maxiter} iterations (max relative residual "
                f"{float(np.max(rho)):.3e})",
                ConvergenceWarning,
                stacklevel=3,  # block_lanczos's caller
            )
        rr = min(r, state.n_applied)
        nv = min(max(rr, n_vectors or 0), state.n_applied)
        leading = None
        if vectors or n_vectors is not None:
            # in the basis dtype: a float32 basis's Ritz vectors need no n x r float64 copy
            dtype = state.basis.dtype
            leading = np.empty((state.basis.shape[0], nv), dtype=dtype)
            tall_matmul(state.basis[:, : state.n_applied], s[:, :nv].astype(dtype), out=leading)
        lead_images = ritz_images(state, s[:, :nv]) if state.images else None
        n_lead = None if n_vectors is None else min(n_vectors, nv)
        return LanczosResult(
            eigenvalues=theta[:rr].copy(),
            eigenvectors=leading[:, :rr] if vectors and leading is not None else None,
            leading_block=None if n_lead is None or leading is None else leading[:, :n_lead],
            leading_images=None
            if n_lead is None or lead_images is None
            else lead_images[:, :n_lead],
            n_iter=state.n_iter,
            converged=converged,
            ritz_values=np.array(state.ritz_history).reshape(-1, r),
            residual_norms=np.array(state.residual_history).reshape(-1, r),
            n_restarts=state.n_restarts,
            images=None if lead_images is None else np.ascontiguousarray(lead_images[:, :rr]),
            stopped_by="residual" if converged else "monitor" if stopped else "maxiter",
        )


def restart_due(state: LanczosState, b: int, max_basis: int | None) -> bool:
    """Whether the iteration that just ended is followed by a thick restart (when neither
    rule stopped it): the next block would not fit in ``max_basis`` columns."""
    return max_basis is not None and state.basis.shape[1] + b > max_basis


def ritz_images(state: LanczosState, coef: np.ndarray) -> np.ndarray:
    """Tracked images of the Ritz vectors ``V S``: ``F V S`` (n_img, coef columns)."""
    return tall_matmul_blocks(state.images, coef)


class _BasisBuffer:
    """A K x capacity buffer (float64 or float32) whose first columns are the Lanczos basis.

    Capacity: ``max_basis`` when bounded (the basis never exceeds it), else grown by
    doubling. :meth:`append` writes a block in place; :meth:`restart` overwrites the applied
    part with ``V[:, :m] S`` row chunk by row chunk (row i of the product needs only row i
    of V), so a thick restart needs no second K x m array either.
    """

    def __init__(
        self,
        basis: np.ndarray,
        max_basis: int | None,
        dtype: np.dtype = _FLOAT64,
        spill_dir: str | None = None,
    ) -> None:
        n, m = basis.shape
        cap = max(m, min(n, max_basis)) if max_basis is not None else max(m, 2 * m)
        self.spill_dir = spill_dir
        self.data = _empty((n, cap), dtype, "C", spill_dir)
        copy_rows(self.data[:, :m], basis)
        self.m = m

    def view(self) -> np.ndarray:
        return self.data[:, : self.m]

    def append(self, block: np.ndarray) -> np.ndarray:
        k = block.shape[1]
        if self.m + k > self.data.shape[1]:  # unbounded basis: grow (amortised doubling)
            grown = _empty(
                (self.data.shape[0], max(2 * self.data.shape[1], self.m + k)),
                self.data.dtype,
                "C",
                self.spill_dir,
            )
            copy_rows(grown[:, : self.m], self.data[:, : self.m])
            self.data = grown
        copy_rows(self.data[:, self.m : self.m + k], block)
        self.m += k
        return self.view()

    def restart(self, m: int, coef: np.ndarray, waiting: np.ndarray | None = None) -> np.ndarray:
        """Columns ``[:m]`` become ``V[:, :m] @ coef`` (m x keep), then the unapplied
        columns ``[m:]`` follow them (times ``waiting``, (unapplied x k), if given); return
        the new view."""
        keep = coef.shape[1]
        dtype = self.data.dtype
        tail = self.data[:, m : self.m]
        # the waiting columns: b, or a λ path's wide start's residual directions
        if waiting is None:  # a copy (in row steps with a file-backed basis)
            tail = copy_rows(np.empty(tail.shape, dtype), tail)
        else:
            tail = tall_matmul(tail, waiting.astype(dtype))
        # row chunks (on threads): row i of the product needs only row i of V; in the
        # basis dtype (a float32 basis: single-precision products, no float64 casts of V's
        # rows; rotating by a float32 copy of the orthogonal coef perturbs the result by
        # float32's rounding, as storing it does)
        tall_matmul(self.data[:, :m], coef.astype(dtype), out=self.data[:, :keep])
        copy_rows(self.data[:, keep : keep + tail.shape[1]], tail)
        self.m = keep + tail.shape[1]
        return self.view()


class _ImageBuffer:
    """The tracked images ``F V[:, :n_applied]`` in one n_img x capacity buffer, whose
    column blocks (views) are ``state.images``.

    Column-major, so that appending a block touches only that block's pages (a row-major
    buffer would make its whole capacity resident with the first block). :meth:`restart`
    overwrites the first columns with ``hstack(images) @ coef`` row step by row step, in
    place (row i of the product needs only row i of the images): a thick restart needs no
    second n_img x keep array beside them. Allocated at the first block (its rows and dtype
    come from the operator); capacity ``max_basis`` columns, or grown by doubling.
    """

    def __init__(
        self, blocks: list[np.ndarray], max_basis: int | None, spill_dir: str | None = None
    ) -> None:
        self.max_basis, self.spill_dir = max_basis, spill_dir
        self.data: np.ndarray | None = None
        self.m = 0
        self.blocks: list[np.ndarray] = []
        for blk in blocks:  # a resumed state's images
            self.append(blk)

    def append(self, block: np.ndarray) -> list[np.ndarray]:
        block = np.asarray(block)
        n, k = block.shape
        if self.data is None:
            cap = max(k, self.max_basis if self.max_basis is not None else 2 * k)
            self.data = _empty((n, cap), block.dtype, "F", self.spill_dir)
        elif self.m + k > self.data.shape[1]:  # unbounded basis (or a resumed wide state)
            grown = _empty(
                (n, max(2 * self.data.shape[1], self.m + k)), self.data.dtype, "F", self.spill_dir
            )
            copy_rows(grown[:, : self.m], self.data[:, : self.m])
            self.data = grown
            self._reslice()
        copy_rows(self.data[:, self.m : self.m + k], block)
        self.blocks.append(self.data[:, self.m : self.m + k])
        self.m += k
        return self.blocks

    def restart(self, coef: np.ndarray) -> list[np.ndarray]:
        """Columns ``[:keep]`` become ``images @ coef`` (m x keep); return the one block."""
        assert self.data is not None
        m, keep = coef.shape
        tall_matmul(self.data[:, :m], coef.astype(self.data.dtype), out=self.data[:, :keep])
        self.m = keep
        self.blocks = [self.data[:, :keep]]
        return self.blocks

    def _reslice(self) -> None:
        """New views of the same column ranges after the buffer moved."""
        assert self.data is not None
        lo, views = 0, []
        for blk in self.blocks:
            views.append(self.data[:, lo : lo + blk.shape[1]])
            lo += blk.shape[1]
        self.blocks = views


def _empty(
    shape: tuple[int, int], dtype: np.dtype, order: str, spill_dir: str | None
) -> np.ndarray:
    """An uninitialised buffer in memory, or in a file of ``spill_dir``."""
    if spill_dir is None:
        return np.empty(shape, dtype=dtype, order=order)
    return spilled_empty(shape, dtype, directory=spill_dir, order=order)


def _most_wanted_first(
    state: LanczosState,
    s: np.ndarray,
    theta: np.ndarray,
    rho: np.ndarray,
    r: int,
    b: int,
    rtol: float,
    buf: _BasisBuffer,
) -> None:
    """Rotate the waiting columns (more than a block of them, after a wide start) so that
    the b directions carrying most of the unconverged Ritz pairs' residuals come first.

    The residual of Ritz pair i is ``V_w G[:, i]`` with ``G = H_wa S / θ`` (waiting rows);
    the b leading left singular vectors U_b of G's unconverged columns are the waiting
    directions that reduce those residuals most. Applying the waiting columns in their
    order of arrival instead would expand the start's whole residual space breadth-first,
    like one very wide block, and take many more iterations.
    The rotation is the block reflector whose first b columns are U_b
    (:func:`_block_reflector`): 4 K u b flops for u waiting columns instead of 2 K u² for
    the full singular basis. Any orthogonal rotation of the waiting columns keeps every
    relation exact (and leaves ``θ, S, ρ`` of :func:`_ritz`, passed in, unchanged).
    """
    m = state.n_applied
    g = state.h[m:, :m] @ s[:, :r]
    g /= np.where(np.abs(theta[:r]) > 0, np.abs(theta[:r]), 1.0)
    open_ = rho > rtol
    u, _, _ = np.linalg.svd(g[:, open_] if np.any(open_) else g, full_matrices=False)
    y, t = _block_reflector(u[:, :b])
    waiting = buf.data[:, m : buf.m]
    xy = tall_matmul(waiting, y)  # V_w Q = V_w − (V_w Y) T Yᵀ, row chunk by row chunk
    tall_matmul(xy, t @ y.T, out=waiting, subtract=True)
    state.basis = buf.view()
    state.h[m:] -= y @ (t.T @ (y.T @ state.h[m:]))


def _block_reflector(u_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(Y, T)`` with ``Q = I − Y T Yᵀ`` orthogonal (u × u) and ``Q[:, :b] = U_b D``
    (D diagonal ±1) for orthonormal ``U_b`` (u × b): the compact WY form of the b Householder
    reflectors of U_b's QR factorisation (Schreiber & Van Loan 1989)."""
    (qr, tau), _ = sla.qr(u_b, mode="raw")
    b = u_b.shape[1]
    y = np.tril(qr[:, :b], -1)
    y[np.arange(b), np.arange(b)] = 1.0
    t = np.zeros((b, b))
    for j in range(b):  # LAPACK dlarft, forward, columnwise
        t[j, j] = tau[j]
        if j:
            t[:j, j] = -tau[j] * (t[:j, :j] @ (y[:, :j].T @ y[:, j]))
    return y, t


def _thick_restart(
    state: LanczosState,
    theta: np.ndarray,
    s: np.ndarray,
    keep: int,
    buf: _BasisBuffer,
    b: int,
    images: _ImageBuffer,
) -> None:
    """Replace the applied part of the basis by the ``keep`` leading Ritz vectors Y.

    The waiting columns V_w then matter only through ``A Y = Y Θ + V_w E``, and E
    (waiting x keep) has rank <= keep: with more waiting columns than that (a λ path's wide
    start leaves r + oversampling of them, applied b at a time, so they never drain) they
    are rotated onto E's left singular vectors and cut to ``max(keep, b)``. Exact: the
    directions cut are orthogonal to every kept residual. Without the cut, a path fit's
    restarts could keep only r Ritz vectors (its basis full of waiting directions) and would
    converge slowly at tight tolerances.
    """
    m = state.n_applied
    keep = min(keep, m)
    n_new = state.basis.shape[1] - m
    coupling = state.h[m:, :m] @ s[:, :keep]
    n_wait = min(n_new, max(keep, b))
    rotation = None
    if n_wait < n_new:
        u, _, _ = np.linalg.svd(coupling, full_matrices=True)
        rotation = u[:, :n_wait]
        coupling = rotation.T @ coupling
    h = np.zeros((keep + n_wait, keep))
    h[:keep, :keep] = np.diag(theta[:keep])
    h[keep:, :] = coupling
    state.basis = buf.restart(m, s[:, :keep], waiting=rotation)
    if state.images:
        state.images = images.restart(s[:, :keep])
    state.h = h
    state.n_applied = keep
    state.n_restarts += 1
    logger.debug("thick restart: kept %d Ritz vectors", keep)
