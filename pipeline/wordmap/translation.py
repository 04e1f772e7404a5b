"""Word translation evaluation: P@k of a lexicon's query words against a target vocabulary.

For each test source word ``s`` with gold translations ``T(s)``, the candidates are the first
``max_candidates`` words of the target vocabulary (vocabularies are frequency-ordered), and
``s`` is correct at ``k`` when **any** of its translations ranks within ``k`` (the MUSE/RCSLS
protocol). Ranks are the exact pessimistic ranks of :mod:`pipeline.retrieval` (a tie counts
against the query), computed once per (query word, translation) pair; a word's rank is the best
of its translations' ranks.

CSLS (Conneau et al. 2018) takes ``r_S`` over the **source vocabulary** (the first
``max_candidates`` source words, ``source="collection"``), as in MUSE and RCSLS, not over the
query words. Queries whose translations are all outside the candidates are not scored; their
number is reported (``n_unreachable``).

Word vectors come from any model: rows of Φ_lᵀ for Cr5 (:meth:`Cr5Model.word_vectors`),
mapped word2vec vectors for Procrustes/RCSLS (:mod:`pipeline.wordmap.mapping`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pipeline.errors import InputDataError
from pipeline.retrieval import DEFAULT_BLOCK_C, DEFAULT_BLOCK_Q, DEFAULT_CSLS_K, retrieve
from pipeline.wordmap.lexicon import Lexicon

__all__ = ["WordTranslationResult", "translate_words", "word_translation"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class WordTranslationResult:
    """Word translation scores of one direction and similarity.

    Attributes
    ----------
    similarity : str
        ``"cosine"`` or ``"csls"``.
    precision : dict of int to float
        P@k for each requested ``k``: fraction of scored query words with a translation in
        their top ``k``.
    ranks : ndarray of shape (n_queries,), float64
        Best (pessimistic) rank of each scored query word's translations (1 = best).
    query_words : list of str
        The scored query words, in the order of ``ranks``.
    n_candidates : int
        Target words ranked.
    n_unreachable : int
        Lexicon source words in the source vocabulary whose translations are all outside the
        candidates (not scored).
    n_oov : int
        Lexicon source words missing from the source vocabulary (not scored).
    """

    similarity: str
    precision: dict[int, float]
    ranks: np.ndarray
    query_words: list[str]
    n_candidates: int
    n_unreachable: int
    n_oov: int

    @property
    def n_queries(self) -> int:
        return int(self.ranks.shape[0])

    @property
    def mrr(self) -> float:
        return float(np.mean(1.0 / self.ranks)) if self.ranks.size else float("nan")


def _index(words: Sequence[str], vectors: np.ndarray, what: str) -> dict[str, int]:
    if vectors.ndim != 2 or vectors.shape[0] != len(words):
        raise InputDataError(
            f"{what}: {len(words)} words but vectors of shape {vectors.shape}; pass one row "
            "per word"
        )
    index: dict[str, int] = {}
    for i, w in enumerate(words):
        index.setdefault(w, i)
    return index


def word_translation(
    lexicon: Lexicon,
    source_words: Sequence[str],
    source_vectors: np.ndarray,
    target_words: Sequence[str],
    target_vectors: np.ndarray,
    *,
    similarity: str = "csls",
    precision_at: Sequence[int] = (1, 5, 10),
    max_candidates: int = 200_000,
    csls_k: int = DEFAULT_CSLS_K,
    block_q: int = DEFAULT_BLOCK_Q,
    block_c: int = DEFAULT_BLOCK_C,
) -> WordTranslationResult:
    """Evaluate word translation of ``lexicon``'s words (see module docstring).

    Parameters
    ----------
    lexicon : Lexicon
        The test pairs (source word, target word).
    source_words : sequence of str, length n_s
        Source vocabulary, most frequent first; ``source_vectors`` has one row per word.
    source_vectors : ndarray of shape (n_s, d)
        In the shared space (already mapped for Procrustes/RCSLS).
    target_words : sequence of str, length n_t
    target_vectors : ndarray of shape (n_t, d)
    similarity : {"cosine", "csls"}
    precision_at : sequence of int
    max_candidates : int
        Candidates are the first ``max_candidates`` target words; the CSLS source set is the
        first ``max_candidates`` source words.
    csls_k, block_q, block_c
        As in :func:`pipeline.retrieval.csls_retrieval`.

    Returns
    -------
    WordTranslationResult
    """
    src = np.asarray(source_vectors, dtype=np.float32)
    tgt = np.asarray(target_vectors, dtype=np.float32)
    s_index = _index(source_words, src, "source vocabulary")
    _index(target_words, tgt, "target vocabulary")
    n_c = min(int(max_candidates), len(target_words))
    t_index: dict[str, int] = {}
    for i, w in enumerate(target_words[:n_c]):
        t_index.setdefault(w, i)
    translations = lexicon.translations()
    q_words: list[str] = []
    rows: list[int] = []
    targets: list[int] = []
    owner: list[int] = []
    n_oov = n_unreachable = 0
    for word in sorted(translations):
        if word not in s_index:
            n_oov += 1
            continue
        hits = sorted({t_index[t] for t in translations[word] if t in t_index})
        if not hits:
            n_unreachable += 1
            continue
        for h in hits:
            rows.append(s_index[word])
            targets.append(h)
            owner.append(len(q_words))
        q_words.append(word)
    if not q_words:
        raise InputDataError(
            f"no lexicon word is scorable: {n_oov} source words are out of the source "
            f"vocabulary and {n_unreachable} have no translation among the {n_c} candidates; "
            "check that the lexicon's languages and tokenisation match the vectors'"
        )
    kwargs: dict[str, object] = {"k": 1, "block_q": block_q, "block_c": block_c}
    if similarity == "csls":
        kwargs.update(csls_k=csls_k, source="collection", source_embeddings=src[:n_c])
    result = retrieve(
        similarity, src[np.asarray(rows)], tgt[:n_c], np.asarray(targets, np.int64), **kwargs
    )
    best = np.full(len(q_words), np.inf)
    np.minimum.at(best, np.asarray(owner), result.ranks)
    precision = {int(k): float(np.mean(best <= k)) for k in precision_at}
    logger.info(
        "word translation (%s): %d queries (%d pairs), %d candidates, P@1=%.3f; "
        "%d out of vocabulary, %d unreachable",
        similarity,
        len(q_words),
        len(rows),
        n_c,
        precision.get(1, float("nan")),
        n_oov,
        n_unreachable,
    )
    return WordTranslationResult(
        similarity=str(similarity),
        precision=precision,
        ranks=best,
        query_words=q_words,
        n_candidates=n_c,
        n_unreachable=n_unreachable,
        n_oov=n_oov,
    )


def translate_words(
    words: Sequence[str],
    source_words: Sequence[str],
    source_vectors: np.ndarray,
    target_words: Sequence[str],
    target_vectors: np.ndarray,
    *,
    k: int = 5,
    similarity: str = "csls",
    max_candidates: int = 200_000,
    csls_k: int = DEFAULT_CSLS_K,
) -> dict[str, list[tuple[str, float]]]:
    """The ``k`` best translations (word, score) of each known word in ``words``.

    Unknown words are left out of the result.
    """
    src = np.asarray(source_vectors, dtype=np.float32)
    tgt = np.asarray(target_vectors, dtype=np.float32)
    s_index = _index(source_words, src, "source vocabulary")
    _index(target_words, tgt, "target vocabulary")
    known = [w for w in words if w in s_index]
    if not known:
        return {}
    n_c = min(int(max_candidates), len(target_words))
    kwargs: dict[str, object] = {"k": k}
    if similarity == "csls":
        kwargs.update(csls_k=csls_k, source="collection", source_embeddings=src[:n_c])
    res = retrieve(
        similarity,
        src[[s_index[w] for w in known]],
        tgt[:n_c],
        np.full(len(known), -1, np.int64),
        **kwargs,
    )
    return {
        w: [(target_words[j], float(s)) for j, s in zip(res.indices[i], res.scores[i], strict=True)]
        for i, w in enumerate(known)
    }
