"""The bundled real DDTP sample, or the full DDTP corpus, as a benchmark corpus (no Spark).

Source: ``data/sample/ddtp_en_de_fr_es.parquet`` (Debian's translated package descriptions in
en, de, fr, es; licence and provenance in ``data/sample/README.md``), or the full corpus that
``bench/build_ddtp_full.sh`` writes outside the repository (same schema, every concept present
in >= 2 languages); ``concept_id`` (the Description-md5) links the translations of one
description.

Construction, mirroring ``bench/synthetic.py`` so that ``bench/bench_train.py`` can use either:

* tokens from the project's tokeniser (:class:`pipeline.text.tokenizer.Tokenizer`, default
  :class:`~pipeline.config.TextConfig`), term counts per document (``flat_tokens`` + one
  COO -> CSR conversion per language: no Python loop over documents or tokens);
* ``n_test`` concepts with a document in every language are held out of training in every
  language (seeded); their documents, one per language in the same concept order, are the test
  set; optionally ``n_validation`` further such concepts, drawn after the test set from the
  rest, form a validation set of the same layout;
* per language: vocabulary = terms of the training documents with document frequency >=
  ``min_df``; IDF ``log((1 + n_l) / (1 + df)) + 1``; TF-IDF rows L2-normalised (a row with no
  known term stays zero); float32 CSR; test and validation rows use the training vocabulary
  and IDF.

The sample is small (4 languages, 12.7k documents, ~0.5M nonzeros): on it the per-pass cost is
dominated by fixed overheads, which is what the benchmark shows there. The full corpus
(bookworm: 4 languages, 59k documents, ~2.7M nonzeros, p_l ~23k at min_df 2) is 5x larger.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import scipy.sparse as sp

from bench.synthetic import SyntheticCorpus
from pipeline.config import TextConfig
from pipeline.text.tokenizer import Tokenizer

__all__ = ["SAMPLE", "default_full_path", "load_sample_corpus"]

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


def default_full_path() -> Path:
    """Where ``bench/build_ddtp_full.sh`` writes the full corpus: ``$DDTP_FULL`` or the cache."""
    env = os.environ.get("DDTP_FULL")
    if env:
        return Path(env)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "cr5" / "ddtp_full.parquet"


def _source_name(path: Path) -> str:
    """The corpus path relative to the repository when inside it, else absolute."""
    path = path.resolve()
    repo = Path(__file__).resolve().parents[1]
    return str(path.relative_to(repo)) if path.is_relative_to(repo) else str(path)


def load_sample_corpus(
    *,
    n_test: int = 300,
    seed: int = 0,
    min_df: int = 2,
    path: Path = SAMPLE,
    n_validation: int = 0,
    languages: Sequence[str] | None = None,
) -> SyntheticCorpus:
    """Build the train/test (and optional validation) corpus of a DDTP Parquet file.

    ``path`` is the bundled sample by default, or the full corpus of
    ``bench/build_ddtp_full.sh`` (same schema). ``n_validation`` further concepts present in
    every language are held out of training (disjoint from the test concepts) and returned as
    ``corpus.validation`` in the layout of ``corpus.test``; the test draw does not depend on it.
    ``languages`` keeps only those languages' documents (default: all; concepts left in one
    language stay in training, they only add rows to that language).
    """
    if not path.is_file():
        hint = " (build it with bench/build_ddtp_full.sh)" if path != SAMPLE else ""
        raise FileNotFoundError(f"DDTP corpus {path} does not exist{hint}")
    table = pq.read_table(path, columns=["concept_id", "lang", "text"])
    if languages is not None:
        missing = sorted(set(languages) - set(table.column("lang").to_pylist()))
        if missing or len(set(languages)) < 2:
            raise ValueError(f"{path}: need >= 2 languages of the corpus, got {list(languages)}")
        table = table.filter(pc.is_in(table.column("lang"), pa.array(list(languages))))
    langs = sorted(set(table.column("lang").to_pylist()), key=["en", "de", "fr", "es"].index)
    concept = table.column("concept_id").to_numpy(zero_copy_only=False).astype(str)
    lang = table.column("lang").to_numpy(zero_copy_only=False).astype(str)

    everywhere = set.intersection(*(set(concept[lang == code]) for code in langs))
    rng = np.random.default_rng(seed)
    pool = np.array(sorted(everywhere))
    if n_test + n_validation > pool.size:
        raise ValueError(
            f"{path}: n_test={n_test} + n_validation={n_validation} > {pool.size} concepts "
            "present in every language"
        )
    test_ids = rng.choice(pool, size=n_test, replace=False)
    # Drawn after (and independently of) the test set, so n_validation=0 changes nothing.
    val_ids = rng.choice(pool[~np.isin(pool, test_ids)], size=n_validation, replace=False)
    held_out = {"test": np.sort(test_ids), "validation": np.sort(val_ids)}
    is_held_out = np.isin(concept, test_ids) | np.isin(concept, val_ids)
    train_ids = np.unique(concept[~is_held_out])
    tokenizer = Tokenizer.from_config(TextConfig())

    train: dict[str, tuple[sp.csr_matrix, np.ndarray]] = {}
    sets: dict[str, dict[str, tuple[sp.csr_matrix, np.ndarray]]] = {"test": {}, "validation": {}}
    per_language = {}
    for code in langs:
        in_lang = lang == code
        rows_tr = np.flatnonzero(in_lang & ~is_held_out)
        parts = [rows_tr]
        for name, ids in held_out.items():
            rows = np.flatnonzero(in_lang & np.isin(concept, ids))
            # row i of every language's held-out set: its i-th concept in sorted id order
            rows = rows[np.argsort(concept[rows], kind="stable")]
            if not np.array_equal(concept[rows], ids):
                raise ValueError(
                    f"{path}: language {code!r} has not exactly one {name} document per concept"
                )
            parts.append(rows)

        texts = table.column("text").take(pa.array(np.concatenate(parts)))
        counts, _ = _counts(texts, tokenizer)
        c_tr = counts[: rows_tr.size]
        df = np.bincount(c_tr.indices, minlength=counts.shape[1])
        keep = np.flatnonzero(df >= min_df)
        n_l = rows_tr.size
        idf = np.log((1.0 + n_l) / (1.0 + df[keep])) + 1.0
        x_tr = _tfidf(c_tr[:, keep], idf)
        train[code] = (x_tr, np.searchsorted(train_ids, concept[rows_tr]).astype(np.int64))
        offset = rows_tr.size
        for name, rows in zip(held_out, parts[1:], strict=True):
            c_held = counts[offset : offset + rows.size]
            offset += rows.size
            sets[name][code] = (_tfidf(c_held[:, keep], idf), concept[rows])
        per_language[code] = {
            "n_train": int(n_l),
            "p": int(keep.size),
            "nnz": int(x_tr.nnz),
            "coverage": round(float(np.unique(concept[rows_tr]).size / train_ids.size), 3),
            "n_test": int(held_out["test"].size),
        }
        if n_validation:
            per_language[code]["n_validation"] = int(n_validation)
    info = {
        "source": _source_name(path),
        "languages": langs,
        "n_train": int(sum(v["n_train"] for v in per_language.values())),
        "nnz": int(sum(v["nnz"] for v in per_language.values())),
        "n_topics": None,
        "n_test": int(n_test),
        "min_df": int(min_df),
        "seed": int(seed),
        "per_language": per_language,
    }
    if n_validation:
        info["n_validation"] = int(n_validation)
    return SyntheticCorpus(
        train=train,
        n_concepts=int(train_ids.size),
        test=sets["test"],
        info=info,
        validation=sets["validation"] if n_validation else {},
    )
