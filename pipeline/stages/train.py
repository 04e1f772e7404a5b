"""Stage ``train``: fit Cr5 on the ``tfidf`` rows and write a model directory.

The training rows are chosen here (the engine trains on whatever rows it is given):

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
import platform
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc
import scipy.sparse as sp
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pipeline.config import Config, TrainConfig
from pipeline.errors import ConfigError, InputDataError
from pipeline.features.indexing import dense_index
from pipeline.io.datasets import read_dataset, read_manifest, write_dataset, write_options
from pipeline.io.locations import to_manifest
from pipeline.io.schemas import TFIDF, VOCABULARY
from pipeline.linalg.backend import pass_delta
from pipeline.model.format import GRAM_EIGENVALUES, GRAM_EIGENVECTORS, LanguageMap, save_model
from pipeline.preflight import check_rank

log = logging.getLogger(__name__)


def _renumber_rows(df: DataFrame) -> DataFrame:
    """Rows 0..n_l-1 per language again, in the previous row order."""
    idx = dense_index(df.select("lang", "row"), ["lang", "row"], "gidx")
    first = idx.groupBy("lang").agg(F.min("gidx").alias("first"))
    idx = idx.join(F.broadcast(first), "lang").select(
        "lang", "row", (F.col("gidx") - F.col("first")).alias("new_row")
    )
    return df.join(idx, ["lang", "row"]).drop("row").withColumnRenamed("new_row", "row")


def select_training_rows(
    spark: SparkSession, cfg: Config, tfidf_path: str
) -> tuple[str, dict[str, Any]]:
    """Apply the training setup; return (path of the rows to train on, report)."""
    t = cfg.train
    manifest = read_manifest(spark, TFIDF, tfidf_path)["report"]
    available = list(manifest["languages"])
    wanted = list(t.languages) or available
    if t.setup == "pairwise":
        wanted = list(t.pair)
    missing = [lang for lang in [*wanted, *t.pair] if lang not in available]
    if missing:
        raise ConfigError(
            f"train languages {missing} are not in the tfidf dataset at {tfidf_path} "
            f"(it has {available}); fix train.languages / train.pair"
        )
    report: dict[str, Any] = {"setup": t.setup, "pair": list(t.pair), "languages": wanted}
    if t.setup == "joint" and set(wanted) == set(available):
        return tfidf_path, report

    df = read_dataset(spark, TFIDF, tfidf_path).filter(F.col("lang").isin(wanted))
    if t.setup == "transitive":
        l1, l2 = t.pair
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
        report["shared_concepts_split"] = both.count()
    df = _renumber_rows(df).cache()
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
    sub = {
        "languages": sorted(per_language),
        "per_language": dict(sorted(per_language.items())),
        "documents": sum(v["documents"] for v in per_language.values()),
        "nnz": sum(v["nnz"] for v in per_language.values()),
        "concepts": manifest["concepts"],  # K unchanged: concept_index stays valid
        "selection": report,
        "source": to_manifest(tfidf_path, cfg.paths.root),
    }
    path = cfg.paths.root.rstrip("/") + "/train_rows"
    write_dataset(spark, df, TFIDF, path, manifest={"report": sub}, **write_options(cfg.paths))
    df.unpersist()
    report["rows_path"] = to_manifest(path, cfg.paths.root)
    return path, report


def _vocabulary_maps(spark: SparkSession, cfg: Config, languages: list[str]) -> dict[str, dict]:
    table = (
        read_dataset(spark, VOCABULARY, cfg.paths.dataset("vocabulary"))
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


def _versions() -> dict[str, str]:
    import pyspark
    import scipy

    from pipeline import __version__

    return {
        "pipeline": __version__,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "pyspark": pyspark.__version__,
    }


def fit_baseline(t: Any, backend: Any, terms: dict[str, Any] | None = None) -> Any:
    """Fit the baseline ``t.method`` with the train section's shared solver settings.

    ``terms`` (per-language vocabularies in term_index order) is needed by untranslated.
    """
    from pipeline.baselines import FIT_FUNCTIONS

    if t.method == "untranslated":
        return FIT_FUNCTIONS["untranslated"](backend, terms=terms, seed=t.seed)
    common = {
        "r": t.r,
        "oversampling": t.oversampling,
        "block_size": t.block_size,
        "eig_rtol": t.eig_rtol,
        "eig_maxiter": t.eig_maxiter,
        "max_basis": t.max_basis,
        "max_workers": t.max_workers,
        "seed": t.seed,
    }
    if t.method in ("cca", "opca"):
        common.update(gamma=t.gamma, cg_rtol=t.cg_rtol, cg_maxiter=t.cg_maxiter)
    return FIT_FUNCTIONS[t.method](backend, **common)


def training_warnings(cfg: Config, languages: list[str]) -> list[str]:
    """What the user should know about the training rows (or an error, by configuration).

    One language gives a model whose space no other language shares: not crosslingual.
    ``train.on_single_language`` makes that a warning (recorded in ``model.json`` and
    the stage summary) or an error.
    """
    if len(languages) != 1:
        return []
    msg = (
        f"training on one language only ({languages[0]}): the model is not crosslingual "
        "(no other language shares its space). Check ingest.languages, train.languages and "
        "the documents dataset"
    )
    if cfg.train.on_single_language == "error":
        raise InputDataError(msg + ", or set train.on_single_language=warn to allow it.")
    msg += " (train.on_single_language=error refuses such runs)."
    log.warning("%s", msg)
    return [msg]


def checkpoint_dir(cfg: Config) -> str | None:
    """Where the solver checkpoints: one directory per training configuration."""
    if cfg.train.checkpoint_dir == "":
        return None
    base = cfg.train.checkpoint_dir or (cfg.paths.root.rstrip("/") + "/checkpoints")
    return f"{base}/train-{cfg.fingerprint('train', 'features', 'text')}"


def model_preprocessing(cfg: Config) -> dict[str, Any]:
    """``model.json``'s preprocessing section: what inference must repeat."""
    settings = cfg.to_dict()
    return {
        "text": settings["text"],
        "features": settings["features"],
        "idf": "ln(N_l / df)",
        "row_norm": "l2",
        "center_at_inference": False,
    }


def _stopping_summary(history: dict[str, Any]) -> dict[str, Any] | None:
    """Which rule ended the eigensolver and which iteration's solution the model holds (the
    per-iteration objective, σ and validation P@1 are in ``solver.history.stopping``)."""
    stopping = history.get("stopping")
    if not stopping:
        return None
    keys = ("rule", "stopped_by", "returned_iteration", "best_iteration", "best_validation_p_at_1")
    return {k: stopping[k] for k in keys if k in stopping}


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

    def close(self) -> None:
        """Release the backend's cached data (the Spark backend unpersists X)."""
        if hasattr(self.backend, "close"):
            self.backend.close()


def load_training_data(spark: SparkSession, cfg: Config) -> TrainingData:
    """Select the training rows (train.* keys), load them into the configured backend."""
    from pipeline.backends import make_backend

    t = cfg.train
    t0 = time.perf_counter()
    rows_path, selection = select_training_rows(spark, cfg, cfg.paths.dataset("tfidf"))
    backend = make_backend(t.backend, spark, rows_path, dtype=t.dtype, **t.backend_options())
    vocab = _vocabulary_maps(spark, cfg, list(backend.languages))
    validation = None
    if t.method == "cr5" and t.stop_rule == "validation":
        from pipeline.features.validation_rows import load_validation_set

        validation = load_validation_set(spark, cfg, list(backend.languages), vocab)
    return TrainingData(backend, selection, vocab, time.perf_counter() - t0, validation=validation)


def run(spark: SparkSession, cfg: Config, data: TrainingData | None = None) -> dict[str, Any]:
    """The registered stage: train ``train.method`` and write the model to ``paths.model``.

    ``data`` (from :func:`load_training_data` with the same train, features and paths
    settings) lets a caller fit several models on one loaded backend; without it the rows
    are loaded here and released afterwards.
    """
    if data is not None:
        return _train(cfg, data)
    data = load_training_data(spark, cfg)
    try:
        return _train(cfg, data)
    finally:
        data.close()


def _fit_path_to(t: TrainConfig, backend: Any) -> tuple[Any, list[dict[str, Any]]]:
    """``train.path_factors``: the fits at λ times each factor, largest first, each started
    from the previous one; returns the last one's PathStart and a record per fit. (No
    checkpoints: a rerun refits the path, which costs less than the final fit.)"""
    from pipeline.linalg.cr5 import Cr5Solver

    start, fits = None, []
    for factor in sorted(t.path_factors, reverse=True):
        lam = t.lam * float(factor)
        t0 = time.perf_counter()
        params = {**t.solver_params(), "lam": lam, "stop_rule": "residual"}
        solver = Cr5Solver(**params).fit(backend, start=start, keep_start=True)
        start = solver.path_start_
        fits.append(
            {
                "lam": lam,
                "seconds": round(time.perf_counter() - t0, 3),
                "eigensolver_iterations": solver.n_iter_,
            }
        )
        log.info(
            "path fit at lambda %g: %d iterations, %.1fs", lam, solver.n_iter_, fits[-1]["seconds"]
        )
    return start, fits


def _train(cfg: Config, data: TrainingData) -> dict[str, Any]:
    from pipeline.linalg.checkpoint import CheckpointStore
    from pipeline.linalg.cr5 import Cr5Solver

    t = cfg.train
    backend, vocab = data.backend, data.vocabulary
    passes0 = backend.pass_counts
    languages = list(backend.languages)
    log.info(
        "training %s (%s backend, %s) on %s: %s documents, K=%d, r=%d, lambda=%g",
        t.method,
        t.backend,
        t.dtype,
        languages,
        {lang: backend.n_docs(lang) for lang in languages},
        backend.n_concepts,
        t.r,
        t.lam,
    )
    warnings_ = training_warnings(cfg, languages)
    if t.method != "untranslated":
        check_rank(
            t.r,
            backend.n_concepts,
            sum(backend.n_terms(lang) for lang in languages),
            where=f"the training rows (train.setup={t.setup}, languages {languages})",
        )
    ckpt = checkpoint_dir(cfg) if t.method == "cr5" else None
    t0 = time.perf_counter()
    shared: dict[str, np.ndarray] = {}
    started_from = path_from = None
    path_fits: list[dict[str, Any]] = []
    if t.method == "cr5":
        start = data.path_start if data.chain_starts else None
        if start is None and t.path_factors:
            start, path_fits = _fit_path_to(t, backend)
        solver = Cr5Solver(t, checkpoint=CheckpointStore(ckpt) if ckpt else None)
        solver.fit(backend, start=start, keep_start=data.chain_starts, validation=data.validation)
        if data.chain_starts:
            data.path_start = solver.path_start_
        started_from = "surrogate" if start is None else "previous_fit"
        path_from = None if start is None else start.lam
        components, means = solver.components_, solver.mean_
        eigenvalues, history = solver.eigenvalues_, solver.history_
        n_iter = solver.n_iter_
        # Λ, Q of Φ*Φ*ᵀ = QΛQᵀ: the Φ* word vectors are Φ_lᵀ Λ^{1/2} Qᵀ
        shared = {
            GRAM_EIGENVALUES: solver.gram_eigenvalues_,
            GRAM_EIGENVECTORS: solver.gram_eigenvectors_,
        }
    else:
        terms = None
        if t.method == "untranslated":
            terms = {lang: vocab[lang]["terms"].to_pylist() for lang in languages}
        fitted = fit_baseline(t, backend, terms)
        components, eigenvalues, history = fitted.components, fitted.eigenvalues, fitted.history
        history = {k: v for k, v in history.items() if k != "union_terms"}  # in the maps
        means = fitted.mean or {}
        n_iter = history.get("eigensolver", {}).get("n_iter")
    fit_seconds = time.perf_counter() - t0
    # r: the embedding dimension (|union vocabulary| for untranslated).
    r_out = int(next(iter(components.values())).shape[1])

    maps = {}
    for lang in languages:
        v = vocab[lang]
        if len(v["terms"]) != backend.n_terms(lang):
            raise ConfigError(
                f"vocabulary of {lang!r} has {len(v['terms'])} terms but the tfidf rows use "
                f"{backend.n_terms(lang)}; rerun the vocabulary and tfidf stages together"
            )
        maps[lang] = LanguageMap(
            terms=v["terms"],
            idf=v["idf"],
            df=v["df"],
            phi=components[lang].astype(np.float32)
            if sp.issparse(components[lang])
            else np.asarray(components[lang], dtype=np.float32),
            mean=means.get(lang),
        )
    passes = pass_delta(passes0, backend.pass_counts)
    training = {
        "tfidf": to_manifest(cfg.paths.dataset("tfidf"), cfg.paths.root),
        "selection": data.selection,
        "documents": {lang: backend.n_docs(lang) for lang in languages},
        "concepts": backend.n_concepts,
        "backend": t.backend,
        "dtype": t.dtype,
        "load_seconds": round(data.load_seconds, 3),
        "fit_seconds": round(fit_seconds, 3),
        "passes_over_x": passes,
        "eigensolver_start": started_from,
        "path_from_lam": path_from,
        "path_fits": path_fits,
        "stopping": _stopping_summary(history),
    }
    meta = {
        "method": t.method,
        "r": r_out,
        "lam": t.lam,
        "preprocessing": model_preprocessing(cfg),
        "solver": {"params": t.solver_params(), "history": history},
        "eigenvalues": [float(x) for x in eigenvalues],
        "training": training,
        "versions": _versions(),
        "warnings": warnings_,
    }
    model_path = cfg.paths.dataset("model")
    save_model(model_path, maps, meta, shared=shared)
    if ckpt and Path(ckpt).exists():
        shutil.rmtree(ckpt, ignore_errors=True)  # the model is the durable result now
    eig = eigenvalues
    return {
        "path": model_path,
        "languages": languages,
        "r": r_out,
        "lam": t.lam,
        "setup": t.setup,
        "documents": sum(training["documents"].values()),
        "concepts": backend.n_concepts,
        "eigenvalues": {"first": float(eig[0]), "last": float(eig[-1])} if len(eig) else None,
        "method": t.method,
        "eigensolver_iterations": n_iter,
        "stopping": training["stopping"],
        "fit_seconds": round(fit_seconds, 2),
        "passes_over_x": passes["passes"],
        "warnings": warnings_,
    }
