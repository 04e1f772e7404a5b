"""The DDTP benchmark corpora: full-corpus selection in the builder, validation hold-out in
the loader (scripts/build_ddtp_sample.py, bench/ddtp_sample.py)."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.conftest import REPO, SAMPLE

sys.path.insert(0, str(REPO))

from bench.ddtp_sample import load_sample_corpus
from pipeline.config import TextConfig
from pipeline.text.tokenizer import Tokenizer

_spec = importlib.util.spec_from_file_location(
    "build_ddtp_sample", REPO / "scripts" / "build_ddtp_sample.py"
)
assert _spec is not None and _spec.loader is not None
build = importlib.util.module_from_spec(_spec)
sys.modules["build_ddtp_sample"] = build  # dataclasses look their module up
_spec.loader.exec_module(build)


def _lang_sets() -> dict[str, frozenset[str]]:
    sets = {
        "a1": {"en"},
        "a2": {"de"},
        "b1": {"en", "de"},
        "b2": {"en", "de"},
        "b3": {"en", "fr"},
        "c1": {"en", "de", "fr"},
        "c2": {"en", "de", "fr"},
        "d1": {"en", "es"},
        "e1": {"en", "de", "fr", "es"},
    }
    return {k: frozenset(v) for k, v in sets.items()}


def test_n_concepts_zero_takes_every_multilingual_concept() -> None:
    lang_sets = _lang_sets()
    chosen, report = build.sample_concepts(lang_sets, ["en", "de", "fr", "es"], 0, seed=1)
    assert chosen == sorted(k for k, v in lang_sets.items() if len(v) >= 2)
    assert report[frozenset({"en", "de"})] == (2, 2)
    assert report[frozenset({"en"})] == (0, 1)
    # asking for exactly that many concepts gives the same selection
    same, _ = build.sample_concepts(lang_sets, ["en", "de", "fr", "es"], len(chosen), seed=7)
    assert same == chosen


def test_budget_sampling_unchanged_and_negative_rejected() -> None:
    lang_sets = _lang_sets()
    chosen, _ = build.sample_concepts(lang_sets, ["en", "de", "fr", "es"], 4, seed=1)
    # es concepts and the all-language one first, then one per remaining tier (3 then 2)
    assert len(chosen) == 4
    assert {"d1", "e1"} <= set(chosen)
    assert len({"c1", "c2"} & set(chosen)) == 1
    with pytest.raises(ValueError, match="n_concepts must be >= 0"):
        build.sample_concepts(lang_sets, ["en", "de", "fr", "es"], -1, seed=1)


def test_validation_hold_out_is_disjoint_and_leaves_test_unchanged() -> None:
    plain = load_sample_corpus(n_test=100, seed=3)
    corpus = load_sample_corpus(n_test=100, seed=3, n_validation=150)
    assert plain.validation == {}
    langs = list(plain.test)
    table = pq.read_table(SAMPLE, columns=["concept_id", "lang", "text"]).to_pylist()
    all_langs = {lang: {r["concept_id"] for r in table if r["lang"] == lang} for lang in langs}

    test_ids = corpus.test[langs[0]][1]
    val_ids = corpus.validation[langs[0]][1]
    assert val_ids.size == 150 and np.all(val_ids[:-1] < val_ids[1:])
    assert not set(test_ids) & set(val_ids)
    for lang in langs:
        assert np.array_equal(corpus.test[lang][1], plain.test[lang][1])
        assert np.array_equal(corpus.validation[lang][1], val_ids)
        assert set(val_ids) <= all_langs[lang]
        x_val, _ = corpus.validation[lang]
        x_tr, _ = corpus.train[lang]
        assert x_val.shape == (150, x_tr.shape[1])
    # the held-out concepts are gone from training: K drops by exactly n_validation
    assert corpus.n_concepts == plain.n_concepts - 150
    assert corpus.info["n_validation"] == 150


def test_validation_rows_use_training_vocabulary_only() -> None:
    """A term that occurs only in validation documents gets no column (vocabulary from
    training documents, min_df 1 so every training term is kept)."""
    corpus = load_sample_corpus(
        n_test=50, seed=5, n_validation=50, min_df=1, languages=["en", "de"]
    )
    assert list(corpus.train) == ["en", "de"]
    table = pq.read_table(SAMPLE, columns=["concept_id", "lang", "text"]).to_pylist()
    tok = Tokenizer.from_config(TextConfig())
    val = set(corpus.validation["en"][1])
    test = set(corpus.test["en"][1])
    train_terms: set[str] = set()
    val_terms: set[str] = set()
    for r in table:
        if r["lang"] != "en":
            continue
        terms = set(tok.tokenize(r["text"]))
        if r["concept_id"] in val:
            val_terms |= terms
        elif r["concept_id"] not in test:
            train_terms |= terms
    assert corpus.train["en"][0].shape[1] == len(train_terms)
    assert val_terms - train_terms  # some validation-only terms exist and were dropped
