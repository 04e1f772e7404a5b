"""Atomic, idempotent dataset writes: failures and kills never expose partial output."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from pipeline.errors import DatasetNotFoundError
from pipeline.io.datasets import read_dataset, read_manifest, write_dataset
from pipeline.io.schemas import DOCUMENTS
from pipeline.stages.ingest import run as ingest
from tests.conftest import REPO


def rows(spark, path):
    df = read_dataset(spark, DOCUMENTS, path)
    return sorted(tuple(r) for r in df.collect())


def small_docs(spark, n, tag):
    data = [(f"d{i}", f"c{i}", "en", None, f"{tag} text {i}") for i in range(n)]
    return spark.createDataFrame(data, DOCUMENTS.schema)


def test_rewrite_replaces_and_rerun_is_identical(spark, tmp_path):
    path = str(tmp_path / "documents")
    write_dataset(spark, small_docs(spark, 5, "v1"), DOCUMENTS, path)
    assert len(rows(spark, path)) == 5
    write_dataset(spark, small_docs(spark, 3, "v2"), DOCUMENTS, path)
    first = rows(spark, path)
    write_dataset(spark, small_docs(spark, 3, "v2"), DOCUMENTS, path)
    assert rows(spark, path) == first and first[0][4].startswith("v2")
    assert sorted(os.listdir(tmp_path)) == ["documents"]  # no temporaries left


def test_failure_midway_leaves_previous_version(spark, tmp_path):
    path = str(tmp_path / "documents")
    write_dataset(spark, small_docs(spark, 4, "good"), DOCUMENTS, path)
    before = rows(spark, path)
    from pyspark.sql import functions as F

    def explode(text):
        raise RuntimeError("simulated executor failure")

    boom = F.udf(explode, "string")
    bad = small_docs(spark, 4, "bad").withColumn("text", boom("text"))
    with pytest.raises(Exception, match="simulated executor failure"):
        write_dataset(spark, bad, DOCUMENTS, path)
    assert rows(spark, path) == before
    assert sorted(os.listdir(tmp_path)) == ["documents"]


def test_missing_or_incomplete_dataset_is_a_clear_error(spark, tmp_path):
    with pytest.raises(DatasetNotFoundError, match="does not exist.*run the 'ingest' stage"):
        read_dataset(spark, DOCUMENTS, str(tmp_path / "nothing"))
    partial = tmp_path / "half"
    partial.mkdir()
    (partial / "part-0.parquet").write_bytes(b"junk")
    with pytest.raises(DatasetNotFoundError, match="incomplete"):
        read_dataset(spark, DOCUMENTS, str(partial))


def test_crash_between_renames_is_recovered(spark, tmp_path):
    path = str(tmp_path / "documents")
    write_dataset(spark, small_docs(spark, 2, "old"), DOCUMENTS, path)
    before = rows(spark, path)
    os.rename(path, tmp_path / ".documents.old-deadbeef")  # as if killed mid-commit
    assert rows(spark, path) == before  # the reader restores it


@pytest.mark.slow
def test_killed_job_leaves_previous_output_intact(spark, make_config, tmp_path):
    """SIGKILL a real `python jobs/ingest.py` while it writes; the old dataset survives."""
    corpus = tmp_path / "corpus.jsonl"
    with corpus.open("w") as f:
        for i in range(3):
            f.write(json.dumps({"concept_id": f"c{i}", "lang": "en", "text": f"old {i}"}) + "\n")
    cfg = make_config(f"ingest.input={corpus}")
    ingest(spark, cfg)
    out = cfg.paths.dataset("documents")
    before = rows(spark, out)

    big = tmp_path / "big.jsonl"
    with big.open("w") as f:
        for i in range(300_000):
            f.write(
                json.dumps(
                    {
                        "concept_id": f"c{i}",
                        "lang": ["en", "de", "fr"][i % 3],
                        "text": f"new document number {i} " * 5,
                    }
                )
                + "\n"
            )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [
            sys.executable,
            str(REPO / "jobs" / "ingest.py"),
            "--conf",
            str(REPO / "conf/local.yaml"),
            "--set",
            f"paths.root={tmp_path / 'out'}",
            "--set",
            f"ingest.input={big}",
            "--set",
            "spark.shuffle_partitions=2",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    parent = tmp_path / "out"
    deadline = time.time() + 240
    try:
        while time.time() < deadline and proc.poll() is None:
            if any(n.startswith(".documents.tmp-") for n in os.listdir(parent)):
                break
            time.sleep(0.05)
        else:
            pytest.fail(f"the job never started writing (exit code {proc.poll()})")
        time.sleep(0.3)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and its JVM
        proc.wait()
    assert rows(spark, out) == before
    assert read_manifest(spark, DOCUMENTS, out)["report"]["rows_read"] == 3
    # The next write clears the leftover temporary directory.
    ingest(spark, cfg)
    assert not [n for n in os.listdir(parent) if n.startswith(".documents.")]
