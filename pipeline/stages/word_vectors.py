"""Stage ``word_vectors``: monolingual word2vec vectors per language from ``documents``.

Spark MLlib's :class:`pyspark.ml.feature.Word2Vec` (skip-gram with hierarchical softmax) runs
on the cluster that already holds the corpus, needs no new dependency and no export of the
texts; documents are tokenised with the project's tokeniser (``text.*``), so the words are
exactly the terms Cr5 and the lexicon use. Output: :mod:`pipeline.wordmap.store` files under
``paths.word_vectors`` (default ``<paths.root>/word_vectors``), words ordered by corpus
frequency (most frequent first), one atomically written directory per language.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.ml.feature import Word2Vec
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, StringType, StructField, StructType

from pipeline.config import Config
from pipeline.errors import InputDataError
from pipeline.io.datasets import read_dataset
from pipeline.io.schemas import DOCUMENTS
from pipeline.text.tokenizer import Tokenizer
from pipeline.wordmap.store import WordVectors, local_dir, write_word_vectors

__all__ = ["run", "word_vectors_dir"]

logger = logging.getLogger(__name__)

_TOKENS = StructType(
    [StructField("lang", StringType(), False), StructField("tokens", ArrayType(StringType()))]
)


def word_vectors_dir(cfg: Config) -> str:
    return cfg.paths.dataset("word_vectors")


def _tokens_fn(tok: Tokenizer):
    def fn(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            yield pa.RecordBatch.from_arrays(
                [batch.column("lang"), tok.tokenize_arrow(batch.column("text"))],
                names=["lang", "tokens"],
            )

    return fn


def run(spark: SparkSession, cfg: Config) -> dict[str, Any]:
    w = cfg.words
    langs = list(w.languages) or list(w.pair)
    out = local_dir(word_vectors_dir(cfg), "paths.word_vectors")
    docs = read_dataset(spark, DOCUMENTS, cfg.paths.dataset("documents"))
    tokens = (
        docs.filter(F.col("lang").isin(langs))
        .select("lang", "text")
        .mapInArrow(_tokens_fn(Tokenizer.from_config(cfg.text)), _TOKENS)
        .persist()
    )
    report: dict[str, Any] = {"stage": "word_vectors", "path": str(out), "languages": {}}
    try:
        for lang in langs:
            t0 = time.perf_counter()
            sentences = tokens.filter(F.col("lang") == lang).select("tokens")
            counts = (
                sentences.select(F.explode("tokens").alias("word"))
                .groupBy("word")
                .count()
                .filter(F.col("count") >= w.min_count)
            )
            if counts.limit(1).count() == 0:
                raise InputDataError(
                    f"documents dataset has no {lang!r} word occurring {w.min_count}+ times; "
                    "add the language to the corpus, drop it from words.languages or lower "
                    "words.min_count"
                )
            model = Word2Vec(
                vectorSize=w.dim,
                windowSize=w.window,
                minCount=w.min_count,
                maxIter=w.max_iter,
                stepSize=w.step_size,
                numPartitions=w.partitions,
                seed=w.seed,
                inputCol="tokens",
                outputCol="vector",
            ).fit(sentences)
            rows = (
                model.getVectors()
                .join(counts, "word")
                .orderBy(F.col("count").desc(), F.col("word"))
                .collect()
            )
            wv = WordVectors(
                [r["word"] for r in rows],
                np.array([r["count"] for r in rows], dtype=np.int64),
                np.array([r["vector"].toArray() for r in rows], dtype=np.float32).reshape(
                    len(rows), w.dim
                ),
            )
            meta = {
                "method": "spark.ml Word2Vec (skip-gram, hierarchical softmax)",
                "settings": {
                    k: getattr(w, k)
                    for k in ("dim", "window", "min_count", "max_iter", "step_size", "seed")
                },
                "text": cfg.fingerprint("text"),
            }
            path = write_word_vectors(out, lang, wv, meta)
            secs = round(time.perf_counter() - t0, 1)
            report["languages"][lang] = {"words": len(wv.words), "path": str(path), "seconds": secs}
            logger.info(
                "word_vectors %s: %d words in %.1f s -> %s", lang, len(wv.words), secs, path
            )
    finally:
        tokens.unpersist()
    return report
