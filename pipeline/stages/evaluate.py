"""Stage ``evaluate``: crosslingual retrieval on the held-out concepts (design.md §4).

For every evaluated pair (l1, l2) and both directions, the queries are the l1 documents
of the pair's test concepts (``splits`` dataset) and the candidates are a seeded sample of
up to ``evaluate.max_candidates`` l2 documents plus the true targets. Retrieval with cosine
and CSLS, exact, on the driver or over Spark; P@k and MRR per direction x measure; optional
λ selection and baselines. The experiment itself is :mod:`pipeline.evaluation.experiment`.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession

from pipeline.config import Config
from pipeline.evaluation.experiment import run_evaluation

__all__ = ["run", "run_evaluation"]


def run(spark: SparkSession, cfg: Config) -> dict[str, Any]:
    """The registered stage: :func:`run_evaluation` with ``cfg.evaluate``."""
    return run_evaluation(spark, cfg, cfg.evaluate)
