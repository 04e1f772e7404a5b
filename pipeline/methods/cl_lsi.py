"""CL-LSI's fit (``train.method=cl_lsi``): the SVD of the concept x stacked-term matrix
(:func:`pipeline.baselines.fit_cl_lsi`) with the train section's eigensolver settings."""

from __future__ import annotations

from typing import Any

from pipeline.baselines.cl_lsi import fit_cl_lsi
from pipeline.config import TrainConfig
from pipeline.methods.corpus import baseline_model, eigensolver_settings
from pipeline.methods.fitted import FittedModel

__all__ = ["fit"]


def fit(t: TrainConfig, data: Any, checkpoint: str | None) -> FittedModel:
    """CL-LSI on the corpus backend of ``data`` (no checkpoint)."""
    return baseline_model(fit_cl_lsi(data.backend, **eigensolver_settings(t)))
