"""In-process corpus backend on scipy CSR matrices (the embedded default; tests).

Dtype choice: X is stored once in the pass dtype (``float32`` by default: TF-IDF values come
as float32, so the ``float64`` option stores an exact upcast and rounds only in the products).
In ``float32`` mode the sparse kernels accumulate in float32: each output entry is a sum of at
most ``nnz(row)`` (for ``X V``) or ``n_l`` (for ``X^T Z``) terms, giving relative errors of
order ``1e-6 * sqrt(terms)``, far below the paper's CG tolerance of 1e-2. Column sums (for
μ, whose error the Woodbury constant amplifies) are always accumulated in float64.

Transposed products ``X_l^T Z``: option ``transpose``. ``"implicit"`` (default) uses
``X.T @ Z`` (scipy's CSC kernel on the same arrays, no extra memory); ``"csr"`` keeps a CSR
copy of ``X_l^T``. A CSR copy helps only single vectors; on blocks of columns, which every
pass here carries, the implicit kernel is the faster one (bench/README.md, "Transposed
products").
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import scipy.sparse as sp

from pipeline.linalg.backend import CorpusBackend
from pipeline.linalg.sparse_products import gram, summed_rows, transposed

__all__ = ["LocalCorpusBackend"]


class LocalCorpusBackend(CorpusBackend):
    """Scipy CSR implementation of :class:`~pipeline.linalg.backend.CorpusBackend`.

    Parameters
    ----------
    data : mapping of str to (sparse matrix, ndarray)
        ``{lang: (X_l, concept_index_l)}`` with ``X_l`` of shape (n_l, p_l) and
        ``concept_index_l`` of shape (n_l,), integer values in ``[0, n_concepts)``.
        Iteration order of the mapping defines the language order.
    n_concepts : int
        K.
    dtype : {"float32", "float64"}
        Arithmetic of the passes (see module docstring).
    transpose : {"implicit", "csr"}
        How ``X_l^T Z`` is computed (see module docstring).
    """

    def __init__(
        self,
        data: Mapping[str, tuple[sp.spmatrix | sp.sparray, np.ndarray]],
        n_concepts: int,
        *,
        dtype: str = "float32",
        transpose: str = "implicit",
    ) -> None:
        super().__init__(dtype=dtype)
        if transpose not in ("implicit", "csr"):
            raise ValueError(f"transpose must be one of ('implicit', 'csr'); got {transpose!r}")
        self.transpose = transpose
        if not data:
            raise ValueError("data must hold at least one language")
        k = int(n_concepts)
        if k < 1:
            raise ValueError(f"n_concepts must be >= 1; got {n_concepts}")
        self._k = k
        self._langs = tuple(str(lang) for lang in data)
        self._x: dict[str, sp.csr_matrix] = {}
        self._xt: dict[str, sp.spmatrix] = {}
        self._yt: dict[str, sp.csr_matrix] = {}
        self._concepts: dict[str, np.ndarray] = {}
        for lang, (x, concepts) in data.items():
            x = sp.csr_matrix(x, dtype=self.dtype)
            x.sum_duplicates()
            concepts = np.asarray(concepts)
            if concepts.ndim != 1 or concepts.shape[0] != x.shape[0]:
                raise ValueError(
                    f"language {lang!r}: concept_index must have shape ({x.shape[0]},); "
                    f"got {concepts.shape}"
                )
            if not np.issubdtype(concepts.dtype, np.integer):
                raise ValueError(f"language {lang!r}: concept_index must be integers")
            if concepts.size and (concepts.min() < 0 or concepts.max() >= k):
                raise ValueError(f"language {lang!r}: concept_index values must lie in [0, {k})")
            if not np.all(np.isfinite(x.data)):
                raise ValueError(f"language {lang!r}: X contains NaN or Inf")
            concepts = concepts.astype(np.int64)
            n = x.shape[0]
            self._x[lang] = x
            self._xt[lang] = x.T.tocsr() if transpose == "csr" else x.T
            self._yt[lang] = sp.csr_matrix(
                (np.ones(n, dtype=self.dtype), (concepts, np.arange(n))), shape=(k, n)
            )
            self._concepts[lang] = concepts

    @property
    def languages(self) -> tuple[str, ...]:
        return self._langs

    @property
    def n_concepts(self) -> int:
        return self._k

    def n_docs(self, lang: str) -> int:
        return self._x[lang].shape[0]

    def n_terms(self, lang: str) -> int:
        return self._x[lang].shape[1]

    def concept_index(self, lang: str) -> np.ndarray:
        """The labels of ``lang``'s documents: int64 ndarray of shape (n_l,)."""
        return self._concepts[lang]

    def matrix(self, lang: str) -> sp.csr_matrix:
        """``X_l`` as stored (CSR, shape (n_l, p_l)); for tests and dense references."""
        return self._x[lang]

    def _column_sums(self, lang: str) -> np.ndarray:
        x = self._x[lang]
        return np.bincount(x.indices, weights=x.data.astype(np.float64), minlength=x.shape[1])

    def _column_sq_sums(self, lang: str) -> np.ndarray:
        x = self._x[lang]
        return np.bincount(x.indices, weights=x.data.astype(np.float64) ** 2, minlength=x.shape[1])

    def _concept_counts(self, lang: str) -> np.ndarray:
        return np.bincount(self._concepts[lang], minlength=self._k).astype(np.float64)

    def _gram(self, lang: str, v: np.ndarray) -> np.ndarray:
        v = np.ascontiguousarray(v, dtype=self.dtype)
        return gram(self._x[lang], v, self._xt[lang])

    def _xt_gather(self, lang: str, p: np.ndarray) -> np.ndarray:
        rows = np.asarray(p, dtype=self.dtype)[self._concepts[lang]]
        return transposed(self._x[lang], rows, self._xt[lang])

    def _x_scatter(self, lang: str, v: np.ndarray) -> np.ndarray:
        v = np.ascontiguousarray(v, dtype=self.dtype)
        return summed_rows(self._yt[lang], self._x[lang], v)
