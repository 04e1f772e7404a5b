"""``Cr5``: the Cr5 method as a pyspark.ml ``Estimator``.

``fit(df)`` takes a DataFrame of aligned documents (a concept id, a language, a text per
row) and runs what the ``vocabulary``, ``tfidf`` and ``train`` stages run on the documents
dataset, with the same library code:

1. the documents' columns, canonical as ingest makes them (:func:`documents_frame`);
2. vocabulary and IDF (:func:`pipeline.features.vocabulary.vocabulary_frame`);
3. TF-IDF rows and concepts (:func:`pipeline.features.tfidf.tfidf_frames`);
4. the training service (:mod:`pipeline.training`): with ``backend="local"`` (the default)
   the rows are collected to the driver language by language and fitted in-process; with
   ``backend="spark"`` they are written as datasets under ``workDir`` and cached on the
   executors, as the ``train`` stage does.

It returns a :class:`~pipeline.sparkml.Cr5Embedding` holding the model directory the training
service wrote. Every parameter is checked when set, and the whole set, across parameters, at
the start of ``fit``, before any Spark work (:func:`pipeline.sparkml.derived.configuration`).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from pyspark import StorageLevel, keyword_only
from pyspark.ml import Estimator
from pyspark.ml.param.shared import HasInputCol, HasOutputCol
from pyspark.ml.util import DefaultParamsReadable, DefaultParamsWritable
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pipeline.config import Config
from pipeline.errors import ConfigError, InputDataError
from pipeline.features.tfidf import tfidf_frames
from pipeline.features.vocabulary import (
    dropped_language_warnings,
    vocabulary_arrays,
    vocabulary_frame,
)
from pipeline.io.datasets import write_dataset, write_options
from pipeline.io.schemas import CONCEPTS, TFIDF, VOCABULARY
from pipeline.spark import is_connect
from pipeline.sparkml.derived import (
    EMBEDDING_PARAMS,
    FIT_PARAMS,
    configuration,
    params_mixin,
    set_declared_defaults,
)
from pipeline.sparkml.embedding import (
    DEFAULT_INPUT_COL,
    DEFAULT_OUTPUT_COL,
    Cr5Embedding,
    EmbeddingParams,
    check_names,
)
from pipeline.sparkml.persistence import (
    is_local_path,
    remove_path,
    temporary_directory,
    unique_child,
)
from pipeline.training import train_model, training_data_from_frame

__all__ = ["Cr5", "FitParams", "documents_frame"]

log = logging.getLogger(__name__)

FitParams = params_mixin(
    "FitParams",
    FIT_PARAMS,
    "Parameters of Cr5.fit: its columns and work directory, and the train.*, features.* and "
    "text.* keys that apply to a DataFrame.",
    __name__,
)

#: What model.json records as the training rows of a fit.
SOURCE = "Cr5.fit(DataFrame)"


class Cr5(
    Estimator,
    HasInputCol,
    HasOutputCol,
    EmbeddingParams,
    FitParams,
    DefaultParamsWritable,
    DefaultParamsReadable["Cr5"],
):
    """Cr5 (crosslingual reduced-rank ridge regression) as a Spark ML estimator.

    Parameters (keyword only)
    -------------------------
    inputCol : str, default "text"
        Column of the documents' texts.
    langCol, conceptCol, docIdCol : str
        Columns of the language, the concept and (optionally) a unique document id.
    outputCol : str, default "embedding"
        The column the fitted model adds.
    lam, r, setup, languages, backend, minDf, ... : the configuration keys
        ``train.*``, ``features.*``, ``text.*`` and ``embed.*`` in camelCase, with their
        declared defaults and checks (:meth:`explainParams` lists them all;
        ``docs/spark-ml.md``).

    Examples
    --------
    >>> from pyspark.ml import Pipeline
    >>> from pyspark.ml.feature import SQLTransformer
    >>> clean = SQLTransformer(statement="SELECT *, lower(body) AS text FROM __THIS__")
    >>> cr5 = Cr5(r=100, lam=1.0, minUniqueWords=10, minDf=2)
    >>> model = Pipeline(stages=[clean, cr5]).fit(documents)        # doctest: +SKIP
    >>> model.transform(documents).select("embedding")              # doctest: +SKIP
    """

    @keyword_only
    def __init__(self, **kwargs: Any) -> None:
        super().__init__()
        self._setDefault(inputCol=DEFAULT_INPUT_COL, outputCol=DEFAULT_OUTPUT_COL)
        set_declared_defaults(self, EMBEDDING_PARAMS)
        set_declared_defaults(self, FIT_PARAMS)
        self.setParams(**self._input_kwargs)

    @keyword_only
    def setParams(self, **kwargs: Any) -> Cr5:
        """Set parameters by keyword; ConfigError for an unknown name or a bad value."""
        check_names(self, kwargs)
        return self._set(**kwargs)

    def setInputCol(self, value: str) -> Cr5:
        return self._set(inputCol=value)

    def setOutputCol(self, value: str) -> Cr5:
        return self._set(outputCol=value)

    def configuration(self, **paths: Any) -> Config:
        """The configuration these parameters make, checked as a configuration file is
        (ConfigError naming the key); ``paths`` sets the ``paths`` section."""
        values = {d: self.getOrDefault(d.name) for d in FIT_PARAMS + EMBEDDING_PARAMS}
        return configuration(values, paths=paths)

    def _fit(self, dataset: DataFrame) -> Cr5Embedding:
        self.configuration()  # every check, before any Spark work
        spark = dataset.sparkSession
        if self.getOrDefault("backend") == "spark" and is_connect(spark):
            raise ConfigError(
                "backend='spark' (train.backend) caches X as RDD blocks, which a Spark Connect "
                "session cannot; use backend='local' (the default)"
            )
        work = self._work_root()
        model_dir = temporary_directory("cr5-model-") / "model"
        try:
            cfg = self.configuration(root=work, model=str(model_dir))
            summary = _fit_documents(spark, documents_frame(dataset, self), cfg)
        finally:
            if is_local_path(work) or not is_connect(spark):
                remove_path(spark, work)
        model = Cr5Embedding.from_model(model_dir)
        model.summary = summary
        self._copyValues(model)
        return model

    def _work_root(self) -> str:
        parent = self.getOrDefault("workDir")
        if parent is None:
            return str(temporary_directory("cr5-fit-"))
        return unique_child(parent, "cr5-fit-")


def documents_frame(dataset: DataFrame, stage: Any) -> DataFrame:
    """The columns ``doc_id, concept_id, lang, text`` of ``dataset`` as the documents dataset
    has them (strings; ``lang`` trimmed and lower-cased, ``concept_id`` trimmed), persisted.

    Raises
    ------
    InputDataError
        A column missing (naming the parameter), a document without concept or language,
        or a doc id held by more than one document (all counted in one aggregation).
    """
    text, lang = stage.getInputCol(), stage.getOrDefault("langCol")
    concept, doc_id = stage.getOrDefault("conceptCol"), stage.getOrDefault("docIdCol")
    for param, col in (("inputCol", text), ("langCol", lang), ("conceptCol", concept)):
        if col not in dataset.columns:
            raise InputDataError(
                f"Cr5.fit: the DataFrame has no column {col!r} ({param}); its columns are "
                f"{dataset.columns}. Fix: set {param} to the column to use"
            )
    lang_c = F.lower(F.trim(F.col(lang).cast("string")))
    concept_c = F.trim(F.col(concept).cast("string"))
    has_ids = doc_id in dataset.columns
    docs = dataset.select(
        (F.col(doc_id).cast("string") if has_ids else F.concat_ws(":", lang_c, concept_c)).alias(
            "doc_id"
        ),
        concept_c.alias("concept_id"),
        lang_c.alias("lang"),
        F.col(text).cast("string").alias("text"),
    ).persist(StorageLevel.MEMORY_AND_DISK)
    blank = (
        F.col("concept_id").isNull()
        | (F.col("concept_id") == "")
        | F.col("lang").isNull()
        | (F.col("lang") == "")
    )
    counts = docs.agg(
        F.count(F.lit(1)).alias("rows"),
        F.sum(F.when(blank, 1).otherwise(0)).alias("blank"),
        F.count_distinct("doc_id").alias("ids"),
        F.sum(F.when(F.col("doc_id").isNull(), 1).otherwise(0)).alias("null_ids"),
    ).first()
    try:
        _check_documents(docs, counts, has_ids, concept, lang, doc_id)
    except InputDataError:
        docs.unpersist()
        raise
    return docs


def _check_documents(
    docs: DataFrame, counts: Any, has_ids: bool, concept: str, lang: str, doc_id: str
) -> None:
    if not counts["rows"]:
        raise InputDataError("Cr5.fit: the DataFrame has no rows")
    if counts["blank"]:
        raise InputDataError(
            f"Cr5.fit: {counts['blank']} document(s) have no concept ({concept!r}, conceptCol) "
            f"or no language ({lang!r}, langCol). Fix: drop or fill them before fitting"
        )
    if counts["null_ids"]:
        raise InputDataError(
            f"Cr5.fit: {counts['null_ids']} document(s) have a null id ({doc_id!r}, docIdCol). "
            "Fix: fill it, or name a column of unique ids in docIdCol"
        )
    duplicates = counts["rows"] - counts["ids"]
    if duplicates:
        examples = [
            r["doc_id"]
            for r in docs.groupBy("doc_id").count().filter("count > 1").limit(5).collect()
        ]
        how = (
            f"the column {doc_id!r} (docIdCol) must hold unique ids"
            if has_ids
            else f"without a {doc_id!r} column (docIdCol) a document's id is "
            "<lang>:<concept>, so each concept may have one document per language"
        )
        raise InputDataError(
            f"Cr5.fit: {duplicates} document(s) repeat an id, e.g. {examples}: {how}. Fix: "
            "deduplicate, or name a column of unique ids in docIdCol"
        )


def _fit_documents(spark: Any, docs: DataFrame, cfg: Config) -> dict[str, Any]:
    """Vocabulary, TF-IDF and training on the persisted documents ``docs``; the training
    service's summary (with the vocabulary's warnings). Unpersists what it cached."""
    t0 = time.perf_counter()
    heldout = cfg.heldout_path()
    vocab, counts, report = vocabulary_frame(
        spark, docs, features=cfg.features, text=cfg.text, heldout=heldout
    )
    frames: list[DataFrame] = [docs, counts]
    try:
        vocab = vocab.select("lang", "term", "term_index", "df", "idf").cache()
        frames.append(vocab)
        arrays = vocabulary_arrays(vocab.toArrow())
        counts.unpersist()
        sizes = {lang: len(v["terms"]) for lang, v in arrays.items()}
        warnings_ = dropped_language_warnings(cfg.features, report, sizes)
        log.info("Cr5.fit: vocabulary %s in %.1f s", sizes, time.perf_counter() - t0)
        vocabularies = {lang: (v["terms"], v["idf"]) for lang, v in arrays.items()}
        tfidf, concepts, rows_report = tfidf_frames(
            spark,
            docs,
            vocabularies,
            features=cfg.features,
            text=cfg.text,
            heldout=heldout,
            partitions=cfg.spark.shuffle_partitions,
        )
        frames += [tfidf, concepts]
        if cfg.train.backend == "local":
            data = training_data_from_frame(cfg, tfidf, rows_report, arrays, source=SOURCE)
            for frame in frames:
                frame.unpersist()
            try:
                summary = train_model(spark, cfg, data)
            finally:
                data.close()
        else:
            opts = write_options(cfg.paths)
            manifest = {"report": {**report, "vocabulary_size": sizes, "source": SOURCE}}
            for frame, spec, name in (
                (vocab, VOCABULARY, "vocabulary"),
                (concepts, CONCEPTS, "concepts"),
                (tfidf, TFIDF, "tfidf"),
            ):
                report_ = manifest if name == "vocabulary" else {"report": rows_report}
                write_dataset(spark, frame, spec, cfg.paths.dataset(name), manifest=report_, **opts)
            for frame in frames:
                frame.unpersist()
            summary = train_model(spark, cfg)
    finally:
        for frame in frames:
            frame.unpersist()
    summary["warnings"] = warnings_ + list(summary.get("warnings") or [])
    summary["fit_wall_seconds"] = round(time.perf_counter() - t0, 2)
    return summary
