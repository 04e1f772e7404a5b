"""XCNN's fit (``train.method=xcnn``): per-language maps H_l = tanh(W_l + b_l) trained on
parallel pairs of TF-IDF rows (:class:`pipeline.neural.xcnn.XcnnTask`), the epoch chosen on
the validation concepts when they are held out."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from pipeline.config import TrainConfig
from pipeline.errors import ConfigError
from pipeline.methods.fitted import FittedModel
from pipeline.methods.neural import fit_task

__all__ = ["fit"]


def fit(t: TrainConfig, data: Any, checkpoint: str | None) -> FittedModel:
    """XCNN on the TF-IDF rows of ``data`` in the driver (the local backend's matrices);
    ``data.validation`` scores each epoch."""
    from pipeline.neural.xcnn import XcnnTask

    backend = data.backend
    if not hasattr(backend, "matrix"):
        raise ConfigError(
            f"train.method={t.method} trains on the TF-IDF rows in the driver; set "
            "train.backend=local"
        )
    p = t.params_of("xcnn")
    langs = list(backend.languages)
    task = XcnnTask(
        langs=langs,
        rows=[backend.matrix(lang).tocsr() for lang in langs],
        concepts=[np.asarray(backend.concept_index(lang)) for lang in langs],
        dim=p.dim,
        scale=p.scale,
        validation=data.validation,
        distractors=p.validation_distractors,
        term_dropout=p.term_dropout,
        center=p.center,
    )
    fitted = fit_task(t, p, data, checkpoint, task)
    if not p.center:
        return fitted
    offsets = task.offsets(fitted.components)
    return dataclasses.replace(
        fitted, offsets={lang: v.astype(np.float32) for lang, v in offsets.items()}
    )
