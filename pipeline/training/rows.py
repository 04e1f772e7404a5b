"""The training rows: which ``tfidf`` rows a fit uses, loaded into a corpus backend.

The training setup (``train.setup``) chooses the rows; the fit trains on whatever rows it is
given:

- ``joint``: every language of the tfidf dataset (or ``train.languages``);
- ``pairwise``: only the two languages of ``train.pair``;
- ``transitive``: every language, but the two of ``train.pair`` share no training
  concept: of each concept they both have, one of the two documents is dropped
  (which one is decided by a hash of the concept id, so half go each way), so the
  pair is connected only through the other languages.

When rows are removed, the selection is written as its own dataset
(``<paths.root>/train_rows``, rows renumbered) so the backends load it like any
``tfidf`` dataset, and the choice is auditable.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pipeline.backends import make_backend
from pipeline.config import Config, PathsConfig, TextConfig, TrainConfig
from pipeline.errors import ConfigError
from pipeline.features.indexing import dense_index
from pipeline.features.validation_rows import load_validation_set, validation_documents
from pipeline.io.datasets import read_dataset, read_manifest, write_dataset, write_options
from pipeline.io.locations import to_manifest
from pipeline.io.schemas import DOCUMENTS, TFIDF, VOCABULARY
from pipeline.methods.registry import find_method

__all__ = [
    "RowSource",
    "TrainingData",
    "load_training_data",
    "select_rows_frame",
    "select_training_rows",
    "training_data_from_frame",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RowSource:
    """Where loaded training rows came from, with the session and the typed settings that
    load more of them on first use: the rows grouped by concept (JPLSA, CPLSA, S2Net,
    :func:`~pipeline.training.groups.load_grouped_corpus`) and the validation concepts'
    rows (:func:`~pipeline.features.validation_rows.load_validation_set`). Built from the
    configuration when the rows are loaded (:meth:`of`), so that the configuration stops at
    the service's boundary.

    Attributes
    ----------
    spark : SparkSession
    rows_path : str
        The training rows' dataset (``tfidf`` or the selection's ``train_rows``).
    engine : str
        ``train.backend``: the grouped corpus' engine.
    text : TextConfig
        The tokeniser's settings (the topic models' term counts, validation documents).
    documents : str
        The documents dataset's path.
    heldout : str or None
        ``features.heldout_concepts`` resolved (:meth:`~pipeline.config.Config.heldout_path`).
    validation_concepts : int
        ``train.validation_concepts``.
    """

    spark: Any
    rows_path: str
    engine: str
    text: TextConfig
    documents: str
    heldout: str | None
    validation_concepts: int

    @classmethod
    def of(cls, spark: SparkSession, cfg: Config, rows_path: str) -> RowSource:
        """The source of the rows at ``rows_path`` loaded with ``cfg``."""
        return cls(
            spark=spark,
            rows_path=rows_path,
            engine=cfg.train.backend,
            text=cfg.text,
            documents=cfg.paths.dataset("documents"),
            heldout=cfg.heldout_path(),
            validation_concepts=cfg.train.validation_concepts,
        )

    def grouped(
        self,
        languages: list[str],
        vocabulary: dict[str, dict],
        weighting: str,
        partitions: int | None = None,
    ) -> Any:
        """The rows grouped by concept (:func:`~pipeline.training.groups.load_grouped_corpus`)."""
        from pipeline.training.groups import load_grouped_corpus

        return load_grouped_corpus(
            self.spark,
            self.rows_path,
            languages,
            vocabulary,
            weighting,
            engine=self.engine,
            text=self.text,
            documents=self.documents,
            partitions=partitions,
        )

    def validation_documents(
        self, languages: list[str], *, needed_by: str = "train.stop_rule=validation"
    ) -> Any:
        """The validation concepts' documents
        (:func:`~pipeline.features.validation_rows.validation_documents`)."""
        return validation_documents(
            self.spark,
            languages,
            heldout=self.heldout,
            documents=self.documents,
            validation_concepts=self.validation_concepts,
            needed_by=needed_by,
        )

    def validation(
        self,
        languages: list[str],
        vocabulary: dict[str, dict],
        *,
        weighting: str = "tfidf",
        needed_by: str = "train.stop_rule=validation",
        distractors: int = 0,
    ) -> Any:
        """The validation documents as a :class:`~pipeline.linalg.monitor.ValidationSet`
        (:func:`~pipeline.features.validation_rows.load_validation_set`), with
        ``distractors`` training documents per language as further candidates."""
        return load_validation_set(
            self.spark,
            languages,
            vocabulary,
            heldout=self.heldout,
            documents=self.documents,
            validation_concepts=self.validation_concepts,
            text=self.text,
            weighting=weighting,
            needed_by=needed_by,
            distractors=distractors,
        )


@dataclass
class TrainingData:
    """The training rows loaded into a corpus backend, reusable by several fits.

    Attributes
    ----------
    backend : CorpusBackend
    selection : dict
        The row selection (setup, pair, rows) recorded in ``model.json``.
    vocabulary : dict of str to dict
        Per language: ``terms`` (pyarrow array), ``idf``, ``df`` in term_index order.
    load_seconds : float
    """

    backend: Any
    selection: dict[str, Any]
    vocabulary: dict[str, dict]
    load_seconds: float
    #: Chain the Cr5 fits on this data: each starts from the previous fit's
    #: :class:`~pipeline.linalg.cr5.PathStart`, as a λ path does (evaluate.lambda_warm_start).
    chain_starts: bool = False
    path_start: Any = None
    #: Documents of validation concepts (train.stop_rule=validation), scored at every
    #: eigensolver iteration.
    validation: Any = None
    #: Raw texts for the encoder methods (tlaser, ctlaser): ``training`` per language a
    #: table (concept_index, text) in row order, ``validation`` the validation documents
    #: (lang, concept_id, text) or None.
    texts: dict[str, Any] | None = None
    #: What the rows are, for ``model.json`` (None: the ``tfidf`` dataset of paths.tfidf).
    source: str | None = None
    #: Eigensolver settings the memory plan chose for this data (``max_basis`` when it
    #: narrowed the basis, :func:`pipeline.memory.plan_train`); the Cr5 fit applies them.
    solver_options: dict[str, Any] = field(default_factory=dict)
    #: Where the rows were read from, with the session and settings that load their
    #: concept-grouped rows (JPLSA, CPLSA, S2Net) and validation rows on first use; None for
    #: rows held in a DataFrame (:func:`training_data_from_frame`).
    rows: RowSource | None = None
    _grouped: dict[tuple[str, int | None], Any] = field(
        default_factory=dict, init=False, repr=False
    )
    _validation_rows: dict[str, Any] = field(default_factory=dict, init=False, repr=False)

    def grouped(self, weighting: str, partitions: int | None = None) -> Any:
        """The training rows grouped by concept (:mod:`pipeline.training.groups`) in
        ``partitions`` blocks (the method's ``train.<method>.pair_partitions``; None: the
        default count), loaded once per weighting ("counts" or "tfidf") and block count and
        shared by every fit on this data."""
        key = (weighting, partitions)
        if key not in self._grouped:
            self._grouped[key] = self._source("concept-grouped rows").grouped(
                list(self.backend.languages), self.vocabulary, weighting, partitions
            )
        return self._grouped[key]

    def validation_rows(self, weighting: str, needed_by: str) -> Any:
        """Validation documents as a :class:`~pipeline.linalg.monitor.ValidationSet` of
        TF-IDF rows or term counts, loaded once per weighting."""
        if weighting not in self._validation_rows:
            self._validation_rows[weighting] = self._source("validation rows").validation(
                list(self.backend.languages),
                self.vocabulary,
                weighting=weighting,
                needed_by=needed_by,
            )
        return self._validation_rows[weighting]

    @property
    def rows_path(self) -> str | None:
        """The training rows' dataset (None for rows held in a DataFrame)."""
        return self.rows.rows_path if self.rows is not None else None

    def _source(self, what: str) -> RowSource:
        if self.rows is None:
            raise ConfigError(
                f"these training rows ({self.source}) were not read from a dataset, so their "
                f"{what} cannot be loaded: train this method on the train stage's rows"
            )
        return self.rows

    def close(self) -> None:
        """Release the backend's cached data (the Spark backend unpersists X) and the grouped
        corpora."""
        if hasattr(self.backend, "close"):
            self.backend.close()
        for corpus in self._grouped.values():
            corpus.close()
        self._grouped = {}


def load_training_data(spark: SparkSession, cfg: Config) -> TrainingData:
    """Select the training rows (train.* keys), load them into the configured backend."""
    t = cfg.train
    t0 = time.perf_counter()
    rows_path, selection = select_training_rows(spark, t, cfg.paths, cfg.paths.dataset("tfidf"))
    plan_options, solver_options = _memory_plan(spark, cfg, rows_path)
    backend = make_backend(
        t.backend, spark, rows_path, dtype=t.dtype, **(t.backend_options() | plan_options)
    )
    vocab = _vocabulary_maps(spark, cfg.paths.dataset("vocabulary"), list(backend.languages))
    source = RowSource.of(spark, cfg, rows_path)
    # the methods these rows train: train.method, and the evaluation's comparison methods
    specs = [s for s in map(find_method, (t.method, *cfg.evaluate.methods)) if s is not None]
    validation = None
    main = find_method(t.method)
    iterates = main is not None and main.iteration_validation
    if iterates and t.stop_rule == "validation":
        validation = source.validation(
            list(backend.languages), vocab, distractors=t.validation_distractors
        )
    elif any(s.epoch_validation for s in specs) and source.heldout:
        # the epoch is chosen on the split's validation concepts
        validation = source.validation(list(backend.languages), vocab)
    texts = None
    if any(s.texts for s in specs):
        texts = _training_texts(source, list(backend.languages))
    return TrainingData(
        backend,
        selection,
        vocab,
        time.perf_counter() - t0,
        validation=validation,
        rows=source,
        texts=texts,
        solver_options=solver_options,
    )


def _training_texts(source: RowSource, languages: list[str]) -> dict[str, Any]:
    """The encoder methods' raw texts: the training rows' documents and, with
    features.heldout_concepts, the validation concepts' documents."""
    spark = source.spark
    rows = read_dataset(spark, TFIDF, source.rows_path).select(
        "lang", "row", "doc_id", "concept_index"
    )
    docs = read_dataset(spark, DOCUMENTS, source.documents).select("doc_id", "text")
    table = rows.join(docs, "doc_id").orderBy("lang", "row").toArrow()
    training = {
        lang: table.filter(pc.equal(table.column("lang"), lang)).select(["concept_index", "text"])
        for lang in languages
    }
    validation = None
    if source.heldout:
        validation = source.validation_documents(languages)
    return {"training": training, "validation": validation}


def _frame_memory_plan(spark: SparkSession, cfg: Config, report: dict[str, Any]) -> dict:
    """The train stage's memory check for rows held in a DataFrame of sizes ``report``
    (MemoryPlanError before they are collected when the driver cannot hold the fit); returns
    the eigensolver settings the plan chose. A Spark Connect session does not tell its
    properties: no check there."""
    from pipeline.memory import Machine, TrainSizes, plan_train, spark_memory
    from pipeline.spark import is_connect

    sizes = TrainSizes.from_manifest({"report": report}, cfg.train.languages)
    if not sizes.nnz or is_connect(spark):
        return {}
    sc = spark.sparkContext
    mem = spark_memory(dict(sc.getConf().getAll()), sc.defaultParallelism, Machine.detect())
    plan = plan_train(sizes, cfg.train, mem)
    log.info("memory plan: %s", plan.describe())
    return plan.solver_options()


def _memory_plan(
    spark: SparkSession, cfg: Config, rows_path: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Plan the fit's memory from the training rows' manifest and the session's settings
    (:func:`pipeline.memory.plan_train`: raises MemoryPlanError, exit 2, when it cannot fit);
    return the backend options and the eigensolver settings it chose."""
    from pipeline.memory import Machine, TrainSizes, default_basis, plan_train, spark_memory

    sizes = TrainSizes.from_manifest(read_manifest(spark, TFIDF, rows_path), cfg.train.languages)
    if not sizes.nnz:
        return {}, {}
    sc = spark.sparkContext
    conf = dict(sc.getConf().getAll())
    plan = plan_train(sizes, cfg.train, spark_memory(conf, sc.defaultParallelism, Machine.detect()))
    log.info("memory plan: %s", plan.describe())
    why = "every language's solve runs as one job" if not plan.unfused(sizes) else "the driver fits"
    if plan.max_basis is not None:
        log.warning(
            "memory plan: the eigensolver's basis is narrowed to train.max_basis=%d columns "
            "(default %d) so that %s: it restarts more often (a few more iterations); set "
            "train.max_basis to choose it yourself",
            plan.max_basis,
            default_basis(sizes, cfg.train),
            why,
        )
    if plan.spill_dir is not None:
        from pipeline.linalg.spill import resolve_dir

        log.warning(
            "memory plan: the eigensolver's basis and kept images go to files under %s "
            "(train.spill_dir=%s, deleted when the fit ends) so that %s: the driver holds "
            "the rows in use; set train.spill_dir (a directory, or auto) to choose it yourself",
            resolve_dir(plan.spill_dir),
            plan.spill_dir,
            why,
        )
    warning = plan.unfused_warning(sizes, cfg.train)
    if warning:
        log.warning("memory plan: %s", warning)
    return plan.backend_options(sizes, cfg.train), plan.solver_options()


def check_methods_memory(spark: SparkSession, cfg: Config, methods: Sequence[str]) -> None:
    """Before the evaluate stage fits its comparison ``methods``: the driver plan of each
    classic one (:func:`pipeline.memory.plan_methods`, MemoryPlanError naming the method and
    the settings) from the tfidf manifest and the session's settings. A Spark Connect session
    does not tell its properties: no check there."""
    from pipeline.memory import Machine, TrainSizes, driver_formula, plan_methods, spark_memory
    from pipeline.spark import is_connect

    if not any(driver_formula(m) == "state" for m in methods) or is_connect(spark):
        return
    manifest = read_manifest(spark, TFIDF, cfg.paths.dataset("tfidf"))
    sizes = TrainSizes.from_manifest(manifest, cfg.train.languages)
    if not sizes.nnz:
        return
    sc = spark.sparkContext
    mem = spark_memory(dict(sc.getConf().getAll()), sc.defaultParallelism, Machine.detect())
    for method, plan in plan_methods(sizes, cfg.train, methods, mem).items():
        log.info("memory plan (%s): %s", method, plan.describe())


def select_training_rows(
    spark: SparkSession, t: TrainConfig, paths: PathsConfig, tfidf_path: str
) -> tuple[str, dict[str, Any]]:
    """Apply the training setup of the train section ``t`` to the tfidf rows at
    ``tfidf_path``; return (path of the rows to train on, report). A selection is written
    under ``paths.root`` with ``paths``' write options."""
    manifest = read_manifest(spark, TFIDF, tfidf_path)["report"]
    report, keep_all = _selection(t, manifest, tfidf_path)
    if keep_all:
        return tfidf_path, report
    df = read_dataset(spark, TFIDF, tfidf_path)
    selected, report = select_rows_frame(t, df, manifest, tfidf_path)
    selected = selected.cache()
    sub = _selection_manifest(paths.root, selected, manifest, report, tfidf_path)
    path = paths.root.rstrip("/") + "/train_rows"
    write_dataset(spark, selected, TFIDF, path, manifest={"report": sub}, **write_options(paths))
    selected.unpersist()
    report["rows_path"] = to_manifest(path, paths.root)
    return path, report


def select_rows_frame(
    t: TrainConfig, df: DataFrame, manifest: dict[str, Any], source: str
) -> tuple[DataFrame | None, dict[str, Any]]:
    """The training setup of the train section ``t`` (``train.setup``, ``train.pair``,
    ``train.languages``) applied to tfidf rows ``df`` whose report (sizes, languages) is
    ``manifest``.

    Returns
    -------
    rows : DataFrame or None
        The selected rows renumbered 0..n_l-1 per language (lazy), or None when the setup
        keeps every row as it is.
    report : dict
        The selection (setup, pair, languages, and for transitive the split concepts), as
        ``model.json`` records it.

    Raises
    ------
    ConfigError
        When a language of the setup has no rows (``source`` names the rows).
    """
    report, keep_all = _selection(t, manifest, source)
    if keep_all:
        return None, report
    df = df.filter(F.col("lang").isin(report["languages"]))
    if t.setup == "transitive":
        df, report["shared_concepts_split"] = _split_shared_concepts(df, *t.pair)
    return _renumber_rows(df), report


def _selection(
    t: TrainConfig, manifest: dict[str, Any], source: str
) -> tuple[dict[str, Any], bool]:
    """The selection's report, and whether it keeps every row of ``manifest``'s rows."""
    wanted = _training_languages(t, list(manifest["languages"]), source)
    report: dict[str, Any] = {"setup": t.setup, "pair": list(t.pair), "languages": wanted}
    return report, t.setup == "joint" and set(wanted) == set(manifest["languages"])


def training_data_from_frame(
    cfg: Config,
    tfidf: DataFrame,
    report: dict[str, Any],
    vocabulary: dict[str, dict],
    *,
    source: str,
) -> TrainingData:
    """Training rows held in a DataFrame (not a dataset), loaded into the local backend.

    Parameters
    ----------
    cfg : Config
        ``train.setup``, ``train.pair``, ``train.languages``, ``train.dtype``.
    tfidf : DataFrame
        Rows with the ``tfidf`` dataset's columns, as
        :func:`pipeline.features.tfidf.tfidf_frames` returns them.
    report : dict
        Their sizes (``languages``, ``per_language``, ``concepts``).
    vocabulary : dict of str to dict
        Per language: ``terms``, ``idf``, ``df`` in term_index order.
    source : str
        What the rows are, recorded in ``model.json`` (``training.tfidf``).

    Raises
    ------
    ConfigError
        For ``train.backend`` other than local (the Spark backend caches a dataset), or a
        language of the setup without rows.
    """
    from pipeline.backends.loader import TfidfLayout, local_backend_from_frame

    t = cfg.train
    if t.backend != "local":
        raise ConfigError(
            f"training rows held in a DataFrame train with train.backend=local; got "
            f"{t.backend!r} (the spark backend reads a tfidf dataset)"
        )
    t0 = time.perf_counter()
    selected, selection = select_rows_frame(t, tfidf, report, source)
    sizes = report
    if selected is not None:
        tfidf = selected.cache()
        sizes = _selection_manifest(cfg.paths.root, tfidf, report, selection, source)
    layout = TfidfLayout(sizes, selection["languages"], source)
    solver_options = _frame_memory_plan(tfidf.sparkSession, cfg, sizes)
    try:
        backend = local_backend_from_frame(tfidf, layout, dtype=t.dtype)
    finally:
        if selected is not None:
            tfidf.unpersist()
    vocab = {lang: vocabulary[lang] for lang in backend.languages}
    return TrainingData(
        backend,
        selection,
        vocab,
        time.perf_counter() - t0,
        source=source,
        solver_options=solver_options,
    )


def _training_languages(t: TrainConfig, available: list[str], tfidf_path: str) -> list[str]:
    """The languages of the training rows; ConfigError when one is not in the dataset."""
    wanted = list(t.languages) or available
    if t.setup == "pairwise":
        wanted = list(t.pair)
    missing = [lang for lang in [*wanted, *t.pair] if lang not in available]
    if missing:
        raise ConfigError(
            f"train languages {missing} are not in the tfidf dataset at {tfidf_path} "
            f"(it has {available}); fix train.languages / train.pair"
        )
    return wanted


def _split_shared_concepts(df: DataFrame, l1: str, l2: str) -> tuple[DataFrame, int]:
    """The transitive setup: of each concept that both ``l1`` and ``l2`` have, keep the
    documents of one of the two (by a hash of the concept id); (rows, such concepts)."""
    both = (
        df.filter(F.col("lang").isin(l1, l2))
        .groupBy("concept_id")
        .agg(F.countDistinct("lang").alias("n"))
        .filter("n = 2")
        .select("concept_id")
    )
    drop_lang = F.when(F.abs(F.xxhash64("concept_id")) % 2 == 0, F.lit(l1)).otherwise(l2)
    shared = F.broadcast(both.withColumn("_shared", F.lit(True)))
    df = (
        df.join(shared, "concept_id", "left")
        .filter(F.col("_shared").isNull() | (F.col("lang") != drop_lang))
        .drop("_shared")
    )
    return df, both.count()


def _renumber_rows(df: DataFrame) -> DataFrame:
    """Rows 0..n_l-1 per language again, in the same relative row order."""
    idx = dense_index(df.select("lang", "row"), ["lang", "row"], "gidx")
    first = idx.groupBy("lang").agg(F.min("gidx").alias("first"))
    idx = idx.join(F.broadcast(first), "lang").select(
        "lang", "row", (F.col("gidx") - F.col("first")).alias("new_row")
    )
    return df.join(idx, ["lang", "row"]).drop("row").withColumnRenamed("new_row", "row")


def _selection_manifest(
    root: str, df: DataFrame, manifest: dict[str, Any], report: dict[str, Any], source: str
) -> dict[str, Any]:
    """The ``train_rows`` dataset's report: sizes per language, the selection, the source
    (relative to ``paths.root``, ``root``)."""
    per_language = {}
    for r in (
        df.groupBy("lang")
        .agg(F.count(F.lit(1)).alias("n"), F.sum(F.size("indices")).alias("nnz"))
        .collect()
    ):
        per_language[r["lang"]] = {
            "documents": r["n"],
            "nnz": r["nnz"],
            "vocabulary": manifest["per_language"][r["lang"]]["vocabulary"],
        }
    return {
        "languages": sorted(per_language),
        "per_language": dict(sorted(per_language.items())),
        "documents": sum(v["documents"] for v in per_language.values()),
        "nnz": sum(v["nnz"] for v in per_language.values()),
        "concepts": manifest["concepts"],  # K unchanged: concept_index stays valid
        "selection": report,
        "source": to_manifest(source, root),
    }


def _vocabulary_maps(spark: SparkSession, path: str, languages: list[str]) -> dict[str, dict]:
    """Per language of the vocabulary dataset at ``path``: ``terms``, ``idf`` (float32) and
    ``df`` (int64) in term_index order."""
    table = (
        read_dataset(spark, VOCABULARY, path)
        .filter(F.col("lang").isin(languages))
        .orderBy("lang", "term_index")
        .toArrow()
    )
    out = {}
    for lang in languages:
        sub = table.filter(pc.equal(table.column("lang"), lang))
        out[lang] = {
            "terms": sub.column("term").combine_chunks(),
            "idf": sub.column("idf").to_numpy().astype(np.float32),
            "df": sub.column("df").to_numpy().astype(np.int64),
        }
    return out
