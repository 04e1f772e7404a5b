"""Families of small synthetic Cr5 problems, for the linalg tests and backend contract tests.

Each problem is a multilingual corpus: per language a sparse TF-IDF matrix (rows L2-normalised,
Zipf-distributed term usage, so columns range from dense to nearly empty) and a concept label
per document. Sizes are uneven across languages; one family has a tiny language.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

__all__ = ["PROBLEMS", "Problem", "dense_centred", "make_corpus", "planted_corpus"]


@dataclass(frozen=True)
class Problem:
    """A named synthetic corpus specification.

    Attributes
    ----------
    name : str
    sizes : dict of str to (int, int)
        ``{lang: (n_docs, n_terms)}``.
    n_concepts : int
    zipf : float
        Exponent of the term-usage distribution.
    words_per_doc : int
    seed : int
    """

    name: str
    sizes: dict[str, tuple[int, int]]
    n_concepts: int
    zipf: float = 1.1
    words_per_doc: int = 12
    seed: int = 0

    def corpus(self) -> dict[str, tuple[sp.csr_matrix, np.ndarray]]:
        """``{lang: (X_l float32 CSR (n_l, p_l), concept_index_l int64 (n_l,))}``."""
        return make_corpus(
            self.sizes,
            self.n_concepts,
            zipf=self.zipf,
            words_per_doc=self.words_per_doc,
            seed=self.seed,
        )


def make_corpus(
    sizes: dict[str, tuple[int, int]],
    n_concepts: int,
    *,
    zipf: float = 1.1,
    words_per_doc: int = 12,
    seed: int = 0,
) -> dict[str, tuple[sp.csr_matrix, np.ndarray]]:
    """Random TF-IDF corpus; see :class:`Problem`. Deterministic in ``seed``."""
    rng = np.random.default_rng(seed)
    out = {}
    for lang, (n, p) in sizes.items():
        prob = 1.0 / np.arange(1, p + 1) ** zipf
        prob = rng.permutation(prob / prob.sum())
        rows, cols, vals = [], [], []
        for i in range(n):
            m = int(min(p, max(1, rng.poisson(words_per_doc))))
            terms = rng.choice(p, size=m, replace=False, p=prob)
            counts = rng.geometric(0.5, size=m).astype(np.float64)
            rows.append(np.full(m, i))
            cols.append(terms)
            vals.append(counts)
        x = sp.csr_matrix(
            (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(n, p)
        )
        df = np.bincount(x.indices, minlength=p)
        idf = np.log((1 + n) / (1 + df)) + 1.0
        x = x @ sp.diags(idf)
        norms = np.sqrt(np.asarray(x.multiply(x).sum(axis=1)).ravel())
        x = sp.diags(1.0 / np.where(norms > 0, norms, 1.0)) @ x
        concepts = rng.integers(0, n_concepts, size=n)
        out[lang] = (sp.csr_matrix(x, dtype=np.float32), concepts.astype(np.int64))
    return out


def dense_centred(
    corpus: dict[str, tuple[sp.csr_matrix, np.ndarray]], n_concepts: int
) -> tuple[np.ndarray, np.ndarray]:
    """Explicitly centred dense X̂ (n × p) and Ŷ (n × K), float64 — the dense reference."""
    blocks = [x.astype(np.float64).toarray() for x, _ in corpus.values()]
    n = sum(b.shape[0] for b in blocks)
    p = sum(b.shape[1] for b in blocks)
    x = np.zeros((n, p))
    y = np.zeros((n, n_concepts))
    r = c = 0
    for blk, (_, concepts) in zip(blocks, corpus.values(), strict=True):
        x[r : r + blk.shape[0], c : c + blk.shape[1]] = blk
        y[np.arange(r, r + blk.shape[0]), concepts] = 1.0
        r += blk.shape[0]
        c += blk.shape[1]
    return x - x.mean(axis=0), y - y.mean(axis=0)


#: The registry every solver is tested against.
PROBLEMS: dict[str, Problem] = {
    p.name: p
    for p in [
        Problem("three_uneven", {"en": (160, 90), "de": (70, 55), "fr": (35, 40)}, 40, seed=1),
        Problem("tiny_language", {"en": (120, 70), "xx": (5, 8)}, 30, seed=2),
        Problem("single_language", {"en": (90, 60)}, 25, seed=3),
        Problem(
            "steep_zipf",
            {"en": (150, 120), "de": (100, 80)},
            35,
            zipf=1.6,
            words_per_doc=8,
            seed=4,
        ),
    ]
}


def planted_corpus(
    langs: tuple[str, ...] = ("en", "de", "fr"),
    *,
    n_concepts: int = 160,
    n_heldout: int = 40,
    n_meanings: int = 60,
    meanings_per_concept: int = 4,
    noise_words: int = 3,
    seed: int = 0,
) -> tuple[dict[str, tuple[sp.csr_matrix, np.ndarray]], dict[str, sp.csr_matrix], int]:
    """A corpus with planted crosslingual structure, and documents of held-out concepts.

    Every concept has a few "meanings" out of ``n_meanings``; its document in language l uses
    l's word for each meaning (a language-specific permutation of the word ids) plus
    ``noise_words`` random words. The first ``n_concepts - n_heldout`` concepts train (one
    document per language each); the last ``n_heldout`` are held out: ``heldout[l]`` has
    their documents in concept order. Retrieval of a held-out concept works only through
    words the training concepts taught, so P@1 rises above chance as the solver learns.

    Returns ``(corpus, heldout, K)`` with ``K = n_concepts - n_heldout`` training concepts.
    """
    rng = np.random.default_rng(seed)
    p = n_meanings + 20  # 20 words that are pure noise
    profiles = np.stack(
        [rng.choice(n_meanings, meanings_per_concept, replace=False) for _ in range(n_concepts)]
    )
    k_train = n_concepts - n_heldout
    corpus, heldout = {}, {}
    for lang in langs:
        word_of = rng.permutation(p)
        rows, cols = [], []
        for c in range(n_concepts):
            words = np.unique(
                np.concatenate([word_of[profiles[c]], rng.integers(0, p, noise_words)])
            )
            rows.append(np.full(words.size, c))
            cols.append(words)
        x = sp.csr_matrix(
            (np.ones(sum(c.size for c in cols)), (np.concatenate(rows), np.concatenate(cols))),
            shape=(n_concepts, p),
        )
        norms = np.sqrt(np.asarray(x.multiply(x).sum(axis=1)).ravel())
        x = sp.csr_matrix(sp.diags(1.0 / norms) @ x, dtype=np.float32)
        corpus[lang] = (x[:k_train], np.arange(k_train, dtype=np.int64))
        heldout[lang] = x[k_train:]
    return corpus, heldout, k_train
