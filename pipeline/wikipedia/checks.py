"""Counting and checking what ``ingest_wikipedia`` parsed, before anything is written.

The parsed frame is counted per language into the :class:`~pipeline.wikipedia.report.
IngestReport`, with examples of malformed units and repaired markup; the checks here raise
:class:`~pipeline.errors.InputDataError` (naming the file and offset) when problems exceed
the configured tolerances, when a dump file holds no page, or when a configured language
ends with no documents.
"""

from __future__ import annotations

import logging
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from pipeline.errors import InputDataError
from pipeline.wikipedia.config import WikipediaConfig
from pipeline.wikipedia.report import Example, IngestReport

log = logging.getLogger(__name__)


def _examples(df: DataFrame, cond: Column, k: int) -> list[Example]:
    cols = ["lang", "reason", "page_id", "title", "location", "detail"]
    rows = df.filter(cond).select(*cols).limit(k).collect()
    return [{c: v for c, v in r.asDict().items() if v is not None} for r in rows]


def summarize_parsed(parsed: DataFrame, cfg: WikipediaConfig, report: IngestReport) -> None:
    """Counts per language (read, kept, dropped by reason, malformed by kind) + examples."""
    counts = parsed.groupBy("lang", "kind", "status", "reason").count().collect()
    report.add_parsed((r["lang"], r["kind"], r["status"], r["reason"], r["count"]) for r in counts)
    k = cfg.max_examples
    # Up to k examples per language that has any (no job when there is nothing to show).
    malformed_ex: list[Example] = []
    broken_ex: list[Example] = []
    for lang, row in report.per_language.items():
        here = F.col("lang") == lang
        if row.malformed:
            malformed_ex += _examples(parsed, here & (F.col("kind") == "problem"), k)
        if row.broken_markup:
            broken_ex += _examples(parsed, here & (F.col("kind") == "broken"), k)
    report.malformed_examples = malformed_ex
    report.broken_markup_examples = broken_ex


def _where(example: dict[str, Any]) -> str:
    """``page 'Title' (id 12) in <location>`` for an example row (what is known of it)."""
    page = []
    if example.get("title") is not None:
        page.append(repr(example["title"]))
    if example.get("page_id") is not None:
        page.append(f"(id {example['page_id']})")
    head = f"page {' '.join(page)} in " if page else ""
    return head + str(example.get("location"))


def check_tolerance(report: IngestReport, cfg: WikipediaConfig) -> None:
    """Raise :class:`InputDataError` when malformed or broken pages exceed the tolerances."""
    for lang, row in report.per_language.items():
        read = max(1, row.pages_read)
        if row.malformed and row.malformed / read > cfg.max_malformed_fraction:
            ex = [e for e in report.malformed_examples if e["lang"] == lang]
            raise InputDataError(
                f"wikipedia {lang}: {row.malformed} malformed unit(s) in {row.pages_read} "
                f"pages read ({report.malformed_by_kind.get(lang)}), more than "
                f"wikipedia.max_malformed_fraction={cfg.max_malformed_fraction}; e.g.:\n"
                + "\n".join(f"  - {e.get('reason')}: {_where(e)}: {e.get('detail')}" for e in ex)
                + "\nFix: re-download the named file(s) (check their published checksums), or "
                "raise wikipedia.max_malformed_fraction to skip them. Nothing was written."
            )
        if row.kept and row.broken_markup / max(1, row.kept) > cfg.max_broken_markup_fraction:
            ex = [e for e in report.broken_markup_examples if e["lang"] == lang]
            raise InputDataError(
                f"wikipedia {lang}: {row.broken_markup} article(s) with broken markup of "
                f"{row.kept}, more than wikipedia.max_broken_markup_fraction="
                f"{cfg.max_broken_markup_fraction}; e.g.:\n"
                + "\n".join(f"  - {_where(e)}: {e.get('detail')}" for e in ex)
                + "\nNothing was written."
            )


def check_files(parsed: DataFrame, report: IngestReport) -> None:
    """Pages read per dump file (reported); a file without a single ``<page>`` is an error."""
    rows = (
        parsed.filter("kind = 'item'")
        .groupBy("lang", "location")
        .agg(F.sum("page_id").alias("pages"), F.max("detail").alias("dbname"))
        .collect()
    )
    files: dict[str, dict[str, Any]] = {}
    for r in sorted(rows, key=lambda r: (r["lang"], r["location"])):
        files.setdefault(r["lang"], {})[r["location"]] = {
            "pages": int(r["pages"] or 0),
            "dbname": r["dbname"],
        }
    report.files = files
    empty = [(lang, f) for lang, fs in files.items() for f, row in fs.items() if not row["pages"]]
    if empty:
        raise InputDataError(
            "wikipedia: no <page> in "
            + "; ".join(f"{f} (wikipedia.dumps.{lang})" for lang, f in empty)
            + ". Fix: point the language at its *-pages-articles[-multistream].xml[.bz2] "
            "dump (not an index, a stub or a file cut before its first page). Nothing was "
            "written."
        )


def check_every_language(report: IngestReport, cfg: WikipediaConfig) -> None:
    """Every configured language must end with documents (``on_empty_language``)."""
    rows = report.per_language_dict()
    empty = sorted(lang for lang in cfg.dumps if not rows.get(lang, {}).get("documents"))
    if not empty:
        return
    why = {lang: rows.get(lang, {}) for lang in empty}
    msg = (
        f"wikipedia: no documents for language(s) {', '.join(empty)} (per language: {why}). "
        "Fix: check that each is mapped to its own pages-articles dump in wikipedia.dumps and "
        "that the concept source (wikidata_sitelinks / langlinks) covers it, or set "
        "wikipedia.on_empty_language=warn to write the other languages."
    )
    report.empty_languages = empty
    if cfg.on_empty_language == "error":
        raise InputDataError(msg + " Nothing was written.")
    log.warning("%s", msg)
