r"""The untranslated baseline: TF-IDF cosine over a shared vocabulary.

Two documents in different languages are compared by the cosine of their TF-IDF vectors,
where a term is "the same" across languages iff its string is identical (names, numbers,
loan words, cognates spelled alike). This is not a map into r dimensions but a map into the
**union vocabulary** U (all distinct term strings over the languages, |U| ≤ Σ p_l):

.. math::  \phi_l \in \{0,1\}^{p_l \times |U|}, \qquad (\phi_l)_{i j} = 1
           \iff \text{term}_l(i) = U_j,

a one-hot selection (each row has exactly one 1; distinct rows of one language hit distinct
columns), so ``x_l φ_l`` is x_l re-indexed into U: it keeps the L2 norm, and the dot product of
two L2-normalised TF-IDF rows mapped this way is their cosine over the shared strings. Each
language keeps its own IDF (the model's per-language vocabulary), as in the rest of the
pipeline.

The maps are returned as scipy sparse CSR (float32): a dense φ_l would be p_l × |U| (e.g.
2·10⁵ × 8·10⁵). Storage in the model format: a ``phi_format`` key in ``model.json``
(``"dense"`` | ``"selection"``); for ``"selection"``, ``languages/<lang>/phi_index.npy`` holds the
int64 column of each row (``phi_l.indices``, shape (p_l,)), ``r`` is |U|, and the union
vocabulary is ``union_vocabulary.parquet`` (``term``, ``term_index``) at the model root.
Embedding stays sparse: ``x @ phi_l`` is a column re-indexing of the CSR row.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence

import numpy as np
import scipy.sparse as sp

from pipeline.baselines.common import BaselineResult
from pipeline.linalg.backend import CorpusBackend

__all__ = ["fit_untranslated", "selection_maps", "union_vocabulary"]

logger = logging.getLogger(__name__)


def union_vocabulary(
    terms: Mapping[str, Sequence[str]],
) -> tuple[list[str], dict[str, np.ndarray]]:
    """Union term index of per-language vocabularies.

    Parameters
    ----------
    terms : mapping of str to sequence of str
        ``{lang: terms in term_index order}``; the mapping's order is the language order.

    Returns
    -------
    union : list of str
        Distinct terms, in order of first appearance (language order, then term_index), so
        the result is deterministic.
    index : dict of str to ndarray of shape (p_l,), int64
        ``index[l][i]`` = position in ``union`` of term i of language l.

    Raises
    ------
    ValueError
        If a language repeats a term (a vocabulary must be a set).
    """
    position: dict[str, int] = {}
    union: list[str] = []
    index: dict[str, np.ndarray] = {}
    for lang, words in terms.items():
        words = [str(w) for w in words]
        if len(set(words)) != len(words):
            seen: set[str] = set()
            dup = next(w for w in words if w in seen or seen.add(w))
            raise ValueError(f"untranslated: the vocabulary of {lang!r} repeats term {dup!r}")
        idx = np.empty(len(words), dtype=np.int64)
        for i, w in enumerate(words):
            j = position.get(w)
            if j is None:
                j = position[w] = len(union)
                union.append(w)
            idx[i] = j
        index[lang] = idx
    return union, index


def selection_maps(index: Mapping[str, np.ndarray], n_union: int) -> dict[str, sp.csr_matrix]:
    """One-hot maps ``φ_l`` (CSR, float32, shape (p_l, n_union)) from :func:`union_vocabulary`."""
    out = {}
    for lang, idx in index.items():
        p = idx.shape[0]
        out[lang] = sp.csr_matrix(
            (np.ones(p, dtype=np.float32), idx.astype(np.int64), np.arange(p + 1)),
            shape=(p, n_union),
        )
    return out


def fit_untranslated(
    backend: CorpusBackend | None,
    *,
    terms: Mapping[str, Sequence[str]],
    seed: int = 0,
) -> BaselineResult:
    """The untranslated TF-IDF cosine baseline as a model (module docstring).

    Parameters
    ----------
    backend : CorpusBackend or None
        Only used to check that ``terms`` matches the data (languages and p_l); X is not
        read. None skips the check.
    terms : mapping of str to sequence of str
        Per-language vocabularies in term_index order (the model's ``vocabulary`` dataset).
    seed : int, default 0
        Unused (the baseline is deterministic); accepted for a uniform signature.

    Returns
    -------
    BaselineResult
        ``components[l]``: scipy.sparse.csr_matrix of shape (p_l, |U|), float32;
        ``eigenvalues``: empty; ``history["union_terms"]``: the union vocabulary (list of
        str, the column order); ``mean``: None.
    """
    del seed
    t0 = time.perf_counter()
    if backend is not None:
        if tuple(terms) != tuple(backend.languages):
            raise ValueError(
                f"untranslated: terms has languages {list(terms)}, the backend "
                f"{list(backend.languages)} (same order required)"
            )
        for lang in backend.languages:
            if len(terms[lang]) != backend.n_terms(lang):
                raise ValueError(
                    f"untranslated: language {lang!r} has {len(terms[lang])} terms, the "
                    f"backend p_l={backend.n_terms(lang)}"
                )
    union, index = union_vocabulary(terms)
    maps = selection_maps(index, len(union))
    shared = int(sum(len(v) for v in terms.values()) - len(union))
    seconds = time.perf_counter() - t0
    logger.info(
        "untranslated: |U|=%d terms (%d shared occurrences) in %.2fs", len(union), shared, seconds
    )
    return BaselineResult(
        components=maps,
        eigenvalues=np.zeros(0),
        history={
            "method": "untranslated",
            "params": {},
            "n_union_terms": len(union),
            "n_terms": {lang: len(v) for lang, v in terms.items()},
            "n_shared_term_occurrences": shared,
            "union_terms": union,
            "timings": {"total": round(seconds, 4)},
        },
        mean=None,
    )
