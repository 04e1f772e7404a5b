"""Stage ingest: formats, derived ids, and clear errors on bad input."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.errors import ConfigError, InputDataError
from pipeline.io.datasets import read_dataset, read_manifest
from pipeline.io.schemas import DOCUMENTS
from pipeline.stages.ingest import run as ingest

GOOD = [
    {"concept_id": "c1", "lang": "EN ", "title": "One", "text": "first document"},
    {"concept_id": "c1", "lang": "de", "title": "Eins", "text": "erstes Dokument"},
    {"concept_id": "c2", "lang": "en", "title": "Two", "text": "second document"},
]


def jsonl(path, records):
    path.write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8"
    )
    return path


def docs_of(spark, cfg):
    return sorted(
        (
            r.asDict()
            for r in read_dataset(spark, DOCUMENTS, cfg.paths.dataset("documents")).collect()
        ),
        key=lambda r: r["doc_id"],
    )


def test_jsonl_derives_doc_id_and_normalises_lang(spark, make_config, tmp_path):
    cfg = make_config(f"ingest.input={jsonl(tmp_path / 'c.jsonl', GOOD)}")
    report = ingest(spark, cfg)
    docs = docs_of(spark, cfg)
    assert [d["doc_id"] for d in docs] == ["de:c1", "en:c1", "en:c2"]
    assert report["documents_per_language"] == {"de": 1, "en": 2}
    assert report["concepts"] == 2


def test_tsv_and_parquet_inputs(spark, make_config, tmp_path):
    tsv = tmp_path / "c.tsv"
    tsv.write_text(
        "doc_id\tconcept_id\tlang\ttitle\ttext\n"
        "a\tc1\ten\tOne\tfirst doc\nb\tc1\tfr\tUn\tpremier doc\n",
        encoding="utf-8",
    )
    cfg = make_config(f"ingest.input={tsv}")
    ingest(spark, cfg)
    assert [d["doc_id"] for d in docs_of(spark, cfg)] == ["a", "b"]

    pq.write_table(pa.Table.from_pylist(GOOD), tmp_path / "c.parquet")
    cfg = make_config(f"ingest.input={tmp_path / 'c.parquet'}")
    ingest(spark, cfg)
    assert len(docs_of(spark, cfg)) == 3


def test_missing_columns(spark, make_config, tmp_path):
    path = jsonl(tmp_path / "c.jsonl", [{"concept_id": "c1", "text": "no language"}])
    with pytest.raises(InputDataError, match=r"lacks required column\(s\) \['lang'\]"):
        ingest(spark, make_config(f"ingest.input={path}"))


def test_empty_text_dropped_and_reported_or_error(spark, make_config, tmp_path):
    path = jsonl(tmp_path / "c.jsonl", [*GOOD, {"concept_id": "c3", "lang": "en", "text": "  "}])
    cfg = make_config(f"ingest.input={path}")
    report = ingest(spark, cfg)
    assert report["dropped"]["empty_text"] == 1
    assert report["empty_text_examples"][0]["concept_id"] == "c3"
    with pytest.raises(InputDataError, match="(?s)1 record.*empty text.*c3.*on_empty_text=drop"):
        ingest(spark, make_config(f"ingest.input={path}", "ingest.on_empty_text=error"))


def test_duplicate_concept_lang_keeps_one_deterministically(spark, make_config, tmp_path):
    dup = [
        {"doc_id": "z", "concept_id": "c1", "lang": "en", "text": "later"},
        {"doc_id": "a", "concept_id": "c1", "lang": "en", "text": "kept"},
        {"doc_id": "m", "concept_id": "c1", "lang": "de", "text": "andere"},
    ]
    path = jsonl(tmp_path / "c.jsonl", dup)
    cfg = make_config(f"ingest.input={path}")
    report = ingest(spark, cfg)
    assert report["dropped"]["duplicate_concept_lang"] == 1
    assert [(d["doc_id"], d["text"]) for d in docs_of(spark, cfg)] == [
        ("a", "kept"),
        ("m", "andere"),
    ]
    manifest = read_manifest(spark, DOCUMENTS, cfg.paths.dataset("documents"))
    assert manifest["report"]["dropped"]["duplicate_concept_lang"] == 1
    with pytest.raises(InputDataError, match="duplicate.*on_duplicate=keep_first"):
        ingest(spark, make_config(f"ingest.input={path}", "ingest.on_duplicate=error"))


def test_duplicate_doc_ids_are_an_error(spark, make_config, tmp_path):
    path = jsonl(
        tmp_path / "c.jsonl",
        [
            {"doc_id": "x", "concept_id": "c1", "lang": "en", "text": "a"},
            {"doc_id": "x", "concept_id": "c2", "lang": "en", "text": "b"},
        ],
    )
    with pytest.raises(InputDataError, match="doc_id value.*more than once.*'x'"):
        ingest(spark, make_config(f"ingest.input={path}"))


def test_wrong_encoding_is_named_with_fix(spark, make_config, tmp_path):
    path = tmp_path / "latin.jsonl"
    path.write_bytes('{"concept_id": "c1", "lang": "fr", "text": "café crème"}\n'.encode("latin-1"))
    with pytest.raises(InputDataError, match="(?s)latin.jsonl.*not valid utf-8.*ingest.encoding"):
        ingest(spark, make_config(f"ingest.input={path}"))
    cfg = make_config(f"ingest.input={path}", "ingest.encoding=latin-1")
    ingest(spark, cfg)
    assert docs_of(spark, cfg)[0]["text"] == "café crème"


def test_latin1_tsv_and_legitimate_replacement_characters(spark, make_config, tmp_path):
    tsv = tmp_path / "latin.tsv"
    tsv.write_bytes("concept_id\tlang\ttext\nc1\tfr\tthé glacé\n".encode("latin-1"))
    with pytest.raises(InputDataError, match="(?s)latin.tsv.*not valid utf-8.*ingest.encoding"):
        ingest(spark, make_config(f"ingest.input={tsv}"))
    cfg = make_config(f"ingest.input={tsv}", "ingest.encoding=latin-1")
    ingest(spark, cfg)
    assert docs_of(spark, cfg)[0]["text"] == "thé glacé"
    # U+FFFD written as proper UTF-8 is text, not an encoding error.
    ok = jsonl(tmp_path / "fffd.jsonl", [{"concept_id": "c1", "lang": "en", "text": "char \ufffd"}])
    cfg = make_config(f"ingest.input={ok}")
    ingest(spark, cfg)
    assert docs_of(spark, cfg)[0]["text"] == "char \ufffd"


def test_unknown_encoding_is_a_config_error(make_config):
    with pytest.raises(ConfigError, match="ingest.encoding 'klingon'"):
        make_config("ingest.encoding=klingon")


def test_malformed_json_record(spark, make_config, tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps(GOOD[0]) + '\n{"concept_id": "c9", "lang": \n')
    with pytest.raises(InputDataError, match=r"(?s)c\.jsonl: 1 malformed jsonl record.*c9"):
        ingest(spark, make_config(f"ingest.input={path}"))


def test_blank_keys_and_bad_language_codes(spark, make_config, tmp_path):
    path = jsonl(tmp_path / "c.jsonl", [*GOOD, {"concept_id": "", "lang": "en", "text": "x"}])
    with pytest.raises(InputDataError, match="empty concept_id or lang"):
        ingest(spark, make_config(f"ingest.input={path}"))
    path = jsonl(tmp_path / "d.jsonl", [*GOOD, {"concept_id": "c5", "lang": "en/us", "text": "x"}])
    with pytest.raises(InputDataError, match="(?s)invalid language code.*en/us"):
        ingest(spark, make_config(f"ingest.input={path}"))


def test_missing_input_and_unknown_format(spark, make_config, tmp_path):
    with pytest.raises(InputDataError, match="does not exist"):
        ingest(spark, make_config(f"ingest.input={tmp_path / 'nope.jsonl'}"))
    odd = tmp_path / "corpus.xml"
    odd.write_text("<x/>")
    with pytest.raises(InputDataError, match="set ingest.format"):
        ingest(spark, make_config(f"ingest.input={odd}"))


def test_language_selection(spark, make_config, tmp_path):
    cfg = make_config(f"ingest.input={jsonl(tmp_path / 'c.jsonl', GOOD)}", "ingest.languages=[de]")
    report = ingest(spark, cfg)
    assert report["documents_per_language"] == {"de": 1}
    assert report["dropped"]["language_not_selected"] == 2
