"""Stage ingest_wikipedia on Spark: real dump samples to ``documents``, concept ids from
every source, and bad input counted, located, tolerated or refused with nothing written."""

from __future__ import annotations

import dataclasses
import json
import pickle
import types
from pathlib import Path

import pytest

from pipeline.errors import InputDataError
from pipeline.io.datasets import read_dataset, read_manifest
from pipeline.io.schemas import DOCUMENTS
from pipeline.stages.ingest_wikipedia import plan_work, run, run_wikipedia
from pipeline.wikipedia import dump
from pipeline.wikipedia.config import WikipediaConfig
from tests.conftest import DATA
from tests.test_wikipedia_wikitext import LEFTOVER

WIKI = DATA / "wiki"
HAND = WIKI / "handmade"
FAIL = WIKI / "failures"
EN = str(WIKI / "enwiki-sample-pages-articles.xml.bz2")
EN_MULTI = str(WIKI / "enwiki-sample-pages-articles-multistream.xml.bz2")
EN_INDEX = str(WIKI / "enwiki-sample-pages-articles-multistream-index.txt.bz2")
BG = str(WIKI / "bgwiki-latest-pages-articles-shortened.xml.bz2")
DE = str(HAND / "dewiki-sample-pages-articles.xml")
ITEMS_SQL = str(HAND / "wikidatawiki-sample-wb_items_per_site.sql.gz")
ENTITIES_JSON = str(HAND / "wikidata-sample-entities.json")


def docs_at(spark, path):
    rows = read_dataset(spark, DOCUMENTS, path).collect()
    return {(r.lang, r.title): r.asDict() for r in rows}


def test_plan_splits_a_multistream_dump():
    cfg = WikipediaConfig(
        dumps={"en": EN_MULTI, "de": f"{DE},{EN}"},
        multistream_index={"en": EN_INDEX},
        split_bytes=200_000,
        dbname={"de": "*"},  # EN is an enwiki dump: accepted for "de" only by this override
        split_single_stream=False,
    )
    items = plan_work(cfg)
    en = [it for it in items if it.lang == "en"]
    assert len(en) == 3 and en[0].start == dump.read_index_offsets(EN_INDEX)[0]
    assert dict(en[0].namespaces)[14] == "Category"
    assert [it.path for it in items if it.lang == "de"] == [DE, EN]
    assert pickle.loads(pickle.dumps(items)) == items  # shipped to executors


@pytest.mark.slow
def test_stage_writes_documents_with_wikidata_ids(spark, make_config):
    base = make_config()
    wiki = WikipediaConfig(
        dumps={"en": EN_MULTI, "bg": BG, "de": DE},
        multistream_index={"en": EN_INDEX},
        split_bytes=200_000,
        wikidata_sitelinks=ITEMS_SQL,
    )
    cfg = types.SimpleNamespace(wikipedia=wiki, paths=base.paths, spark=base.spark)
    report = run(spark, cfg)
    path = base.paths.dataset("documents")
    docs = docs_at(spark, path)

    assert report["work_items"] == 5
    en = report["per_language"]["en"]
    assert (en["pages_read"], en["kept"], en["dropped"], en["malformed"]) == (69, 9, 60, 0)
    assert report["dropped_by_reason"]["en"] == {
        "redirect": 54,
        "disambiguation": 5,
        "namespace": 1,
    }
    assert report["dropped_by_reason"]["de"] == {"redirect": 1, "disambiguation": 1, "namespace": 1}
    assert report["per_language"]["bg"]["kept"] == 1
    assert report["concepts"]["without_concept"] == {"en": 4}
    assert report["documents_per_language"] == {"bg": 1, "de": 5, "en": 5}
    assert report["documents"] == 11 and report["n_concepts"] == 6

    assert docs[("en", "Anarchism")]["concept_id"] == "Q6199"
    assert docs[("de", "Anarchismus")]["concept_id"] == "Q6199"
    assert docs[("bg", "Григориански календар")]["concept_id"] == "Q12138"
    assert docs[("en", "Anarchism")]["doc_id"] == "enwiki:12"
    assert ("de", "Anarchie") not in docs and ("de", "Ada") not in docs
    for (lang, title), d in docs.items():
        left = [m.group() for m in LEFTOVER.finditer(d["text"])]
        assert not left, (lang, title, left[:5])
    assert docs[("de", "Anarchismus")]["text"].startswith(
        "Der Anarchismus (von altgriechisch anarchía „Herrschaftslosigkeit“) ist eine "
        "politische Ideenlehre – sie lehnt Herrschaft ab."
    )
    manifest = read_manifest(spark, DOCUMENTS, path)
    assert manifest["report"]["per_language"]["en"]["documents"] == 5
    json.dumps(manifest)  # the report is JSON


@pytest.mark.slow
def test_json_sitelinks_plus_inline_links(spark, tmp_path):
    wiki = WikipediaConfig(
        dumps={"en": EN, "de": DE},
        wikidata_sitelinks=ENTITIES_JSON,
        inline_langlinks=True,
    )
    report = run_wikipedia(spark, wiki, str(tmp_path / "documents"), 2)
    docs = docs_at(spark, str(tmp_path / "documents"))
    assert docs[("de", "Autismus")]["concept_id"] == "Q38404"
    # Albedo has no Wikidata entry in the JSON sample: the inline link [[en:Albedo]] of
    # the German page joins the two into one component.
    assert docs[("de", "Albedo")]["concept_id"] == docs[("en", "Albedo")]["concept_id"]
    assert docs[("en", "Albedo")]["concept_id"] == "ll:de:102"
    # A page that no link reaches has no concept.
    assert ("en", "Actrius") not in docs
    assert report["concepts"]["wikidata_sitelinks"]["rows"] == 8
    assert report["concepts"]["without_concept"]["en"] >= 4


@pytest.mark.slow
def test_langlinks_components_and_conflicts(spark, tmp_path):
    # en "A" (290) links to de "Anarchie", a redirect to "Anarchismus": its component
    # then holds two English articles, a conflict resolved by the smallest page id.
    extra = tmp_path / "enwiki-langlinks.sql"
    extra.write_text(
        "CREATE TABLE `langlinks` (\n  `ll_from` int(8) unsigned NOT NULL DEFAULT 0,\n"
        "  `ll_lang` varbinary(35) NOT NULL DEFAULT '',\n"
        "  `ll_title` varbinary(255) NOT NULL DEFAULT ''\n) ENGINE=InnoDB;\n"
        "INSERT INTO `langlinks` VALUES (12,'de','Anarchismus'),(25,'de','Autismus'),"
        "(290,'de','Anarchie');\n",
        encoding="utf-8",
    )
    wiki = WikipediaConfig(
        dumps={"en": EN, "de": DE},
        langlinks={"en": str(extra), "de": str(HAND / "dewiki-sample-langlinks.sql")},
    )
    report = run_wikipedia(spark, wiki, str(tmp_path / "documents"), 2)
    docs = docs_at(spark, str(tmp_path / "documents"))
    assert docs[("en", "Anarchism")]["concept_id"] == docs[("de", "Anarchismus")]["concept_id"]
    assert ("en", "A") not in docs
    assert report["concepts"]["conflicts"] == {"same_concept_same_language": 1}
    assert report["concepts"]["conflict_examples"][0]["title"] == "A"
    assert docs[("en", "Achilles")]["concept_id"] == docs[("de", "Achilleus")]["concept_id"]

    strict = dataclasses.replace(wiki, on_conflict="error")
    with pytest.raises(InputDataError, match="share a concept.*on_conflict=keep_first"):
        run_wikipedia(spark, strict, str(tmp_path / "strict"), 2)
    assert not (tmp_path / "strict").exists()


# --------------------------------------------------------------------------- bad input


def assert_nothing_written(parent, name):
    assert not (parent / name).exists()
    assert not [p for p in parent.iterdir() if p.name.startswith(f".{name}.")]


@pytest.mark.slow
def test_malformed_pages_fail_with_location_or_are_tolerated(spark, tmp_path):
    bad = str(FAIL / "dewiki-malformed-pages-articles.xml")
    wiki = WikipediaConfig(dumps={"de": bad}, on_missing_concept="own_id")
    with pytest.raises(InputDataError) as err:
        run_wikipedia(spark, wiki, str(tmp_path / "documents"), 2)
    msg = str(err.value)
    assert "2 malformed unit(s) in 8 pages read" in msg
    # The page (title and id) and the file byte; a plain .xml file has no bz2 wording.
    assert f"malformed_xml: page 'Albedo' (id 102) in {bad} at byte 2979" in msg
    assert "unknown_namespace: page 'Kategorie:Philosophie' (id 105)" in msg
    assert "bz2" not in msg
    assert "malformed_xml" in msg and "unknown_namespace" in msg and "Nothing was written" in msg
    assert_nothing_written(tmp_path, "documents")

    tolerant = dataclasses.replace(wiki, max_malformed_fraction=0.3)
    report = run_wikipedia(spark, tolerant, str(tmp_path / "documents"), 2)
    assert report["malformed_by_kind"]["de"] == {"malformed_xml": 1, "unknown_namespace": 1}
    assert report["per_language"]["de"]["broken_markup"] == 1
    (broken,) = report["broken_markup_examples"]
    assert broken["title"] == "Achilleus" and bad in broken["location"]
    docs = docs_at(spark, str(tmp_path / "documents"))
    assert docs[("de", "Achilleus")]["concept_id"] == "dewiki:107"
    assert "{{" not in docs[("de", "Achilleus")]["text"]

    strict_markup = dataclasses.replace(tolerant, max_broken_markup_fraction=0.0)
    with pytest.raises(InputDataError, match="(?s)broken markup.*Achilleus"):
        run_wikipedia(spark, strict_markup, str(tmp_path / "documents"), 2)
    # The dataset published by the tolerant run is untouched.
    assert len(docs_at(spark, str(tmp_path / "documents"))) == len(docs)


@pytest.mark.slow
def test_truncated_streams(spark, tmp_path):
    offsets = dump.read_index_offsets(EN_INDEX)
    cut = tmp_path / "enwiki-cut-multistream.xml.bz2"
    cut.write_bytes(Path(EN_MULTI).read_bytes()[: (offsets[3] + offsets[4]) // 2])
    wiki = WikipediaConfig(
        dumps={"en": str(cut), "de": str(FAIL / "dewiki-truncated-pages-articles.xml.bz2")},
        multistream_index={"en": EN_INDEX},
        split_bytes=1,
        on_missing_concept="own_id",
    )
    with pytest.raises(InputDataError) as err:
        plan_work(wiki)
    assert "beyond the end" in str(err.value)

    wiki = dataclasses.replace(wiki, multistream_index={})
    with pytest.raises(InputDataError, match=r"(?s)truncated_stream.*bz2 stream byte"):
        run_wikipedia(spark, wiki, str(tmp_path / "documents"), 2)
    assert_nothing_written(tmp_path, "documents")

    tolerant = dataclasses.replace(wiki, max_malformed_fraction=1.0)
    with pytest.raises(InputDataError, match="no documents for language.s. de"):
        run_wikipedia(spark, tolerant, str(tmp_path / "documents"), 2)
    tolerant = dataclasses.replace(tolerant, on_empty_language="warn")
    report = run_wikipedia(spark, tolerant, str(tmp_path / "documents"), 2)
    assert report["empty_languages"] == ["de"]
    assert report["malformed_by_kind"] == {
        "de": {"truncated_stream": 1},
        "en": {"truncated_stream": 1},
    }
    assert report["per_language"]["en"]["pages_read"] == 31  # 3 streams + the lost one
    ex = {e["lang"]: e for e in report["malformed_examples"]}
    # Without its index the file is split at bz2 blocks: the broken one is the first block
    # of the fourth stream (4 bytes after the stream's "BZh9" header).
    assert f"in the bz2 block at file bit {(offsets[3] + 4) * 8} " in ex["en"]["location"]
    assert report["documents_per_language"] == {"en": 3}  # Anarchism, Autism, Albedo


@pytest.mark.slow
def test_bad_sitelinks_line(spark, tmp_path):
    bad = str(FAIL / "wb_items_per_site-bad-line.sql")
    wiki = WikipediaConfig(dumps={"de": DE}, wikidata_sitelinks=bad)
    with pytest.raises(InputDataError) as err:
        run_wikipedia(spark, wiki, str(tmp_path / "documents"), 2)
    offset = Path(bad).read_bytes().index(b"INSERT INTO `wb_items_per_site` VALUES (9,")
    assert f"{bad} at byte {offset}" in str(err.value)
    assert_nothing_written(tmp_path, "documents")

    tolerant = dataclasses.replace(wiki, max_malformed_fraction=0.5)
    report = run_wikipedia(spark, tolerant, str(tmp_path / "documents"), 2)
    assert report["concepts"]["wikidata_sitelinks"]["malformed"] == 1
    assert report["documents_per_language"] == {"de": 3}  # the bad line's items are lost


def test_configuration_errors(spark, tmp_path):
    with pytest.raises(InputDataError, match="wikipedia.dumps is empty"):
        plan_work(WikipediaConfig())
    with pytest.raises(InputDataError, match=r"wikipedia.dumps.en: .*nope.xml.bz2 does not exist"):
        plan_work(WikipediaConfig(dumps={"en": str(tmp_path / "nope.xml.bz2")}))
    with pytest.raises(InputDataError, match="no documents left"):
        run_wikipedia(spark, WikipediaConfig(dumps={"bg": BG}), str(tmp_path / "d"), 2)
    assert_nothing_written(tmp_path, "d")


@pytest.mark.slow
@pytest.mark.skipif(
    "ingest_wikipedia" not in __import__("pipeline.stages").stages.STAGES,
    reason="stage ingest_wikipedia is not registered in pipeline/stages/__init__.py yet",
)
def test_job_entry_point(spark, tmp_path, capsys):
    from pipeline.runner import main

    argv = [
        "--set",
        f"paths.root={tmp_path / 'out'}",
        "--set",
        "spark.shuffle_partitions=2",
        "--set",
        f"wikipedia.dumps={{de: {DE}}}",
        "--set",
        f"wikipedia.wikidata_sitelinks={ITEMS_SQL}",
    ]
    assert main(["ingest_wikipedia"], argv) == 0
    assert "== ingest_wikipedia" in capsys.readouterr().out
    assert len(docs_at(spark, str(tmp_path / "out" / "documents"))) == 5
    bad = [*argv[:4], "--set", f"wikipedia.dumps={{de: {tmp_path / 'missing.xml'}}}"]
    assert main(["ingest_wikipedia"], bad) == 2
    assert "does not exist" in capsys.readouterr().err
