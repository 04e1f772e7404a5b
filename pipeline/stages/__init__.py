"""The pipeline's stages, one module each, in run order.

A stage is ``pipeline.stages.<name>.run(spark, cfg) -> report``: it reads its input datasets,
writes its output dataset(s) atomically and returns a JSON-serialisable report. Modules are
imported lazily (a job loads only what it runs), and importing this package imports no Spark,
so deployment code (the Airflow DAG) can read :data:`STAGES` and :data:`DEMO_CHAIN`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pipeline.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from pipeline.config import Config

StageFn = Callable[["SparkSession", "Config"], dict[str, Any]]

#: Every stage, in run order (each is the module ``pipeline.stages.<name>``).
STAGES: tuple[str, ...] = (
    "ingest",
    "ingest_wikipedia",
    "split",
    "vocabulary",
    "tfidf",
    "train",
    "embed",
    "index",
    "evaluate",
    "word_vectors",
    "translate_words",
)

#: What the README's main command (and the Airflow DAG) runs: the aligned-corpus chain, i.e.
#: every stage but the Wikipedia ingestion (an alternative first stage), the word-level
#: stages and the search index (the DAG runs ``index`` beside ``evaluate``, after ``embed``).
DEMO_CHAIN: tuple[str, ...] = tuple(
    s for s in STAGES if s not in ("ingest_wikipedia", "index", "word_vectors", "translate_words")
)


def get_stage(name: str) -> StageFn:
    """The ``run`` function of stage ``name`` (imports its module)."""
    if name not in STAGES:
        raise ConfigError(f"unknown stage {name!r}; stages are: {', '.join(STAGES)}")
    return importlib.import_module(f"pipeline.stages.{name}").run
