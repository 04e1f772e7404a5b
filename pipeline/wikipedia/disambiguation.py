"""Disambiguation pages found after parsing, and dropped from the articles.

The parse drops pages that transclude a known disambiguation template or magic word. Three
more sources are only known once every page is parsed: the dump's own templates that set
``__DISAMBIG__`` (how the Disambiguator extension marks pages, whatever the template is
called), the ``page_props`` dumps, and Wikidata items that are disambiguation pages. Each
drop is counted in the report per source (``disambiguation_after_parse``).
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pipeline.wikipedia.config import WikipediaConfig
from pipeline.wikipedia.report import IngestReport
from pipeline.wikipedia.tables import read_page_props


def _counts_per_language(frame: DataFrame) -> dict[str, int]:
    return {r["lang"]: r["count"] for r in frame.groupBy("lang").count().collect()}


def disambiguation_templates_in_dump(parsed: DataFrame) -> dict[str, list[str]]:
    """lang -> templates of the dump that set a disambiguation magic word, with the
    templates redirecting to them (chains followed)."""
    rows = parsed.filter("kind = 'template'").select("lang", "reason", "title", "redirect")
    names: dict[str, set[str]] = {}
    redirects: dict[str, dict[str, str]] = {}
    for r in rows.collect():
        if r["reason"] == "disambiguation_template":
            names.setdefault(r["lang"], set()).add(r["title"])
        elif r["redirect"]:
            redirects.setdefault(r["lang"], {})[r["title"]] = r["redirect"]
    for lang, found in names.items():
        grew = True
        while grew:
            new = {a for a, b in redirects.get(lang, {}).items() if b in found} - found
            found |= new
            grew = bool(new)
    return {lang: sorted(v) for lang, v in sorted(names.items())}


def drop_template_disambiguation(
    docs: DataFrame, parsed: DataFrame, report: IngestReport
) -> DataFrame:
    """Drop articles that use a template of the dump setting ``__DISAMBIG__``."""
    found = disambiguation_templates_in_dump(parsed)
    report.disambiguation_templates_in_dump = {k: len(v) for k, v in found.items()}
    if not found:
        return docs
    cond = F.lit(False)
    for lang, names in found.items():
        hit = F.arrays_overlap(F.col("templates"), F.array(*[F.lit(n) for n in names]))
        cond = cond | ((F.col("lang") == lang) & F.coalesce(hit, F.lit(False)))
    report.add_disambiguation("template_magic_word", _counts_per_language(docs.filter(cond)))
    return docs.filter(~cond)


def drop_page_props_disambiguation(
    spark: SparkSession,
    docs: DataFrame,
    cfg: WikipediaConfig,
    langs: list[str],
    report: IngestReport,
) -> DataFrame:
    """Drop articles that ``page_props`` marks as disambiguation pages."""
    found = read_page_props(spark, cfg, langs)
    if found is None:
        return docs
    props, report.page_props = found
    hits = docs.select("lang", "page_id").join(props, ["lang", "page_id"])
    report.add_disambiguation("page_props", _counts_per_language(hits))
    return docs.join(props, ["lang", "page_id"], "left_anti")


def drop_wikidata_disambiguation(
    docs: DataFrame, nodes: DataFrame, pages: DataFrame, report: IngestReport
) -> tuple[DataFrame, DataFrame]:
    """Drop the articles whose Wikidata item is a disambiguation page (``pages``: lang,
    title) from ``docs`` and from the concept graph's ``nodes``."""
    hits = nodes.join(pages, ["lang", "title"])
    report.add_disambiguation("wikidata", _counts_per_language(hits))
    nodes = nodes.join(pages, ["lang", "title"], "left_anti")
    docs = docs.join(pages, ["lang", "title"], "left_anti")
    return docs, nodes
