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
:func:`write_files_fn`, committed by :func:`~pipeline.io.datasets.write_dataset` with
``files=``): one pass, and the vectors never cross into the JVM. Elsewhere (Delta, HDFS, S3,
``embed.direct_write: false``) the batches go back to Spark (:func:`write_with_spark` with
:func:`embed_fn`), are counted and written by Spark's writer.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pipeline.config import Config, EmbedConfig
from pipeline.errors import InputDataError, ModelError
from pipeline.io import delta
from pipeline.io.arrow_scan import Piece, plan_scan, read_pieces, scan_schema, string_column
from pipeline.io.datasets import HadoopFS, read_dataset, read_table, write_dataset, write_options
from pipeline.io.schemas import DOCUMENTS, EMBEDDINGS
from pipeline.model.batches import embed_batch
from pipeline.model.cr5_model import canonical_lang
from pipeline.model.format import model_fingerprint, read_model_json, verify_files
from pipeline.model.shipping import ship_model, worker_model

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


#: What each task of the direct write returns per file it wrote.
FILES_SCHEMA = "file string, lang string, rows long, zeros long"


def write_files_fn(
    directory: str,
    location: str,
    version: str,
    *,
    normalize: bool,
    languages: Sequence[str] | None = None,
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function of the direct write: embed each Arrow batch and append it
    to this task's Parquet file of its language (``<directory>/lang=<l>/part-<task>.parquet``,
    the layout and schema Spark's writer would give), then return one small row per file.

    Rows whose language is not in ``languages`` (None: all) are not embedded; they are
    counted and reported as rows with a null ``file``, so the driver learns the input's
    languages from this one pass instead of a counting job before it.

    The vectors never go through the JVM: converting float arrays between Arrow and Spark
    rows and writing them with Spark's Parquet writer costs more than the embedding itself
    (bench/README.md, "Embedding"). File names carry the stage, partition and attempt, so a
    retried or speculative attempt never overwrites another's file; the driver keeps only the
    files the successful attempts report (:func:`keep_reported_files`).
    """
    keep = None if languages is None else pa.array(sorted(languages), pa.string())

    def fn(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        model = worker_model(location, version)
        rows = _embed_to_files(batches, directory, _task_tag(), model, keep, normalize)
        if rows:
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array([row[0] for row in rows], pa.string()),
                    pa.array([row[1] for row in rows], pa.string()),
                    pa.array([row[2] for row in rows], pa.int64()),
                    pa.array([row[3] for row in rows], pa.int64()),
                ],
                names=["file", "lang", "rows", "zeros"],
            )

    return fn


def read_write_files_fn(
    directory: str,
    location: str,
    version: str,
    *,
    normalize: bool,
    languages: Sequence[str] | None,
    batch_rows: int,
) -> Callable[[Iterator[list[Piece]]], Iterator[tuple[str | None, str, int, int]]]:
    """The direct read: like :func:`write_files_fn`, for an RDD whose elements are scan tasks
    (:func:`pipeline.io.arrow_scan.plan_scan`); each task reads its row groups with pyarrow,
    so the texts never go through the JVM either."""
    keep = None if languages is None else pa.array(sorted(languages), pa.string())

    def fn(tasks: Iterator[list[Piece]]) -> Iterator[tuple[str | None, str, int, int]]:
        model = worker_model(location, version)
        for pieces in tasks:
            batches = (canonical_batch(b) for b in read_pieces(pieces, INPUT_COLUMNS, batch_rows))
            yield from _embed_to_files(batches, directory, _task_tag(), model, keep, normalize)

    return fn


#: The input columns the embed stage reads, in this order.
INPUT_COLUMNS = ("doc_id", "lang", "concept_id", "text")


def canonical_batch(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The casts :func:`run` applies with Spark (strings; language codes trimmed and
    lower-case, as :func:`~pipeline.model.cr5_model.canonical_lang`)."""
    lang = pc.utf8_lower(pc.utf8_trim_whitespace(string_column(batch.column("lang"))))
    return pa.RecordBatch.from_arrays(
        [
            string_column(batch.column("doc_id")),
            lang,
            string_column(batch.column("concept_id")),
            string_column(batch.column("text")),
        ],
        names=list(INPUT_COLUMNS),
    )


def _task_tag() -> str:
    """Stage, partition and attempt: unique per task attempt, so file names never clash."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return f"{ctx.stageId()}-{ctx.partitionId():05d}-{ctx.attemptNumber()}"


def _embed_to_files(
    batches: Iterable[pa.RecordBatch],
    directory: str,
    tag: str,
    model: Any,
    keep: pa.Array | None,
    normalize: bool,
) -> list[tuple[str | None, str, int, int]]:
    """Embed ``batches`` into this task's file per language; one (file, lang, rows, zeros)
    per file written and one (None, lang, rows, 0) per skipped language."""
    import pyarrow.parquet as pq

    writers: dict[str, Any] = {}
    counts: dict[str, list[int]] = {}
    skipped: dict[str, int] = {}
    try:
        for batch in batches:
            if keep is not None:
                wanted = pc.is_in(batch.column("lang"), value_set=keep)
                if not pc.all(wanted).as_py():
                    rest = pc.value_counts(batch.column("lang").filter(pc.invert(wanted)))
                    for item in rest.to_pylist():
                        skipped[item["values"]] = skipped.get(item["values"], 0) + item["counts"]
                    batch = batch.filter(wanted)
            if not batch.num_rows:
                continue
            out = embed_batch(model, batch, normalize=normalize)
            langs = out.column("lang")
            present = pc.unique(langs).to_pylist()
            for lang in present:
                part = out if len(present) == 1 else out.filter(pc.equal(langs, lang))
                part = part.select(["doc_id", "concept_id", "n_terms", "vector"])
                if lang not in writers:
                    os.makedirs(f"{directory}/lang={lang}", exist_ok=True)
                    writers[lang] = pq.ParquetWriter(
                        f"{directory}/lang={lang}/part-{tag}.parquet",
                        FILE_SCHEMA,
                        **FILE_WRITER_OPTIONS,
                    )
                    counts[lang] = [0, 0]
                writers[lang].write_batch(part.cast(FILE_SCHEMA))
                counts[lang][0] += part.num_rows
                counts[lang][1] += int(pc.sum(pc.equal(part.column("n_terms"), 0)).as_py() or 0)
    finally:
        for w in writers.values():
            w.close()
    rows: list[tuple[str | None, str, int, int]] = [
        (f"lang={lang}/part-{tag}.parquet", lang, n, z) for lang, (n, z) in counts.items()
    ]
    rows += [(None, lang, n, 0) for lang, n in skipped.items()]
    rows.sort(key=lambda row: row[1])
    return rows


#: Parquet writer options of the direct write. The vectors are near-random floats: neither a
#: dictionary nor compression shrinks them, but both, and min/max statistics over every
#: element, cost writer CPU (bench/README.md, "Embedding"). The small columns keep Spark's
#: defaults.
FILE_WRITER_OPTIONS: dict[str, Any] = {
    "use_dictionary": ["doc_id", "concept_id"],
    "write_statistics": ["doc_id", "concept_id", "n_terms"],
    "compression": {
        "doc_id": "snappy",
        "concept_id": "snappy",
        "n_terms": "snappy",
        "vector": "none",
    },
}


#: Arrow schema of the files the direct write produces (the ``embeddings`` columns but the
#: partition column ``lang``, which lives in the directory name).
FILE_SCHEMA = pa.schema(
    [
        pa.field("doc_id", pa.string(), False),
        pa.field("concept_id", pa.string()),
        pa.field("n_terms", pa.int32(), False),
        pa.field("vector", pa.list_(pa.field("element", pa.float32(), False)), False),
    ]
)


def keep_reported_files(directory: str, reported: set[str]) -> int:
    """Delete every file under ``directory`` that no successful task reported (leftovers of
    failed or speculative attempts); return how many were deleted."""
    removed = 0
    for root, _dirs, names in os.walk(directory):
        for name in names:
            rel = os.path.relpath(os.path.join(root, name), directory)
            if rel not in reported:
                os.remove(os.path.join(root, name))
                removed += 1
    return removed


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


class _BackgroundChecksums:
    """SHA-256 of the model's language files, one language at a time on a driver thread,
    while the embedding job runs (the driver only waits for it); :meth:`result` waits for the
    languages the input had and raises their ModelError. Sizes are checked at once."""

    def __init__(self, model_path: str, meta: dict, languages: list[str]) -> None:
        verify_files(model_path, meta, languages, checksums=False)
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="model-sha256")
        self._jobs: dict[str, Future[None]] = {
            lang: self._pool.submit(verify_files, model_path, meta, [lang], checksums=True)
            for lang in languages
        }

    def result(self, languages: list[str]) -> None:
        try:
            for lang, job in self._jobs.items():
                if lang not in languages:  # not hashed at all if not started yet
                    job.cancel()
            for lang in languages:
                self._jobs[lang].result()
        finally:
            self.close()

    def close(self) -> None:
        """Drop the checks not waited for (languages the input lacks, or the job failed)."""
        self._pool.shutdown(wait=True, cancel_futures=True)


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
    checksums = _BackgroundChecksums(job.model_path, meta, candidates)
    source = _direct_read_path(spark, cfg)
    reader = "executors (pyarrow)" if source else "spark"

    def write_files(directory: str) -> dict[str, Any]:
        rows = _write_files(spark, cfg, job, directory, source, candidates)
        found: dict[str, int] = {}
        for r in rows:
            found[r["lang"]] = found.get(r["lang"], 0) + r["rows"]
        wanted, skipped, warnings_ = _check_languages(
            found, job.selected, meta, job.model_path, cfg
        )
        checksums.result([lang for lang in wanted if lang in found])
        removed = keep_reported_files(directory, {r["file"] for r in rows if r["file"]})
        if removed:
            log.info("embed: removed %d file(s) of failed task attempts", removed)
        stats: dict[str, dict[str, int]] = {}
        for r in rows:
            if r["file"]:
                st = stats.setdefault(r["lang"], {"documents": 0, "zero_vectors": 0})
                st["documents"] += r["rows"]
                st["zero_vectors"] += r["zeros"]
        report = _report(
            cfg,
            job,
            dict(sorted(stats.items())),
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
