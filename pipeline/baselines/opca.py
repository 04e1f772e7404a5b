r"""Oriented principal component analysis (OPCA; Platt et al. 2010, Diamantaras & Kung 1996).

OPCA looks for directions with much signal (variance over all documents) and little noise
(variation between documents about the same concept, i.e. between translations / comparable
documents):

.. math::  \max_V\ \mathrm{tr}(V^T S V) \quad\text{s.t.}\quad V^T (N + \gamma I) V = I
           \iff S v = \sigma\, (N + \gamma I)\, v \ \text{(top r generalised eigenpairs)}.

In our notation (X block-diagonal by language, global centring as in Cr5, ``n_k`` = documents of
concept k over all languages, ``Δ = diag(1/n_k)``, 0 for empty concepts):

* signal: ``S = X̂ᵀX̂ / n = (XᵀX − n μμᵀ) / n`` — the covariance of all documents;
* noise: ``N = (1/n) Σ_i (x_i − x̄_{k(i)})(x_i − x̄_{k(i)})ᵀ = (XᵀX − XᵀY Δ YᵀX) / n`` — the
  within-concept covariance (deviation of each document from its concept's mean; concepts with
  one document contribute nothing; centring does not change it). Pair form: for a concept with
  documents i, j, ``Σ_{i<j}(x_i − x_j)(x_i − x_j)ᵀ = n_k Σ_i (x_i − x̄_k)(x_i − x̄_k)ᵀ``; when
  every concept has exactly two documents (aligned pairs, M = n/2 of them) the paper's
  difference covariance ``(1/M) Σ_m (x_m1 − x_m2)(x_m1 − x_m2)ᵀ`` is ``4N``, i.e. the same
  eigenvectors with γ scaled by 4 and σ by ¼. (Weighting concepts by their size as in the
  general pair form would need a per-document weighted Gram pass, which the backend does not
  offer.)

Both products share passes: per language one ``gram`` (``X_lᵀX_l V_l``), one ``x_scatter``
(``Y_lᵀX_l V_l``, summed over languages into ``YᵀXV``), one ``xt_gather`` of ``Δ YᵀXV``.
``N`` couples the languages (through the concept means), so ``A = N + γI`` is **not** block
diagonal and its inverse is applied by block CG on the whole p × p operator (each iteration is
the same three passes per language), Jacobi-preconditioned with
``1/(diag(XᵀX)/n + γ) ≈ 1/diag(A)`` (``diag(XᵀX) ≥ n·diag(N)``).

Reduction to a solvable problem: block generalised Davidson on the pencil (S, A)
(:func:`~pipeline.baselines.common.pencil_eigsh`) — Rayleigh–Ritz on the pencil with the
basis' S- and A-products stored, expansion by ``A⁻¹(S y − σ A y)`` for the unconverged Ritz
pairs. With exact solves this is block Lanczos on ``A⁻¹S`` in the A-inner product (in residual
form); with inexact CG it stays a genuine Rayleigh–Ritz method with honest residuals. No p × p
matrix is formed.

Output: ``components[l]`` = language-l rows of V, A-orthonormal (``Vᵀ(N + γI)V = I``, OPCA's
constraint); ``eigenvalues`` = σ (descending); ``mean[l] = μ_l``.
"""

from __future__ import annotations

import logging
import time

import numpy as np

from pipeline.baselines.common import (
    BaselineResult,
    check_params,
    pencil_fit,
    per_language,
    stacked_components,
)
from pipeline.baselines.params import OPCA_DEFAULTS as _B
from pipeline.baselines.params import OpcaParams
from pipeline.linalg.backend import CorpusBackend, TermLayout
from pipeline.linalg.block_cg import block_cg
from pipeline.linalg.operator import CallableOperator
from pipeline.linalg.params import CR5_DEFAULTS as _D
from pipeline.linalg.woodbury import global_mean

__all__ = ["fit_opca"]

logger = logging.getLogger(__name__)


class _OpcaProducts:
    """``XᵀXV`` and ``XᵀYΔYᵀXV`` for a (p, b) block, sharing passes across languages."""

    def __init__(self, backend: CorpusBackend, max_workers: int | None) -> None:
        self.backend = backend
        self.layout = TermLayout.of(backend)
        counts = sum(backend.concept_counts(lang) for lang in backend.languages)
        self.inv_counts = np.divide(1.0, counts, out=np.zeros_like(counts), where=counts > 0)
        self.max_workers = max_workers
        self.stage = "opca"

    def __call__(self, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        parts = self.layout.split(v)
        be = self.backend

        def first(lang: str) -> tuple[np.ndarray, np.ndarray]:
            be.describe(f"{self.stage}/gram[{lang}]", None)
            g = be.gram(lang, parts[lang])
            be.describe(f"{self.stage}/scatter[{lang}]", None)
            return g, be.x_scatter(lang, parts[lang])

        outs = per_language(be, first, self.max_workers)
        sums = sum(s for _, s in outs.values()) * self.inv_counts[:, None]

        def gather(lang: str) -> np.ndarray:
            be.describe(f"{self.stage}/gather[{lang}]", None)
            return be.xt_gather(lang, sums)

        between = per_language(be, gather, self.max_workers)
        gram = self.layout.join({lang: g for lang, (g, _) in outs.items()})
        return gram, self.layout.join(between)


class _OpcaPencil:
    """The pencil ``(S, N + γI)`` of OPCA as block products (module docstring).

    :meth:`apply_pair` gives ``S V`` and ``(N + γI) V`` from one round of passes;
    :meth:`solve_a` applies ``(N + γI)⁻¹`` by block CG on the whole p × p operator (``N``
    couples the languages) and records each solve in :attr:`cg_records`.
    """

    def __init__(
        self,
        backend: CorpusBackend,
        layout: TermLayout,
        gamma: float,
        cg_rtol: float,
        cg_maxiter: int,
        max_workers: int | None,
    ) -> None:
        self.p, self.n = layout.n_terms, backend.n_total_docs()
        self.gamma = gamma
        self.cg_rtol = cg_rtol
        self.cg_maxiter = cg_maxiter
        self.mu = global_mean(backend)
        self.products = _OpcaProducts(backend, max_workers)
        self.jacobi = 1.0 / (
            np.concatenate([backend.column_sq_sums(lang) for lang in backend.languages]) / self.n
            + gamma
        )
        self.cg_records: list[dict] = []

    def apply_pair(self, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(S V, (N + γI) V)`` for V of shape (p, b): two ndarrays of shape (p, b)."""
        n, mu = self.n, self.mu
        self.products.stage = "opca/eig"
        gram, between = self.products(v)
        s_v = (gram - n * np.outer(mu, mu @ v)) / n
        a_v = (gram - between) / n + self.gamma * v
        return s_v, a_v

    def a_op(self, v: np.ndarray) -> np.ndarray:
        """``(N + γI) V`` for V of shape (p, b)."""
        self.products.stage = "opca/cg"
        gram, between = self.products(v)
        return (gram - between) / self.n + self.gamma * v

    def solve_a(self, rhs: np.ndarray) -> np.ndarray:
        """``≈ (N + γI)⁻¹ R`` for R of shape (p, b): ndarray of shape (p, b)."""
        res = block_cg(
            CallableOperator((self.p, self.p), self.a_op, self.a_op),
            rhs,
            rtol=self.cg_rtol,
            maxiter=self.cg_maxiter,
            m=self.jacobi,
            name="opca/cg",
        )
        self.cg_records.append(
            {
                "n_rhs": rhs.shape[1],
                "n_iter": res.n_iter,
                "max_residual": float(res.residual_norms[-1].max(initial=0.0)),
                "all_converged": bool(res.converged.all()),
            }
        )
        return res.x


def fit_opca(
    backend: CorpusBackend,
    *,
    r: int = _D.r,
    gamma: float = _B.gamma,
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
    """Fit OPCA: top-r generalised eigenvectors of ``S v = σ (N + γI) v`` (module docstring).

    Parameters
    ----------
    backend : CorpusBackend
    r : int, default 300
        Embedding dimension, ``1 <= r <= p``.
    gamma : float, default 1e-3
        Ridge γ on the noise covariance (covariances are divided by n; unit TF-IDF rows give
        ``trace(S) <= 1``). Tune by validation.
    oversampling : int, default 20
        Caps the expansion block at ``r + oversampling``.
    block_size : int or None, default None
        Expansion block width; None: :func:`~pipeline.linalg.cr5.default_block_size`.
    cg_rtol, cg_maxiter : float, int, default 0.01, 500
        Block CG tolerance and cap for ``(N + γI)⁻¹``.
    eig_rtol, eig_maxiter : float, int, default 0.1, 250
        Eigensolver relative residual tolerance and cap.
    max_basis : int or None, default None
        Eigensolver thick-restart size.
    max_workers : int or None, default None
        Concurrent language passes.
    seed : int, default 0

    Returns
    -------
    BaselineResult
        ``components[l]``: ndarray of shape (p_l, r), float32; ``eigenvalues``: σ;
        ``mean``: μ_l.
    """
    params = {
        "r": r,
        "gamma": gamma,
        "oversampling": oversampling,
        "block_size": block_size,
        "cg_rtol": cg_rtol,
        "cg_maxiter": cg_maxiter,
        "eig_rtol": eig_rtol,
        "eig_maxiter": eig_maxiter,
        "max_basis": max_basis,
        "seed": seed,
    }
    check_params("opca", params, own=OpcaParams)
    t_start = time.perf_counter()
    passes0 = backend.pass_counts
    layout = TermLayout.of(backend)
    p = layout.n_terms
    if r > p:
        raise ValueError(f"opca: r must be <= p = {p}; got {r}")
    pencil = _OpcaPencil(backend, layout, gamma, cg_rtol, cg_maxiter, max_workers)
    eig, history = pencil_fit(
        "opca",
        backend,
        p,
        pencil.apply_pair,
        pencil.solve_a,
        r=r,
        oversampling=oversampling,
        block_size=block_size,
        eig_rtol=eig_rtol,
        eig_maxiter=eig_maxiter,
        seed=seed,
        max_basis=max_basis,
        history={"params": params},
        solves=pencil.cg_records,
        passes0=passes0,
        t_start=t_start,
    )
    seconds = history["timings"]["total"]
    logger.info(
        "opca: r=%d: %d steps (converged=%s), %d CG solves in %.2fs",
        r,
        eig.n_iter,
        eig.converged,
        len(pencil.cg_records),
        seconds,
    )
    return BaselineResult(
        components=stacked_components(layout, eig.eigenvectors),
        eigenvalues=eig.eigenvalues.copy(),
        history=history,
        mean={lang: m.copy() for lang, m in layout.split(pencil.mu).items()},
    )
