"""deploy/submit.sh on a real Spark standalone cluster (a master and two workers on 127.0.0.1).

The slow test starts a master and two workers from pip's pyspark (two executor JVMs, each
with its own Python workers, the driver apart), packs the executors' environment with
deploy/pack_env.sh, submits the whole demo chain on the bundled sample through
``deploy/submit.sh --master spark://127.0.0.1:P --pack-env`` and checks that every dataset
equals the same chain run in local mode, and that the executors ran the Python of the archive
unpacked in their work directories (a probe script submitted the same way reports
``sys.executable``); it stops what it started by PID. The cluster's chain adds the index
stage and writes under a ``viewfs://`` root (a Hadoop mount table onto the test's directory,
a scheme only Hadoop resolves) from an empty working directory; then a search query reads
the index there, and runs killed mid-upload of the model and of the index leave the
previous ones readable and unchanged. The fast tests check submit.sh's and
pack_env.sh's command lines (``--dry-run``).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
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
PACK_ENV = REPO / "deploy" / "pack_env.sh"

# The demo chain, kept fast: two of the sample's languages (one pair, two directions), r = 20,
# one λ (no selection; train.lam = 1.0), no baselines. Training uses the Spark backend, so its
# in-task CG solves run on the cluster's executors.
SAMPLE_ARGS = [
    "--conf", str(REPO / "conf" / "local.yaml"),
    "--conf", str(REPO / "conf" / "short-docs.yaml"),
    "--conf", str(REPO / "conf" / "sample.yaml"),
    "--set", f"ingest.input={SAMPLE}",
    "--set", "ingest.languages=[en, de]",
    "--set", "train.r=20",
    "--set", "train.backend=spark",
    "--set", "evaluate.lambda_grid=[1.0]",
    "--set", "evaluate.methods=[]",
]  # fmt: skip


def submit(
    *args: str, cwd: Path | None = None, timeout: float = 1200
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


def pack_env(*args: str, timeout: float = 1200) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(PACK_ENV), "--python", sys.executable, *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=timeout,
        check=False,
    )


def run_chain(
    master: str,
    root: Path,
    *options: str,
    stages: str = "demo",
    paths_root: str | None = None,
    job_args: tuple[str, ...] = (),
) -> float:
    """Run ``stages`` through submit.sh (``options`` before the stage, ``job_args`` after the
    sample's) from an empty working directory ``root/cwd``, datasets under ``paths_root``
    (default ``root/out``); return its wall time in seconds."""
    cwd = root / "cwd"
    cwd.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    proc = submit(
        "--master", master, "--driver-memory", "2g", *options,
        stages, *SAMPLE_ARGS, "--set", f"paths.root={paths_root or root / 'out'}",
        *job_args,
        cwd=cwd,
    )  # fmt: skip
    wall = time.perf_counter() - t0
    (root / "submit.log").write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, f"chain on {master} failed:\n{proc.stderr[-4000:]}"
    return wall


def viewfs_profile(path: Path, table: str, target: Path) -> Path:
    """A profile mounting ``viewfs://<table>/data`` onto the local directory ``target``
    (a URI scheme only Hadoop resolves: Python's file API cannot write through it)."""
    path.write_text(
        "spark:\n  conf:\n"
        f"    spark.hadoop.fs.viewfs.mounttable.{table}.link./data: {target.as_uri()}\n"
    )
    return path


def files_of(directory: Path) -> dict[str, bytes]:
    """Every file below ``directory`` (Hadoop's local ``.crc`` checksums aside) and its bytes."""
    return {
        str(p.relative_to(directory)): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and not p.name.endswith(".crc")
    }


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
    # cluster mode: the driver runs in the cluster, from the archive too
    assert "spark.pyspark.driver.python" not in cmd
    assert "spark.executor.instances=4" in cmd
    assert "--py-files " in cmd and "cr5_pipeline-" in cmd
    assert cmd.rstrip().endswith("jobs/tfidf.py --conf conf/cluster.yaml")


def test_dry_run_chain_uses_chain_entry_point():
    proc = submit("--dry-run", "--master", "spark://127.0.0.1:7077", "ingest,split", "--set", "a=1")
    assert proc.returncode == 0, proc.stderr
    cmd = " ".join(shlex.split(proc.stdout))
    assert "jobs/chain.py --stages ingest,split --set a=1" in cmd
    assert "spark.driver.bindAddress=127.0.0.1" in cmd


def test_dry_run_pack_env_ships_the_packed_archive():
    proc = submit(
        "--dry-run", "--master", "spark://127.0.0.1:7077", "--pack-env=search", "index",
        "--conf", "conf/cluster.yaml",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    cmd = " ".join(shlex.split(proc.stdout))
    # the archive pack_env.sh names for the same groups (a dry run builds nothing)
    expected = pack_env("--dry-run", "--with", "search")
    assert expected.returncode == 0, expected.stderr
    archive = expected.stdout.strip()
    assert re.fullmatch(
        rf"{re.escape(str(REPO))}/build/deploy/cr5-env-[0-9a-f]{{12}}\.tar\.gz", archive
    )
    assert f"--archives {archive}#env" in cmd
    assert "spark.pyspark.python=./env/bin/python" in cmd
    # client mode: the driver runs here, not from ./env
    assert f"spark.pyspark.driver.python={sys.executable}" in cmd
    assert cmd.rstrip().endswith("jobs/index.py --conf conf/cluster.yaml")


def test_pack_env_dry_run_names_the_archive_by_its_inputs():
    base, search, both = (
        pack_env("--dry-run", *args)
        for args in ([], ["--with", "search"], ["--with=neural,search"])
    )
    for proc in (base, search, both):
        assert proc.returncode == 0, proc.stderr
        assert re.fullmatch(r".*/build/deploy/cr5-env-[0-9a-f]{12}\.tar\.gz", proc.stdout.strip())
    # one archive per set of groups; the same inputs name the same archive
    assert len({base.stdout, search.stdout, both.stdout}) == 3
    assert pack_env("--dry-run", "--with", "search").stdout == search.stdout
    assert pack_env("--dry-run", "--with", "neural", "--with", "search").stdout == both.stdout
    # the runtime dependencies without pyspark (Spark's own pyspark.zip serves the executors)
    prefix = "pack_env.sh:   "
    listed = [line[len(prefix) :] for line in base.stderr.splitlines() if line.startswith(prefix)]
    assert {"numpy", "scipy", "pyarrow", "pandas", "PyYAML"} <= {
        re.split("[<>=]", r)[0] for r in listed
    }
    assert not any(r.lower().startswith("pyspark") for r in listed)
    assert any(r.startswith("faiss-cpu") for r in search.stderr.split())
    assert any(r.startswith("torch") for r in both.stderr.split())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--with", "nosuchgroup"], "no group 'nosuchgroup'"),
        (["--with", "dev"], "no group 'dev'"),
        (["--with", "connect"], "no group 'connect'"),
        (["--bogus"], "unknown argument"),
        (["--python-prefix", "usr"], "absolute path"),
    ],
)
def test_pack_env_bad_arguments_exit_2(args, message):
    proc = pack_env("--dry-run", *args)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert proc.stdout == ""


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
        (["--python", "x", "--env-archive", "y", "ingest"], "only one of"),
        (["--pack-env", "--env-archive", "y", "ingest"], "only one of"),
        (["--master", "local[2]", "--pack-env", "ingest"], "need a cluster master"),
        (["--master", "yarn", "--pack-env=dev", "ingest"], "no group 'dev'"),
        (["no_such_script.py"], "no such script"),
        (["--bogus", "ingest"], "unknown option"),
    ],
)
def test_bad_arguments_exit_2(args, message):
    proc = submit("--dry-run", *args)
    assert proc.returncode == 2
    assert message in proc.stderr


# --------------------------------------------------------------------------- slow


# Submitted like a stage: where the executors' Python, numpy, pyspark and the library come from.
PROBE = """
import json, os, sys, time
from pyspark.sql import SparkSession

def where(_):
    import numpy, pyspark, pipeline
    time.sleep(0.5)  # keep both executors busy
    return {"executable": sys.executable, "prefix": sys.prefix, "cwd": os.getcwd(),
            "numpy": numpy.__file__, "pyspark": pyspark.__file__, "pipeline": pipeline.__file__}

sc = SparkSession.builder.appName("cr5-env-probe").getOrCreate().sparkContext
deadline = time.monotonic() + 90
while sc._jsc.sc().getExecutorMemoryStatus().size() < 3 and time.monotonic() < deadline:
    time.sleep(0.5)  # the driver and both executors
with open(sys.argv[1], "w") as f:
    json.dump(sc.parallelize(range(8), 8).map(where).collect(), f)
"""


@pytest.mark.slow
def test_chain_on_standalone_cluster_equals_local_mode(tmp_path, spark, monkeypatch):
    standalone = load_standalone()
    # The executors' environment: built once, then reused while pyproject's dependencies and
    # the Python stay the same. The chain needs faiss (the index stage's CSLS job runs on the
    # executors), no neural or classification method.
    t0 = time.perf_counter()
    packed = pack_env("--with", "search")
    pack_wall = time.perf_counter() - t0
    assert packed.returncode == 0, packed.stderr[-4000:]
    archive = Path(packed.stdout.strip().splitlines()[-1])
    assert archive.is_file() and archive.name.startswith("cr5-env-")

    local_wall = run_chain("local[2]", tmp_path / "local")
    workers = tmp_path / "cluster" / "worker"
    with standalone.StandaloneCluster(
        tmp_path / "cluster", cores=1, memory="2g", workers=2
    ) as cluster:
        pids = [p.pid for p in cluster.procs]
        # The cluster's run root is a viewfs:// URI (a Hadoop mount table onto
        # tmp_path/standalone): the datasets and everything the driver writes itself go
        # through Hadoop's FileSystem, or the run fails.
        profile = viewfs_profile(tmp_path / "viewfs.yaml", VIEWFS_TABLE, tmp_path / "standalone")
        cluster_wall = run_chain(
            cluster.master_url, tmp_path / "standalone", "--pack-env=search",
            stages="ingest,split,vocabulary,tfidf,train,embed,index,evaluate",
            paths_root=VIEWFS_ROOT, job_args=("--conf", str(profile)),
        )  # fmt: skip
        apps = cluster.status().get("completedapps", []) + cluster.status().get("activeapps", [])
        assert any(app.get("name") == "cr5" for app in apps), apps
        # both workers ran executors of the chain (two executor JVMs, not one), each with the
        # archive unpacked as ./env in its work directory
        for index in range(2):
            work = workers / str(index)
            assert any(work.glob("app-*/*/stderr")), f"worker {index} ran no executor"
            envs = list(work.glob("app-*/*/env"))
            assert envs, f"worker {index}: no unpacked env/ in {work}"
            for env in envs:
                assert (env / "pyvenv.cfg").is_file() and (env / "bin" / "python").exists()

        # The executors' Python is the unpacked archive's, not the driver's virtualenv.
        probe = tmp_path / "probe.py"
        probe.write_text(PROBE)
        proc = submit(
            "--master", cluster.master_url, "--driver-memory", "1g", "--pack-env=search",
            str(probe), str(tmp_path / "probe.json"), cwd=tmp_path,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-4000:]
        seen = json.loads((tmp_path / "probe.json").read_text())
    for pid in pids:  # stopped by PID: the processes are gone
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)

    venv = str(Path(sys.prefix))
    for row in seen:
        exe = row["executable"]
        assert exe == os.path.join(row["cwd"], "env", "bin", "python"), row
        assert exe.startswith(f"{workers}{os.sep}") and not exe.startswith(venv), row
        assert row["prefix"] == os.path.join(row["cwd"], "env"), row
        # the dependencies from the archive; pyspark from Spark's own pyspark.zip; the library
        # from submit.sh's --py-files zip
        assert row["numpy"].startswith(row["prefix"] + os.sep), row
        assert "pyspark.zip" in row["pyspark"] and not row["pyspark"].startswith(row["prefix"]), row
        assert "cr5_pipeline-" in row["pipeline"], row
    assert len({row["cwd"] for row in seen}) == 2, "the probe ran on one executor only"
    print(
        f"\nenvironment archive {archive.name}: {archive.stat().st_size / 2**20:.0f} MB,"
        f" pack_env.sh {pack_wall:.1f} s"
        f"\nchain wall time: local[2] {local_wall:.1f} s, standalone {cluster_wall:.1f} s"
    )
    for env in workers.glob("*/app-*/*/env"):  # 0.5 GB unpacked per executor
        shutil.rmtree(env, ignore_errors=True)

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

    # Everything the driver wrote itself is on the store; nothing in its working directory.
    assert list((tmp_path / "standalone" / "cwd").iterdir()) == []
    for name in ("model/model.json", "index/_manifest.json", "reports/evaluation.json"):
        assert (remote / name).is_file(), name
    assert (remote / "reports" / "evaluation.md").read_text().strip()
    assert list((remote / "logs").glob("*.log")), "no run log on the store"

    # A search query on the index there, read through this session's Hadoop FileSystem.
    spark.sparkContext._jsc.hadoopConfiguration().set(
        f"fs.viewfs.mounttable.{VIEWFS_TABLE}.link./data", (tmp_path / "standalone").as_uri()
    )
    monkeypatch.setenv("CR5_CACHE_DIR", str(tmp_path / "cache"))
    assert_search_finds_counterparts(remote)

    # The same chain killed while it publishes the model, and the index, to that storage:
    # the previous model and index stay readable, unchanged and verified.
    check_killed_publishes(tmp_path, profile, remote)


VIEWFS_TABLE = "cr5cluster"
VIEWFS_ROOT = f"viewfs://{VIEWFS_TABLE}/data/out"


def assert_search_finds_counterparts(out: Path) -> None:
    """English test documents find their German counterparts among the top 5 (Cr5 at r = 20
    on the sample: P@5 above 0.8 in the evaluation; asked of 15 of 20 queries here)."""
    from pipeline.search import SearchIndex

    index = SearchIndex.open(f"{VIEWFS_ROOT}/index")
    docs = pq.read_table(out / "documents", columns=["doc_id", "concept_id", "lang", "text"])
    splits = pq.read_table(out / "splits").to_pandas()
    test = set(splits[(splits["pair"] == "de-en") & (splits["role"] == "test")]["concept_id"])
    frame = docs.to_pandas()
    en = frame[(frame["lang"] == "en") & frame["concept_id"].isin(test)].sort_values("doc_id")
    queries = en.head(20)
    hits = index.query(queries["text"].tolist(), "en", "de", k=5)
    assert len(hits) == 20 and all(len(h) == 5 for h in hits)
    found = sum(
        concept in {hit.concept_id for hit in row}
        for concept, row in zip(queries["concept_id"], hits, strict=True)
    )
    assert found >= 15, f"only {found} of 20 English queries found their German document"


def check_killed_publishes(tmp_path: Path, profile: Path, out: Path) -> None:
    """Kill (SIGKILL) a run mid-upload of the model, and one mid-upload of the index
    (tests/killed_publish.py); after each the store's model and index are the ones before,
    byte for byte, and load with every checksum verified."""
    from pipeline.model import Cr5Model
    from pipeline.search import SearchIndex

    model_before, index_before = files_of(out / "model"), files_of(out / "index")
    job = [
        *SAMPLE_ARGS, "--conf", str(profile), "--set", f"paths.root={VIEWFS_ROOT}",
        "--set", "spark.master=local[2]", "--set", "spark.driver_memory=1g",
        "--set", "train.backend=local", "--set", "train.r=12",
    ]  # fmt: skip
    cwd = tmp_path / "killed-cwd"
    cwd.mkdir()
    # (A writer killed between its two renames: tests/test_storage.py, on viewfs too.)
    for target, stage in [("model", "train"), ("index", "index")]:
        proc = subprocess.run(
            [sys.executable, str(REPO / "tests" / "killed_publish.py"), target,
             "--stages", stage, *job],
            capture_output=True, text=True, cwd=cwd, timeout=900, check=False,
        )  # fmt: skip
        assert proc.returncode == -signal.SIGKILL, (
            f"{target}: exit {proc.returncode}\n{proc.stderr[-3000:]}"
        )
        model = Cr5Model.load(f"{VIEWFS_ROOT}/model")  # every SHA-256 checked on load
        assert model.dim == 20, f"{target}: the half-published model is visible"
        assert files_of(out / "model") == model_before, f"{target}: model changed"
        index = SearchIndex.open(f"{VIEWFS_ROOT}/index")
        assert index.query("package manager", "en", "de", k=3), target
        assert files_of(out / "index") == index_before, f"{target}: index changed"
    assert list(cwd.iterdir()) == []
