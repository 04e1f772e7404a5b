"""Parsing the Wikidata sitelinks and langlinks dumps (SQL and JSON), with located errors."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from pipeline.wikipedia import sitelinks
from tests.conftest import DATA

HANDMADE = DATA / "wiki" / "handmade"
FAIL = DATA / "wiki" / "failures"
ITEMS = str(HANDMADE / "wikidatawiki-sample-wb_items_per_site.sql.gz")
SITES = frozenset({"enwiki", "dewiki", "bgwiki", "frwiki"})
SITES_VI = frozenset({"viwiki"})


def test_parse_insert_with_escapes():
    line = "INSERT INTO `t` VALUES (1,'a\\'b','c\\\\d',NULL,-2.5),(2,'x,y)','new\\nline','',7);\n"
    assert list(sitelinks.parse_insert(line, "t")) == [
        (1, "a'b", "c\\d", None, -2.5),
        (2, "x,y)", "new\nline", "", 7),
    ]
    assert list(sitelinks.parse_insert("INSERT INTO `other` VALUES (1);", "t")) == []


@pytest.mark.parametrize(
    "line",
    [
        "INSERT INTO `t` VALUES (1,'a'),(2,'b);",  # unterminated string
        "INSERT INTO `t` VALUES (1,'a')(2,'b');",  # missing comma
        "INSERT INTO `t` VALUES (1,'a'),(2,'b')",  # truncated line (no ';')
        "INSERT INTO `t` VALUES (1,'a',oops);",
    ],
)
def test_parse_insert_errors_name_the_position(line):
    with pytest.raises(sitelinks.SqlLineError) as err:
        list(sitelinks.parse_insert(line, "t"))
    assert 0 < err.value.position <= len(line)


def test_items_per_site_file():
    cols = sitelinks.column_positions(ITEMS, "wb_items_per_site")
    assert cols == (1, 2, 3)
    rows = []
    with gzip.open(ITEMS, "rt", encoding="utf-8") as f:
        for n, line in enumerate(f):
            rows += list(sitelinks.parse_items_per_site(ITEMS, n, line, SITES, cols))
    assert all(r[0] == "row" for r in rows)
    got = {(r[3], r[4]): r[5] for r in rows}
    assert got[("enwiki", "Anarchism")] == "Q6199"
    assert got[("bgwiki", "Григориански календар")] == "Q12138"
    assert got[("frwiki", "Guns N' Roses")] == "Q11647"
    assert ("commonswiki", "Category:A") not in got
    assert len(rows) == 16


def test_items_per_site_bad_line_is_a_located_problem():
    path = str(FAIL / "wb_items_per_site-bad-line.sql")
    cols = sitelinks.column_positions(path, "wb_items_per_site")
    out = []
    offset = 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            out += list(sitelinks.parse_items_per_site(path, offset, line, SITES, cols))
            offset += len(line.encode("utf-8"))
    problems = [r for r in out if r[0] == "problem"]
    assert len(problems) == 1
    _, file, off, what, detail, _ = problems[0]
    assert file == path and what == "sql_line"
    assert Path(path).read_bytes()[off:].startswith(b"INSERT INTO `wb_items_per_site` VALUES (9,")
    assert "character" in detail
    assert sum(r[0] == "row" for r in out) == 8  # the good line still counts


def test_column_positions_follow_create_table(tmp_path):
    path = tmp_path / "ll.sql"
    path.write_text(
        "CREATE TABLE `langlinks` (\n  `ll_lang` varbinary(35) NOT NULL,\n"
        "  `ll_title` varbinary(255) NOT NULL,\n  `ll_from` int(8) unsigned NOT NULL\n"
        ") ENGINE=InnoDB;\nINSERT INTO `langlinks` VALUES ('de','Anarchismus',12);\n"
    )
    cols = sitelinks.column_positions(str(path), "langlinks")
    assert cols == (2, 0, 1)
    line = path.read_text().splitlines()[-1]
    rows = list(sitelinks.parse_langlinks_line(str(path), 0, line, frozenset({"de"}), cols))
    assert rows == [("row", str(path), 0, 12, "de", "Anarchismus")]
    bad = tmp_path / "bad.sql"
    bad.write_text("CREATE TABLE `langlinks` (\n  `x` int,\n  `y` int\n) ENGINE=InnoDB;\n")
    with pytest.raises(sitelinks.SqlLineError, match="lacks column"):
        sitelinks.column_positions(str(bad), "langlinks")


def test_wikidata_json_lines():
    path = str(HANDMADE / "wikidata-sample-entities.json")
    out = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines()):
        out += list(sitelinks.parse_wikidata_json_line(path, n, line, frozenset({"dewiki"})))
    assert [(r[3], r[4], r[5]) for r in out] == [
        ("dewiki", "Anarchismus", "Q6199"),
        ("dewiki", "Autismus", "Q38404"),
        ("dewiki", "Gregorianischer Kalender", "Q12138"),
        ("dewiki", "Achilleus", "Q41746"),
    ]
    bad = str(FAIL / "wikidata-bad-line.json")
    probs = []
    for n, line in enumerate(Path(bad).read_text(encoding="utf-8").splitlines()):
        probs += [
            r for r in sitelinks.parse_wikidata_json_line(bad, n, line, SITES) if r[0] == "problem"
        ]
    assert [(r[2], r[3]) for r in probs] == [(2, "json_line")]


def test_titles_and_sites():
    assert sitelinks.normalize_title("gregorian_calendar ") == "Gregorian calendar"
    assert sitelinks.site_of("zh-min-nan") == "zh_min_nanwiki"


def test_wikidata_disambiguation_items_and_page_props():
    item = {
        "id": "Q30",
        "claims": {"P31": [{"mainsnak": {"datavalue": {"value": {"id": "Q4167410"}}}}]},
        "sitelinks": {"viwiki": {"title": "Sông Cái"}, "enwiki": {"title": "X"}},
    }
    rows = list(sitelinks.parse_wikidata_json_line("w.json", 7, json.dumps(item) + ",", SITES_VI))
    assert rows == [
        ("row", "w.json", 7, "viwiki", "Sông Cái", "Q30"),
        ("disambiguation", "w.json", 7, "viwiki", "Sông Cái", "Q30"),
    ]
    item["claims"]["P31"][0]["mainsnak"]["datavalue"]["value"]["id"] = "Q5"
    rows = list(sitelinks.parse_wikidata_json_line("w.json", 7, json.dumps(item), SITES_VI))
    assert [r[0] for r in rows] == ["row"]

    line = (
        "INSERT INTO `page_props` VALUES (12,'disambiguation','',NULL),"
        "(12,'wikibase_item','Q1',NULL),(13,'disambiguation','',0.5);"
    )
    rows = list(sitelinks.parse_page_props_line("p.sql", 0, line, (0, 1)))
    assert [r[3] for r in rows] == [12, 13]
    bad = list(sitelinks.parse_page_props_line("p.sql", 9, line[:-5], (0, 1)))
    assert bad[0][:4] == ("problem", "p.sql", 9, "sql_line")
