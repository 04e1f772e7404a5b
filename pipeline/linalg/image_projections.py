r"""Validation scores of the eigensolver's iterates without forming Φ*ᵀ.

With ``train.stop_rule: validation`` every eigensolver iteration is scored on the validation
documents. Its map is ``Φ*ᵀ = I S``: the kept images I (p x m, a list of column blocks,
:class:`~pipeline.linalg.block_lanczos.LanczosState`) times the Ritz coefficients S (m x r).
The score needs only

* the validation rows embedded by it, ``X_val,l Φ*ᵀ_l = (X_val,l I_l) S``, and
* Eq. 15's r x r map, from the Gram ``Φ*Φ*ᵀ = Sᵀ (IᵀI) S``,

and both come from per-block quantities: ``X_val,l B_l`` (validation rows x b) and the
Gram entries ``B_iᵀB_j``, computed once per block and reused while the block stays in the
eigensolver's list. A thick restart replaces the list (its blocks are recomputed then).

Why: forming Φ*ᵀ (2 p m r flops) and its Gram (2 p r²) every iteration, and float64 copies
of the p_l x r maps to embed with, grow with p r; the new block's Gram column costs 2 p m b
flops (b << r) and the projections a few validation rows x m numbers.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import scipy.sparse as sp

from pipeline.linalg.dense import tall_t_matmul

__all__ = ["ImageProjections", "map_from_gram"]


def map_from_gram(gram: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Eq. 15's map from ``Φ*Φ*ᵀ`` (r x r): ``(T = Q Λ^{-1/2}, Λ descending, Q)``; columns
    for Λ <= 0 are zero."""
    lam, q = np.linalg.eigh(0.5 * (gram + gram.T))
    lam, q = lam[::-1], q[:, ::-1]
    safe = np.where(lam > 0, lam, np.inf)
    return q / np.sqrt(safe), lam, q


class ImageProjections:
    """The validation rows' products with the kept images, and the images' Gram, block by
    block (module docstring).

    Parameters
    ----------
    rows : mapping of str to sparse matrix of shape (n_l, p_l)
        The validation rows of each language.
    split : callable
        Splits a (p, b) block into per-language row blocks (``TermLayout.split``).
    """

    def __init__(
        self,
        rows: Mapping[str, sp.spmatrix],
        split: Callable[[np.ndarray], Mapping[str, np.ndarray]],
    ) -> None:
        self.rows = {lang: sp.csr_matrix(x, dtype=np.float64) for lang, x in rows.items()}
        self.split = split
        # weak references: a restart's old blocks must not outlive it here
        self._refs: list[weakref.ref] = []
        self._widths: list[int] = []
        self._proj: list[dict[str, np.ndarray]] = []
        self._gram = np.zeros((0, 0))

    def update(self, blocks: Sequence[np.ndarray]) -> None:
        """Follow the eigensolver's image blocks: keep what was computed for the blocks it
        still holds (the same arrays, in order), compute the new ones."""
        keep = 0
        while keep < min(len(blocks), len(self._refs)) and self._refs[keep]() is blocks[keep]:
            keep += 1
        m = sum(self._widths[:keep])
        del self._refs[keep:], self._widths[keep:], self._proj[keep:]
        gram = self._gram[:m, :m]
        for blk in blocks[keep:]:
            n = blk.shape[1]
            col = np.empty((m + n, n))
            lo = 0
            for ref, width in zip(self._refs, self._widths, strict=True):
                col[lo : lo + width] = tall_t_matmul(ref(), blk, dtype=np.float64)
                lo += width
            col[m:] = tall_t_matmul(blk, blk, dtype=np.float64)
            grown = np.empty((m + n, m + n))
            grown[:m, :m] = gram
            grown[:, m:] = col
            grown[m:, :m] = col[:m].T
            gram, m = grown, m + n
            self._refs.append(weakref.ref(blk))
            self._widths.append(n)
            parts = self.split(blk)
            self._proj.append(
                {
                    lang: np.asarray(x @ np.asarray(parts[lang], dtype=np.float64))
                    for lang, x in self.rows.items()
                }
            )
        self._gram = gram

    @property
    def n_columns(self) -> int:
        """Columns of the images followed."""
        return int(sum(self._widths))

    def gram(self, coef: np.ndarray) -> np.ndarray:
        """``Φ*Φ*ᵀ = Sᵀ (IᵀI) S`` (r x r) for ``coef = S`` (m x r)."""
        return coef.T @ self._gram @ coef

    def embeddings(self, coef: np.ndarray, transform: np.ndarray) -> dict[str, np.ndarray]:
        """The validation rows embedded by ``Φ*ᵀ T = I S T``: per language (n_l, r)."""
        return {
            lang: np.hstack([p[lang] for p in self._proj]) @ (coef @ transform)
            for lang in self.rows
        }
