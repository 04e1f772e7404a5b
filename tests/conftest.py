"""Shared fixtures: one local SparkSession for the whole test run (one per pytest-xdist
worker when scripts/test.sh runs the suite in two)."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"
SAMPLE = REPO / "data" / "sample" / "ddtp_en_de_fr_es.parquet"

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# The tests start many short-lived driver JVMs (their session, and every job they run as a
# subprocess). C1-only JIT and the serial collector start them sooner, and the work they do
# is too short for C2 to pay off. Only the drivers launched through spark-submit read
# SPARK_SUBMIT_OPTS, and a value set outside wins.
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")


def load_standalone():
    """deploy/standalone.py as a module (deploy/ is not a package)."""
    spec = importlib.util.spec_from_file_location(
        "cr5_deploy_standalone", REPO / "deploy" / "standalone.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def spark():
    """A local[2] session built by the product's own factory (small test settings)."""
    from pipeline.config import load_config
    from pipeline.spark import get_spark

    cfg = load_config(
        [REPO / "conf" / "local.yaml"],
        ["spark.shuffle_partitions=2", "spark.driver_memory=2g", "spark.app_name=cr5-tests"],
    )
    session = get_spark(cfg.spark)
    yield session
    session.stop()


@pytest.fixture
def make_config(tmp_path):
    """Build a Config rooted in a fresh temporary directory, with overrides."""
    from pipeline.config import load_config

    def _make(*overrides: str, profiles=(REPO / "conf" / "local.yaml",)):
        return load_config(
            list(profiles),
            [f"paths.root={tmp_path / 'out'}", "spark.shuffle_partitions=2", *overrides],
        )

    return _make
