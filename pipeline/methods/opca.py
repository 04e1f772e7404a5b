"""OPCA's fit (``train.method=opca``): oriented PCA, S v = σ (N + γI) v
(:func:`pipeline.baselines.fit_opca`) at ``train.opca.gamma``; also S2Net's start (at
``train.s2net.gamma``)."""

from __future__ import annotations

from typing import Any

from pipeline.baselines.common import BaselineResult
from pipeline.baselines.opca import fit_opca
from pipeline.config import TrainConfig
from pipeline.methods.corpus import baseline_model, regularised_settings
from pipeline.methods.fitted import FittedModel

__all__ = ["fit", "opca_maps"]


def opca_maps(t: TrainConfig, backend: Any, gamma: float) -> BaselineResult:
    """OPCA fitted on ``backend`` with the train section's eigensolver settings at γ =
    ``gamma``."""
    return fit_opca(backend, **regularised_settings(t, gamma))


def fit(t: TrainConfig, data: Any, checkpoint: str | None) -> FittedModel:
    """OPCA on the corpus backend of ``data`` (no checkpoint)."""
    return baseline_model(opca_maps(t, data.backend, t.params_of("opca").gamma))
