"""The bundled real DDTP sample as a benchmark corpus (no Spark).

Source: ``data/sample/ddtp_en_de_fr_es.parquet`` (Debian's translated package descriptions in
en, de, fr, es; licence and provenance in ``data/sample/README.md``); ``concept_id`` (the
Description-md5) links the translations of one description.

Construction, mirroring ``bench/synthetic.py`` so that ``bench/bench_train.py`` can use either:

* tokens from the project's tokeniser (:class:`pipeline.text.tokenizer.Tokenizer`, default
  :class:`~pipeline.config.TextConfig`), term counts per document (``flat_tokens`` + one
  COO -> CSR conversion per language: no Python loop over documents or tokens);
* ``n_test`` concepts with a document in every language are held out of training in every
  language (seeded); their documents, one per language in the same concept order, are the test
  set;
* per language: vocabulary = terms of the training documents with document frequency >=
  ``min_df``; IDF ``log((1 + n_l) / (1 + df)) + 1``; TF-IDF rows L2-normalised (a row with no
  known term stays zero); float32 CSR; test rows use the training vocabulary and IDF.

The sample is small (4 languages, 12.7k documents, ~0.5M nonzeros): on it the per-pass cost is
dominated by fixed overheads, which is what the benchmark shows there.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import scipy.sparse as sp

from bench.synthetic import SyntheticCorpus
from pipeline.config import TextConfig
from pipeline.text.tokenizer import Tokenizer

__all__ = ["SAMPLE", "load_sample_corpus"]

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "sample" / "ddtp_en_de_fr_es.parquet"


def _counts(texts: pa.Array, tokenizer: Tokenizer) -> tuple[sp.csr_matrix, np.ndarray]:
    """Term counts (n_docs × n_distinct_terms) and the term strings of the columns."""
    tokens, doc = tokenizer.flat_tokens(texts)
    encoded = pc.dictionary_encode(tokens)
    term = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    names = np.asarray(encoded.dictionary.to_pylist(), dtype=object)
    counts = sp.coo_matrix(
        (np.ones(term.size), (doc, term)), shape=(len(texts), names.size)
    ).tocsr()
    counts.sum_duplicates()
    return counts, names


def _tfidf(counts: sp.csr_matrix, idf: np.ndarray) -> sp.csr_matrix:
    x = sp.csr_matrix(counts @ sp.diags(idf))
    norms = np.sqrt(np.asarray(x.multiply(x).sum(axis=1)).ravel())
    x = sp.csr_matrix(sp.diags(np.where(norms > 0, 1.0 / np.maximum(norms, 1e-300), 0.0)) @ x)
    x.eliminate_zeros()
    return sp.csr_matrix(x, dtype=np.float32)


def load_sample_corpus(
    *, n_test: int = 300, seed: int = 0, min_df: int = 2, path: Path = SAMPLE
) -> SyntheticCorpus:
    """Build the train/test corpus of the bundled sample (see the module docstring)."""
    table = pq.read_table(path, columns=["concept_id", "lang", "text"])
    langs = sorted(set(table.column("lang").to_pylist()), key=["en", "de", "fr", "es"].index)
    concept = table.column("concept_id").to_numpy(zero_copy_only=False).astype(str)
    lang = table.column("lang").to_numpy(zero_copy_only=False).astype(str)

    everywhere = set.intersection(*(set(concept[lang == code]) for code in langs))
    rng = np.random.default_rng(seed)
    pool = np.array(sorted(everywhere))
    if n_test > pool.size:
        raise ValueError(f"n_test={n_test} > {pool.size} concepts present in every language")
    test_ids = rng.choice(pool, size=n_test, replace=False)
    is_test = np.isin(concept, test_ids)
    train_ids = np.unique(concept[~is_test])
    tokenizer = Tokenizer.from_config(TextConfig())

    train, test, per_language = {}, {}, {}
    for code in langs:
        rows_tr = np.flatnonzero((lang == code) & ~is_test)
        rows_te = np.flatnonzero((lang == code) & is_test)
        # row i of every language's test set: the i-th held-out concept in sorted id order
        rows_te = rows_te[np.argsort(concept[rows_te], kind="stable")]
        if not np.array_equal(concept[rows_te], np.sort(test_ids)):
            raise ValueError(
                f"{path}: language {code!r} has not exactly one test document per concept"
            )

        texts = table.column("text").take(pa.array(np.r_[rows_tr, rows_te]))
        counts, _ = _counts(texts, tokenizer)
        c_tr, c_te = counts[: rows_tr.size], counts[rows_tr.size :]
        df = np.bincount(c_tr.indices, minlength=counts.shape[1])
        keep = np.flatnonzero(df >= min_df)
        n_l = rows_tr.size
        idf = np.log((1.0 + n_l) / (1.0 + df[keep])) + 1.0
        x_tr = _tfidf(c_tr[:, keep], idf)
        x_te = _tfidf(c_te[:, keep], idf)
        train[code] = (x_tr, np.searchsorted(train_ids, concept[rows_tr]).astype(np.int64))
        test[code] = (x_te, concept[rows_te])
        per_language[code] = {
            "n_train": int(n_l),
            "p": int(keep.size),
            "nnz": int(x_tr.nnz),
            "coverage": round(float(np.unique(concept[rows_tr]).size / train_ids.size), 3),
            "n_test": int(rows_te.size),
        }
    info = {
        "source": str(path.relative_to(path.parents[2])),
        "languages": langs,
        "n_train": int(sum(v["n_train"] for v in per_language.values())),
        "nnz": int(sum(v["nnz"] for v in per_language.values())),
        "n_topics": None,
        "n_test": int(n_test),
        "min_df": int(min_df),
        "seed": int(seed),
        "per_language": per_language,
    }
    return SyntheticCorpus(train=train, n_concepts=int(train_ids.size), test=test, info=info)
