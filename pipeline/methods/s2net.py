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
    """S2Net from OPCA fitted on the same rows with ``train.gamma``, on the training rows
    grouped by concept as TF-IDF rows; the validation concepts' rows choose among several
    (learning rate, epochs) candidates. Checkpointed under ``checkpoint``."""
    corpus = data.grouped("tfidf")
    validation = None
    if len(t.s2net_learning_rates) * len(set(t.s2net_epochs)) > 1:
        validation = data.validation_rows(
            "tfidf", "train.s2net_learning_rates / train.s2net_epochs (several candidates)"
        )
    opca = opca_maps(t, data.backend)
    fitted = fit_s2net(
        corpus,
        opca.components,
        r=t.r,
        learning_rates=t.s2net_learning_rates,
        epochs=t.s2net_epochs,
        batch_concepts=t.s2net_batch_concepts,
        gamma=t.s2net_gamma,
        negatives=t.s2net_negatives,
        validation=validation,
        distractors=t.neural_validation_distractors,
        checkpoint=checkpoint_store(checkpoint),
        seed=t.seed,
    )
    fitted.history["init"] = opca.history
    return FittedModel(
        components=fitted.components,
        means={},
        eigenvalues=fitted.eigenvalues,
        history=fitted.history,
        n_iter=fitted.history["chosen"]["epochs"],
        folding_in=fitted.folding_in,
    )
