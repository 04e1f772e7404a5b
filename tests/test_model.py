"""Model directory format and the embedding API (no Spark)."""

from __future__ import annotations

import json
import math
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest

from pipeline.errors import ModelError
from pipeline.model import Cr5Model, LanguageMap, load_model_files, save_model

TERMS = {"en": ["cat", "dog", "house", "tree"], "de": ["katze", "hund", "haus"]}


def make_model(path, r=3, seed=0):
    rng = np.random.default_rng(seed)
    maps = {}
    for lang, terms in TERMS.items():
        p = len(terms)
        maps[lang] = LanguageMap(
            terms=pa.array(terms),
            idf=rng.uniform(0.5, 2, p).astype(np.float32),
            df=np.arange(p, 0, -1),
            phi=rng.normal(size=(p, r)).astype(np.float32),
            mean=rng.uniform(size=p).astype(np.float32),
        )
    save_model(path, maps, {"r": r, "lam": 1.0, "preprocessing": {"text": {}}})
    return maps


def test_roundtrip_and_metadata(tmp_path):
    maps = make_model(tmp_path / "m")
    meta, loaded = load_model_files(tmp_path / "m")
    assert meta["languages"] == ["en", "de"] and meta["r"] == 3
    assert meta["vocabulary_sizes"] == {"en": 4, "de": 3}
    for lang, lm in maps.items():
        np.testing.assert_array_equal(loaded[lang].phi, lm.phi)
        np.testing.assert_array_equal(loaded[lang].idf, lm.idf)
        assert loaded[lang].terms.to_pylist() == TERMS[lang]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]  # no temporaries left


def test_embed_matches_independent_tfidf_times_phi(tmp_path):
    maps = make_model(tmp_path / "m")
    model = Cr5Model.load(tmp_path / "m")
    texts = ["Cat cat DOG!", "the house and the tree, the cat", "unknown words only", ""]
    vecs, counts = model.embed_with_counts(texts, "en")
    assert vecs.dtype == np.float32 and vecs.shape == (4, model.dim)
    lm = maps["en"]
    index = {t: i for i, t in enumerate(TERMS["en"])}
    for text, vec, count in zip(texts, vecs, counts):
        words = [w.strip("!,").lower() for w in text.split()]
        tf = Counter(w for w in words if w in index)
        x = np.zeros(len(index))
        for w, c in tf.items():
            x[index[w]] = c * lm.idf[index[w]]
        norm = math.sqrt(float(x @ x))
        expected = (x / norm) @ lm.phi.astype(np.float64) if norm else np.zeros(model.dim)
        np.testing.assert_allclose(vec, expected, rtol=1e-5, atol=1e-6)
        assert count == len(tf)
    assert not vecs[2].any() and counts[2] == 0  # no known word: zero vector, count 0


def test_errors(tmp_path):
    make_model(tmp_path / "m")
    model = Cr5Model.load(tmp_path / "m")
    with pytest.raises(ModelError, match="'xx' is not in this model.*en, de"):
        model.embed(["text"], "xx")
    with pytest.raises(TypeError, match="sequence of texts"):
        model.embed("a single string", "en")
    with pytest.raises(ModelError, match="does not exist"):
        Cr5Model.load(tmp_path / "nope")


def test_corrupted_truncated_and_wrong_version(tmp_path):
    make_model(tmp_path / "m")
    phi = tmp_path / "m" / "languages" / "en" / "phi.npy"
    data = bytearray(phi.read_bytes())
    data[-1] ^= 0xFF
    phi.write_bytes(bytes(data))
    with pytest.raises(ModelError, match="phi.npy fails its SHA-256 check"):
        Cr5Model.load(tmp_path / "m")
    phi.write_bytes(bytes(data[:-7]))
    with pytest.raises(ModelError, match="phi.npy has .* bytes.*truncated"):
        Cr5Model.load(tmp_path / "m")

    make_model(tmp_path / "v")
    meta_path = tmp_path / "v" / "model.json"
    meta = json.loads(meta_path.read_text())
    meta["schema_version"] = 99
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(ModelError, match="schema_version 99 is not supported"):
        Cr5Model.load(tmp_path / "v")
    meta_path.write_text("{not json")
    with pytest.raises(ModelError, match="not valid JSON"):
        Cr5Model.load(tmp_path / "v")


def test_shape_validation_on_save(tmp_path):
    bad = LanguageMap(
        terms=pa.array(["a", "b"]),
        idf=np.ones(2, np.float32),
        df=np.ones(2, np.int64),
        phi=np.ones((3, 2), np.float32),
    )
    with pytest.raises(ModelError, match="phi has shape"):
        save_model(tmp_path / "m", {"en": bad}, {"r": 2})
    assert not (tmp_path / "m").exists()


def make_selection_model(path):
    """An untranslated-style model: one-hot maps into the union vocabulary."""
    from pipeline.baselines import selection_maps, union_vocabulary

    union, index = union_vocabulary({"en": ["cat", "hotel", "tree"], "de": ["katze", "hotel"]})
    phis = selection_maps(index, len(union))
    maps = {
        lang: LanguageMap(
            terms=pa.array(terms),
            idf=np.ones(len(terms), dtype=np.float32),
            df=np.ones(len(terms), dtype=np.int64),
            phi=phis[lang],
        )
        for lang, terms in (("en", ["cat", "hotel", "tree"]), ("de", ["katze", "hotel"]))
    }
    save_model(path, maps, {"r": len(union), "lam": 0.0, "method": "untranslated"})
    return union


def test_selection_model_roundtrip_embeds_sparse_rows_over_the_union(tmp_path):
    union = make_selection_model(tmp_path / "u")
    model = Cr5Model.load(tmp_path / "u")
    assert model.is_sparse and model.meta["phi_format"] == "selection"
    assert model.dim == len(union) == 4
    assert sorted(p.name for p in (tmp_path / "u" / "languages" / "de").iterdir()) == [
        "phi_index.npy",
        "vocabulary.parquet",
    ]
    en = model.embed(["the hotel cat", "nothing known"], "en")
    de = model.embed(["Hotel hotel"], "de")
    assert en.shape == (2, 4) and en.dtype == np.float32 and en[1].nnz == 0
    # Only "hotel" is shared: the cosine is the product of the hotel weights.
    hotel = union.index("hotel")
    cos = (en[0] @ de[0].T).toarray()[0, 0]
    assert cos == pytest.approx(en[0, hotel] * de[0, hotel]) and 0 < cos < 1
    assert de[0, hotel] == pytest.approx(1.0)  # the only term of that text


def test_selection_model_with_bad_index_fails_clearly(tmp_path):
    make_selection_model(tmp_path / "u")
    bad = tmp_path / "u" / "languages" / "en" / "phi_index.npy"
    np.save(bad, np.array([0, 1, 99]))
    with pytest.raises(ModelError, match="outside"):
        load_model_files(tmp_path / "u", verify=False, languages=["en"])
    meta = json.loads((tmp_path / "u" / "model.json").read_text())
    meta["files"]["languages/en/phi_index.npy"]["bytes"] = bad.stat().st_size
    (tmp_path / "u" / "model.json").write_text(json.dumps(meta))
    with pytest.raises(ModelError, match="SHA-256"):
        Cr5Model.load(tmp_path / "u").embed(["cat"], "en")


def test_an_offset_is_stored_checked_and_subtracted_from_texts_with_known_terms(tmp_path):
    """A language's offset round-trips, is subtracted from every embedding of a text with a
    known term (a text without one stays the zero vector), and a wrong shape is refused."""
    from pipeline.model.batches import embed_arrays

    maps = make_model(tmp_path / "plain")
    offset = np.array([0.5, -1.0, 2.0], dtype=np.float32)
    maps["en"].offset = offset
    save_model(tmp_path / "m", maps, {"r": 3, "lam": 1.0, "preprocessing": {"text": {}}})
    _, loaded = load_model_files(tmp_path / "m")
    np.testing.assert_array_equal(loaded["en"].offset, offset)
    assert loaded["de"].offset is None
    texts = ["Cat cat DOG!", "unknown words only", "the house"]
    plain = Cr5Model.load(tmp_path / "plain").embed(texts, "en")
    model = Cr5Model.load(tmp_path / "m")
    got = model.embed(texts, "en")
    np.testing.assert_allclose(got[[0, 2]], plain[[0, 2]] - offset, rtol=1e-6)
    assert not got[1].any()
    np.testing.assert_array_equal(
        model.embed(["katze"], "de"), Cr5Model.load(tmp_path / "plain").embed(["katze"], "de")
    )
    # the batch path the embed stage, the evaluation and Spark ML use gives the same rows
    vectors, _, _ = embed_arrays(model, pa.array(texts), pa.array(["en"] * 3), normalize=False)
    np.testing.assert_allclose(np.asarray(vectors), got, rtol=1e-6)
    maps["en"].offset = np.zeros(4, dtype=np.float32)
    with pytest.raises(ModelError, match="offset has shape"):
        save_model(tmp_path / "bad", maps, {"r": 3, "lam": 1.0, "preprocessing": {"text": {}}})
