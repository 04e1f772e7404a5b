"""The evaluation's classification step: labelled held-out documents, every method's model.

:func:`run_classification` collects the documents of the evaluated pairs' held-out concepts
(test and validation) that ``evaluate.classify_labels`` labels, splits their concepts for the
classifier (:func:`~pipeline.evaluation.classify.classifier_split`), embeds them with every
evaluated method's model through the public embedding path, and scores the MLDoc transfer
matrix with the majority-class and same-language TF-IDF references
(:mod:`pipeline.evaluation.classify`).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from pipeline.config import Config, EvaluateConfig
from pipeline.errors import InputDataError
from pipeline.evaluation.classify import (
    LabelledSet,
    classifier_split,
    majority_transfer,
    summarise,
    transfer_accuracy,
)
from pipeline.io.datasets import read_dataset, read_table
from pipeline.io.schemas import DOCUMENTS
from pipeline.model.loading import load_model

log = logging.getLogger(__name__)

__all__ = ["classification_rows", "labelled_documents", "run_classification"]


def labelled_documents(
    spark: SparkSession, cfg: Config, e: EvaluateConfig, langs: list[str], concepts: list[str]
) -> pa.Table:
    """Documents of ``concepts`` in ``langs`` that the labels table labels: columns lang,
    concept_id, text, label, train (bool: a classifier-training concept), sorted."""
    path = str(e.classify_labels)
    labels = read_table(spark, path)
    missing = {"concept_id", "label"} - set(labels.columns)
    if missing:
        raise InputDataError(
            f"evaluate.classify_labels {path} lacks the column(s) {sorted(missing)} (it has "
            f"{labels.columns}); it must map concept_id to label "
            "(scripts/build_ddtp_labels.py writes one for the DDTP corpus)"
        )
    labels = labels.select("concept_id", F.col("label").cast("string")).dropDuplicates(
        ["concept_id"]
    )
    held = spark.createDataFrame([(c,) for c in concepts], "concept_id string")
    table = (
        read_dataset(spark, DOCUMENTS, cfg.paths.dataset("documents"))
        .filter(F.col("lang").isin(langs))
        .join(F.broadcast(held), "concept_id")
        .join(labels, "concept_id")
        .filter(F.col("label").isNotNull())
        .groupBy("lang", "concept_id")
        .agg(F.min_by("text", "doc_id").alias("text"), F.first("label").alias("label"))
        .orderBy("lang", "concept_id")
        .toArrow()
    )
    if table.num_rows == 0:
        raise InputDataError(
            f"evaluate.classify_labels {path} labels none of the {len(concepts)} held-out "
            f"concepts of the evaluated pairs in {langs}; is it the labels table of this corpus "
            "(its concept_id must be the documents' concept_id)?"
        )
    train = classifier_split(
        np.asarray(table.column("concept_id").to_pylist(), dtype=object),
        e.classify_train_fraction,
        e.seed,
    )
    return table.append_column("train", pa.array(train))


def _sets(table: pa.Table, langs: list[str], vectors: dict[str, Any]) -> dict[str, LabelledSet]:
    out = {}
    for lang in langs:
        if lang not in vectors:
            continue
        sub = table.filter(pc.equal(table.column("lang"), lang))
        y = np.asarray(sub.column("label").to_pylist(), dtype=object).astype(str)
        tr = sub.column("train").to_numpy(zero_copy_only=False)
        x = vectors[lang]
        out[lang] = LabelledSet(x[np.flatnonzero(tr)], y[tr], x[np.flatnonzero(~tr)], y[~tr])
    return out


def _embed_all(model: Any, table: pa.Table, langs: list[str]) -> dict[str, Any]:
    out = {}
    for lang in langs:
        if lang not in model.languages:
            continue
        sub = table.filter(pc.equal(table.column("lang"), lang))
        out[lang] = model.embed(sub.column("text").combine_chunks(), lang)
    return out


def run_classification(
    ctx: Any, methods: dict[str, dict[str, Any]], langs: list[str]
) -> dict[str, Any]:
    """The report's ``classification`` section for every method of ``methods`` (report
    entries with their ``model`` path) on the languages ``langs``."""
    e = ctx.e
    t0 = time.perf_counter()
    concepts = sorted({r["concept_id"] for r in ctx.splits_rows})
    table = labelled_documents(ctx.spark, ctx.cfg, e, langs, concepts)
    per_method: dict[str, Any] = {}
    tfidf_model = None  # the first model with a TF-IDF vocabulary gives the TF-IDF rows
    for name, entry in methods.items():
        model = load_model(entry["model"])
        if tfidf_model is None and hasattr(model, "tfidf"):
            tfidf_model = model
        if getattr(model, "is_sparse", False):
            log.info("classify: %s embeds into sparse term space; skipped", name)
            continue
        sets = _sets(table, langs, _embed_all(model, table, langs))
        matrix = transfer_accuracy(sets, c=e.classify_c, seed=e.seed)
        per_method[name] = {"accuracy": matrix, **summarise(matrix)}
        log.info("classify: %s %s", name, summarise(matrix))
    if tfidf_model is None:
        raise InputDataError(
            "classify: no evaluated model has a TF-IDF vocabulary for the TF-IDF reference; "
            "add a linear method (cr5, cl_lsi, ...) to evaluate.methods"
        )
    tfidf_sets = _sets(
        table,
        langs,
        {
            lang: tfidf_model.tfidf(_texts(table, lang), lang)
            for lang in langs
            if lang in tfidf_model.languages
        },
    )
    majority = majority_transfer(tfidf_sets)
    tfidf = transfer_accuracy(tfidf_sets, c=e.classify_c, seed=e.seed, within_language_only=True)
    docs = {
        lang: {"train": int(s.train_y.size), "test": int(s.test_y.size)}
        for lang, s in tfidf_sets.items()
    }
    return {
        "labels": str(e.classify_labels),
        "classes": sorted(set(table.column("label").to_pylist())),
        "documents": docs,
        "train_fraction": e.classify_train_fraction,
        "c": e.classify_c,
        "methods": per_method,
        "references": {
            "majority": {"accuracy": majority, **summarise(majority)},
            "tfidf": {"accuracy": tfidf, **summarise(tfidf)},
        },
        "seconds": round(time.perf_counter() - t0, 2),
    }


def _texts(table: pa.Table, lang: str) -> pa.Array:
    return table.filter(pc.equal(table.column("lang"), lang)).column("text").combine_chunks()


def classification_rows(setup: str, section: dict[str, Any]) -> list[dict[str, Any]]:
    """``evaluation`` dataset rows: measure ``classify``, metric ``accuracy``, query_lang the
    classifier's training language, target_lang the test language; n_queries and
    n_candidates its training and test document counts; the references as methods
    ``majority`` and ``tfidf``."""
    docs = section["documents"]
    rows = []
    named = {**section["methods"], **section["references"]}
    for method, info in named.items():
        for src, row in info["accuracy"].items():
            for tgt, acc in row.items():
                rows.append(
                    {
                        "setup": setup,
                        "method": method,
                        "split": "test",
                        "lam": 0.0,
                        "query_lang": src,
                        "target_lang": tgt,
                        "measure": "classify",
                        "csls_source": None,
                        "k": None,
                        "metric": "accuracy",
                        "value": float(acc),
                        "n_queries": docs.get(src, {}).get("train", 0),
                        "n_candidates": docs.get(tgt, {}).get("test", 0),
                    }
                )
    return rows


def markdown_section(section: dict[str, Any] | None) -> list[str]:
    """The report's Markdown lines for the classification section (none without it)."""
    if not section:
        return []
    langs = sorted(section["documents"])
    out = [
        "",
        "## Crosslingual classification (MLDoc protocol)",
        "",
        f"Labels `{section['labels']}` ({len(section['classes'])} classes) on the held-out "
        "concepts; a logistic regression trained on one language's embeddings, tested on "
        "each language's. Documents (train/test): "
        + ", ".join(f"{lang} {d['train']}/{d['test']}" for lang, d in section["documents"].items())
        + ".",
        "",
        "| method | same | cross | all | "
        + " | ".join(f"{a}→{b}" for a in langs for b in langs)
        + " |",
        "|---|---:|---:|---:|" + "---:|" * (len(langs) ** 2),
    ]

    def fmt(v: float | None) -> str:
        return "–" if v is None else f"{v:.3f}"

    for name, info in {**section["methods"], **section["references"]}.items():
        cells = [fmt(info["accuracy"].get(a, {}).get(b)) for a in langs for b in langs]
        out.append(
            f"| {name} | {fmt(info['same'])} | {fmt(info['cross'])} | {fmt(info['all'])} | "
            + " | ".join(cells)
            + " |"
        )
    return out
