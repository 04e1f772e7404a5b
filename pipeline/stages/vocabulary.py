"""Stage ``vocabulary``: per-language document frequency, vocabulary and IDF.

Per language l, over the training documents only (held-out concepts removed, the
length filter applied; see :mod:`pipeline.features.selection`):

- ``df(t)``: number of training documents of l containing term t;
- the vocabulary: terms with ``df >= min_df``, the ``max_vocabulary`` most frequent,
  ``term_index`` 0.. in order of decreasing df (ties: term, ascending) so the
  index is deterministic;
- ``idf(t) = ln(N_l / df(t))`` with N_l the number of training documents of l.

Everything is one Spark aggregation over the documents; no document reaches the driver.
"""

from __future__ import annotations

import logging
from typing import Any

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from pipeline.config import Config
from pipeline.errors import InputDataError
from pipeline.features.selection import (
    TOKENIZED_SCHEMA,
    distinct_terms_fn,
    flag_heldout,
    length_reason,
)
from pipeline.io.datasets import read_dataset, write_dataset, write_options
from pipeline.io.locations import to_manifest
from pipeline.io.schemas import DOCUMENTS, VOCABULARY
from pipeline.text.tokenizer import Tokenizer

log = logging.getLogger(__name__)


#: Prefix of the per-document marker terms that carry a document's fate through the one
#: aggregation of :func:`build_vocabulary` (no word token contains a NUL character).
_MARK = "\x00"
_HELDOUT = "heldout"


def _document_terms(spark: SparkSession, cfg: Config) -> DataFrame:
    """One row per (language, term or marker) occurrence: every document contributes one
    marker term naming its fate (kept, a length-filter reason, or held out), and a
    training document its distinct terms as well."""
    docs = read_dataset(spark, DOCUMENTS, cfg.paths.dataset("documents"))
    docs = flag_heldout(spark, docs, cfg)
    tokenized = docs.select("doc_id", "concept_id", "lang", "text", "_held").mapInArrow(
        distinct_terms_fn(Tokenizer.from_config(cfg.text), extra=("_held",)),
        TOKENIZED_SCHEMA + ", _held boolean",
    )
    fate = F.when(F.col("_held"), F.lit(_HELDOUT)).otherwise(
        F.coalesce(length_reason(cfg), F.lit("kept"))
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


def build_vocabulary(spark: SparkSession, cfg: Config):
    """Return (vocabulary DataFrame, per-(lang, term) counts to unpersist, report).

    One pass over the documents: tokenisation and a single aggregation whose rows are the
    training documents' term frequencies and, as marker terms, every document's fate; only
    the aggregated counts are cached (the tokenised documents never are).
    """
    counts = (
        _document_terms(spark, cfg)
        .groupBy("lang", "term")
        .agg(F.count(F.lit(1)).alias("df"))
        .persist()
    )
    df, counts_by_reason, heldout_counts = _split_counts(counts)
    n_docs = {lang: c.get("kept", 0) for lang, c in counts_by_reason.items()}
    if not any(n_docs.values()):
        f = cfg.features
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
    f = cfg.features
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


def run(spark: SparkSession, cfg: Config) -> dict[str, Any]:
    vocab, counts, report = build_vocabulary(spark, cfg)
    vocab = vocab.repartition("lang").sortWithinPartitions("lang", "term_index").cache()
    sizes = {r["lang"]: r["count"] for r in vocab.groupBy("lang").count().orderBy("lang").collect()}
    report["warnings"] = dropped_language_warnings(cfg, report, sizes)
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
