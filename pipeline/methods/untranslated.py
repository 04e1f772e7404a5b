"""The untranslated baseline's fit (``train.method=untranslated``): TF-IDF cosine over the
union vocabulary, as sparse selection maps (:func:`pipeline.baselines.fit_untranslated`)."""

from __future__ import annotations

from typing import Any

from pipeline.baselines.untranslated import fit_untranslated
from pipeline.config import TrainConfig
from pipeline.methods.corpus import baseline_model
from pipeline.methods.fitted import FittedModel

__all__ = ["fit"]


def fit(t: TrainConfig, data: Any, checkpoint: str | None) -> FittedModel:
    """The selection maps of the training languages' vocabularies (their terms in
    term_index order); no rank, no solver, no checkpoint."""
    terms = {lang: data.vocabulary[lang]["terms"].to_pylist() for lang in data.backend.languages}
    return baseline_model(fit_untranslated(data.backend, terms=terms, seed=t.seed))
