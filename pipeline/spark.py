"""The one SparkSession factory: every job and test gets its session here; and what a
session offers its executors (broadcast variables, or values inside closures on Spark Connect)."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Mapping
from typing import Any

from pipeline.config import SparkConfig
from pipeline.failures import wait_for_master
from pipeline.java import ensure_java
from pipeline.runlog import child_output_to, jvm_output_to

log = logging.getLogger(__name__)


def launched_by_spark_submit() -> bool:
    """True when this Python driver was started by ``spark-submit`` (JVM already running)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def spark_properties(cfg: SparkConfig, *, local: bool) -> dict[str, str]:
    """The Spark properties a profile implies (without master and driver memory)."""
    props = {
        "spark.app.name": cfg.app_name,
        "spark.sql.shuffle.partitions": str(cfg.shuffle_partitions),
        # ui: null means on for a cluster, off on a laptop or CI machine.
        "spark.ui.enabled": str(not local if cfg.ui is None else cfg.ui).lower(),
        # Reuse Python workers: a task then does not pay for starting a Python process.
        "spark.python.worker.reuse": "true",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.parquet.compression.codec": "zstd",
        # Accept every JVM charset for ingest.encoding (Spark 4 allows only seven by default).
        "spark.sql.legacy.javaCharsets": "true",
        # Partition values such as lang=no must stay strings.
        "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
        # One BLAS thread per task: tasks already use every core, and oversubscribed
        # OpenBLAS threads slow every task down (bench/README.md).
        "spark.executorEnv.OPENBLAS_NUM_THREADS": "1",
        "spark.executorEnv.OMP_NUM_THREADS": "1",
    }
    if local:
        # Never listen on a public interface from a laptop or CI machine.
        props["spark.driver.host"] = "127.0.0.1"
        props["spark.driver.bindAddress"] = "127.0.0.1"
    props.update(cfg.conf)
    return props


def submitted_properties(conf: Mapping[str, str], script: str) -> dict[str, str]:
    """The properties a spark-submit command line set, from its JVM's SparkConf ``conf``.

    spark-submit always sets spark.app.name: without --name (or --conf spark.app.name) it
    is the primary resource's file name, ``script``'s base name. That default names no
    choice of the submitter, so it is dropped here and the profile's app_name fills in; an
    explicit --name equal to the script's file name is indistinguishable and yields too.
    """
    props = dict(conf)
    if props.get("spark.app.name") == os.path.basename(script):
        del props["spark.app.name"]
    return props


def merge_submitted(
    profile: Mapping[str, str], submitted: Mapping[str, str]
) -> tuple[dict[str, str], list[str]]:
    """What the builder sets under spark-submit: the ``profile``'s properties that the
    submission left unset (a builder option would override spark-submit's ``--conf``,
    ``--properties-file``, spark-defaults.conf and its flags such as --executor-memory).

    Returns the properties to set and one ``key=submitted (profile: value)`` entry per
    property on which the two disagree (the submitted value is kept).
    """
    props: dict[str, str] = {}
    disagreements: list[str] = []
    for key, value in profile.items():
        if key not in submitted:
            props[key] = value
        elif submitted[key] != value:
            disagreements.append(f"{key}={submitted[key]} (profile: {value})")
    return props, disagreements


def get_spark(
    cfg: SparkConfig, driver_memory: str | None = None, *, log_file: str | None = None
):  # -> SparkSession
    """Build (or reuse) the SparkSession described by ``cfg``.

    Under ``spark-submit`` the master, deploy mode and driver memory are the
    command line's; otherwise ``cfg.master`` (default ``local[2]``) is used and a
    local JVM is started with ``driver_memory`` (the runner's memory plan,
    :func:`pipeline.memory.driver_memory`), else ``cfg.driver_memory``, whose ``auto`` is
    the heap of :func:`pipeline.memory.local_heap` for this machine. Under spark-submit
    every property its command line (or properties file, or spark-defaults.conf) set wins
    over the profile's, with one warning naming those that disagree
    (:func:`merge_submitted`); otherwise the profile's properties are all set. A
    ``spark://`` master
    is waited for up to ``cfg.master_wait_seconds``. With ``log_file``, a JVM started here
    (or a spark-submit JVM without a SparkContext yet) sends its output to that file
    (:mod:`pipeline.runlog`); a session that exists already is left as it is.
    """
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    submitted = launched_by_spark_submit()
    fresh = SparkContext._active_spark_context is None
    submitted_conf: dict[str, str] = {}
    if submitted:
        from pyspark import SparkConf

        # The JVM is up already; its conf holds spark-submit's --master, --conf, flags and
        # properties file (or spark-defaults.conf).
        SparkContext._ensure_initialized()  # connects to it (no SparkContext yet)
        master = None
        submitted_conf = dict(SparkConf().getAll())
        submitted_master = submitted_conf.get("spark.master", "")
        local = submitted_master.startswith("local")
        if fresh:
            wait_for_master(submitted_master, cfg.master_wait_seconds, key="--master")
            if log_file:
                jvm_output_to(SparkContext._jvm, log_file)
    else:
        how = ensure_java()
        log.info("Java: %s", how)
        master = cfg.master
        local = master.startswith("local")
        if fresh:
            wait_for_master(master, cfg.master_wait_seconds)
    python = cfg.conf.get("spark.pyspark.python")
    if python and not submitted:
        # PySpark's Python side reads the executors' interpreter of its SQL and Arrow
        # functions from PYSPARK_PYTHON only (spark-submit copies the property there): without
        # this, a profile's spark.pyspark.python reached the RDD workers but mapInArrow ran
        # "python3" from the executors' PATH. Spark lets the property win over the variable.
        os.environ["PYSPARK_PYTHON"] = str(python)
    if local:
        # Python workers must run this interpreter (and virtualenv), not the python3 on
        # PATH; on a cluster the executors' Python is the cluster's business
        # (spark.pyspark.python or a packed environment, see deploy/README.md).
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
        # Bind the driver's block manager and RPC to loopback as well.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder
    if master:
        if driver_memory is None:
            driver_memory = cfg.driver_memory
        if driver_memory == "auto":
            from pipeline.memory import Machine, format_size, local_heap

            driver_memory = format_size(local_heap(Machine.detect()))
        builder = builder.master(master)
        builder = builder.config("spark.driver.memory", driver_memory)
    props = spark_properties(cfg, local=local)
    if submitted:
        props, disagreements = merge_submitted(
            props, submitted_properties(submitted_conf, sys.argv[0] if sys.argv else "")
        )
        if disagreements:
            log.warning(
                "spark-submit's settings win over the profile: %s", ", ".join(disagreements)
            )
    for key, value in props.items():
        builder = builder.config(key, value)
    launch = log_file if fresh and SparkContext._gateway is None else None
    if log_file and fresh:
        # Spark's progress bar would only draw into the log file.
        builder = builder.config("spark.ui.showConsoleProgress", "false")
    with child_output_to(launch) if launch else contextlib.nullcontext():
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def is_connect(spark: Any) -> bool:
    """True for a Spark Connect session (no SparkContext, no JVM in this process)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


class InlineValue:
    """A value handed to executors inside the function that uses it, with the
    ``value``/``unpersist`` interface of a broadcast variable (Spark Connect has none)."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def unpersist(self) -> None:
        """Nothing to release: the value lives in the function's closure."""


def share_with_workers(spark: Any, value: Any) -> Any:
    """``value`` for the executors' Python functions, read there as ``.value``.

    A broadcast variable on a classic session (sent once per executor); on a Spark Connect
    session, which has no broadcast variables, the value travels inside the function that
    reads it (:class:`InlineValue`), so keep it to what a task may carry (tens of MB).
    """
    if is_connect(spark):
        return InlineValue(value)
    return spark.sparkContext.broadcast(value)
