"""The embed stage's direct write: Python workers write the ``embeddings`` dataset's Parquet
files themselves, straight from Arrow, and the driver keeps what the successful tasks
reported.

- :func:`write_batches`: on a worker, embed Arrow batches (with the embedding function the
  stage gives) and append each language's rows to this task's file of that language
  (``<directory>/lang=<l>/part-<task>.parquet``, the layout and schema Spark's writer would
  give); one row per file written, or per language skipped (:data:`FILES_SCHEMA`,
  :func:`files_batch`).
- :func:`keep_reported_files`: on the driver, delete the files of failed or speculative
  attempts; :func:`tally_files`: the documents per language the rows report (the manifest's
  ``per_language``).
- :class:`BackgroundChecksums`: the model's language files hashed on a driver thread while
  the embedding job runs.

The vectors never go through the JVM: converting float arrays between Arrow and Spark rows
and writing them with Spark's Parquet writer costs more than the embedding itself
(bench/README.md, "Embedding"). This module knows nothing of the model: the stage passes the
function that embeds a batch.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.io.arrow_scan import string_column

__all__ = [
    "FILES_SCHEMA",
    "FILE_SCHEMA",
    "FILE_WRITER_OPTIONS",
    "INPUT_COLUMNS",
    "BackgroundChecksums",
    "FileRow",
    "canonical_batch",
    "files_batch",
    "keep_reported_files",
    "language_filter",
    "tally_files",
    "task_tag",
    "write_batches",
]

#: What each task of the direct write returns per file it wrote.
FILES_SCHEMA = "file string, lang string, rows long, zeros long"

#: One row of :data:`FILES_SCHEMA`: (file, lang, rows, zeros); ``file`` is None for the rows
#: of a language that was skipped.
FileRow = tuple[str | None, str, int, int]

#: The input columns the embed stage reads, in this order.
INPUT_COLUMNS = ("doc_id", "lang", "concept_id", "text")

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


def canonical_batch(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The casts the embed stage applies with Spark (strings; language codes trimmed and
    lower-case, as every language code of the pipeline: ``canonical_lang``)."""
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


def task_tag() -> str:
    """Stage, partition and attempt: unique per task attempt, so file names never clash."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return f"{ctx.stageId()}-{ctx.partitionId():05d}-{ctx.attemptNumber()}"


def language_filter(languages: Sequence[str] | None) -> pa.Array | None:
    """The languages :func:`write_batches` embeds, as it takes them (None: all)."""
    return None if languages is None else pa.array(sorted(languages), pa.string())


def write_batches(
    batches: Iterable[pa.RecordBatch],
    directory: str,
    tag: str,
    embed: Callable[[pa.RecordBatch], pa.RecordBatch],
    keep: pa.Array | None,
) -> list[FileRow]:
    """Embed ``batches`` (``embed`` maps a batch of :data:`INPUT_COLUMNS` to the
    ``embeddings`` columns) into this task's file per language; one (file, lang, rows,
    zeros) per file written and one (None, lang, rows, 0) per skipped language.

    Rows whose language is not in ``keep`` (:func:`language_filter`; None: all) are not
    embedded; they are counted and reported as rows with a null ``file``, so the driver
    learns the input's languages from this one pass instead of a counting job before it.
    File names carry ``tag`` (:func:`task_tag`), so a retried or speculative attempt never
    overwrites another's file; the driver keeps only the files the successful attempts
    report (:func:`keep_reported_files`)."""
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
            out = embed(batch)
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
    rows: list[FileRow] = [
        (f"lang={lang}/part-{tag}.parquet", lang, n, z) for lang, (n, z) in counts.items()
    ]
    rows += [(None, lang, n, 0) for lang, n in skipped.items()]
    rows.sort(key=lambda row: row[1])
    return rows


def files_batch(rows: Sequence[FileRow]) -> pa.RecordBatch:
    """:func:`write_batches`' rows as an Arrow batch of :data:`FILES_SCHEMA` (what a
    ``mapInArrow`` task returns)."""
    return pa.RecordBatch.from_arrays(
        [
            pa.array([row[0] for row in rows], pa.string()),
            pa.array([row[1] for row in rows], pa.string()),
            pa.array([row[2] for row in rows], pa.int64()),
            pa.array([row[3] for row in rows], pa.int64()),
        ],
        names=["file", "lang", "rows", "zeros"],
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


def tally_files(
    rows: Iterable[dict[str, Any]],
) -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    """From the tasks' rows (dicts of :data:`FILES_SCHEMA`): the input's documents per
    language (written or skipped), and per written language its ``documents`` and
    ``zero_vectors``, sorted by language (the manifest's ``per_language``)."""
    found: dict[str, int] = {}
    stats: dict[str, dict[str, int]] = {}
    for r in rows:
        found[r["lang"]] = found.get(r["lang"], 0) + r["rows"]
        if r["file"]:
            st = stats.setdefault(r["lang"], {"documents": 0, "zero_vectors": 0})
            st["documents"] += r["rows"]
            st["zero_vectors"] += r["zeros"]
    return found, dict(sorted(stats.items()))


class BackgroundChecksums:
    """Checks of the model's language files, one language at a time on a driver thread,
    while the embedding job runs (the driver only waits for it).

    ``verify(languages, checksums=...)`` checks those languages' files (raising the
    model's error): with ``checksums=False`` at once (sizes), with ``checksums=True`` (the
    SHA-256 of each) in the background. :meth:`result` waits for the languages the input
    had and raises their error.
    """

    def __init__(self, verify: Callable[..., None], languages: list[str]) -> None:
        verify(languages, checksums=False)
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="model-sha256")
        self._jobs: dict[str, Future[None]] = {
            lang: self._pool.submit(verify, [lang], checksums=True) for lang in languages
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
