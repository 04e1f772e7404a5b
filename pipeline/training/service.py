"""Train ``train.method`` and write the model directory: the service behind the ``train``
stage, the λ selection and the evaluation's method comparison.

:func:`train_model` runs the phases in order: check the training rows (one language, rank),
fit (the method's own fit, looked up by :mod:`pipeline.training.fit`), build the
per-language maps with their vocabularies, record how the model was trained
(``model.json``'s ``training`` section) and save it. What the method is (its rank bound,
checkpoints, model kind, similarity) is its spec's (:mod:`pipeline.methods.registry`).
"""

from __future__ import annotations

import dataclasses
import logging
import platform
import time
from typing import Any

import numpy as np
import pyspark
import scipy
import scipy.sparse as sp
from pyspark.sql import SparkSession

from pipeline import __version__
from pipeline.config import Config, FeaturesConfig, PathsConfig, TextConfig, TrainConfig
from pipeline.errors import ConfigError, InputDataError
from pipeline.io.locations import to_manifest
from pipeline.io.storage import locate
from pipeline.linalg.backend import pass_delta, passes_by_phase
from pipeline.linalg.params import EXECUTION, STOPPING, Cr5Params
from pipeline.methods.fitted import FittedModel
from pipeline.methods.registry import get_method
from pipeline.model.encoder_model import SUBWORDS
from pipeline.model.format import LanguageMap, save_encoder_model, save_model
from pipeline.neural.params import NeuralLoopParams, TlaserParams
from pipeline.preflight import check_rank
from pipeline.training.fit import fit_method
from pipeline.training.rows import TrainingData, load_training_data

__all__ = [
    "TrainingData",
    "checkpoint_dir",
    "fit_and_save",
    "load_training_data",
    "model_preprocessing",
    "train_model",
    "training_warnings",
]

log = logging.getLogger(__name__)


def train_model(
    spark: SparkSession, cfg: Config, data: TrainingData | None = None
) -> dict[str, Any]:
    """Train ``train.method`` and write the model to ``paths.model``; return the summary.

    ``data`` (from :func:`~pipeline.training.rows.load_training_data` with the same train,
    features and paths settings) lets a caller fit several models on one loaded backend;
    without it the rows are loaded here and released afterwards.

    The configuration stops here: what lies below takes the sections it reads.
    """
    sections = {"text": cfg.text, "features": cfg.features}
    if data is not None:
        return fit_and_save(cfg.train, cfg.paths, data, **sections)
    data = load_training_data(spark, cfg)
    try:
        return fit_and_save(cfg.train, cfg.paths, data, **sections)
    finally:
        data.close()


def fit_and_save(
    t: TrainConfig,
    paths: PathsConfig,
    data: TrainingData,
    *,
    text: TextConfig,
    features: FeaturesConfig,
) -> dict[str, Any]:
    """Fit ``t.method`` on ``data``, save the model at ``paths.model``; the summary.

    ``text`` and ``features``: the settings the rows were made with, recorded as the model's
    preprocessing (:func:`model_preprocessing`) and counted in its checkpoint directory
    (:func:`checkpoint_dir`)."""
    spec = get_method(t.method)
    backend = data.backend
    passes0 = backend.pass_counts
    languages = list(backend.languages)
    _log_start(t, backend, languages)
    warnings_ = training_warnings(t, languages)
    if spec.rank_bound is not None:
        check_rank(
            t.r,
            backend.n_concepts,
            sum(backend.n_terms(lang) for lang in languages),
            where=f"the training rows (train.setup={t.setup}, languages {languages})",
            bound=spec.rank_bound,
        )
    ckpt = (
        checkpoint_dir(t, paths, text, features, data.solver_options) if spec.checkpoints else None
    )
    t0 = time.perf_counter()
    fitted = fit_method(t, data, ckpt)
    fit_seconds = time.perf_counter() - t0
    encoder = spec.model_kind == "encoder"
    # r: the embedding dimension (|union vocabulary| for untranslated).
    own = t.params_of()
    r_out = own.dim if encoder else int(next(iter(fitted.components.values())).shape[1])
    maps = {} if encoder else _language_maps(fitted, data, languages)
    passes = pass_delta(passes0, backend.pass_counts)
    training = _training_record(t, paths, data, fitted, fit_seconds, passes)
    meta = {
        "method": t.method,
        "r": r_out,
        "lam": t.lam,
        "preprocessing": model_preprocessing(text, features),
        "solver": {"params": t.solver_params(), "history": fitted.history},
        "eigenvalues": [float(x) for x in fitted.eigenvalues],
        "training": training,
        "versions": _versions(),
        "warnings": warnings_,
        "similarity": spec.similarity,
    }
    if fitted.folding_in is not None:
        meta["folding_in"] = fitted.folding_in
    model_path = paths.dataset("model")
    if encoder:
        proto = fitted.shared[SUBWORDS]
        meta["languages"] = languages
        meta["encoder"] = {
            "sizes": {**_encoder_sizes(own), "vocab": int(fitted.history["vocabulary_size"])},
            "threads": own.threads,
        }
        save_encoder_model(model_path, meta, fitted.components, {SUBWORDS: proto.tobytes()})
    else:
        save_model(model_path, maps, meta, shared=fitted.shared)
    if ckpt:  # the model is the durable result now
        files, where = locate(ckpt)
        if files.exists(where):
            files.delete(where)
    eig = fitted.eigenvalues
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
        "eigensolver_iterations": fitted.n_iter,
        "stopping": training["stopping"],
        "fit_seconds": round(fit_seconds, 2),
        "passes_over_x": passes["passes"],
        "passes_by_phase": passes_by_phase(passes),
        "warnings": warnings_,
    }


def _encoder_sizes(p: TlaserParams) -> dict[str, int]:
    """An encoder method's sizes from its section (``train.tlaser``, ``train.ctlaser``)."""
    return {
        "dim": p.dim,
        "heads": p.heads,
        "layers": p.layers,
        "ff": p.ff,
        "max_tokens": p.max_tokens,
    }


def training_warnings(t: TrainConfig, languages: list[str]) -> list[str]:
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
    if t.on_single_language == "error":
        raise InputDataError(msg + ", or set train.on_single_language=warn to allow it.")
    msg += " (train.on_single_language=error refuses such runs)."
    log.warning("%s", msg)
    return [msg]


#: Train settings a rerun may change and still resume the fit's checkpoints: when the
#: eigensolver stops and how the work is spread and saved (the solver's STOPPING and
#: EXECUTION roles, which its checkpoint's own fingerprint leaves out too), and where the
#: checkpoints go. A stopped r = 300 fit can be resumed with a larger train.eig_maxiter, a
#: looser train.eig_rtol or train.stop_rule=validation.
RESUMABLE_CHANGES = (*Cr5Params.names(STOPPING, EXECUTION), "checkpoint_dir")


def _logging_only(t: TrainConfig) -> list[str]:
    """The method sections' keys that change only what a run logs, as ``section.key``: a
    neural loop's progress interval does not change its steps, so a rerun with another one
    resumes its checkpoints."""
    return [
        f"{name}.progress_seconds"
        for name, p in t.method_params.items()
        if isinstance(p, NeuralLoopParams)
    ]


def checkpoint_dir(
    t: TrainConfig,
    paths: PathsConfig,
    text: TextConfig,
    features: FeaturesConfig,
    planned: dict[str, Any] | None = None,
) -> str | None:
    """Where the solver checkpoints: one directory per training problem (the train, features
    and text settings but :data:`RESUMABLE_CHANGES`), with the eigensolver settings the
    memory plan chose (``planned``, TrainingData.solver_options) counted as settings: a
    rerun that plans the same resumes, one that plans another basis (another machine's
    memory) starts its own directory instead of meeting a checkpoint of a different
    problem. ``t.checkpoint_dir`` (default ``<paths.root>/checkpoints``) holds them; ``""``:
    no checkpoints (None)."""
    if t.checkpoint_dir == "":
        return None
    if planned:
        t = dataclasses.replace(t, **planned)
    base = t.checkpoint_dir or (paths.root.rstrip("/") + "/checkpoints")
    # the configuration's own fingerprint of the three sections (the others do not count)
    problem = Config(train=t, features=features, text=text).fingerprint(
        "train", "features", "text", leave_out={"train": (*RESUMABLE_CHANGES, *_logging_only(t))}
    )
    return f"{base}/train-{problem}"


def model_preprocessing(text: TextConfig, features: FeaturesConfig) -> dict[str, Any]:
    """``model.json``'s preprocessing section: what inference must repeat."""
    return {
        "text": dataclasses.asdict(text),
        "features": dataclasses.asdict(features),
        "idf": "ln(N_l / df)",
        "row_norm": "l2",
        "center_at_inference": False,
    }


def _log_start(t: TrainConfig, backend: Any, languages: list[str]) -> None:
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


def _language_maps(
    fitted: FittedModel, data: TrainingData, languages: list[str]
) -> dict[str, LanguageMap]:
    """Each language's vocabulary, IDF and float32 map Φ_lᵀ; ConfigError when a vocabulary
    does not match the rows' term count."""
    backend, vocab = data.backend, data.vocabulary
    maps = {}
    for lang in languages:
        v = vocab[lang]
        if len(v["terms"]) != backend.n_terms(lang):
            raise ConfigError(
                f"vocabulary of {lang!r} has {len(v['terms'])} terms but the tfidf rows use "
                f"{backend.n_terms(lang)}; rerun the vocabulary and tfidf stages together"
            )
        phi = fitted.components[lang]
        maps[lang] = LanguageMap(
            terms=v["terms"],
            idf=v["idf"],
            df=v["df"],
            phi=phi.astype(np.float32) if sp.issparse(phi) else np.asarray(phi, dtype=np.float32),
            mean=fitted.means.get(lang),
            offset=fitted.offsets.get(lang),
        )
    return maps


def _training_record(
    t: TrainConfig,
    paths: PathsConfig,
    data: TrainingData,
    fitted: FittedModel,
    fit_seconds: float,
    passes: dict[str, Any],
) -> dict[str, Any]:
    """``model.json``'s ``training`` section: the rows, the backend, the cost, the start."""
    backend = data.backend
    record = {
        "tfidf": data.source or to_manifest(paths.dataset("tfidf"), paths.root),
        "selection": data.selection,
        "documents": {lang: backend.n_docs(lang) for lang in backend.languages},
        "concepts": backend.n_concepts,
        "backend": t.backend,
        "dtype": t.dtype,
        "load_seconds": round(data.load_seconds, 3),
        "fit_seconds": round(fit_seconds, 3),
        "passes_over_x": passes,
        "eigensolver_start": fitted.started_from,
        "path_from_lam": fitted.path_from,
        "path_fits": fitted.path_fits,
        "stopping": _stopping_summary(fitted.history),
    }
    placement = getattr(backend, "placement", None)
    if placement is not None:
        record["placement"] = placement
    if data.solver_options:  # the memory plan's choices (pipeline.memory.plan_train)
        record["planned_solver_settings"] = dict(data.solver_options)
    return record


def _stopping_summary(history: dict[str, Any]) -> dict[str, Any] | None:
    """Which rule ended the eigensolver and which iteration's solution the model holds (the
    per-iteration objective, σ and validation P@1 are in ``solver.history.stopping``)."""
    stopping = history.get("stopping")
    if not stopping:
        return None
    keys = ("rule", "stopped_by", "returned_iteration", "best_iteration", "best_validation_p_at_1")
    return {k: stopping[k] for k in keys if k in stopping}


def _versions() -> dict[str, str]:
    """The library versions the model was trained with."""
    return {
        "pipeline": __version__,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "pyspark": pyspark.__version__,
    }
