"""Preconditioned conjugate gradients for many right-hand sides, one operator pass per iteration.

Choice of method: **b independent preconditioned CGs vectorised as one block** (each column has
its own α_j, β_j), rather than O'Leary's true block CG. Reasons:

* the dense overhead per iteration is O(p·b) instead of O(p·b²) + a b×b factorisation — at
  p_l ≈ 2·10⁵ and b ≈ 400 the latter costs more than the sparse pass itself;
* per-column convergence and deflation are trivial and safe (true block CG needs rank-revealing
  deflation when columns converge at different speeds or become dependent, otherwise it breaks
  down);
* the right-hand sides of one Cr5 solve are only loosely related, so the block Krylov space
  buys few iterations.

Every iteration still makes **one** operator pass, carrying all still-active columns; converged
columns are removed from the block (deflation) and cost no more work.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pipeline.errors import BreakdownError, ConvergenceWarning
from pipeline.linalg.dtypes import working_dtype
from pipeline.linalg.operator import BlockOperator, as_block
from pipeline.linalg.params import CR5_DEFAULTS as _D

__all__ = ["BlockCGResult", "block_cg"]

logger = logging.getLogger(__name__)


@dataclass
class BlockCGResult:
    """Result of :func:`block_cg`.

    Attributes
    ----------
    x : ndarray of shape (n, b)
        Approximate solutions.
    converged : ndarray of bool, shape (b,)
        Whether column j met the stopping rule.
    n_iter : int
        Iterations (= operator passes, not counting the optional initial residual pass).
    residual_norms : ndarray of shape (n_iter + 1, b)
        Relative residuals ``||r_j^(k)|| / ||b_j||`` per iteration (row 0: initial); a column
        keeps its last value once it has converged.
    n_column_passes : int
        Sum over passes of the block width sent to the operator (the work measure).
    """

    x: np.ndarray
    converged: np.ndarray
    n_iter: int
    residual_norms: np.ndarray
    n_column_passes: int


def _apply_precond(m: BlockOperator | np.ndarray | None, r: np.ndarray) -> np.ndarray:
    if m is None:
        return r.copy()
    if isinstance(m, np.ndarray):
        return m[:, None] * r
    return m.matmat(r)


def block_cg(
    a: BlockOperator,
    b: np.ndarray,
    *,
    x0: np.ndarray | None = None,
    rtol: float = _D.cg_rtol,
    atol: float = 0.0,
    maxiter: int = _D.cg_maxiter,
    m: BlockOperator | np.ndarray | None = None,
    callback: Callable[[int, np.ndarray], None] | None = None,
    name: str = "cg",
    dtype: np.dtype | type = np.float64,
) -> BlockCGResult:
    r"""Solve ``A X = B`` for symmetric positive definite A, all columns at once.

    Column j stops (and leaves the block) at the first iteration k with

    .. math::  \|r_j^{(k)}\|_2 \le \max(\mathrm{rtol}\cdot\|b_j\|_2,\ \mathrm{atol}),
               \qquad r_j^{(k)} = b_j - A x_j^{(k)}

    where :math:`r_j^{(k)}` is the recursively updated CG residual. Zero right-hand sides are
    solved by zero without any pass.

    Parameters
    ----------
    a : BlockOperator of shape (n, n)
        Symmetric positive definite.
    b : ndarray of shape (n, nrhs)
        Right-hand sides.
    x0 : ndarray of shape (n, nrhs), optional
        Initial guess (costs one extra pass for the initial residual). Default zero.
    rtol, atol : float
        Relative and absolute tolerances (paper default ``rtol = 0.01``).
    maxiter : int
        Iteration cap T (paper default 500). Reaching it warns with ``ConvergenceWarning``.
    m : BlockOperator of shape (n, n) or ndarray of shape (n,), optional
        Preconditioner approximating ``A^{-1}``; a 1-D array is its diagonal (Jacobi:
        ``1 / diag(A)``).
    callback : callable, optional
        ``callback(iteration, residual_norms)`` after each iteration, with the relative
        residuals of all columns, shape (nrhs,). May raise to abort.
    name : str
        Label for log lines.

    Returns
    -------
    BlockCGResult

    Raises
    ------
    BreakdownError
        On NaN/Inf, or ``p_j^T A p_j <= 0`` (A not positive definite to working precision).
    """
    b, m, dtype = _checked(a, b, m, dtype, rtol=rtol, atol=atol, maxiter=maxiter)
    nrhs = b.shape[1]
    b_norm = np.linalg.norm(b, axis=0)
    threshold = np.maximum(rtol * b_norm, atol)
    denom = np.where(b_norm > 0, b_norm, 1.0)
    x, r_full, n_passes = _initial_residual(a, b, x0, dtype)

    res = np.linalg.norm(r_full, axis=0)
    converged = (res <= threshold) | (res == 0)
    history = [res / denom]
    act = _ActiveColumns.start(np.flatnonzero(~converged), r_full, x, m)
    t0 = time.perf_counter()
    it = 0
    while act.cols.size and it < maxiter:
        it += 1
        ap = np.asarray(a.matmat(act.p), dtype=dtype)
        n_passes += act.p.shape[1]
        res_act = act.step(ap, it, name)
        res[act.cols] = res_act
        history.append(res / denom)
        done = (res_act <= threshold[act.cols]) | (res_act == 0)
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "%s it=%d active=%d max_rel_res=%.3e elapsed=%.2fs",
                name,
                it,
                act.cols.size,
                float(np.max(res_act / denom[act.cols])),
                time.perf_counter() - t0,
            )
        if callback is not None:
            callback(it, history[-1])
        if np.any(done):
            converged[act.cols[done]] = True
            x[:, act.cols] = act.x
            act.drop(done)
            if not act.cols.size:
                break
        act.next_direction(m)
    if act.cols.size:
        x[:, act.cols] = act.x
        warnings.warn(
            f"{name}: {act.cols.size} of {nrhs} columns did not reach rtol={rtol} in "
            f"maxiter={maxiter} iterations (max relative residual "
            f"{float(np.max(res[act.cols] / denom[act.cols])):.3e})",
            ConvergenceWarning,
            stacklevel=2,
        )
    return BlockCGResult(
        x=x,
        converged=converged,
        n_iter=it,
        residual_norms=np.array(history),
        n_column_passes=n_passes,
    )


def _checked(
    a: BlockOperator,
    b: np.ndarray,
    m: BlockOperator | np.ndarray | None,
    dtype: np.dtype | type,
    *,
    rtol: float,
    atol: float,
    maxiter: int,
) -> tuple[np.ndarray, BlockOperator | np.ndarray | None, np.dtype]:
    """``(B, M, dtype)`` in the working dtype, after checking the arguments of
    :func:`block_cg`."""
    if rtol < 0 or atol < 0:
        raise ValueError(f"rtol and atol must be >= 0; got rtol={rtol}, atol={atol}")
    if maxiter < 0:
        raise ValueError(f"maxiter must be >= 0; got {maxiter}")
    n = a.shape[0]
    if a.shape != (n, n):
        raise ValueError(f"operator must be square; got shape {a.shape}")
    dtype = working_dtype(dtype)
    if isinstance(m, np.ndarray):
        m = m.astype(dtype, copy=False)
    return np.asarray(as_block(b, n, name="B"), dtype=dtype), m, dtype


def _initial_residual(
    a: BlockOperator, b: np.ndarray, x0: np.ndarray | None, dtype: np.dtype
) -> tuple[np.ndarray, np.ndarray, int]:
    """``(X, R, passes)``: the start X (x0, or zero) and its residual ``B − A X`` (one pass of
    the block's width with x0, none without)."""
    n = a.shape[0]
    if x0 is None:
        return np.zeros_like(b), b.copy(), 0
    x = np.array(as_block(x0, n, name="x0"), dtype=dtype)
    if x.shape != b.shape:
        raise ValueError(f"x0 must have shape {b.shape}; got {x.shape}")
    return x, b - np.asarray(a.matmat(x), dtype=dtype), b.shape[1]


class _ActiveColumns:
    """The CG state of the columns still iterating, compacted (updated in place; the caller
    writes ``x`` back into the full solution when columns leave)."""

    def __init__(
        self,
        cols: np.ndarray,
        r: np.ndarray,
        x: np.ndarray,
        p: np.ndarray,
        rz: np.ndarray,
    ) -> None:
        self.cols, self.r, self.x, self.p, self.rz = cols, r, x, p, rz
        self.tmp = np.empty_like(r)

    @classmethod
    def start(
        cls,
        cols: np.ndarray,
        r_full: np.ndarray,
        x: np.ndarray,
        m: BlockOperator | np.ndarray | None,
    ) -> _ActiveColumns:
        """Columns ``cols`` of the residual ``r_full`` and the start ``x``, with the first
        directions ``p = z = M r``."""
        r = r_full[:, cols]
        xa = x[:, cols]
        z = _apply_precond(m, r)
        return cls(cols, r, xa, z.copy(), np.einsum("ij,ij->j", r, z))

    def step(self, ap: np.ndarray, it: int, name: str) -> np.ndarray:
        """One CG update of x and r with ``ap = A p``; returns the residual norms.

        Raises
        ------
        BreakdownError
            On NaN/Inf, or ``p_j^T A p_j <= 0``.
        """
        p, r = self.p, self.r
        pap = np.einsum("ij,ij->j", p, ap)
        if not np.all(np.isfinite(pap)):
            raise BreakdownError(f"{name}: NaN/Inf in A·p at iteration {it}")
        if np.any(pap <= 0):
            bad = self.cols[pap <= 0]
            raise BreakdownError(
                f"{name}: p^T A p <= 0 at iteration {it} for columns {bad[:10].tolist()}: "
                "the operator is not positive definite to working precision"
            )
        alpha = self.rz / pap
        self.x += np.multiply(p, alpha, out=self.tmp)
        r -= np.multiply(ap, alpha, out=self.tmp)
        res = np.sqrt(np.einsum("ij,ij->j", r, r))
        if not np.all(np.isfinite(res)):
            raise BreakdownError(f"{name}: NaN/Inf in the residual at iteration {it}")
        return res

    def drop(self, done: np.ndarray) -> None:
        """Deflation: the columns ``done`` (a mask over the active ones) leave the block."""
        keep = ~done
        self.cols, self.rz = self.cols[keep], self.rz[keep]
        self.r, self.p, self.x = self.r[:, keep], self.p[:, keep], self.x[:, keep]
        self.tmp = np.empty_like(self.r)

    def next_direction(self, m: BlockOperator | np.ndarray | None) -> None:
        """``p ← z + (rᵀz / previous rᵀz) p`` with ``z = M r``, in place."""
        z = _apply_precond(m, self.r)
        rz_new = np.einsum("ij,ij->j", self.r, z)
        self.p *= rz_new / self.rz
        self.p += z
        self.rz = rz_new
