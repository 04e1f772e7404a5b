"""Per-language document frequency, vocabulary and IDF of a documents DataFrame.

Per language l, over the training documents only (held-out concepts removed, the
length filter applied; see :mod:`pipeline.features.selection`):

- ``df(t)``: number of training documents of l containing term t;
- the vocabulary: terms with ``df >= min_df``, the ``max_vocabulary`` most frequent,
  ``term_index`` 0.. in order of decreasing df (ties: term, ascending) so the
  index is deterministic;
- ``idf(t) = ln(N_l / df(t))`` with N_l the number of training documents of l.

Everything is one Spark aggregation over the documents; no document reaches the driver. The
``vocabulary``
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

from pipeline.config import FeaturesConfig, TextConfig
from pipeline.errors import InputDataError
from pipeline.features.selection import (
    TOKENIZED_SCHEMA,
    distinct_terms_fn,
    flag_heldout,
    length_reason,
)
from pipeline.text.tokenizer import Tokenizer

__all__ = ["dropped_language_warnings", "vocabulary_arrays", "vocabulary_frame"]

log = logging.getLogger(__name__)


#: Prefix of the per-document marker terms that carry a document's fate through the one
#: aggregation of :func:`vocabulary_frame` (no word token contains a NUL character).
_MARK = "\x00"
_HELDOUT = "heldout"


def _document_terms(
    spark: SparkSession,
    docs: DataFrame,
    features: FeaturesConfig,
    text: TextConfig,
    heldout: str | None,
) -> DataFrame:
    """One row per (language, term or marker) occurrence: every document contributes one
    marker term naming its fate (kept, a length-filter reason, or held out), and a
    training document its distinct terms as well."""
    docs = flag_heldout(spark, docs, heldout)
    tokenized = docs.select("doc_id", "concept_id", "lang", "text", "_held").mapInArrow(
        distinct_terms_fn(Tokenizer.from_config(text), extra=("_held",)),
        TOKENIZED_SCHEMA + ", _held boolean",
    )
    fate = F.when(F.col("_held"), F.lit(_HELDOUT)).otherwise(
        F.coalesce(length_reason(features), F.lit("kept"))
    )
    terms = F.when(fate == "kept", F.col("terms")).otherwise(F.array().cast("array<string>"))
    return tokenized.select(
        "lang", F.explode(F.concat(F.array(F.concat(F.lit(_MARK), fate)), terms)).alias("term")
    )


def _split_counts(
    counts: DataFrame,
) -> tuple[DataFrame, dict[str, dict[str, int]], dict[str, int]]:
    """Term document frequencies, documents by reason and held-out documents per language
    from the aggregated ``(lang, term, df)`` rows (markers collected, terms left in Spark)."""
    marks = counts.filter(F.col("term").startswith(_MARK)).collect()
    by_reason: dict[str, dict[str, int]] = {}
    heldout: dict[str, int] = {}
    for r in marks:
        reason = r["term"][len(_MARK) :]
        if reason == _HELDOUT:
            heldout[r["lang"]] = r["df"]
        else:
            by_reason.setdefault(r["lang"], {})[reason] = r["df"]
    df = counts.filter(~F.col("term").startswith(_MARK))
    return df, dict(sorted(by_reason.items())), dict(sorted(heldout.items()))


def vocabulary_frame(
    spark: SparkSession,
    docs: DataFrame,
    *,
    features: FeaturesConfig,
    text: TextConfig,
    heldout: str | None,
) -> tuple[DataFrame, DataFrame, dict[str, Any]]:
    """The vocabulary of the documents ``docs`` (columns ``doc_id, concept_id, lang, text``).

    One pass over the documents: tokenisation and a single aggregation whose rows are the
    training documents' term frequencies and, as marker terms, every document's fate; only
    the aggregated counts are cached (the tokenised documents never are).

    Parameters
    ----------
    spark : SparkSession
    docs : DataFrame
    features : FeaturesConfig
        The length filter, ``min_df`` and ``max_vocabulary``.
    text : TextConfig
        The tokeniser's settings.
    heldout : str or None
        The held-out concepts' dataset (``features.heldout_concepts`` resolved,
        :meth:`~pipeline.config.Config.heldout_path`), or None.

    Returns
    -------
    vocabulary : DataFrame
        ``lang, term, df, term_index, n_docs, idf`` (lazy).
    counts : DataFrame
        The per-(lang, term) counts, persisted (the caller unpersists them once the
        vocabulary is materialised).
    report : dict
        ``documents_by_reason``, ``heldout_documents``, ``training_documents`` per language.

    Raises
    ------
    InputDataError
        When no training document is left after the filters.
    """
    counts = (
        _document_terms(spark, docs, features, text, heldout)
        .groupBy("lang", "term")
        .agg(F.count(F.lit(1)).alias("df"))
        .persist()
    )
    df, counts_by_reason, heldout_counts = _split_counts(counts)
    n_docs = {lang: c.get("kept", 0) for lang, c in counts_by_reason.items()}
    if not any(n_docs.values()):
        counts.unpersist()
        f = features
        held = sum(heldout_counts.values())
        raise InputDataError(
            f"no training documents left after the filters ({counts_by_reason}; held out by "
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
    f = features
    order = Window.partitionBy("lang").orderBy(F.desc("df"), F.asc("term"))
    vocab = (
        df.filter(F.col("df") >= f.min_df)
        .withColumn("term_index", F.row_number().over(order) - 1)
        .filter(F.col("term_index") < f.max_vocabulary)
        .join(F.broadcast(n_docs_df), "lang")
        .withColumn("idf", F.log(F.col("n_docs") / F.col("df")).cast("float"))
    )
    report: dict[str, Any] = {
        "documents_by_reason": counts_by_reason,
        "heldout_documents": heldout_counts,
        "training_documents": n_docs,
    }
    return vocab, counts, report


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
    f: FeaturesConfig, report: dict[str, Any], sizes: dict[str, int]
) -> list[str]:
    """Languages of the documents that the filters leave without a vocabulary.

    Such a language disappears from vocabulary, tfidf and model. With
    ``features.on_dropped_language: error`` that is an :class:`InputDataError`; with
    ``warn`` (default) one warning per language, kept in the report and manifest. ``f`` is
    the ``features`` section.
    """
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
