"""Seeded synthetic comparable corpus with a planted crosslingual structure (for benchmarks).

Generative model
----------------
* ``T`` latent topics, shared by all languages. Topic popularity is Zipfian.
* Each concept is a mixture of ``topics_per_concept`` topics (drawn by popularity) with
  Dirichlet weights.
* Each language ``l`` has its own vocabulary of ``p_l`` terms with a Zipfian background
  distribution, and per topic its own set of ``words_per_topic`` topic words (random term ids of
  that language, Zipf-weighted by rank). The topic words of topic ``t`` in two languages are
  unrelated ids: the only crosslingual link is the concept label, as in a comparable corpus.
* Concept coverage is uneven: concept ``k`` has a document in language ``l`` with probability
  ``coverage[l]`` (every concept has at least one document); optionally more than one.
* A document is a bag of ``~ lognormal`` tokens; each token is a background word with
  probability ``background`` and otherwise a topic word of a topic drawn from the concept's
  mixture (all in the document's language).
* Features: raw counts x IDF (``log((1 + n_l) / (1 + df)) + 1`` from the *training* documents
  of the language), rows L2-normalised, float32 CSR.
* Held out: ``n_test`` concepts covered in every language are removed from training in every
  language; their documents (one per language) form the test set.

All bulk sampling is vectorised: every token of a language is drawn in one array and the counts
are assembled by a COO -> CSR conversion (no Python loop over documents).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

__all__ = ["SyntheticCorpus", "make_synthetic_corpus"]

LANG_CODES = ("en", "de", "fr", "es", "it", "nl", "pl", "ru", "sv", "fi")


@dataclass
class SyntheticCorpus:
    """Output of :func:`make_synthetic_corpus`.

    Attributes
    ----------
    train : dict of str to (csr_matrix, ndarray)
        ``{lang: (X_l float32 CSR (n_l, p_l), concept_index_l int64 (n_l,))}`` with concept
        indices in ``[0, n_concepts)`` (training concepts, renumbered).
    n_concepts : int
        K, training concepts.
    test : dict of str to (csr_matrix, ndarray)
        Held-out documents: ``{lang: (X_test_l, test_concept_l)}``; row ``i`` of every language
        is the document of held-out concept ``test_concept_l[i]`` (same order in all languages).
    info : dict
        Sizes and generator parameters (JSON-serialisable).
    validation : dict of str to (csr_matrix, ndarray)
        A second held-out set in the layout of ``test``, disjoint from training and test
        concepts (for validation-based stopping or λ choice); empty when none was requested.
    """

    train: dict[str, tuple[sp.csr_matrix, np.ndarray]]
    n_concepts: int
    test: dict[str, tuple[sp.csr_matrix, np.ndarray]]
    info: dict = field(default_factory=dict)
    validation: dict[str, tuple[sp.csr_matrix, np.ndarray]] = field(default_factory=dict)


def _zipf_cdf(m: int, s: float) -> np.ndarray:
    w = 1.0 / np.arange(1, m + 1, dtype=np.float64) ** s
    c = np.cumsum(w)
    return c / c[-1]


def _sample_docs(
    rng: np.random.Generator,
    doc_concepts: np.ndarray,
    *,
    mix_topics: np.ndarray,
    mix_cdf: np.ndarray,
    topic_words: np.ndarray,
    topic_cdf: np.ndarray,
    background_cdf: np.ndarray,
    background_perm: np.ndarray,
    p: int,
    mean_tokens: float,
    background: float,
) -> sp.csr_matrix:
    """Raw term counts (float64 CSR, shape (len(doc_concepts), p)) of one language's docs."""
    n = doc_concepts.shape[0]
    sigma = 0.5
    lengths = rng.lognormal(np.log(mean_tokens) - sigma**2 / 2, sigma, size=n)
    lengths = np.maximum(5, np.rint(lengths)).astype(np.int64)
    doc_of_token = np.repeat(np.arange(n, dtype=np.int64), lengths)
    n_tok = doc_of_token.shape[0]
    concept_of_token = doc_concepts[doc_of_token]
    # Topic of each token: inverse CDF on its concept's mixture weights.
    u = rng.random(n_tok)
    slot = (u[:, None] > mix_cdf[concept_of_token]).sum(axis=1)
    slot = np.minimum(slot, mix_cdf.shape[1] - 1)
    topic = mix_topics[concept_of_token, slot]
    # Topic word (rank by Zipf within the topic's word list) or background word.
    rank = np.searchsorted(topic_cdf, rng.random(n_tok))
    words = topic_words[topic, rank]
    is_bg = rng.random(n_tok) < background
    n_bg = int(is_bg.sum())
    words[is_bg] = background_perm[np.searchsorted(background_cdf, rng.random(n_bg))]
    counts = sp.coo_matrix(
        (np.ones(n_tok, dtype=np.float64), (doc_of_token, words)), shape=(n, p)
    ).tocsr()
    counts.sum_duplicates()
    return counts


def _tfidf(counts: sp.csr_matrix, idf: np.ndarray) -> sp.csr_matrix:
    x = counts.copy()
    x.data = x.data * idf[x.indices]
    norms = np.sqrt(np.add.reduceat(x.data**2, x.indptr[:-1])) if x.nnz else np.zeros(0)
    row_len = np.diff(x.indptr)
    norms = np.where(row_len > 0, norms, 1.0) if x.nnz else np.ones(x.shape[0])
    x.data = x.data / np.repeat(norms, row_len)
    return sp.csr_matrix(x, dtype=np.float32)


def make_synthetic_corpus(
    *,
    n_docs: int = 20_000,
    n_languages: int = 3,
    n_concepts: int | None = None,
    vocab: int = 20_000,
    n_topics: int = 200,
    topics_per_concept: int = 3,
    words_per_topic: int = 150,
    mean_tokens: float = 60.0,
    background: float = 0.5,
    zipf: float = 1.05,
    coverage: tuple[float, ...] | None = None,
    n_test: int = 1_000,
    seed: int = 0,
) -> SyntheticCorpus:
    """Generate a seeded synthetic comparable corpus; see the module docstring.

    Parameters
    ----------
    n_docs : int
        Target number of *training* documents over all languages (met approximately).
    n_languages : int
        L (3 or more for the benchmark).
    n_concepts : int, optional
        Total concepts including held-out ones. Default: ``(n_docs + n_test * L) / sum(coverage)``
        (one document per covered (concept, language) pair, as in Wikipedia). If given and
        smaller, covered pairs get ``1 + Poisson`` documents to reach ``n_docs``.
    vocab : int
        Vocabulary size of the first language; language ``l`` has ``vocab * (1 - 0.15 l)``
        terms (at least ``vocab / 3``).
    n_topics, topics_per_concept, words_per_topic : int
        Latent structure (see module docstring).
    mean_tokens : float
        Mean tokens per document (lognormal lengths).
    background : float
        Probability that a token is a background (topic-independent) word.
    zipf : float
        Exponent of the background and topic-word distributions.
    coverage : tuple of float, optional
        Per-language probability that a concept has a document. Default: decreasing from 0.95.
    n_test : int
        Held-out concepts (covered in every language).
    seed : int

    Returns
    -------
    SyntheticCorpus
    """
    if n_languages < 1:
        raise ValueError("n_languages must be >= 1")
    rng = np.random.default_rng(seed)
    langs = list(LANG_CODES[:n_languages]) + [f"l{i}" for i in range(len(LANG_CODES), n_languages)]
    if coverage is None:
        coverage = tuple(max(0.25, 0.95 - 0.25 * i) for i in range(n_languages))
    cov = np.asarray(coverage, dtype=np.float64)
    if cov.shape != (n_languages,):
        raise ValueError("coverage must have one value per language")
    sizes = [max(vocab // 3, int(vocab * (1 - 0.15 * i))) for i in range(n_languages)]
    per_pair = 1.0
    if n_concepts is None:
        # Held-out concepts are covered everywhere: they take n_languages docs each.
        k_total = int(np.ceil((n_docs + n_test * n_languages) / cov.sum()))
    else:
        k_total = int(n_concepts)
        per_pair = max(1.0, n_docs / max(1.0, (k_total - n_test) * cov.sum()))

    # --- concepts: topic mixtures, coverage, held-out set -------------------------------------
    topic_pop = 1.0 / np.arange(1, n_topics + 1) ** 0.8
    topic_pop = rng.permutation(topic_pop / topic_pop.sum())
    # Vectorised draw without replacement: Gumbel top-k on log-popularity.
    gumbel = rng.gumbel(size=(k_total, n_topics)) if k_total * n_topics <= 5e7 else None
    if gumbel is not None:
        keys = np.log(topic_pop)[None, :] + gumbel
        mix_topics = np.argpartition(-keys, topics_per_concept, axis=1)[:, :topics_per_concept]
    else:  # very many concepts: draw with replacement (duplicates merge their weights)
        mix_topics = rng.choice(n_topics, size=(k_total, topics_per_concept), p=topic_pop)
    weights = rng.dirichlet(np.ones(topics_per_concept), size=k_total)
    mix_cdf = np.cumsum(weights, axis=1)

    covered = rng.random((k_total, n_languages)) < cov[None, :]
    none = ~covered.any(axis=1)
    covered[none, 0] = True
    full = np.flatnonzero(covered.all(axis=1))
    if full.size < n_test:
        raise ValueError(f"only {full.size} concepts are covered in every language (< n_test)")
    test_concepts = np.sort(rng.choice(full, size=n_test, replace=False))
    is_test = np.zeros(k_total, dtype=bool)
    is_test[test_concepts] = True
    train_concepts = np.flatnonzero(~is_test)
    renumber = np.full(k_total, -1, dtype=np.int64)
    renumber[train_concepts] = np.arange(train_concepts.size)

    # --- per-language vocabularies and topic word lists ---------------------------------------
    topic_cdf = _zipf_cdf(words_per_topic, zipf)
    train, test = {}, {}
    info_lang = {}
    for li, lang in enumerate(langs):
        p = sizes[li]
        background_cdf = _zipf_cdf(p, zipf)
        background_perm = rng.permutation(p)
        # Topic words: uniformly random term ids of the language (Zipf-weighted by rank).
        topic_words = rng.integers(0, p, size=(n_topics, words_per_topic))
        tr = np.flatnonzero(covered[:, li] & ~is_test)
        reps = 1 + (rng.poisson(per_pair - 1.0, size=tr.size) if per_pair > 1 else 0)
        tr_docs = np.repeat(tr, reps)
        tr_docs = tr_docs[rng.permutation(tr_docs.size)]
        common = dict(
            mix_topics=mix_topics,
            mix_cdf=mix_cdf,
            topic_words=topic_words,
            topic_cdf=topic_cdf,
            background_cdf=background_cdf,
            background_perm=background_perm,
            p=p,
            mean_tokens=mean_tokens,
            background=background,
        )
        counts_tr = _sample_docs(rng, tr_docs, **common)
        counts_te = _sample_docs(rng, test_concepts, **common)
        n_l = counts_tr.shape[0]
        df = np.bincount(counts_tr.indices, minlength=p)
        idf = np.log((1.0 + n_l) / (1.0 + df)) + 1.0
        x_tr = _tfidf(counts_tr, idf)
        x_te = _tfidf(counts_te, idf)
        train[lang] = (x_tr, renumber[tr_docs])
        test[lang] = (x_te, test_concepts.copy())
        info_lang[lang] = {
            "n_train": int(n_l),
            "n_test": int(x_te.shape[0]),
            "p": int(p),
            "nnz": int(x_tr.nnz),
            "coverage": float(cov[li]),
            "terms_used": int((df > 0).sum()),
        }
    info = {
        "seed": seed,
        "languages": langs,
        "n_concepts_total": int(k_total),
        "n_concepts_train": int(train_concepts.size),
        "n_test_concepts": int(n_test),
        "n_topics": n_topics,
        "topics_per_concept": topics_per_concept,
        "words_per_topic": words_per_topic,
        "mean_tokens": mean_tokens,
        "background": background,
        "zipf": zipf,
        "per_language": info_lang,
        "n_train": int(sum(v["n_train"] for v in info_lang.values())),
        "nnz": int(sum(v["nnz"] for v in info_lang.values())),
    }
    return SyntheticCorpus(train=train, n_concepts=int(train_concepts.size), test=test, info=info)
