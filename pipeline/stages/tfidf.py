"""Stage ``tfidf``: the training matrix X as sparse rows, plus ``concepts``.

Reads ``documents`` and ``vocabulary`` and writes ``tfidf`` and ``concepts``; the rows
and every rule behind them are :func:`pipeline.features.tfidf.tfidf_frames`: a training
document's row is its term counts times the language's IDF, L2-normalised, stored as
sorted ``indices`` and float32 ``values``; rows are numbered per language in ``doc_id``
order and concepts in ``concept_id`` order, so reruns give identical datasets.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from pipeline.config import Config
from pipeline.errors import InputDataError
from pipeline.features.tfidf import ROWS_SCHEMA, tfidf_fn, tfidf_frames
from pipeline.features.vocabulary import vocabulary_arrays
from pipeline.io.datasets import read_dataset, read_manifest, write_dataset, write_options
from pipeline.io.locations import from_manifest, same_location
from pipeline.io.schemas import CONCEPTS, DOCUMENTS, TFIDF, VOCABULARY

__all__ = ["ROWS_SCHEMA", "build_tfidf", "load_vocabularies", "run", "tfidf_fn"]

log = logging.getLogger(__name__)


def load_vocabularies(spark: SparkSession, cfg: Config) -> dict[str, tuple[pa.Array, np.ndarray]]:
    """The vocabulary dataset on the driver: ``{lang: (terms, idf)}`` in term_index order."""
    table = read_dataset(spark, VOCABULARY, cfg.paths.dataset("vocabulary")).toArrow()
    return {lang: (v["terms"], v["idf"]) for lang, v in vocabulary_arrays(table).items()}


def build_tfidf(spark: SparkSession, cfg: Config) -> tuple[DataFrame, DataFrame, dict[str, Any]]:
    """Return (tfidf rows, concepts, report); both frames are cached."""
    vocab_path = cfg.paths.dataset("vocabulary")
    vocab_report = read_manifest(spark, VOCABULARY, vocab_path).get("report", {})
    settings = vocab_report.get("settings", {})
    if not same_location(settings.get("heldout_concepts"), cfg.heldout_path(), cfg.paths.root):
        built = from_manifest(settings.get("heldout_concepts"), cfg.paths.root)
        raise InputDataError(
            f"the vocabulary at {vocab_path} was built with heldout_concepts="
            f"{built!r} but this run uses "
            f"{cfg.heldout_path()!r}. Fix: rerun the vocabulary stage with the same "
            "configuration."
        )
    vocabularies = load_vocabularies(spark, cfg)
    docs = read_dataset(spark, DOCUMENTS, cfg.paths.dataset("documents"))
    tfidf, concepts, report = tfidf_frames(
        spark,
        docs,
        vocabularies,
        features=cfg.features,
        text=cfg.text,
        heldout=cfg.heldout_path(),
        partitions=cfg.spark.shuffle_partitions,
    )
    report["vocabulary_manifest"] = vocab_path
    return tfidf, concepts, report


def run(spark: SparkSession, cfg: Config) -> dict[str, Any]:
    tfidf, concepts, report = build_tfidf(spark, cfg)
    manifest = {"report": report}
    opts = write_options(cfg.paths)
    write_dataset(
        spark, concepts, CONCEPTS, cfg.paths.dataset("concepts"), manifest=manifest, **opts
    )
    write_dataset(spark, tfidf, TFIDF, cfg.paths.dataset("tfidf"), manifest=manifest, **opts)
    tfidf.unpersist()
    concepts.unpersist()
    report["path"] = cfg.paths.dataset("tfidf")
    return report
