"""TF-IDF weighting (and raw term counts) of tokenised documents, without Spark.

Shared by the ``tfidf`` stage (inside ``mapInArrow``) and the embedding API, so a
document gets exactly the same vector in training, in batch embedding and in a
notebook. The topic models (JPLSA, CPLSA) fit and fold in raw in-vocabulary term counts
(:func:`count_rows`, :func:`count_matrix`), counted by the same tokeniser and lookup.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import scipy.sparse as sp

if TYPE_CHECKING:
    from pipeline.text.tokenizer import Tokenizer


#: Token counts up to which :meth:`LanguageVocabulary.lookup` uses a dictionary rather than
#: Arrow's per-call hash table of the whole vocabulary.
SMALL_LOOKUP = 2048


class LanguageVocabulary:
    """One language's vocabulary: terms in ``term_index`` order and their IDF.

    Parameters
    ----------
    terms : pyarrow string array of shape (p_l,)
    idf : ndarray of float32, shape (p_l,)
    """

    def __init__(self, terms: pa.Array, idf: np.ndarray) -> None:
        if len(terms) != len(idf):
            raise ValueError(f"{len(terms)} terms but {len(idf)} idf values")
        self.terms = terms
        self.idf = np.asarray(idf, dtype=np.float32)
        self._positions: dict[str, int] | None = None

    def __len__(self) -> int:
        return len(self.terms)

    def lookup(self, tokens: pa.Array) -> np.ndarray:
        """Term index of each token, -1 when out of vocabulary; shape (n_tokens,).

        A batch goes through Arrow's hash join (``index_in``), which hashes the whole
        vocabulary on every call: ~40 ms for 200k terms, nothing beside a batch of thousands
        of documents but all of a search query's latency. Up to :data:`SMALL_LOOKUP` tokens
        (one or a few texts) use a dictionary of the vocabulary built on first use instead.
        """
        if len(tokens) <= SMALL_LOOKUP:
            if self._positions is None:
                terms = self.terms.to_pylist()  # the first of repeated terms, as index_in
                self._positions = {terms[i]: i for i in range(len(terms) - 1, -1, -1)}
            get = self._positions.get
            return np.fromiter(
                (get(t, -1) for t in tokens.to_pylist()), dtype=np.int64, count=len(tokens)
            )
        idx = pc.index_in(tokens, value_set=self.terms)
        return idx.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)


def tfidf_rows(
    tokens: pa.Array, doc_of_token: np.ndarray, n_docs: int, vocab: LanguageVocabulary
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """L2-normalised TF-IDF rows of a batch of documents, as CSR arrays.

    Parameters
    ----------
    tokens : pyarrow string array of shape (n_tokens,)
    doc_of_token : ndarray of int64, shape (n_tokens,), the document of each token
    n_docs : int
    vocab : LanguageVocabulary

    Returns
    -------
    indptr : ndarray of int32, shape (n_docs + 1,)
    indices : ndarray of int32, shape (nnz,), sorted within each row
    values : ndarray of float32, shape (nnz,); rows with no known term are empty
    """
    ids = vocab.lookup(tokens)
    known = ids >= 0
    p = max(len(vocab), 1)
    keys, counts = np.unique(doc_of_token[known] * p + ids[known], return_counts=True)
    docs, terms = keys // p, keys % p
    weights = counts * vocab.idf[terms].astype(np.float64)
    norms = np.sqrt(np.bincount(docs, weights * weights, minlength=n_docs))
    with np.errstate(invalid="ignore", divide="ignore"):
        values = (weights / norms[docs]).astype(np.float32)
    # Terms with idf 0 (in every training document) carry no signal: no stored zeros.
    # A row whose every known term has idf 0 has norm 0 and stays empty.
    ok = weights > 0
    docs, terms, values = docs[ok], terms[ok], values[ok]
    indptr = np.zeros(n_docs + 1, dtype=np.int32)
    np.cumsum(np.bincount(docs, minlength=n_docs), out=indptr[1:])
    return indptr, terms.astype(np.int32), values


def count_rows(
    tokens: pa.Array, doc_of_token: np.ndarray, n_docs: int, vocab: LanguageVocabulary
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """In-vocabulary term counts of a batch of documents, as CSR arrays.

    Every vocabulary term counts, also one with idf 0 (which the TF-IDF rows leave out).

    Parameters
    ----------
    tokens : pyarrow string array of shape (n_tokens,)
    doc_of_token : ndarray of int64, shape (n_tokens,)
    n_docs : int
    vocab : LanguageVocabulary

    Returns
    -------
    indptr : ndarray of int32, shape (n_docs + 1,)
    indices : ndarray of int32, shape (nnz,), sorted within each row
    counts : ndarray of float32, shape (nnz,)
    """
    ids = vocab.lookup(tokens)
    known = ids >= 0
    p = max(len(vocab), 1)
    keys, counts = np.unique(doc_of_token[known] * p + ids[known], return_counts=True)
    docs, terms = keys // p, keys % p
    indptr = np.zeros(n_docs + 1, dtype=np.int32)
    np.cumsum(np.bincount(docs, minlength=n_docs), out=indptr[1:])
    return indptr, terms.astype(np.int32), counts.astype(np.float32)


def count_matrix(texts: pa.Array, tokenizer: Tokenizer, vocab: LanguageVocabulary) -> sp.csr_matrix:
    """Tokenise ``texts`` and count known terms: csr_matrix of float32, shape (n_texts, p_l)."""
    tokens, doc_of = tokenizer.flat_tokens(texts)
    indptr, indices, counts = count_rows(tokens, doc_of, len(texts), vocab)
    return sp.csr_matrix((counts, indices, indptr), shape=(len(texts), len(vocab)))


def tfidf_matrix(texts: pa.Array, tokenizer: Tokenizer, vocab: LanguageVocabulary) -> sp.csr_matrix:
    """Tokenise ``texts`` and weight them: csr_matrix of float32, shape (n_texts, p_l)."""
    tokens, doc_of = tokenizer.flat_tokens(texts)
    indptr, indices, values = tfidf_rows(tokens, doc_of, len(texts), vocab)
    return sp.csr_matrix((values, indices, indptr), shape=(len(texts), len(vocab)))
