"""Wikipedia ingestion on real page texts of five non-English wikis: ja, vi, de and fr
excerpts (tests/data/wiki/real/, sources and licence in tests/data/wiki/PROVENANCE.md) and
gensim's Bulgarian dump excerpt. Shows, through the real parser, cleaners and stage: no
disambiguation page is kept, no file link leaves an option, a size or a caption in any text,
and a dump passed as another language is refused."""

from __future__ import annotations

import itertools
import re

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
REAL = WIKI / "real"
EXCERPTS = {
    lang: str(REAL / f"{lang}wiki-excerpt-pages-articles.xml") for lang in ["ja", "vi", "de", "fr"]
}
BG = str(WIKI / "bgwiki-latest-pages-articles-shortened.xml.bz2")
DUMPS = {**EXCERPTS, "bg": BG}

# What the excerpts' file links carry: options, sizes, file names and the captions'
# own words (each caption word below occurs nowhere else in its page).
FILE_DEBRIS = re.compile(
    r"\bthumb\b|\bright\b|\d+px\b|\.(?:jpe?g|png|svg|gif)\b"
    r"|オホーツクの紋章|トマトの花|縦断面と横断面|プチトマト|実をつけることも珍しくない"
    r"|フランクフルト・ブックフェア|シルエロ|階層図"
    r"|Antriebswelle mit zwei|gut zu sehen|Keilwellenformfräser|Fräsen eines Keilwellenprofils"
    r"|Ziehmesser für ein|Keilwelle mit 16 Keilen|Zahnrad mit Keilnabenprofil|Vexilloid",
    re.I,
)
# The disambiguation pages of the excerpts (all jawiki: {{aimai}} / {{Aimai}}).
DISAMBIGUATION = {"ja": {"シーマン", "コブラ11", "首都リーグ", "フロッピー"}}
# The main-namespace articles with text left after cleaning (the two frwiki pages of
# the DBpedia excerpt are an infobox and hatnotes only, so nothing is left of them).
ARTICLES = {
    "ja": {"オホーツク", "トマト", "イラストレーター", "ソフトウェア"},
    "vi": {"VIQR"},
    "de": {"Keilwelle"},
    "fr": set(),
}
# Every file link of the excerpts, by its namespace prefix as written in the page.
FILE_LINKS = {
    "ja": {"ファイル": 5, "画像": 1, "Image": 2},
    "de": {"Datei": 7},
    "fr": {"Fichier": 1},
}


def pages(lang):
    info = dump.read_siteinfo(DUMPS[lang])
    site = SiteNames.from_namespaces(info.namespaces, lang)
    found = [p for p in dump.iter_pages(DUMPS[lang]) if isinstance(p, dump.Page)]
    return [p for p in found if p.ns == 0 and p.redirect is None], site


def test_excerpts_hold_what_the_tests_rely_on():
    # The markup each check needs is really in the source pages (else the checks below
    # would pass for nothing).
    for lang, counts in FILE_LINKS.items():
        found, _ = pages(lang)
        text = "\n".join(p.text for p in found)
        for prefix, n in counts.items():
            assert len(re.findall(r"\[\[\s*" + prefix + r"\s*:", text)) == n, (lang, prefix)
        # Every page with a file link matches FILE_DEBRIS before cleaning: the check can fire.
        links = re.compile(r"\[\[\s*(?:" + "|".join(counts) + r")\s*:")
        with_files = [p for p in found if links.search(p.text)]
        assert with_files and all(FILE_DEBRIS.search(p.text) for p in with_files), lang
    found, _ = pages("ja")
    marked = {p.title for p in found if re.search(r"\{\{\s*[Aa]imai\s*\}\}", p.text)}
    assert marked == DISAMBIGUATION["ja"]
    # 画像: is an alias of the File namespace that the jawiki <siteinfo> does not list.
    assert "画像" not in dump.read_siteinfo(DUMPS["ja"]).namespaces.values()
    assert {dump.read_siteinfo(p).dbname for p in DUMPS.values()} == {
        "jawiki",
        "viwiki",
        "dewiki",
        "frwiki",
        "bgwiki",
    }


@pytest.mark.parametrize("name", sorted(CLEANERS))
@pytest.mark.parametrize("lang", sorted(DUMPS))
def test_no_file_link_debris_in_real_pages(lang, name):
    found, site = pages(lang)
    assert found
    for page in found:
        text = CLEANERS[name](page.text, site).text
        assert not FILE_DEBRIS.findall(text), (lang, page.title, FILE_DEBRIS.findall(text))
        assert not LEFTOVER.findall(text), (lang, page.title, LEFTOVER.findall(text))


def test_real_disambiguation_pages_are_detected():
    for lang in DUMPS:
        detect = DisambiguationDetector(wikis.disambiguation_templates(lang))
        found, _ = pages(lang)
        assert {p.title for p in found if detect(p.text)} == DISAMBIGUATION.get(lang, set())


def test_a_dump_passed_as_another_language_is_refused():
    for lang, other in itertools.permutations(DUMPS, 2):
        with pytest.raises(InputDataError) as err:
            plan_work(WikipediaConfig(dumps={lang: DUMPS[other]}))
        msg = str(err.value)
        assert f"'{wikis.expected_dbname(other)}'" in msg, (lang, other)
        assert f"'{wikis.expected_dbname(lang)}'" in msg and DUMPS[other] in msg
    items = plan_work(WikipediaConfig(dumps=DUMPS))
    assert {(it.lang, it.dbname) for it in items} == {
        (lang, wikis.expected_dbname(lang)) for lang in DUMPS
    }


def test_stage_on_real_excerpts(spark, tmp_path):
    wiki = WikipediaConfig(dumps=DUMPS, on_missing_concept="own_id", on_empty_language="warn")
    out = str(tmp_path / "documents")
    report = run_wikipedia(spark, wiki, out, 2)
    docs = {(r.lang, r.title): r.text for r in read_dataset(spark, DOCUMENTS, out).collect()}
    for lang, titles in ARTICLES.items():
        assert {t for (lg, t) in docs if lg == lang} == titles, lang
    assert report["dropped_by_reason"]["ja"]["disambiguation"] == 4
    assert report["empty_languages"] == ["fr"]
    assert report["files"]["ja"][DUMPS["ja"]] == {"pages": 8, "dbname": "jawiki"}
    assert report["per_language"]["bg"]["kept"] >= 1
    for (lang, title), text in docs.items():
        assert not FILE_DEBRIS.findall(text), (lang, title, FILE_DEBRIS.findall(text))
        assert not LEFTOVER.findall(text), (lang, title)
    # The article text around the removed images is intact.
    assert docs[("ja", "オホーツク")].startswith(
        "オホーツク（ロシア語:、アホーツク）は、オホーツク海に面した"
    )
    assert docs[("de", "Keilwelle")].startswith("Als Keilwellen werden Wellen bezeichnet")
    assert "Keilnaben sind Naben einer Welle-Nabe-Verbindung" in docs[("de", "Keilwelle")]
