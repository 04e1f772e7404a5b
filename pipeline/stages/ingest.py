"""Stage ``ingest``: an aligned corpus (Parquet, JSON Lines or TSV) to ``documents``.

Input columns: ``concept_id``, ``lang``, ``text`` (required), ``doc_id`` and
``title`` (optional; ``doc_id`` is derived as ``<lang>:<concept_id>`` when the
column is absent). Every check runs as one Spark aggregation over the input; an
error quotes the offending records with the file they came from and says how to
fix the input or which setting to change.
"""

from __future__ import annotations

import codecs
import logging
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from pipeline.config import Config, IngestConfig
from pipeline.errors import InputDataError
from pipeline.io.datasets import HadoopFS, write_dataset, write_options
from pipeline.io.schemas import DOCUMENTS
from pipeline.text.languages import (
    canonical_lang,
    canonical_lang_column,
    lang_code_is_valid_column,
)

log = logging.getLogger(__name__)

REQUIRED = ("concept_id", "lang", "text")
OPTIONAL = ("doc_id", "title")
_CORRUPT = "_corrupt_record"
_FILE = "_source_file"
_EXTENSIONS = {
    ".parquet": "parquet",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".tsv": "tsv",
}


_JAVA_CHARSETS = {
    "utf-8": "UTF-8",
    "iso8859-1": "ISO-8859-1",
    "ascii": "US-ASCII",
    "utf-16": "UTF-16",
    "utf-16-be": "UTF-16BE",
    "utf-16-le": "UTF-16LE",
    "utf-32": "UTF-32",
    "cp1252": "windows-1252",
}


def java_charset(encoding: str) -> str:
    """The JVM's name for a Python codec name (``latin-1`` -> ``ISO-8859-1``)."""
    name = codecs.lookup(encoding).name
    return _JAVA_CHARSETS.get(name, name)


def detect_format(spark: SparkSession, path: str) -> str:
    """Guess the input format from the file name (or the first data file of a directory)."""
    fs = HadoopFS(spark, path)
    if not fs.exists(path):
        raise InputDataError(
            f"ingest.input {path} does not exist. Fix: point ingest.input at an aligned corpus "
            "(Parquet, JSON Lines or TSV with columns concept_id, lang, text[, doc_id, title])."
        )
    names = [path.rstrip("/").rsplit("/", 1)[-1]]
    if fs.fs.getFileStatus(fs.path(path)).isDirectory():
        names = sorted(n for n in fs.list_names(path) if not n.startswith(("_", ".")))
        if any("=" in n for n in names):  # a partitioned Parquet dataset
            return "parquet"
    for name in names:
        stem = name[:-3] if name.endswith((".gz", ".bz2")) else name
        stem = stem[:-4] if stem.endswith(".zst") else stem
        for ext, fmt in _EXTENSIONS.items():
            if stem.endswith(ext) or stem.endswith(ext + ".zstd"):
                return fmt
        if ".parquet" in stem:
            return "parquet"
    raise InputDataError(
        f"cannot tell the format of {path} from its name(s) {names[:3]}. "
        "Fix: set ingest.format to parquet, jsonl or tsv."
    )


def read_corpus(spark: SparkSession, cfg: IngestConfig) -> tuple[DataFrame, str]:
    """Read the raw corpus with a ``_source_file`` column; returns (frame, format)."""
    fmt = cfg.format if cfg.format != "auto" else detect_format(spark, cfg.input)
    reader = spark.read
    if fmt == "parquet":
        df = reader.parquet(cfg.input)
    elif fmt == "jsonl":
        reader = reader.option("mode", "PERMISSIVE").option("columnNameOfCorruptRecord", _CORRUPT)
        reader = reader.option("encoding", java_charset(cfg.encoding))
        if java_charset(cfg.encoding) != "UTF-8":
            reader = reader.option("lineSep", "\n")
        df = reader.json(cfg.input)
    elif fmt == "tsv":
        header = (
            spark.read.option("sep", "\t")
            .option("header", True)
            .option("quote", "")
            .option("encoding", java_charset(cfg.encoding))
            .csv(cfg.input)
            .columns
        )
        schema = StructType(
            [StructField(c, StringType(), True) for c in header]
            + [StructField(_CORRUPT, StringType(), True)]
        )
        df = (
            reader.option("sep", "\t")
            .option("header", True)
            .option("quote", "")
            .option("encoding", java_charset(cfg.encoding))
            .option("mode", "PERMISSIVE")
            .option("columnNameOfCorruptRecord", _CORRUPT)
            .schema(schema)
            .csv(cfg.input)
        )
    else:  # pragma: no cover - guarded by config validation
        raise InputDataError(f"unknown ingest.format {fmt!r}")
    return df.withColumn(_FILE, F.input_file_name()), fmt


def _check_utf8(spark: SparkSession, cfg: IngestConfig) -> None:
    """Raise a clear error when the input has bytes that are not UTF-8 (decoded as U+FFFD)."""
    if java_charset(cfg.encoding) != "UTF-8":
        return
    lines = spark.read.text(cfg.input).withColumn(_FILE, F.input_file_name())
    bad = lines.filter(~F.is_valid_utf8("value")).limit(cfg.max_examples).collect()
    if bad:
        shown = [{"line": r["value"][:77], _FILE: r[_FILE]} for r in bad]
        raise InputDataError(
            f"{cfg.input}: record(s) are not valid {cfg.encoding} text, e.g.:\n{_fmt(shown)}\n"
            "Fix: set ingest.encoding to the file's real encoding (e.g. latin-1, cp1252, "
            "utf-16) or re-encode it as UTF-8."
        )


def _examples(df: DataFrame, cond: Column, cols: list[str], k: int) -> list[dict[str, Any]]:
    rows = df.filter(cond).select(*cols, _FILE).limit(k).collect()
    out = []
    for r in rows:
        d = r.asDict()
        for key, v in d.items():
            if isinstance(v, str) and len(v) > 80:
                d[key] = v[:77] + "..."
        out.append(d)
    return out


def _fmt(examples: list[dict[str, Any]]) -> str:
    return "\n".join(f"  - {e}" for e in examples)


def _read_records(spark: SparkSession, cfg: IngestConfig) -> tuple[DataFrame, str]:
    """The raw corpus (cached) and its format; fails on malformed records."""
    raw, fmt = read_corpus(spark, cfg)
    if fmt in ("jsonl", "tsv"):
        # Text readers decode invalid bytes to U+FFFD silently: check the raw lines.
        _check_utf8(spark, cfg)
    raw = raw.cache()
    if _CORRUPT in raw.columns:
        _check_malformed(spark, raw, cfg, fmt)
    return raw, fmt


def _check_malformed(spark: SparkSession, raw: DataFrame, cfg: IngestConfig, fmt: str) -> None:
    """Raise on records the reader could not parse (the corrupt-record column is set)."""
    k = cfg.max_examples
    bad = F.col(_CORRUPT).isNotNull()
    # Spark refuses queries on the corrupt-record column alone; a file in which no
    # record parsed has no other column, so every record is malformed.
    if not (set(raw.columns) - {_CORRUPT, _FILE}):
        lines = spark.read.text(cfg.input).limit(k).collect()
        raise InputDataError(
            f"{cfg.input}: no record parsed as {fmt}; first lines:\n"
            f"{_fmt([{'line': r['value'][:77]} for r in lines])}\n"
            "Fix: check ingest.format and ingest.encoding, or repair the file."
        )
    n_bad = raw.filter(bad).count()
    if n_bad:
        shown = _examples(raw, bad, [_CORRUPT], k)
        raise InputDataError(
            f"{cfg.input}: {n_bad} malformed {fmt} record(s) (wrong number of fields or not "
            f"valid {fmt}), e.g.:\n{_fmt([dict(e) for e in shown])}\n"
            "Fix the records, or remove them from the input."
        )


def _normalised_columns(raw: DataFrame, cfg: IngestConfig, fmt: str) -> tuple[DataFrame, bool]:
    """The documents' columns as strings (``lang`` trimmed and lower-cased, ``concept_id``
    trimmed, ``title`` null when absent); whether the input has its own ``doc_id``."""
    cols = set(raw.columns) - {_CORRUPT, _FILE}
    missing = [c for c in REQUIRED if c not in cols]
    if missing:
        raise InputDataError(
            f"{cfg.input} ({fmt}) lacks required column(s) {missing}; it has {sorted(cols)}. "
            "Fix: provide columns concept_id, lang, text (doc_id and title are optional)."
        )
    df = raw.select(
        *[F.col(c).cast("string").alias(c) for c in REQUIRED + OPTIONAL if c in cols], _FILE
    )
    if "title" not in cols:
        df = df.withColumn("title", F.lit(None).cast("string"))
    df = df.withColumn("lang", canonical_lang_column("lang")).withColumn(
        "concept_id", F.trim("concept_id")
    )
    return df, "doc_id" in cols


def _record_checks(has_doc_id: bool) -> dict[str, Column]:
    """Conditions of the records to refuse (or, ``empty``, to drop), by name."""
    blank_key = (
        F.col("concept_id").isNull()
        | (F.col("concept_id") == "")
        | F.col("lang").isNull()
        | (F.col("lang") == "")
    )
    bad_lang = ~blank_key & ~lang_code_is_valid_column("lang")
    # Parquet strings are raw bytes: invalid UTF-8 there is a broken writer. (A literal
    # U+FFFD is legitimate text: the sample itself documents the replacement character.)
    bad_bytes = ~F.is_valid_utf8("text") | F.coalesce(~F.is_valid_utf8("title"), F.lit(False))
    empty = F.col("text").isNull() | (F.trim("text") == "")
    checks = {"blank_key": blank_key, "bad_lang": bad_lang, "bad_bytes": bad_bytes, "empty": empty}
    if has_doc_id:
        checks["null_doc_id"] = F.col("doc_id").isNull() | (F.trim("doc_id") == "")
    return checks


def _check_records(
    df: DataFrame, cfg: IngestConfig, checks: dict[str, Column], show: list[str]
) -> dict[str, int]:
    """Count every check in one aggregation (and the rows); raise on the refused ones."""
    k = cfg.max_examples
    counts = (
        df.agg(
            F.count(F.lit(1)).alias("rows"),
            *[F.sum(F.when(c, 1).otherwise(0)).alias(n) for n, c in checks.items()],
        )
        .first()
        .asDict()
    )
    if counts["blank_key"]:
        raise InputDataError(
            f"{cfg.input}: {counts['blank_key']} record(s) with an empty concept_id or lang, "
            "e.g.:\n"
            f"{_fmt(_examples(df, checks['blank_key'], show, k))}\nFix: every record needs both."
        )
    if counts["bad_lang"]:
        raise InputDataError(
            f"{cfg.input}: {counts['bad_lang']} record(s) with an invalid language code (expected "
            f"a code like en, de, zh-yue), e.g.:\n"
            f"{_fmt(_examples(df, checks['bad_lang'], show, k))}"
        )
    if counts["bad_bytes"]:
        raise InputDataError(
            f"{cfg.input}: {counts['bad_bytes']} record(s) contain bytes that are not valid "
            f"UTF-8, e.g.:\n{_fmt(_examples(df, checks['bad_bytes'], show, k))}\n"
            "Fix: set ingest.encoding to the file's real encoding (e.g. latin-1, cp1252, utf-16) "
            "or re-encode the file as UTF-8."
        )
    if counts.get("null_doc_id"):
        raise InputDataError(
            f"{cfg.input}: {counts['null_doc_id']} record(s) with an empty doc_id, e.g.:\n"
            f"{_fmt(_examples(df, checks['null_doc_id'], show, k))}\n"
            "Fix: fill doc_id for every record, or drop the column to derive <lang>:<concept_id>."
        )
    return counts


def _drop_empty_text(
    df: DataFrame, cfg: IngestConfig, n_empty: int, empty: Column, show: list[str]
) -> tuple[DataFrame, list[dict[str, Any]]]:
    """Drop the ``n_empty`` records with empty text, or fail (``on_empty_text``); the
    frame and examples of what was dropped."""
    examples = _examples(df, empty, show, cfg.max_examples)
    if cfg.on_empty_text == "error":
        raise InputDataError(
            f"{cfg.input}: {n_empty} record(s) with empty text, e.g.:\n"
            f"{_fmt(examples)}\nFix: remove them, or set ingest.on_empty_text=drop."
        )
    return df.filter(~empty), examples


def _select_languages(df: DataFrame, cfg: IngestConfig) -> tuple[DataFrame, int]:
    """Keep the records of the (non-empty) ``ingest.languages``; how many were dropped."""
    wanted = [canonical_lang(lang) for lang in cfg.languages]
    n_before = df.count()
    df = df.filter(F.col("lang").isin(wanted))
    return df, n_before - df.count()


def _with_doc_ids(df: DataFrame, cfg: IngestConfig, has_doc_id: bool) -> DataFrame:
    """``doc_id``: the input's (trimmed, must be unique) or ``<lang>:<concept_id>``."""
    if not has_doc_id:
        return df.withColumn("doc_id", F.concat_ws(":", "lang", "concept_id"))
    df = df.withColumn("doc_id", F.trim("doc_id"))
    dup_ids = df.groupBy("doc_id").count().filter("count > 1")
    n_dup_ids = dup_ids.count()
    if n_dup_ids:
        ex = [r.asDict() for r in dup_ids.limit(cfg.max_examples).collect()]
        raise InputDataError(
            f"{cfg.input}: {n_dup_ids} doc_id value(s) occur more than once, e.g. {ex}. "
            "Fix: make doc_id unique, or drop the column to derive <lang>:<concept_id>."
        )
    return df


def _one_document_per_concept_and_language(
    df: DataFrame, cfg: IngestConfig
) -> tuple[DataFrame, int, list[dict[str, Any]]]:
    """Keep the smallest doc_id of each (concept, language), deterministically; the others
    are dropped or an error (``on_duplicate``). The frame, and how many were dropped with
    examples."""
    rank = F.row_number().over(Window.partitionBy("concept_id", "lang").orderBy("doc_id"))
    df = df.withColumn("_rank", rank)
    dup = F.col("_rank") > 1
    n_dup = df.filter(dup).count()
    examples: list[dict[str, Any]] = []
    if n_dup:
        examples = _examples(df, dup, ["doc_id", "concept_id", "lang"], cfg.max_examples)
        if cfg.on_duplicate == "error":
            raise InputDataError(
                f"{cfg.input}: {n_dup} duplicate (concept_id, lang) record(s) beyond the first, "
                f"e.g.:\n{_fmt(examples)}\nFix: deduplicate, or set ingest.on_duplicate=keep_first."
            )
        log.warning(
            "%d duplicate (concept_id, lang) record(s) dropped (kept the smallest doc_id), e.g. %s",
            n_dup,
            examples[:2],
        )
    return df.filter(~dup).drop("_rank", _FILE), n_dup, examples


def build_documents(spark: SparkSession, cfg: IngestConfig) -> tuple[DataFrame, dict[str, Any]]:
    """Validate and normalise the corpus into the ``documents`` schema.

    Returns
    -------
    documents : DataFrame with :data:`pipeline.io.schemas.DOCUMENTS` columns
    report : dict of counts (per language, dropped by reason) and examples
    """
    raw, fmt = _read_records(spark, cfg)
    df, has_doc_id = _normalised_columns(raw, cfg, fmt)
    checks = _record_checks(has_doc_id)
    show = (
        ["doc_id", "concept_id", "lang", "text"] if has_doc_id else ["concept_id", "lang", "text"]
    )
    counts = _check_records(df, cfg, checks, show)
    report: dict[str, Any] = {"input": cfg.input, "format": fmt, "rows_read": counts["rows"]}
    dropped: dict[str, int] = {}
    if counts["empty"]:
        df, report["empty_text_examples"] = _drop_empty_text(
            df, cfg, counts["empty"], checks["empty"], show
        )
        dropped["empty_text"] = counts["empty"]
    if cfg.languages:
        df, dropped["language_not_selected"] = _select_languages(df, cfg)
    df = _with_doc_ids(df, cfg, has_doc_id)
    df, n_dup, examples = _one_document_per_concept_and_language(df, cfg)
    if n_dup:
        dropped["duplicate_concept_lang"] = n_dup
        report["duplicate_examples"] = examples
    report["dropped"] = dropped
    return df, report


def run(spark: SparkSession, cfg: Config) -> dict[str, Any]:
    """Stage entry point: build ``documents`` from ``cfg.ingest.input`` and write it."""
    docs, report = build_documents(spark, cfg.ingest)
    docs = (
        docs.repartitionByRange(cfg.spark.shuffle_partitions, "lang", "doc_id")
        .sortWithinPartitions("lang", "doc_id")
        .cache()
    )
    per_lang = {
        r["lang"]: r["count"] for r in docs.groupBy("lang").count().orderBy("lang").collect()
    }
    if not per_lang:
        raise InputDataError(f"{cfg.ingest.input}: no documents left after validation ({report}).")
    report["documents_per_language"] = per_lang
    report["documents"] = sum(per_lang.values())
    report["concepts"] = docs.select("concept_id").distinct().count()
    path = cfg.paths.dataset("documents")
    write_dataset(
        spark,
        docs,
        DOCUMENTS,
        path,
        manifest={"report": report},
        expected_rows=report["documents"],
        **write_options(cfg.paths),
    )
    docs.unpersist()
    report["path"] = path
    return report
