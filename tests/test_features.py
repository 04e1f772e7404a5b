"""Vocabulary, IDF and TF-IDF on Spark against an independent numpy/scipy computation."""

from __future__ import annotations

import json
import math
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp

from pipeline.io.datasets import read_dataset, read_manifest
from pipeline.io.schemas import CONCEPTS, TFIDF, VOCABULARY
from pipeline.stages import get_stage

LANGS = ("en", "de", "xx")


def make_corpus(rng: np.random.Generator, n_concepts: int = 40) -> list[dict]:
    """Zipf-ish ASCII words (so ``str.split`` is an independent tokeniser)."""
    records = []
    for c in range(n_concepts):
        for lang in LANGS:
            if rng.random() < 0.15:
                continue
            vocab = [f"{lang}{w}" for w in range(50)]
            p = 1.0 / np.arange(1, 51)
            n_words = int(rng.integers(1, 40))
            words = rng.choice(vocab, size=n_words, p=p / p.sum())
            records.append(
                {"concept_id": f"c{c:03d}", "lang": lang, "title": f"T{c}", "text": " ".join(words)}
            )
    return records


def expected_features(records, heldout, min_unique, max_unique, min_df, max_vocab):
    out = {}
    for lang in LANGS:
        docs = sorted(
            (r for r in records if r["lang"] == lang and r["concept_id"] not in heldout),
            key=lambda r: f"{lang}:{r['concept_id']}",
        )
        docs = [r for r in docs if min_unique <= len(set(r["text"].split())) <= max_unique]
        n = len(docs)
        df = Counter(w for r in docs for w in set(r["text"].split()))
        terms = sorted((t for t, d in df.items() if d >= min_df), key=lambda t: (-df[t], t))
        terms = terms[:max_vocab]
        index = {t: i for i, t in enumerate(terms)}
        idf = np.array([math.log(n / df[t]) for t in terms])
        rows, cols, vals = [], [], []
        for i, r in enumerate(docs):
            for t, c in Counter(r["text"].split()).items():
                if t in index:
                    rows.append(i)
                    cols.append(index[t])
                    vals.append(c)
        counts = sp.csr_matrix((vals, (rows, cols)), shape=(n, len(terms)))
        x = counts @ sp.diags(idf)
        norms = np.sqrt(np.asarray(x.multiply(x).sum(axis=1)).ravel())
        keep = norms > 0
        x = sp.csr_matrix(sp.diags(1.0 / norms[keep]) @ x[keep])
        x.eliminate_zeros()  # terms with idf 0 are not stored
        kept_docs = [d for d, k in zip(docs, keep) if k]
        out[lang] = {
            "terms": terms,
            "df": [df[t] for t in terms],
            "idf": idf,
            "x": sp.csr_matrix(x),
            "doc_ids": [f"{lang}:{d['concept_id']}" for d in kept_docs],
            "concepts": [d["concept_id"] for d in kept_docs],
        }
    return out


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    rng = np.random.default_rng(7)
    records = make_corpus(rng)
    d = tmp_path_factory.mktemp("corpus")
    path = d / "corpus.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    heldout = {"c003", "c010", "c011"}
    pq.write_table(pa.table({"concept_id": sorted(heldout)}), d / "heldout.parquet")
    return records, path, d / "heldout.parquet", heldout


@pytest.mark.slow
def test_vocabulary_and_tfidf_match_independent_computation(spark, make_config, corpus):
    records, path, heldout_path, heldout = corpus
    min_unique, max_unique, min_df, max_vocab = 3, 30, 2, 25
    cfg = make_config(
        f"ingest.input={path}",
        f"features.heldout_concepts={heldout_path}",
        f"features.min_unique_words={min_unique}",
        f"features.max_unique_words={max_unique}",
        f"features.min_df={min_df}",
        f"features.max_vocabulary={max_vocab}",
    )
    for stage in ("ingest", "vocabulary", "tfidf"):
        get_stage(stage)(spark, cfg)
    want = expected_features(records, heldout, min_unique, max_unique, min_df, max_vocab)

    vocab = read_dataset(spark, VOCABULARY, cfg.paths.dataset("vocabulary")).toArrow()
    tfidf = read_dataset(spark, TFIDF, cfg.paths.dataset("tfidf")).toArrow()
    concepts = read_dataset(spark, CONCEPTS, cfg.paths.dataset("concepts")).toArrow().to_pylist()
    all_training_concepts = sorted({c for w in want.values() for c in w["concepts"]})
    assert [c["concept_id"] for c in sorted(concepts, key=lambda c: c["concept_index"])] == (
        all_training_concepts
    )
    assert not heldout & set(all_training_concepts)
    concept_index = {c["concept_id"]: c["concept_index"] for c in concepts}

    for lang in LANGS:
        w = want[lang]
        v = sorted(
            (r for r in vocab.to_pylist() if r["lang"] == lang), key=lambda r: r["term_index"]
        )
        assert [r["term"] for r in v] == w["terms"]
        assert [r["term_index"] for r in v] == list(range(len(w["terms"])))
        assert [r["df"] for r in v] == w["df"]
        np.testing.assert_allclose([r["idf"] for r in v], w["idf"], rtol=1e-6)

        rows = sorted((r for r in tfidf.to_pylist() if r["lang"] == lang), key=lambda r: r["row"])
        assert [r["row"] for r in rows] == list(range(len(rows)))
        assert [r["doc_id"] for r in rows] == w["doc_ids"]
        assert [r["concept_index"] for r in rows] == [concept_index[c] for c in w["concepts"]]
        x = w["x"]
        for i, r in enumerate(rows):
            lo, hi = x.indptr[i], x.indptr[i + 1]
            assert r["indices"] == x.indices[lo:hi].tolist()
            # float32 storage of values <= 1: 1e-6 relative is a few ulps.
            np.testing.assert_allclose(r["values"], x.data[lo:hi], rtol=1e-6)
            assert abs(np.linalg.norm(r["values"]) - 1) < 1e-6

    report = read_manifest(spark, TFIDF, cfg.paths.dataset("tfidf"))["report"]
    assert report["documents"] == sum(len(w["doc_ids"]) for w in want.values())
    assert sum(report["heldout_documents"].values()) == sum(
        1 for r in records if r["concept_id"] in heldout
    )


@pytest.mark.slow
def test_tfidf_refuses_vocabulary_built_for_other_heldout_set(spark, make_config, corpus):
    _, path, heldout_path, _ = corpus
    cfg = make_config(f"ingest.input={path}", "features.min_unique_words=1")
    for stage in ("ingest", "vocabulary"):
        get_stage(stage)(spark, cfg)
    other = make_config(
        f"ingest.input={path}",
        "features.min_unique_words=1",
        f"features.heldout_concepts={heldout_path}",
    )
    from pipeline.errors import InputDataError

    with pytest.raises(InputDataError, match="rerun the vocabulary stage"):
        get_stage("tfidf")(spark, other)


def test_vocabulary_lookup_small_and_large_batches_agree():
    """A query's few tokens go through a dictionary, a batch through Arrow's index_in: the
    same term numbers either way (first of a repeated term, -1 unknown or null)."""
    from pipeline.features.weighting import SMALL_LOOKUP, LanguageVocabulary

    rng = np.random.default_rng(0)
    terms = [f"w{i}" for i in range(500)] + ["w7"]  # a repeated term keeps its first number
    vocab = LanguageVocabulary(pa.array(terms), np.ones(len(terms), dtype=np.float32))
    words = [f"w{i}" for i in rng.integers(0, 700, 3 * SMALL_LOOKUP)] + [None, "w7"]
    want = np.array([terms.index(w) if w in terms else -1 for w in words])
    big = vocab.lookup(pa.array(words))
    assert len(words) > SMALL_LOOKUP
    np.testing.assert_array_equal(big, want)
    for lo in range(0, len(words), SMALL_LOOKUP // 2):
        part = words[lo : lo + SMALL_LOOKUP // 2]
        np.testing.assert_array_equal(
            vocab.lookup(pa.array(part, pa.string())), want[lo : lo + len(part)]
        )
    assert vocab.lookup(pa.array([], pa.string())).shape == (0,)
