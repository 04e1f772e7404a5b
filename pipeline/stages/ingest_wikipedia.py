"""Stage ``ingest_wikipedia``: MediaWiki XML dumps (+ sitelinks) to ``documents``.

The phases, each in its module of :mod:`pipeline.wikipedia`:

1. plan (driver, :mod:`~pipeline.wikipedia.plan`): each dump file becomes one work item,
   or many of whole bz2 streams (multistream index) or bz2 blocks (single stream);
2. parse (executors, :mod:`~pipeline.wikipedia.parse`): every page is classified (article /
   dropped with a reason / malformed) and the articles' wikitext cleaned, in one pass;
3. check (:mod:`~pipeline.wikipedia.checks`): the parsed frame is persisted, counted per
   language and checked against the tolerances;
4. disambiguation pages known only after parsing are dropped
   (:mod:`~pipeline.wikipedia.disambiguation`);
5. concept ids are attached (:mod:`~pipeline.wikipedia.concepts`) and ``documents``
   written atomically.

Nothing is written when a check fails, and the error names the file and offset. The
phases fill one :class:`~pipeline.wikipedia.report.IngestReport`; the stage returns it as
a dictionary, also written into the dataset's manifest.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any, Literal

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pipeline.config import Config
from pipeline.errors import InputDataError
from pipeline.io.datasets import write_dataset, write_options
from pipeline.io.schemas import DOCUMENTS
from pipeline.wikipedia.checks import (
    check_every_language,
    check_files,
    check_tolerance,
    summarize_parsed,
)
from pipeline.wikipedia.concepts import assign_concepts
from pipeline.wikipedia.config import WikipediaConfig
from pipeline.wikipedia.disambiguation import (
    drop_page_props_disambiguation,
    drop_template_disambiguation,
)
from pipeline.wikipedia.parse import parse_dumps
from pipeline.wikipedia.plan import WorkItem, plan_work
from pipeline.wikipedia.report import IngestReport


def _new_report(cfg: WikipediaConfig, items: list[WorkItem], langs: list[str]) -> IngestReport:
    return IngestReport(
        dumps={lang: [p for p in str(cfg.dumps[lang]).split(",")] for lang in langs},
        work_items=len(items),
        cleaner=cfg.cleaner,
        dbnames={
            lang: sorted({str(it.dbname) for it in items if it.lang == lang}) for lang in langs
        },
    )


def build_documents(
    spark: SparkSession, cfg: WikipediaConfig
) -> tuple[DataFrame, IngestReport, list[DataFrame]]:
    """Parse, check and label the dumps: (documents frame, report, frames to unpersist)."""
    items = plan_work(cfg)
    langs = sorted({it.lang for it in items})
    parsed = parse_dumps(spark, cfg, items).persist(StorageLevel.MEMORY_AND_DISK)
    report = _new_report(cfg, items, langs)
    summarize_parsed(parsed, cfg, report)
    check_tolerance(report, cfg)
    check_files(parsed, report)
    docs = parsed.filter("kind = 'page' AND status = 'kept'").select(
        "lang", "page_id", "title", "text", "links", "templates"
    )
    if not cfg.keep_disambiguation:
        docs = drop_template_disambiguation(docs, parsed, report)
        docs = drop_page_props_disambiguation(spark, docs, cfg, langs, report)
    docs = docs.drop("templates")
    labelled = assign_concepts(spark, docs, parsed, cfg, langs, report)
    out = labelled.select(
        F.concat(F.col("lang"), F.lit("wiki:"), F.col("page_id").cast("string")).alias("doc_id"),
        "concept_id",
        "lang",
        "title",
        "text",
    )
    return out, report, [parsed]


def run_wikipedia(
    spark: SparkSession,
    cfg: WikipediaConfig,
    path: str,
    partitions: int,
    fmt: Literal["parquet", "delta"] = "parquet",
    *,
    write: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Build ``documents`` from ``cfg`` and write it atomically to ``path`` (as ``fmt``,
    ``paths.format``; ``write``: more :func:`~pipeline.io.datasets.write_dataset` options,
    :func:`~pipeline.io.datasets.write_options`); the report."""
    docs, report, cached = build_documents(spark, cfg)
    docs = (
        docs.repartitionByRange(partitions, "lang", "doc_id")
        .sortWithinPartitions("lang", "doc_id")
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    try:
        per_lang = {
            r["lang"]: r["count"] for r in docs.groupBy("lang").count().orderBy("lang").collect()
        }
        if not per_lang:
            raise InputDataError(
                f"wikipedia: no documents left (per language: {report.per_language_dict()}, "
                f"concepts: {report.concepts.to_dict()}). Nothing was written."
            )
        report.add_documents(per_lang)
        check_every_language(report, cfg)
        report.n_concepts = docs.select("concept_id").distinct().count()
        report.config = asdict(cfg)
        out = report.to_dict()
        write_dataset(
            spark,
            docs,
            DOCUMENTS,
            path,
            manifest={"report": out},
            expected_rows=out["documents"],
            **{**(write or {}), "format": fmt},
        )
    finally:
        docs.unpersist()
        for frame in cached:
            frame.unpersist()
    out["path"] = path
    return out


def run(spark: SparkSession, cfg: Config) -> dict[str, Any]:
    """Stage entry point (``ingest_wikipedia``): ``cfg.wikipedia`` -> ``paths.documents``."""
    return run_wikipedia(
        spark,
        cfg.wikipedia,
        cfg.paths.dataset("documents"),
        cfg.spark.shuffle_partitions,
        cfg.paths.format,
        write=write_options(cfg.paths),
    )
