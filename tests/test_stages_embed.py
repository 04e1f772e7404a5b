"""Embedding: Spark job == Python API == TF-IDF @ Φ; CLI; original-format import."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.config import load_config
from pipeline.errors import InputDataError, ModelError
from pipeline.io.datasets import read_dataset, read_manifest
from pipeline.io.schemas import EMBEDDINGS
from pipeline.model import Cr5Model, LanguageMap, save_model
from pipeline.model.pretrained import import_pretrained, read_word_vectors
from pipeline.stages import get_stage
from tests.conftest import REPO

TEXTS = {
    "en": ["The cat and the dog", "a dog, a house!", "nothing known here", "Cat CAT cat", ""],
    "de": ["Die Katze im Haus", "Hund und Katze", "Unbekannt"],
    "xx": ["a language the model does not know"],
}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    rng = np.random.default_rng(3)
    terms = {"en": ["cat", "dog", "house", "a", "the"], "de": ["katze", "hund", "haus", "die"]}
    maps = {
        lang: LanguageMap(
            terms=pa.array(t),
            idf=rng.uniform(0.2, 3, len(t)).astype(np.float32),
            df=np.ones(len(t), np.int64),
            phi=rng.normal(size=(len(t), 4)).astype(np.float32),
        )
        for lang, t in terms.items()
    }
    path = tmp_path_factory.mktemp("m") / "model"
    save_model(path, maps, {"r": 4, "lam": 1.0, "preprocessing": {"text": {}}})
    return path


@pytest.mark.parametrize("direct", [True, False])
def test_spark_job_equals_api_and_skips_unknown_languages(spark, model_dir, tmp_path, direct):
    """Both writers (executors writing Parquet from Arrow, Spark's writer): the API's
    vectors to the bit."""
    rows = [
        {"doc_id": f"{lang}{i}", "lang": lang, "text": t}
        for lang, texts in TEXTS.items()
        for i, t in enumerate(texts)
    ]
    src = tmp_path / "docs.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = load_config(
        [REPO / "conf/local.yaml"],
        [
            f"paths.root={tmp_path}/out",
            f"paths.model={model_dir}",
            f"embed.input={src}",
            "embed.batch_rows=2",
            "spark.shuffle_partitions=2",
            f"embed.direct_write={str(direct).lower()}",
        ],
    )
    report = get_stage("embed")(spark, cfg)
    assert report["writer"] == ("executors (Arrow to Parquet)" if direct else "spark")
    assert report["reader"] == "spark"  # JSON Lines: Spark's reader
    assert report["skipped_languages"] == {"xx": 1}
    assert report["per_language"]["en"] == {"documents": 5, "zero_vectors": 2}
    got = {
        r["doc_id"]: r
        for r in read_dataset(spark, EMBEDDINGS, cfg.paths.dataset("embeddings")).collect()
    }
    model = Cr5Model.load(model_dir)
    for lang in ("en", "de"):
        api, counts = model.embed_with_counts(TEXTS[lang], lang)
        for i in range(len(TEXTS[lang])):
            row = got[f"{lang}{i}"]
            np.testing.assert_array_equal(np.asarray(row["vector"], np.float32), api[i])
            assert row["n_terms"] == counts[i]
            assert row["concept_id"] is None
    assert "xx0" not in got
    assert (
        read_manifest(spark, EMBEDDINGS, cfg.paths.dataset("embeddings"))["report"]["documents"]
        == 8
    )


def test_embed_job_errors(spark, model_dir, tmp_path):
    src = tmp_path / "docs.jsonl"
    src.write_text(json.dumps({"doc_id": "a", "lang": "xx", "text": "t"}) + "\n")
    cfg = load_config(
        [REPO / "conf/local.yaml"],
        [f"paths.root={tmp_path}/out", f"paths.model={model_dir}", f"embed.input={src}"],
    )
    with pytest.raises(InputDataError, match="no document is in a language of the model"):
        get_stage("embed")(spark, cfg)
    src.write_text(json.dumps({"id": "a", "lang": "en", "text": "t"}) + "\n")
    with pytest.raises(InputDataError, match=r"lacks column\(s\) \['doc_id'\]"):
        get_stage("embed")(spark, cfg)
    bad = load_config(
        [REPO / "conf/local.yaml"],
        [f"paths.root={tmp_path}/out", f"paths.model={tmp_path}/nomodel", f"embed.input={src}"],
    )
    with pytest.raises(ModelError, match="does not exist"):
        get_stage("embed")(spark, bad)

    from tests.test_model import make_selection_model

    make_selection_model(tmp_path / "untranslated")
    sparse = load_config(
        [REPO / "conf/local.yaml"],
        [
            f"paths.root={tmp_path}/out",
            f"paths.model={tmp_path}/untranslated",
            f"embed.input={src}",
        ],
    )
    with pytest.raises(ModelError, match="sparse vectors"):
        get_stage("embed")(spark, sparse)


def test_cli_jsonl_and_npy(model_dir, tmp_path):
    texts = "\n".join(TEXTS["de"]) + "\n"
    out = subprocess.run(
        [sys.executable, "-m", "pipeline", "embed", "--model", str(model_dir), "--lang", "de"],
        input=texts,
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    ).stdout.splitlines()
    api, counts = Cr5Model.load(model_dir).embed_with_counts(TEXTS["de"], "de")
    recs = [json.loads(line) for line in out]
    assert [r["line"] for r in recs] == [0, 1, 2]
    assert [r["n_terms"] for r in recs] == counts.tolist()
    np.testing.assert_allclose([r["vector"] for r in recs], api, rtol=1e-6, atol=1e-7)

    (tmp_path / "in.txt").write_text(texts)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline",
            "embed",
            "--model",
            str(model_dir),
            "--lang",
            "de",
            "--input",
            str(tmp_path / "in.txt"),
            "--output",
            str(tmp_path / "v.npy"),
            "--batch",
            "2",
        ],
        check=True,
        cwd=REPO,
    )
    np.testing.assert_array_equal(np.load(tmp_path / "v.npy", allow_pickle=False), api)
    err = subprocess.run(
        [sys.executable, "-m", "pipeline", "embed", "--model", str(model_dir), "--lang", "it"],
        input="ciao\n",
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert err.returncode == 2 and "'it' is not in this model; its languages are: en, de" in (
        err.stderr
    )


def write_original(path, words, vectors, trailing_space=False):
    with gzip.open(path, "wt", encoding="utf-8") as f:
        for w, v in zip(words, vectors):
            f.write(
                w + " " + " ".join(f"{x:.6f}" for x in v) + (" " if trailing_space else "") + "\n"
            )


def test_import_original_format(tmp_path):
    rng = np.random.default_rng(0)
    en_words = ["house", "Dog", "dog", "hello-world", "cat"]
    en = rng.normal(size=(5, 6)).astype(np.float32)
    de = rng.normal(size=(3, 6)).astype(np.float32)
    write_original(tmp_path / "en.txt.gz", en_words, en)
    write_original(tmp_path / "de.txt.gz", ["haus", "hund", "katze"], de, trailing_space=True)
    words, vecs = read_word_vectors(tmp_path / "de.txt.gz")
    assert words.to_pylist() == ["haus", "hund", "katze"] and vecs.shape == (3, 6)
    np.testing.assert_allclose(vecs, de, atol=1e-6)

    pq.write_table(
        pa.table({"lang": ["en", "en"], "term": ["house", "cat"], "idf": [2.0, 0.5]}),
        tmp_path / "vocab.parquet",
    )
    report = import_pretrained(
        {"en": tmp_path / "en.txt.gz", "de": tmp_path / "de.txt.gz"},
        tmp_path / "model",
        idf_from=str(tmp_path / "vocab.parquet"),
    )
    assert report["en"]["dropped_not_one_token"] == 1  # hello-world is two tokens
    assert report["en"]["dropped_duplicate_after_normalisation"] == 1  # Dog/dog
    model = Cr5Model.load(tmp_path / "model")
    terms, phi = model.word_vectors("en")
    assert terms == ["house", "dog", "cat"]
    np.testing.assert_allclose(phi, en[[0, 1, 4]], atol=1e-6)
    idf = dict(zip(terms, model._map("en").idf))
    assert idf == {"house": 2.0, "dog": 2.0, "cat": 0.5}  # unknown word: the max idf
    # Embedding = L2-normalised tf-idf @ word vectors.
    x = np.array([2 * 2.0, 0, 0.5])
    expected = (x / np.linalg.norm(x)) @ en[[0, 1, 4]]
    np.testing.assert_allclose(model.embed(["house house cat"], "en")[0], expected, rtol=1e-5)


def test_import_rejects_wrong_dimensions(tmp_path):
    with gzip.open(tmp_path / "bad.txt.gz", "wt") as f:
        f.write("a 1 2 3\nb 1 2\n")
    with pytest.raises(InputDataError, match="bad.txt.gz: not in the original Cr5 format"):
        read_word_vectors(tmp_path / "bad.txt.gz")
    write_original(tmp_path / "en.txt.gz", ["a"], np.ones((1, 3)))
    write_original(tmp_path / "de.txt.gz", ["b"], np.ones((1, 4)))
    with pytest.raises(InputDataError, match="different dimensions"):
        import_pretrained(
            {"en": tmp_path / "en.txt.gz", "de": tmp_path / "de.txt.gz"}, tmp_path / "m"
        )
    with gzip.open(tmp_path / "words.txt.gz", "wt") as f:
        f.write("onlyaword\n")
    with pytest.raises(InputDataError, match="no vector values"):
        read_word_vectors(tmp_path / "words.txt.gz")


def _parquet_inputs(tmp_path):
    """The same documents twice: hive-partitioned by language with integer ids (plus a
    manifest and a hidden directory a reader must skip), and one flat file with
    untidy language codes, concept ids and several row groups."""
    import os

    hive = tmp_path / "hive"
    for lang, texts in TEXTS.items():
        ids = [1000 * (1 + list(TEXTS).index(lang)) + i for i in range(len(texts))]
        os.makedirs(hive / f"lang={lang}")
        pq.write_table(
            pa.table({"doc_id": pa.array(ids, pa.int64()), "text": texts}),
            hive / f"lang={lang}" / "part-0.parquet",
            row_group_size=2,
        )
    (hive / "_manifest.json").write_text("{}")
    os.makedirs(hive / ".tmp-x" / "lang=en")
    pq.write_table(
        pa.table({"doc_id": pa.array([9], pa.int64()), "text": ["cat"]}),
        hive / ".tmp-x" / "lang=en" / "part-0.parquet",
    )
    codes = {"en": " EN", "de": "De", "xx": "xx"}
    rows = [
        (f"{lang}{i}", codes[lang], f"c{i}", t)
        for lang, texts in TEXTS.items()
        for i, t in enumerate(texts)
    ]
    flat = tmp_path / "flat.parquet"
    pq.write_table(
        pa.table(
            {
                k: [r[j] for r in rows]
                for j, k in enumerate(("doc_id", "lang", "concept_id", "text"))
            }
        ),
        flat,
        row_group_size=3,
    )
    return {"hive": hive, "flat": flat}


@pytest.mark.parametrize("layout", ["hive", "flat"])
def test_direct_read_equals_spark_reader(spark, model_dir, tmp_path, layout):
    """The executors reading Parquet with pyarrow give the dataset Spark's reader gives:
    same rows, vectors to the bit, partition columns from directory names, hidden and
    underscore names skipped, ids cast to strings, language codes canonical."""
    src = _parquet_inputs(tmp_path)[layout]
    got = {}
    for direct in (True, False):
        cfg = load_config(
            [REPO / "conf/local.yaml"],
            [
                f"paths.root={tmp_path}/out_{direct}",
                f"paths.model={model_dir}",
                f"embed.input={src}",
                "embed.batch_rows=2",
                f"embed.direct_read={str(direct).lower()}",
            ],
        )
        report = get_stage("embed")(spark, cfg)
        assert report["reader"] == ("executors (pyarrow)" if direct else "spark")
        assert report["skipped_languages"] == {"xx": 1}
        assert report["per_language"]["en"] == {"documents": 5, "zero_vectors": 2}
        got[direct] = sorted(
            (r["doc_id"], r["lang"], r["concept_id"], r["n_terms"], tuple(r["vector"]))
            for r in read_dataset(spark, EMBEDDINGS, cfg.paths.dataset("embeddings")).collect()
        )
    assert len(got[True]) == 8
    assert got[True] == got[False]
    if layout == "hive":
        assert {row[0] for row in got[True]} == {f"{1000 + i}" for i in range(5)} | {
            f"{2000 + i}" for i in range(3)
        }


def test_plan_scan_packs_row_groups_like_spark(tmp_path):
    """Every row group exactly once, in file order, packed into about one task per core
    when small; partition values from the directory names."""
    from pipeline.io.arrow_scan import OPEN_COST_BYTES, plan_scan, read_pieces

    hive = _parquet_inputs(tmp_path)["hive"]
    tasks = plan_scan(str(hive), parallelism=2)
    pieces = [p for task in tasks for p in task]
    # en: 5 rows in groups of 2 -> 3 groups, de: 2, xx: 1; the hidden directory is skipped.
    assert len(pieces) == 6
    assert {(p.path, p.row_group) for p in pieces} == {
        (str(hive / f"lang={lang}" / "part-0.parquet"), i)
        for lang, n in (("de", 2), ("en", 3), ("xx", 1))
        for i in range(n)
    }
    assert all(p.bytes == OPEN_COST_BYTES for p in pieces)  # tiny groups cost the open cost
    assert [len(t) for t in tasks] == [3, 3]
    rows = [
        (b.column("doc_id")[i].as_py(), b.column("lang")[i].as_py())
        for b in read_pieces(pieces, ["doc_id", "lang", "concept_id"], batch_rows=1)
        for i in range(b.num_rows)
    ]
    assert sorted(rows) == sorted(
        (1000 * (1 + list(TEXTS).index(lang)) + i, lang)
        for lang, texts in TEXTS.items()
        for i in range(len(texts))
    )
    assert len(plan_scan(str(hive), parallelism=6)) == 6
    assert len(plan_scan(str(hive), parallelism=1)) == 1


def test_direct_write_keeps_only_the_reported_files(tmp_path):
    """Files of failed or speculative task attempts are deleted before the commit."""
    from pipeline.io.embedding_writer import keep_reported_files

    for rel in ("lang=en/part-3-00000-0.parquet", "lang=en/part-3-00000-1.parquet", "lang=de/x"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("data")
    removed = keep_reported_files(str(tmp_path), {"lang=en/part-3-00000-1.parquet"})
    assert removed == 2
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert left == ["lang=en/part-3-00000-1.parquet"]


def test_direct_write_checks_the_model_before_publishing(spark, model_dir, tmp_path):
    """The direct write counts languages and verifies the model's checksums during its one
    pass: a corrupted Φ file fails the stage and nothing is published; embed.languages
    selects model languages and reports the others as skipped."""
    import shutil

    src = tmp_path / "docs.jsonl"
    rows = [
        {"doc_id": f"{lang}{i}", "lang": lang, "text": t}
        for lang, texts in TEXTS.items()
        for i, t in enumerate(texts)
    ]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    overrides = [f"paths.root={tmp_path}/out", f"embed.input={src}", "embed.direct_write=true"]
    cfg = load_config(
        [REPO / "conf/local.yaml"], [*overrides, f"paths.model={model_dir}", "embed.languages=[de]"]
    )
    report = get_stage("embed")(spark, cfg)
    assert report["writer"] == "executors (Arrow to Parquet)"
    assert set(report["per_language"]) == {"de"}
    assert report["skipped_languages"] == {"en": len(TEXTS["en"]), "xx": 1}
    manifest = read_manifest(spark, EMBEDDINGS, cfg.paths.dataset("embeddings"))
    assert manifest["rows"] == len(TEXTS["de"])
    assert manifest["rows_by_lang"] == {"de": len(TEXTS["de"])}

    broken = tmp_path / "broken"
    shutil.copytree(model_dir, broken)
    phi = broken / "languages" / "de" / "phi.npy"
    data = bytearray(phi.read_bytes())
    data[-1] ^= 0xFF  # same size, different bytes
    phi.write_bytes(bytes(data))
    bad = load_config([REPO / "conf/local.yaml"], [*overrides, f"paths.model={broken}"])
    with pytest.raises(ModelError, match="SHA-256"):
        get_stage("embed")(spark, bad)
    # The published version is still the first run's.
    assert read_manifest(spark, EMBEDDINGS, cfg.paths.dataset("embeddings"))["rows"] == len(
        TEXTS["de"]
    )
