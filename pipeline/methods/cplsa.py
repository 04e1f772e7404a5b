"""CPLSA's fit (``train.method=cplsa``): per-language topic models coupled by posterior
regularisation (:func:`pipeline.baselines.fit_cplsa`), r topics."""

from __future__ import annotations

from typing import Any

from pipeline.baselines.plsa import fit_cplsa
from pipeline.config import TrainConfig
from pipeline.methods.fitted import FittedModel
from pipeline.methods.topic_models import fit_topic_model

__all__ = ["fit"]


def fit(t: TrainConfig, data: Any, checkpoint: str | None) -> FittedModel:
    """CPLSA on the concept-grouped term counts of ``data``, checkpointed under
    ``checkpoint``; the section ``train.cplsa``: JPLSA's settings and the posterior
    regularisation's ``pr_*``."""
    p = t.params_of("cplsa")
    return fit_topic_model(
        fit_cplsa,
        t,
        p,
        data,
        checkpoint,
        method="cplsa",
        pr_epsilon=p.pr_epsilon,
        pr_maxiter=p.pr_maxiter,
        pr_tol=p.pr_tol,
    )
