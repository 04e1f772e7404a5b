r"""Cr5 solver: orchestration of the C-products, Woodbury solves and block Lanczos.

Given the backend's X (block-diagonal by language) and concept labels Y, with global centring
μ = Xᵀ1/n and ν = Yᵀ1/n:

1. ``C = X̂ᵀŶ = XᵀY − n μ νᵀ`` (p × K) is applied block-wise through
   :meth:`~pipeline.linalg.backend.CorpusBackend.xt_gather` (``C P``) and
   :meth:`~pipeline.linalg.backend.CorpusBackend.x_scatter` (``Cᵀ U``); the rank-1 part stays
   implicit, X̂ and Y are never formed;
2. ``M = Cᵀ Â⁻¹ C`` (K × K) is applied through one Woodbury solve per block
   (:class:`~pipeline.linalg.woodbury.WoodburyInverse`); its top-r eigenvectors P come from
   :func:`~pipeline.linalg.block_lanczos.block_lanczos` with block width
   :func:`~pipeline.linalg.params.default_block_size`, started from a **warm block**:
   ``start_steps`` steps of subspace iteration on the surrogate ``M₀ = Cᵀ D⁻¹ C``
   (D = diag(B), the CG's Jacobi diagonal), two cheap passes per step instead of a whole CG
   solve per application of M;
3. ``Φ*ᵀ = Â⁻¹ C P``: with ``reuse_solves`` (default) the eigensolver keeps ``Â⁻¹ C V`` of its
   basis V, which it computes anyway, and P = V S gives ``Φ*ᵀ = (Â⁻¹ C V) S`` for free;
   otherwise one more solve with r right-hand sides;
4. Eq. 15: ``Φ*Φ*ᵀ = QΛQᵀ``, ``Φ = Λ^{-1/2} Qᵀ Φ*`` — orthonormal rows spanning the same space.
   Λ and Q (global, r × r) are kept (:attr:`Cr5Result.gram_eigenvalues`,
   :attr:`Cr5Result.gram_eigenvectors`), so ``Φ*ᵀ = Φᵀ Λ^{1/2} Qᵀ`` can be rebuilt per language.

Parameters: :class:`~pipeline.linalg.params.Cr5Params`, declared once (defaults, ranges,
meanings; the configuration's ``train.*`` keys). Checkpoints: a
:class:`~pipeline.linalg.checkpoint.CheckpointStore` made by the caller (the file-backed one:
:class:`pipeline.io.checkpoints.CheckpointDirectory`) and bound here to the
problem (:func:`solve_cr5`).

Storage convention: the per-language map is returned **transposed**, ``components[l]`` =
``Φ_lᵀ`` of shape ``(p_l, r)``, float32, so a TF-IDF row block ``X_l`` embeds as
``X_l @ components[l]``. Its columns are ordered by decreasing Λ.

Progress: block Lanczos logs one line per iteration (Ritz values, residuals, elapsed, ETA).
Before every pass the backend's ``describe(stage, iteration)`` is called from the thread that
runs it (the Spark backend turns it into a job description), with stages
``"cr5/mean"``, ``"cr5/w/cg[<lang>]"``, ``"cr5/start<i>/C[<lang>]"`` and ``.../Ct[<lang>]``
(warm start), ``"cr5/eig<i>/C[<lang>]"``, ``"cr5/eig<i>/cg[<lang>]"``, ``"cr5/eig<i>/Ct[<lang>]"``,
``"cr5/phi/..."`` (only without ``reuse_solves``); for CG stages ``iteration`` is the CG
iteration.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipeline.allocator import release_free_memory
from pipeline.errors import BreakdownError
from pipeline.linalg.backend import (
    CorpusBackend,
    TermLayout,
    map_languages,
    pass_delta,
    passes_by_phase,
)
from pipeline.linalg.block_lanczos import (
    LanczosState,
    block_lanczos,
    initial_state,
    orthonormal_columns,
    restart_due,
)
from pipeline.linalg.checkpoint import CheckpointCadence, CheckpointStore, array_digest
from pipeline.linalg.dense import subtract_outer, tall_matmul, tall_matmul_blocks, tall_t_matmul
from pipeline.linalg.errors import SolverArgumentError, check_arguments, check_rank
from pipeline.linalg.monitor import IterationMonitor, ValidationSet, orthonormal_rows
from pipeline.linalg.operator import BlockOperator
from pipeline.linalg.params import (
    CR5_DEFAULTS,
    PROBLEM,
    STOPPING,
    Cr5Params,
    default_block_size,
    default_max_basis,
    resolve_block_size,
    smallest_max_basis,
)
from pipeline.linalg.peak_memory import peak_resident_mib
from pipeline.linalg.spill import resolve_dir
from pipeline.linalg.woodbury import WoodburyInverse, global_mean
from pipeline.params import coerce, section_params

__all__ = [
    "Cr5Result",
    "Cr5Solver",
    "CrossCovariance",
    "CrossSolve",
    "PathStart",
    "concept_frequencies",
    "default_block_size",
    "default_max_basis",
    "resolve_block_size",
    "smallest_max_basis",
    "solve_cr5",
    "surrogate_warm_start",
]

logger = logging.getLogger(__name__)

CHECKPOINT_VERSION = 2
ProgressCallback = Callable[[str, int, dict], None]


def concept_frequencies(backend: CorpusBackend) -> np.ndarray:
    """ν = Yᵀ1 / n: ndarray of shape (K,), float64."""
    counts = sum(backend.concept_counts(lang) for lang in backend.languages)
    return np.asarray(counts, dtype=np.float64) / backend.n_total_docs()


class CrossCovariance(BlockOperator):
    """``C = XᵀY − n μ νᵀ`` of shape (p, K); each product is one pass per language.

    Languages are processed concurrently; per-language results are combined in language
    order, so results do not depend on thread scheduling.
    """

    def __init__(
        self,
        backend: CorpusBackend,
        mu: np.ndarray,
        nu: np.ndarray,
        *,
        max_workers: int | None = None,
    ) -> None:
        self.layout = TermLayout.of(backend)
        super().__init__((self.layout.n_terms, backend.n_concepts), np.float64)
        self.backend = backend
        self.mu, self.nu = np.asarray(mu, np.float64), np.asarray(nu, np.float64)
        self.n = backend.n_total_docs()
        self.max_workers = max_workers
        self.stage = "C"

    def _map(self, fn: Callable[[str], np.ndarray]) -> dict[str, np.ndarray]:
        return map_languages(self.layout.languages, fn, self.max_workers, thread_name="cprod")

    def _matmat(self, p: np.ndarray) -> np.ndarray:
        out = np.empty((self.layout.n_terms, p.shape[1]))
        rows = self.layout.split(out)

        def one(lang: str) -> None:
            self.backend.describe(f"{self.stage}/C[{lang}]", None)
            # each language thread copies its own rows: no join of the blocks afterwards
            rows[lang][...] = self.backend.xt_gather(lang, p)

        self._map(one)
        return subtract_outer(out, self.mu, self.n * (self.nu @ p))

    def _rmatmat(self, u: np.ndarray) -> np.ndarray:
        parts = self.layout.split(u)

        def one(lang: str) -> tuple[np.ndarray, np.ndarray]:
            self.backend.describe(f"{self.stage}/Ct[{lang}]", None)
            return self.backend.x_scatter_rows(lang, parts[lang])

        # Each language returns only its concepts' rows (K_l x b, not K x b): with many
        # languages, K x b results held until summed would be the driver's largest term.
        res = self._map(one)
        out = np.zeros((self.shape[1], u.shape[1]))
        for lang in self.layout.languages:
            ids, values = res.pop(lang)
            out[ids] += values
        return subtract_outer(out, self.nu, self.n * (self.mu @ u))


class CrossSolve(BlockOperator):
    """``M = Cᵀ Â⁻¹ C`` (K × K) that also hands out the image ``Â⁻¹ C V`` of each block.

    :meth:`matmat_with_image` is what block Lanczos calls with ``track_images``; the image
    becomes Φ*ᵀ. It is kept in the backend's pass dtype (float32 by default: the passes
    that produced it were float32 already, and it halves the memory of the kept images).

    ``guess = (S, G)``: S (K x c, orthonormal columns) with G ≈ ``B⁻¹ C S`` (p x c), e.g.
    a λ path's previous Ritz vectors and their solves at the previous λ. A block V then
    starts its CG from ``G (Sᵀ V)``, exact up to the change of λ for the part of V in
    span(S), so the start block's solves need a fraction of their CG iterations. Dropped
    once a block has less than a tenth of its weight in span(S). The guess is not
    corrected for the change of λ: such a correction made the path's models worse
    (bench/README.md, "λ path").
    """

    def __init__(
        self,
        cmat: CrossCovariance,
        ainv: WoodburyInverse,
        *,
        guess: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> None:
        k = cmat.shape[1]
        super().__init__((k, k), np.float64)
        self.cmat, self.ainv = cmat, ainv
        self.image_dtype = np.dtype(cmat.backend.dtype)
        self.guess = guess

    def _solve(self, v: np.ndarray) -> np.ndarray:
        """``Â⁻¹ C V`` (p, b), float64, started from ``guess`` when there is one."""
        x0 = None
        if self.guess is not None:
            basis, images = self.guess
            # in the guess's dtype and on threads: `basis.T @ v` would first copy the
            # float32 K x c basis to float64, for every block
            coef = tall_t_matmul(basis, v.astype(basis.dtype))  # (c, b)
            if float(np.sum(coef**2)) < 0.1 * float(np.sum(v**2)):
                self.guess = None  # V has left span(S): nothing more to gain
            else:
                x0 = tall_matmul(images, coef.astype(images.dtype))
        return self.ainv.solve(self.cmat.matmat(v), x0=x0)

    def matmat_with_image(self, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(M V, Â⁻¹ C V)`` of shapes (K, b) and (p, b)."""
        z = self._solve(v)
        return self.cmat.rmatmat(z), z.astype(self.image_dtype)

    def _matmat(self, v: np.ndarray) -> np.ndarray:
        return self.cmat.rmatmat(self._solve(v))

    _rmatmat = _matmat


def surrogate_warm_start(
    cmat: CrossCovariance, jacobi: np.ndarray, steps: int
) -> Callable[[np.ndarray], np.ndarray]:
    """The start-block map for :func:`~pipeline.linalg.block_lanczos.initial_state`.

    ``steps`` steps of subspace iteration ``Q ← orth(Cᵀ D⁻¹ C Q)`` on the surrogate of M with
    ``Â⁻¹`` replaced by ``D⁻¹ = jacobi`` (shape (p,)): each step is one C- and one Cᵀ-product
    (a pass per language each), against a whole CG solve's passes for one application of
    M. The surrogate shares M's cross-covariance structure, so its leading subspace is a far
    better start than a random block: the eigensolver needs fewer iterations, and two steps
    are enough (``train.start_steps``; bench/README.md, "Solver knobs").
    """
    d = np.asarray(jacobi, dtype=np.float64)[:, None]
    stage = cmat.stage

    def warm(q: np.ndarray) -> np.ndarray:
        for step in range(steps):
            cmat.stage = f"cr5/start{step + 1}"
            if step:
                q = orthonormal_columns(q)
            q = cmat.rmatmat(d * cmat.matmat(q))
        cmat.stage = stage
        return q

    return warm


@dataclass
class PathStart:
    """What a fit leaves for the next λ of a regularisation path (``keep_start=True``).

    C does not depend on λ and M's leading subspace moves little between the λ values of
    a grid, so the next fit starts its eigensolver from ``vectors`` (applied b columns at a
    time, :func:`~pipeline.linalg.block_lanczos.block_lanczos`), its CG solves from
    ``solves`` projected on the block (:class:`CrossSolve`), and its w solve from ``w``.

    Attributes
    ----------
    lam : float
        The λ of the fit that left it.
    vectors : ndarray of shape (K, c), float64
        The leading c = r + oversampling Ritz vectors of M (orthonormal).
    solves : ndarray of shape (p, c) or None
        ``B⁻¹ C vectors`` at that λ (pass dtype); None without ``reuse_solves``.
    w : ndarray of shape (p,) or None
        ``B⁻¹μ`` at that λ: the next w solve's initial guess.
    """

    lam: float
    vectors: np.ndarray
    solves: np.ndarray | None
    w: np.ndarray | None = None

    def checked(self, k: int, p: int) -> PathStart:
        """Self, after checking the shapes against a problem with K = k and p = p."""
        c = self.vectors.shape[1] if self.vectors.ndim == 2 else -1
        if self.vectors.shape != (k, c) or c < 1:
            raise ValueError(
                f"start must have shape ({k}, c) with c >= 1; got {self.vectors.shape}"
            )
        if self.solves is not None and self.solves.shape != (p, c):
            raise ValueError(
                f"the start's solves must have shape ({p}, {c}) (terms x start columns); "
                f"got {self.solves.shape}"
            )
        return self


def _b_part(cmat: CrossCovariance, ainv: WoodburyInverse, eig: Any) -> np.ndarray | None:
    """``B⁻¹ C U`` of the leading Ritz vectors U from their tracked images ``Â⁻¹ C U``:
    minus the Woodbury term ``c w (wᵀ C U)``, with ``wᵀ C U = (Cᵀ w)ᵀ U`` (one Cᵀ pass of
    one column)."""
    if eig.leading_images is None:
        return None
    ctw = cmat.rmatmat(ainv.w[:, None])[:, 0]
    coef = ainv.c * (ctw @ eig.leading_block)
    out = eig.leading_images.copy()
    return subtract_outer(out, ainv.w.astype(out.dtype), coef.astype(out.dtype))


@dataclass
class Cr5Result:
    """Output of :func:`solve_cr5`.

    Attributes
    ----------
    components : dict of str to ndarray of shape (p_l, r), float32
        ``Φ_lᵀ`` per language (orthonormal columns jointly over all languages).
    eigenvalues : ndarray of shape (r,)
        Leading eigenvalues of ``M = Cᵀ Â⁻¹ C`` (descending).
    mean : dict of str to ndarray of shape (p_l,)
        μ_l, the language block of the global mean (for optional centring at inference).
    history : dict
        JSON-serialisable provenance: parameters, eigensolver iterations / Ritz values /
        residuals, CG solve records, passes over X, timings.
    gram_eigenvalues : ndarray of shape (r,), float64
        Λ of ``Φ*Φ*ᵀ = QΛQᵀ`` (Eq. 15), descending, all > 0.
    gram_eigenvectors : ndarray of shape (r, r), float64
        Q (orthogonal; column j belongs to ``gram_eigenvalues[j]``). With them the
        unorthonormalised map is ``Φ_l*ᵀ = components[l] @ diag(Λ^{1/2}) @ Qᵀ``.
    path_start : PathStart or None
        With ``keep_start``: the start of the next fit of a λ path.
    """

    components: dict[str, np.ndarray]
    eigenvalues: np.ndarray
    mean: dict[str, np.ndarray]
    history: dict
    gram_eigenvalues: np.ndarray
    gram_eigenvectors: np.ndarray
    path_start: PathStart | None = None


def _problem_fingerprint(
    backend: CorpusBackend, mu: np.ndarray, nu: np.ndarray, params: Cr5Params
) -> dict:
    """What a checkpoint is bound to: the corpus, the data and the parameters that change the
    iterates (role ``PROBLEM`` in :class:`~pipeline.linalg.params.Cr5Params`)."""
    return {
        "version": CHECKPOINT_VERSION,
        **backend.fingerprint(),
        **{k: getattr(params, k) for k in Cr5Params.names(PROBLEM)},
        "data_digest": array_digest(mu, nu),
    }


def _normalised(params: Cr5Params, pass_dtype: Any) -> Cr5Params:
    """``params`` with each value of its declared Python type (a numpy scalar becomes an int,
    float or bool, for the JSON history and fingerprint) and ``cg_dtype`` resolved (None: the
    pass dtype)."""
    values = {
        info.name: coerce(info.type, getattr(params, info.name), key=info.name)
        for info in section_params(Cr5Params)
    }
    values["cg_dtype"] = np.dtype(pass_dtype if params.cg_dtype is None else params.cg_dtype).name
    return Cr5Params(**values)


def solve_cr5(
    backend: CorpusBackend,
    params: Cr5Params | None = None,
    *,
    checkpoint: CheckpointStore | None = None,
    callback: ProgressCallback | None = None,
    start: np.ndarray | PathStart | None = None,
    keep_start: bool = False,
    validation: ValidationSet | None = None,
    **changes: Any,
) -> Cr5Result:
    """Fit Cr5 on ``backend``; see :class:`Cr5Solver` for the parameters (validated there).

    ``params`` (default: the declared defaults) with ``changes`` by name, e.g.
    ``solve_cr5(backend, lam=0.3, r=100)`` (:class:`~pipeline.linalg.params.Cr5Params`).

    ``checkpoint``: a :class:`~pipeline.linalg.checkpoint.CheckpointStore`, bound here to the
    problem's fingerprint (corpus, data, the parameters that change the iterates, the start
    block). The eigensolver's state is saved in it at most every ``checkpoint_seconds`` and
    after the last iteration; a fit given a store that holds a state of the same problem
    resumes from it (and one whose last state is final reuses it without iterating).

    ``start``: a :class:`PathStart` (the ``path_start`` of a fit at a neighbouring λ), or
    K x c columns: start the eigensolver from (up to r + oversampling of) these columns
    instead of the surrogate warm start; with fewer than b columns the block is completed
    with random ones. A start wider than b is applied b columns at a time with every
    residual direction kept, and the fit runs to the same residual rule as any fit.
    ``keep_start``: return the leading r + oversampling Ritz vectors, their B⁻¹C solves and
    w as ``Cr5Result.path_start``, to start the fit at the next λ of a regularisation path
    (:mod:`~pipeline.evaluation.lambda_selection`; bench/README.md, "λ path").

    ``callback(stage, iteration, info)`` is called after each eigensolver iteration with
    ``stage="eigensolver"`` and ``info = {"ritz_values": (r,), "residuals": (r,)}``; it may
    raise to abort (the checkpoint of that iteration, when one was due, is already written).

    ``validation`` (documents of held-out concepts): scored (P@1) after every eigensolver
    iteration (:mod:`~pipeline.linalg.monitor`); with ``stop_rule="validation"`` the
    eigensolver stops when that score has not improved for ``stop_patience`` iterations and
    the best iteration's solution is returned. The objective and σ are recorded either way
    (``history["stopping"]``).
    """
    fit = _Cr5Fit(
        backend,
        _normalised(Cr5Params.of(params, **changes), backend.dtype),
        start=start,
        validation=validation,
    )
    return fit.run(checkpoint, callback=callback, keep_start=keep_start)


class _Cr5Fit:
    """One run of :func:`solve_cr5`, phase by phase (each method one step of the module
    docstring's recipe); the state shared by the phases lives on the instance.

    Sizes are fixed at construction: K concepts, the block width b, the width of the start
    block and the eigensolver's basis cap. Then :meth:`run`: the means μ and ν, the
    checkpoint store bound to the problem, the Woodbury operator Â⁻¹ (w solved in the
    background), the eigensolver on M (from a saved state, a given start or the surrogate
    warm start), Φ from its result, and the history.
    """

    # set by the phases of run(), in this order
    mu: np.ndarray
    nu: np.ndarray
    monitor: IterationMonitor
    ainv: WoodburyInverse
    w_saved: bool
    cmat: CrossCovariance
    cadence: CheckpointCadence

    def __init__(
        self,
        backend: CorpusBackend,
        params: Cr5Params,
        *,
        start: np.ndarray | PathStart | None,
        validation: ValidationSet | None,
    ) -> None:
        p = params
        if validation is not None and not p.reuse_solves:
            raise SolverArgumentError(
                "reuse_solves",
                "validation scoring during the eigensolver needs reuse_solves=True (it "
                "embeds with the Ritz vectors' own solves)",
            )
        self.backend, self.p, self.validation = backend, p, validation
        self.timings: dict[str, float] = {}
        # the driver's resident high-water mark (MiB) where each phase and iteration ended;
        # the largest reading is the fit's peak (pipeline/linalg/peak_memory.py)
        self.peaks: dict[str, Any] = {"by_iteration": []}
        self.passes0 = backend.pass_counts
        self.t_start = time.perf_counter()
        self.k = backend.n_concepts
        self.layout = TermLayout.of(backend)
        self.b = resolve_block_size(
            p.r, p.oversampling, p.block_size, self.k, warm=p.start_steps > 0
        )
        b = self.b  # the block width
        self.path: PathStart | None = None
        if start is not None:
            if not isinstance(start, PathStart):
                start = PathStart(0.0, np.asarray(start, dtype=np.float64), None)
            self.path = start.checked(self.k, self.layout.n_terms)
        # a given start: up to r + oversampling of its columns, at least b wide (random
        # completion); applied b columns at a time (block_lanczos)
        self.width = (
            b
            if self.path is None
            else max(b, min(self.path.vectors.shape[1], p.r + p.oversampling))
        )
        self.basis_cap = default_max_basis(p.r, b) if p.max_basis is None else p.max_basis
        if self.width > b:  # room for the start's columns waiting behind the applied ones
            self.basis_cap = max(self.basis_cap, max(p.r, b) + self.width + 2 * b)
        self.store: CheckpointStore | None = None
        self.callback: ProgressCallback | None = None

    def run(
        self,
        checkpoint: CheckpointStore | None,
        *,
        callback: ProgressCallback | None,
        keep_start: bool,
    ) -> Cr5Result:
        """Fit: the phases below in order, then the result."""
        self.callback = callback
        self._centre()
        if checkpoint is not None:
            self._bind(checkpoint)
        self._woodbury()
        eig, resumed_from = self._eigensolver(keep_start)
        phi_t, lam_g, q, eigenvalues, returned_iteration = self._phi(eig, keep_start)
        history = self._history(eig, resumed_from, returned_iteration)
        parts = self.layout.split(phi_t)
        return Cr5Result(
            components={
                lang: np.ascontiguousarray(v, dtype=np.float32) for lang, v in parts.items()
            },
            eigenvalues=eigenvalues,
            mean={lang: v.copy() for lang, v in self.layout.split(self.mu).items()},
            history=history,
            gram_eigenvalues=lam_g.copy(),
            gram_eigenvectors=np.ascontiguousarray(q),
            path_start=self._path_start(eig) if keep_start else None,
        )

    # --- μ, ν and the stopping monitor ------------------------------------------------------------
    def _centre(self) -> None:
        t0 = time.perf_counter()
        self.backend.describe("cr5/mean", None)
        self.mu = global_mean(self.backend)
        self.nu = concept_frequencies(self.backend)
        self.timings["mean"] = time.perf_counter() - t0
        # checks stop_rule against validation before any solve
        self.monitor = IterationMonitor(
            y_norm_sq=self.backend.n_total_docs() * (1.0 - float(self.nu @ self.nu)),
            split=self.layout.split,
            r=self.p.r,
            validation=self.validation,
            stop_rule=self.p.stop_rule,
            patience=self.p.stop_patience,
        )

    def _bind(self, checkpoint: CheckpointStore) -> None:
        fingerprint = _problem_fingerprint(self.backend, self.mu, self.nu, self.p)
        if self.path is not None:  # a resume must start from the same block
            fingerprint["start_digest"] = array_digest(self.path.vectors)
        self.store = checkpoint.bind(fingerprint)

    # --- w = B⁻¹μ, once per λ -------------------------------------------------------------------
    def _woodbury(self) -> None:
        p, store = self.p, self.store
        t0 = time.perf_counter()
        saved_w = store.load("woodbury") if store else None
        self.ainv = WoodburyInverse(
            self.backend,
            p.lam,
            rtol=p.cg_rtol,
            maxiter=p.cg_maxiter,
            w_rtol=p.w_rtol,
            max_workers=p.max_workers,
            mu=self.mu,
            precond_rank=p.precond_rank,
            seed=p.seed,
            w=None if saved_w is None else saved_w[0]["w"],
            w0=None if self.path is None else self.path.w,
            cg_dtype=p.cg_dtype,
        )
        self.ainv.stage = "cr5"
        # w = B⁻¹μ in the background: its single-column passes overlap the warm start and the
        # first eigensolver solve, which needs w only after its own B⁻¹ solve
        self.ainv.prepare(background=True)
        self.w_saved = saved_w is not None
        self.timings["woodbury_setup"] = time.perf_counter() - t0
        self.peaks["woodbury_setup"] = peak_resident_mib()

    def _save_woodbury(self) -> None:
        if self.store and not self.w_saved:
            self.ainv.wait()
            self.store.save("woodbury", {"w": self.ainv.w}, {"c": self.ainv.c})
            self.w_saved = True

    # --- top-r eigenvectors of M = Cᵀ Â⁻¹ C ------------------------------------------------------
    def _eigensolver(self, keep_start: bool) -> tuple[Any, int | None]:
        """Run block Lanczos on M; returns its result and the iteration resumed from."""
        p, b = self.p, self.b
        t0 = time.perf_counter()
        self.cmat = CrossCovariance(self.backend, self.mu, self.nu, max_workers=p.max_workers)
        m_op = CrossSolve(self.cmat, self.ainv)
        state, resumed_from = self._start_state(m_op, t0)
        self.cadence = CheckpointCadence(p.checkpoint_seconds, p.checkpoint_max_share)
        self._label(state.n_iter + 1)
        eig = block_lanczos(
            m_op,
            p.r,
            block_size=b,
            rtol=p.eig_rtol,
            maxiter=p.eig_maxiter,
            seed=p.seed,
            max_basis=self.basis_cap,
            state=state,
            checkpoint=self._save_state if self.store else None,
            checkpoint_every=p.checkpoint_every,
            callback=self._on_iteration,
            track_images=p.reuse_solves,
            n_vectors=max(p.r + p.oversampling, b) if keep_start else None,
            monitor=self._on_ritz,
            name="cr5/eigensolver",
            # the basis in the passes' dtype (float32 by default): half the driver's largest
            # array, and the passes' own rounding is of the same size (docs/scaling.md)
            basis_dtype=self.backend.dtype,
            # Φ*ᵀ comes from the tracked images: the K x r Ritz vectors would only be the
            # driver's peak at the end of the fit, and the basis is freed before the
            # images' Ritz combination is made
            vectors=not p.reuse_solves,
            on_finish=self._on_finish,
            spill_dir=p.spill_dir,
        )
        self.ainv.wait()
        self.monitor.settle(eig.n_iter)  # the final state's blocks are still alive here
        self.peaks["eigensolver"] = peak_resident_mib()
        self.timings["eigensolver"] = time.perf_counter() - t0
        return eig, resumed_from

    def _start_state(self, m_op: CrossSolve, t0: float) -> tuple[LanczosState, int | None]:
        """The eigensolver's state: a checkpoint's, else a start block from the given start
        (its solves as the CG's first guesses) or from the surrogate warm start."""
        p, path = self.p, self.path
        saved = self.store.load("lanczos") if self.store else None
        if saved is not None:
            state = LanczosState.from_parts(*saved)
            logger.info("cr5: resuming the eigensolver from iteration %d", state.n_iter)
            return state, state.n_iter
        if path is not None:
            c = min(path.vectors.shape[1], self.width)
            state = initial_state(self.k, self.width, p.seed, start=path.vectors[:, :c])
            if path.solves is not None:
                # the start as initial_state orthonormalised it (float32 is plenty for a guess)
                m_op.guess = (state.basis[:, :c].astype(np.float32), path.solves[:, :c])
        else:
            warm = (
                surrogate_warm_start(self.cmat, self.ainv.jacobi(), p.start_steps)
                if p.start_steps
                else None
            )
            state = initial_state(self.k, self.width, p.seed, warm=warm)
        self.timings["warm_start"] = time.perf_counter() - t0
        return state, None

    def _on_ritz(self, st: LanczosState, theta: np.ndarray, s: np.ndarray) -> bool:
        r = self.p.r
        rr = min(r, st.n_applied)
        if rr < r or not st.images:
            return self.monitor.observe(st.n_iter, theta[:rr], None)
        # this iteration's blocks and coefficients: the monitor scores from their
        # projections and makes Φ*ᵀ = hstack(blocks) @ coef only for a best iteration, when
        # it must (before a restart replaces the blocks, or at the end)
        blocks, coef = list(st.images), s[:, :r].copy()
        stop = self.monitor.observe(
            st.n_iter,
            theta[:rr],
            lambda: tall_matmul_blocks(blocks, coef),
            projected=(blocks, coef),
        )
        if restart_due(st, self.b, self.basis_cap):
            self.monitor.materialise()  # the restart replaces the blocks
        return stop

    def _label(self, iteration: int) -> None:
        self.ainv.stage = self.cmat.stage = f"cr5/eig{iteration}"

    def _save_state(self, st: LanczosState, *, due: bool = False) -> None:
        # each checkpoint writes the whole basis and images, too much to write after every
        # iteration of a large fit: at most one per checkpoint_seconds, and spaced so that
        # writing takes at most checkpoint_max_share of the time (slow storage)
        if not due and not self.cadence.due():
            return
        t0 = time.perf_counter()
        self._save_woodbury()
        self.store.save("lanczos", st.arrays(), st.meta())
        cadence = self.cadence
        cadence.written(t0)
        if cadence.gap > cadence.least_seconds and not due:
            logger.debug(
                "checkpoint took %.1f s: the next one in %.0f s or more "
                "(train.checkpoint_max_share %g)",
                cadence.last_write,
                cadence.gap,
                cadence.max_share,
            )

    def _on_finish(self, st: LanczosState) -> None:
        self.peaks["iterations"] = peak_resident_mib()
        if self.store:  # the final checkpoint, while the basis still exists
            self._save_state(st, due=True)
        # the iterations' arrays are freed, many into the malloc heap, which would keep
        # them resident beside the result's p x r Ritz images: give the pages back first
        release_free_memory()

    def _on_iteration(self, it: int, ritz: np.ndarray, res: np.ndarray) -> None:
        self.peaks["by_iteration"].append(peak_resident_mib())
        self._label(it + 1)
        if self.callback is not None:
            self.callback("eigensolver", it, {"ritz_values": ritz, "residuals": res})

    # --- Φ*ᵀ = Â⁻¹ C P, then orthonormal rows (Eq. 15) -------------------------------------------
    def _phi(
        self, eig: Any, keep_start: bool
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
        """``(Φᵀ, Λ, Q, eigenvalues, iteration)`` of the returned iteration's solution;
        Φᵀ is written over Φ*ᵀ unless a λ path's start (``keep_start``) shares it."""
        p = self.p
        t0 = time.perf_counter()
        self.ainv.stage = self.cmat.stage = "cr5/phi"
        eigenvalues, returned_iteration = eig.eigenvalues, eig.n_iter
        best = self.monitor.best
        if p.stop_rule == "validation" and best is not None and best.iteration != eig.n_iter:
            # the validation rule returns its best iteration, not the last one it looked past
            phi_star_t, eigenvalues, returned_iteration = (
                best.images,
                best.eigenvalues,
                best.iteration,
            )
        elif p.reuse_solves:
            # in the pass dtype (float32 by default): Φᵀ is stored in float32 anyway, and
            # p x r float64 copies would be the driver's peak with narrow blocks
            # (docs/scaling.md)
            phi_star_t = eig.images
        else:
            phi_star_t = self.ainv.matmat(self.cmat.matmat(eig.eigenvectors))
        # in place (one p x r array, not two) unless a λ path's start may share the tracked
        # images (eig.leading_images)
        phi_t, lam_g, q = orthonormal_rows(phi_star_t, in_place=not keep_start)
        if not lam_g[-1] > 1e-12 * lam_g[0]:
            raise BreakdownError(
                f"cr5: Φ*Φ*ᵀ (r={p.r}) is numerically singular (eigenvalues {lam_g[0]:.3e} .. "
                f"{lam_g[-1]:.3e}); r exceeds the rank of C ({self.k} concepts, "
                f"{self.layout.n_terms} terms)"
            )
        self.timings["phi"] = time.perf_counter() - t0
        self.peaks["phi"] = peak_resident_mib()
        self.timings["total"] = time.perf_counter() - self.t_start
        return phi_t, lam_g, q, eigenvalues, returned_iteration

    # --- provenance -------------------------------------------------------------------------------
    def _history(self, eig: Any, resumed_from: int | None, returned_iteration: int) -> dict:
        ainv, layout, timings = self.ainv, self.layout, self.timings
        passes1 = self.backend.pass_counts
        history = {
            # the parameters that change the iterates or the stopping
            "params": {k: getattr(self.p, k) for k in Cr5Params.names(PROBLEM, STOPPING)},
            "n_docs": self.backend.n_total_docs(),
            "n_concepts": self.k,
            "languages": list(layout.languages),
            "n_terms": list(layout.sizes),
            "block_size": self.b,
            "max_basis": self.basis_cap,
            "woodbury": {"c": ainv.c, "one_minus_n_mu_w": 1.0 - ainv.n * float(self.mu @ ainv.w)},
            "eigensolver": {**eig.to_history(), "resumed_from_iteration": resumed_from},
            "stopping": {
                **self.monitor.to_history(eig.stopped_by),
                "returned_iteration": returned_iteration,
            },
            "solves": [rec.to_dict() for rec in ainv.records],
            "passes": pass_delta(self.passes0, passes1),
            "timings": {key: round(v, 4) for key, v in timings.items()},
            "driver_peak_mib": self.peaks,
        }
        logger.info(
            "cr5: done in %.2fs: %d eigensolver iterations (converged=%s), %d passes over X; "
            "by phase (passes/column-passes): %s",
            timings["total"],
            eig.n_iter,
            eig.converged,
            sum(history["passes"]["passes"].values()),
            ", ".join(
                f"{ph} {n['passes']}/{n['column_passes']}"
                for ph, n in passes_by_phase(history["passes"]).items()
            ),
        )
        phases = ("woodbury_setup", "iterations", "eigensolver", "phi")
        marks = [(k, self.peaks[k]) for k in phases if self.peaks.get(k) is not None]
        readings = [v for _, v in marks] + [v for v in self.peaks["by_iteration"] if v]
        if readings:  # none: no /proc to read
            logger.info(
                "cr5: driver Python resident peak %.0f MiB; the mark after each phase: %s",
                max(readings),
                ", ".join(f"{k} {v:.0f}" for k, v in marks),
            )
        return history

    def _path_start(self, eig: Any) -> PathStart:
        return PathStart(
            lam=float(self.p.lam),
            vectors=eig.leading_block,
            solves=_b_part(self.cmat, self.ainv, eig) if self.p.reuse_solves else None,
            w=self.ainv.w,
        )


# --- estimator wrapper ----------------------------------------------------------------------------


class Cr5Solver:
    """Cr5 (crosslingual reduced-rank ridge regression) estimator.

    ``__init__`` only stores the parameters. They are declared once, with their defaults,
    allowed ranges and meanings, by :class:`~pipeline.linalg.params.Cr5Params` (the
    configuration keys ``train.<name>``: ``python -m pipeline config-reference --section
    train``), and are checked at :meth:`fit` with the same rules as a configuration file.

    Parameters
    ----------
    params : Cr5Params, optional
        The solver parameters (default: the declared defaults); any instance of a subclass,
        such as the configuration's ``train`` section, gives its solver fields.
    checkpoint : CheckpointStore, optional
        Where resumable states go (:mod:`~pipeline.linalg.checkpoint`); :meth:`fit` binds it
        to the problem, and resumes from the state it holds for that problem.
    **changes
        Parameters that differ from ``params``, by name, e.g. ``Cr5Solver(lam=0.5, r=100)``:
        λ, the dimension r, the eigensolver's block, warm start, tolerance and stopping rule,
        the per-language CG's tolerance, precision and preconditioner, concurrency and the
        checkpoint cadence (:class:`~pipeline.linalg.params.Cr5Params`).

    Attributes
    ----------
    params : Cr5Params
        The parameters used by :meth:`fit`.
    components_ : dict of str to ndarray of shape (p_l, r), float32
        ``Φ_lᵀ`` per language: embed with ``X_l @ components_[l]``.
    eigenvalues_ : ndarray of shape (r,)
    mean_ : dict of str to ndarray of shape (p_l,)
    gram_eigenvalues_ : ndarray of shape (r,)
        Λ of ``Φ*Φ*ᵀ = QΛQᵀ`` (see :class:`Cr5Result`).
    gram_eigenvectors_ : ndarray of shape (r, r)
        Q.
    history_ : dict
    n_iter_ : int
        Eigensolver iterations.
    """

    def __init__(
        self,
        params: Cr5Params | None = None,
        *,
        checkpoint: CheckpointStore | None = None,
        **changes: Any,
    ) -> None:
        self.params = Cr5Params.of(params, **changes)
        self.checkpoint = checkpoint

    def get_params(self) -> dict[str, Any]:
        """The solver parameters, by name."""
        return self.params.solver_params()

    def _validate(self, backend: CorpusBackend) -> None:
        check_arguments(Cr5Params, self.get_params(), owner="Cr5Solver")
        if self.checkpoint is not None and not isinstance(self.checkpoint, CheckpointStore):
            raise SolverArgumentError(
                "checkpoint",
                f"Cr5Solver parameter 'checkpoint' must be None or a CheckpointStore; "
                f"got {self.checkpoint!r}",
            )
        p = self.params
        spill = None if p.spill_dir is None else resolve_dir(p.spill_dir)
        if spill is not None and not (os.path.isdir(spill) and os.access(spill, os.W_OK | os.X_OK)):
            raise SolverArgumentError(
                "spill_dir",
                f"Cr5Solver parameter 'spill_dir' must be None, 'auto' or a writable local "
                f"directory; {spill!r} is not one (create it, or leave spill_dir unset to keep "
                "the eigensolver's basis and images in memory)",
            )
        k = backend.n_concepts
        n_terms = sum(backend.n_terms(lang) for lang in backend.languages)
        check_rank(p.r, k, n_terms, owner="Cr5Solver")
        # the block width the eigensolver will use, usually far below r + oversampling
        b = resolve_block_size(p.r, p.oversampling, p.block_size, k, warm=p.start_steps > 0)
        if p.max_basis is not None and p.max_basis < smallest_max_basis(p.r, b):
            raise SolverArgumentError(
                "max_basis",
                f"Cr5Solver parameter 'max_basis' must be None or >= "
                f"max(r, b) + 2*b = {smallest_max_basis(p.r, b)} (b = {b}, the eigensolver's block "
                f"width); got {p.max_basis}",
            )

    def fit(
        self,
        backend: CorpusBackend,
        *,
        callback: ProgressCallback | None = None,
        start: np.ndarray | PathStart | None = None,
        keep_start: bool = False,
        validation: ValidationSet | None = None,
    ) -> Cr5Solver:
        """Solve Cr5 on ``backend``; returns ``self`` with the fitted attributes set.

        ``start`` / ``keep_start``: see :func:`solve_cr5` (a λ path passes each fit's
        ``path_start_`` to the next). ``validation``: documents of held-out concepts scored
        at every eigensolver iteration (required by ``stop_rule="validation"``).
        """
        self._validate(backend)
        result = solve_cr5(
            backend,
            self.params,
            checkpoint=self.checkpoint,
            callback=callback,
            start=start,
            keep_start=keep_start,
            validation=validation,
        )
        self.path_start_ = result.path_start
        self.components_ = result.components
        self.eigenvalues_ = result.eigenvalues
        self.mean_ = result.mean
        self.gram_eigenvalues_ = result.gram_eigenvalues
        self.gram_eigenvectors_ = result.gram_eigenvectors
        self.history_ = result.history
        self.n_iter_ = result.history["eigensolver"]["n_iter"]
        return self

    def transform(self, lang: str, x: Any) -> np.ndarray:
        """Embed TF-IDF rows ``x`` (shape (n, p_l)) of language ``lang``: shape (n, r)."""
        if not hasattr(self, "components_"):
            raise AttributeError("Cr5Solver is not fitted; call fit(backend) first")
        if lang not in self.components_:
            raise ValueError(f"unknown language {lang!r}; fitted: {sorted(self.components_)}")
        return np.asarray(x @ self.components_[lang])

    def __repr__(self) -> str:
        defaults = CR5_DEFAULTS.solver_params()
        changed = {k: v for k, v in self.get_params().items() if v != defaults[k]}
        if self.checkpoint is not None:
            changed["checkpoint"] = str(self.checkpoint.directory)
        return "Cr5Solver(" + ", ".join(f"{k}={v!r}" for k, v in changed.items()) + ")"
