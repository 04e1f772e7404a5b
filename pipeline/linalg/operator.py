"""A block-first linear-operator contract.

Modelled on :class:`scipy.sparse.linalg.LinearOperator`, but the primary method is the
**block** product: every pass over the data carries a whole block of vectors, so a subclass
implements :meth:`BlockOperator._matmat` (and :meth:`BlockOperator._rmatmat` if it has an
adjoint). The public :meth:`BlockOperator.matmat` checks shapes and finiteness once and calls
the hook; :meth:`BlockOperator.matvec` is a one-column block. Products and adjoints compose
lazily (``C.H @ Ainv @ C``) without forming any matrix.

Solvers in this package (:mod:`~pipeline.linalg.block_cg`, :mod:`~pipeline.linalg.block_lanczos`,
:mod:`~pipeline.linalg.woodbury`) accept any :class:`BlockOperator` and never import Spark.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = [
    "BlockOperator",
    "CallableOperator",
    "DenseOperator",
    "ProductOperator",
    "as_block",
]


def as_block(v: np.ndarray, n_rows: int, *, name: str = "V") -> np.ndarray:
    """Validate a block of column vectors.

    Parameters
    ----------
    v : ndarray of shape (n_rows, b)
        The block; a 1-D array is *not* accepted here (use ``matvec``).
    n_rows : int
        Required number of rows.
    name : str
        Name used in error messages.

    Returns
    -------
    ndarray of shape (n_rows, b)
        ``v`` itself (no copy).

    Raises
    ------
    ValueError
        If ``v`` is not 2-D, has the wrong number of rows, or holds NaN/Inf.
    """
    v = np.asarray(v)
    if v.ndim != 2:
        raise ValueError(f"{name} must be a 2-D block of shape ({n_rows}, b); got ndim={v.ndim}")
    if v.shape[0] != n_rows:
        raise ValueError(f"{name} must have {n_rows} rows; got shape {v.shape}")
    if not np.issubdtype(v.dtype, np.floating):
        raise ValueError(f"{name} must be a floating-point array; got dtype {v.dtype}")
    if not np.all(np.isfinite(v)):
        raise ValueError(f"{name} contains NaN or Inf")
    return v


class BlockOperator:
    """A linear map ``R^n -> R^m`` applied to blocks of vectors.

    Subclasses set :attr:`shape` and :attr:`dtype` (via ``super().__init__``) and implement
    :meth:`_matmat`; :meth:`_rmatmat` is optional (needed for :attr:`H`).

    Parameters
    ----------
    shape : tuple of int
        ``(m, n)``.
    dtype : numpy dtype
        Dtype of the results of :meth:`matmat`.
    """

    def __init__(self, shape: tuple[int, int], dtype: np.dtype | type = np.float64) -> None:
        m, n = (int(s) for s in shape)
        if m < 0 or n < 0:
            raise ValueError(f"shape must be non-negative; got {shape}")
        self.shape = (m, n)
        self.dtype = np.dtype(dtype)

    # --- public, checked -------------------------------------------------------------------
    def matmat(self, v: np.ndarray) -> np.ndarray:
        """Return ``A @ V`` for V of shape (n, b); result has shape (m, b)."""
        v = as_block(v, self.shape[1])
        out = self._matmat(v)
        if out.shape != (self.shape[0], v.shape[1]):
            raise RuntimeError(
                f"{type(self).__name__}._matmat returned shape {out.shape}; "
                f"expected {(self.shape[0], v.shape[1])}"
            )
        return out

    def rmatmat(self, u: np.ndarray) -> np.ndarray:
        """Return ``A^T @ U`` for U of shape (m, b); result has shape (n, b)."""
        u = as_block(u, self.shape[0], name="U")
        out = self._rmatmat(u)
        if out.shape != (self.shape[1], u.shape[1]):
            raise RuntimeError(
                f"{type(self).__name__}._rmatmat returned shape {out.shape}; "
                f"expected {(self.shape[1], u.shape[1])}"
            )
        return out

    def matvec(self, v: np.ndarray) -> np.ndarray:
        """Return ``A @ v`` for v of shape (n,) (a one-column block)."""
        v = np.asarray(v)
        if v.ndim != 1:
            raise ValueError(
                f"matvec expects a 1-D vector of length {self.shape[1]}; got shape {v.shape}"
            )
        return self.matmat(v[:, None])[:, 0]

    def __matmul__(self, other: object) -> BlockOperator | np.ndarray:
        if isinstance(other, BlockOperator):
            return ProductOperator(self, other)
        other = np.asarray(other)
        return self.matvec(other) if other.ndim == 1 else self.matmat(other)

    @property
    def H(self) -> BlockOperator:
        """The adjoint (transpose, for real operators), applied lazily."""
        return _AdjointOperator(self)

    T = H

    # --- hooks -------------------------------------------------------------------------------
    def _matmat(self, v: np.ndarray) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} does not implement _matmat")

    def _rmatmat(self, u: np.ndarray) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} has no adjoint (_rmatmat)")

    def __repr__(self) -> str:
        return f"<{self.shape[0]}x{self.shape[1]} {type(self).__name__} dtype={self.dtype}>"


class _AdjointOperator(BlockOperator):
    def __init__(self, op: BlockOperator) -> None:
        super().__init__((op.shape[1], op.shape[0]), op.dtype)
        self.op = op

    def _matmat(self, v: np.ndarray) -> np.ndarray:
        return self.op._rmatmat(v)

    def _rmatmat(self, u: np.ndarray) -> np.ndarray:
        return self.op._matmat(u)


class ProductOperator(BlockOperator):
    """``A @ B`` applied as ``A.matmat(B.matmat(V))`` (never formed)."""

    def __init__(self, a: BlockOperator, b: BlockOperator) -> None:
        if a.shape[1] != b.shape[0]:
            raise ValueError(f"cannot compose operators of shapes {a.shape} and {b.shape}")
        super().__init__((a.shape[0], b.shape[1]), np.result_type(a.dtype, b.dtype))
        self.a, self.b = a, b

    def _matmat(self, v: np.ndarray) -> np.ndarray:
        return self.a.matmat(self.b.matmat(v))

    def _rmatmat(self, u: np.ndarray) -> np.ndarray:
        return self.b.rmatmat(self.a.rmatmat(u))


class DenseOperator(BlockOperator):
    """A dense (or scipy sparse) matrix seen as an operator; for tests and small problems."""

    def __init__(self, matrix: np.ndarray) -> None:
        super().__init__(matrix.shape, matrix.dtype)
        self.matrix = matrix
        self.n_column_passes = 0

    def _matmat(self, v: np.ndarray) -> np.ndarray:
        self.n_column_passes += v.shape[1]
        return np.asarray(self.matrix @ v)

    def _rmatmat(self, u: np.ndarray) -> np.ndarray:
        self.n_column_passes += u.shape[1]
        return np.asarray(self.matrix.T @ u)


class CallableOperator(BlockOperator):
    """An operator from a block function ``f(V) -> A @ V`` (and optionally its adjoint)."""

    def __init__(
        self,
        shape: tuple[int, int],
        matmat: Callable[[np.ndarray], np.ndarray],
        rmatmat: Callable[[np.ndarray], np.ndarray] | None = None,
        dtype: np.dtype | type = np.float64,
    ) -> None:
        super().__init__(shape, dtype)
        self._f = matmat
        self._rf = rmatmat

    def _matmat(self, v: np.ndarray) -> np.ndarray:
        return self._f(v)

    def _rmatmat(self, u: np.ndarray) -> np.ndarray:
        if self._rf is None:
            return super()._rmatmat(u)
        return self._rf(u)
