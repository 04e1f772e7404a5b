r"""Shared pieces of the baselines: the result type, parameter checks, and a pencil eigensolver.

:func:`pencil_eigsh` finds the top-r eigenpairs of a symmetric-definite pencil
``S v = θ A v`` (S symmetric, A symmetric positive definite) when S and A are only available as
block products and ``A⁻¹`` only approximately (by block CG). It is a **block generalised
Davidson** method with the shift-free "exact" preconditioner ``A⁻¹``:

* basis V (n × m), Euclidean-orthonormal, with ``SV`` and ``AV`` stored (one joint pass per
  new block, so no product is ever recomputed);
* Rayleigh–Ritz on the pencil: ``(VᵀSV) s = θ (VᵀAV) s`` (dense, m × m), Ritz vectors
  ``y = V s`` normalised so that ``yᵀAy = 1``;
* residuals ``R = S y − θ A y`` come for free from ``SV`` and ``AV``; the stopping rule is

  .. math::  \rho_i = \frac{\|S y_i - \theta_i A y_i\|_2}{|\theta_i|\,\|A y_i\|_2}
             \le \varepsilon \quad (i = 1..r);

* the expansion block is ``W = A⁻¹ R`` for the leading not-yet-converged Ritz pairs (at most
  ``block_size`` of them). With exact solves this spans the same space as block Lanczos on
  ``A⁻¹S`` (whose Krylov space it builds, in residual form, which avoids the cancellation of
  ``A⁻¹S y ≈ θ y``); with inexact CG solves only the quality of the new directions suffers —
  Rayleigh–Ritz and the residuals are computed with exact products, so the reported
  eigenpairs are always genuine Ritz pairs with honest residuals;
* ``max_basis`` thick-restarts from the leading Ritz vectors (exact, no extra passes).

Block Lanczos in the A-inner product would need A-orthogonalisation against inexact ``A⁻¹``
solves; this formulation sidesteps that.
"""

from __future__ import annotations

import dataclasses
import logging
import numbers
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.linalg as sla

from pipeline.errors import BreakdownError, ConvergenceWarning
from pipeline.linalg.backend import CorpusBackend, TermLayout, map_languages, pass_delta
from pipeline.linalg.block_lanczos import LanczosResult
from pipeline.linalg.cr5 import resolve_block_size
from pipeline.linalg.params import CR5_DEFAULTS as _D
from pipeline.linalg.params import Cr5Params
from pipeline.params import check_params as check_declared

__all__ = [
    "BaselineResult",
    "PencilResult",
    "check_params",
    "pass_delta",
    "pencil_eigsh",
    "pencil_fit",
    "per_language",
    "stacked_components",
]

logger = logging.getLogger(__name__)


@dataclass
class BaselineResult:
    """Output of every ``fit_<method>`` (mirrors :class:`~pipeline.linalg.cr5.Cr5Result`).

    Attributes
    ----------
    components : dict of str to ndarray of shape (p_l, r), float32
        The per-language map (``phi``): a TF-IDF row ``x`` of language ``l`` embeds as
        ``x @ components[l]``. For the untranslated baseline these are scipy sparse CSR
        matrices of shape (p_l, |union vocabulary|).
    eigenvalues : ndarray of shape (r,)
        The method's leading eigenvalues (descending); empty for the untranslated baseline.
    history : dict
        JSON-serialisable provenance: method, parameters, solver iterations, residuals,
        passes over X, timings.
    mean : dict of str to ndarray of shape (p_l,), optional
        The centring vector used by the fit (for optional centring at inference), or None.
    folding_in : dict, optional
        For the topic models: ``components[l]`` is the language's topic-word matrix
        (p_l, T), and a document is embedded from its term counts by folding-in with these
        settings (``steps``, ``topic_prior``; :func:`pipeline.baselines.topics.fold_in`), not
        as ``x @ components[l]``. None for the linear maps.
    similarity : str
        The method's own similarity of two embeddings (``"l1"`` for topic distributions);
        cosine for the others.
    """

    components: dict
    eigenvalues: np.ndarray
    history: dict
    mean: dict[str, np.ndarray] | None = None
    folding_in: dict | None = None
    similarity: str = "cosine"


def check_params(
    method: str,
    params: dict,
    rules: dict[str, tuple[str, Callable]] | None = None,
    *,
    own: type | None = None,
) -> None:
    """Validate ``params``: the solver's keys against their one declaration
    (:class:`~pipeline.linalg.params.Cr5Params`, the flat keys ``train.*``), the method's
    own against its class ``own`` of :mod:`pipeline.baselines.params` (the section
    ``train.<method>.*``), then the method's own ``rules`` (``{name: (description,
    predicate)}``); raise ValueError (a ConfigError)."""
    mine = {f.name for f in dataclasses.fields(own)} if own is not None else set()
    shared = {k: v for k, v in params.items() if k not in mine}  # e.g. PLSA's own stop_rule
    check_declared(Cr5Params, shared, owner=method, prefix="train.")
    if own is not None:
        check_declared(own, params, owner=method, prefix=f"train.{method}.")
    for name, (desc, ok) in (rules or {}).items():
        if not ok(params[name]):
            raise ValueError(f"{method}: {name} must be {desc}; got {params[name]!r}")


def is_int(lo: int) -> Callable:
    return lambda v: isinstance(v, numbers.Integral) and not isinstance(v, bool) and v >= lo


def is_pos(v: object) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and v > 0


def is_nonneg(v: object) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and v >= 0


def stacked_components(layout: TermLayout, vectors: np.ndarray) -> dict[str, np.ndarray]:
    """Per-language float32 maps (p_l, r) from vectors over the stacked vocabularies (p, r)."""
    return {
        lang: np.ascontiguousarray(part, dtype=np.float32)
        for lang, part in layout.split(vectors).items()
    }


def per_language(
    backend: CorpusBackend, fn: Callable[[str], np.ndarray], max_workers: int | None = None
) -> dict[str, np.ndarray]:
    """``{lang: fn(lang)}``, languages run concurrently; result in language order."""
    return map_languages(backend.languages, fn, max_workers, thread_name="baseline")


@dataclass
class PencilResult(LanczosResult):
    """Result of :func:`pencil_eigsh` (the fields and ``to_history`` of LanczosResult).

    Attributes
    ----------
    eigenvalues : ndarray of shape (r,)
        Descending Ritz values θ.
    eigenvectors : ndarray of shape (n, r)
        Ritz vectors, A-orthonormal (``YᵀAY = I``).
    n_iter : int
        Expansion steps (each: one ``A⁻¹`` solve and one joint S/A product).
    converged : bool
    ritz_values, residual_norms : ndarray of shape (n_iter + 1, r)
        History (row 0: the start block).
    n_restarts : int
    """


def _orthonormal_extension(
    v: np.ndarray, w: np.ndarray, rng: np.random.Generator, width: int
) -> np.ndarray:
    """Orthonormal columns spanning ``w`` minus ``span(v)``; dependent ones replaced by random."""
    n = v.shape[0]
    width = min(width, n - v.shape[1])
    if width <= 0:
        return np.zeros((n, 0))
    scale = float(np.max(np.linalg.norm(w, axis=0), initial=0.0))
    for _ in range(2):
        w = w - v @ (v.T @ w)
    q, rr, _ = sla.qr(w, mode="economic", pivoting=True)
    rank = int(np.sum(np.abs(np.diag(rr)) > 1e-10 * max(scale, np.finfo(float).tiny)))
    q = q[:, : min(rank, width)]
    if q.shape[1] < width:
        extra = rng.standard_normal((n, width - q.shape[1]))
        full = np.hstack([v, q])
        for _ in range(2):
            extra -= full @ (full.T @ extra)
        extra, _ = np.linalg.qr(extra)
        q = np.hstack([q, extra])
    return q


@dataclass
class _RitzStep:
    """Rayleigh–Ritz on the current basis.

    Attributes
    ----------
    theta : ndarray of shape (m,)
        Ritz values, descending.
    s : ndarray of shape (m, m)
        Their coefficient vectors in the basis (columns in the order of ``theta``).
    res : ndarray of shape (n, k)
        Residuals ``S y − θ A y`` of the leading k = min(m, max(r, b)) Ritz pairs.
    rho : ndarray of shape (k,)
        Their relative residuals ρ (module docstring).
    """

    theta: np.ndarray
    s: np.ndarray
    res: np.ndarray
    rho: np.ndarray


def _expansion_width(
    name: str, n: int, r: int, block_size: int | None, max_basis: int | None
) -> int:
    """Check r, block_size and max_basis against n; return the expansion width b."""
    if not 1 <= r <= n:
        raise ValueError(f"{name}: r must satisfy 1 <= r <= {n}; got {r}")
    b = min(r if block_size is None else int(block_size), n)
    if b < 1:
        raise ValueError(f"{name}: block_size must be >= 1; got {block_size}")
    if max_basis is not None and max_basis < r + 2 * b:
        raise ValueError(f"{name}: max_basis must be >= r + 2*block_size = {r + 2 * b}")
    return b


def _rayleigh_ritz(
    v: np.ndarray, sv: np.ndarray, av: np.ndarray, r: int, b: int, name: str, step: int
) -> _RitzStep:
    """Ritz pairs of the pencil on ``span(V)`` from the stored products ``SV`` and ``AV``
    (each of shape (n, m)); the residuals need no further product."""
    if not (np.all(np.isfinite(sv)) and np.all(np.isfinite(av))):
        raise BreakdownError(f"{name}: NaN/Inf from the operator at step {step}")
    hs = v.T @ sv
    ha = v.T @ av
    try:
        theta, s = sla.eigh(0.5 * (hs + hs.T), 0.5 * (ha + ha.T))
    except np.linalg.LinAlgError as exc:
        raise BreakdownError(
            f"{name}: projected A (size {ha.shape[0]}) is not positive definite: {exc}"
        ) from exc
    theta, s = theta[::-1], s[:, ::-1]
    k = min(v.shape[1], max(r, b))
    sy, ay = sv @ s[:, :k], av @ s[:, :k]
    res = sy - ay * theta[:k]
    denom = np.abs(theta[:k]) * np.linalg.norm(ay, axis=0)
    rho = np.linalg.norm(res, axis=0) / np.where(denom > 0, denom, np.finfo(float).tiny)
    return _RitzStep(theta, s, res, rho)


def _thick_restart(
    v: np.ndarray, sv: np.ndarray, av: np.ndarray, s: np.ndarray, r: int, b: int, max_basis: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The basis and its products reduced to the span of the leading Ritz vectors (exact: the
    stored products are rotated, no pass over the data)."""
    keep = max(r, min(max_basis - 2 * b, max_basis // 2))
    u, _ = np.linalg.qr(s[:, :keep])
    return v @ u, sv @ u, av @ u


def pencil_eigsh(
    apply_pair: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]],
    solve_a: Callable[[np.ndarray], np.ndarray],
    n: int,
    r: int,
    *,
    block_size: int | None = None,
    rtol: float = _D.eig_rtol,
    maxiter: int = _D.eig_maxiter,
    seed: int = _D.seed,
    max_basis: int | None = None,
    name: str = "pencil",
) -> PencilResult:
    """Leading ``r`` eigenpairs of ``S v = θ A v`` (module docstring).

    Parameters
    ----------
    apply_pair : callable
        ``apply_pair(V) -> (S V, A V)`` for V of shape (n, b) (one joint pass over the data).
    solve_a : callable
        ``solve_a(R) -> ≈ A⁻¹ R`` for R of shape (n, b).
    n : int
        Dimension.
    r : int
        Number of eigenpairs, ``1 <= r <= n``.
    block_size : int, optional
        Expansion width b (default r).
    rtol : float
        ε of the stopping rule.
    maxiter : int
        Cap on expansion steps; reaching it warns with ``ConvergenceWarning``.
    seed : int
        Seeds the start block.
    max_basis : int, optional
        Thick-restart when the basis would exceed this many columns (``>= r + 2 b``).
    name : str
        Label for log lines.

    Returns
    -------
    PencilResult

    Raises
    ------
    BreakdownError
        NaN/Inf from the products, or ``VᵀAV`` not positive definite.
    """
    b = _expansion_width(name, n, r, block_size, max_basis)
    rng = np.random.default_rng(seed)
    v, _ = np.linalg.qr(rng.standard_normal((n, max(b, r))))
    sv, av = apply_pair(v)
    ritz_hist: list[np.ndarray] = []
    res_hist: list[np.ndarray] = []
    n_iter = n_restarts = 0
    t0 = time.perf_counter()
    while True:
        step = _rayleigh_ritz(v, sv, av, r, b, name, n_iter)
        ritz_hist.append(step.theta[:r].copy())
        res_hist.append(step.rho[:r].copy())
        logger.info(
            "%s it=%d basis=%d theta_1=%.6g theta_r=%.6g max_rel_res=%.3e elapsed=%.1fs",
            name,
            n_iter,
            v.shape[1],
            step.theta[0],
            step.theta[r - 1],
            float(np.max(step.rho[:r])),
            time.perf_counter() - t0,
        )
        converged = bool(np.all(step.rho[:r] <= rtol))
        if converged or n_iter >= maxiter or v.shape[1] >= n:
            converged = converged or v.shape[1] >= n
            break
        todo = np.flatnonzero(step.rho > rtol)[:b]
        w = solve_a(step.res[:, todo])
        if not np.all(np.isfinite(w)):
            raise BreakdownError(f"{name}: NaN/Inf from the A⁻¹ solve at step {n_iter + 1}")
        if max_basis is not None and v.shape[1] + w.shape[1] > max_basis:
            v, sv, av = _thick_restart(v, sv, av, step.s, r, b, max_basis)
            n_restarts += 1
        q = _orthonormal_extension(v, w, rng, w.shape[1])
        if q.shape[1] == 0:
            converged = True
            break
        sq, aq = apply_pair(q)
        v, sv, av = np.hstack([v, q]), np.hstack([sv, sq]), np.hstack([av, aq])
        n_iter += 1
    if not converged:
        warnings.warn(
            f"{name}: {int(np.sum(step.rho[:r] > rtol))} of {r} Ritz pairs did not reach "
            f"rtol={rtol} in maxiter={maxiter} steps (max relative residual "
            f"{float(np.max(step.rho[:r])):.3e})",
            ConvergenceWarning,
            stacklevel=2,
        )
    return PencilResult(
        eigenvalues=step.theta[:r].copy(),
        eigenvectors=v @ step.s[:, :r],
        n_iter=n_iter,
        converged=converged,
        ritz_values=np.array(ritz_hist),
        residual_norms=np.array(res_hist),
        n_restarts=n_restarts,
    )


def pencil_fit(
    method: str,
    backend: CorpusBackend,
    p: int,
    apply_pair: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]],
    solve: Callable[[np.ndarray], np.ndarray],
    *,
    r: int,
    oversampling: int,
    block_size: int | None,
    eig_rtol: float,
    eig_maxiter: int,
    seed: int,
    max_basis: int | None,
    history: dict[str, Any],
    solves: list[dict[str, Any]],
    passes0: Any,
    t_start: float,
) -> tuple[PencilResult, dict[str, Any]]:
    """The generalised eigensolve shared by CCA and OPCA, and its history record.

    Runs :func:`pencil_eigsh` on ``apply_pair``/``solve`` (``p`` stacked terms)
    with the block rule of :func:`resolve_block_size`, and completes ``history`` (``method``
    first, then what the caller put in it) with the block width, the eigensolver's history,
    the passes since ``passes0`` and the total time since ``t_start``.
    """
    b = resolve_block_size(r, oversampling, block_size, p)
    eig = pencil_eigsh(
        apply_pair,
        solve,
        p,
        r,
        block_size=b,
        rtol=eig_rtol,
        maxiter=eig_maxiter,
        seed=seed,
        max_basis=max_basis,
        name=f"{method}/eigensolver",
    )
    seconds = time.perf_counter() - t_start
    record = {"method": method, **history, "block_size": b, "eigensolver": eig.to_history()}
    record["solves"] = solves
    record["passes"] = pass_delta(passes0, backend.pass_counts)
    record["timings"] = {"total": round(seconds, 4)}
    return eig, record
