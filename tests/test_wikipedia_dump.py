"""Streaming pages out of real MediaWiki dumps (plain, multistream ranges, UTF-16) and
locating every kind of bad input."""

from __future__ import annotations

import bz2
import os
import pickle
import shutil
from pathlib import Path

import pytest

from pipeline.config.loader import build_section as _build
from pipeline.errors import ConfigError
from pipeline.wikipedia import bz2_blocks, dump
from pipeline.wikipedia.config import WikipediaConfig
from tests.conftest import DATA

WIKI = DATA / "wiki"
EN = str(WIKI / "enwiki-sample-pages-articles.xml.bz2")
EN_MULTI = str(WIKI / "enwiki-sample-pages-articles-multistream.xml.bz2")
EN_INDEX = str(WIKI / "enwiki-sample-pages-articles-multistream-index.txt.bz2")
BG = str(WIKI / "bgwiki-latest-pages-articles-shortened.xml.bz2")
DE = str(WIKI / "handmade" / "dewiki-sample-pages-articles.xml")
FAIL = WIKI / "failures"


def pages_and_problems(path, start=0, end=None, namespaces=None):
    items = list(dump.iter_pages(path, start, end, namespaces))
    return (
        [p for p in items if isinstance(p, dump.Page)],
        [p for p in items if isinstance(p, dump.Problem)],
    )


def test_plain_dump_pages_and_siteinfo():
    info = dump.read_siteinfo(EN)
    assert info.dbname == "enwiki"
    assert info.namespaces[0] == "" and info.namespaces[14] == "Category"
    pages, problems = pages_and_problems(EN)
    assert problems == []
    assert len(pages) == 69
    assert pages[1].title == "Anarchism" and pages[1].page_id == 12 and pages[1].ns == 0
    assert sum(p.redirect is not None for p in pages) == 55  # one in namespace 4
    assert [p.title for p in pages if p.ns != 0] == [
        "Wikipedia:Adding Wikipedia articles to Nupedia"
    ]
    assert pages[1].text.startswith("{{Redirect2|Anarchist|")
    assert pages[1].location.path == EN and pages[1].location.stream_offset == 0


def test_multistream_ranges_read_the_same_pages():
    offsets = dump.read_index_offsets(EN_INDEX)
    assert len(offsets) == 7 and offsets[0] > 0
    size = os.path.getsize(EN_MULTI)
    ranges = dump.plan_ranges(offsets, size, split_bytes=4 * 40_000)
    assert len(ranges) > 1 and ranges[0][0] == offsets[0] and ranges[-1][1] == size
    spaces = dump.read_siteinfo(EN_MULTI).namespaces
    got = []
    for start, end in ranges:
        pages, problems = pages_and_problems(EN_MULTI, start, end, spaces)
        assert problems == []
        assert all(p.location.stream_offset in offsets for p in pages)
        got += [(p.page_id, p.title, p.text) for p in pages]
    whole, _ = pages_and_problems(EN)
    assert got == [(p.page_id, p.title, p.text) for p in whole]


def test_utf16_dump_is_read():
    pages, problems = pages_and_problems(BG)
    assert problems == []
    assert [p.ns for p in pages] == [0, 4, 4]
    assert pages[0].title == "Григориански календар"
    assert dump.read_siteinfo(BG).dbname == "bgwiki"


def test_latest_revision_wins_and_redirects():
    pages, _ = pages_and_problems(DE)
    by_title = {p.title: p for p in pages}
    assert "neuesten Fassung" in by_title["Autismus"].text
    assert by_title["Autismus"].revision_id == 1002
    assert by_title["Anarchie"].redirect == "Anarchismus"
    assert by_title["Kategorie:Philosophie"].ns == 14


def test_malformed_page_unknown_namespace_are_located():
    pages, problems = pages_and_problems(str(FAIL / "dewiki-malformed-pages-articles.xml"))
    kinds = {p.kind: p for p in problems}
    assert set(kinds) == {"malformed_xml", "unknown_namespace"}
    bad = kinds["malformed_xml"]
    assert bad.title == "Albedo"
    raw = (FAIL / "dewiki-malformed-pages-articles.xml").read_bytes()
    # The offset points at the <page> of the broken page.
    assert raw[bad.location.offset :].startswith(b"<page>\n    <title>Albedo</title>")
    assert "column" in bad.detail
    unknown = kinds["unknown_namespace"]
    assert unknown.page_id == 105 and "3000" in unknown.detail
    # The other pages are still read.
    assert {p.title for p in pages} >= {"Anarchismus", "Autismus", "Achilleus"}


def test_truncated_single_stream():
    path = str(FAIL / "dewiki-truncated-pages-articles.xml.bz2")
    pages, problems = pages_and_problems(path)
    assert pages == []
    (p,) = problems
    assert p.kind == "truncated_stream" and p.location.path == path
    assert "end-of-stream" in p.detail


def test_truncated_multistream_keeps_complete_streams(tmp_path):
    offsets = dump.read_index_offsets(EN_INDEX)
    cut = (offsets[3] + offsets[4]) // 2  # inside the fourth page stream
    path = tmp_path / "enwiki-cut-multistream.xml.bz2"
    path.write_bytes(Path(EN_MULTI).read_bytes()[:cut])
    spaces = dump.read_siteinfo(str(path)).namespaces
    pages, problems = pages_and_problems(str(path), offsets[0], None, spaces)
    assert len(pages) == 30  # three complete streams of ten pages
    (p,) = problems
    assert p.kind == "truncated_stream"
    assert p.location.stream_offset == offsets[3]
    assert str(offsets[3]) in str(p.location)


def test_corrupt_bytes_and_not_a_dump(tmp_path):
    good = Path(EN_MULTI).read_bytes()
    offsets = dump.read_index_offsets(EN_INDEX)
    bad = bytearray(good)
    bad[offsets[1] + 100 : offsets[1] + 140] = b"\x00" * 40
    path = tmp_path / "corrupt.xml.bz2"
    path.write_bytes(bytes(bad))
    pages, problems = pages_and_problems(str(path), offsets[0], None, {0: ""})
    assert len(pages) == 10
    assert problems[0].kind == "corrupt_stream"
    assert problems[0].location.stream_offset == offsets[1]

    other = tmp_path / "not-a-dump.xml.bz2"
    other.write_bytes(bz2.compress(b"<html><body><page>x</page></body></html>"))
    with pytest.raises(dump.DumpError, match="not a MediaWiki XML dump"):
        list(dump.iter_pages(str(other)))


def test_unclosed_page_at_end(tmp_path):
    raw = Path(DE).read_bytes()
    path = tmp_path / "cut.xml"
    path.write_bytes(raw[: raw.index(b"<title>Achilleus")])
    pages, problems = pages_and_problems(str(path))
    assert [p.kind for p in problems] == ["unclosed_page"]
    assert len(pages) == 7


def test_index_errors(tmp_path):
    bad = tmp_path / "index.txt"
    bad.write_text("638:10:AccessibleComputing\nnot an index line\n")
    with pytest.raises(dump.DumpError, match="line 2"):
        dump.read_index_offsets(str(bad))
    shutil.copy(EN_INDEX, tmp_path / "i.txt.bz2")
    assert dump.read_index_offsets(str(tmp_path / "i.txt.bz2"))[0] == 638


def test_config_section_loads_and_pickles():
    cfg = _build(
        WikipediaConfig,
        {"dumps": {"en": EN}, "namespaces": [0, 14], "max_malformed_fraction": 0.01},
        prefix="wikipedia.",
        sources={},
    )
    assert cfg.dumps == {"en": EN} and cfg.namespaces == [0, 14]
    assert pickle.loads(pickle.dumps(cfg)) == cfg
    with pytest.raises(ConfigError, match=r"wikipedia.max_malformed_fraction.*out of range"):
        _build(WikipediaConfig, {"max_malformed_fraction": 2.0}, prefix="wikipedia.", sources={})
    with pytest.raises(ConfigError, match="wikipedia.cleaner"):
        _build(WikipediaConfig, {"cleaner": "regex"}, prefix="wikipedia.", sources={})


# --------------------------------------------------------------------------- bz2 blocks

GENSIM_LIKE = WIKI / "enwiki-sample-pages-articles.xml.bz2"


def _xml_of_sample() -> bytes:
    return bz2.decompress(GENSIM_LIKE.read_bytes())


def _split_pages(path, n, spaces, blocks=True):
    size = os.path.getsize(path)
    step = -(-size // n)
    pages, problems = [], []
    for k in range(n):
        for p in dump.iter_pages(str(path), k * step, min(size, (k + 1) * step), spaces, blocks):
            (pages if isinstance(p, dump.Page) else problems).append(p)
    return pages, [p for p in problems if isinstance(p, dump.Problem)]


@pytest.mark.parametrize("shift", range(8))
def test_block_magic_found_at_every_bit_shift(shift):
    rng = __import__("random").Random(shift)
    noise = bytes(rng.randrange(256) for _ in range(64))
    bit = 8 * 20 + shift
    value = int.from_bytes(noise, "big")
    width = len(noise) * 8
    at = width - bit - 48  # place the magic's 48 bits at file bit `bit`
    value = (value & ~(((1 << 48) - 1) << at)) | (bz2_blocks._BLOCK_MAGIC << at)
    data = value.to_bytes(len(noise), "big")
    marks = bz2_blocks.find_bz2_marks(data, 1000)
    assert (1000 * 8 + bit, True) in marks


def test_single_stream_split_at_blocks_reads_every_page_once(tmp_path):
    # Level 1 = 100 kB blocks: the 0.7 MB sample becomes a single stream of several blocks.
    path = tmp_path / "enwiki-level1-pages-articles.xml.bz2"
    path.write_bytes(bz2.compress(_xml_of_sample(), 1))
    with open(path, "rb") as f:
        marks = bz2_blocks.find_bz2_marks(f.read(), 0)
    assert sum(is_block for _, is_block in marks) >= 5 and sum(not b for _, b in marks) == 1
    whole, _ = pages_and_problems(str(path))
    spaces = dump.read_siteinfo(str(path)).namespaces
    for n in (1, 2, 3, 7, 40):
        pages, problems = _split_pages(path, n, spaces)
        assert problems == []
        assert [(p.page_id, p.text) for p in pages] == [(p.page_id, p.text) for p in whole], n
    # Locations point into the block: its file bit, then the byte in its output.
    page = _split_pages(path, 3, spaces)[0][-1]
    assert page.location.kind == "block"
    assert "in the bz2 block at file bit" in str(page.location)
    assert (page.location.stream_offset, True) in marks


def test_false_block_boundary_is_merged(tmp_path, monkeypatch):
    path = tmp_path / "level1.xml.bz2"
    path.write_bytes(bz2.compress(_xml_of_sample(), 1))
    real = bz2_blocks._iter_marks
    blocks = [b for b, is_block in bz2_blocks.find_bz2_marks(path.read_bytes(), 0) if is_block]
    fake = (blocks[1] + blocks[2]) // 2  # inside the second block

    def with_fake(f, start, first=bz2_blocks._SCAN_WINDOW):
        marks = list(real(f, start, first))
        if marks and marks[0][0] <= fake:
            marks = sorted([*marks, (fake, True)])
        yield from marks

    monkeypatch.setattr(bz2_blocks, "_iter_marks", with_fake)
    spaces = dump.read_siteinfo(str(path)).namespaces
    pages, problems = _split_pages(path, 1, spaces)
    assert problems == []
    assert [p.page_id for p in pages] == [p.page_id for p in pages_and_problems(str(path))[0]]


def test_block_split_of_a_truncated_file(tmp_path):
    data = bz2.compress(_xml_of_sample(), 1)
    path = tmp_path / "cut.xml.bz2"
    path.write_bytes(data[: len(data) * 2 // 3])
    spaces = dump.read_siteinfo(str(path)).namespaces
    pages, problems = _split_pages(path, 2, spaces)
    # The range owning the cut block reports it; the range before it reports it too when
    # its last page ran into that block (and names the page lost).
    assert 1 <= len(problems) <= 2
    assert {(p.kind, p.location.kind, p.location.stream_offset) for p in problems} == {
        ("truncated_stream", "block", problems[-1].location.stream_offset)
    }
    assert all("truncated" in p.detail for p in problems)
    assert all(p.title for p in problems[:-1])
    assert 0 < len(pages) < 69


def test_plain_xml_locations_speak_of_bytes():
    pages, _ = pages_and_problems(DE)
    assert str(pages[0].location) == f"{DE} at byte {pages[0].location.offset}"
    assert "bz2" not in str(pages[0].location)
