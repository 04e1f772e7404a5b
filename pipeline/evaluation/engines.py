"""Where the evaluation's documents are embedded and retrieved: on the driver or over Spark.

The *pool* of a run holds, per evaluated language, the seeded candidate sample of up to
``evaluate.max_candidates`` documents plus every held-out document. An engine embeds the pool
with a model through the public embedding path (:func:`pipeline.model.batches.embed_batch` /
:meth:`~pipeline.model.Cr5Model.embed_with_counts`) and answers one retrieval direction at a
time with the exact retrieval of :mod:`pipeline.retrieval`:

- :class:`LocalEngine`: the pool collected to the driver, numpy retrieval;
- :class:`SparkEngine`: the pool embedded on the executors, candidates partitioned, queries
  broadcast, partial top-k merged (:func:`pipeline.retrieval.spark.retrieve_spark`).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import scipy.sparse as sp
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pipeline.config import Config, EvaluateConfig
from pipeline.errors import ConfigError
from pipeline.evaluation.protocol import Direction
from pipeline.features.indexing import dense_index
from pipeline.io.datasets import read_dataset
from pipeline.io.schemas import DOCUMENTS
from pipeline.methods.registry import find_method, get_method
from pipeline.model.batches import embed_batch
from pipeline.model.format import read_model_json
from pipeline.model.loading import load_model
from pipeline.model.shipping import ship_model, worker_model
from pipeline.retrieval import retrieve
from pipeline.retrieval.shared_space import densify_cross_sides
from pipeline.retrieval.spark import retrieve_spark

log = logging.getLogger(__name__)

__all__ = ["LocalEngine", "SparkEngine", "open_engine", "pool_frame"]


def pool_frame(
    spark: SparkSession, cfg: Config, e: EvaluateConfig, langs: list[str], heldout: DataFrame
) -> tuple[DataFrame, dict[str, dict[str, int]]]:
    """Documents to embed: per language the candidate sample plus the held-out documents.

    Columns doc_id, concept_id, lang, text, in_sample (bool: in the language's seeded
    sample of up to ``max_candidates`` documents, by ``xxhash64(seed, doc_id)``).
    """
    docs = (
        read_dataset(spark, DOCUMENTS, cfg.paths.dataset("documents"))
        .filter(F.col("lang").isin(langs))
        .select("doc_id", "concept_id", "lang", "text")
        .withColumn("_h", F.xxhash64(F.lit(e.seed).cast("long"), F.col("doc_id")))
    )
    counts = {r["lang"]: r["count"] for r in docs.groupBy("lang").count().collect()}
    in_sample = F.lit(False)
    sizes: dict[str, dict[str, int]] = {}
    for lang in langs:
        n = counts.get(lang, 0)
        sizes[lang] = {"documents": n, "sample": min(n, e.max_candidates)}
        if n <= e.max_candidates:
            cond = F.col("lang") == lang
        else:
            last = (
                docs.filter(F.col("lang") == lang)
                .select("_h", "doc_id")
                .orderBy("_h", "doc_id")
                .limit(e.max_candidates)
                .agg(F.max(F.struct("_h", "doc_id")).alias("m"))
                .first()["m"]
            )
            cond = (F.col("lang") == lang) & (
                (F.col("_h") < last["_h"])
                | ((F.col("_h") == last["_h"]) & (F.col("doc_id") <= last["doc_id"]))
            )
        in_sample = in_sample | cond
    held = F.broadcast(heldout.select("concept_id").distinct().withColumn("_held", F.lit(True)))
    pool = (
        docs.withColumn("in_sample", in_sample)
        .join(held, "concept_id", "left")
        .filter(F.col("in_sample") | F.col("_held").isNotNull())
        .select("doc_id", "concept_id", "lang", "text", "in_sample")
    )
    return pool, sizes


def _pool_embed_fn(location: str, version: str):
    """``mapInArrow``: the public embedding path (:func:`embed_batch`) + the pool columns."""

    def fn(batches):
        model = worker_model(location, version)
        for batch in batches:
            out = embed_batch(
                model, batch.select(["doc_id", "lang", "concept_id", "text"]), normalize=False
            )
            yield pa.RecordBatch.from_arrays(
                [*out.columns, batch.column("in_sample"), batch.column("pos")],
                names=[*out.schema.names, "in_sample", "pos"],
            )

    return fn


_EMBEDDED_SCHEMA = (
    "doc_id string, lang string, concept_id string, n_terms int, vector array<float>, "
    "in_sample boolean, pos long"
)


@dataclass
class _LocalLanguage:
    doc_id: np.ndarray
    concept_id: np.ndarray
    in_sample: np.ndarray
    texts: pa.Array
    vectors: np.ndarray | None = None
    n_terms: np.ndarray | None = None


class LocalEngine:
    """The pool on the driver; retrieval with the numpy engine."""

    name = "local"

    def __init__(self, pool: DataFrame, langs: list[str]) -> None:
        table = pool.orderBy("lang", "doc_id").toArrow()
        self.langs: dict[str, _LocalLanguage] = {}
        for lang in langs:
            sub = table.filter(pc.equal(table.column("lang"), lang))
            self.langs[lang] = _LocalLanguage(
                doc_id=np.asarray(sub.column("doc_id").to_pylist(), dtype=object),
                concept_id=np.asarray(sub.column("concept_id").to_pylist(), dtype=object),
                in_sample=sub.column("in_sample").to_numpy(),
                texts=sub.column("text").combine_chunks(),
            )

    def use_model(self, path: str) -> None:
        """Embed every pool document with the model at ``path`` (Cr5Model.embed); languages
        the model lacks get no vectors (their directions are not evaluated with it)."""
        model = load_model(path)
        for lang, data in self.langs.items():
            if lang in model.languages:
                data.vectors, data.n_terms = model.embed_with_counts(data.texts, lang)
            else:
                data.vectors = data.n_terms = None

    def run(
        self, d: Direction, concepts: np.ndarray, measures: list[str], e: EvaluateConfig
    ) -> tuple[dict[str, Any], dict[str, int]]:
        src, tgt = self.langs[d.query_lang], self.langs[d.target_lang]
        q_sel = np.flatnonzero(np.isin(src.concept_id, concepts))
        q_sel = q_sel[np.argsort(src.concept_id[q_sel], kind="stable")]
        t_mask = np.isin(tgt.concept_id, concepts)
        cand = np.flatnonzero(tgt.in_sample | t_mask)
        where = {c: i for i, c in enumerate(tgt.concept_id[cand]) if t_mask[cand[i]]}
        targets = np.array([where.get(c, -1) for c in src.concept_id[q_sel]], dtype=np.int64)
        queries, candidates = src.vectors[q_sel], tgt.vectors[cand]
        source = None
        if "csls" in measures and e.csls_source == "collection":
            collection = src.in_sample.copy()
            collection[q_sel] = True
            source = src.vectors[collection]
        if sp.issparse(queries):
            queries, candidates, source = densify_cross_sides(
                queries, candidates, source, max_bytes=e.sparse_dense_limit_mb * 2**20
            )
        results = {}
        for m in measures:
            kw: dict[str, Any] = {"block_q": e.block_q, "block_c": e.block_c}
            if m == "csls":
                kw.update(csls_k=e.csls_k, source=e.csls_source)
                if source is not None:
                    kw["source_embeddings"] = source
            results[m] = retrieve(m, queries, candidates, targets, **kw)
        sizes = {
            "n_queries": int(q_sel.size),
            "n_candidates": int(cand.size),
            "zero_queries": int(np.count_nonzero(src.n_terms[q_sel] == 0)),
            "zero_candidates": int(np.count_nonzero(tgt.n_terms[cand] == 0)),
        }
        return results, sizes


class SparkEngine:
    """The pool embedded on the executors; retrieval with candidates partitioned."""

    name = "spark"

    def __init__(self, pool: DataFrame, e: EvaluateConfig) -> None:
        self.spark = pool.sparkSession
        self.pool = dense_index(pool, ["lang", "doc_id"], "pos").persist(
            StorageLevel.MEMORY_AND_DISK
        )
        self.embedded: DataFrame | None = None
        self.e = e

    def use_model(self, path: str) -> None:
        sc = self.spark.sparkContext
        meta = read_model_json(path)
        if meta.get("phi_format", "dense") == "selection":
            raise ConfigError(
                f"model {path} embeds into sparse vectors ({meta.get('method')}), which the "
                "spark evaluation engine does not handle; set evaluate.engine=local"
            )
        location = ship_model(sc, path)
        if self.embedded is not None:
            self.embedded.unpersist()
        # languages the model lacks are not embedded (their directions are not evaluated)
        self.embedded = (
            self.pool.filter(F.col("lang").isin(list(meta["languages"])))
            .mapInArrow(_pool_embed_fn(location, str(meta.get("created_utc"))), _EMBEDDED_SCHEMA)
            .persist(StorageLevel.MEMORY_AND_DISK)
        )

    def run(
        self, d: Direction, concepts: np.ndarray, measures: list[str], e: EvaluateConfig
    ) -> tuple[dict[str, Any], dict[str, int]]:
        emb = self.embedded
        conc = F.broadcast(
            self.spark.createDataFrame(
                [(str(c),) for c in concepts], "concept_id string"
            ).withColumn("_sel", F.lit(True))
        )
        q = (
            emb.filter(F.col("lang") == d.query_lang)
            .join(conc, "concept_id")
            .select("concept_id", "doc_id", "n_terms", "vector")
            .orderBy("concept_id")
            .toArrow()
        )
        r = int(q.column("vector").combine_chunks().value_lengths()[0].as_py()) if q.num_rows else 0
        queries = (
            q.column("vector").combine_chunks().flatten().to_numpy().reshape(q.num_rows, r)
        ).astype(np.float32)
        tgt = emb.filter(F.col("lang") == d.target_lang).join(conc, "concept_id", "left")
        t_rows = tgt.filter(F.col("_sel").isNotNull()).select("concept_id", "pos").collect()
        where = {row["concept_id"]: row["pos"] for row in t_rows}
        targets = np.array(
            [where.get(c, -1) for c in q.column("concept_id").to_pylist()], dtype=np.int64
        )
        cand = tgt.filter(F.col("in_sample") | F.col("_sel").isNotNull())
        stats = cand.agg(
            F.count(F.lit(1)).alias("n"),
            F.sum(F.when(F.col("n_terms") == 0, 1).otherwise(0)).alias("zeros"),
        ).first()
        n_c = int(stats["n"])
        parts = max(self.spark.sparkContext.defaultParallelism, math.ceil(n_c / e.partition_rows))
        cand = (
            cand.select(F.col("pos").alias("index"), "vector")
            .repartition(parts)
            .persist(StorageLevel.MEMORY_AND_DISK)
        )
        source = None
        if "csls" in measures and e.csls_source == "collection":
            s = (
                emb.filter(F.col("lang") == d.query_lang)
                .join(conc, "concept_id", "left")
                .filter(F.col("in_sample") | F.col("_sel").isNotNull())
                .select("vector")
                .toArrow()
            )
            source = s.column("vector").combine_chunks().flatten().to_numpy().reshape(-1, r)
        results = {}
        if "l1" in measures:
            raise ConfigError(
                "the spark evaluation engine does not compute the L1 similarity of topic "
                "models; set evaluate.engine=local (or auto)"
            )
        try:
            for m in measures:
                kw: dict[str, Any] = {"block_q": e.block_q, "block_c": e.block_c}
                if m == "csls":
                    kw.update(csls_k=e.csls_k, source=e.csls_source, source_embeddings=source)
                results[m] = retrieve_spark(
                    m, queries, cand, targets, description=f"evaluate {d.name}", **kw
                )
        finally:
            cand.unpersist()
        sizes = {
            "n_queries": int(q.num_rows),
            "n_candidates": n_c,
            "zero_queries": int(np.count_nonzero(q.column("n_terms").to_numpy() == 0)),
            "zero_candidates": int(stats["zeros"] or 0),
        }
        return results, sizes

    def close(self) -> None:
        if self.embedded is not None:
            self.embedded.unpersist()
        self.pool.unpersist()


def open_engine(
    spark: SparkSession, cfg: Config, e: EvaluateConfig, langs: list[str], heldout: DataFrame
) -> tuple[LocalEngine | SparkEngine, dict[str, dict[str, int]]]:
    """Build the pool of ``langs`` and the engine that retrieves in it (``evaluate.engine``;
    ``auto``: spark above ``evaluate.local_max_candidates`` candidates per language)."""
    pool, sizes = pool_frame(spark, cfg, e, langs, heldout)
    largest = max(v["sample"] for v in sizes.values())
    name = e.engine
    if name == "auto":
        name = "spark" if largest > e.local_max_candidates else "local"
        needs = [m for m in e.methods if (s := find_method(m)) and s.needs_local_engine]
        if get_method(cfg.train.method).similarity != "cosine":
            needs.append(cfg.train.method)
        if name == "spark" and needs:
            log.warning(
                "evaluate: local engine for all methods (%s need it: sparse vectors, L1 "
                "similarity), although %d candidates exceed evaluate.local_max_candidates=%d",
                ", ".join(needs),
                largest,
                e.local_max_candidates,
            )
            name = "local"
    engine = LocalEngine(pool, langs) if name == "local" else SparkEngine(pool, e)
    return engine, sizes
