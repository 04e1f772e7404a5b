"""Airflow DAG ``cr5_retrain``: the Cr5 chain, one spark-submit per stage.

``ingest → split → vocabulary → tfidf → train → embed → evaluate`` (pipeline/stages/__init__.py's
DEMO_CHAIN), and ``index`` (the search index, :data:`BRANCHES`) after ``embed``, beside
``evaluate``; each a :class:`Cr5StageOperator` (a ``SparkSubmitOperator`` from
``apache-airflow-providers-apache-spark``) submitting ``jobs/<stage>.py`` in client mode
to the master of the Airflow connection ``spark_default`` (``CR5_SPARK_CONN_ID`` to
change it). See deploy/airflow/README.md and the README's "Schedule with Airflow".

Parameters (trigger with ``--conf '{...}'`` or the UI form):

- ``corpus``: the aligned corpus (``ingest.input``); null keeps the profiles'.
- ``languages``: keep only these languages (``ingest.languages``); [] keeps the profiles'.
- ``lambda_grid``: λ values; two or more are selected on the validation concepts
  (``evaluate.lambda_grid``); a single value is the λ trained (``train.lam``).
- ``profiles``: configuration profiles, relative to ``repo`` or absolute.
- ``root``: where runs write; each DAG run writes under ``<root>/<run key>`` (its logical
  date, else the time it was due, as ``20250103T030000``), so runs never overwrite each
  other and every task of a run (and every retry) sees the same paths.
- ``driver_root``: optionally, another directory (or URI) for what the driver writes
  itself (the model, training checkpoints, per-λ and baseline models, reports), per run
  key; null: under ``root``, whatever store that is (the driver writes through the
  session's Hadoop FileSystem).
- ``overrides``: more ``section.key=value`` settings (``--set``, applied last).
- ``executor_python``: the executors' Python (``spark.pyspark.python``); null: the
  project's venv for a master on this machine (``local[...]``, 127.0.0.1, localhost),
  else the cluster's default (installed on every node, or a packed environment given
  through ``spark_conf``).
- ``spark_conf``: more Spark properties for every stage; ``driver_memory``: spark-submit's.
- ``repo`` / ``venv``: the checkout with ``jobs/``, ``conf/`` and ``pipeline/``, and the
  project's virtual environment whose ``bin/`` holds ``spark-submit`` and the driver's
  Python (the Spark provider installs only Spark Connect's client, not ``spark-submit``).

``corpus``, ``root``, ``driver_root`` and ``overrides`` are Jinja templates rendered with the task's
context plus ``run_key``, e.g. ``"corpus": "/data/dumps/{{ run_key }}/documents"``.
Relative paths (in parameters and in profiles) are relative to ``repo``: spark-submit
runs there.

Retries and idempotence: every stage writes its dataset atomically (a hidden temporary
sibling, renamed into place) and a rerun with the same inputs writes the same data, so a
retried or cleared task rewrites the same outputs of the same run and never leaves half a
dataset; training resumes from its checkpoint (under the run's root). The library is
zipped from ``repo`` by each task (``deploy/submit.sh --package-only``) and shipped with
``--py-files``. Retries: ``CR5_RETRIES`` (default 2), 5-10 minutes after
the first failure, 10-20 after the second (exponential backoff, jittered).

Assets: ``ingest``, ``train``, ``embed`` and ``index`` declare the assets ``cr5/documents``,
``cr5/model``, ``cr5/embeddings`` and ``cr5/index`` as outlets (:data:`OUTLETS`), so
downstream DAGs can be scheduled on them (``schedule=[Asset.ref(name="cr5/embeddings")]``).
Each event's extra says which run wrote what: the run key, the path, the rows (total and per
language) from the
dataset's manifest, and the model's version (the SHA-256 of its ``model.json``), languages,
r and λ; the job hands them over in ``--outputs-json`` (pipeline/outputs.py).

Schedule: ``CR5_SCHEDULE`` (a cron expression, or "none" for manual runs only), by default
03:00 UTC on the 3rd and 22nd of the month, two days after Wikimedia's twice-monthly dumps.
Scheduled runs use the parameters' defaults: set them for a deployment with ``CR5_PARAMS``
(a JSON object, e.g. ``{"corpus": "...", "root": "...", "driver_root": "..."}``) in the
environment of Airflow's DAG processor and workers.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, Asset, BaseHook, Param

REPO = Path(os.environ.get("CR5_REPO") or Path(__file__).resolve().parents[2])
# The pipeline's pure modules (stage names, parameter declarations; no Spark, no numpy) are
# read from the repository this DAG submits, so the two cannot disagree.
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
from pipeline.config import param_info  # noqa: E402
from pipeline.params import json_schema  # noqa: E402
from pipeline.stages import DEMO_CHAIN  # noqa: E402

CHAIN: tuple[str, ...] = DEMO_CHAIN
#: Stages that branch off the chain: (stage, the chain stage it runs after). The search index
#: needs only the embeddings, so it runs beside evaluate (it needs faiss in the venv:
#: pip install 'cr5-on-spark[search]').
BRANCHES: tuple[tuple[str, str], ...] = (("index", "embed"),)
CONN_ID = os.environ.get("CR5_SPARK_CONN_ID", "spark_default")
SCHEDULE = os.environ.get("CR5_SCHEDULE", "0 3 3,22 * *")
RETRIES = int(os.environ.get("CR5_RETRIES", "2"))
# What the driver writes itself (through pipeline/io/storage.py, any store): the setting,
# and its directory under the run's driver_root when that is given.
DRIVER_LOCAL: tuple[tuple[str, str], ...] = (
    ("paths.model", "model"),
    ("train.checkpoint_dir", "checkpoints"),
    ("evaluate.lambda_models_dir", "lambda_models"),
    ("evaluate.baseline_models_dir", "baseline_models"),
    ("evaluate.report_dir", "reports"),
    ("paths.index", "index"),
)


#: What downstream DAGs can be scheduled on: the assets each stage's task updates (a search
#: service reloads on ``cr5/index``).
OUTLETS: dict[str, tuple[str, ...]] = {
    "ingest": ("documents",),
    "train": ("model",),
    "embed": ("embeddings",),
    "index": ("index",),
}
ASSETS: dict[str, Asset] = {
    name: Asset(name=f"cr5/{name}", uri=f"x-cr5://cr5_retrain/{name}", group="cr5")
    for names in OUTLETS.values()
    for name in names
}


# This deployment's parameter defaults (what scheduled runs use), over the built-in ones.
DEFAULTS: dict[str, Any] = json.loads(os.environ.get("CR5_PARAMS") or "{}")


def _param(name: str, default: Any, **schema: Any) -> Param:
    """A parameter whose default ``CR5_PARAMS`` may replace."""
    return Param(DEFAULTS.get(name, default), **schema)


def _declared(key: str) -> dict[str, Any]:
    """JSON schema and description of configuration key ``key`` from its one declaration
    (:mod:`pipeline.config`): the DAG accepts exactly what the jobs accept."""
    info = param_info(key)
    return {**json_schema(info), "description": f"{key}: {info.doc}"}


PARAMS = {
    "corpus": _param(
        "corpus", None, type=["null", "string"], description="ingest.input (null: the profiles')"
    ),
    "languages": _param(
        "languages",
        [],
        type="array",
        items={"type": "string", "pattern": "^[A-Za-z0-9_-]+$"},
        description="ingest.languages ([]: the profiles')",
    ),
    "lambda_grid": _param(
        "lambda_grid", [0.1, 1.0, 10.0], minItems=1, **_declared("evaluate.lambda_grid")
    ),
    "profiles": _param(
        "profiles",
        ["conf/cluster.yaml"],
        type="array",
        minItems=1,
        items={"type": "string", "minLength": 1},
        description="--conf profiles, relative to repo or absolute",
    ),
    "root": _param(
        "root",
        "hdfs:///data/cr5/runs",
        type="string",
        minLength=1,
        description="each run writes under <root>/<run key>",
    ),
    "overrides": _param(
        "overrides",
        [],
        type="array",
        items={"type": "string", "pattern": "^[^=]+=.*$"},
        description="more --set section.key=value, applied last",
    ),
    "driver_root": _param(
        "driver_root",
        None,
        type=["null", "string"],
        description="directory or URI for model, checkpoints, reports (null: under root)",
    ),
    "executor_python": _param(
        "executor_python", None, type=["null", "string"], description="spark.pyspark.python"
    ),
    "spark_conf": _param(
        "spark_conf",
        {},
        type="object",
        additionalProperties={"type": ["string", "number", "boolean"]},
    ),
    "driver_memory": _param("driver_memory", "4g", type="string", pattern="^[0-9]+[kmgtKMGT]?$"),
    "repo": _param("repo", str(REPO), type="string", minLength=1),
    "venv": _param("venv", None, type=["null", "string"], description="null: <repo>/.venv"),
}
if set(DEFAULTS) - set(PARAMS):
    raise ValueError(
        f"CR5_PARAMS names unknown parameters {sorted(set(DEFAULTS) - set(PARAMS))}; "
        f"parameters are {sorted(PARAMS)}"
    )


def run_key(context: Any) -> str:
    """A path-safe name for this DAG run: its logical date, else when it was due (UTC)."""
    when = context.get("logical_date") or context["dag_run"].run_after
    return when.astimezone(dt.timezone.utc).strftime("%Y%m%dT%H%M%S")


def run_paths(params: dict[str, Any], key: str) -> tuple[str, str | None]:
    """This run's root (``<root>/<key>``) and the separate directory of what the driver
    writes itself (``<driver_root>/<key>``; None: under the root). Both may be any store
    the cluster's Hadoop configuration resolves (pipeline/io/storage.py)."""
    root = f"{params['root'].rstrip('/')}/{key}"
    driver_root = params.get("driver_root")
    if driver_root:
        return root, f"{driver_root.rstrip('/')}/{key}"
    return root, None


def stage_arguments(params: dict[str, Any], root: str, driver_dir: str | None = None) -> list[str]:
    """jobs/<stage>.py's arguments: the profiles, then ``--set`` from the parameters.

    Values are written as JSON, which the jobs parse as YAML: strings stay strings
    whatever they contain. ``params``' templates must be rendered already.
    """
    repo = Path(params["repo"])
    args: list[str] = []
    for profile in params["profiles"]:
        args += ["--conf", str(repo / profile)]  # an absolute profile stays absolute
    settings = [f"paths.root={json.dumps(root)}"]
    if driver_dir:  # what the driver writes with plain file I/O
        for key, name in DRIVER_LOCAL:
            settings.append(f"{key}={json.dumps(driver_dir + '/' + name)}")
    if params.get("corpus"):
        settings.append(f"ingest.input={json.dumps(params['corpus'])}")
    if params.get("languages"):
        settings.append(f"ingest.languages={json.dumps(list(params['languages']))}")
    grid = [float(x) for x in params["lambda_grid"]]
    settings.append(f"evaluate.lambda_grid={json.dumps(grid)}")
    if len(grid) == 1:  # no selection: the one λ is the model's
        settings.append(f"train.lam={json.dumps(grid[0])}")
    settings += list(params.get("overrides") or [])
    for item in settings:
        args += ["--set", item]
    return args


def asset_extra(name: str, outputs: dict[str, Any], key: str, root: str) -> dict[str, Any]:
    """The extra of asset ``name``'s event: the run, and what the stage's outputs (its
    ``--outputs-json``, read from the manifests) say about the dataset or model."""
    extra: dict[str, Any] = {"run_key": key, "root": root}
    model = outputs.get("model")
    if name == "model" and model:
        extra.update({k if k != "version" else "model_version": v for k, v in model.items()})
        return extra
    dataset = outputs.get("datasets", {}).get(name)
    if dataset:
        extra.update(dataset)
    if model:  # the model the embeddings were made with
        extra["model_version"] = model["version"]
    return extra


def is_on_this_machine(master: str) -> bool:
    """A local[...] master, or a standalone master on the loopback interface."""
    if master.startswith("local"):
        return True
    return master.startswith("spark://") and all(
        re.fullmatch(r"(127\.0\.0\.1|localhost)(:\d+)?", host.strip())
        for host in master[len("spark://") :].split(",")
    )


class Cr5StageOperator(SparkSubmitOperator):
    """``spark-submit jobs/<stage>.py`` with the DAG run's parameters.

    The arguments, the library zip, the Spark properties and spark-submit's environment
    are resolved at run time from the parameters, so one DAG serves every corpus and
    profile. spark-submit runs in ``repo`` with ``<venv>/bin`` first on PATH.
    """

    def __init__(self, *, stage: str, conn_id: str = CONN_ID, **kwargs: Any) -> None:
        kwargs.setdefault("task_id", stage)
        kwargs.setdefault("name", f"cr5-{stage}")
        kwargs.setdefault("outlets", [ASSETS[name] for name in OUTLETS.get(stage, ())])
        super().__init__(application=f"jobs/{stage}.py", conn_id=conn_id, **kwargs)
        self.stage = stage
        self.cr5_conn_id = conn_id

    def execute(self, context: Any) -> dict[str, str]:
        key = run_key(context)
        params = dict(context["params"])
        extra = {"run_key": key}
        for name in ("corpus", "root", "driver_root", "overrides"):
            if params.get(name):
                params[name] = self.render_template(params[name], {**context, **extra})
        repo = Path(params["repo"])
        venv = Path(params.get("venv") or repo / ".venv")
        python = venv / "bin" / "python"
        master = _master(self.cr5_conn_id)
        local_master = is_on_this_machine(master)
        root, driver_dir = run_paths(params, key)

        self.application = str(repo / "jobs" / f"{self.stage}.py")
        self.application_args = stage_arguments(params, root, driver_dir)
        self.py_files = package_library(repo, python)
        self._driver_memory = params["driver_memory"]
        conf = {
            "spark.executorEnv.OPENBLAS_NUM_THREADS": "1",
            "spark.executorEnv.OMP_NUM_THREADS": "1",
        }
        executor_python = params.get("executor_python")
        if not executor_python and local_master and python.exists():
            executor_python = str(python)
        if executor_python:
            conf["spark.pyspark.python"] = executor_python
        if local_master:  # keep the driver on loopback, like the cluster it talks to
            conf["spark.driver.host"] = "127.0.0.1"
            conf["spark.driver.bindAddress"] = "127.0.0.1"
        conf.update({str(k): str(v) for k, v in (params.get("spark_conf") or {}).items()})
        self.conf = conf

        env: dict[str, str] = {"OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS", "1")}
        if (venv / "bin").is_dir():
            env["PATH"] = f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
        if python.exists():
            env["PYSPARK_DRIVER_PYTHON"] = str(python)
            env.update(_java_home(python, repo))
        if local_master:
            env["SPARK_LOCAL_IP"] = "127.0.0.1"
        self.log.info(
            "cr5 stage %s on %s, run root %s: %s",
            self.stage,
            master or self.cr5_conn_id,
            root,
            " ".join(self.application_args),
        )
        # spark-submit's environment and working directory, for this task only. Not
        # through env_vars: on YARN and Kubernetes the hook forwards those to the remote
        # driver, where this machine's PATH and JAVA_HOME mean nothing.
        with tempfile.TemporaryDirectory(prefix="cr5-outputs-") as tmp:
            outputs_file = Path(tmp) / "outputs.json"
            self.application_args = [*self.application_args, "--outputs-json", str(outputs_file)]
            with _process_environment(env, repo):
                super().execute(context)
            outputs = json.loads(outputs_file.read_text()) if outputs_file.exists() else {}
        self._record_assets(context, outputs.get(self.stage, {}), key, root)
        return {"root": root, "driver_dir": driver_dir or root}

    def _record_assets(self, context: Any, outputs: dict[str, Any], key: str, root: str) -> None:
        """Put what the stage wrote into its outlets' asset events."""
        names = OUTLETS.get(self.stage, ())
        if names and not outputs:
            self.log.warning(
                "stage %s reported no outputs; its asset events carry the run only", self.stage
            )
        for name in names:
            extra = asset_extra(name, outputs, key, root)
            context["outlet_events"][ASSETS[name]].extra = extra
            self.log.info("asset %s: %s", ASSETS[name].name, json.dumps(extra, default=str))


def package_library(repo: Path, python: Path) -> str:
    """Zip ``repo``/pipeline (deploy/submit.sh --package-only); return the zip's path."""
    env = dict(os.environ)
    if python.exists():
        env["PYTHON"] = str(python)
    proc = subprocess.run(
        ["bash", str(repo / "deploy" / "submit.sh"), "--package-only"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"packaging the library failed:\n{proc.stderr[-2000:]}")
    return proc.stdout.strip().splitlines()[-1]


def _master(conn_id: str) -> str:
    """The connection's master URL as far as it can be told (empty if unknown)."""
    try:
        conn = BaseHook.get_connection(conn_id)
    except Exception:  # no such connection: the hook falls back to yarn
        return ""
    # As SparkSubmitHook reads it: a URI's scheme is the conn_type ("spark://h:7077"),
    # a form's host may be a whole master URL ("local[2]", "yarn", "k8s://https://h").
    host = conn.host or ""
    if conn.conn_type == "spark" and host and ("://" in host or not conn.port):
        master = host
    else:
        master = f"{conn.conn_type}://{host}"
    return f"{master}:{conn.port}" if conn.port else master


def _java_home(python: Path, repo: Path) -> dict[str, str]:
    """JAVA_HOME from the project's Java finder when the machine has no Java 17+."""
    if os.environ.get("JAVA_HOME"):
        return {}
    out = subprocess.run(
        [str(python), "-m", "pipeline.java", "--export"],
        capture_output=True,
        text=True,
        check=False,
        cwd=repo,
    ).stdout
    for line in out.splitlines():
        if line.startswith("export JAVA_HOME="):
            return {"JAVA_HOME": line.split("=", 1)[1].strip().strip("'\"")}
    return {}


@contextlib.contextmanager
def _process_environment(env: dict[str, str], cwd: Path) -> Iterator[None]:
    """Set environment variables and the working directory; restore both afterwards."""
    saved = {k: os.environ.get(k) for k in env}
    old_cwd = os.getcwd()
    os.environ.update(env)
    os.chdir(cwd)
    try:
        yield
    finally:
        os.chdir(old_cwd)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def build_dag(
    dag_id: str = "cr5_retrain",
    stages: Sequence[str] = CHAIN,
    branches: Sequence[tuple[str, str]] = BRANCHES,
) -> DAG:
    with DAG(
        dag_id=dag_id,
        description="Cr5 crosslingual embeddings: ingest, split, features, train, embed, "
        "evaluate, search index",
        schedule=None if SCHEDULE.strip().lower() in ("", "none") else SCHEDULE,
        start_date=dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc),
        catchup=False,
        max_active_runs=1,
        params=PARAMS,
        tags=["cr5", "spark"],
        default_args={
            "retries": RETRIES,
            "retry_delay": dt.timedelta(minutes=5),
            "retry_exponential_backoff": 2.0,
            "max_retry_delay": dt.timedelta(hours=1),
            "execution_timeout": dt.timedelta(hours=24),
        },
        doc_md=__doc__,
    ) as dag:
        previous = None
        tasks = {}
        for stage in stages:
            task = Cr5StageOperator(stage=stage)
            if previous is not None:
                previous >> task
            previous = tasks[stage] = task
        for stage, after in branches:
            if after in tasks:
                tasks[after] >> Cr5StageOperator(stage=stage)
    return dag


dag = build_dag()
