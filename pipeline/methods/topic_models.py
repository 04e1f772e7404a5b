"""What the topic models' fits (JPLSA, CPLSA) share: MAP EM on the concept-grouped term
counts with the ``train.plsa_*`` settings, checkpointed, and their result as a
:class:`~pipeline.methods.fitted.FittedModel` of topic-word matrices."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pipeline.config import TrainConfig
from pipeline.methods.checkpoints import checkpoint_store
from pipeline.methods.fitted import FittedModel

__all__ = ["fit_topic_model"]


def fit_topic_model(
    fit_function: Callable[..., Any],
    t: TrainConfig,
    data: Any,
    checkpoint: str | None,
    **extra: Any,
) -> FittedModel:
    """``fit_function`` (:func:`~pipeline.baselines.fit_jplsa` or
    :func:`~pipeline.baselines.fit_cplsa`) on the training rows grouped by concept as term
    counts, with the validation concepts' counts when ``train.plsa_stop_rule=validation``;
    ``extra``: the method's own keywords."""
    corpus = data.grouped("counts")
    validation = None
    if t.plsa_stop_rule == "validation":
        validation = data.validation_rows("counts", "train.plsa_stop_rule=validation")
    fitted = fit_function(
        corpus,
        r=t.r,
        topic_prior=t.plsa_topic_prior,
        word_prior=t.plsa_word_prior,
        init_mix=t.plsa_init_mix,
        maxiter=t.plsa_maxiter,
        tol=t.plsa_tol,
        stop_rule=t.plsa_stop_rule,
        patience=t.plsa_patience,
        fold_in_steps=t.plsa_fold_in_steps,
        validation=validation,
        checkpoint=checkpoint_store(checkpoint),
        checkpoint_every=t.checkpoint_every,
        checkpoint_seconds=t.checkpoint_seconds,
        **extra,
    )
    return FittedModel(
        components=fitted.components,
        means={},
        eigenvalues=fitted.eigenvalues,
        history=fitted.history,
        n_iter=fitted.history["n_iter"],
        folding_in=fitted.folding_in,
    )
