"""CCA's fit (``train.method=cca``): regularised multi-set CCA on the concept-aligned views
(:func:`pipeline.baselines.fit_cca`) at ``train.cca.gamma``."""

from __future__ import annotations

from typing import Any

from pipeline.baselines.cca import fit_cca
from pipeline.config import TrainConfig
from pipeline.methods.corpus import baseline_model, regularised_settings
from pipeline.methods.fitted import FittedModel

__all__ = ["fit"]


def fit(t: TrainConfig, data: Any, checkpoint: str | None) -> FittedModel:
    """CCA on the corpus backend of ``data`` (no checkpoint)."""
    gamma = t.params_of("cca").gamma
    return baseline_model(fit_cca(data.backend, **regularised_settings(t, gamma)))
