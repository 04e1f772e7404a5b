"""Rebuild the real-dump samples in this folder from gensim's test data (see PROVENANCE.md).

    python tests/data/wiki/make_samples.py /path/to/gensim/test/test_data

Writes ``enwiki-sample-pages-articles.xml.bz2`` (a subset of gensim's shortened enwiki
dump, one bz2 stream like the real ``pages-articles.xml.bz2``) and the same pages as a
``-multistream`` dump with its index, built the way Wikimedia builds them: a header
stream, streams of ``PAGES_PER_STREAM`` pages, a footer stream, and one
``offset:page_id:title`` index line per page.
"""

from __future__ import annotations

import bz2
import re
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ENWIKI = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
BGWIKI = "bgwiki-latest-pages-articles-shortened.xml.bz2"
TABLES = "enwiki-table-markup.xml.bz2"
# Page positions kept from the shortened enwiki dump: its first 58 pages (articles and
# many redirects), a few more articles, disambiguation pages and a project page.
KEEP = [*range(58), 66, 70, 74, 75, 76, 91, 96, 118, 119, 137, 177]
PAGES_PER_STREAM = 10


def split_dump(xml: str) -> tuple[str, list[str], str]:
    head_end = xml.index("  <page>")
    pages = re.findall(r"  <page>.*?</page>\n", xml, re.S)
    return xml[:head_end], pages, "</mediawiki>\n"


def write_multistream(head: str, pages: list[str], foot: str, out: Path, index: Path) -> None:
    lines = []
    with open(out, "wb") as f:
        f.write(bz2.compress(head.encode("utf-8"), 9))
        for i in range(0, len(pages), PAGES_PER_STREAM):
            offset = f.tell()
            group = pages[i : i + PAGES_PER_STREAM]
            for page in group:
                pid = re.search(r"<id>(\d+)</id>", page).group(1)
                title = re.search(r"<title>(.*?)</title>", page).group(1)
                lines.append(f"{offset}:{pid}:{title}\n")
            f.write(bz2.compress("".join(group).encode("utf-8"), 9))
        f.write(bz2.compress(foot.encode("utf-8"), 9))
    index.write_bytes(bz2.compress("".join(lines).encode("utf-8"), 9))


def main(src: str) -> None:
    src_dir = Path(src)
    xml = bz2.decompress((src_dir / ENWIKI).read_bytes()).decode("utf-8")
    head, pages, foot = split_dump(xml)
    kept = [pages[i] for i in KEEP]
    whole = head + "".join(kept) + foot
    (HERE / "enwiki-sample-pages-articles.xml.bz2").write_bytes(
        bz2.compress(whole.encode("utf-8"), 9)
    )
    write_multistream(
        head,
        kept,
        foot,
        HERE / "enwiki-sample-pages-articles-multistream.xml.bz2",
        HERE / "enwiki-sample-pages-articles-multistream-index.txt.bz2",
    )
    shutil.copy(src_dir / BGWIKI, HERE / BGWIKI)
    shutil.copy(src_dir / TABLES, HERE / TABLES)


if __name__ == "__main__":
    main(sys.argv[1])
