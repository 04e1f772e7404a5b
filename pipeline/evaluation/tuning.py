"""Tuning a method on the validation concepts: the parameter its spec's ``tuned_by`` names.

The evaluation and the ``train`` stage choose a method's regularisation the same way, here:

- ``γ`` (CCA, OPCA, S2Net's OPCA start): one model per value of ``evaluate.gamma_grid``
  (:func:`fit_gamma_grid`), each scored on the split stage's validation concepts with
  ``evaluate.selection_metric`` / ``selection_measure`` (:func:`~pipeline.evaluation.protocol.
  validation_score`), the best kept (ties: the first);
- ``λ`` (Cr5): :func:`~pipeline.evaluation.lambda_selection.select_lambda` over
  ``evaluate.lambda_grid``.

:func:`train_tuned` is the ``train`` stage's fit: it decides with :func:`tuning_plan`
whether ``train.tune`` asks for a choice, fits the candidates on one loading of the training
rows, and publishes the chosen one at ``paths.model`` with a ``tuning`` section in its
``model.json`` (the parameter, its configuration key, the grid, the validation curve, the
choice). The same rows, pool, grid and scoring as the evaluate stage's comparison give the
same choice and the same arrays (tests/test_evaluation_stage.py).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from pipeline.config import Config, EvaluateConfig, TrainConfig
from pipeline.errors import ConfigError
from pipeline.evaluation.engines import open_engine
from pipeline.evaluation.lambda_selection import select_lambda
from pipeline.evaluation.protocol import Direction, directions_of, plan, validation_score
from pipeline.io.datasets import read_dataset
from pipeline.io.locations import same_location
from pipeline.io.schemas import SPLITS
from pipeline.io.storage import locate
from pipeline.methods.registry import find_method, get_method
from pipeline.model.format import republish_model
from pipeline.training import service as training

log = logging.getLogger(__name__)

__all__ = [
    "Context",
    "TuningPlan",
    "fit_gamma_grid",
    "method_gamma",
    "train_tuned",
    "tuning_plan",
    "validation_context",
]


@dataclass
class Context:
    """What every step of one evaluation (or one tuning) shares: the session, the
    configuration, the evaluate settings, the engine over the pool, the evaluated directions
    and the split rows of their pairs."""

    spark: SparkSession
    cfg: Config
    e: EvaluateConfig
    engine: Any
    directions: list[Direction]
    splits_rows: list


@dataclass(frozen=True)
class TuningPlan:
    """What the ``train`` stage chooses: ``parameter`` (``"lam"`` or ``"gamma"``) over
    ``grid``, or nothing (``parameter`` None) and why (``reason``, logged)."""

    parameter: str | None
    grid: tuple[float, ...] = ()
    reason: str = ""


def method_gamma(t: TrainConfig, method: str) -> float | None:
    """``method``'s own γ (``train.<method>.gamma``: CCA, OPCA, S2Net's OPCA start); None for
    a method without one, or a name no registered method has."""
    if find_method(method) is None:
        return None
    gamma = getattr(t.params_of(method), "gamma", None)
    return None if gamma is None else float(gamma)


def _has_validation(cfg: Config) -> bool:
    """Whether the training rows leave out this run's splits (whose validation concepts
    then score the candidates)."""
    return same_location(cfg.heldout_path(), cfg.paths.dataset("splits"), cfg.paths.root)


def tuning_plan(cfg: Config) -> TuningPlan:
    """What ``train.tune`` asks of the train stage for ``train.method``.

    ``auto``: a method tuned by γ is tuned when ``evaluate.gamma_grid`` has two or more values
    and the training rows leave out the split stage's concepts; λ is not (the evaluate stage
    chooses Cr5's λ on the same grid). ``always``: the spec's parameter is tuned, or a
    :class:`~pipeline.errors.ConfigError` says what is missing. ``never``: nothing is.
    """
    t, e = cfg.train, cfg.evaluate
    tuned_by = get_method(t.method).tuned_by
    if t.tune == "never" or tuned_by is None:
        return TuningPlan(None, reason=f"train.tune={t.tune}, {t.method} tuned by {tuned_by}")
    grid_key = "evaluate.lambda_grid" if tuned_by == "lam" else "evaluate.gamma_grid"
    grid = tuple(float(x) for x in (e.lambda_grid if tuned_by == "lam" else e.gamma_grid))
    missing = []
    if len(grid) < 2:
        missing.append(f"{grid_key} has {len(grid)} value(s), it needs two or more")
    if not _has_validation(cfg):
        missing.append(
            "the training rows do not leave out the split stage's concepts "
            "(features.heldout_concepts: splits), whose validation concepts score the grid"
        )
    if t.tune == "always":
        if missing:
            raise ConfigError(
                f"train.tune=always tunes {t.method}'s {tuned_by}, but {'; '.join(missing)}. "
                "Fix: set them, or train.tune=auto/never"
            )
        return TuningPlan(tuned_by, grid)
    if tuned_by == "lam":
        return TuningPlan(None, reason="train.tune=auto leaves λ to the evaluate stage")
    if missing:
        return TuningPlan(None, reason="; ".join(missing))
    return TuningPlan(tuned_by, grid)


@contextmanager
def validation_context(spark: SparkSession, cfg: Config, e: EvaluateConfig) -> Iterator[Context]:
    """The engine over the evaluation's pool for the training languages' split pairs (as
    :func:`~pipeline.evaluation.experiment.run_evaluation` opens it before any model
    exists), closed after the ``with`` block."""
    splits = read_dataset(spark, SPLITS, cfg.paths.dataset("splits"))
    _setup, _langs, pairs = plan(spark, cfg, e, splits, True)
    in_pairs = splits.filter(F.col("pair").isin(pairs))
    langs = sorted({lang for p in pairs for lang in p.split("-")})
    engine, _sizes = open_engine(spark, cfg, e, langs, in_pairs.select("concept_id"))
    try:
        yield Context(spark, cfg, e, engine, directions_of(pairs), in_pairs.collect())
    finally:
        if hasattr(engine, "close"):
            engine.close()


def fit_gamma_grid(
    ctx: Context,
    method: str,
    data: training.TrainingData,
    *,
    gammas: list[float | None],
    base: str,
    r: int,
    lam: float,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Fit ``method`` once per γ of ``gammas`` (None: a method without γ, at its settings)
    into ``base`` (``base/gamma=<γ>`` when there are several), score each on the validation
    concepts when there are several; the best point (ties and a single γ, unscored: the
    first) and the curve. A point is ``gamma``, ``model``, ``fit_seconds`` and, scored,
    ``score``."""
    curve: list[dict[str, Any]] = []
    for gamma in gammas:
        path = base.rstrip("/")
        if len(gammas) > 1:
            path += f"/gamma={gamma:g}"
        train = dataclasses.replace(ctx.cfg.train, method=method, r=r, lam=lam)
        if gamma is not None:  # the method's own γ (train.<method>.gamma) at this point
            train = train.with_params(method, gamma=gamma)
        sub = dataclasses.replace(
            ctx.cfg, train=train, paths=dataclasses.replace(ctx.cfg.paths, model=path)
        )
        shown = "" if gamma is None else f", γ={gamma:g}"
        log.info("training %s (r=%d%s) into %s", method, r, shown, path)
        trained = training.train_model(ctx.spark, sub, data)
        point: dict[str, Any] = {"gamma": gamma, "model": path}
        point["fit_seconds"] = trained["fit_seconds"]
        if len(gammas) > 1:
            ctx.engine.use_model(path)
            point["score"], _ = validation_score(ctx.engine, ctx.directions, ctx.splits_rows, ctx.e)
            log.info(
                "%s γ=%g validation %s %.4f", method, gamma, ctx.e.selection_metric, point["score"]
            )
        curve.append(point)
    best = max(curve, key=lambda c: c.get("score", 0.0))
    return best, curve


def _candidates_dir(cfg: Config) -> str:
    return cfg.paths.root.rstrip("/") + f"/tuning/{cfg.train.method}"


def train_tuned(spark: SparkSession, cfg: Config) -> dict[str, Any]:
    """The ``train`` stage: ``train.method`` fitted at its configured parameters, or tuned
    on the validation concepts as :func:`tuning_plan` decides; the summary (with ``tuning``:
    the parameter, the grid, the curve and the choice, also in ``model.json``)."""
    choice = tuning_plan(cfg)
    if choice.parameter is None:
        if choice.reason:
            log.info("train: %s fitted as configured (%s)", cfg.train.method, choice.reason)
        return training.train_model(spark, cfg)
    t, e = cfg.train, cfg.evaluate
    base = _candidates_dir(cfg)
    t0 = time.perf_counter()
    with validation_context(spark, cfg, e) as ctx:
        if choice.parameter == "gamma":
            data = training.load_training_data(spark, cfg)
            try:
                best, curve = fit_gamma_grid(
                    ctx, t.method, data, gammas=list(choice.grid), base=base, r=t.r, lam=t.lam
                )
            finally:
                data.close()
            chosen, key = best["gamma"], f"train.{t.method}.gamma"
        else:

            def score_fn(model_path: str, lam: float) -> tuple[float, dict[str, Any]]:
                ctx.engine.use_model(model_path)
                score, _ = validation_score(ctx.engine, ctx.directions, ctx.splits_rows, e)
                return score, {}

            selection = select_lambda(
                spark,
                cfg,
                list(choice.grid),
                models_dir=base,
                score_fn=score_fn,
                warm_start=e.lambda_warm_start,
            )
            chosen, key = selection["chosen_lam"], "train.lam"
            curve = [
                {"lam": c["lam"], "model": c["model"], "score": c["score"]}
                for c in selection["curve"]
            ]
            best = next(c for c in curve if c["model"] == selection["chosen_model"])
    record = {
        "parameter": choice.parameter,
        "key": key,
        "grid": list(choice.grid),
        "metric": e.selection_metric,
        "measure": e.selection_measure,
        "curve": [{k: v for k, v in c.items() if k != "model"} for c in curve],
        "chosen": chosen,
        "seconds": round(time.perf_counter() - t0, 2),
    }
    model_path = cfg.paths.dataset("model")
    meta = republish_model(best["model"], model_path, {"tuning": record})
    files, where = locate(base)
    if files.exists(where):  # the candidates were scratch: the chosen one is published
        files.delete(where)
    log.info("train: %s %s=%g chosen on validation, saved at %s", t.method, key, chosen, model_path)
    return {
        "path": model_path,
        "method": t.method,
        "languages": meta["languages"],
        "r": int(meta["r"]),
        "lam": float(meta["lam"]),
        "setup": t.setup,
        "tuning": record,
        "fit_seconds": meta.get("training", {}).get("fit_seconds"),
        "warnings": meta.get("warnings", []),
    }
