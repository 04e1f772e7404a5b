r"""Crosslingual LSI (Dumais et al. 1997; the CL-LSI baseline of Platt et al. 2010).

The training matrix has one row per concept and one column per term of the stacked
vocabularies: row k concatenates, language block by language block, the (summed) TF-IDF
vectors of concept k's documents. In our notation it is

.. math::  D = Y^T X \quad (K \times p), \qquad
           \text{or, with ``center=True``,}\quad \hat D = \hat Y^T \hat X = C^T
           = Y^TX - n\,\nu\mu^T

(the same global centring as Cr5, rank-1 part kept implicit). CL-LSI is the truncated SVD
``D ≈ U_r Σ_r V_rᵀ``; a document of language l embeds by projecting its own language block
onto the right singular vectors: ``x_l ↦ x_l V_{r,l}`` — so ``components[l] = V_r[l-block]``
(shape (p_l, r)), exactly the layout of Cr5's Φ_lᵀ (columns jointly orthonormal over all
languages). ``eigenvalues`` are σ_i².

Which Gram operator. Both ``DᵀD = XᵀYYᵀX`` (p × p) and ``DDᵀ = YᵀXXᵀY`` (K × K) cost the same
passes per block: one ``x_scatter`` and one ``xt_gather`` per language
(:class:`~pipeline.linalg.cr5.CrossCovariance` is exactly ``Dᵀ``). What differs is the
eigensolver's dense work and memory, ``O(dim · m²)`` and ``dim · m`` doubles for a basis of m
columns, so the cheaper side is the smaller dimension: ``side="auto"`` picks ``"concepts"``
when ``K <= p`` (e.g. pairwise Wikipedia models: K ≈ 10⁵–10⁶ concepts vs p = 2 · 2·10⁵ terms
picks "terms"; small comparable corpora pick "concepts"). The concept side needs one more
``xt_gather`` pass at the end to map back: ``V = Dᵀ P Σ⁻¹``.
"""

from __future__ import annotations

import logging
import time

import numpy as np

from pipeline.baselines.common import (
    BaselineResult,
    check_params,
    pass_delta,
    stacked_components,
)
from pipeline.errors import BreakdownError
from pipeline.linalg.backend import CorpusBackend, TermLayout
from pipeline.linalg.block_lanczos import block_lanczos
from pipeline.linalg.cr5 import CrossCovariance, concept_frequencies, resolve_block_size
from pipeline.linalg.operator import CallableOperator
from pipeline.linalg.params import CR5_DEFAULTS as _D
from pipeline.linalg.woodbury import global_mean

__all__ = ["SIDES", "fit_cl_lsi"]

logger = logging.getLogger(__name__)

#: Allowed values of ``side``.
SIDES = ("auto", "terms", "concepts")


def _transposed_matrix(
    backend: CorpusBackend, center: bool, max_workers: int | None
) -> tuple[CrossCovariance, np.ndarray]:
    """``Dᵀ`` (p × K), globally centred with ``center``, and the term mean μ (p,) it subtracts
    (zeros without centring)."""
    k, p = backend.n_concepts, TermLayout.of(backend).n_terms
    if center:
        mu, nu = global_mean(backend), concept_frequencies(backend)
    else:
        mu, nu = np.zeros(p), np.zeros(k)
    dt = CrossCovariance(backend, mu, nu, max_workers=max_workers)
    dt.stage = "cl_lsi"
    return dt, mu


def _gram_operator(dt: CrossCovariance, side: str) -> CallableOperator:
    """``DDᵀ`` (K × K) for ``side="concepts"``, else ``DᵀD`` (p × p), from ``Dᵀ`` (p × K)."""
    p, k = dt.shape
    if side == "concepts":
        return CallableOperator((k, k), lambda q: dt.rmatmat(dt.matmat(q)))
    return CallableOperator((p, p), lambda v: dt.matmat(dt.rmatmat(v)))


def _right_singular_vectors(
    dt: CrossCovariance, side: str, eigenvectors: np.ndarray, sigma2: np.ndarray, r: int
) -> np.ndarray:
    """The top-r right singular vectors of D (ndarray of shape (p, r)) from the Gram
    eigenpairs: the eigenvectors themselves on the term side, ``V = Dᵀ P Σ⁻¹`` (one more
    pass) on the concept side. Raise BreakdownError when σ_r is numerically zero."""
    if not sigma2[-1] > 1e-12 * max(sigma2[0], np.finfo(float).tiny):
        raise BreakdownError(
            f"cl_lsi: singular value {len(sigma2)} is numerically zero (σ² = {sigma2[-1]:.3e}, "
            f"σ₁² = {sigma2[0]:.3e}); r={r} exceeds the rank of the concept × term matrix"
        )
    if side == "concepts":
        return dt.matmat(eigenvectors) / np.sqrt(sigma2)
    return eigenvectors


def fit_cl_lsi(
    backend: CorpusBackend,
    *,
    r: int = _D.r,
    center: bool = False,
    side: str = "auto",
    oversampling: int = _D.oversampling,
    block_size: int | None = None,
    eig_rtol: float = _D.eig_rtol,
    eig_maxiter: int = _D.eig_maxiter,
    max_basis: int | None = None,
    max_workers: int | None = None,
    seed: int = _D.seed,
) -> BaselineResult:
    """Fit CL-LSI: top-r right singular vectors of ``D = YᵀX`` (module docstring).

    Parameters
    ----------
    backend : CorpusBackend
    r : int, default 300
        Embedding dimension, ``1 <= r <= min(K, p)`` (and at most the rank of D).
    center : bool, default False
        Use the globally centred ``D̂ = ŶᵀX̂`` (classic LSI does not centre).
    side : {"auto", "terms", "concepts"}, default "auto"
        Which Gram matrix the eigensolver works on: ``DᵀD`` (p × p), ``DDᵀ`` (K × K), or the
        smaller one.
    oversampling : int, default 20
        Block width cap ``r + oversampling`` (see
        :func:`~pipeline.linalg.cr5.default_block_size`).
    block_size : int or None, default None
        Eigensolver block width; None: ``default_block_size(r, oversampling)``.
    eig_rtol, eig_maxiter : float, int, default 0.1, 250
        Block Lanczos relative residual tolerance and iteration cap.
    max_basis : int or None, default None
        Block Lanczos thick-restart size.
    max_workers : int or None, default None
        Concurrent language passes (None: one per language).
    seed : int, default 0
        Seeds the eigensolver.

    Returns
    -------
    BaselineResult
        ``components[l]``: ndarray of shape (p_l, r), float32; ``eigenvalues``: σ_i²;
        ``mean``: μ_l when ``center`` else None.
    """
    params = {
        "r": r,
        "center": bool(center),
        "side": side,
        "oversampling": oversampling,
        "block_size": block_size,
        "eig_rtol": eig_rtol,
        "eig_maxiter": eig_maxiter,
        "max_basis": max_basis,
        "seed": seed,
    }
    check_params(
        "cl_lsi",
        params,
        {
            "side": (f"one of {SIDES}", lambda v: v in SIDES),
        },
    )
    t_start = time.perf_counter()
    passes0 = backend.pass_counts
    layout = TermLayout.of(backend)
    k, p = backend.n_concepts, layout.n_terms
    if r > min(k, p):
        raise ValueError(f"cl_lsi: r must be <= min(K, p) = {min(k, p)}; got {r}")
    dt, mu = _transposed_matrix(backend, center, max_workers)
    chosen = side if side != "auto" else ("concepts" if k <= p else "terms")
    gram = _gram_operator(dt, chosen)
    b = resolve_block_size(r, oversampling, block_size, gram.shape[0])
    eig = block_lanczos(
        gram,
        r,
        block_size=b,
        rtol=eig_rtol,
        maxiter=eig_maxiter,
        seed=seed,
        max_basis=max_basis,
        name=f"cl_lsi/{chosen}",
    )
    sigma2 = eig.eigenvalues
    vecs = _right_singular_vectors(dt, chosen, eig.eigenvectors, sigma2, r)
    seconds = time.perf_counter() - t_start
    history = {
        "method": "cl_lsi",
        "params": params,
        "side": chosen,
        "block_size": b,
        "eigensolver": eig.to_history(),
        "passes": pass_delta(passes0, backend.pass_counts),
        "timings": {"total": round(seconds, 4)},
    }
    logger.info(
        "cl_lsi: side=%s r=%d %d iterations (converged=%s) in %.2fs",
        chosen,
        r,
        eig.n_iter,
        eig.converged,
        seconds,
    )
    return BaselineResult(
        components=stacked_components(layout, vecs),
        eigenvalues=sigma2.copy(),
        history=history,
        mean={lang: m.copy() for lang, m in layout.split(mu).items()} if center else None,
    )
