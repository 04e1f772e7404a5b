"""Stage ``embed``: any document collection to the ``embeddings`` dataset.

Executors embed Arrow batches of ``embed.batch_rows`` documents with the same code as
:meth:`pipeline.model.Cr5Model.embed` (tokeniser, vocabulary, IDF, Φ_l), so the
vectors equal the Python API's to the last bit. Each Python worker loads the model
once, and only the languages it meets (lazily); memory per executor is bounded by
the batch size plus the loaded languages' Φ_l. On a cluster the model directory is
shipped as an archive (:mod:`pipeline.model.shipping`); in local mode executors read
it in place.
Languages the model does not know are counted and skipped with a warning in the
report (or refused, ``embed.on_unknown_language: error``).

Writing: with Parquet output on a local (or locally mounted) path the Python workers write
the dataset's files themselves, straight from Arrow (:func:`write_directly` with
:func:`write_files_fn`, the writer of :mod:`pipeline.io.embedding_writer`, committed by
:func:`~pipeline.io.datasets.write_dataset` with ``files=``): one pass, and the vectors
never cross into the JVM. Elsewhere (Delta, HDFS, S3, ``embed.direct_write: false``) the
batches go back to Spark (:func:`write_with_spark` with :func:`embed_fn`), are counted and
written by Spark's writer.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pipeline.config import Config, EmbedConfig
from pipeline.errors import InputDataError, ModelError
from pipeline.io import delta
from pipeline.io.arrow_scan import Piece, plan_scan, read_pieces, scan_schema
from pipeline.io.datasets import HadoopFS, read_dataset, read_table, write_dataset, write_options
from pipeline.io.embedding_writer import (
    FILES_SCHEMA,
    INPUT_COLUMNS,
    BackgroundChecksums,
    FileRow,
    canonical_batch,
    files_batch,
    keep_reported_files,
    language_filter,
    tally_files,
    task_tag,
    write_batches,
)
from pipeline.io.schemas import DOCUMENTS, EMBEDDINGS
from pipeline.model.batches import embed_batch
from pipeline.model.format import model_fingerprint, read_model_json, verify_files
from pipeline.model.shipping import ship_model, worker_model
from pipeline.text.languages import canonical_lang

log = logging.getLogger(__name__)

OUTPUT_SCHEMA = "doc_id string, lang string, concept_id string, n_terms int, vector array<float>"


def embed_fn(
    location: str, version: str, *, normalize: bool
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function; captures only strings and flags."""

    def fn(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        model = worker_model(location, version)
        for batch in batches:
            yield embed_batch(model, batch, normalize=normalize)

    return fn


def write_files_fn(
    directory: str,
    location: str,
    version: str,
    *,
    normalize: bool,
    languages: Sequence[str] | None = None,
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function of the direct write: embed each Arrow batch with the model
    and append it to this task's Parquet file of its language, then return one small row per
    file (:func:`pipeline.io.embedding_writer.write_batches`, which also counts the rows of
    languages not in ``languages``, None: all, without embedding them)."""
    keep = language_filter(languages)

    def fn(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        embed = _embedder(worker_model(location, version), normalize)
        rows = write_batches(batches, directory, task_tag(), embed, keep)
        if rows:
            yield files_batch(rows)

    return fn


def _embedder(model: Any, normalize: bool) -> Callable[[pa.RecordBatch], pa.RecordBatch]:
    """The model's embedding of an Arrow batch, as the writer calls it."""
    return functools.partial(embed_batch, model, normalize=normalize)


def read_write_files_fn(
    directory: str,
    location: str,
    version: str,
    *,
    normalize: bool,
    languages: Sequence[str] | None,
    batch_rows: int,
) -> Callable[[Iterator[list[Piece]]], Iterator[FileRow]]:
    """The direct read: like :func:`write_files_fn`, for an RDD whose elements are scan tasks
    (:func:`pipeline.io.arrow_scan.plan_scan`); each task reads its row groups with pyarrow,
    so the texts never go through the JVM either."""
    keep = language_filter(languages)

    def fn(tasks: Iterator[list[Piece]]) -> Iterator[FileRow]:
        embed = _embedder(worker_model(location, version), normalize)
        for pieces in tasks:
            batches = (canonical_batch(b) for b in read_pieces(pieces, INPUT_COLUMNS, batch_rows))
            yield from write_batches(batches, directory, task_tag(), embed, keep)

    return fn


def _input_format(e: EmbedConfig) -> str:
    """``embed.format`` with ``auto`` resolved from ``embed.input``'s name."""
    if e.format != "auto":
        return e.format
    jsonl = (e.input or "").rstrip("/").endswith((".jsonl", ".json", ".ndjson"))
    return "jsonl" if jsonl else "parquet"


def read_input(spark: SparkSession, cfg: Config) -> DataFrame:
    """The documents to embed: the documents dataset, or ``embed.input``."""
    e = cfg.embed
    if e.input is None:
        return read_dataset(spark, DOCUMENTS, cfg.paths.dataset("documents"))
    if not HadoopFS(spark, e.input).exists(e.input):
        raise InputDataError(f"embed.input {e.input} does not exist")
    fmt = _input_format(e)
    df = spark.read.json(e.input) if fmt == "jsonl" else read_table(spark, e.input)
    missing = [c for c in ("doc_id", "lang", "text") if c not in df.columns]
    if missing:
        raise InputDataError(
            f"embed.input {e.input} lacks column(s) {missing} (has {df.columns}); it needs "
            "doc_id, lang and text (concept_id is optional)"
        )
    if "concept_id" not in df.columns:
        df = df.withColumn("concept_id", F.lit(None).cast("string"))
    return df


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _is_id(t: pa.DataType) -> bool:
    return _is_text(t) or pa.types.is_integer(t)


#: Arrow types the direct read takes for each input column (others: Spark's reader casts).
_DIRECT_READ_TYPES = {
    "doc_id": _is_id,
    "concept_id": lambda t: _is_id(t) or pa.types.is_null(t),
    "lang": _is_text,
    "text": _is_text,
}


def _direct_read_path(spark: SparkSession, cfg: Config) -> str | None:
    """The input's local path when the executors can read it with pyarrow
    (``embed.direct_read``): Parquet (not Delta) on a local or locally mounted file system,
    with string (or integer id) columns; None otherwise (Spark's reader)."""
    e = cfg.embed
    path = e.input or cfg.paths.dataset("documents")
    if not e.direct_read or (e.input is not None and _input_format(e) == "jsonl"):
        return None
    fs = HadoopFS(spark, path)
    if not fs.is_local() or delta.is_delta_table(fs, path):
        return None
    schema = scan_schema(path)
    odd = {
        c: str(schema.field(c).type)
        for c, ok in _DIRECT_READ_TYPES.items()
        if c in schema.names and not ok(schema.field(c).type)
    }
    if odd:
        log.info("embed: Spark reads %s (column types %s need its casts)", path, odd)
        return None
    return path


def _check_languages(
    found: dict[str, int], selected: list[str], meta: dict, model_path: str, cfg: Config
) -> tuple[list[str], dict[str, int], list[str]]:
    """From the input's documents per language: the languages to embed, the skipped ones and
    the warnings; raise InputDataError for an empty input, unknown languages under
    ``embed.on_unknown_language: error``, or no language of the model."""
    e = cfg.embed
    if not found:
        raise InputDataError(
            f"nothing to embed: {e.input or cfg.paths.dataset('documents')} has no documents"
        )
    wanted = [lang for lang in (selected or sorted(found)) if lang in meta["languages"]]
    skipped = {lang: n for lang, n in found.items() if lang not in wanted}
    unknown = {lang: n for lang, n in skipped.items() if lang not in meta["languages"]}
    warnings_: list[str] = []
    if unknown:
        msg = (
            f"{sum(unknown.values())} document(s) in language(s) the model {model_path} does "
            f"not have were skipped: "
            + ", ".join(f"{lang} ({n})" for lang, n in sorted(unknown.items()))
            + f"; model languages: {', '.join(meta['languages'])}"
        )
        if e.on_unknown_language == "error":
            raise InputDataError(
                msg + ". Fix: filter the input, set embed.languages, or set "
                "embed.on_unknown_language=warn to skip them."
            )
        log.warning("%s", msg)
        warnings_.append(msg)
    for lang, n in sorted(skipped.items()):
        if lang not in unknown:
            log.info("skipping %d document(s) in language %r (not in embed.languages)", n, lang)
    if not any(lang in found for lang in wanted):
        raise InputDataError(
            f"no document is in a language of the model {model_path} (input languages: "
            f"{sorted(found)}; model languages: {meta['languages']})"
        )
    return wanted, dict(sorted(skipped.items())), warnings_


@dataclass
class _EmbedJob:
    """What both write paths share: the model (read, checked and shipped), the documents to
    embed with canonical columns, and where the embeddings go.

    Attributes
    ----------
    model_path : str
    meta : dict
        The model's ``model.json``.
    docs : DataFrame
        ``doc_id, lang, concept_id, text`` (strings; language codes canonical).
    selected : list of str
        ``embed.languages``, canonical (empty: every language of the model).
    location, version : str
        Where the executors load the model from, and the version that keys their cache.
    path : str
        The ``embeddings`` dataset.
    """

    model_path: str
    meta: dict[str, Any]
    docs: DataFrame
    selected: list[str]
    location: str
    version: str
    path: str


def run(spark: SparkSession, cfg: Config) -> dict[str, Any]:
    """The registered stage: embed the input documents into the ``embeddings`` dataset, with
    the executors writing the files (:func:`write_directly`) where they can, else Spark's
    writer (:func:`write_with_spark`)."""
    job = _prepare(spark, cfg)
    fs = HadoopFS(spark, job.path)
    if cfg.embed.direct_write and cfg.paths.format == "parquet" and fs.is_local():
        report = write_directly(spark, cfg, job)
    else:
        report = write_with_spark(spark, cfg, job)
    report["path"] = job.path
    return report


def _prepare(spark: SparkSession, cfg: Config) -> _EmbedJob:
    """Read and check the model, read the input, ship the model to the executors."""
    e = cfg.embed
    model_path = cfg.paths.dataset("model")
    meta = read_model_json(model_path)
    if meta.get("phi_format", "dense") == "selection":
        raise ModelError(
            f"model {model_path} is a {meta.get('method', 'selection')!r} model: it maps "
            f"documents to sparse vectors over a union vocabulary of r={meta['r']} terms, which "
            "the embeddings dataset (dense float vectors) does not hold. Evaluate it with the "
            "evaluate stage (evaluate.methods) or embed with the Python API (Cr5Model.embed "
            "returns a scipy.sparse matrix for it)"
        )
    # Language codes are canonical (trimmed, lower-case) everywhere: ingest, this job
    # and Cr5Model / python -m pipeline embed (canonical_lang) treat "EN " as "en".
    docs = read_input(spark, cfg).select(
        F.col("doc_id").cast("string"),
        F.lower(F.trim(F.col("lang").cast("string"))).alias("lang"),
        F.col("concept_id").cast("string"),
        F.col("text").cast("string"),
    )
    selected = [canonical_lang(lang) for lang in e.languages]
    location = ship_model(spark.sparkContext, model_path)
    version = str(meta.get("created_utc"))
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(e.batch_rows))
    return _EmbedJob(
        model_path, meta, docs, selected, location, version, cfg.paths.dataset("embeddings")
    )


def write_directly(spark: SparkSession, cfg: Config, job: _EmbedJob) -> dict[str, Any]:
    """The direct write: the Python workers embed the model's (selected) languages into
    Parquet files and count the rest, in one pass; the language checks run on those counts
    before anything is published, and the model's checksums are computed on the driver
    meanwhile. Returns the report."""
    meta = job.meta
    t0 = time.perf_counter()
    candidates = [lang for lang in (job.selected or meta["languages"]) if lang in meta["languages"]]
    checksums = BackgroundChecksums(
        functools.partial(verify_files, job.model_path, meta), candidates
    )
    source = _direct_read_path(spark, cfg)
    reader = "executors (pyarrow)" if source else "spark"

    def write_files(directory: str) -> dict[str, Any]:
        rows = _write_files(spark, cfg, job, directory, source, candidates)
        found, stats = tally_files(rows)
        wanted, skipped, warnings_ = _check_languages(
            found, job.selected, meta, job.model_path, cfg
        )
        checksums.result([lang for lang in wanted if lang in found])
        removed = keep_reported_files(directory, {r["file"] for r in rows if r["file"]})
        if removed:
            log.info("embed: removed %d file(s) of failed task attempts", removed)
        report = _report(
            cfg,
            job,
            stats,
            skipped,
            warnings_,
            writer="executors (Arrow to Parquet)",
            reader=reader,
            t0=t0,
        )
        return {"report": report, "expected_rows": report["documents"]}

    try:
        manifest = write_dataset(
            spark, None, EMBEDDINGS, job.path, files=write_files, **write_options(cfg.paths)
        )
    finally:
        checksums.close()
    return manifest["report"]


def _write_files(
    spark: SparkSession,
    cfg: Config,
    job: _EmbedJob,
    directory: str,
    source: str | None,
    candidates: list[str],
) -> list[dict[str, Any]]:
    """Run the direct write's tasks into ``directory``: reading ``source`` with pyarrow on
    the executors when given, else Spark's reading of the input; one row per file written
    or language skipped (:data:`FILES_SCHEMA`)."""
    e = cfg.embed
    if source is not None:
        sc = spark.sparkContext
        tasks = plan_scan(source, sc.defaultParallelism)
        read_fn = read_write_files_fn(
            directory,
            job.location,
            job.version,
            normalize=e.normalize,
            languages=candidates,
            batch_rows=e.batch_rows,
        )
        sc.setJobDescription(f"embed: read, embed and write {len(tasks)} task(s)")
        names = ("file", "lang", "rows", "zeros")
        return [
            dict(zip(names, row, strict=True))
            for row in sc.parallelize(tasks, max(1, len(tasks))).mapPartitions(read_fn).collect()
        ]
    fn = write_files_fn(
        directory, job.location, job.version, normalize=e.normalize, languages=candidates
    )
    return [r.asDict() for r in job.docs.mapInArrow(fn, FILES_SCHEMA).collect()]


def write_with_spark(spark: SparkSession, cfg: Config, job: _EmbedJob) -> dict[str, Any]:
    """Spark's write (Delta, HDFS, S3, ``embed.direct_write: false``): count the input's
    languages and check them, verify the model's files, embed into a persisted DataFrame,
    count it and write it with Spark's writer. Returns the report."""
    e = cfg.embed
    found = {r["lang"]: r["count"] for r in job.docs.groupBy("lang").count().collect()}
    wanted, skipped, warnings_ = _check_languages(
        found, job.selected, job.meta, job.model_path, cfg
    )
    verify_files(job.model_path, job.meta, wanted, checksums=True)
    t0 = time.perf_counter()
    out = (
        job.docs.filter(F.col("lang").isin(wanted))
        .mapInArrow(embed_fn(job.location, job.version, normalize=e.normalize), OUTPUT_SCHEMA)
        .persist()
    )
    stats = {
        r["lang"]: {"documents": r["n"], "zero_vectors": r["zeros"]}
        for r in out.groupBy("lang")
        .agg(
            F.count(F.lit(1)).alias("n"),
            F.sum(F.when(F.col("n_terms") == 0, 1).otherwise(0)).alias("zeros"),
        )
        .orderBy("lang")
        .collect()
    }
    report = _report(cfg, job, stats, skipped, warnings_, writer="spark", reader="spark", t0=t0)
    write_dataset(
        spark,
        out,
        EMBEDDINGS,
        job.path,
        manifest={"report": report},
        expected_rows=report["documents"],
        **write_options(cfg.paths),
    )
    out.unpersist()
    return report


def _report(
    cfg: Config,
    job: _EmbedJob,
    stats: dict[str, dict[str, int]],
    skipped: dict[str, int],
    warnings_: list[str],
    *,
    writer: str,
    reader: str,
    t0: float,
) -> dict[str, Any]:
    """The stage's report (the ``embeddings`` manifest); warns about documents that got the
    zero vector. ``t0``: when the embedding started."""
    zeros = {lang: st["zero_vectors"] for lang, st in stats.items() if st["zero_vectors"]}
    if zeros:
        msg = (
            f"{sum(zeros.values())} document(s) have no word of the model's vocabulary and "
            "got the zero vector (n_terms = 0): "
            + ", ".join(f"{lang} {n}" for lang, n in sorted(zeros.items()))
        )
        log.warning("%s", msg)
        warnings_.append(msg)
    return {
        "model": job.model_path,
        # Which model made these vectors (the search index checks it).
        "model_fingerprint": model_fingerprint(job.meta),
        "per_language": stats,
        "documents": sum(st["documents"] for st in stats.values()),
        "skipped_languages": skipped,
        "normalized": cfg.embed.normalize,
        "dim": int(job.meta["r"]),
        "embed_seconds": round(time.perf_counter() - t0, 2),
        "writer": writer,
        "reader": reader,
        "warnings": warnings_,
    }
