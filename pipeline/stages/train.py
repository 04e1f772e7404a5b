"""Stage ``train``: fit ``train.method`` on the ``tfidf`` rows and write a model directory.

The rows follow ``train.setup`` (joint, pairwise or transitive); the work is the training
service, :mod:`pipeline.training`, which the evaluation uses too.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession

from pipeline.config import Config
from pipeline.training import train_model

__all__ = ["run"]


def run(spark: SparkSession, cfg: Config) -> dict[str, Any]:
    """The registered stage: train ``train.method`` and write the model to ``paths.model``."""
    return train_model(spark, cfg)
