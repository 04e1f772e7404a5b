"""Topic-word models (JPLSA, CPLSA) in the model format: schema version 2, folding-in through
Cr5Model from raw term counts, and clear errors for corrupted or unknown map kinds."""

from __future__ import annotations

import hashlib
import json
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest
import scipy.sparse as sp

from pipeline.baselines.topics import fold_in
from pipeline.errors import ModelError
from pipeline.model import Cr5Model, LanguageMap, load_model_files, save_model
from pipeline.model.format import MODEL_JSON, read_model_json
from tests.test_model import TERMS, make_model

FOLDING = {"steps": 2, "topic_prior": 1.2}


def make_topic_model(path, t=3, seed=0):
    rng = np.random.default_rng(seed)
    maps = {}
    for lang, terms in TERMS.items():
        p = len(terms)
        maps[lang] = LanguageMap(
            terms=pa.array(terms),
            idf=rng.uniform(0.5, 2, p).astype(np.float32),
            df=np.arange(p, 0, -1),
            phi=rng.dirichlet(np.ones(p), size=t).T.astype(np.float32),
        )
    meta = {"r": t, "lam": 1.0, "method": "jplsa", "similarity": "l1", "folding_in": FOLDING}
    save_model(path, maps, {**meta, "preprocessing": {"text": {}}})
    return maps


def test_a_topic_model_is_schema_version_2_and_a_linear_one_stays_1(tmp_path):
    make_topic_model(tmp_path / "t")
    make_model(tmp_path / "d")
    t, d = read_model_json(tmp_path / "t"), read_model_json(tmp_path / "d")
    assert (t["schema_version"], t["phi_format"]) == (2, "topic_word")
    assert (d["schema_version"], d["phi_format"]) == (1, "dense")
    assert t["folding_in"] == FOLDING
    model = Cr5Model.load(tmp_path / "t")
    assert model.is_topic_model and model.similarity == "l1"
    assert not Cr5Model.load(tmp_path / "d").is_topic_model


def test_embedding_folds_in_the_raw_term_counts(tmp_path):
    maps = make_topic_model(tmp_path / "t")
    model = Cr5Model.load(tmp_path / "t")
    texts = ["Cat cat DOG!", "the house and the tree, the cat", "unknown words only", ""]
    vecs, n_terms = model.embed_with_counts(texts, "en")
    index = {w: i for i, w in enumerate(TERMS["en"])}
    counts = np.zeros((len(texts), len(index)))
    for i, text in enumerate(texts):  # counts, not TF-IDF: no IDF, no normalisation
        for w, c in Counter(w.strip("!,").lower() for w in text.split()).items():
            if w in index:
                counts[i, index[w]] = c
    want = fold_in(sp.csr_matrix(counts), maps["en"].phi.astype(np.float64), **FOLDING)
    np.testing.assert_allclose(vecs, want, rtol=1e-6)
    np.testing.assert_array_equal(n_terms, (counts > 0).sum(axis=1))
    assert np.all(vecs[2:] == 0) and np.allclose(vecs[:2].sum(axis=1), 1)


def _rewrite(path, **changes):
    meta = json.loads((path / MODEL_JSON).read_text())
    meta.update(changes)
    (path / MODEL_JSON).write_text(json.dumps(meta))


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"folding_in": None}, "needs folding_in"),
        ({"folding_in": {"steps": 0, "topic_prior": 1.1}}, "needs folding_in"),
        ({"folding_in": {"steps": 1, "topic_prior": 0.5}}, "needs folding_in"),
        ({"schema_version": 1}, "needs schema_version 2"),
        ({"phi_format": "hologram"}, "phi_format 'hologram' is not one of"),
        ({"schema_version": 3}, "schema_version 3 is not supported"),
    ],
)
def test_corrupted_topic_models_fail_with_a_clear_error(tmp_path, changes, needle):
    make_topic_model(tmp_path / "t")
    _rewrite(tmp_path / "t", **changes)
    with pytest.raises(ModelError, match=needle):
        Cr5Model.load(tmp_path / "t")


def test_a_topic_word_map_must_hold_distributions(tmp_path):
    maps = make_topic_model(tmp_path / "t")
    bad = dict(maps)
    bad["en"] = LanguageMap(
        terms=maps["en"].terms,
        idf=maps["en"].idf,
        df=maps["en"].df,
        phi=maps["en"].phi * 2,
    )
    meta = {"r": 3, "folding_in": FOLDING}
    with pytest.raises(ModelError, match="sums to 2"):
        save_model(tmp_path / "bad", bad, meta)
    neg = maps["de"].phi.copy()
    neg[0, 0] = -0.1
    bad["en"] = maps["en"]
    bad["de"] = LanguageMap(maps["de"].terms, maps["de"].idf, maps["de"].df, neg)
    with pytest.raises(ModelError, match="nonnegative"):
        save_model(tmp_path / "bad", bad, meta)
    # on load too: a phi.npy replaced by other numbers, with model.json's size and SHA-256
    # rewritten to match, is still refused
    path = tmp_path / "t"
    phi_file = path / "languages" / "en" / "phi.npy"
    np.save(phi_file, maps["en"].phi * 2)
    meta = json.loads((path / MODEL_JSON).read_text())
    meta["files"]["languages/en/phi.npy"] = {
        "bytes": phi_file.stat().st_size,
        "sha256": hashlib.sha256(phi_file.read_bytes()).hexdigest(),
    }
    (path / MODEL_JSON).write_text(json.dumps(meta))
    with pytest.raises(ModelError, match="sums to 2"):
        load_model_files(path)
