"""cT-LASER's fit (``train.method=ctlaser``): T-LASER's encoder with the distance constraint
(weight ``train.ctlaser.beta``) added to the translation loss."""

from __future__ import annotations

from typing import Any

from pipeline.config import TrainConfig
from pipeline.methods.fitted import FittedModel
from pipeline.methods.tlaser import fit_encoder

__all__ = ["fit"]


def fit(t: TrainConfig, data: Any, checkpoint: str | None) -> FittedModel:
    """cT-LASER on the raw texts of ``data``, checkpointed under ``checkpoint``."""
    return fit_encoder(t, data, checkpoint, t.params_of("ctlaser"))
