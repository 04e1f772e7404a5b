r"""Â⁻¹ by Sherman–Morrison on top of independent per-language CG solves.

With global centring, ``Â = X̂ᵀX̂ + λI = B − n μ μᵀ`` where ``B = blockdiag(B_l)``,
``B_l = X_lᵀX_l + λI`` and ``μ = Xᵀ1 / n`` (n = all documents). Then

.. math::  Â^{-1} u = B^{-1}u + c\, w (w^T u), \qquad w = B^{-1}\mu,
           \qquad c = \frac{n}{1 - n\,\mu^T w} \;(>0)

(the paper's ``B⁻¹ − ζζᵀ`` form takes the square root of a negative number). ``w`` and ``c``
are computed once per λ (:meth:`WoodburyInverse.prepare`). ``B⁻¹`` splits into independent
per-language systems, solved **concurrently** (one thread per language; on Spark, concurrent
jobs), each by block CG preconditioned with Jacobi and, above ``precond_rank`` 0, the top of
its spectrum deflated (:mod:`~pipeline.linalg.preconditioner`), each converging on its own.
X̂ is never formed.

``w`` is needed only to *correct* a ``B⁻¹U`` that has already been solved, so
``prepare(background=True)`` solves it in a background thread: its single-column passes
(many CG iterations, at the tighter ``w_rtol``) then overlap the caller's first solves instead
of preceding them.
On Spark, where each pass is a job with a fixed latency, this hides most of the w solve.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from pipeline.errors import BreakdownError
from pipeline.linalg.backend import CorpusBackend, TermLayout, map_languages
from pipeline.linalg.block_cg import BlockCGResult, block_cg
from pipeline.linalg.dense import subtract_outer
from pipeline.linalg.dtypes import working_dtype
from pipeline.linalg.operator import BlockOperator
from pipeline.linalg.params import CR5_DEFAULTS as _D
from pipeline.linalg.params import resolve_w_rtol
from pipeline.linalg.preconditioner import SpectralJacobi, spectral_jacobi

__all__ = ["GramOperator", "SolveRecord", "WoodburyInverse", "global_mean"]

logger = logging.getLogger(__name__)


def global_mean(backend: CorpusBackend) -> np.ndarray:
    """μ = Xᵀ1 / n over all n documents: ndarray of shape (p,), float64 (layout order)."""
    n = backend.n_total_docs()
    return np.concatenate([backend.column_sums(lang) for lang in backend.languages]) / n


class GramOperator(BlockOperator):
    """``B_l = X_lᵀX_l + λI`` of shape (p_l, p_l); one pass over X_l per block product."""

    def __init__(
        self, backend: CorpusBackend, lang: str, lam: float, dtype: np.dtype | type = np.float64
    ) -> None:
        p = backend.n_terms(lang)
        super().__init__((p, p), dtype)
        self.backend, self.lang, self.lam = backend, lang, float(lam)

    def _matmat(self, v: np.ndarray) -> np.ndarray:
        out = self.backend.gram(self.lang, v, dtype=self.dtype)
        out += self.lam * v
        return out

    _rmatmat = _matmat


@dataclass
class SolveRecord:
    """Summary of one ``B⁻¹`` application (per language)."""

    stage: str
    n_rhs: int
    n_iter: dict[str, int] = field(default_factory=dict)
    max_residual: dict[str, float] = field(default_factory=dict)
    all_converged: dict[str, bool] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "stage": self.stage,
            "n_rhs": self.n_rhs,
            "n_iter": self.n_iter,
            "max_residual": self.max_residual,
            "all_converged": self.all_converged,
            "seconds": self.seconds,
        }


class WoodburyInverse(BlockOperator):
    """The operator ``Â⁻¹`` (p × p), applied block-wise without forming X̂.

    Parameters
    ----------
    backend : CorpusBackend
    lam : float
        Ridge parameter λ > 0.
    rtol : float
        Relative residual tolerance of the per-language CG solves (paper: 0.01).
    maxiter : int
        CG iteration cap (paper: 500).
    w_rtol : float, optional
        Tolerance of the single solve ``w = B⁻¹μ``; None: ``rtol / 30``
        (:func:`~pipeline.linalg.params.resolve_w_rtol`). Tighter than ``rtol`` because
        ``c`` amplifies its error by ``n μᵀw / (1 − n μᵀw)``.
    max_workers : int, optional
        Concurrent language solves (default: number of languages).
    mu : ndarray of shape (p,), optional
        Precomputed μ (else one pass per language computes it).
    w : ndarray of shape (p,), optional
        Precomputed ``B⁻¹μ`` for this λ (e.g. from a checkpoint); skips that solve.
    precond_rank : int
        Eigen-directions of each Jacobi-scaled ``B_l`` deflated in the CG preconditioner
        (``train.precond_rank``; 0: Jacobi only). Built once per λ, in :meth:`prepare`.
    seed : int
        Seeds the preconditioner's random start (per language).
    w0 : ndarray of shape (p,), optional
        Initial guess of the w solve, e.g. ``B⁻¹μ`` at a neighbouring λ (a λ path), which
        saves some of its CG iterations. (The preconditioner is built afresh for each λ: a
        cheaper one started from the previous λ's subspace would cost the solves more CG
        iterations than it saves.)
    cg_dtype : {"float32", "float64"}, optional
        Working precision of the CG vectors of :meth:`solve` (default: the backend's pass
        dtype). The w solve is float64 whatever this is (its tolerance, ``w_rtol``, is
        below float32's reach); results are float64 either way.
    """

    def __init__(
        self,
        backend: CorpusBackend,
        lam: float,
        *,
        rtol: float = _D.cg_rtol,
        maxiter: int = _D.cg_maxiter,
        w_rtol: float | None = _D.w_rtol,
        max_workers: int | None = None,
        mu: np.ndarray | None = None,
        w: np.ndarray | None = None,
        precond_rank: int = _D.precond_rank,
        seed: int = _D.seed,
        w0: np.ndarray | None = None,
        cg_dtype: str | np.dtype | None = None,
    ) -> None:
        self.layout = TermLayout.of(backend)
        super().__init__((self.layout.n_terms, self.layout.n_terms), np.float64)
        if not lam > 0:
            raise ValueError(f"lam must be > 0; got {lam}")
        self.backend = backend
        self.lam = float(lam)
        self.rtol, self.maxiter = float(rtol), int(maxiter)
        self.w_rtol = resolve_w_rtol(w_rtol, self.rtol)
        self.max_workers = max_workers
        self.n = backend.n_total_docs()
        self.mu = None if mu is None else np.asarray(mu, dtype=np.float64)
        self.w = None if w is None else np.asarray(w, dtype=np.float64)
        self.c: float | None = None
        self._jacobi: dict[str, np.ndarray] | None = None
        self.precond_rank, self.seed = int(precond_rank), int(seed)
        self._precond: dict[str, SpectralJacobi] | None = None
        self._pending: Future | None = None
        self.w0 = w0
        self.records: list[SolveRecord] = []
        #: working precision of the CG vectors of the eigensolver's solves: the pass dtype
        #: (float32 halves their memory traffic; the CG tolerance is 1e-2 to 1e-1)
        self.cg_dtype = working_dtype(backend.dtype if cg_dtype is None else cg_dtype, "cg_dtype")
        #: label of the next solves, passed to ``backend.describe`` (set by the caller)
        self.stage = "woodbury"

    # --- setup (once per λ) ---------------------------------------------------------------------
    def prepare(self, *, background: bool = False) -> WoodburyInverse:
        """Compute μ (if needed), the Jacobi diagonals and preconditioners, ``w = B⁻¹μ`` and
        ``c``. Idempotent.

        With ``background=True`` the w solve runs in a background thread and this returns at
        once; the first :meth:`matmat` (or :meth:`wait`) waits for it, after its own solve.
        """
        self._ensure_diagonal()
        self._ensure_preconditioners()
        if self.c is not None or self._pending is not None:
            return self
        if self.w is not None:
            return self._set_c()
        stage = f"{self.stage}/w"
        if background:
            pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="woodbury-w")
            self._pending = pool.submit(self._solve_w, stage)
            pool.shutdown(wait=False)
            return self
        self.w = self._solve_w(stage)
        return self._set_c()

    def _ensure_diagonal(self) -> None:
        if self.mu is None:
            self.mu = global_mean(self.backend)
        if self._jacobi is None:
            self._jacobi = {
                lang: 1.0 / (self.backend.column_sq_sums(lang) + self.lam)
                for lang in self.layout.languages
            }

    def _ensure_preconditioners(self) -> None:
        if self._precond is not None:
            return
        self._ensure_diagonal()
        assert self._jacobi is not None
        langs = self.layout.languages

        def build(lang: str) -> SpectralJacobi:
            self.backend.describe(f"{self.stage}/precond[{lang}]", None)
            return spectral_jacobi(
                GramOperator(self.backend, lang, self.lam).matmat,
                self._jacobi[lang],
                self.precond_rank,
                seed=self.seed + 7919 * langs.index(lang),
                dtype=self.backend.dtype,  # the deflation products in the pass dtype
            )

        t0 = time.perf_counter()
        self._precond = map_languages(langs, build, self.max_workers, thread_name="precond")
        if self.precond_rank:
            logger.info(
                "CG preconditioner: Jacobi with %s eigen-directions deflated (%.2fs)",
                {lang: pc.rank for lang, pc in self._precond.items()},
                time.perf_counter() - t0,
            )

    def wait(self) -> WoodburyInverse:
        """Finish :meth:`prepare` (waits for a background w solve; re-raises its error)."""
        if self._pending is not None:
            pending, self._pending = self._pending, None
            self.w = pending.result()
            return self._set_c()
        if self.c is None:
            self.prepare()
        return self

    def _solve_w(self, stage: str) -> np.ndarray:
        x0 = None if self.w0 is None else np.asarray(self.w0, dtype=np.float64)[:, None]
        # in float64 whatever the pass dtype: one column, and c amplifies w's error
        w, _ = self.solve_blockdiag(
            self.mu[:, None], rtol=self.w_rtol, stage=stage, x0=x0, dtype=np.float64
        )
        return w[:, 0]

    def _set_c(self) -> WoodburyInverse:
        gamma = self.n * float(self.mu @ self.w)
        if not (np.isfinite(gamma) and gamma < 1.0):
            raise BreakdownError(
                f"Woodbury: n·μᵀB⁻¹μ = {gamma!r} must be < 1 (Â positive definite); "
                "tighten w_rtol or check the data"
            )
        self.c = self.n / (1.0 - gamma)
        logger.info(
            "Woodbury: lam=%g n=%d 1-n*mu'w=%.3e c=%.4g", self.lam, self.n, 1 - gamma, self.c
        )
        return self

    def jacobi(self) -> np.ndarray:
        """``1 / diag(B)`` in layout order: ndarray of shape (p,) (the CG's preconditioner)."""
        self._ensure_diagonal()
        return np.concatenate([self._jacobi[lang] for lang in self.layout.languages])

    # --- B⁻¹ ------------------------------------------------------------------------------------
    def solve_blockdiag(
        self,
        u: np.ndarray,
        *,
        rtol: float | None = None,
        stage: str | None = None,
        callback: Callable[[str, int, np.ndarray], None] | None = None,
        x0: np.ndarray | None = None,
        dtype: np.dtype | type | None = None,
    ) -> tuple[np.ndarray, dict[str, BlockCGResult]]:
        """Return ``B⁻¹U`` (shape (p, b), float64) and the per-language CG results.

        Languages are solved concurrently; each thread labels its passes through
        ``backend.describe(f"{stage}/cg[{lang}]", iteration)``. ``x0`` (shape of U): the CG's
        initial guess.
        """
        if self._jacobi is None or self._precond is None:
            self.prepare()
        assert self._precond is not None
        stage = stage or self.stage
        rtol = self.rtol if rtol is None else rtol
        parts = self.layout.split(np.asarray(u, dtype=np.float64))
        # guesses stay in their dtype (float32 images on the float32 backend): the CG casts
        # them to its own
        guesses = self.layout.split(np.asarray(x0)) if x0 is not None else {}
        dtype = self.cg_dtype if dtype is None else np.dtype(dtype)
        x = np.empty((self.layout.n_terms, u.shape[1]))
        x_rows = self.layout.split(x)

        def solve_one(lang: str) -> tuple[BlockCGResult, float]:
            t0 = time.perf_counter()
            label = f"{stage}/cg[{lang}]"
            self.backend.describe(label, 0)

            def cb(it: int, res: np.ndarray) -> None:
                self.backend.describe(label, it)
                if callback is not None:
                    callback(lang, it, res)

            # where the backend can, the whole solve runs next to X_l (one Spark job)
            result = self.backend.solve_gram(
                lang,
                parts[lang],
                lam=self.lam,
                precond=self._precond[lang],
                rtol=rtol,
                maxiter=self.maxiter,
                name=label,
                x0=guesses.get(lang),
                dtype=dtype,
            )
            if result is None:
                result = block_cg(
                    GramOperator(self.backend, lang, self.lam, dtype),
                    parts[lang],
                    x0=guesses.get(lang),
                    rtol=rtol,
                    maxiter=self.maxiter,
                    m=self._precond[lang],
                    callback=cb,
                    name=label,
                    dtype=dtype,
                )
            elif callback is not None:
                for it, res in enumerate(result.residual_norms[1:], start=1):
                    callback(lang, it, res)
            # float64 rows of B⁻¹U, cast and copied here, in parallel: no join afterwards
            x_rows[lang][...] = result.x
            return result, time.perf_counter() - t0

        langs = self.layout.languages
        outs = map_languages(langs, solve_one, self.max_workers, thread_name="cg")
        results = {lang: outs[lang][0] for lang in langs}
        record = SolveRecord(stage=stage, n_rhs=u.shape[1])
        for lang, (res, secs) in outs.items():
            record.n_iter[lang] = res.n_iter
            record.max_residual[lang] = float(res.residual_norms[-1].max(initial=0.0))
            record.all_converged[lang] = bool(res.converged.all())
            record.seconds[lang] = round(secs, 4)
        self.records.append(record)
        logger.debug(
            "%s: B^-1 on %d rhs, CG iterations %s, %.2fs",
            stage,
            u.shape[1],
            record.n_iter,
            max(record.seconds.values(), default=0.0),
        )
        return x, results

    # --- Â⁻¹ ------------------------------------------------------------------------------------
    def solve(self, u: np.ndarray, *, x0: np.ndarray | None = None) -> np.ndarray:
        """``Â⁻¹U`` (shape (p, b)); ``x0``: an initial guess for its ``B⁻¹U`` part (e.g. that
        part at a neighbouring λ: the CG then starts close to its answer)."""
        if self.c is None and self._pending is None:
            self.prepare(background=True)
        x, _ = self.solve_blockdiag(u, x0=x0)
        self.wait()
        return subtract_outer(x, self.w, -self.c * (self.w @ u))

    def _matmat(self, u: np.ndarray) -> np.ndarray:
        return self.solve(u)

    _rmatmat = _matmat  # Â is symmetric

    def __getstate__(self) -> dict:
        self.wait()
        state = self.__dict__.copy()
        state["records"] = []
        state["_pending"] = None
        return state
