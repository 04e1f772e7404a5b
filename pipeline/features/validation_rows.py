"""Rows of validation concepts, for the train stage's validation rules: Cr5's
``train.stop_rule: validation`` and S2Net's choice of learning rate and epochs (TF-IDF rows),
and the topic models' ``train.<method>.stop_rule: validation`` (term counts,
``weighting="counts"``).

The split stage's validation concepts are held out of vocabulary, IDF and training in every
language (docs/design.md, evaluation protocol), so their documents are an honest validation
set for the eigensolver's stopping rule. The ``train.validation_concepts`` concepts of lowest
split priority are taken (the same ones the evaluation's λ selection scores first); their
documents in the training languages are collected to the driver (a few thousand short texts)
and weighted with the training vocabulary and IDF through
:func:`~pipeline.features.weighting.tfidf_matrix` (or counted by
:func:`~pipeline.features.weighting.count_matrix`), the functions the embedding API uses, so
a validation document gets exactly the input the trained model would give it.

Cr5's iteration scoring can add ``train.validation_distractors`` training documents per
language to the candidates (:func:`distractor_documents`): among a few hundred validation
documents P@1 saturates long before it does among the evaluation's pool of every document,
so a stop on it alone can come far too early (bench/README.md, "The stopping rule on
retrieval").
"""

from __future__ import annotations

import logging

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import scipy.sparse as sp
from pyspark.sql import SparkSession, Window
from pyspark.sql import functions as F

from pipeline.config import TextConfig
from pipeline.errors import ConfigError, InputDataError
from pipeline.features.weighting import LanguageVocabulary, count_matrix, tfidf_matrix
from pipeline.io.datasets import read_dataset, read_table
from pipeline.io.schemas import DOCUMENTS
from pipeline.linalg.monitor import ValidationSet
from pipeline.text.tokenizer import Tokenizer

__all__ = ["distractor_documents", "load_validation_set", "validation_documents"]

log = logging.getLogger(__name__)


def validation_documents(
    spark: SparkSession,
    languages: list[str],
    *,
    heldout: str | None,
    documents: str,
    validation_concepts: int,
    needed_by: str = "train.stop_rule=validation",
) -> pa.Table:
    """The first ``validation_concepts`` (``train.validation_concepts``) validation
    concepts' documents in ``languages``: columns lang, concept_id, text (one document per
    language and concept), sorted.

    ``heldout``: the split stage's concepts (``features.heldout_concepts`` resolved,
    :meth:`~pipeline.config.Config.heldout_path`; None when it is not set); ``documents``:
    the documents dataset's path; ``needed_by``: the setting that asked for them (named in
    errors)."""
    path = heldout
    fix = (
        "Fix: run the split stage and set features.heldout_concepts: splits (before the "
        f"vocabulary stage), or change {needed_by}."
    )
    if not path:
        raise ConfigError(
            f"{needed_by} scores the split stage's validation concepts, but "
            f"features.heldout_concepts is not set. {fix}"
        )
    splits = read_table(spark, path)
    if "role" not in splits.columns:
        raise InputDataError(
            f"features.heldout_concepts {path} has no 'role' column (columns: "
            f"{splits.columns}), so it names no validation concepts. {fix}"
        )
    order = F.col("priority") if "priority" in splits.columns else F.xxhash64("concept_id")
    chosen = (
        splits.filter(F.col("role") == "validation")
        .groupBy("concept_id")
        .agg(F.min(order).alias("_order"))
        .orderBy("_order", "concept_id")
        .limit(validation_concepts)
        .select("concept_id")
    )
    return (
        read_dataset(spark, DOCUMENTS, documents)
        .filter(F.col("lang").isin(languages))
        .join(F.broadcast(chosen), "concept_id")
        # one document per (language, concept): the smallest doc_id, deterministically
        .groupBy("lang", "concept_id")
        .agg(F.min_by("text", "doc_id").alias("text"))
        .orderBy("lang", "concept_id")
        .toArrow()
    )


def distractor_documents(
    spark: SparkSession,
    languages: list[str],
    *,
    heldout: str,
    documents: str,
    count: int,
    seed: int = 0,
) -> pa.Table:
    """A seeded sample of ``count`` training documents per language (documents of no split
    concept, in hash order of their doc_id): columns lang, doc_id, text, sorted by lang."""
    held = read_table(spark, heldout).select("concept_id").distinct()
    rank = F.row_number().over(
        Window.partitionBy("lang").orderBy(F.xxhash64("doc_id", F.lit(seed)), "doc_id")
    )
    docs = read_dataset(spark, DOCUMENTS, documents).filter(F.col("lang").isin(languages))
    # ranked without the texts (the window sorts every document), which join the chosen only
    chosen = (
        docs.select("lang", "doc_id", "concept_id")
        .join(held, "concept_id", "left_anti")
        .withColumn("_rank", rank)
        .filter(F.col("_rank") <= count)
        .select("lang", "doc_id", "_rank")
    )
    return (
        docs.select("lang", "doc_id", "text")
        .join(F.broadcast(chosen), ["lang", "doc_id"])
        .orderBy("lang", "_rank")
        .select("lang", "doc_id", "text")
        .toArrow()
    )


def load_validation_set(
    spark: SparkSession,
    languages: list[str],
    vocabulary: dict[str, dict],
    *,
    heldout: str | None,
    documents: str,
    validation_concepts: int,
    text: TextConfig,
    weighting: str = "tfidf",
    needed_by: str = "train.stop_rule=validation",
    distractors: int = 0,
) -> ValidationSet:
    """Validation documents of the training languages as TF-IDF rows (``weighting="tfidf"``)
    or term counts (``"counts"``), with ``distractors`` training documents per language
    (:func:`distractor_documents`) weighted alike as further candidates.

    ``vocabulary[lang]``: ``terms`` (pyarrow array, term_index order) and ``idf``;
    ``heldout``, ``documents``, ``validation_concepts``: which documents
    (:func:`validation_documents`); ``text``: the tokeniser's settings (``text``);
    ``needed_by``: the setting that asked for them (named in errors).
    """
    path = heldout
    fix = (
        "Fix: run the split stage and set features.heldout_concepts: splits (before the "
        f"vocabulary stage), or change {needed_by}."
    )
    docs = validation_documents(
        spark,
        languages,
        heldout=heldout,
        documents=documents,
        validation_concepts=validation_concepts,
        needed_by=needed_by,
    )
    tokenizer = Tokenizer.from_config(text)
    weigh = count_matrix if weighting == "counts" else tfidf_matrix

    def weighed(sub: pa.Table, lang: str) -> sp.csr_matrix:
        """The texts of ``sub`` as rows over language ``lang``'s vocabulary and IDF."""
        vocab = LanguageVocabulary(vocabulary[lang]["terms"], vocabulary[lang]["idf"])
        return weigh(sub.column("text").combine_chunks(), tokenizer, vocab)

    def of(table: pa.Table, lang: str) -> pa.Table:
        return table.filter(pc.equal(table.column("lang"), lang))

    rows, concepts = {}, {}
    for lang in languages:
        sub = of(docs, lang)
        if sub.num_rows == 0:
            continue
        rows[lang] = weighed(sub, lang)
        concepts[lang] = np.array(sub.column("concept_id").to_pylist(), dtype=str)
    extra = {}
    if distractors and path:
        sample = distractor_documents(
            spark, languages, heldout=path, documents=documents, count=distractors
        )
        extra = {lang: weighed(of(sample, lang), lang) for lang in rows}
    validation = ValidationSet(rows, concepts, distractors=extra or None)
    if not validation.directions:
        raise InputDataError(
            f"{needed_by}: no validation concept of {path} has documents in "
            f"two of the training languages {languages} (documents per language: "
            f"{ {lang: int(x.shape[0]) for lang, x in rows.items()} }). {fix}"
        )
    log.info(
        "validation stopping: %s documents of %d concepts, %d directions, %s training "
        "documents as further candidates",
        {lang: int(x.shape[0]) for lang, x in rows.items()},
        len({c for v in concepts.values() for c in v}),
        len(validation.directions),
        {lang: int(x.shape[0]) for lang, x in extra.items()},
    )
    return validation
