"""Stage ``train``: fit ``train.method`` on the ``tfidf`` rows and write a model directory.

The rows follow ``train.setup`` (joint, pairwise or transitive); the work is the training
service, :mod:`pipeline.training`, which the evaluation uses too. A method tuned by γ (its
spec's ``tuned_by``) is tuned on the split stage's validation concepts as the evaluation
tunes it when ``train.tune`` asks (:mod:`pipeline.evaluation.tuning`).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession

from pipeline.config import Config
from pipeline.evaluation.tuning import train_tuned

__all__ = ["run"]


def run(spark: SparkSession, cfg: Config) -> dict[str, Any]:
    """The registered stage: train ``train.method`` (tuned as ``train.tune`` decides) and
    write the model to ``paths.model``."""
    return train_tuned(spark, cfg)
