"""λ selection on the validation concepts: one Cr5 fit per λ over one corpus backend.

What is shared across λ (the maths allows it): the training-row selection, the corpus
backend (X loaded to the driver, or cached on the executors, once), the vocabulary/IDF
maps, the evaluation pool (documents, candidate sample), and (``evaluate.lambda_warm_start``)
the eigensolver's start. C does not depend on λ, so the grid is fitted as a **regularisation
path**, from the largest λ down: each fit starts from the previous fit's r + oversampling
leading Ritz vectors (applied b columns at a time, every residual direction kept, then on to
the same residual rule as any fit), their B⁻¹C solves as initial CG guesses and the previous
w = B⁻¹μ as the w solve's, instead of the surrogate warm start
(:class:`~pipeline.linalg.cr5.PathStart`). What is not shared: the preconditioner (rebuilt
per λ) and everything else that depends on λ through ``B = XᵀX + λI``. Without the path,
when the model the ``train`` stage wrote was fitted with the same settings and one of the
grid's λ, it is used for that λ instead of refitting (on the path every λ is fitted, so that
all its models come from one path).

Each λ's model is written as a regular model directory (``<dir>/lam=<λ>``) so the
evaluation embeds through exactly the public path (:meth:`Cr5Model.embed`) and the chosen
model stays available for reuse.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from pipeline.config import Config
from pipeline.io.locations import same_location
from pipeline.model.format import read_model_json

log = logging.getLogger(__name__)

__all__ = ["lambda_model_dir", "reusable_model", "select_lambda"]


def lambda_model_dir(cfg: Config, models_dir: str | None, lam: float) -> str:
    base = models_dir or (cfg.paths.root.rstrip("/") + "/lambda_models")
    return f"{base}/lam={lam:g}"


def reusable_model(cfg: Config, lam: float) -> str | None:
    """``paths.model`` when it was fitted with ``lam`` and the current train/features settings."""
    path = cfg.paths.dataset("model")
    try:
        meta = read_model_json(path)
    except Exception:  # absent or unreadable: just refit
        return None
    t = cfg.train
    params = meta.get("solver", {}).get("params", {})
    same = (
        float(meta.get("lam", -1)) == float(lam)
        and {k: v for k, v in params.items() if k != "lam"}
        == {k: v for k, v in t.solver_params().items() if k != "lam"}
        and meta.get("preprocessing", {}).get("features") == cfg.to_dict()["features"]
        and same_location(
            meta.get("training", {}).get("tfidf"), cfg.paths.dataset("tfidf"), cfg.paths.root
        )
        and meta.get("training", {}).get("selection", {}).get("setup") == t.setup
        and list(meta.get("training", {}).get("selection", {}).get("pair", [])) == list(t.pair)
    )
    return path if same else None


def select_lambda(
    spark: SparkSession,
    cfg: Config,
    grid: list[float],
    *,
    models_dir: str | None,
    score_fn: Callable[[str, float], tuple[float, dict[str, Any]]],
    warm_start: bool = False,
) -> dict[str, Any]:
    """Fit one model per λ, score each with ``score_fn(model_path, lam)``, keep the best.

    Parameters
    ----------
    grid : list of float
        λ values; ties keep the first in this order (the path fits them largest first).
    score_fn : callable
        ``(model_path, lam) -> (score, details)``; higher is better.
    warm_start : bool
        ``evaluate.lambda_warm_start``: fit the grid as a path from the largest λ down,
        each fit started from the previous one's leading Ritz vectors.

    Returns
    -------
    dict
        ``chosen_lam``, ``chosen_model``, ``curve`` (one entry per λ: lam, score, model,
        fit_seconds, reused, details) and ``backend_load_seconds``.
    """
    from pipeline.stages import train as training

    t = cfg.train
    entries: dict[int, dict[str, Any]] = {}
    data: training.TrainingData | None = None
    order = list(range(len(grid)))
    if warm_start:  # the path: largest λ first
        order.sort(key=lambda i: -float(grid[i]))
    try:
        for i in order:
            lam = float(grid[i])
            path = None if warm_start else reusable_model(cfg, lam)
            fit_seconds = 0.0
            reused = path is not None
            if path is None:
                if data is None:
                    data = training.load_training_data(spark, cfg)
                    data.chain_starts = warm_start
                path = lambda_model_dir(cfg, models_dir, lam)
                sub = dataclasses.replace(
                    cfg,
                    train=dataclasses.replace(t, method="cr5", lam=lam, checkpoint_dir=""),
                    paths=dataclasses.replace(cfg.paths, model=path),
                )
                fit_seconds = training.run(spark, sub, data)["fit_seconds"]
            score, details = score_fn(path, lam)
            log.info("lambda %g: validation score %.4f (fit %.1f s)", lam, score, fit_seconds)
            entries[i] = {
                "lam": lam,
                "score": float(score),
                "model": str(Path(path)),
                "fit_seconds": round(fit_seconds, 2),
                "reused_train_model": reused,
                "details": details,
            }
    finally:
        if data is not None:
            data.close()
    curve = [entries[i] for i in range(len(grid))]
    best = max(range(len(curve)), key=lambda i: (curve[i]["score"], -i))
    return {
        "chosen_lam": curve[best]["lam"],
        "chosen_model": curve[best]["model"],
        "curve": curve,
        "backend_load_seconds": round(data.load_seconds, 2) if data is not None else 0.0,
        "fit_order": [grid[i] for i in order],
        "path": bool(warm_start),
    }
