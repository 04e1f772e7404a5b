"""Under spark-submit, the submission's Spark properties win over the profile's
(pipeline.spark.merge_submitted); the profile's ``spark.ui`` follows the master."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import REPO


def test_merge_keeps_submitted_values_and_fills_in_the_rest():
    from pipeline.spark import merge_submitted

    profile = {
        "spark.app.name": "cr5",
        "spark.sql.shuffle.partitions": "8",
        "spark.ui.enabled": "false",
        "spark.sql.session.timeZone": "UTC",
    }
    submitted = {
        "spark.master": "local[1]",
        "spark.sql.shuffle.partitions": "7",
        "spark.ui.enabled": "true",
        "spark.sql.session.timeZone": "UTC",
    }
    props, disagreements = merge_submitted(profile, submitted)
    # only what the submission left unset goes on the builder
    assert props == {"spark.app.name": "cr5"}
    # agreeing values are no disagreement; the order is the profile's
    assert disagreements == [
        "spark.sql.shuffle.partitions=7 (profile: 8)",
        "spark.ui.enabled=true (profile: false)",
    ]


def test_merge_without_a_submission_is_the_profile():
    from pipeline.spark import merge_submitted

    profile = {"spark.sql.shuffle.partitions": "8", "spark.executor.memory": "16g"}
    assert merge_submitted(profile, {}) == (profile, [])
    assert merge_submitted({}, {"spark.executor.memory": "32g"}) == ({}, [])


def test_spark_submits_default_app_name_yields_to_the_profile():
    from pipeline.spark import submitted_properties

    conf = {"spark.app.name": "prep.py", "spark.master": "yarn"}
    # no --name: spark-submit named the app after the script; the profile's name fills in
    assert submitted_properties(conf, "/repo/jobs/prep.py") == {"spark.master": "yarn"}
    # --name nightly (or --conf spark.app.name=nightly) is the submitter's choice
    named = {"spark.app.name": "nightly", "spark.master": "yarn"}
    assert submitted_properties(named, "/repo/jobs/prep.py") == named
    assert conf["spark.app.name"] == "prep.py"  # the argument is not changed


@pytest.mark.parametrize(
    ("ui", "master", "expected"),
    [
        (None, "local[2]", "false"),
        (None, "spark://10.0.0.1:7077", "true"),
        (None, "yarn", "true"),
        (False, "yarn", "false"),
        (True, "local[2]", "true"),
    ],
)
def test_ui_follows_the_master_unless_the_profile_says(ui, master, expected):
    from pipeline.config import SparkConfig
    from pipeline.spark import spark_properties

    cfg = SparkConfig(master=master, ui=ui)
    props = spark_properties(cfg, local=master.startswith("local"))
    assert props["spark.ui.enabled"] == expected


def test_ui_default_and_profiles_leave_a_cluster_its_ui():
    from pipeline.config import load_config

    assert load_config([REPO / "conf" / "local.yaml"]).spark.ui is None
    # cluster.yaml layered after local.yaml must not inherit a local "off"
    layered = load_config([REPO / "conf" / "local.yaml", REPO / "conf" / "cluster.yaml"])
    assert layered.spark.ui is None
    assert load_config([], ["spark.ui=false"]).spark.ui is False
    assert load_config([], ["spark.ui=null"]).spark.ui is None


SCRIPT = """
import logging
import sys

logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(message)s")
from pipeline.config import load_config
from pipeline.spark import get_spark

cfg = load_config(
    [sys.argv[1]],
    ["spark.ui=false", "spark.conf={spark.executor.memory: 1g, spark.cr5.profile_only: p}"],
)
spark = get_spark(cfg.spark)
conf = spark.sparkContext.getConf()
for key in (
    "spark.sql.shuffle.partitions",
    "spark.executor.memory",
    "spark.ui.enabled",
    "spark.cr5.file_only",
    "spark.cr5.profile_only",
    "spark.app.name",
):
    value = spark.conf.get(key) if key.startswith("spark.sql.") else conf.get(key)
    print(f"{key}={value}")
spark.stop()
"""


@pytest.mark.slow
def test_spark_submit_settings_reach_the_session(tmp_path):
    """The real spark-submit: --conf and --properties-file values reach the session unchanged,
    the profile fills in the rest, and one warning names every disagreement."""
    from pipeline.java import spark_java_home

    spark_submit = REPO / ".venv" / "bin" / "spark-submit"
    if not spark_submit.exists():
        pytest.skip("no .venv/bin/spark-submit (bash scripts/setup.sh)")
    script = tmp_path / "show_conf.py"
    script.write_text(textwrap.dedent(SCRIPT), encoding="utf-8")
    properties = tmp_path / "spark-defaults.conf"
    properties.write_text(
        "spark.sql.shuffle.partitions 7\nspark.cr5.file_only from-file\n", encoding="utf-8"
    )
    env = dict(
        os.environ,
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        SPARK_LOCAL_IP="127.0.0.1",
    )
    home, _ = spark_java_home()  # as `eval "$(python -m pipeline.java --export)"`
    if home is not None:
        env["JAVA_HOME"] = str(home)
    cmd = [
        str(spark_submit),
        "--master", "local[1]",
        "--driver-memory", "1g",
        "--properties-file", str(properties),
        "--conf", "spark.executor.memory=3g",
        "--conf", "spark.ui.enabled=true",
        "--conf", "spark.ui.port=0",
        "--conf", "spark.driver.host=127.0.0.1",
        "--conf", "spark.driver.bindAddress=127.0.0.1",
        str(script),
        str(REPO / "conf" / "local.yaml"),
    ]  # fmt: skip
    proc = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=180,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    values = dict(
        line.split("=", 1) for line in proc.stdout.splitlines() if line.startswith("spark.")
    )
    assert values["spark.sql.shuffle.partitions"] == "7"  # --properties-file over profile's 8
    assert values["spark.executor.memory"] == "3g"  # --conf over the profile's spark.conf
    assert values["spark.ui.enabled"] == "true"  # --conf over spark.ui=false
    assert values["spark.cr5.file_only"] == "from-file"
    assert values["spark.cr5.profile_only"] == "p"  # the profile fills in what is unset
    assert values["spark.app.name"] == "cr5"  # spark-submit's default name yields
    # spark-submit's PythonRunner merges the driver Python's stderr into its stdout.
    output = proc.stdout + proc.stderr
    warnings = [line for line in output.splitlines() if "win over the profile" in line]
    assert len(warnings) == 1, output[-4000:]
    for part in (
        "spark.executor.memory=3g (profile: 1g)",
        "spark.sql.shuffle.partitions=7 (profile: 8)",
        "spark.ui.enabled=true (profile: false)",
    ):
        assert part in warnings[0]
    assert "spark.app.name" not in warnings[0]
