r"""The preconditioner of the per-language CG solves: Jacobi with the top of the spectrum deflated.

``B_l = X_lᵀX_l + λI`` is solved for many right-hand sides in every eigensolver iteration.
Jacobi scaling (``D = diag(B_l)``) evens out the term frequencies, but the scaled matrix
``S B_l S`` (``S = D^{-1/2}``) keeps a few eigenvalues far above the bulk (the directions
of words that co-occur everywhere), and CG pays iterations for them. With ``U`` (p_l × k,
orthonormal) spanning approximate top eigenvectors of ``S B_l S`` and ``w`` their Rayleigh
quotients,

.. math::  M = S\,\bigl(I + U\,(\mathrm{diag}(w)^{-1} - I)\,U^T\bigr)\,S

maps those directions to eigenvalue ~1 and leaves the rest as Jacobi does. ``M`` is
symmetric positive definite for any orthonormal ``U`` and positive ``w`` (its middle factor
has eigenvalues 1 and 1/w_i), so a rough ``U`` costs iterations, never correctness.

``U`` comes from randomized subspace iteration (Halko, Martinsson & Tropp 2011, Alg. 4.4):
``steps`` products with ``S B_l S`` on k + oversampling columns, then Rayleigh–Ritz: a few
passes per language and λ, a small share of a fit's CG work, for fewer CG iterations in every
solve (``train.precond_rank``; bench/README.md, "Solver knobs"). Each CG iteration adds two
dense products p_l × k × b.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pipeline.linalg.block_lanczos import orthonormal_columns
from pipeline.linalg.dtypes import PASS_DTYPES, working_dtype
from pipeline.linalg.operator import BlockOperator

__all__ = ["SpectralJacobi", "spectral_jacobi"]


class SpectralJacobi(BlockOperator):
    """``M`` of the module docstring, shape (p_l, p_l); ``basis`` None is plain Jacobi.

    Parameters
    ----------
    jacobi : ndarray of shape (p_l,)
        ``1 / diag(B_l)``.
    basis : ndarray of shape (p_l, k), optional
        Orthonormal columns (approximate top eigenvectors of ``S B_l S``); kept in ``dtype``.
    values : ndarray of shape (k,), optional
        Their Rayleigh quotients (> 0).
    dtype : numpy dtype
        Of the two deflation products (``Uᵀ y`` and ``U c``). float32 — the pass dtype of a
        float32 backend, whose Gram products carry float32 rounding already — halves their
        cost, which is comparable to a share of the CG's sparse work, at the same CG
        iteration counts. ``M`` stays symmetric positive definite in exact arithmetic (it is
        the same formula with a rounded U).
    """

    def __init__(
        self,
        jacobi: np.ndarray,
        basis: np.ndarray | None = None,
        values: np.ndarray | None = None,
        *,
        dtype: np.dtype | type = np.float64,
    ) -> None:
        jacobi = np.asarray(jacobi, dtype=np.float64)
        p = jacobi.shape[0]
        super().__init__((p, p), np.float64)
        self.jacobi = jacobi
        self._scale = np.sqrt(jacobi)
        # the diagonals in each CG dtype, cast once (not a p_l copy per application)
        self._diagonals = {
            np.dtype(dt): (
                jacobi.astype(dt, copy=False)[:, None],
                self._scale.astype(dt, copy=False)[:, None],
            )
            for dt in PASS_DTYPES
        }
        self.dtype_products = working_dtype(dtype)
        # one copy, in the products' dtype (at p = 760k, k = 32: 97 MB float32)
        self.basis = (
            None if basis is None else np.ascontiguousarray(basis, dtype=self.dtype_products)
        )
        self.values = None if values is None else np.asarray(values, dtype=np.float64)
        if self.basis is not None:
            if self.values is None or self.basis.shape != (p, self.values.shape[0]):
                raise ValueError("basis must have shape (p, k) and values shape (k,)")
            if not np.all(self.values > 0):
                raise ValueError("the deflated eigenvalues must be positive")
            self._coef = (1.0 / self.values - 1.0).astype(self.dtype_products)

    @property
    def rank(self) -> int:
        return 0 if self.basis is None else self.basis.shape[1]

    def _matmat(self, r: np.ndarray) -> np.ndarray:
        # in r's dtype: a float32 CG gets float32 back (no float64 temporaries)
        if r.dtype not in self._diagonals:  # e.g. float16 through the public matmat
            r = r.astype(np.float64)
        jacobi, scale = self._diagonals[r.dtype]
        if self.basis is None:
            return jacobi * r
        y = scale * r
        coef = self.basis.T @ y.astype(self.dtype_products, copy=False)
        y += self.basis @ (self._coef[:, None] * coef)
        y *= scale
        return y

    _rmatmat = _matmat


def spectral_jacobi(
    gram: Callable[[np.ndarray], np.ndarray],
    jacobi: np.ndarray,
    rank: int,
    *,
    oversampling: int = 8,
    steps: int = 3,
    seed: int = 0,
    dtype: np.dtype | type = np.float64,
) -> SpectralJacobi:
    """Build :class:`SpectralJacobi` for ``B_l`` given by ``gram(V) = B_l V`` (V: (p_l, c)).

    Costs ``steps + 1`` products with ``rank + oversampling`` columns. ``rank`` 0, or a
    vocabulary too small for it (p_l < 2 (rank + oversampling)), gives plain Jacobi.
    ``dtype``: of the preconditioner's deflation products (:class:`SpectralJacobi`).
    """
    jacobi = np.asarray(jacobi, dtype=np.float64)
    p = jacobi.shape[0]
    cols = rank + oversampling
    if rank <= 0 or p < 2 * cols:
        return SpectralJacobi(jacobi, dtype=dtype)
    scale = np.sqrt(jacobi)[:, None]

    def scaled(v: np.ndarray) -> np.ndarray:
        return scale * np.asarray(gram(scale * v), dtype=np.float64)

    # CholeskyQR2, not Householder: several times faster on these tall p_l x (rank + 8)
    # blocks (four per language and λ)
    q = orthonormal_columns(np.random.default_rng(seed).standard_normal((p, cols)))
    for _ in range(steps):
        q = orthonormal_columns(scaled(q))
    h = q.T @ scaled(q)
    values, vectors = np.linalg.eigh(0.5 * (h + h.T))
    top = np.argsort(values)[::-1][:rank]
    return SpectralJacobi(jacobi, q @ vectors[:, top], values[top], dtype=dtype)
