"""deploy/submit.sh on a real Spark standalone cluster (a master and two workers on 127.0.0.1).

The slow test starts a master and two workers from pip's pyspark (two executor JVMs, each
with its own Python workers, the driver apart), submits the whole demo
chain on the bundled sample through ``deploy/submit.sh --master spark://127.0.0.1:P``
and checks that every dataset equals the same chain run in local mode; it stops what
it started by PID. The fast tests check submit.sh's command lines (``--dry-run``).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import REPO, SAMPLE, load_standalone

SUBMIT = REPO / "deploy" / "submit.sh"

# The demo chain, kept fast: r = 20, one λ (no selection; train.lam = 1.0), no baselines.
# Training uses the Spark backend, so its in-task CG solves run on the cluster's executors.
SAMPLE_ARGS = [
    "--conf", str(REPO / "conf" / "local.yaml"),
    "--conf", str(REPO / "conf" / "short-docs.yaml"),
    "--conf", str(REPO / "conf" / "sample.yaml"),
    "--set", f"ingest.input={SAMPLE}",
    "--set", "train.r=20",
    "--set", "train.backend=spark",
    "--set", "evaluate.lambda_grid=[1.0]",
    "--set", "evaluate.methods=[]",
]  # fmt: skip


def submit(
    *args: str, cwd: Path | None = None, timeout: float = 600
) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHON=sys.executable)
    return subprocess.run(
        ["bash", str(SUBMIT), *args],
        capture_output=True,
        text=True,
        cwd=cwd or REPO,
        env=env,
        timeout=timeout,
        check=False,
    )


def run_chain(master: str, root: Path) -> float:
    """Run the demo chain through submit.sh; return its wall time in seconds."""
    root.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    proc = submit(
        "--master", master, "--driver-memory", "2g",
        "demo", *SAMPLE_ARGS, "--set", f"paths.root={root / 'out'}",
        cwd=root,
    )  # fmt: skip
    wall = time.perf_counter() - t0
    (root / "submit.log").write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, f"chain on {master} failed:\n{proc.stderr[-4000:]}"
    return wall


def table(path: Path, keys: list[str]) -> pa.Table:
    """A Parquet dataset (hive-partitioned directory), sorted by ``keys``, columns by name."""
    t = pq.read_table(path)
    t = t.select(sorted(t.column_names))
    for i, field in enumerate(t.schema):
        if pa.types.is_dictionary(field.type):
            t = t.set_column(i, field.name, t.column(i).cast(pa.string()))
    return t.sort_by([(k, "ascending") for k in keys])


# --------------------------------------------------------------------------- fast


def test_dry_run_yarn_with_packed_environment():
    proc = submit(
        "--dry-run", "--master", "yarn", "--deploy-mode", "cluster",
        "--env-archive", "cr5-env.tar.gz", "--spark-conf", "spark.executor.instances=4",
        "tfidf", "--conf", "conf/cluster.yaml",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    cmd = " ".join(shlex.split(proc.stdout))
    assert "--master yarn --deploy-mode cluster" in cmd
    assert "--archives cr5-env.tar.gz#env" in cmd
    assert "spark.pyspark.python=./env/bin/python" in cmd
    assert "spark.yarn.appMasterEnv.PYSPARK_PYTHON=./env/bin/python" in cmd
    assert "spark.executor.instances=4" in cmd
    assert "--py-files " in cmd and "cr5_pipeline-" in cmd
    assert cmd.rstrip().endswith("jobs/tfidf.py --conf conf/cluster.yaml")


def test_dry_run_chain_uses_chain_entry_point():
    proc = submit("--dry-run", "--master", "spark://127.0.0.1:7077", "ingest,split", "--set", "a=1")
    assert proc.returncode == 0, proc.stderr
    cmd = " ".join(shlex.split(proc.stdout))
    assert "jobs/chain.py --stages ingest,split --set a=1" in cmd
    assert "spark.driver.bindAddress=127.0.0.1" in cmd


def test_library_zip_holds_the_package():
    import zipfile

    proc = submit("--dry-run", "ingest")
    assert proc.returncode == 0, proc.stderr
    [zip_path] = [w for w in proc.stdout.split() if w.endswith(".zip")]
    names = zipfile.ZipFile(zip_path).namelist()
    assert "pipeline/__init__.py" in names and "pipeline/runner.py" in names
    assert not any("__pycache__" in n or n.endswith(".pyc") for n in names)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nosuchstage"], "unknown stage"),
        (["--master", "spark://h:7077", "--deploy-mode", "cluster", "ingest"], "standalone"),
        (["--python", "x", "--env-archive", "y", "ingest"], "not both"),
        (["--bogus", "ingest"], "unknown option"),
    ],
)
def test_bad_arguments_exit_2(args, message):
    proc = submit("--dry-run", *args)
    assert proc.returncode == 2
    assert message in proc.stderr


# --------------------------------------------------------------------------- slow


@pytest.mark.slow
def test_chain_on_standalone_cluster_equals_local_mode(tmp_path):
    standalone = load_standalone()
    local_wall = run_chain("local[2]", tmp_path / "local")
    with standalone.StandaloneCluster(
        tmp_path / "cluster", cores=1, memory="2g", workers=2
    ) as cluster:
        pids = [p.pid for p in cluster.procs]
        cluster_wall = run_chain(cluster.master_url, tmp_path / "standalone")
        apps = cluster.status().get("completedapps", []) + cluster.status().get("activeapps", [])
        assert any(app.get("name") == "cr5" for app in apps), apps
        # both workers ran executors of the chain (two executor JVMs, not one)
        for index in range(2):
            work = tmp_path / "cluster" / "worker" / str(index)
            assert any(work.glob("app-*/*/stderr")), f"worker {index} ran no executor"
    for pid in pids:  # stopped by PID: the processes are gone
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    print(f"\nchain wall time: local[2] {local_wall:.1f} s, standalone {cluster_wall:.1f} s")

    local, remote = tmp_path / "local" / "out", tmp_path / "standalone" / "out"
    # trained on the Spark backend: the sample's languages are single blocks, so every CG
    # solve ran inside an executor task
    for out in (local, remote):
        meta = json.loads((out / "model" / "model.json").read_text())
        assert meta["training"]["backend"] == "spark"
        assert meta["training"]["passes_over_x"]["passes"]["gram"] > 0
    # Row for row: the TF-IDF matrix, vocabulary, documents and splits.
    for name, keys in [
        ("tfidf", ["lang", "row"]),
        ("vocabulary", ["lang", "term_index"]),
        ("documents", ["doc_id"]),
        ("splits", ["pair", "role", "concept_id"]),
        ("concepts", ["concept_index"]),
    ]:
        a, b = table(local / name, keys), table(remote / name, keys)
        assert a.num_rows > 0
        assert a.equals(b), f"dataset {name} differs between local mode and the cluster"

    # Embeddings and the evaluation table, to rounding.
    a = table(local / "embeddings", ["doc_id"]).to_pandas()
    b = table(remote / "embeddings", ["doc_id"]).to_pandas()
    assert a["doc_id"].tolist() == b["doc_id"].tolist()
    np.testing.assert_allclose(
        np.stack(a["vector"].to_numpy()), np.stack(b["vector"].to_numpy()), atol=1e-5
    )
    keys = ["split", "query_lang", "target_lang", "measure", "metric", "k"]
    a = table(local / "evaluation", keys).to_pandas()
    b = table(remote / "evaluation", keys).to_pandas()
    assert len(a) == len(b) > 0
    assert a[keys].equals(b[keys])
    np.testing.assert_allclose(a["value"], b["value"], atol=1e-4)
