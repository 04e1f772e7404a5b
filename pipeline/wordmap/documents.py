"""Document baseline from mapped word vectors: the TF-IDF-weighted average of a document's
mapped word vectors, stored as a model in Cr5's format.

A document's TF-IDF-weighted average ``Σ_w x_w v_w / Σ_w x_w`` points the same way as
``x @ Φ`` where row ``w`` of ``Φ`` is the mapped vector ``v_w`` (zero for words without a
vector), and retrieval by cosine or CSLS only sees directions. So the baseline *is* a linear
model on the same TF-IDF rows as Cr5: writing it with :func:`pipeline.model.format.save_model`
lets the ``evaluate`` stage (``paths.model=<this model>``) and ``embed`` use it unchanged, on
the same splits and candidates as Cr5.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pipeline.model.format import LanguageMap

__all__ = ["averaged_word_vector_map"]


def averaged_word_vector_map(
    base: LanguageMap, words: Sequence[str], vectors: np.ndarray
) -> tuple[LanguageMap, int]:
    """``base``'s vocabulary and IDF with Φ rows = the word's vector (zero when missing).

    Parameters
    ----------
    base : LanguageMap
        A model language (its terms, IDF and df are kept).
    words : sequence of str, length n
    vectors : ndarray of shape (n, d)
        Mapped (shared-space) word vectors.

    Returns
    -------
    LanguageMap with ``phi`` of shape (p_l, d), float32, and the number of terms covered.
    """
    index = {w: i for i, w in enumerate(words)}
    terms = base.terms.to_pylist()
    rows = np.array([index.get(t, -1) for t in terms], dtype=np.int64)
    phi = np.zeros((len(terms), vectors.shape[1]), dtype=np.float32)
    hit = rows >= 0
    phi[hit] = vectors[rows[hit]]
    lm = LanguageMap(terms=base.terms, idf=base.idf, df=base.df, phi=phi)
    return lm, int(hit.sum())
