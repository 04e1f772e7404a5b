"""What the topic models' fits (JPLSA, CPLSA) share: MAP EM on the concept-grouped term
counts with the method's section's settings (``train.jplsa.*``, ``train.cplsa.*``),
checkpointed, and their result as a
:class:`~pipeline.methods.fitted.FittedModel` of topic-word matrices."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pipeline.baselines.params import PlsaParams
from pipeline.config import TrainConfig
from pipeline.methods.checkpoints import checkpoint_store
from pipeline.methods.fitted import FittedModel

__all__ = ["fit_topic_model"]


def fit_topic_model(
    fit_function: Callable[..., Any],
    t: TrainConfig,
    p: PlsaParams,
    data: Any,
    checkpoint: str | None,
    *,
    method: str,
    **extra: Any,
) -> FittedModel:
    """``fit_function`` (:func:`~pipeline.baselines.fit_jplsa` or
    :func:`~pipeline.baselines.fit_cplsa`) with the topic-model settings ``p`` (the section
    ``train.<method>``) on the training rows grouped by concept as term counts, with the
    validation concepts' counts when ``p.stop_rule`` is validation; ``extra``: the
    method's own keywords."""
    corpus = data.grouped("counts", p.pair_partitions)
    validation = None
    if p.stop_rule == "validation":
        validation = data.validation_rows("counts", f"train.{method}.stop_rule=validation")
    fitted = fit_function(
        corpus,
        r=t.r,
        topic_prior=p.topic_prior,
        word_prior=p.word_prior,
        init_mix=p.init_mix,
        maxiter=p.maxiter,
        tol=p.tol,
        stop_rule=p.stop_rule,
        patience=p.patience,
        fold_in_steps=p.fold_in_steps,
        validation=validation,
        checkpoint=checkpoint_store(checkpoint),
        checkpoint_every=t.checkpoint_every,
        checkpoint_seconds=t.checkpoint_seconds,
        **extra,
    )
    return FittedModel.from_baseline(fitted, n_iter=fitted.history["n_iter"])
