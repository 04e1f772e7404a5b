r"""Regularised canonical correlation analysis on concept-aligned views, for two or more languages.

Views. The sample unit of CCA is a concept. Let K* be the concepts that have documents in at
least ``min_languages`` languages (default: all L — fully aligned data, the classic two-view
setting when L = 2). For language l, with ``n_{l,k}`` its documents about concept k and the mask
``c_{l,k} = 1`` iff k ∈ K* and ``n_{l,k} > 0``, the view ``Z_l`` (K* × p_l) has row k = the
mean TF-IDF vector of concept k's documents in l (zero if l lacks k):

.. math::  Z_l = W_l\, Y_l^T X_l, \quad W_l = \mathrm{diag}(c_{l,k} / n_{l,k}), \qquad
           \hat Z_l = Z_l - c_l\, m_l^T,\quad m_l = Z_l^T c_l / (1^T c_l)

(centred over the concepts present in l; an absent view is thus imputed by its mean). All
products are backend passes: ``Ẑ_l V = W_l·x_scatter(l, V) − c_l (m_lᵀV)`` and
``Ẑ_lᵀ G = xt_gather(l, W_l G) − m_l (c_lᵀ G)``; ``m_l`` costs one pass. Covariances:
``C_{lm} = Ẑ_lᵀẐ_m / |K*|``, ``D_l = C_{ll} + γ I``.

The eigenproblem (multi-set CCA, the "SUMCOR" relaxation of Kettenring 1971 as in Vía et al.
2007): maximise ``Σ_{l≠m} a_lᵀ C_{lm} a_m`` subject to ``Σ_l a_lᵀ D_l a_l = 1``; its
stationary points are the generalised eigenvectors of

.. math::  \Big(\tfrac{1}{|K^*|}\hat Z^T \hat Z + \gamma I\Big)\, a
           = \lambda\, \mathrm{blockdiag}(D_1, \dots, D_L)\, a, \qquad
           \hat Z = [\hat Z_1, \dots, \hat Z_L]

(left side = the D's plus the off-diagonal ``C_{lm}``; it is PSD, λ ∈ (0, L]). For **L = 2
this is exactly regularised CCA**: λ = 1 + ρ with ρ the canonical correlations, and
``a = (a_1, a_2)`` the canonical directions, ``D_1⁻¹ C_12 D_2⁻¹ C_21 a_1 = ρ² a_1``. For γ → 0
and any L it coincides with MAXVAR GCCA (Carroll 1968: top eigenvectors of
``Σ_l Ẑ_l D_l⁻¹ Ẑ_lᵀ``, whose eigenvalues are the same λ).

Solver. :func:`~pipeline.baselines.common.pencil_eigsh` (block generalised Davidson): the
left-hand product needs one ``x_scatter`` and one ``xt_gather`` (of width 2b, giving the
left and right products together) per language; ``D⁻¹`` splits into independent
per-language block CG solves (run concurrently), each iteration one ``x_scatter`` and one
``xt_gather`` of language l, Jacobi-preconditioned with ``1/(diag(X_lᵀX_l)/|K*| + γ)`` (an
upper bound of ``diag(D_l)``). Nothing p × p or K × p is formed.

Output: ``components[l] = a_l`` block (p_l × r), columns normalised jointly so that
``Σ_l a_lᵀ D_l a_l = 1`` (for L = 2 each language gets ½); ``eigenvalues`` = λ (descending);
``mean[l] = m_l`` (the centring used).
"""

from __future__ import annotations

import logging
import time

import numpy as np

from pipeline.baselines.common import (
    BaselineResult,
    check_params,
    is_int,
    pencil_fit,
    per_language,
    stacked_components,
)
from pipeline.baselines.params import CCA_DEFAULTS as _B
from pipeline.baselines.params import CcaParams
from pipeline.linalg.backend import CorpusBackend, TermLayout
from pipeline.linalg.block_cg import BlockCGResult, block_cg
from pipeline.linalg.operator import CallableOperator
from pipeline.linalg.params import CR5_DEFAULTS as _D

__all__ = ["ConceptViews", "fit_cca"]

logger = logging.getLogger(__name__)


class ConceptViews:
    """The centred concept-level views ``Ẑ_l`` (K × p_l, rows outside K* are zero).

    Parameters
    ----------
    backend : CorpusBackend
    min_languages : int
        A concept is kept when it has documents in at least this many languages.
    """

    def __init__(self, backend: CorpusBackend, min_languages: int) -> None:
        self.backend = backend
        langs = backend.languages
        counts = {lang: backend.concept_counts(lang) for lang in langs}
        present = sum((counts[lang] > 0).astype(np.int64) for lang in langs)
        kept = present >= min_languages
        self.n_rows = int(kept.sum())
        self.mask = {lang: (kept & (counts[lang] > 0)).astype(np.float64) for lang in langs}
        self.weight = {
            lang: np.divide(
                self.mask[lang],
                counts[lang],
                out=np.zeros_like(counts[lang]),
                where=counts[lang] > 0,
            )
            for lang in langs
        }

        def mean_of(lang: str) -> np.ndarray:
            backend.describe(f"cca/mean[{lang}]", None)
            total = backend.xt_gather(lang, self.weight[lang][:, None])[:, 0]
            return total / max(self.mask[lang].sum(), 1.0)

        self.mean = per_language(backend, mean_of)

    def z(self, lang: str, v: np.ndarray) -> np.ndarray:
        """``Ẑ_l V``: ndarray of shape (K, b)."""
        s = self.backend.x_scatter(lang, v) * self.weight[lang][:, None]
        return s - np.outer(self.mask[lang], self.mean[lang] @ v)

    def zt(self, lang: str, g: np.ndarray) -> np.ndarray:
        """``Ẑ_lᵀ G`` for G of shape (K, b): ndarray of shape (p_l, b)."""
        out = self.backend.xt_gather(lang, g * self.weight[lang][:, None])
        return out - np.outer(self.mean[lang], self.mask[lang] @ g)


class _CcaPencil:
    """The two sides of CCA's pencil as block products (module docstring).

    :meth:`apply_pair` gives the left side ``(Ẑᵀ Ẑ / |K*| + γI) V`` and the right side
    ``blockdiag(D_l) V`` from one scatter and one gather pass per language; :meth:`solve_d`
    applies ``blockdiag(D_l)⁻¹`` by concurrent per-language block CG and records each solve
    in :attr:`cg_records`.
    """

    def __init__(
        self,
        views: ConceptViews,
        layout: TermLayout,
        gamma: float,
        cg_rtol: float,
        cg_maxiter: int,
        max_workers: int | None,
    ) -> None:
        backend = views.backend
        self.views = views
        self.layout = layout
        self.gamma = gamma
        self.cg_rtol = cg_rtol
        self.cg_maxiter = cg_maxiter
        self.max_workers = max_workers
        self.scale = 1.0 / views.n_rows
        self.jacobi = {
            lang: 1.0 / (backend.column_sq_sums(lang) * self.scale + gamma)
            for lang in backend.languages
        }
        self.cg_records: list[dict] = []

    def apply_pair(self, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(left V, right V)`` for V of shape (p, b): two ndarrays of shape (p, b)."""
        backend, views, layout = self.views.backend, self.views, self.layout
        parts = layout.split(v)

        def scatter(lang: str) -> np.ndarray:
            backend.describe(f"cca/Z[{lang}]", None)
            return views.z(lang, parts[lang])

        zs = per_language(backend, scatter, self.max_workers)
        total = sum(zs[lang] for lang in backend.languages)
        b = v.shape[1]

        def gather(lang: str) -> np.ndarray:
            backend.describe(f"cca/Zt[{lang}]", None)
            return views.zt(lang, np.hstack([total, zs[lang]]))

        gs = per_language(backend, gather, self.max_workers)
        scale, gamma = self.scale, self.gamma
        left = layout.join({lang: g[:, :b] for lang, g in gs.items()}) * scale + gamma * v
        right = layout.join({lang: g[:, b:] for lang, g in gs.items()}) * scale + gamma * v
        return left, right

    def solve_d(self, rhs: np.ndarray) -> np.ndarray:
        """``≈ blockdiag(D_l)⁻¹ R`` for R of shape (p, b): ndarray of shape (p, b)."""
        parts = self.layout.split(rhs)
        record: dict = {"n_rhs": rhs.shape[1], "n_iter": {}, "max_residual": {}}

        def one(lang: str) -> np.ndarray:
            res = self._solve_language(lang, parts[lang])
            record["n_iter"][lang] = res.n_iter
            record["max_residual"][lang] = float(res.residual_norms[-1].max(initial=0.0))
            return res.x

        out = self.layout.join(per_language(self.views.backend, one, self.max_workers))
        self.cg_records.append(record)
        return out

    def _solve_language(self, lang: str, rhs: np.ndarray) -> BlockCGResult:
        """Block CG on ``D_l = Ẑ_lᵀẐ_l / |K*| + γI``, Jacobi-preconditioned."""
        backend, views, scale, gamma = self.views.backend, self.views, self.scale, self.gamma

        def d_op(v: np.ndarray) -> np.ndarray:
            backend.describe(f"cca/cg[{lang}]", None)
            return views.zt(lang, views.z(lang, v)) * scale + gamma * v

        pl = backend.n_terms(lang)
        return block_cg(
            CallableOperator((pl, pl), d_op, d_op),
            rhs,
            rtol=self.cg_rtol,
            maxiter=self.cg_maxiter,
            m=self.jacobi[lang],
            name=f"cca/cg[{lang}]",
        )


def _check_cca_params(params: dict, languages: list[str]) -> None:
    """Raise ValueError unless there are two languages or more and ``params`` are valid."""
    n_langs = len(languages)
    if n_langs < 2:
        raise ValueError(f"cca: needs at least two languages; the backend has {list(languages)}")
    check_params(
        "cca",
        params,
        {
            "min_languages": (
                f"None or an integer in [2, {n_langs}]",
                lambda v: is_int(2)(v) and v <= n_langs,
            ),
        },
        own=CcaParams,
    )


def _aligned_views(backend: CorpusBackend, min_languages: int) -> ConceptViews:
    """The concept views; raise ValueError when fewer than two concepts are aligned."""
    views = ConceptViews(backend, min_languages)
    if views.n_rows < 2:
        raise ValueError(
            f"cca: only {views.n_rows} concept(s) have documents in >= "
            f"{min_languages} languages; lower min_languages or check the data"
        )
    return views


def fit_cca(
    backend: CorpusBackend,
    *,
    r: int = _D.r,
    gamma: float = _B.gamma,
    min_languages: int | None = None,
    oversampling: int = _D.oversampling,
    block_size: int | None = None,
    cg_rtol: float = _D.cg_rtol,
    cg_maxiter: int = _D.cg_maxiter,
    eig_rtol: float = _D.eig_rtol,
    eig_maxiter: int = _D.eig_maxiter,
    max_basis: int | None = None,
    max_workers: int | None = None,
    seed: int = _D.seed,
) -> BaselineResult:
    """Fit regularised (multi-set) CCA on concept-aligned views (module docstring).

    Parameters
    ----------
    backend : CorpusBackend
        At least two languages.
    r : int, default 300
        Number of canonical directions, ``1 <= r <= p``.
    gamma : float, default 1e-3
        Ridge γ added to each within-view covariance ``C_ll`` (covariances are divided by
        |K*|; TF-IDF rows have unit norm, so ``trace(C_ll) <= 1``). Tune by validation.
    min_languages : int or None, default None
        Keep concepts present in at least this many languages (2..L); None: all L.
    oversampling : int, default 20
        Caps the expansion block at ``r + oversampling`` (see
        :func:`~pipeline.linalg.cr5.default_block_size`).
    block_size : int or None, default None
        Expansion block width; None: ``default_block_size(r, oversampling)``.
    cg_rtol, cg_maxiter : float, int, default 0.01, 500
        Per-language block CG tolerance and cap for ``D_l⁻¹``.
    eig_rtol, eig_maxiter : float, int, default 0.1, 250
        Eigensolver relative residual tolerance and cap (see
        :func:`~pipeline.baselines.common.pencil_eigsh`).
    max_basis : int or None, default None
        Eigensolver thick-restart size.
    max_workers : int or None, default None
        Concurrent language passes / solves.
    seed : int, default 0

    Returns
    -------
    BaselineResult
        ``components[l]``: ndarray of shape (p_l, r), float32; ``eigenvalues``: λ (for two
        languages ``history["canonical_correlations"]`` = λ − 1); ``mean``: m_l.
    """
    langs = backend.languages
    n_langs = len(langs)
    params = {
        "r": r,
        "gamma": gamma,
        "min_languages": n_langs if min_languages is None else min_languages,
        "oversampling": oversampling,
        "block_size": block_size,
        "cg_rtol": cg_rtol,
        "cg_maxiter": cg_maxiter,
        "eig_rtol": eig_rtol,
        "eig_maxiter": eig_maxiter,
        "max_basis": max_basis,
        "seed": seed,
    }
    _check_cca_params(params, langs)
    t_start = time.perf_counter()
    passes0 = backend.pass_counts
    layout = TermLayout.of(backend)
    p = layout.n_terms
    if r > p:
        raise ValueError(f"cca: r must be <= p = {p}; got {r}")
    views = _aligned_views(backend, params["min_languages"])
    pencil = _CcaPencil(views, layout, gamma, cg_rtol, cg_maxiter, max_workers)
    eig, history = pencil_fit(
        "cca",
        backend,
        p,
        pencil.apply_pair,
        pencil.solve_d,
        r=r,
        oversampling=oversampling,
        block_size=block_size,
        eig_rtol=eig_rtol,
        eig_maxiter=eig_maxiter,
        seed=seed,
        max_basis=max_basis,
        history={"params": params, "n_aligned_concepts": views.n_rows},
        solves=pencil.cg_records,
        passes0=passes0,
        t_start=t_start,
    )
    seconds = history["timings"]["total"]
    if n_langs == 2:
        history["canonical_correlations"] = (eig.eigenvalues - 1.0).tolist()
    logger.info(
        "cca: %d languages, %d aligned concepts, r=%d: %d steps (converged=%s) in %.2fs",
        n_langs,
        views.n_rows,
        r,
        eig.n_iter,
        eig.converged,
        seconds,
    )
    return BaselineResult(
        components=stacked_components(layout, eig.eigenvectors),
        eigenvalues=eig.eigenvalues.copy(),
        history=history,
        mean={lang: m.copy() for lang, m in views.mean.items()},
    )
