"""Wikipedia ingestion in many languages: disambiguation pages (wiki templates, templates
of the dump setting __DISAMBIG__, page_props, Wikidata), file links under namespace
aliases and unknown prefixes, dumps checked against their language, single-stream bz2
dumps split at bz2 blocks."""

from __future__ import annotations

import bz2
import dataclasses
import json
import re
from pathlib import Path

import pytest

from pipeline.errors import InputDataError
from pipeline.io.datasets import read_dataset
from pipeline.io.schemas import DOCUMENTS
from pipeline.stages.ingest_wikipedia import plan_work, run_wikipedia
from pipeline.wikipedia import dump, wikis
from pipeline.wikipedia.config import WikipediaConfig
from pipeline.wikipedia.wikitext import CLEANERS, DisambiguationDetector, SiteNames
from tests.conftest import DATA
from tests.test_wikipedia_wikitext import LEFTOVER

WIKI = DATA / "wiki"
MULTI = WIKI / "multilingual"
LANGS = ["el", "vi", "ja", "fr", "ru"]
DUMPS = {lang: str(MULTI / f"{lang}wiki-sample-pages-articles.xml") for lang in LANGS}
BG = str(WIKI / "bgwiki-latest-pages-articles-shortened.xml.bz2")
EN = str(WIKI / "enwiki-sample-pages-articles.xml.bz2")
DE = str(WIKI / "handmade" / "dewiki-sample-pages-articles.xml")

# Image options, file names and captions of the samples: none may reach a document.
FILE_DEBRIS = re.compile(
    r"thumb|\d+px|upright|nhỏ|phải|μικρογραφία|vignette|gauche|мини|справа|左"
    r"|\.(?:jpe?g|png|svg|gif)\b"
    r"|το 2012|Ο Παρθενώνας|năm 1932|Ngọ Môn|本堂|京都御所|à Lyon|basilique|с реки|Красная площадь",
    re.I,
)
# The article of each sample; every other main-namespace page is a disambiguation page
# or a redirect (the Russian article carries a hatnote {{Значения}}, the Greek one a
# template with __DISAMBIG__ inside <noinclude> only: both stay).
ARTICLES = {"el": "Αθήνα", "vi": "Huế", "ja": "京都市", "fr": "Lyon", "ru": "Москва"}


def articles(path, lang):
    info = dump.read_siteinfo(path)
    site = SiteNames.from_namespaces(info.namespaces, lang)
    for p in dump.iter_pages(path):
        if isinstance(p, dump.Page) and p.ns == 0 and p.redirect is None:
            yield p, site


@pytest.mark.parametrize("name", sorted(CLEANERS))
@pytest.mark.parametrize("lang", [*LANGS, "bg"])
def test_no_file_link_debris_in_any_language(lang, name):
    path = BG if lang == "bg" else DUMPS[lang]
    seen = 0
    for page, site in articles(path, lang):
        text = CLEANERS[name](page.text, site).text
        assert not FILE_DEBRIS.findall(text), (lang, page.title, FILE_DEBRIS.findall(text))
        assert not LEFTOVER.findall(text), (lang, page.title, LEFTOVER.findall(text))
        seen += 1
    assert seen >= 1


def test_file_namespace_aliases_and_media_extensions():
    vi = SiteNames.from_namespaces({6: "Tập tin", 14: "Thể loại"}, "vi")
    clean = CLEANERS["fast"]
    # An alias MediaWiki defines for Vietnamese (not in <siteinfo>): shipped data.
    assert clean("A [[Hình:X.jpg|nhỏ|chú thích]] B", vi).text == "A B"
    assert clean("A [[tập_tin:X.jpg|nhỏ|chú thích]] B", vi).text == "A B"
    # An unknown prefix with a media extension is a file link; without one, a link.
    assert clean("A [[Ảnh:Y.webm|nhỏ|phim]] B", vi).text == "A B"
    assert clean("A [[Ảnh:Y|z]] B", vi).text == "A z B"
    # The same alias means nothing on a wiki without it, until configured.
    assert clean("A [[Hình:X|nhỏ]] B", SiteNames.from_namespaces({}, "fr")).text == "A nhỏ B"
    extra = SiteNames.from_namespaces({}, "fr", ["Hình"])
    assert clean("A [[Hình:X|nhỏ]] B", extra).text == "A B"
    # Every shipped wiki's names are recognised with the canonical ones.
    for lang in wikis.shipped_languages():
        names = wikis.file_namespace_names(lang)
        assert {"file", "image", "media"} <= names, lang
    assert len(wikis.shipped_languages()) >= 30


def test_shipped_disambiguation_templates_and_magic_words():
    for lang, marker in {
        "el": "{{αποσαφήνιση}}",
        "vi": "{{Trang định hướng}}",
        "ja": "{{Aimai}}",
        "fr": "{{homonymie|x}}",
        "ru": "{{Неоднозначность}}",
        "de": "{{Begriffsklärung}}",
        "en": "{{Disambiguation|geo}}",
        "zh": "{{消歧義}}",
    }.items():
        detect = DisambiguationDetector(wikis.disambiguation_templates(lang))
        assert detect(f"text\n{marker}"), lang
        assert not detect("{{Other uses}} text"), lang
    detect = DisambiguationDetector(wikis.disambiguation_templates("ko"))
    assert detect("__동음이의__") and not detect("__dISAMBIG__")
    # A local name of the Template namespace as prefix.
    detect = DisambiguationDetector(["Homonymie"], template_prefixes=["template", "Modèle"])
    assert detect("{{Modèle:Homonymie}}") and not detect("{{Wikipédia:Homonymie}}")


def test_dump_language_is_checked():
    with pytest.raises(InputDataError) as err:
        plan_work(WikipediaConfig(dumps={"el": DUMPS["vi"]}))
    msg = str(err.value)
    assert "'viwiki'" in msg and "'elwiki'" in msg and DUMPS["vi"] in msg
    assert "wikipedia.dbname.el=viwiki" in msg
    # A mirror that renamed the wiki: the override names the dbname to expect.
    items = plan_work(WikipediaConfig(dumps={"el": DUMPS["vi"]}, dbname={"el": "viwiki"}))
    assert items[0].dbname == "viwiki"
    assert plan_work(WikipediaConfig(dumps={"bg": BG}))[0].dbname == "bgwiki"
    assert wikis.expected_dbname("zh-min-nan") == "zh_min_nanwiki"
    assert wikis.expected_dbname("be-tarask") == "be_x_oldwiki"


def docs_at(spark, path):
    return {(r.lang, r.title): r.asDict() for r in read_dataset(spark, DOCUMENTS, path).collect()}


@pytest.mark.slow
def test_no_disambiguation_page_kept_in_any_language(spark, tmp_path):
    wiki = WikipediaConfig(dumps={**DUMPS, "bg": BG, "de": DE}, on_missing_concept="own_id")
    report = run_wikipedia(spark, wiki, str(tmp_path / "documents"), 2)
    docs = docs_at(spark, str(tmp_path / "documents"))
    for lang, title in ARTICLES.items():
        assert {t for (lg, t) in docs if lg == lang} == {title}, lang
    # Pages marked by the wiki's own template are dropped while parsing; those marked by a
    # template of the dump that sets __DISAMBIG__ (or a redirect to it) after it.
    assert {lang: report["dropped_by_reason"][lang]["disambiguation"] for lang in LANGS} == {
        "el": 3,
        "vi": 3,
        "ja": 3,
        "fr": 3,
        "ru": 3,
    }
    assert report["disambiguation_after_parse"]["template_magic_word"] == {
        "el": 2,
        "vi": 2,
        "ja": 1,
        "fr": 1,
        "ru": 1,
    }
    assert report["disambiguation_templates_in_dump"] == {
        "el": 2,
        "vi": 2,
        "ja": 1,
        "fr": 1,
        "ru": 1,
    }
    assert report["per_language"]["vi"]["kept"] == 1
    assert report["dbnames"]["ru"] == ["ruwiki"]
    assert report["files"]["el"][DUMPS["el"]] == {"pages": 8, "dbname": "elwiki"}
    for (lang, title), d in docs.items():
        assert not FILE_DEBRIS.findall(d["text"]), (lang, title, FILE_DEBRIS.findall(d["text"]))
        assert not LEFTOVER.findall(d["text"]), (lang, title)
    hue = docs[("vi", "Huế")]["text"]
    # Empty sections are gone ("Chú thích", "Liên kết ngoài" / "Hình ảnh"); the colon link
    # to a category reads as its name; the pipe trick shows the title.
    assert hue.split("\n") == [
        "Huế là một thành phố trực thuộc trung ương ở miền Trung Việt Nam.",
        "Lịch sử",
        "",
        "Huế từng là kinh đô của nhà Nguyễn từ năm 1802 đến năm 1945.",
        "Xem thêm Thành phố của Việt Nam và Sông Hương.",
    ]
    assert "Παραπομπές" not in docs[("el", "Αθήνα")]["text"]
    assert (
        "Εξωτερικοί σύνδεσμοι\n\nΔείτε επίσης Πρωτεύουσες της Ευρώπης."
        in docs[("el", "Αθήνα")]["text"]
    )


def _entity(qid, links, disambiguation=False):
    claims = {}
    if disambiguation:
        claims["P31"] = [{"mainsnak": {"datavalue": {"value": {"id": "Q4167410"}}}}]
    return {"id": qid, "claims": claims, "sitelinks": {s: {"title": t} for s, t in links.items()}}


@pytest.mark.slow
def test_page_props_wikidata_and_empty_languages(spark, tmp_path):
    entities = tmp_path / "wikidata-entities.json"
    lines = [
        _entity("Q1", {"viwiki": "Huế"}),
        _entity("Q2", {"frwiki": "Lyon"}),
        _entity("Q3", {"elwiki": "Αθήνα"}, disambiguation=True),
    ]
    entities.write_text(
        "[\n" + ",\n".join(json.dumps(e, ensure_ascii=False) for e in lines) + "\n]\n"
    )
    props = tmp_path / "frwiki-page_props.sql"
    props.write_text(
        "CREATE TABLE `page_props` (\n  `pp_page` int(10) unsigned NOT NULL,\n"
        "  `pp_propname` varbinary(60) NOT NULL,\n  `pp_value` blob NOT NULL,\n"
        "  `pp_sortkey` float DEFAULT NULL\n) ENGINE=InnoDB;\n"
        "INSERT INTO `page_props` VALUES (1001,'disambiguation','',NULL),"
        "(1001,'wikibase_item','Q2',NULL),(1006,'noindex','',NULL);\n",
        encoding="utf-8",
    )
    wiki = WikipediaConfig(
        dumps={lang: DUMPS[lang] for lang in ("vi", "el", "fr")},
        wikidata_sitelinks=str(entities),
        page_props={"fr": str(props)},
    )
    with pytest.raises(InputDataError) as err:
        run_wikipedia(spark, wiki, str(tmp_path / "documents"), 2)
    assert "no documents for language(s) el, fr" in str(err.value)
    assert "on_empty_language=warn" in str(err.value)
    assert not (tmp_path / "documents").exists()

    report = run_wikipedia(
        spark, dataclasses.replace(wiki, on_empty_language="warn"), str(tmp_path / "documents"), 2
    )
    assert report["empty_languages"] == ["el", "fr"]
    assert report["documents_per_language"] == {"vi": 1}
    assert report["disambiguation_after_parse"]["wikidata"] == {"el": 1}
    assert report["disambiguation_after_parse"]["page_props"] == {"fr": 1}
    assert report["page_props"]["rows"] == 1
    assert set(docs_at(spark, str(tmp_path / "documents"))) == {("vi", "Huế")}


@pytest.mark.slow
def test_single_stream_bz2_is_split_at_blocks(spark, tmp_path):
    level1 = tmp_path / "enwiki-pages-articles.xml.bz2"
    level1.write_bytes(bz2.compress(bz2.decompress(Path(EN).read_bytes()), 1))
    wiki = WikipediaConfig(
        dumps={"en": str(level1)}, on_missing_concept="own_id", split_bytes=120_000
    )
    items = plan_work(wiki)
    assert len(items) > 2 and all(it.blocks for it in items)
    split = run_wikipedia(spark, wiki, str(tmp_path / "split"), 2)
    whole = run_wikipedia(
        spark, dataclasses.replace(wiki, split_single_stream=False), str(tmp_path / "whole"), 2
    )
    assert split["work_items"] == len(items) and whole["work_items"] == 1
    assert split["per_language"] == whole["per_language"]
    assert docs_at(spark, str(tmp_path / "split")) == docs_at(spark, str(tmp_path / "whole"))


def test_a_file_without_pages_is_refused(spark, tmp_path):
    empty = tmp_path / "dewiki-empty.xml"
    raw = Path(DE).read_text(encoding="utf-8")
    empty.write_text(raw[: raw.index("<page>")] + "</mediawiki>\n", encoding="utf-8")
    wiki = WikipediaConfig(dumps={"de": f"{DE},{empty}"}, on_missing_concept="own_id")
    with pytest.raises(
        InputDataError, match=rf"no <page> in {re.escape(str(empty))} \(wikipedia.dumps.de\)"
    ):
        run_wikipedia(spark, wiki, str(tmp_path / "documents"), 2)
