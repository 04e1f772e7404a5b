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

A path resumes: after each fit its :class:`~pipeline.linalg.cr5.PathStart` is checkpointed
(``<dir>/.path-<hash>``, the hash of the train/features/text settings, the λ order and the
write tokens of the tfidf, vocabulary and held-out splits datasets), so a rerun after a
failure reuses the models the path had finished and continues from the last one's start
instead of refitting the grid; a rerun of a finished path refits nothing. Within one λ's fit
there are no checkpoints (a failed fit restarts from the previous λ's start).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from pyspark.sql import SparkSession

from pipeline.config import Config
from pipeline.errors import DatasetNotFoundError
from pipeline.io.checkpoints import CheckpointDirectory
from pipeline.io.datasets import read_manifest
from pipeline.io.locations import same_location
from pipeline.io.schemas import SPLITS, TFIDF, VOCABULARY
from pipeline.io.storage import locate, remote_storage
from pipeline.linalg.checkpoint import fingerprint_hash
from pipeline.model.format import read_model_json
from pipeline.training import service as training

log = logging.getLogger(__name__)

__all__ = ["lambda_model_dir", "reusable_model", "select_lambda"]


def lambda_model_dir(cfg: Config, models_dir: str | None, lam: float) -> str:
    base = models_dir or (cfg.paths.root.rstrip("/") + "/lambda_models")
    return f"{base}/lam={lam:g}"


def reusable_model(cfg: Config, lam: float, path: str | None = None) -> str | None:
    """The model at ``path`` (default ``paths.model``) when it was fitted with ``lam`` and the
    current train/features settings, else None."""
    path = path or cfg.paths.dataset("model")
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


def _data_tokens(spark: SparkSession, cfg: Config) -> dict[str, Any]:
    """Write tokens (and Delta versions) of the datasets a fit reads: a rewritten input
    changes them, so a path checkpoint of the old data is not resumed."""
    specs = [(TFIDF, cfg.paths.dataset("tfidf")), (VOCABULARY, cfg.paths.dataset("vocabulary"))]
    if cfg.heldout_path():
        specs.append((SPLITS, cfg.heldout_path()))
    tokens: dict[str, Any] = {}
    for spec, path in specs:
        try:
            manifest = read_manifest(spark, spec, path)
        except DatasetNotFoundError:
            if spec is not SPLITS:
                raise
            # features.heldout_concepts may name any table of concept ids, without a
            # manifest: its location is all there is to compare
            manifest = {}
        tokens[spec.name] = [path, manifest.get("write_token"), manifest.get("delta_version")]
    return tokens


class _PathCheckpoint:
    """The latest :class:`~pipeline.linalg.cr5.PathStart` of a λ path and the models it has
    finished (see the module docstring)."""

    def __init__(self, spark: SparkSession, cfg: Config, base: str, lams: list[float]) -> None:
        fingerprint = {
            "settings": cfg.fingerprint("train", "features", "text"),
            "order": [float(lam) for lam in lams],
            "data": _data_tokens(spark, cfg),
        }
        name = f".path-{fingerprint_hash(fingerprint)[:16]}"
        # one path's checkpoint per models directory: other settings would overwrite the
        # same lam=<λ> models anyway, so an older path's checkpoint can no longer resume
        files, where = locate(base, spark)
        for old in files.list_names(where):
            if old.startswith(".path-") and old != name:
                files.delete(f"{where}/{old}")
        self.store = CheckpointDirectory(
            f"{base}/{name}", fingerprint, files=remote_storage(base, spark)
        )

    def finished(self) -> tuple[list[str], Any]:
        """The digests of the models the path finished, in path order, and the PathStart
        left by the last of them (None when none finished or the path is complete)."""
        from pipeline.linalg.cr5 import PathStart

        saved = self.store.load("path")
        if saved is None:
            return [], None
        arrays, meta = saved
        start = None
        if "vectors" in arrays:
            start = PathStart(
                lam=float(meta["lam"]),
                vectors=arrays["vectors"],
                solves=arrays.get("solves"),
                w=arrays.get("w"),
            )
        return list(meta["models"]), start

    def save(self, models: list[str], start: Any, *, last: bool) -> None:
        """Record the finished models and (unless ``last``: nothing follows) their start."""
        arrays = {}
        if not last:
            parts = {"vectors": start.vectors, "solves": start.solves, "w": start.w}
            arrays = {key: value for key, value in parts.items() if value is not None}
        self.store.save("path", arrays, {"models": models, "lam": float(start.lam)})


def _resumable(
    cfg: Config,
    grid: list[float],
    order: list[int],
    models_dir: str | None,
    finished: list[str],
    start: Any,
) -> tuple[list[str], Any]:
    """The finished prefix of a path that can be reused, and the start to continue from:
    all of it when every model is still the one the checkpoint recorded, else nothing
    (a later fit needs the start its predecessor left, and only the last one is kept)."""
    for digest, i in zip(finished, order, strict=False):
        lam = float(grid[i])
        model = reusable_model(cfg, lam, lambda_model_dir(cfg, models_dir, lam))
        if model is None or model_digest(model) != digest:
            log.info("lambda path: the model of lambda %g changed since the checkpoint; refit", lam)
            return [], None
    if len(finished) < len(order) and start is None:
        return [], None
    return finished, start


def model_digest(path: str) -> str:
    """Identifies one written model: a hash of its model.json (λ, eigenvalues, history)."""
    return fingerprint_hash(read_model_json(path))[:16]


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
        fit_seconds, reused_train_model, resumed (finished by an earlier run of the same
        path), details), ``backend_load_seconds``, ``fit_order`` and ``path``.
    """
    t = cfg.train
    entries: dict[int, dict[str, Any]] = {}
    data: training.TrainingData | None = None
    order = list(range(len(grid)))
    if warm_start:  # the path: largest λ first
        order.sort(key=lambda i: -float(grid[i]))
    ckpt = None
    done: list[str] = []  # digests of the path's models so far, in path order
    resume_start: Any = None
    if warm_start:
        base = models_dir or (cfg.paths.root.rstrip("/") + "/lambda_models")
        ckpt = _PathCheckpoint(spark, cfg, base, [float(grid[i]) for i in order])
        done, resume_start = _resumable(cfg, grid, order, models_dir, *ckpt.finished())
    n_resumed = len(done)
    try:
        for k, i in enumerate(order):
            lam = float(grid[i])
            path = None if warm_start else reusable_model(cfg, lam)
            fit_seconds = 0.0
            reused = path is not None
            resumed = k < n_resumed
            if resumed:
                path = lambda_model_dir(cfg, models_dir, lam)
                log.info("lambda %g: finished by an earlier run of this path; reused", lam)
            if path is None:
                if data is None:
                    data = training.load_training_data(spark, cfg)
                    data.chain_starts = warm_start
                    # resumed λs were skipped: start from the last one's checkpointed start
                    data.path_start = resume_start if n_resumed else None
                path = lambda_model_dir(cfg, models_dir, lam)
                sub = dataclasses.replace(
                    cfg,
                    train=dataclasses.replace(t, method="cr5", lam=lam, checkpoint_dir=""),
                    paths=dataclasses.replace(cfg.paths, model=path),
                )
                fit_seconds = training.train_model(spark, sub, data)["fit_seconds"]
                if ckpt is not None:
                    done = [*done, model_digest(path)]
                    ckpt.save(done, data.path_start, last=k == len(order) - 1)
            score, details = score_fn(path, lam)
            log.info("lambda %g: validation score %.4f (fit %.1f s)", lam, score, fit_seconds)
            entries[i] = {
                "lam": lam,
                "score": float(score),
                "model": str(path),
                "fit_seconds": round(fit_seconds, 2),
                "reused_train_model": reused,
                "resumed": resumed,
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
