"""λ selection on the validation concepts: one Cr5 fit per λ over one corpus backend.

What is shared across λ (the maths allows it): the training-row selection, the corpus
backend (X loaded to the driver, or cached on the executors, once), the vocabulary/IDF
maps and the evaluation pool (documents, candidate sample). What is not: everything that
depends on λ through ``B = XᵀX + λI`` (the Woodbury vector, the eigenvectors, Φ). When the
model the ``train`` stage wrote was fitted with the same settings and one of the grid's λ,
it is used for that λ instead of refitting.

Each λ's model is written as a regular model directory (``<dir>/lam=<λ>``) so the
evaluation embeds through exactly the public path (:meth:`Cr5Model.embed`) and the chosen
model stays available for reuse.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from pipeline.config import Config
from pipeline.model.format import LanguageMap, read_model_json, save_model

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
        and meta.get("training", {}).get("tfidf") == cfg.paths.dataset("tfidf")
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
) -> dict[str, Any]:
    """Fit one model per λ, score each with ``score_fn(model_path, lam)``, keep the best.

    Parameters
    ----------
    grid : list of float
        λ values, evaluated in the given order; ties keep the first.
    score_fn : callable
        ``(model_path, lam) -> (score, details)``; higher is better.

    Returns
    -------
    dict
        ``chosen_lam``, ``chosen_model``, ``curve`` (one entry per λ: lam, score, model,
        fit_seconds, reused, details) and ``backend_load_seconds``.
    """
    from pipeline.linalg.backends import make_backend
    from pipeline.linalg.cr5 import Cr5Solver
    from pipeline.training import _versions, _vocabulary_maps, select_training_rows

    t = cfg.train
    curve: list[dict[str, Any]] = []
    backend = None
    vocab = None
    selection: dict[str, Any] = {}
    load_seconds = 0.0
    for lam in grid:
        path = reusable_model(cfg, lam)
        fit_seconds = 0.0
        reused = path is not None
        if path is None:
            if backend is None:
                t0 = time.perf_counter()
                rows_path, selection = select_training_rows(spark, cfg, cfg.paths.dataset("tfidf"))
                backend = make_backend(
                    t.backend, spark, rows_path, dtype=t.dtype, **t.backend_options()
                )
                vocab = _vocabulary_maps(spark, cfg, list(backend.languages))
                load_seconds = time.perf_counter() - t0
            params = {**t.solver_params(), "lam": float(lam)}
            solver = Cr5Solver(**params, checkpoint_dir=None)
            t0 = time.perf_counter()
            solver.fit(backend)
            fit_seconds = time.perf_counter() - t0
            languages = list(backend.languages)
            maps = {
                lang: LanguageMap(
                    terms=vocab[lang]["terms"],
                    idf=vocab[lang]["idf"],
                    df=vocab[lang]["df"],
                    phi=solver.components_[lang],
                    mean=solver.mean_[lang],
                )
                for lang in languages
            }
            meta = {
                "method": "cr5",
                "r": t.r,
                "lam": float(lam),
                "preprocessing": {
                    "text": cfg.to_dict()["text"],
                    "features": cfg.to_dict()["features"],
                    "idf": "ln(N_l / df)",
                    "row_norm": "l2",
                    "center_at_inference": False,
                },
                "solver": {"params": params, "history": solver.history_},
                "eigenvalues": [float(x) for x in solver.eigenvalues_],
                "training": {
                    "tfidf": cfg.paths.dataset("tfidf"),
                    "selection": selection,
                    "documents": {lang: backend.n_docs(lang) for lang in languages},
                    "concepts": backend.n_concepts,
                    "backend": t.backend,
                    "dtype": t.dtype,
                    "fit_seconds": round(fit_seconds, 3),
                    "lambda_selection": True,
                },
                "versions": _versions(),
            }
            path = lambda_model_dir(cfg, models_dir, lam)
            save_model(path, maps, meta)
        score, details = score_fn(path, lam)
        log.info("lambda %g: validation score %.4f (fit %.1f s)", lam, score, fit_seconds)
        curve.append(
            {
                "lam": float(lam),
                "score": float(score),
                "model": str(Path(path)),
                "fit_seconds": round(fit_seconds, 2),
                "reused_train_model": reused,
                "details": details,
            }
        )
    if backend is not None and hasattr(backend, "close"):
        backend.close()
    best = max(range(len(curve)), key=lambda i: (curve[i]["score"], -i))
    return {
        "chosen_lam": curve[best]["lam"],
        "chosen_model": curve[best]["model"],
        "curve": curve,
        "backend_load_seconds": round(load_seconds, 2),
    }
