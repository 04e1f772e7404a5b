"""Stages word_vectors (Spark Word2Vec, small) and translate_words (driver-side numpy)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from pipeline.config import load_config
from pipeline.errors import ConfigError, DatasetNotFoundError, ModelError
from pipeline.model.cr5_model import Cr5Model
from pipeline.model.format import GRAM_EIGENVALUES, GRAM_EIGENVECTORS, LanguageMap, save_model
from pipeline.stages import get_stage
from pipeline.wordmap.lexicon import read_lexicon, split_lexicon
from pipeline.wordmap.mapping import normalize_embeddings
from pipeline.wordmap.store import WordVectors, read_word_vectors, write_word_vectors
from pipeline.wordmap.translation import word_translation
from tests.conftest import REPO


def _cfg(tmp_path: Path, *overrides: str):
    return load_config(
        [REPO / "conf/local.yaml"],
        [f"paths.root={tmp_path}/out", "spark.shuffle_partitions=2", *overrides],
    )


def _planted(tmp_path: Path, n: int = 400, d: int = 16, gram: dict | None = None):
    """en vectors = de vectors rotated + noise; word i of en translates word i of de.

    ``gram``: shared arrays (Λ, Q) saved with the model, for the Φ* variant."""
    rng = np.random.default_rng(0)
    de = rng.standard_normal((n, d)).astype(np.float32)
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    en = (de @ q.T + 0.05 * rng.standard_normal((n, d))).astype(np.float32)
    en_w, de_w = [f"e{i}" for i in range(n)], [f"d{i}" for i in range(n)]
    counts = np.arange(n, 0, -1, dtype=np.int64)
    root = tmp_path / "out" / "word_vectors"
    write_word_vectors(root, "en", WordVectors(en_w, counts, en), {"test": True})
    write_word_vectors(root, "de", WordVectors(de_w, counts, de), {"test": True})
    lex = tmp_path / "lex.tsv"
    lex.write_text("".join(f"e{i}\td{i}\n" for i in range(n)), encoding="utf-8")
    maps = {
        lang: LanguageMap(
            terms=pa.array(words),
            idf=np.ones(n, np.float32),
            df=np.ones(n, np.int64),
            phi=vec.astype(np.float32),
        )
        for lang, words, vec in (("en", en_w, en @ q), ("de", de_w, de))
    }
    save_model(
        tmp_path / "model",
        maps,
        {"r": d, "lam": 1.0, "preprocessing": {"text": {}}},
        shared=gram,
    )
    return lex


def test_store_round_trip_and_missing_language(tmp_path: Path):
    wv = WordVectors(["a", "b"], np.array([3, 1]), np.eye(2, dtype=np.float32))
    write_word_vectors(tmp_path, "en", wv, {})
    back = read_word_vectors(tmp_path, "en")
    assert back.words == ["a", "b"] and np.array_equal(back.vectors, wv.vectors)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    with pytest.raises(DatasetNotFoundError, match="word_vectors stage"):
        read_word_vectors(tmp_path, "de")


def test_translate_words_stage_on_planted_translations(tmp_path: Path):
    lex = _planted(tmp_path)
    cfg = _cfg(
        tmp_path,
        f"words.lexicon={lex}",
        f"paths.model={tmp_path / 'model'}",
        "words.n_test=100",
        "words.n_validation=50",
        "words.refine_iterations=1",
        "words.rcsls_learning_rates=[1.0]",
        "words.rcsls_epochs=[0, 3]",
    )
    report = get_stage("translate_words")(None, cfg)
    methods = {(r["method"], r["measure"]): r for r in report["results"]}
    assert set(methods) == {
        (m, s)
        for m in ("cr5", "procrustes", "procrustes_refined", "rcsls")
        for s in ("cosine", "csls")
    }
    assert report["sizes"]["test_words"] == 100
    for r in methods.values():
        assert r["n_queries"] == 100 and r["n_candidates"] == 400
    # Cr5's Φ rows are exactly aligned; the maps recover the planted rotation.
    assert methods[("cr5", "cosine")]["precision_at"][1] > 0.95
    assert methods[("procrustes", "csls")]["precision_at"][1] > 0.95
    assert methods[("rcsls", "csls")]["precision_at"][1] > 0.9
    saved = json.loads((tmp_path / "out" / "reports" / "words.json").read_text())
    assert len(saved["rows"]) == 8 * 3
    assert "| rcsls | csls |" in (tmp_path / "out" / "reports" / "words.md").read_text()
    # Document baseline: a Cr5-format model whose Φ rows are the mapped word vectors, so a
    # document's embedding is its TF-IDF-weighted sum of them.
    models = tmp_path / "out" / "wordmap_models"
    assert sorted(p.name for p in models.iterdir()) == [
        "avg_procrustes",
        "avg_procrustes_refined",
        "avg_rcsls",
    ]
    avg = Cr5Model.load(models / "avg_rcsls")
    assert avg.meta["method"] == "avg_rcsls" and avg.dim == 16
    words, phi = avg.word_vectors("en")
    doc = avg.embed(["e3 e7 e7"], "en")[0]
    x = avg.tfidf(["e3 e7 e7"], "en").toarray()[0]
    expected = (
        x[words.index("e3")] * phi[words.index("e3")]
        + x[words.index("e7")] * phi[words.index("e7")]
    )
    np.testing.assert_allclose(doc, expected, rtol=1e-5, atol=1e-6)
    assert x[words.index("e7")] > x[words.index("e3")] > 0
    de_words, de_phi = avg.word_vectors("de")
    wv_de = read_word_vectors(tmp_path / "out" / "word_vectors", "de")
    rows = [wv_de.words.index(t) for t in de_words]
    np.testing.assert_allclose(de_phi, normalize_embeddings(wv_de.vectors)[rows], atol=1e-6)


def test_translate_words_reports_the_phi_star_variant_beside_phi(tmp_path: Path):
    d = 16
    rng = np.random.default_rng(5)
    # Λ^{1/2} leaves two axes that matter: 400 words in 2-d, the noise now confuses neighbours
    lam = np.r_[1e8, 1e8, np.full(d - 2, 1e-8)]
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    lex = _planted(tmp_path, d=d, gram={GRAM_EIGENVALUES: lam, GRAM_EIGENVECTORS: q})
    cfg = _cfg(
        tmp_path,
        f"words.lexicon={lex}",
        f"paths.model={tmp_path / 'model'}",
        "words.n_test=100",
        "words.n_validation=50",
        "words.methods=[cr5, cr5_phi_star]",
    )
    report = get_stage("translate_words")(None, cfg)
    got = {(r["method"], r["measure"]): (r["precision_at"], r["mrr"]) for r in report["results"]}
    assert set(got) == {(m, s) for m in ("cr5", "cr5_phi_star") for s in ("cosine", "csls")}
    # independently: the same split, scored on Φ_lᵀ Λ^{1/2} Qᵀ built here
    model = Cr5Model.load(tmp_path / "model")
    vocab = {lang: model.word_vectors(lang)[0] for lang in ("en", "de")}
    test = split_lexicon(
        read_lexicon(lex).tokenized(model.tokenizer).restrict(set(vocab["en"]), set(vocab["de"])),
        n_test=100,
        n_validation=50,
        seed=cfg.words.seed,
    ).test
    star = {lang: model.word_vectors(lang)[1] @ (np.sqrt(lam)[:, None] * q.T) for lang in vocab}
    for measure in ("cosine", "csls"):
        want = word_translation(
            test, vocab["en"], star["en"], vocab["de"], star["de"], similarity=measure
        )
        precision, mrr = got[("cr5_phi_star", measure)]
        assert precision == pytest.approx(want.precision) and mrr == pytest.approx(want.mrr)
    # the anisotropic Λ^{1/2} changes the neighbours, so the variant is really scored apart
    assert got[("cr5_phi_star", "cosine")][1] < got[("cr5", "cosine")][1] - 0.05
    md = (tmp_path / "out" / "reports" / "words.md").read_text()
    assert "| cr5_phi_star | cosine |" in md and "| cr5 | csls |" in md
    rows = json.loads((tmp_path / "out" / "reports" / "words.json").read_text())["rows"]
    assert {r["method"] for r in rows} == {"cr5", "cr5_phi_star"}


def test_translate_words_phi_star_needs_a_model_with_gram_arrays(tmp_path: Path):
    lex = _planted(tmp_path)
    cfg = _cfg(
        tmp_path,
        f"words.lexicon={lex}",
        f"paths.model={tmp_path / 'model'}",
        "words.methods=[cr5, cr5_phi_star]",
    )
    with pytest.raises(ModelError, match="retrain"):
        get_stage("translate_words")(None, cfg)


def test_translate_words_needs_a_lexicon(tmp_path: Path):
    with pytest.raises(ConfigError, match="words.lexicon"):
        get_stage("translate_words")(None, _cfg(tmp_path))
    with pytest.raises(ConfigError, match="words.pair"):
        _cfg(tmp_path, "words.pair=[en, en]")


@pytest.mark.slow
def test_word_vectors_stage_trains_word2vec(spark, tmp_path: Path):
    rng = np.random.default_rng(1)
    words = {"en": ["cat", "dog", "house", "tree"], "de": ["katze", "hund", "haus", "baum"]}
    rows = [
        {"concept_id": f"c{i}", "lang": lang, "text": " ".join(rng.choice(ws, 12))}
        for i in range(30)
        for lang, ws in words.items()
    ]
    src = tmp_path / "docs.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = _cfg(tmp_path, f"ingest.input={src}", "words.dim=8", "words.min_count=2")
    get_stage("ingest")(spark, cfg)
    report = get_stage("word_vectors")(spark, cfg)
    assert set(report["languages"]) == {"en", "de"}
    wv = read_word_vectors(tmp_path / "out" / "word_vectors", "de")
    assert sorted(wv.words) == sorted(words["de"]) and wv.vectors.shape == (4, 8)
    assert np.all(np.diff(wv.counts) <= 0) and wv.counts.sum() == 30 * 12
