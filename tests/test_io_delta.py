"""paths.format=delta: datasets as Delta tables, checked independently with delta-rs."""

from __future__ import annotations

import os
import sys

import pyarrow as pa
import pytest

from pipeline.errors import ConfigError, DatasetNotFoundError
from pipeline.io import delta
from pipeline.io.datasets import read_dataset, read_manifest, read_table, write_dataset
from pipeline.io.schemas import DOCUMENTS
from pipeline.runner import main as run_jobs
from tests.conftest import REPO, SAMPLE

deltalake = pytest.importorskip("deltalake")


def docs(spark, n, tag, langs=("en", "de")):
    data = [
        (f"{lang}:{i}", f"c{i}", lang, None if i % 2 else f"t{i}", f"{tag} text {i}")
        for i in range(n)
        for lang in langs
    ]
    return spark.createDataFrame(data, DOCUMENTS.schema)


def delta_rows(path):
    """The current version's rows, read by delta-rs alone (no Spark)."""
    table = deltalake.DeltaTable(path).to_pyarrow_table().select(DOCUMENTS.columns)
    return sorted(tuple(r.values()) for r in table.to_pylist())


def spark_rows(df):
    return sorted(tuple(r) for r in df.select(*DOCUMENTS.columns).collect())


def data_dirs(path):
    return sorted(n for n in os.listdir(path) if n.startswith("data-"))


@pytest.fixture
def no_jars(monkeypatch):
    """Pin the delta-rs route (it is the one here anyway: no Delta jars on this classpath)."""
    monkeypatch.setattr(delta, "native_available", lambda spark: False)


def test_versions_history_partitions_and_round_trip(spark, tmp_path, no_jars):
    path = str(tmp_path / "documents")
    first = docs(spark, 6, "v1")
    write_dataset(spark, first, DOCUMENTS, path, format="delta", manifest={"report": {"n": 1}})
    table = deltalake.DeltaTable(path)
    assert table.version() == 0
    assert table.metadata().partition_columns == ["lang"]
    assert delta_rows(path) == spark_rows(first)

    second = docs(spark, 4, "v2", langs=("en", "de", "fr"))
    write_dataset(spark, second, DOCUMENTS, path, format="delta", manifest={"report": {"n": 2}})
    table = deltalake.DeltaTable(path)
    assert table.version() == 1
    history = table.history()
    assert [h["version"] for h in history] == [1, 0]
    assert [h["operation"] for h in history] == ["WRITE", "CREATE TABLE"]
    assert delta_rows(path) == spark_rows(second)  # overwrite: v1 rows are gone
    actions = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    assert {a["partition.lang"] for a in actions} == {"en", "de", "fr"}
    assert all(f"lang={a['partition.lang']}/" in a["path"] for a in actions)
    # Time travel: version 0 is still there.
    old = deltalake.DeltaTable(path, version=0).to_pyarrow_table().select(DOCUMENTS.columns)
    assert sorted(tuple(r.values()) for r in old.to_pylist()) == spark_rows(first)

    # The product's readers: current version only, partition column restored, typed.
    back = read_dataset(spark, DOCUMENTS, path)
    assert back.schema.names == DOCUMENTS.columns
    assert spark_rows(back) == spark_rows(second)
    assert spark_rows(read_table(spark, path)) == spark_rows(second)
    manifest = read_manifest(spark, DOCUMENTS, path)
    assert manifest["report"] == {"n": 2} and manifest["delta_version"] == 1
    assert manifest["format"] == "delta" and manifest["dataset"] == "documents"
    # The same manifest is what any Delta client sees in the commit.
    assert '"n": 2' in history[0]["userMetadata"]


@pytest.mark.slow
def test_ingest_stage_end_to_end_matches_parquet(spark, make_config, tmp_path, no_jars):
    root = tmp_path / "delta"
    argv = ["--conf", str(REPO / "conf" / "local.yaml"), "--log-level", "WARNING"]
    argv += ["--set", f"paths.root={root}", "--set", f"ingest.input={SAMPLE}"]
    argv += ["--set", "spark.shuffle_partitions=2", "--set", "paths.format=delta"]
    assert run_jobs(["ingest"], argv) == 0
    path = str(root / "documents")
    assert deltalake.DeltaTable(path).version() == 0
    assert run_jobs(["ingest"], argv) == 0  # a rerun: a new version, same content
    table = deltalake.DeltaTable(path)
    assert table.version() == 1 and len(table.history()) == 2
    assert table.metadata().partition_columns == ["lang"]
    assert not os.path.exists(root / "documents" / "_manifest.json")

    cfg = make_config(f"ingest.input={SAMPLE}")  # paths.format defaults to parquet
    from pipeline.stages.ingest import run as ingest

    ingest(spark, cfg)
    parquet_path = cfg.paths.dataset("documents")
    assert os.path.exists(os.path.join(parquet_path, "_manifest.json"))
    expected = spark_rows(read_dataset(spark, DOCUMENTS, parquet_path))
    assert len(expected) > 10_000
    assert delta_rows(path) == expected
    assert spark_rows(read_dataset(spark, DOCUMENTS, path)) == expected
    langs = {a["partition.lang"] for a in pa.table(table.get_add_actions(flatten=True)).to_pylist()}
    assert langs == {r[2] for r in expected}
    report = read_manifest(spark, DOCUMENTS, path)["report"]
    assert report == read_manifest(spark, DOCUMENTS, parquet_path)["report"]


def test_failure_before_commit_keeps_previous_version(spark, tmp_path, monkeypatch, no_jars):
    path = str(tmp_path / "documents")
    write_dataset(spark, docs(spark, 3, "good"), DOCUMENTS, path, format="delta")
    before, dirs = delta_rows(path), data_dirs(path)

    def boom(*args, **kwargs):
        # The new Parquet files exist at this point.
        assert len(data_dirs(path)) == 2
        raise RuntimeError("simulated crash before the Delta commit")

    monkeypatch.setattr(delta, "commit", boom)
    with pytest.raises(RuntimeError, match="before the Delta commit"):
        write_dataset(spark, docs(spark, 5, "bad"), DOCUMENTS, path, format="delta")
    assert deltalake.DeltaTable(path).version() == 0
    assert delta_rows(path) == before
    assert spark_rows(read_dataset(spark, DOCUMENTS, path)) == before
    assert data_dirs(path) == dirs  # the uncommitted files were removed


def test_format_switches_and_missing_manifest(spark, tmp_path, no_jars):
    path = str(tmp_path / "documents")
    write_dataset(spark, docs(spark, 2, "pq"), DOCUMENTS, path)  # parquet
    rows = docs(spark, 3, "dl")
    write_dataset(spark, rows, DOCUMENTS, path, format="delta")
    assert deltalake.DeltaTable(path).version() == 0
    assert not os.path.exists(os.path.join(path, "_manifest.json"))  # a clean table
    assert sorted(os.listdir(tmp_path)) == ["documents"]
    # The configuration says parquet, the reader still sees the Delta table.
    assert spark_rows(read_dataset(spark, DOCUMENTS, path)) == spark_rows(rows)
    write_dataset(spark, rows, DOCUMENTS, path)  # back to parquet
    assert not os.path.exists(os.path.join(path, "_delta_log"))
    assert spark_rows(read_dataset(spark, DOCUMENTS, path)) == spark_rows(rows)

    # A Delta table written by another tool (files at the root, no cr5 manifest).
    other = str(tmp_path / "other")
    deltalake.write_deltalake(other, rows.toArrow(), partition_by=["lang"])
    assert spark_rows(read_table(spark, other)) == spark_rows(rows)
    with pytest.raises(DatasetNotFoundError, match="Delta table without a cr5 manifest"):
        read_manifest(spark, DOCUMENTS, other)
    with pytest.raises(DatasetNotFoundError, match="does not exist.*run the 'ingest' stage"):
        read_manifest(spark, DOCUMENTS, str(tmp_path / "nothing"))


def test_clear_error_without_deltalake(spark, tmp_path, monkeypatch, no_jars):
    table = str(tmp_path / "table")
    write_dataset(spark, docs(spark, 2, "x"), DOCUMENTS, table, format="delta")
    monkeypatch.setitem(sys.modules, "deltalake", None)  # import deltalake -> ImportError
    monkeypatch.setitem(sys.modules, "deltalake.transaction", None)
    path = str(tmp_path / "documents")
    with pytest.raises(ConfigError, match=r"pip install 'cr5-on-spark\[delta\]'"):
        write_dataset(spark, docs(spark, 2, "x"), DOCUMENTS, path, format="delta")
    assert not os.path.exists(path)  # refused before writing anything
    with pytest.raises(ConfigError, match=r"pip install 'cr5-on-spark\[delta\]'"):
        read_dataset(spark, DOCUMENTS, table)
    # The manifest is read from the log itself: no deltalake needed.
    assert read_manifest(spark, DOCUMENTS, table)["delta_version"] == 0


def test_native_route_is_taken_when_jars_are_present(spark, tmp_path, monkeypatch):
    assert delta.native_available(spark) is False  # no Delta jars on this classpath
    monkeypatch.setattr(delta, "native_available", lambda spark: True)
    # Without the jars Spark cannot find the "delta" data source: proof of the route.
    with pytest.raises(Exception, match="(?i)delta"):
        write_dataset(spark, docs(spark, 1, "x"), DOCUMENTS, str(tmp_path / "d"), format="delta")
