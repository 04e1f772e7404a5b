"""Building a search index on Spark executors (the ``index`` stage's library).

Two jobs, both with their work in Python workers:

1. **Shards.** The ``embeddings`` rows (joined with each document's title and snippet) are
   assigned to shards, ``shard = xxhash64(doc_id) mod n_shards(lang)`` with
   ``n_shards(lang) = ceil(rows / search.shard_rows)``, and repartitioned so that each Spark
   partition holds exactly one shard (the partitioning key of each shard is chosen so that
   Spark's own hash partitioner sends it to a partition of its own, :func:`partition_salts`).
   A task sorts its rows by ``doc_id``, L2-normalises the vectors, builds the shard's faiss
   index (:func:`pipeline.search.shard.build_shard`) and returns the index's bytes and the
   documents' Parquet bytes in chunks. The result is persisted on the executors' disks and
   fetched by the driver one partition at a time, so the driver holds one shard at most,
   whatever the cluster; the shards build in parallel.
2. **CSLS terms** (``search.csls``). For each shard of each target language T and each other
   indexed language S, a task searches the ``evaluate.csls_k`` nearest documents of S for
   every document of the shard, over every shard of S, and returns the mean cosine, r_S (the
   executors read the shard files in place in local mode, else from ``SparkContext.addFile``).

Zero vectors (documents without a known word) are not indexed: their cosine with every
query is 0 and they would only pad results; they are counted in the report.
Everything is written into the temporary directory that :func:`pipeline.io.publish.publish`
renames into place, with the manifest last (:mod:`pipeline.search.format`).
"""

from __future__ import annotations

import functools
import io
import logging
import math
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pipeline.config import SearchConfig
from pipeline.errors import InputDataError
from pipeline.ranking import merge_topk
from pipeline.search.format import csls_file, docs_file, shard_file
from pipeline.search.shard import (
    build_shard,
    faiss_module,
    normalize_rows,
    search_shard,
    shard_vectors,
)

__all__ = [
    "BuildParams",
    "LanguagePlan",
    "build_shards",
    "compute_csls",
    "partition_salts",
    "plan_shards",
]

log = logging.getLogger(__name__)

#: Bytes per chunk of a shard file sent from an executor to the driver.
CHUNK_BYTES = 16 << 20

#: What a shard-building task returns: chunks of its two files, plus its counts.
SHARD_CHUNKS_SCHEMA = (
    "key int, file string, part int, parts int, rows long, zeros long, data binary"
)

#: The columns the shard job reads, in this order.
BUILD_COLUMNS = ("salt", "doc_id", "concept_id", "n_terms", "vector", "title", "snippet")

DOCS_SCHEMA = pa.schema(
    [
        pa.field("doc_id", pa.string(), False),
        pa.field("concept_id", pa.string()),
        pa.field("title", pa.string()),
        pa.field("snippet", pa.string()),
    ]
)


@dataclass(frozen=True)
class LanguagePlan:
    """How one language is indexed.

    Attributes
    ----------
    lang : str
    rows : int
        Its rows in ``embeddings`` (zero vectors included).
    shards : int
    kind : {"flat", "ivf", "hnsw"}
    first_key : int
        Global number of its first shard (shards are numbered across languages).
    """

    lang: str
    rows: int
    shards: int
    kind: str
    first_key: int


@dataclass(frozen=True)
class BuildParams:
    """What the executors need to build a shard (plain values; pickled into tasks)."""

    dim: int
    hnsw_m: int
    ef_construction: int
    threads: int
    ivf_lists: int | None = None


def plan_shards(rows_by_lang: dict[str, int], s: SearchConfig) -> dict[str, LanguagePlan]:
    """Shards and index kind of every language with rows (sorted by language)."""
    plans: dict[str, LanguagePlan] = {}
    key = 0
    for lang, rows in sorted(rows_by_lang.items()):
        if rows <= 0:
            continue
        shards = max(1, math.ceil(rows / s.shard_rows))
        if s.index_type == "auto":
            kind = "flat" if rows <= s.flat_max_rows else "ivf"
        else:
            kind = s.index_type
        plans[lang] = LanguagePlan(lang, int(rows), shards, kind, key)
        key += shards
    return plans


def partition_salts(spark: SparkSession, n: int) -> list[int]:
    """For each partition p of ``n``, a long whose Spark hash sends it to partition p.

    ``DataFrame.repartition(n, col)`` puts a row in partition ``pmod(hash(col), n)`` (Murmur3,
    seed 42: the same function as ``F.hash``), so shard keys replaced by these values land one
    shard per partition, with no two shards sharing a task.
    """
    found: dict[int, int] = {}
    span = 64 * n
    start = 0
    while len(found) < n:
        rows = (
            spark.range(start, start + span)
            .select(F.col("id"), F.expr(f"pmod(hash(id), {n})").alias("p"))
            .groupBy("p")
            .agg(F.min("id").alias("id"))
            .collect()
        )
        for r in rows:
            found.setdefault(int(r["p"]), int(r["id"]))
        start += span
    return [found[p] for p in range(n)]


def _shard_input(
    spark: SparkSession,
    embeddings: DataFrame,
    titles: DataFrame | None,
    plans: dict[str, LanguagePlan],
    salts: list[int],
    snippet_chars: int,
) -> DataFrame:
    """The rows of every shard, one shard per partition (``salts``: :func:`partition_salts`
    of the number of shards), sorted by doc_id. ``titles``: doc_id, title, text (None: no
    titles or snippets)."""
    df = embeddings.filter(F.col("lang").isin(list(plans)))
    shards = F.create_map(*[x for p in plans.values() for x in (F.lit(p.lang), F.lit(p.shards))])
    first = F.create_map(*[x for p in plans.values() for x in (F.lit(p.lang), F.lit(p.first_key))])
    key = F.element_at(first, F.col("lang")) + F.pmod(
        F.xxhash64("doc_id"), F.element_at(shards, F.col("lang"))
    ).cast("int")
    salt_array = F.array(*[F.lit(s) for s in salts])
    df = df.withColumn("salt", F.element_at(salt_array, key + 1))
    if titles is not None:
        snippet = F.substring(F.col("text"), 1, snippet_chars) if snippet_chars else F.lit(None)
        df = df.join(
            titles.select(
                "doc_id",
                F.col("title").cast("string").alias("title"),
                snippet.cast("string").alias("snippet"),
            ),
            on="doc_id",
            how="left",
        )
    else:
        df = df.withColumn("title", F.lit(None).cast("string")).withColumn(
            "snippet", F.lit(None).cast("string")
        )
    df = df.select(*BUILD_COLUMNS)
    return df.repartition(len(salts), "salt").sortWithinPartitions("salt", "doc_id")


def _chunks(
    key: int, file: str, data: memoryview, rows: int, zeros: int
) -> Iterator[pa.RecordBatch]:
    """``data`` as Arrow batches of one :data:`CHUNK_BYTES` chunk each (small batches keep the
    JVM's buffers small)."""
    parts = max(1, math.ceil(len(data) / CHUNK_BYTES))
    for i in range(parts):
        yield pa.RecordBatch.from_arrays(
            [
                pa.array([key], pa.int32()),
                pa.array([file], pa.string()),
                pa.array([i], pa.int32()),
                pa.array([parts], pa.int32()),
                pa.array([rows], pa.int64()),
                pa.array([zeros], pa.int64()),
                pa.array([bytes(data[i * CHUNK_BYTES : (i + 1) * CHUNK_BYTES])], pa.binary()),
            ],
            names=["key", "file", "part", "parts", "rows", "zeros", "data"],
        )


def _build_one(
    key: int, target: tuple[str, int, str], batches: list[pa.RecordBatch], params: BuildParams
) -> Iterator[pa.RecordBatch]:
    """Build shard ``key`` (language, shard number, kind) from its sorted rows.

    ``batches`` is emptied as soon as its rows are read, so the Arrow copy of the vectors
    is freed before the index is built: peak memory is about the normalised vectors plus
    the index (the vectors again, and the graph), then the index's serialised bytes.
    """
    lang, shard, kind = target
    table = pa.Table.from_batches(batches)
    batches.clear()
    keep = table.column("n_terms").to_numpy() > 0
    zeros = int((~keep).sum())
    table = table.filter(pa.array(keep))
    rows = table.num_rows
    docs = pa.table(
        [table.column(c).cast(DOCS_SCHEMA.field(c).type) for c in DOCS_SCHEMA.names],
        schema=DOCS_SCHEMA,
    )
    flat = table.column("vector").combine_chunks().flatten().to_numpy(zero_copy_only=False)
    del table
    if flat.size != rows * params.dim:
        raise InputDataError(
            f"embeddings of {lang!r}: vectors must all have length {params.dim} (the model's "
            "r); rerun the embed stage"
        )
    vectors, _ = normalize_rows(flat.reshape(rows, params.dim))
    del flat
    index = build_shard(
        vectors,
        kind,
        hnsw_m=params.hnsw_m,
        ef_construction=params.ef_construction,
        threads=params.threads,
        lists=params.ivf_lists,
    )
    del vectors
    buf = io.BytesIO()
    pq.write_table(docs, buf, compression="zstd")
    del docs
    yield from _chunks(key, docs_file(lang, shard), buf.getbuffer(), rows, zeros)
    del buf
    data = faiss_module().serialize_index(index)
    del index
    yield from _chunks(key, shard_file(lang, shard), memoryview(data), rows, zeros)


def _build_partition(
    batches: Iterator[pa.RecordBatch], *, targets: dict[int, tuple[str, int, str]],
    salts: dict[int, int], params: BuildParams,
) -> Iterator[pa.RecordBatch]:  # fmt: skip
    """``mapInArrow`` function: build every shard of this partition (one, by construction)."""
    current: int | None = None
    pending: list[pa.RecordBatch] = []
    for batch in batches:
        if batch.num_rows == 0:
            continue
        salt = batch.column("salt").to_numpy()
        cuts = np.flatnonzero(np.diff(salt)) + 1
        for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, len(salt)]):
            key = salts[int(salt[lo])]
            if current is not None and key != current:
                yield from _build_one(current, targets[current], pending, params)
                pending = []
            current = key
            pending.append(batch.slice(int(lo), int(hi - lo)))
    if current is not None:
        yield from _build_one(current, targets[current], pending, params)


def build_shards(
    spark: SparkSession,
    embeddings: DataFrame,
    titles: DataFrame | None,
    plans: dict[str, LanguagePlan],
    params: BuildParams,
    directory: Path,
    *,
    snippet_chars: int,
) -> dict[str, dict[str, Any]]:
    """Build every shard on the executors and write its files under ``directory``.

    Returns ``{lang: {"kind", "rows", "skipped_zero_vectors", "shards": [{"rows"}]}}``.
    """
    n_keys = sum(p.shards for p in plans.values())
    salts_list = partition_salts(spark, n_keys)
    df = _shard_input(spark, embeddings, titles, plans, salts_list, snippet_chars)
    targets = {
        p.first_key + i: (p.lang, i, p.kind) for p in plans.values() for i in range(p.shards)
    }
    fn = functools.partial(
        _build_partition,
        targets=targets,
        salts={s: k for k, s in enumerate(salts_list)},
        params=params,
    )
    sc = spark.sparkContext
    sc.setJobDescription(f"index: build {n_keys} shard(s)")
    out = df.mapInArrow(fn, SHARD_CHUNKS_SCHEMA).persist(StorageLevel.DISK_ONLY)
    try:
        t0 = time.perf_counter()
        n_chunks = out.count()
        log.info("index: built %d shard(s) in %.1f s", n_keys, time.perf_counter() - t0)
        sc.setJobDescription(f"index: fetch {n_chunks} chunk(s) of {n_keys} shard(s)")
        shards = _write_chunks(out.toLocalIterator(), directory)
    finally:
        out.unpersist()
        sc.setJobDescription(None)
    return _layout(plans, targets, shards)


def _write_chunks(rows: Iterator[Any], directory: Path) -> dict[int, tuple[int, int]]:
    """Append each chunk to its file (chunks of a file arrive in order); return
    ``{key: (rows, zeros)}`` of every shard whose two files were written whole."""
    done: dict[str, int] = {}
    whole: dict[int, list[str]] = {}
    shards: dict[int, tuple[int, int]] = {}
    handle = None
    name = None
    try:
        for row in rows:
            if row["file"] != name:
                if handle is not None:
                    handle.close()
                name = row["file"]
                target = directory / name
                target.parent.mkdir(parents=True, exist_ok=True)
                handle = open(target, "wb")  # noqa: SIM115 (closed when the file ends)
                done[name] = 0
                log.info("index: writing %s", name)
            if row["part"] != done[name]:
                raise InputDataError(
                    f"index: chunk {row['part']} of {name} came out of order; rerun the stage"
                )
            handle.write(row["data"])
            done[name] += 1
            if done[name] == row["parts"]:
                key = int(row["key"])
                whole.setdefault(key, []).append(name)
                shards[key] = (int(row["rows"]), int(row["zeros"]))
    finally:
        if handle is not None:
            handle.close()
    return {key: counts for key, counts in shards.items() if len(whole[key]) == 2}


def _layout(
    plans: dict[str, LanguagePlan],
    targets: dict[int, tuple[str, int, str]],
    shards: dict[int, tuple[int, int]],
) -> dict[str, dict[str, Any]]:
    missing = sorted(set(targets) - set(shards))
    if missing:
        names = [f"{targets[k][0]} shard {targets[k][1]}" for k in missing]
        raise InputDataError(
            f"index: no data came back for {', '.join(names)}; the build tasks lost it. "
            "Rerun the index stage."
        )
    out: dict[str, dict[str, Any]] = {}
    for p in plans.values():
        rows = [shards[p.first_key + i] for i in range(p.shards)]
        out[p.lang] = {
            "kind": p.kind,
            "rows": sum(r for r, _ in rows),
            "skipped_zero_vectors": sum(z for _, z in rows),
            "shards": [{"rows": r} for r, _ in rows],
        }
    return out


# --------------------------------------------------------------------------- CSLS terms


def _ship(sc: Any, directory: Path, rels: list[str], token: str) -> dict[str, str]:
    """Where executors read each shard file: in place in local mode, else through addFile
    (under a unique name, as Spark keys shipped files by name)."""
    if sc.master.startswith("local"):
        return {rel: str(directory / rel) for rel in rels}
    from pyspark import SparkFiles

    staging = Path(SparkFiles.getRootDirectory()) / "cr5-index-staging"
    staging.mkdir(parents=True, exist_ok=True)
    out = {}
    for rel in rels:
        name = f"{token}-{rel.replace('/', '-')}"
        link = staging / name
        if not link.exists():
            os.link(directory / rel, link)
            sc.addFile(str(link))
        out[rel] = "sparkfiles:" + name
    return out


# One Python worker's open shards (workers are reused across tasks): the last few only.
_WORKER_SHARDS: OrderedDict[str, Any] = OrderedDict()
_WORKER_SHARDS_KEPT = 2


def _worker_shard(location: str) -> Any:
    if location not in _WORKER_SHARDS:
        path = location
        if location.startswith("sparkfiles:"):
            from pyspark import SparkFiles

            path = SparkFiles.get(location.split(":", 1)[1])
        _WORKER_SHARDS[location] = faiss_module().read_index(path)
        while len(_WORKER_SHARDS) > _WORKER_SHARDS_KEPT:
            _WORKER_SHARDS.popitem(last=False)
    _WORKER_SHARDS.move_to_end(location)
    return _WORKER_SHARDS[location]


def _csls_task(
    task: tuple[str, int, str],
    *,
    locations: dict[str, str],
    source_shards: dict[str, list[str]],
    k: int,
    ef_search: int,
    nprobe: int,
    threads: int,
    batch_rows: int,
) -> tuple[str, int, str, bytes]:
    """r_S of shard ``i`` of language T over every shard of language S: (T, i, S, float32
    bytes of shape (rows,))."""
    faiss = faiss_module()
    target, i, source = task
    faiss.omp_set_num_threads(threads)
    vectors = shard_vectors(_worker_shard(locations[shard_file(target, i)]))
    n = vectors.shape[0]
    best_s = np.full((n, k), -np.inf, dtype=np.float32)
    best_i = np.full((n, k), np.iinfo(np.int64).max, dtype=np.int64)
    offset = 0
    for rel in source_shards[source]:
        index = _worker_shard(locations[rel])
        kk = min(k, index.ntotal)
        for lo in range(0, n, batch_rows):
            s, ids = search_shard(
                index, vectors[lo : lo + batch_rows], kk, ef_search=ef_search, nprobe=nprobe
            )
            ids = np.where(ids >= 0, ids + offset, np.iinfo(np.int64).max)
            ms, mi = merge_topk([(best_s[lo : lo + batch_rows], best_i[lo : lo + batch_rows]),
                                 (s, ids)], k)  # fmt: skip
            best_s[lo : lo + batch_rows] = ms
            best_i[lo : lo + batch_rows] = mi
        offset += index.ntotal
    found = np.isfinite(best_s)
    total = np.where(found, best_s, 0).sum(axis=1, dtype=np.float64)
    r_s = (total / np.maximum(found.sum(axis=1), 1)).astype(np.float32)
    return target, i, source, r_s.tobytes()


def compute_csls(
    spark: SparkSession,
    directory: Path,
    layout: dict[str, dict[str, Any]],
    *,
    k: int,
    ef_search: int,
    threads: int,
    token: str,
    nprobe: int = 16,
    batch_rows: int = 4096,
) -> dict[str, list[str]]:
    """Write every shard's CSLS terms (``<lang>/shard-i.csls.npy``) under ``directory``.

    Returns the source languages of each target language, in the files' column order. A
    language pair gets terms when both languages are indexed and differ; with one indexed
    language there is none.
    """
    langs = sorted(layout)
    sources = {t: [s for s in langs if s != t] for t in langs}
    tasks = [
        (t, i, s) for s in langs for t in langs if t != s for i in range(len(layout[t]["shards"]))
    ]
    if not tasks:
        return {t: [] for t in langs}
    rels = [shard_file(lang, i) for lang in langs for i in range(len(layout[lang]["shards"]))]
    sc = spark.sparkContext
    locations = _ship(sc, directory, rels, token)
    fn: Callable[..., Any] = functools.partial(
        _csls_task,
        locations=locations,
        source_shards={
            lang: [shard_file(lang, i) for i in range(len(layout[lang]["shards"]))]
            for lang in langs
        },
        k=k,
        ef_search=ef_search,
        nprobe=nprobe,
        threads=threads,
        batch_rows=batch_rows,
    )
    t0 = time.perf_counter()
    sc.setJobDescription(f"index: CSLS terms, {len(tasks)} task(s)")
    try:
        results = sc.parallelize(tasks, len(tasks)).map(fn).collect()
    finally:
        sc.setJobDescription(None)
    log.info("index: CSLS terms of %d (shard, language) pair(s) in %.1f s", len(tasks),
             time.perf_counter() - t0)  # fmt: skip
    by_shard: dict[tuple[str, int], dict[str, np.ndarray]] = {}
    for target, i, source, blob in results:
        by_shard.setdefault((target, i), {})[source] = np.frombuffer(blob, dtype=np.float32)
    for t in langs:
        for i, shard in enumerate(layout[t]["shards"]):
            got = by_shard.get((t, i), {})
            cols = [got[s] for s in sources[t]]
            terms = np.stack(cols, axis=1) if cols else np.zeros((shard["rows"], 0), np.float32)
            if terms.shape[0] != shard["rows"]:
                raise InputDataError(
                    f"index: CSLS terms of {t} shard {i} have {terms.shape[0]} rows, the "
                    f"shard {shard['rows']}; rerun the index stage"
                )
            np.save(directory / csls_file(t, i), np.ascontiguousarray(terms, dtype=np.float32))
    return sources
