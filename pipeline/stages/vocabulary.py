"""Stage ``vocabulary``: per-language document frequency, vocabulary and IDF.

Reads the ``documents`` dataset and writes ``vocabulary``; the work is
:func:`pipeline.features.vocabulary.vocabulary_frame` (every rule is there). Everything
is one Spark aggregation over the documents; no document reaches the driver.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, SparkSession

from pipeline.config import Config
from pipeline.features.vocabulary import dropped_language_warnings, vocabulary_frame
from pipeline.io.datasets import read_dataset, write_dataset, write_options
from pipeline.io.locations import to_manifest
from pipeline.io.schemas import DOCUMENTS, VOCABULARY

__all__ = ["build_vocabulary", "dropped_language_warnings", "run"]


def build_vocabulary(
    spark: SparkSession, cfg: Config
) -> tuple[DataFrame, DataFrame, dict[str, Any]]:
    """Return (vocabulary DataFrame, per-(lang, term) counts to unpersist, report) of the
    documents dataset (:func:`~pipeline.features.vocabulary.vocabulary_frame`)."""
    docs = read_dataset(spark, DOCUMENTS, cfg.paths.dataset("documents"))
    return vocabulary_frame(
        spark, docs, features=cfg.features, text=cfg.text, heldout=cfg.heldout_path()
    )


def run(spark: SparkSession, cfg: Config) -> dict[str, Any]:
    vocab, counts, report = build_vocabulary(spark, cfg)
    vocab = vocab.repartition("lang").sortWithinPartitions("lang", "term_index").cache()
    sizes = {r["lang"]: r["count"] for r in vocab.groupBy("lang").count().orderBy("lang").collect()}
    report["warnings"] = dropped_language_warnings(cfg.features, report, sizes)
    report["vocabulary_size"] = sizes
    report["settings"] = {
        "min_df": cfg.features.min_df,
        "max_vocabulary": cfg.features.max_vocabulary,
        "min_unique_words": cfg.features.min_unique_words,
        "max_unique_words": cfg.features.max_unique_words,
        # Relative to paths.root, so a copied or moved root still checks out in tfidf.
        "heldout_concepts": to_manifest(cfg.heldout_path(), cfg.paths.root),
        "text": cfg.to_dict()["text"],
        "idf": "ln(N_l / df)",
    }
    path = cfg.paths.dataset("vocabulary")
    write_dataset(
        spark, vocab, VOCABULARY, path, manifest={"report": report}, **write_options(cfg.paths)
    )
    vocab.unpersist()
    counts.unpersist()
    report["path"] = path
    return report
