"""S2Net's fit (``train.method=s2net``): a siamese linear projection of TF-IDF rows trained
from OPCA's (:func:`pipeline.baselines.fit_s2net`) on the concept-grouped rows."""

from __future__ import annotations

from typing import Any

from pipeline.baselines.s2net import fit_s2net
from pipeline.config import TrainConfig
from pipeline.methods.checkpoints import checkpoint_store
from pipeline.methods.fitted import FittedModel
from pipeline.methods.opca import opca_maps

__all__ = ["fit"]


def fit(t: TrainConfig, data: Any, checkpoint: str | None) -> FittedModel:
    """S2Net from OPCA fitted on the same rows with ``train.s2net.gamma``, on the training
    rows grouped by concept as TF-IDF rows; the validation concepts' rows choose among
    several (learning rate, epochs) candidates. Checkpointed under ``checkpoint``."""
    p = t.params_of("s2net")
    corpus = data.grouped("tfidf", p.pair_partitions)
    validation = None
    if len(p.learning_rates) * len(set(p.epochs)) > 1:
        validation = data.validation_rows(
            "tfidf", "train.s2net.learning_rates / train.s2net.epochs (several candidates)"
        )
    opca = opca_maps(t, data.backend, p.gamma)
    fitted = fit_s2net(
        corpus,
        opca.components,
        r=t.r,
        learning_rates=p.learning_rates,
        epochs=p.epochs,
        batch_concepts=p.batch_concepts,
        gamma=p.scale,
        negatives=p.negatives,
        validation=validation,
        distractors=p.validation_distractors,
        checkpoint=checkpoint_store(checkpoint),
        seed=t.seed,
    )
    fitted.history["init"] = opca.history
    return FittedModel.from_baseline(fitted, n_iter=fitted.history["chosen"]["epochs"])
