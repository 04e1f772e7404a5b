"""Per-language document frequency, vocabulary and IDF of a documents DataFrame.

Per language l, over the training documents only (held-out concepts removed, the
length filter applied; see :mod:`pipeline.features.selection`):

- ``df(t)``: number of training documents of l containing term t;
- the vocabulary: terms with ``df >= min_df``, the ``max_vocabulary`` most frequent,
  ``term_index`` 0.. in order of decreasing df (ties: term, ascending) so the
  index is deterministic;
- ``idf(t) = ln(N_l / df(t))`` with N_l the number of training documents of l.

Everything is a Spark aggregation; no document reaches the driver. The ``vocabulary``
stage (:mod:`pipeline.stages.vocabulary`) runs it on the documents dataset and the
Spark ML estimator (:class:`pipeline.sparkml.Cr5`) on the DataFrame it is fitted on.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from pipeline.config import Config
from pipeline.errors import InputDataError
from pipeline.features.selection import (
    TOKENIZED_SCHEMA,
    count_by_reason,
    distinct_terms_fn,
    length_reason,
    remove_heldout,
)
from pipeline.text.tokenizer import Tokenizer

__all__ = ["dropped_language_warnings", "vocabulary_arrays", "vocabulary_frame"]

log = logging.getLogger(__name__)


def vocabulary_frame(
    spark: SparkSession, docs: DataFrame, cfg: Config
) -> tuple[DataFrame, DataFrame, dict[str, Any]]:
    """The vocabulary of the documents ``docs`` (columns ``doc_id, concept_id, lang, text``).

    Returns
    -------
    vocabulary : DataFrame
        ``lang, term, df, term_index, n_docs, idf`` (lazy).
    tokenized : DataFrame
        The tokenised documents, persisted (the caller unpersists it once the vocabulary
        is materialised).
    report : dict
        ``documents_by_reason``, ``heldout_documents``, ``training_documents`` per language.

    Raises
    ------
    InputDataError
        When no training document is left after the filters.
    """
    docs, heldout_counts = remove_heldout(spark, docs, cfg)
    tokenized = docs.select("doc_id", "concept_id", "lang", "text").mapInArrow(
        distinct_terms_fn(Tokenizer.from_config(cfg.text)), TOKENIZED_SCHEMA
    )
    reason = length_reason(cfg)
    tokenized = tokenized.withColumn("reason", reason).persist()
    counts = count_by_reason(tokenized, F.col("reason"))
    train = tokenized.filter(F.col("reason").isNull())
    n_docs = {lang: c.get("kept", 0) for lang, c in counts.items()}
    if not any(n_docs.values()):
        tokenized.unpersist()
        f = cfg.features
        held = sum(heldout_counts.values())
        raise InputDataError(
            f"no training documents left after the filters ({counts}; held out by "
            f"features.heldout_concepts: {held}). Fix: lower features.min_unique_words "
            f"(now {f.min_unique_words}) or raise features.max_unique_words (now "
            f"{f.max_unique_words}), e.g. --conf conf/short-docs.yaml for short documents"
            + (
                ", or hold out fewer concepts (split.n_test, split.n_validation, "
                "split.max_heldout_fraction)."
                if held
                else "."
            )
        )
    n_docs_df = spark.createDataFrame(
        [(lang, n) for lang, n in n_docs.items() if n], "lang string, n_docs long"
    )
    f = cfg.features
    df = (
        train.select("lang", F.explode("terms").alias("term"))
        .groupBy("lang", "term")
        .agg(F.count(F.lit(1)).alias("df"))
    )
    order = Window.partitionBy("lang").orderBy(F.desc("df"), F.asc("term"))
    vocab = (
        df.filter(F.col("df") >= f.min_df)
        .withColumn("term_index", F.row_number().over(order) - 1)
        .filter(F.col("term_index") < f.max_vocabulary)
        .join(F.broadcast(n_docs_df), "lang")
        .withColumn("idf", F.log(F.col("n_docs") / F.col("df")).cast("float"))
    )
    report: dict[str, Any] = {
        "documents_by_reason": counts,
        "heldout_documents": heldout_counts,
        "training_documents": n_docs,
    }
    return vocab, tokenized, report


def vocabulary_arrays(table: pa.Table) -> dict[str, dict[str, Any]]:
    """A vocabulary table (``lang, term, term_index, df, idf``) as arrays per language.

    Returns
    -------
    dict of str to dict
        Per language, in ``term_index`` order: ``terms`` (pyarrow string array of shape
        (p_l,)), ``idf`` (ndarray of float32, shape (p_l,)), ``df`` (ndarray of int64).

    Raises
    ------
    InputDataError
        When a language's ``term_index`` is not 0..p_l-1.
    """
    table = table.sort_by([("lang", "ascending"), ("term_index", "ascending")])
    out: dict[str, dict[str, Any]] = {}
    langs = table.column("lang")
    for lang in pc.unique(langs).to_pylist():
        sub = table.filter(pc.equal(langs, lang))
        index = sub.column("term_index").to_numpy()
        if not np.array_equal(index, np.arange(len(index))):
            raise InputDataError(
                f"vocabulary for {lang!r} has non-contiguous term_index; rerun the vocabulary stage"
            )
        out[lang] = {
            "terms": sub.column("term").combine_chunks(),
            "idf": sub.column("idf").to_numpy().astype(np.float32),
            "df": sub.column("df").to_numpy().astype(np.int64),
        }
    return out


def dropped_language_warnings(
    cfg: Config, report: dict[str, Any], sizes: dict[str, int]
) -> list[str]:
    """Languages of the documents that the filters leave without a vocabulary.

    Such a language disappears from vocabulary, tfidf and model. With
    ``features.on_dropped_language: error`` that is an :class:`InputDataError`; with
    ``warn`` (default) one warning per language, kept in the report and manifest.
    """
    f = cfg.features
    by_reason = report["documents_by_reason"]
    langs = sorted(set(by_reason) | set(report["heldout_documents"]))
    out = []
    for lang in langs:
        if sizes.get(lang):
            continue
        counts = dict(by_reason.get(lang, {}))
        if report["heldout_documents"].get(lang):
            counts["heldout"] = report["heldout_documents"][lang]
        if not report["training_documents"].get(lang):
            why = (
                f"no training document is left after the filters ({counts}); lower "
                f"features.min_unique_words ({f.min_unique_words}) or raise "
                f"features.max_unique_words ({f.max_unique_words}), e.g. --conf "
                "conf/short-docs.yaml"
                + (
                    ", or hold out fewer concepts (split.n_test / split.n_validation)"
                    if counts.get("heldout")
                    else ""
                )
            )
        else:
            why = (
                f"every term of its {report['training_documents'][lang]} training document(s) "
                f"is in fewer than features.min_df = {f.min_df} documents; lower "
                "features.min_df or add documents"
            )
        out.append(f"language {lang!r} is dropped from vocabulary, tfidf and model: {why}")
    if out and f.on_dropped_language == "error":
        raise InputDataError(
            "; ".join(out) + ". (features.on_dropped_language=warn keeps going without them.)"
        )
    for msg in out:
        log.warning("%s", msg)
    return out
