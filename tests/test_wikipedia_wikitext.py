"""Wikitext cleaning on real pages: no markup left, anchors kept, both cleaners agree."""

from __future__ import annotations

import pickle
import re

import pytest

from pipeline.wikipedia import dump
from pipeline.wikipedia.wikitext import (
    CLEANERS,
    DisambiguationDetector,
    SiteNames,
    clean_fast,
)
from tests.conftest import DATA

WIKI = DATA / "wiki"
REAL = [
    WIKI / "enwiki-sample-pages-articles.xml.bz2",
    WIKI / "bgwiki-latest-pages-articles-shortened.xml.bz2",
    WIKI / "enwiki-table-markup.xml.bz2",
]
# Markup that must not survive cleaning.
LEFTOVER = re.compile(
    r"\{\{|\}\}|\[\[|\]\]|\{\||\|\}|^\s*\|-|<ref|</ref|<references|<!--|-->|'''|''"
    r"|&[a-z]+;|&#\d+;|\bthumb\||\|thumb\b|\bupright\b|\d+px\b|^=+|=+$"
    r"|\b(?:File|Image|Category|Файл|Категория):\S",
    re.M,
)


def real_articles():
    out = []
    for path in REAL:
        info = dump.read_siteinfo(str(path))
        site = SiteNames.from_namespaces(info.namespaces)
        for p in dump.iter_pages(str(path)):
            if isinstance(p, dump.Page) and p.ns == 0 and p.redirect is None:
                out.append((path.name, p, site))
    return out


ARTICLES = real_articles()


def test_samples_hold_enough_real_articles():
    assert len(ARTICLES) >= 20
    assert sum(len(p.text) for _, p, _ in ARTICLES) > 500_000


@pytest.mark.parametrize("name", sorted(CLEANERS))
def test_no_markup_left_on_real_pages(name):
    clean = CLEANERS[name]
    for source, page, site in ARTICLES:
        text = clean(page.text, site).text
        left = [m.group() for m in LEFTOVER.finditer(text)]
        assert not left, f"{name} left markup in {source}:{page.title}: {left[:5]}"
        assert len(text) > 200, page.title


def test_fast_cleaner_keeps_prose_and_anchor_text():
    by_title = {p.title: (p, s) for _, p, s in ARTICLES}
    page, site = by_title["Anarchism"]
    text = clean_fast(page.text, site).text
    assert text.startswith("Anarchism is a political philosophy that advocates self-governed")
    # [[stateless society|stateless societies]] keeps its anchor, not its target.
    assert "described as stateless societies" in text
    assert "Anarchy-symbol" not in text and "Category" not in text
    bg_page, bg_site = by_title["Григориански календар"]
    bg = clean_fast(bg_page.text, bg_site).text
    assert bg.startswith("Григорианският календар (понякога наричан")
    assert "Gregory XIII.jpg" not in bg and "Папа" not in bg.split("\n")[0][:40]
    assert "cite web" not in bg


def test_tables_are_removed():
    by_title = {p.title: (p, s) for _, p, s in ARTICLES}
    page, site = by_title["Constructive vote of no confidence"]
    assert "{|" in page.text
    text = clean_fast(page.text, site).text
    assert "wikitable" not in text and "!!" not in text
    assert "Westminster systems" in text


HANDMADE = """{{Infobox|name=X}}
[[Datei:Anarchy.svg|mini|Das [[Anarchie]]-Symbol]]
Der '''Anarchismus''' (von [[Altgriechisch|altgriechisch]]) ist&nbsp;eine &amp; \
[[Lehre]]n.<ref name="a">{{cite|x}}</ref>
<!-- hidden -->
== Geschichte ==
* Punkt mit [http://example.org Link] und [http://example.org/bare]
{| class="wikitable"
| a || b
|}
[[:Kategorie:Sichtbar]] [[Kategorie:Versteckt]]
[[en:Anarchism]] [[bg:Анархизъм]]"""


@pytest.mark.parametrize("name", sorted(CLEANERS))
def test_policy_on_handmade_markup(name):
    site = SiteNames.from_namespaces({6: "Datei", 14: "Kategorie"})
    out = CLEANERS[name](HANDMADE, site)
    lines = [line for line in out.text.split("\n") if line]
    assert lines == [
        "Der Anarchismus (von altgriechisch) ist eine & Lehren.",
        "Geschichte",
        "Punkt mit Link und",
        "Sichtbar",  # [[:Kategorie:Sichtbar]] reads as the category's name
    ], out.text
    assert out.langlinks == [("en", "Anarchism"), ("bg", "Анархизъм")]
    assert out.broken == []


@pytest.mark.parametrize("name", sorted(CLEANERS))
def test_broken_markup_is_flagged_and_repaired(name):
    out = CLEANERS[name](
        "Held {{Infobox|Name=A der [[Griechen|griechischen]] Sage.\n\nVor [[Troja.", SiteNames()
    )
    assert out.broken
    assert "{{" not in out.text and "[[" not in out.text
    assert "Troja" in out.text


def test_cleaners_agree_on_real_pages():
    a_words, b_words = set(), set()
    for _, page, site in ARTICLES:
        a_words |= set(clean_fast(page.text, site).text.split())
        b_words |= set(CLEANERS["mwparserfromhell"](page.text, site).text.split())
    jaccard = len(a_words & b_words) / len(a_words | b_words)
    assert jaccard > 0.9, jaccard


def test_disambiguation_detector():
    detect = DisambiguationDetector(["disambiguation", "Begriffsklärung", "set index article"])
    assert detect("text\n{{disambiguation}}")
    assert detect("{{Disambiguation|geo}}")
    assert detect("{{ Begriffsklärung }}")
    assert detect("{{set_index_article}}")
    assert detect("__DISAMBIG__")
    assert not detect("{{about|the U.S. state||Alabama (disambiguation)}}")
    assert not detect("[[Meno (disambiguation)|Meno]]")
    again = pickle.loads(pickle.dumps(detect))
    assert again("{{dISambiguation}}") and again.template_names == detect.template_names


@pytest.mark.parametrize("name", sorted(CLEANERS))
def test_emptied_sections_and_colon_links(name):
    text = (
        "Lead [[:Category:Rivers of Europe]] and [[:fr:Seine]] and [[Paris (France)|]].\n"
        "== History ==\n=== Early ===\n{{Main|Early history}}\n=== Late ===\nLate text.\n"
        "== References ==\n{{Reflist}}\n<references/>\n"
        "== External links ==\n=== Images ===\n[[File:X.jpg|thumb|caption]]\n"
        "== {{Lang|fr|Titre}} ==\nTail text."
    )
    out = CLEANERS[name](text, SiteNames()).text
    lines = [line for line in out.split("\n") if line]
    assert lines == [
        "Lead Rivers of Europe and Seine and Paris.",
        "History",  # kept: its subsection "Late" has text; "Early" has none
        "Late",
        "Late text.",
        "Tail text.",  # the heading with no title left goes, its text stays
    ], out
