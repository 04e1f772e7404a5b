"""pipeline.spark.get_spark: what a profile's Spark settings reach besides the JVM."""

from __future__ import annotations

import json
import os
import sys

from tests.conftest import REPO


def test_profile_pyspark_python_reaches_the_python_side(spark, monkeypatch, tmp_path):
    """PySpark takes the executors' interpreter of SQL and Arrow functions from
    PYSPARK_PYTHON only; a profile's spark.pyspark.python must land there (on a standalone
    cluster the vocabulary stage's mapInArrow ran the executors' "python3" without it)."""
    from pipeline.config import load_config
    from pipeline.spark import get_spark

    python = tmp_path / "python"  # a path of its own, so local mode's default cannot pass
    python.symlink_to(sys.executable)
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    cfg = load_config(
        [REPO / "conf" / "local.yaml"],
        [
            "spark.shuffle_partitions=2",
            "spark.driver_memory=2g",
            "spark.app_name=cr5-tests",
            "spark.conf=" + json.dumps({"spark.pyspark.python": str(python)}),
        ],
    )
    # the running session is reused (a Spark-core property is not changed on it)
    assert get_spark(cfg.spark) is spark
    assert os.environ["PYSPARK_PYTHON"] == str(python)
