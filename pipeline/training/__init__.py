"""The training service: fitting a model on the training rows and writing it.

Both the ``train`` stage (:mod:`pipeline.stages.train`) and the evaluation
(:mod:`pipeline.evaluation`, which trains one model per λ and one per compared method) use it;
it imports neither.

- :mod:`~pipeline.training.rows`: the rows of ``train.setup`` (joint, pairwise, transitive),
  loaded into a corpus backend with their vocabularies (:class:`TrainingData`), and where
  they came from (:class:`RowSource`: the session and the typed settings that load their
  concept-grouped and validation rows on first use);
- :mod:`~pipeline.training.fit`: ``train.method`` fitted on them, its fit looked up in the
  method registry (:mod:`pipeline.methods`; a :class:`FittedModel`);
- :mod:`~pipeline.training.service`: :func:`train_model`, which fits ``train.method`` and saves
  the model directory with its ``model.json`` record.
"""

from pipeline.training.fit import FittedModel, fit_method
from pipeline.training.rows import (
    RowSource,
    TrainingData,
    load_training_data,
    select_rows_frame,
    select_training_rows,
    training_data_from_frame,
)
from pipeline.training.service import (
    checkpoint_dir,
    fit_and_save,
    model_preprocessing,
    train_model,
    training_warnings,
)

__all__ = [
    "FittedModel",
    "RowSource",
    "TrainingData",
    "checkpoint_dir",
    "fit_and_save",
    "fit_method",
    "load_training_data",
    "model_preprocessing",
    "select_rows_frame",
    "select_training_rows",
    "train_model",
    "training_data_from_frame",
    "training_warnings",
]
