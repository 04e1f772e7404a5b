"""The registry of pipeline stages, in run order.

A stage is ``run(spark, cfg) -> report``: it reads its input datasets, writes its
output dataset(s) atomically and returns a JSON-serialisable report.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from pyspark.sql import SparkSession

from pipeline.config import Config
from pipeline.errors import ConfigError

StageFn = Callable[[SparkSession, Config], dict[str, Any]]

# name -> "module:function"; imported lazily so a job only loads what it runs.
STAGES: dict[str, str] = {
    "ingest": "pipeline.stages.ingest:run",
    "ingest_wikipedia": "pipeline.stages.ingest_wikipedia:run",
    "vocabulary": "pipeline.stages.vocabulary:run",
    "tfidf": "pipeline.stages.tfidf:run",
    "train": "pipeline.stages.train:run",
    "embed": "pipeline.stages.embed:run",
    "split": "pipeline.stages.split:run",
    "evaluate": "pipeline.stages.evaluate:run",
}

# What the README's main command runs on the bundled sample.
DEMO_CHAIN: tuple[str, ...] = (
    "ingest",
    "split",
    "vocabulary",
    "tfidf",
    "train",
    "embed",
    "evaluate",
)


def get_stage(name: str) -> StageFn:
    if name not in STAGES:
        raise ConfigError(f"unknown stage {name!r}; stages are: {', '.join(STAGES)}")
    module, _, func = STAGES[name].partition(":")
    return getattr(importlib.import_module(module), func)
