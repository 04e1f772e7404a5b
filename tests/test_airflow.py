"""The Airflow DAG deploy/airflow/cr5_dag.py (``cr5_retrain``), driven through ./.venv-airflow.

Airflow lives in a virtual environment of its own (``bash scripts/setup_airflow.sh``), not
in the project's .venv, so every test runs Airflow in a subprocess of .venv-airflow's
Python or ``airflow`` CLI. The fast tests load the DAG folder with DagBag (no metadata
database) and assert the task graph, parameters, retries and schedule, and the command
lines the tasks build. The slow test runs the whole DAG with ``airflow dags test``
against a Spark standalone cluster (deploy/standalone.py) on the bundled sample.

Without .venv-airflow the tests fail and say how to create it; CR5_SKIP_AIRFLOW=1 skips
them instead.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, SAMPLE, load_standalone

AIRFLOW_VENV = REPO / ".venv-airflow"
DAG_FOLDER = REPO / "deploy" / "airflow"
DAG_FILE = DAG_FOLDER / "cr5_dag.py"
PROJECT_BIN = REPO / ".venv" / "bin"
CHAIN = ["ingest", "split", "vocabulary", "tfidf", "train", "embed", "evaluate"]
#: Tasks off the chain, and the chain task each runs after.
BRANCHES = {"index": "embed"}
LOGICAL_DATE = "2025-01-03T03:00:00+00:00"
RUN_KEY = "20250103T030000"


def airflow_venv(venv: Path | None = None) -> Path:
    """.venv-airflow, or fail (skip with CR5_SKIP_AIRFLOW=1) saying how to create it."""
    venv = venv or AIRFLOW_VENV
    if (venv / "bin" / "airflow").exists() and (venv / "bin" / "python").exists():
        return venv
    if os.environ.get("CR5_SKIP_AIRFLOW") == "1":
        pytest.skip(f"CR5_SKIP_AIRFLOW=1 and no Airflow environment at {venv}")
    pytest.fail(
        f"no Airflow environment at {venv}: run `bash scripts/setup_airflow.sh` "
        "(or set CR5_SKIP_AIRFLOW=1 to skip the Airflow tests)",
        pytrace=False,
    )


def airflow_env(home: Path, **extra: str) -> dict[str, str]:
    """An environment for .venv-airflow: AIRFLOW_HOME in ``home``, the project's bin first."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("AIRFLOW") and k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")
    }
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__DAGS_FOLDER=str(DAG_FOLDER),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        # spark-submit and the driver's Python come from the project's environment.
        PATH=f"{PROJECT_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        OPENBLAS_NUM_THREADS="1",
        **extra,
    )
    return env


def run(cmd: list[str], env: dict[str, str], timeout: float, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False, **kw
    )


# Runs in .venv-airflow: load the DAG folder with DagBag and describe what it holds.
DAGBAG_SNIPPET = r"""
import copy, datetime as dt, importlib.util, inspect, json, os, sys, types
from airflow.dag_processing.dagbag import DagBag
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

folder, dag_file = sys.argv[1], sys.argv[2]
kwargs = {"dag_folder": folder}
if "include_examples" in inspect.signature(DagBag.__init__).parameters:  # Airflow 2
    kwargs["include_examples"] = False
bag = DagBag(**kwargs)
out = {"import_errors": {str(k): str(v) for k, v in bag.import_errors.items()},
       "dag_ids": sorted(bag.dag_ids)}
dag = bag.dags.get("cr5_retrain")
seconds = lambda delta: delta.total_seconds() if delta else None
if dag is not None:
    tasks = {}
    for t in dag.tasks:
        tasks[t.task_id] = {
            "class": type(t).__name__,
            "is_spark_submit": isinstance(t, SparkSubmitOperator),
            "stage": getattr(t, "stage", None),
            "conn_id": getattr(t, "cr5_conn_id", None),
            "upstream": sorted(t.upstream_task_ids),
            "downstream": sorted(t.downstream_task_ids),
            "retries": t.retries,
            "retry_delay": t.retry_delay.total_seconds(),
            "retry_exponential_backoff": t.retry_exponential_backoff,
            "max_retry_delay": seconds(t.max_retry_delay),
            "execution_timeout": seconds(t.execution_timeout),
            "outlets": [{"name": a.name, "uri": a.uri, "group": a.group} for a in t.outlets],
        }
    bad = {}
    for name, value in [("lambda_grid", [-1.0]), ("lambda_grid", []), ("profiles", []),
                        ("overrides", ["no-equals-sign"]), ("driver_memory", "lots"),
                        ("languages", ["en de"])]:
        p = copy.deepcopy(dag.params)
        try:  # ParamsDict validates on assignment, and validate() checks the whole
            p.update({name: value})
            p.validate()
            bad[f"{name}={value}"] = "accepted"
        except Exception as exc:
            bad[f"{name}={value}"] = type(exc).__name__
    out["dag"] = {
        "task_ids": list(dag.task_ids),
        "topological": [t.task_id for t in dag.topological_sort()]
        if hasattr(dag, "topological_sort") else None,
        "tasks": tasks,
        "params": dag.params.validate(),
        "bad_params": bad,
        "schedule": getattr(dag.timetable, "expression", None),
        "timetable": type(dag.timetable).__name__,
        "catchup": dag.catchup,
        "max_active_runs": dag.max_active_runs,
        "tags": sorted(dag.tags),
    }

# The module's helpers: command lines, run keys, masters.
spec = importlib.util.spec_from_file_location("cr5_dag_under_test", dag_file)
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
p = dict(out["dag"]["params"]) if dag is not None else {}
p.update(repo="/srv/cr5", profiles=["conf/cluster.yaml", "/etc/cr5/site.yaml"],
         corpus="hdfs:///dumps/20250101/docs: new", languages=["en", "de"],
         lambda_grid=[0.1, 1, 10], overrides=["train.r=50"])
single = dict(p, lambda_grid=[2.5], corpus=None, languages=[], overrides=[])
utc, plus_one = dt.timezone.utc, dt.timezone(dt.timedelta(hours=1))
os.environ["AIRFLOW_CONN_CR5_LOOPBACK"] = "spark://127.0.0.1:7077"
os.environ["AIRFLOW_CONN_CR5_JSON"] = json.dumps({"conn_type": "spark", "host": "local[2]"})
os.environ["AIRFLOW_CONN_CR5_YARN"] = json.dumps({"conn_type": "spark", "host": "yarn"})
def outcome(fn, *args):
    try:
        return fn(*args)
    except Exception as exc:
        return type(exc).__name__ + ": " + str(exc)
out["helpers"] = {
    "args": mod.stage_arguments(p, "hdfs:///runs/K", "/local/runs/K"),
    "args_single": mod.stage_arguments(single, "/runs/K"),
    "paths_local": outcome(mod.run_paths, {"root": "/data/runs/", "driver_root": None}, "K"),
    "paths_remote": outcome(mod.run_paths, {"root": "hdfs:///runs", "driver_root": "/local/runs/"},
                            "K"),
    "paths_remote_alone": outcome(mod.run_paths, {"root": "hdfs:///runs", "driver_root": None},
                                  "K"),
    "paths_remote_driver": outcome(mod.run_paths, {"root": "/runs", "driver_root": "s3a://b/x"},
                                   "K"),
    "key_logical": mod.run_key({"logical_date": dt.datetime(2025, 1, 3, 4, tzinfo=plus_one)}),
    "key_run_after": mod.run_key(
        {"dag_run": types.SimpleNamespace(run_after=dt.datetime(2025, 2, 1, 12, 30, 5, tzinfo=utc))}
    ),
    "on_this_machine": {m: mod.is_on_this_machine(m) for m in [
        "local[2]", "spark://127.0.0.1:7077", "spark://localhost:7077", "spark://127.0.0.10:7077",
        "spark://node1:7077", "spark://127.0.0.1:7077,node1:7077", "yarn", "k8s://https://127.0.0.1:6443"]},
    "masters": {c: [mod._master(c), SparkSubmitHook(conn_id=c)._connection["master"]]
                for c in ["cr5_loopback", "cr5_json", "cr5_yarn"]},
    "asset_extra": {
        name: mod.asset_extra(name, outputs, "K", "/runs/K")
        for name, outputs in [
            ("documents", {"datasets": {"documents": {"path": "/runs/K/documents", "rows": 7,
                                                      "rows_by_lang": {"de": 3, "en": 4}}}}),
            ("model", {"datasets": {}, "model": {"path": "/d/K/model", "version": "sha256:ab",
                                                  "languages": ["de", "en"], "r": 20}}),
            ("embeddings", {"datasets": {"embeddings": {"path": "/runs/K/embeddings",
                                                        "rows": 7}},
                            "model": {"path": "/d/K/model", "version": "sha256:ab"}}),
            ("nothing", {}),
        ]
    },
}
# A deployment's settings: manual runs only, no retries, its own parameter defaults.
os.environ["CR5_SCHEDULE"] = "none"
os.environ["CR5_RETRIES"] = "0"
os.environ["CR5_PARAMS"] = json.dumps(
    {"root": "hdfs:///cr5", "driver_root": "/srv/cr5", "lambda_grid": [3.0]}
)
spec = importlib.util.spec_from_file_location("cr5_dag_manual", dag_file)
manual = importlib.util.module_from_spec(spec)
spec.loader.exec_module(manual)
out["manual"] = {"timetable": type(manual.dag.timetable).__name__,
                 "retries": manual.dag.get_task("train").retries,
                 "params": {k: v for k, v in manual.dag.params.validate().items()
                            if k in ("root", "driver_root", "lambda_grid", "corpus")}}
os.environ["CR5_PARAMS"] = json.dumps({"rooot": "/x"})
spec = importlib.util.spec_from_file_location("cr5_dag_typo", dag_file)
try:
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    out["typo"] = "loaded"
except ValueError as exc:
    out["typo"] = str(exc)
print("CR5-JSON " + json.dumps(out, default=str))
"""


@pytest.fixture(scope="module")
def dagbag(tmp_path_factory) -> dict:
    """What DagBag finds in deploy/airflow/ (one subprocess for the fast tests)."""
    venv = airflow_venv()
    home = tmp_path_factory.mktemp("airflow-home")
    t0 = time.perf_counter()
    proc = run(
        [str(venv / "bin" / "python"), "-c", DAGBAG_SNIPPET, str(DAG_FOLDER), str(DAG_FILE)],
        airflow_env(home),
        timeout=300,
        cwd=home,
    )
    wall = time.perf_counter() - t0
    assert proc.returncode == 0, (
        f"DagBag snippet failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    )
    [line] = [ln for ln in proc.stdout.splitlines() if ln.startswith("CR5-JSON ")]
    print(f"\nDagBag load and checks: {wall:.1f} s")
    return json.loads(line[len("CR5-JSON ") :])


# --------------------------------------------------------------------------- fast


def test_missing_airflow_venv_fails_with_setup_hint(tmp_path, monkeypatch):
    monkeypatch.delenv("CR5_SKIP_AIRFLOW", raising=False)
    with pytest.raises(pytest.fail.Exception, match=r"bash scripts/setup_airflow\.sh"):
        airflow_venv(tmp_path / "nowhere")
    monkeypatch.setenv("CR5_SKIP_AIRFLOW", "1")
    with pytest.raises(pytest.skip.Exception):
        airflow_venv(tmp_path / "nowhere")


def test_dag_folder_loads_without_import_errors(dagbag):
    assert dagbag["import_errors"] == {}
    assert dagbag["dag_ids"] == ["cr5_retrain"]


def test_task_graph_is_the_stage_chain(dagbag):
    dag = dagbag["dag"]
    tasks = dag["tasks"]
    assert sorted(tasks) == sorted(CHAIN + list(BRANCHES))
    if dag["topological"] is not None:
        order = dag["topological"]
        assert [t for t in order if t in CHAIN] == CHAIN
        for stage, after in BRANCHES.items():
            assert order.index(stage) > order.index(after)
    for i, stage in enumerate(CHAIN):
        t = tasks[stage]
        assert t["class"] == "Cr5StageOperator" and t["is_spark_submit"]
        assert t["stage"] == stage
        assert t["conn_id"] == "spark_default"
        assert t["upstream"] == ([CHAIN[i - 1]] if i else [])
        branches = [b for b, after in BRANCHES.items() if after == stage]
        assert t["downstream"] == sorted(([CHAIN[i + 1]] if i + 1 < len(CHAIN) else []) + branches)
    for stage, after in BRANCHES.items():
        t = tasks[stage]
        assert t["class"] == "Cr5StageOperator" and t["stage"] == stage
        assert t["upstream"] == [after] and t["downstream"] == []


def test_tasks_declare_the_assets_they_update(dagbag):
    tasks = dagbag["dag"]["tasks"]
    outlets = {stage: [a["name"] for a in t["outlets"]] for stage, t in tasks.items()}
    assert outlets == {
        "ingest": ["cr5/documents"],
        "split": [],
        "vocabulary": [],
        "tfidf": [],
        "train": ["cr5/model"],
        "embed": ["cr5/embeddings"],
        "index": ["cr5/index"],
        "evaluate": [],
    }
    assert tasks["embed"]["outlets"][0] == {
        "name": "cr5/embeddings",
        "uri": "x-cr5://cr5_retrain/embeddings",
        "group": "cr5",
    }
    # What each event's extra holds: the run, the manifest's rows, the model's version.
    extra = dagbag["helpers"]["asset_extra"]
    assert extra["documents"] == {
        "run_key": "K",
        "root": "/runs/K",
        "path": "/runs/K/documents",
        "rows": 7,
        "rows_by_lang": {"de": 3, "en": 4},
    }
    assert extra["model"] == {
        "run_key": "K",
        "root": "/runs/K",
        "path": "/d/K/model",
        "model_version": "sha256:ab",
        "languages": ["de", "en"],
        "r": 20,
    }
    assert extra["embeddings"]["rows"] == 7
    assert extra["embeddings"]["model_version"] == "sha256:ab"
    assert extra["nothing"] == {"run_key": "K", "root": "/runs/K"}


def test_retries_schedule_and_runs(dagbag):
    dag = dagbag["dag"]
    for t in dag["tasks"].values():
        assert t["retries"] == 2
        assert t["retry_delay"] == 300
        assert t["retry_exponential_backoff"] == 2.0  # a multiplier in Airflow 3 (True = 1x)
        assert t["max_retry_delay"] == 3600
        assert t["execution_timeout"] == 24 * 3600
    assert dag["schedule"] == "0 3 3,22 * *"
    assert dag["timetable"] == "CronTriggerTimetable"
    assert dag["catchup"] is False
    assert dag["max_active_runs"] == 1
    # CR5_SCHEDULE=none: manual runs only; CR5_RETRIES overrides the retries; CR5_PARAMS
    # the parameters' defaults, which scheduled runs use (a misspelt name is an error).
    assert dagbag["manual"] == {
        "timetable": "NullTimetable",
        "retries": 0,
        "params": {
            "corpus": None,
            "root": "hdfs:///cr5",
            "driver_root": "/srv/cr5",
            "lambda_grid": [3.0],
        },
    }
    assert "unknown parameters ['rooot']" in dagbag["typo"]


def test_params_defaults_and_validation(dagbag):
    params = dagbag["dag"]["params"]
    assert params == {
        "corpus": None,
        "languages": [],
        "lambda_grid": [0.1, 1.0, 10.0],
        "profiles": ["conf/cluster.yaml"],
        "root": "hdfs:///data/cr5/runs",
        "overrides": [],
        "driver_root": None,
        "executor_python": None,
        "spark_conf": {},
        "driver_memory": "4g",
        "repo": str(REPO),
        "venv": None,
    }
    bad = dagbag["dag"]["bad_params"]
    assert bad and all(v == "ParamValidationError" for v in bad.values()), bad


def test_stage_command_lines(dagbag):
    h = dagbag["helpers"]
    assert h["args"] == [
        "--conf", "/srv/cr5/conf/cluster.yaml",
        "--conf", "/etc/cr5/site.yaml",
        "--set", 'paths.root="hdfs:///runs/K"',
        "--set", 'paths.model="/local/runs/K/model"',
        "--set", 'train.checkpoint_dir="/local/runs/K/checkpoints"',
        "--set", 'evaluate.lambda_models_dir="/local/runs/K/lambda_models"',
        "--set", 'evaluate.baseline_models_dir="/local/runs/K/baseline_models"',
        "--set", 'evaluate.report_dir="/local/runs/K/reports"',
        "--set", 'paths.index="/local/runs/K/index"',
        "--set", 'ingest.input="hdfs:///dumps/20250101/docs: new"',
        "--set", 'ingest.languages=["en", "de"]',
        "--set", "evaluate.lambda_grid=[0.1, 1.0, 10.0]",
        "--set", "train.r=50",
    ]  # fmt: skip
    # One λ: no selection, and the model is trained with it.
    assert h["args_single"][-4:] == [
        "--set", "evaluate.lambda_grid=[2.5]", "--set", "train.lam=2.5",
    ]  # fmt: skip
    # Each run under its own key; what the driver writes itself under the root (any store),
    # or under driver_root when it is given (any store too).
    assert h["paths_local"] == ["/data/runs/K", None]
    assert h["paths_remote"] == ["hdfs:///runs/K", "/local/runs/K"]
    assert h["paths_remote_alone"] == ["hdfs:///runs/K", None]
    assert h["paths_remote_driver"] == ["/runs/K", "s3a://b/x/K"]
    assert h["key_logical"] == "20250103T030000"  # in UTC
    assert h["key_run_after"] == "20250201T123005"


def test_stage_settings_parse_as_the_jobs_read_them(dagbag):
    """The --set values the DAG writes mean what they say to pipeline.config."""
    from pipeline.config import load_config

    args = dagbag["helpers"]["args"]
    sets = [args[i + 1] for i, a in enumerate(args) if a == "--set"]
    sets = [s for s in sets if not s.startswith("train.r=")]
    cfg = load_config([REPO / "conf" / "local.yaml"], sets)
    assert cfg.paths.root == "hdfs:///runs/K"
    assert cfg.paths.model == "/local/runs/K/model"
    assert cfg.train.checkpoint_dir == "/local/runs/K/checkpoints"
    assert cfg.evaluate.report_dir == "/local/runs/K/reports"
    assert cfg.evaluate.lambda_models_dir == "/local/runs/K/lambda_models"
    assert cfg.evaluate.baseline_models_dir == "/local/runs/K/baseline_models"
    assert cfg.paths.index == "/local/runs/K/index"
    assert cfg.ingest.input == "hdfs:///dumps/20250101/docs: new"
    assert list(cfg.ingest.languages) == ["en", "de"]
    assert list(cfg.evaluate.lambda_grid) == [0.1, 1.0, 10.0]


def test_masters_on_this_machine_and_connection_parsing(dagbag):
    h = dagbag["helpers"]
    assert h["on_this_machine"] == {
        "local[2]": True,
        "spark://127.0.0.1:7077": True,
        "spark://localhost:7077": True,
        "spark://127.0.0.10:7077": False,
        "spark://node1:7077": False,
        "spark://127.0.0.1:7077,node1:7077": False,
        "yarn": False,
        "k8s://https://127.0.0.1:6443": False,
    }
    # The DAG reads the master as the provider's hook does.
    assert h["masters"] == {
        "cr5_loopback": ["spark://127.0.0.1:7077"] * 2,
        "cr5_json": ["local[2]"] * 2,
        "cr5_yarn": ["yarn"] * 2,
    }


# --------------------------------------------------------------------------- slow

# Runs in .venv-airflow after `airflow dags test`: the run's and its tasks' states.
STATES_SNIPPET = r"""
import json
from airflow.models import DagRun, TaskInstance
from airflow.utils.session import create_session
with create_session() as s:
    runs = s.query(DagRun).filter(DagRun.dag_id == "cr5_retrain").all()
    out = [{"run_id": r.run_id, "state": str(r.state), "conf": r.conf,
            "tasks": {ti.task_id: {"state": str(ti.state), "try_number": ti.try_number}
                      for ti in s.query(TaskInstance).filter(TaskInstance.run_id == r.run_id)}}
           for r in runs]
print("CR5-JSON " + json.dumps(out, default=str))
"""

# Runs in .venv-airflow after `airflow dags test`: the asset events the run recorded.
ASSET_EVENTS_SNIPPET = r"""
import json
from airflow.models.asset import AssetEvent, AssetModel
from airflow.utils.session import create_session
with create_session() as s:
    out = [{"asset": s.get(AssetModel, e.asset_id).name, "uri": s.get(AssetModel, e.asset_id).uri,
            "task_id": e.source_task_id, "run_id": e.source_run_id, "extra": e.extra}
           for e in s.query(AssetEvent).order_by(AssetEvent.id)]
print("CR5-JSON " + json.dumps(out, default=str))
"""


def embeddings(path: Path):
    """The embeddings dataset as (doc_ids, vectors), sorted by doc_id."""
    import numpy as np
    import pyarrow.parquet as pq

    t = pq.read_table(path, columns=["doc_id", "vector"]).sort_by("doc_id")
    return t.column("doc_id").to_pylist(), np.stack(
        t.column("vector").to_numpy(zero_copy_only=False)
    )


@pytest.mark.slow
def test_dags_test_runs_the_chain_on_a_standalone_cluster(tmp_path):
    """``airflow dags test cr5_retrain`` on the sample, then one task again (idempotent)."""
    import numpy as np

    venv = airflow_venv()
    airflow = str(venv / "bin" / "airflow")
    assert (PROJECT_BIN / "spark-submit").exists(), "run bash scripts/setup.sh first"
    home = tmp_path / "airflow-home"
    home.mkdir()
    runs, driver = tmp_path / "runs", tmp_path / "driver"
    t_start = time.perf_counter()
    # Failures surface at once instead of after minutes of retry delays.
    env = airflow_env(home, CR5_RETRIES="0")
    proc = run([airflow, "db", "migrate"], env, timeout=600, cwd=home)
    assert proc.returncode == 0, (
        f"airflow db migrate failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    )

    conf = {
        "corpus": str(SAMPLE),
        "profiles": ["conf/local.yaml", "conf/short-docs.yaml", "conf/sample.yaml"],
        "root": str(runs),
        "driver_root": str(driver),  # model, checkpoints and reports apart from the datasets
        # Fast settings, as tests/test_cluster.py: r = 20 and one λ (no selection).
        "lambda_grid": [1.0],
        "overrides": ["train.r=20", "evaluate.methods=[]"],
        "driver_memory": "2g",
        # executor_python stays null: the project's venv, the master being on loopback.
    }
    root, driver_dir = runs / RUN_KEY, driver / RUN_KEY
    standalone = load_standalone()
    with standalone.StandaloneCluster(tmp_path / "cluster", cores=2, memory="4g") as cluster:
        # The provider reads a spark://host:port URI as conn_type spark, host and port and
        # submits to spark://host:port (see test_masters_on_this_machine_...).
        env["AIRFLOW_CONN_SPARK_DEFAULT"] = cluster.master_url
        t0 = time.perf_counter()
        proc = run(
            [airflow, "dags", "test", "cr5_retrain", LOGICAL_DATE, "-c", json.dumps(conf)],
            env,
            timeout=3600,
            cwd=home,
        )
        dags_test_wall = time.perf_counter() - t0
        (tmp_path / "dags-test.log").write_text(proc.stdout + proc.stderr)
        assert proc.returncode == 0, (
            f"airflow dags test failed (log {tmp_path / 'dags-test.log'}):\n"
            f"{proc.stdout[-6000:]}\n{proc.stderr[-4000:]}"
        )
        status = cluster.status()
        apps = status.get("completedapps", []) + status.get("activeapps", [])
        assert len(apps) >= len(CHAIN) + len(BRANCHES), f"one application per stage: {apps}"

        proc = run([str(venv / "bin" / "python"), "-c", STATES_SNIPPET], env, timeout=300, cwd=home)
        assert proc.returncode == 0, proc.stderr[-3000:]
        [line] = [ln for ln in proc.stdout.splitlines() if ln.startswith("CR5-JSON ")]
        [dag_run] = json.loads(line[len("CR5-JSON ") :])
        assert dag_run["state"] == "success", dag_run
        assert dag_run["conf"]["root"] == str(runs)
        states = {t: s["state"] for t, s in dag_run["tasks"].items()}
        assert states == dict.fromkeys(CHAIN + list(BRANCHES), "success")

        # Every stage's output, under this run's own root (datasets) and driver directory.
        for name in ["documents", "splits", "vocabulary", "tfidf", "concepts", "embeddings",
                     "evaluation"]:  # fmt: skip
            assert (root / name / "_manifest.json").exists(), f"{name} missing under {root}"
        model = json.loads((driver_dir / "model" / "model.json").read_text())
        assert model["r"] == 20 and float(model["lam"]) == 1.0
        report = json.loads((driver_dir / "reports" / "evaluation.json").read_text())
        assert report["r"] == 20 and report["results"]
        assert (driver_dir / "reports" / "evaluation.md").exists()
        index = json.loads((driver_dir / "index" / "_manifest.json").read_text())
        assert index["model"]["fingerprint"] and index["rows"] > 0
        assert index["csls"]["sources"]  # the CSLS job ran on the cluster's executors
        for name in [
            "model",
            "reports",
            "checkpoints",
            "lambda_models",
            "baseline_models",
            "index",
        ]:
            assert not (root / name).exists(), f"{name} under the datasets' root {root}"

        # The run updated the assets, with the manifests' rows and the model's version.
        proc = run(
            [str(venv / "bin" / "python"), "-c", ASSET_EVENTS_SNIPPET], env, timeout=300, cwd=home
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        [line] = [ln for ln in proc.stdout.splitlines() if ln.startswith("CR5-JSON ")]
        events = {e["asset"]: e for e in json.loads(line[len("CR5-JSON ") :])}
        assert sorted(events) == ["cr5/documents", "cr5/embeddings", "cr5/index", "cr5/model"]
        assert {e["task_id"] for e in events.values()} == {"ingest", "train", "embed", "index"}
        assert {e["run_id"] for e in events.values()} == {dag_run["run_id"]}
        version = (
            "sha256:"
            + hashlib.sha256((driver_dir / "model" / "model.json").read_bytes()).hexdigest()[:16]
        )
        for asset, dataset in (("cr5/documents", "documents"), ("cr5/embeddings", "embeddings")):
            manifest = json.loads((root / dataset / "_manifest.json").read_text())
            extra = events[asset]["extra"]
            assert extra["path"] == str(root / dataset) and extra["run_key"] == RUN_KEY
            assert extra["rows"] == manifest["rows"] > 0
            assert extra["rows_by_lang"] == manifest["rows_by_lang"]
        assert events["cr5/embeddings"]["extra"]["model_version"] == version
        model_extra = events["cr5/model"]["extra"]
        assert model_extra["model_version"] == version and model_extra["r"] == 20
        assert model_extra["path"] == str(driver_dir / "model")
        assert model_extra["languages"] == model["languages"]
        index_extra = events["cr5/index"]["extra"]
        assert index_extra["rows"] == index["rows"] and index_extra["path"].endswith("index")
        assert index_extra["model_fingerprint"] == index["model"]["fingerprint"]
        # and the `airflow dags test` log names them
        log = (tmp_path / "dags-test.log").read_text()
        assert all(f"asset {name}:" in log for name in events), "asset events not logged"

        # Run a task of the same DAG run again: it rewrites the same dataset, same data.
        manifest = root / "embeddings" / "_manifest.json"
        before, first = manifest.stat().st_mtime_ns, embeddings(root / "embeddings")
        t1 = time.perf_counter()
        proc = run(
            [airflow, "tasks", "test", "cr5_retrain", "embed", dag_run["run_id"]],
            env,
            timeout=1200,
            cwd=home,
        )
        rerun_wall = time.perf_counter() - t1
        (tmp_path / "tasks-test.log").write_text(proc.stdout + proc.stderr)
        assert proc.returncode == 0, f"rerun of embed failed:\n{proc.stdout[-4000:]}"
    assert manifest.stat().st_mtime_ns > before, "embed did not run again"
    second = embeddings(root / "embeddings")
    assert second[0] == first[0]
    np.testing.assert_array_equal(second[1], first[1])
    total = time.perf_counter() - t_start
    print(
        f"\nairflow dags test: {dags_test_wall:.1f} s; embed again: {rerun_wall:.1f} s; "
        f"whole test (db migrate, cluster, checks): {total:.1f} s"
    )
