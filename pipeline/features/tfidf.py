"""The training matrix X as sparse TF-IDF rows of a documents DataFrame, plus its concepts.

Row of a training document d in language l (design.md, section 1):
``x_d[t] = count(d, t) * idf_l(t)`` for in-vocabulary terms t, then L2-normalised,
stored as sorted ``indices`` (int32, the vocabulary's ``term_index``) and
``values`` (float32). Rows are numbered 0..n_l-1 per language in ``doc_id`` order
and concepts 0..K-1 in ``concept_id`` order, so reruns give identical rows.

The term counting runs in ``mapInArrow`` on whole Arrow batches (tokenise with
Arrow kernels, vocabulary lookup with ``index_in``, counting with ``np.unique``):
no Python loop over documents or tokens, and executor memory is bounded by the
batch size (``spark.sql.execution.arrow.maxRecordsPerBatch``) plus the vocabulary.

The ``tfidf`` stage (:mod:`pipeline.stages.tfidf`) runs it on the documents dataset with
the vocabulary dataset; the Spark ML estimator (:class:`pipeline.sparkml.Cr5`) on the
DataFrame it is fitted on, with the vocabulary it has just computed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pipeline.config import FeaturesConfig, TextConfig
from pipeline.errors import InputDataError
from pipeline.features.indexing import dense_index
from pipeline.features.selection import count_by_reason, length_reason, remove_heldout
from pipeline.features.vectorize import language_vocabularies, vectorize_by_language
from pipeline.features.weighting import tfidf_rows
from pipeline.spark import share_with_workers
from pipeline.text.tokenizer import Tokenizer, distinct_tokens_per_doc

__all__ = ["ROWS_SCHEMA", "tfidf_fn", "tfidf_frames"]

ROWS_SCHEMA = (
    "doc_id string, concept_id string, lang string, n_unique long, "
    "indices array<int>, values array<float>"
)


def tfidf_fn(
    tokenizer: Tokenizer, vocabularies: Any
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A ``mapInArrow`` function: documents -> TF-IDF rows (``ROWS_SCHEMA``).

    ``vocabularies`` holds ``{lang: (terms, idf)}`` as its ``.value`` (a Spark broadcast,
    :func:`pipeline.spark.share_with_workers`); it is unpacked once per Python worker.
    """
    vocab_of = language_vocabularies(vocabularies, missing_is_empty=True)

    def fn(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for rows in vectorize_by_language(batches, tokenizer, vocab_of, tfidf_rows):
            part = rows.part
            _, _, n_unique = distinct_tokens_per_doc(rows.tokens, rows.doc_of, part.num_rows)
            yield pa.RecordBatch.from_arrays(
                [
                    part.column("doc_id"),
                    part.column("concept_id"),
                    part.column("lang"),
                    pa.array(n_unique, pa.int64()),
                    rows.indices,
                    rows.values,
                ],
                names=["doc_id", "concept_id", "lang", "n_unique", "indices", "values"],
            )

    return fn


def tfidf_frames(
    spark: SparkSession,
    docs: DataFrame,
    vocabularies: dict[str, tuple[pa.Array, np.ndarray]],
    *,
    features: FeaturesConfig,
    text: TextConfig,
    heldout: str | None,
    partitions: int,
) -> tuple[DataFrame, DataFrame, dict[str, Any]]:
    """The TF-IDF rows and concepts of the documents ``docs`` under ``vocabularies``.

    Parameters
    ----------
    spark : SparkSession
    docs : DataFrame
        ``doc_id, concept_id, lang, text`` (``doc_id`` unique).
    vocabularies : dict of str to (pyarrow string array of shape (p_l,), ndarray of shape
        (p_l,))
        Each language's terms in ``term_index`` order and their IDF (float32).
    features : FeaturesConfig
        The length filter.
    text : TextConfig
        The tokeniser's settings.
    heldout : str or None
        The held-out concepts' dataset (``features.heldout_concepts`` resolved,
        :meth:`~pipeline.config.Config.heldout_path`), or None.
    partitions : int
        The rows' partitions (``spark.shuffle_partitions``).

    Returns
    -------
    tfidf : DataFrame
        The ``tfidf`` dataset's rows (``lang, row, doc_id, concept_id, concept_index,
        indices, values``), cached.
    concepts : DataFrame
        ``concept_id, n_docs, langs, concept_index``, cached.
    report : dict
        Sizes per language (documents, nnz, vocabulary), K, documents dropped by reason.

    Raises
    ------
    InputDataError
        When no training row is left.
    """
    shared = share_with_workers(spark, vocabularies)
    docs, heldout_counts = remove_heldout(spark, docs, heldout)
    rows = docs.select("doc_id", "concept_id", "lang", "text").mapInArrow(
        tfidf_fn(Tokenizer.from_config(text), shared), ROWS_SCHEMA
    )
    reason = F.coalesce(
        length_reason(features), F.when(F.size("indices") == 0, F.lit("no_vocabulary_terms"))
    )
    rows = rows.withColumn("reason", reason).persist()
    counts = count_by_reason(rows, F.col("reason"))
    train = rows.filter(F.col("reason").isNull()).drop("reason", "n_unique")

    row_index = dense_index(train.select("lang", "doc_id"), ["lang", "doc_id"], "gidx")
    first = row_index.groupBy("lang").agg(F.min("gidx").alias("first"))
    row_index = row_index.join(F.broadcast(first), "lang").select(
        "lang", "doc_id", (F.col("gidx") - F.col("first")).alias("row")
    )
    concepts = train.groupBy("concept_id").agg(
        F.count(F.lit(1)).alias("n_docs"), F.sort_array(F.collect_set("lang")).alias("langs")
    )
    concepts = dense_index(concepts, ["concept_id"], "concept_index").cache()
    tfidf = (
        train.join(row_index, ["lang", "doc_id"])
        .join(concepts.select("concept_id", "concept_index"), "concept_id")
        .repartitionByRange(partitions, "lang", "row")
        .sortWithinPartitions("lang", "row")
        .cache()
    )
    stats = {
        r["lang"]: {"documents": r["n"], "nnz": r["nnz"]}
        for r in tfidf.groupBy("lang")
        .agg(F.count(F.lit(1)).alias("n"), F.sum(F.size("indices")).alias("nnz"))
        .orderBy("lang")
        .collect()
    }
    if not stats:
        rows.unpersist()
        shared.unpersist()
        raise InputDataError(f"no training rows left ({counts}); see the vocabulary report")
    for lang, (terms, _) in vocabularies.items():
        stats.setdefault(lang, {"documents": 0, "nnz": 0})["vocabulary"] = len(terms)
    report = {
        "languages": sorted(lang for lang, s in stats.items() if s["documents"]),
        "per_language": stats,
        "documents": sum(s["documents"] for s in stats.values()),
        "nnz": sum(s["nnz"] for s in stats.values()),
        "concepts": concepts.count(),
        "documents_by_reason": counts,
        "heldout_documents": heldout_counts,
    }
    rows.unpersist()
    shared.unpersist()
    return tfidf, concepts, report
