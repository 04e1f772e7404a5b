"""The side tables of ``ingest_wikipedia`` as Spark frames: Wikidata sitelinks, langlinks
and page_props dumps.

Lines are parsed on the executors by :mod:`pipeline.wikipedia.sitelinks` into records
``(kind, file, offset, a, b, c)``: kind ``row`` (a parsed record), ``problem`` (one that
does not parse, with its location) or ``disambiguation`` (a Wikidata item that is a
disambiguation page). Every read is counted into a :class:`~pipeline.wikipedia.report.
TableReport` and fails beyond ``wikipedia.max_malformed_fraction``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable

from pyspark import RDD, StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from pipeline.errors import InputDataError
from pipeline.wikipedia import sitelinks
from pipeline.wikipedia.config import WikipediaConfig
from pipeline.wikipedia.report import TableReport

_RECORD_SCHEMA = StructType(
    [
        StructField("kind", StringType(), False),
        StructField("file", StringType(), False),
        StructField("offset", LongType(), True),
        StructField("a", StringType(), True),
        StructField("b", StringType(), True),
        StructField("c", StringType(), True),
    ]
)


def _records_frame(spark: SparkSession, rdd: RDD) -> DataFrame:
    def cast(t):
        return (t[0], t[1], int(t[2]), *(None if v is None else str(v) for v in t[3:]))

    return spark.createDataFrame(rdd.map(cast), _RECORD_SCHEMA)


def _check_records(name: str, recs: DataFrame, cfg: WikipediaConfig) -> TableReport:
    """Count rows and problems of a side table's read; fail beyond the tolerance."""
    counts = {r["kind"]: r["count"] for r in recs.groupBy("kind").count().collect()}
    n_rows, n_bad = counts.get("row", 0), counts.get("problem", 0)
    examples = [
        {"location": f"{r['file']} at byte {r['offset']}", "kind": r["a"], "detail": r["b"]}
        for r in (
            recs.filter("kind = 'problem'").limit(cfg.max_examples).collect() if n_bad else []
        )
    ]
    if n_bad and n_bad / max(1, n_rows + n_bad) > cfg.max_malformed_fraction:
        raise InputDataError(
            f"wikipedia {name}: {n_bad} record(s) do not parse ({n_rows} did), more than "
            f"wikipedia.max_malformed_fraction={cfg.max_malformed_fraction}; e.g.:\n"
            + "\n".join(f"  - {e['location']}: {e['detail']}" for e in examples)
            + "\nFix: re-download the file, or raise wikipedia.max_malformed_fraction. "
            "Nothing was written."
        )
    return TableReport(rows=n_rows, malformed=n_bad, malformed_examples=examples)


def _per_language_records(
    spark: SparkSession,
    name: str,
    files: dict[str, str],
    table: str,
    parse: Callable[[tuple, tuple[int, ...]], Iterable[tuple]],
    known: list[str] | None = None,
) -> DataFrame:
    """Records of one SQL dump per language (``files``: lang -> path) with a ``lang``
    column, persisted; ``parse(line, columns)`` reads a line of ``table``. ``known``: the
    languages that may have one (those of the dumps)."""
    sc = spark.sparkContext
    frames = []
    for lang, path in sorted(files.items()):
        if known is not None and lang not in known:
            raise InputDataError(
                f"wikipedia.{name}.{lang} is set but wikipedia.dumps has no {lang!r}"
            )
        if not os.path.isfile(path):
            raise InputDataError(f"wikipedia.{name}.{lang}: {path} does not exist")
        try:
            cols = sitelinks.column_positions(path, table)
        except sitelinks.SqlLineError as exc:
            raise InputDataError(str(exc)) from None
        lines = sitelinks.read_lines(sc, [path], sc.defaultParallelism)
        recs = lines.flatMap(lambda t, c=cols: parse(t, c))
        frames.append(_records_frame(spark, recs).withColumn("lang", F.lit(lang)))
    frame = frames[0]
    for f in frames[1:]:
        frame = frame.unionByName(f)
    return frame.persist(StorageLevel.MEMORY_AND_DISK)


def read_wikidata(
    spark: SparkSession, cfg: WikipediaConfig, langs: list[str]
) -> tuple[DataFrame, DataFrame, TableReport] | None:
    """(lang, title, qid) from the Wikidata sitelinks source, (lang, title) of the pages
    whose item is a Wikimedia disambiguation page (JSON dumps only), and what was read;
    None when not configured."""
    if not cfg.wikidata_sitelinks:
        return None
    paths = [p.strip() for p in cfg.wikidata_sitelinks.split(",") if p.strip()]
    for p in paths:
        if not os.path.isfile(p):
            raise InputDataError(f"wikipedia.wikidata_sitelinks: {p} does not exist")
    fmt = cfg.wikidata_format
    if fmt == "auto":
        fmt = "json" if ".json" in os.path.basename(paths[0]) else "sql"
    site_to_lang = {sitelinks.site_of(lang): lang for lang in langs}
    sites = frozenset(site_to_lang)
    sc = spark.sparkContext
    lines = sitelinks.read_lines(sc, paths, sc.defaultParallelism)
    if fmt == "sql":
        try:
            cols = {p: sitelinks.column_positions(p, "wb_items_per_site") for p in paths}
        except sitelinks.SqlLineError as exc:
            raise InputDataError(str(exc)) from None
        recs = lines.flatMap(
            lambda t: sitelinks.parse_items_per_site(t[0], t[1], t[2], sites, cols[t[0]])
        )
    else:
        recs = lines.flatMap(lambda t: sitelinks.parse_wikidata_json_line(t[0], t[1], t[2], sites))
    frame = _records_frame(spark, recs).persist(StorageLevel.MEMORY_AND_DISK)
    read = _check_records("wikidata_sitelinks", frame, cfg)
    mapping = spark.createDataFrame(list(site_to_lang.items()), "site string, lang string")

    def pick(kind: str) -> DataFrame:
        return (
            frame.filter(F.col("kind") == kind)
            .select(F.col("a").alias("site"), F.col("b").alias("title"), F.col("c").alias("qid"))
            .join(F.broadcast(mapping), "site")
            .select("lang", "title", "qid")
            .dropDuplicates(["lang", "title"])
        )

    return pick("row"), pick("disambiguation").select("lang", "title"), read


def read_langlinks(
    spark: SparkSession, cfg: WikipediaConfig, langs: list[str]
) -> tuple[DataFrame, TableReport] | None:
    """(lang, page_id, to_lang, to_title) from the langlinks SQL dumps, and what was read;
    None when not configured."""
    if not cfg.langlinks:
        return None
    wanted = frozenset(langs)

    def parse(t: tuple, cols: tuple[int, ...]) -> Iterable[tuple]:
        return sitelinks.parse_langlinks_line(t[0], t[1], t[2], wanted, cols)

    frame = _per_language_records(spark, "langlinks", cfg.langlinks, "langlinks", parse)
    read = _check_records("langlinks", frame, cfg)
    links = frame.filter("kind = 'row'").select(
        "lang",
        F.col("a").cast("long").alias("page_id"),
        F.col("b").alias("to_lang"),
        F.col("c").alias("to_title"),
    )
    return links, read


def read_page_props(
    spark: SparkSession, cfg: WikipediaConfig, langs: list[str]
) -> tuple[DataFrame, TableReport] | None:
    """(lang, page_id) of the pages with the ``disambiguation`` page property, and what was
    read; None when not configured."""
    if not cfg.page_props:
        return None

    def parse(t: tuple, cols: tuple[int, ...]) -> Iterable[tuple]:
        return sitelinks.parse_page_props_line(t[0], t[1], t[2], cols)

    frame = _per_language_records(
        spark, "page_props", cfg.page_props, "page_props", parse, known=langs
    )
    read = _check_records("page_props", frame, cfg)
    pages = (
        frame.filter("kind = 'row'")
        .select("lang", F.col("a").cast("long").alias("page_id"))
        .dropDuplicates()
    )
    return pages, read
