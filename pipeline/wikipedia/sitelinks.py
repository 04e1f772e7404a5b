"""Concept ids: Wikidata sitelinks and interlanguage links.

Sources, all in their published formats:

- ``wikidatawiki-*-wb_items_per_site.sql.gz``: MySQL ``INSERT INTO `wb_items_per_site`
  VALUES (row_id,item_id,'enwiki','Title'),...;`` lines -> (site, title, ``Q<item_id>``).
- the Wikidata JSON dump (``[`` / one entity per line with a trailing comma / ``]``):
  each entity's ``sitelinks`` -> (site, title, entity id).
- ``<lang>wiki-*-langlinks.sql.gz``: ``INSERT INTO `langlinks` VALUES
  (ll_from,'ll_lang','ll_title'),...;`` -> (lang, page_id) -> (ll_lang, title) edges.

Column positions come from the dump's own ``CREATE TABLE`` statement. Lines are read
with Hadoop's ``TextInputFormat`` (splittable for ``.bz2`` and plain files), so every
record carries its file and byte offset; a record that does not parse is returned as
a problem with that location instead of failing the job.
"""

from __future__ import annotations

import bz2
import gzip
import json
import re
from collections.abc import Iterable, Iterator

_STRING = r"'(?:[^'\\]|\\.)*'"
_SCALAR = r"NULL|-?[0-9][0-9.eE+-]*"
_VALUE = re.compile(_STRING + "|" + _SCALAR, re.S)
_ROW = re.compile(
    r"\((?:" + _STRING + "|" + _SCALAR + r")(?:,(?:" + _STRING + "|" + _SCALAR + r"))*\)", re.S
)
_INSERT = re.compile(r"INSERT INTO `([^`]+)` VALUES ")
_ESCAPES = {"0": "\0", "n": "\n", "r": "\r", "t": "\t", "Z": "\x1a", "b": "\b"}
_ESCAPE = re.compile(r"\\(.)", re.S)
_CREATE = re.compile(r"CREATE TABLE `([^`]+)` \((.*?)\n\)", re.S)
_COLUMN = re.compile(r"^\s*`([^`]+)`\s", re.M)

# Column names we need per table, and the positions used when no CREATE TABLE is found.
TABLES = {
    "wb_items_per_site": (("ips_item_id", "ips_site_id", "ips_site_page"), (1, 2, 3)),
    "langlinks": (("ll_from", "ll_lang", "ll_title"), (0, 1, 2)),
    "page_props": (("pp_page", "pp_propname"), (0, 1)),
}
# Wikidata item "Wikimedia disambiguation page": pages whose item is an instance (P31) of it.
DISAMBIGUATION_ITEM = "Q4167410"


class SqlLineError(ValueError):
    """An ``INSERT`` line that does not parse; ``position`` is the character offset."""

    def __init__(self, message: str, position: int) -> None:
        super().__init__(message)
        self.position = position


def _unescape(s: str) -> str:
    return _ESCAPE.sub(lambda m: _ESCAPES.get(m.group(1), m.group(1)), s)


def _value(tok: str) -> str | int | float | None:
    if tok.startswith("'"):
        return _unescape(tok[1:-1])
    if tok == "NULL":
        return None
    try:
        return int(tok)
    except ValueError:
        return float(tok)


def parse_insert(line: str, table: str) -> Iterator[tuple]:
    """Rows of one MySQL ``INSERT INTO `table` VALUES (...),(...);`` line.

    Raises
    ------
    SqlLineError
        If the line is an INSERT into ``table`` but does not parse to its end.
    """
    m = _INSERT.match(line)
    if m is None or m.group(1) != table:
        return
    pos = m.end()
    end = len(line.rstrip())
    while True:
        row = _ROW.match(line, pos)
        if row is None:
            raise SqlLineError(
                f"INSERT INTO `{table}`: no value tuple at character {pos}: "
                f"{line[pos : pos + 60]!r}",
                pos,
            )
        yield tuple(_value(v.group()) for v in _VALUE.finditer(row.group(), 1))
        pos = row.end()
        if line.startswith(",", pos):
            pos += 1
            continue
        if line.startswith(";", pos) and pos + 1 == end:
            return
        raise SqlLineError(
            f"INSERT INTO `{table}`: expected ',' or ';' at character {pos}: "
            f"{line[pos : pos + 60]!r}",
            pos,
        )


def _open_text(path: str):
    opener = gzip.open if path.endswith(".gz") else bz2.open if path.endswith(".bz2") else open
    return opener(path, "rt", encoding="utf-8", errors="replace")


def column_positions(path: str, table: str) -> tuple[int, ...]:
    """Positions of the needed columns, from the file's ``CREATE TABLE`` (read on the driver)."""
    names, default = TABLES[table]
    head = []
    with _open_text(path) as f:
        for line in f:
            if line.startswith("INSERT INTO"):
                break
            head.append(line)
            if len(head) > 2000:
                break
    for m in _CREATE.finditer("".join(head)):
        if m.group(1) == table:
            cols = _COLUMN.findall(m.group(2))
            missing = [n for n in names if n not in cols]
            if missing:
                raise SqlLineError(
                    f"{path}: CREATE TABLE `{table}` lacks column(s) {missing} (has {cols})", 0
                )
            return tuple(cols.index(n) for n in names)
    return default


# --------------------------------------------------------------------------- record parsers
# Each parser turns one (path, offset, line) into records
#   ("row", path, offset, a, b, c)        a data row
#   ("problem", path, offset, kind, detail, None)
# so a Spark job yields rows and problems in one pass.


def parse_items_per_site(
    path: str, offset: int, line: str, sites: frozenset[str], cols: tuple[int, ...]
) -> Iterator[tuple]:
    """``wb_items_per_site`` line -> ("row", path, offset, site, title, "Q<id>")."""
    if not line.startswith("INSERT INTO"):
        return
    item_i, site_i, page_i = cols
    width = max(cols) + 1
    out = []  # a line counts whole or not at all
    try:
        for row in parse_insert(line, "wb_items_per_site"):
            if len(row) < width:
                raise SqlLineError(f"a row has {len(row)} values, expected {width}: {row!r}", 0)
            site = row[site_i]
            if site in sites:
                out.append(
                    ("row", path, offset, site, normalize_title(row[page_i]), f"Q{row[item_i]}")
                )
    except SqlLineError as exc:
        out = [("problem", path, offset, "sql_line", str(exc), None)]
    yield from out


def parse_langlinks_line(
    path: str, offset: int, line: str, langs: frozenset[str], cols: tuple[int, ...]
) -> Iterator[tuple]:
    """``langlinks`` line -> ("row", path, offset, page_id, to_lang, to_title)."""
    if not line.startswith("INSERT INTO"):
        return
    from_i, lang_i, title_i = cols
    width = max(cols) + 1
    out = []
    try:
        for row in parse_insert(line, "langlinks"):
            if len(row) < width or not isinstance(row[from_i], int):
                raise SqlLineError(f"a row does not match (ll_from, ll_lang, ll_title): {row!r}", 0)
            if row[lang_i] in langs and row[title_i]:
                out.append(
                    ("row", path, offset, row[from_i], row[lang_i], normalize_title(row[title_i]))
                )
    except SqlLineError as exc:
        out = [("problem", path, offset, "sql_line", str(exc), None)]
    yield from out


def parse_page_props_line(
    path: str, offset: int, line: str, cols: tuple[int, ...], propname: str = "disambiguation"
) -> Iterator[tuple]:
    """``page_props`` line -> ("row", path, offset, page_id, None, None) for each page with
    the property ``propname`` (the Disambiguator extension sets ``disambiguation``)."""
    if not line.startswith("INSERT INTO"):
        return
    page_i, name_i = cols
    width = max(cols) + 1
    out = []
    try:
        for row in parse_insert(line, "page_props"):
            if len(row) < width or not isinstance(row[page_i], int):
                raise SqlLineError(f"a row does not match (pp_page, pp_propname, ...): {row!r}", 0)
            if row[name_i] == propname:
                out.append(("row", path, offset, row[page_i], None, None))
    except SqlLineError as exc:
        out = [("problem", path, offset, "sql_line", str(exc), None)]
    yield from out


def _is_disambiguation_item(entity: dict) -> bool:
    for claim in (entity.get("claims") or {}).get("P31") or []:
        value = ((claim.get("mainsnak") or {}).get("datavalue") or {}).get("value")
        if isinstance(value, dict) and value.get("id") == DISAMBIGUATION_ITEM:
            return True
    return False


def parse_wikidata_json_line(
    path: str, offset: int, line: str, sites: frozenset[str]
) -> Iterator[tuple]:
    """One line of the Wikidata JSON dump -> ("row", path, offset, site, title, id), plus
    ("disambiguation", path, offset, site, title, id) for the same sitelinks when the item
    is an instance of Wikimedia disambiguation page (Q4167410)."""
    s = line.strip()
    if s in ("[", "]", ""):
        return
    if s.endswith(","):
        s = s[:-1]
    # Most entities link none of the wanted sites: skip them before json.loads.
    if '"sitelinks"' in s and not any(f'"{site}"' in s for site in sites):
        return
    try:
        entity = json.loads(s)
        qid = entity["id"]
        links = entity.get("sitelinks") or {}
        if not isinstance(links, dict):
            raise TypeError("sitelinks is not an object")
        out = [
            ("row", path, offset, site, normalize_title(link["title"]), qid)
            for site, link in links.items()
            if site in sites
        ]
        if out and DISAMBIGUATION_ITEM in s and _is_disambiguation_item(entity):
            out += [("disambiguation", *r[1:]) for r in out]
    except (ValueError, KeyError, TypeError) as exc:
        out = [("problem", path, offset, "json_line", f"{type(exc).__name__}: {exc}"[:300], None)]
    yield from out


def normalize_title(title: str) -> str:
    """Dump titles use spaces; SQL dumps and links may use underscores."""
    t = title.replace("_", " ").strip()
    return t[:1].upper() + t[1:] if t else t


def site_of(lang: str) -> str:
    """``en`` -> ``enwiki``; ``zh-min-nan`` -> ``zh_min_nanwiki`` (Wikidata site ids)."""
    return lang.replace("-", "_") + "wiki"


# --------------------------------------------------------------------------- Spark readers


def read_lines(sc, paths: Iterable[str], min_partitions: int):
    """RDD of ``(path, byte_offset, line)`` over several text files (.gz/.bz2/plain)."""
    rdds = []
    for path in paths:
        rdd = sc.newAPIHadoopFile(
            path,
            "org.apache.hadoop.mapreduce.lib.input.TextInputFormat",
            "org.apache.hadoop.io.LongWritable",
            "org.apache.hadoop.io.Text",
        )
        rdds.append(rdd.map(lambda kv, p=path: (p, kv[0], kv[1])))
    rdd = sc.union(rdds) if len(rdds) > 1 else rdds[0]
    if rdd.getNumPartitions() < min_partitions:
        # A .gz file is one partition: spread the parsing (lines are the unit of work).
        rdd = rdd.repartition(min_partitions)
    return rdd
