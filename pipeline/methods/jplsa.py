"""JPLSA's fit (``train.method=jplsa``): the joint topic model of the training concepts
(:func:`pipeline.baselines.fit_jplsa`), r topics."""

from __future__ import annotations

from typing import Any

from pipeline.baselines.plsa import fit_jplsa
from pipeline.config import TrainConfig
from pipeline.methods.fitted import FittedModel
from pipeline.methods.topic_models import fit_topic_model

__all__ = ["fit"]


def fit(t: TrainConfig, data: Any, checkpoint: str | None) -> FittedModel:
    """JPLSA on the concept-grouped term counts of ``data``, checkpointed under
    ``checkpoint``, with the section ``train.jplsa``."""
    return fit_topic_model(fit_jplsa, t, t.params_of("jplsa"), data, checkpoint, method="jplsa")
