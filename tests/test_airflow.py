"""The Airflow DAGs of deploy/airflow/cr5_dag.py (``cr5_retrain``, ``cr5_wikipedia``), driven
through ./.venv-airflow.

Airflow lives in a virtual environment of its own (``bash scripts/setup_airflow.sh``), not
in the project's .venv, so every test runs Airflow in a subprocess of .venv-airflow's
Python or ``airflow`` CLI. The fast tests load the DAG folder with DagBag (no metadata
database) and assert the task graphs, parameters, retries and schedules, the command
lines the tasks build, and the dump sensor's poke on status files in every state. The slow
test runs ``cr5_wikipedia`` with ``airflow dags test`` on a local[2] master on the bundled
dump samples laid out as a dumps mirror, then cr5_retrain's own first task on a corpus on a
Spark standalone cluster (deploy/standalone.py): one DAG run pays the chain's spark-submits
once.

Without .venv-airflow the tests fail and say how to create it; CR5_SKIP_AIRFLOW=1 skips
them instead.
"""

from __future__ import annotations

import bz2
import hashlib
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import DATA, REPO, load_standalone

AIRFLOW_VENV = REPO / ".venv-airflow"
DAG_FOLDER = REPO / "deploy" / "airflow"
DAG_FILE = DAG_FOLDER / "cr5_dag.py"
PROJECT_BIN = REPO / ".venv" / "bin"
CHAIN = ["ingest", "split", "vocabulary", "tfidf", "train", "embed", "evaluate"]
#: cr5_wikipedia: its tasks before the chain, and its chain (the dumps' ingestion first).
DUMP_TASKS = ["plan_dumps", "wait_for_dump"]
WIKIPEDIA_CHAIN = ["ingest_wikipedia", *CHAIN[1:]]
#: Tasks off the chain, and the chain task each runs after.
BRANCHES = {"index": "embed"}
LOGICAL_DATE = "2025-01-03T03:00:00+00:00"
RUN_KEY = "20250103T030000"
DUMP_DATE = "20250101"  # the dump run of the 1st: the logical date is the 3rd


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
import copy, datetime as dt, http.server, importlib.util, inspect, json, os, sys, tempfile
import threading, types
from pathlib import Path
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
seconds = lambda delta: delta.total_seconds() if delta else None

def rejected(dag, cases):
    bad = {}
    for name, value in cases:
        p = copy.deepcopy(dag.params)
        try:  # ParamsDict validates on assignment, and validate() checks the whole
            p.update({name: value})
            p.validate()
            bad[f"{name}={value}"] = "accepted"
        except Exception as exc:
            bad[f"{name}={value}"] = type(exc).__name__
    return bad

def describe(dag, bad_cases):
    tasks = {}
    for t in dag.tasks:
        cls = getattr(t, "operator_class", type(t))  # a mapped task's operator
        partial = getattr(t, "partial_kwargs", {})
        tasks[t.task_id] = {
            "class": cls.__name__,
            "mapped": type(t).__name__ == "MappedOperator",
            "is_spark_submit": issubclass(cls, SparkSubmitOperator),
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
            "mode": partial.get("mode", getattr(t, "mode", None)),
            "poke_interval": seconds(partial.get("poke_interval")),
            "timeout": seconds(partial.get("timeout")),
            "map_index_template": partial.get("map_index_template"),
        }
    return {
        "task_ids": list(dag.task_ids),
        "topological": [t.task_id for t in dag.topological_sort()]
        if hasattr(dag, "topological_sort") else None,
        "tasks": tasks,
        "params": dag.params.validate(),
        "bad_params": rejected(dag, bad_cases),
        "schedule": getattr(dag.timetable, "expression", None),
        "timetable": type(dag.timetable).__name__,
        "catchup": dag.catchup,
        "max_active_runs": dag.max_active_runs,
        "tags": sorted(dag.tags),
    }

shared_bad = [("lambda_grid", [-1.0]), ("lambda_grid", []), ("profiles", []),
              ("overrides", ["no-equals-sign"]), ("driver_memory", "lots")]
if "cr5_retrain" in bag.dags:
    out["dag"] = describe(bag.dags["cr5_retrain"], shared_bad + [("languages", ["en de"])])
if "cr5_wikipedia" in bag.dags:
    out["wikipedia"] = describe(bag.dags["cr5_wikipedia"], shared_bad + [
        ("wikis", []), ("wikis", ["EN"]), ("wikis", ["en", "en"]), ("dump_date", "2025-01-01"),
        ("dumps_url", "dumps/mirror"), ("dumps_url", "ftp://mirror/dumps"),
        ("dumps_dir", "hdfs:///dumps"), ("dumps_dir", "relative/dumps"),
        ("dump_tables", ["pagelinks"]), ("wait_for_files", "yes"),
        ("wikidata_sitelinks", None)])

# The module's helpers: command lines, run keys, masters.
spec = importlib.util.spec_from_file_location("cr5_dag_under_test", dag_file)
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
p = dict(out["dag"]["params"]) if "dag" in out else {}
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
    "args_stage_settings": mod.stage_arguments(
        dict(single, overrides=["wikipedia.cleaner=fast"]), "/runs/K", None,
        ['wikipedia.dumps={"en": "/d/en.xml.bz2"}']),
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

# --- The dumps: run dates, targets, dumpstatus.json read from files and over HTTP, the
# sensor on each kind of status, and the ingestion's settings from the sensors' XComs.
wp = dict(out["wikipedia"]["params"]) if "wikipedia" in out else {}
when = dt.datetime(2025, 1, 3, 3, tzinfo=utc)
out["dump_dates"] = {str(d): mod.dump_run_date(d) for d in [
    when, dt.datetime(2025, 1, 19, 23, 59, tzinfo=utc), dt.datetime(2025, 1, 20, tzinfo=utc),
    dt.datetime(2025, 1, 31, 12, tzinfo=utc),
    dt.datetime(2025, 1, 20, 0, 30, tzinfo=plus_one)]}  # 19 Jan in UTC
out["targets"] = {
    "default_url": outcome(mod.dump_targets, dict(wp, wikis=["en"]), when),
    "mirror": outcome(mod.dump_targets, dict(wp, wikis=["en", "zh-yue"], dump_date="20241220",
                                              dumps_url="https://mirror.example/dumps/",
                                              dumps_dir="file:///mnt/dumps",
                                              dump_tables=["langlinks", "page_props"],
                                              wikidata_sitelinks=True), when),
    "local": outcome(mod.dump_targets, dict(wp, wikis=["de"], dumps_url="/srv/dumps",
                                             wikidata_sitelinks=False, wait_for_files=False),
                     when),
}

tmp = Path(tempfile.mkdtemp())
def status_file(wiki, jobs, date="20250101", text=None):
    d = tmp / wiki / date
    d.mkdir(parents=True, exist_ok=True)
    body = text if text is not None else json.dumps({"jobs": jobs, "version": "0.8"})
    (d / "dumpstatus.json").write_text(body)
    return d
def dump_file(d, name, size):
    (d / name).write_bytes(b"x" * size)
    return {name: {"size": size, "url": f"/{d.parent.name}/{d.name}/{name}", "sha1": "0"}}
def done(files):
    return {"status": "done", "updated": "2025-01-02 10:00:00", "files": files}

d = status_file("enwiki", {})
articles = {**dump_file(d, "enwiki-20250101-pages-articles-multistream.xml.bz2", 30),
            **dump_file(d, "enwiki-20250101-pages-articles-multistream-index.txt.bz2", 5)}
parts = {f"enwiki-20250101-pages-articles-multistream{i}.xml-p{i}p{i + 9}.bz2":
         {"size": 10, "url": "/x"} for i in (1, 2)}  # listed, never on disk
status_file("enwiki", {"articlesmultistreamdump": done(parts),
                       "articlesmultistreamdumprecombine": done(articles),
                       "metahistorybz2dump": {"status": "waiting", "updated": "", "files": {}}})
d = status_file("dewiki", {})
dparts = {**dump_file(d, "dewiki-20250101-pages-articles-multistream10.xml-p10p19.bz2", 7),
          **dump_file(d, "dewiki-20250101-pages-articles-multistream2.xml-p2p9.bz2", 7),
          **dump_file(d, "dewiki-20250101-pages-articles-multistream-index2.txt-p2p9.bz2", 3),
          **dump_file(d, "dewiki-20250101-pages-articles-multistream-index10.txt-p10p19.bz2", 3)}
links = dump_file(d, "dewiki-20250101-langlinks.sql.gz", 4)
status_file("dewiki", {"articlesmultistreamdump": done(dparts), "langlinkstable": done(links)})
status_file("frwiki", {"articlesmultistreamdump": {"status": "in-progress", "updated": "",
                                                   "files": {}}})
status_file("eswiki", {"articlesmultistreamdump": done(articles),
                       "langlinkstable": {"status": "failed", "updated": "", "files": {}}})
status_file("itwiki", {"abstractsdump": done(articles)})  # articles not listed yet
d = status_file("ptwiki", {})
short = dump_file(d, "ptwiki-20250101-pages-articles-multistream.xml.bz2", 10)
short[next(iter(short))]["size"] = 99  # the mirror has 10 of 99 bytes so far
status_file("ptwiki", {"articlesmultistreamdump": done(short)})
status_file("nlwiki", {}, text="<html>503 Service Unavailable</html>")
status_file("svwiki", {}, text='{"version": "0.8"}')
status_file("plwiki", {"articlesmultistreamdump": done({})})
d = status_file("wikidatawiki", {})
status_file("wikidatawiki", {"wbitemspersitetable": done(
    dump_file(d, "wikidatawiki-20250101-wb_items_per_site.sql.gz", 6))})

def target(lang, wiki, roles, base=None, wait_for_files=True):
    base = base or tmp.as_uri()
    return {"lang": lang, "wiki": wiki, "date": "20250101",
            "status_url": f"{base}/{wiki}/20250101/dumpstatus.json",
            "directory": f"{tmp}/{wiki}/20250101", "roles": roles,
            "wait_for_files": wait_for_files}
def articles_role(tables=()):
    return {"articles": list(mod.ARTICLES_JOBS), **{t: [mod.TABLE_JOBS[t]] for t in tables}}
def poke(t):
    sensor = mod.DumpStatusSensor(task_id="wait_for_dump", target=t)
    try:
        r = sensor.poke({})
        return {"done": bool(r), "xcom": getattr(r, "xcom_value", None)}
    except Exception as exc:
        return {"error": type(exc).__name__, "message": str(exc)}

# Serve the same directory over HTTP (a mirror), with a path that answers 500.
class Handler(http.server.SimpleHTTPRequestHandler):
    def __init__(self, *a, **kw):
        super().__init__(*a, directory=str(tmp), **kw)
    def do_GET(self):
        if self.path.startswith("/broken/"):
            self.send_error(500, "Internal Server Error")
        else:
            super().do_GET()
    def log_message(self, *a):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
threading.Thread(target=server.serve_forever, daemon=True).start()
http_base = f"http://127.0.0.1:{server.server_address[1]}"

out["sensor"] = {
    "en_recombined": poke(target("en", "enwiki", articles_role())),
    "en_over_http": poke(target("en", "enwiki", articles_role(), base=http_base)),
    "de_parts_langlinks": poke(target("de", "dewiki", articles_role(["langlinks"]))),
    "wikidata": poke(target(None, "wikidatawiki", {"sitelinks": ["wbitemspersitetable"]})),
    "fr_in_progress": poke(target("fr", "frwiki", articles_role())),
    "es_failed": poke(target("es", "eswiki", articles_role(["langlinks"]))),
    "it_not_listed": poke(target("it", "itwiki", articles_role())),
    "pt_file_copying": poke(target("pt", "ptwiki", articles_role())),
    "pt_no_file_check": poke(target("pt", "ptwiki", articles_role(), wait_for_files=False)),
    "ru_missing": poke(target("ru", "ruwiki", articles_role())),
    "ru_missing_http": poke(target("ru", "ruwiki", articles_role(), base=http_base)),
    "http_500": poke(target("en", "enwiki", articles_role(), base=http_base + "/broken")),
    "nl_not_json": poke(target("nl", "nlwiki", articles_role())),
    "sv_no_jobs": poke(target("sv", "svwiki", articles_role())),
    "pl_done_no_files": poke(target("pl", "plwiki", articles_role())),
}
server.shutdown()
out["sensor_dir"] = str(tmp)
xcoms = [out["sensor"][k]["xcom"] for k in ("en_recombined", "de_parts_langlinks", "wikidata")]
out["wikipedia_settings"] = outcome(mod.wikipedia_settings, xcoms)
out["wikipedia_settings_none"] = outcome(mod.wikipedia_settings, [xcoms[2]])
ingest = mod.Cr5WikipediaIngestOperator()
fake_ti = lambda values: {"ti": types.SimpleNamespace(
    xcom_pull=lambda task_ids: values if task_ids == ["wait_for_dump"] else None)}
out["ingest_task"] = {
    "task_id": ingest.task_id, "stage": ingest.stage,
    "application": ingest.application,
    "outlets": [a.name for a in ingest.outlets],
    "settings": outcome(ingest.stage_settings, fake_ti(xcoms)),
    "settings_nothing_sensed": outcome(ingest.stage_settings, fake_ti([None])),
}

# A deployment's settings: manual runs only, no retries, its own parameter defaults.
os.environ["CR5_SCHEDULE"] = "none"
os.environ["CR5_WIKIPEDIA_SCHEDULE"] = "none"
os.environ["CR5_RETRIES"] = "0"
os.environ["CR5_DUMP_POKE_MINUTES"] = "5"
os.environ["CR5_DUMP_TIMEOUT_HOURS"] = "48"
os.environ["CR5_PARAMS"] = json.dumps(
    {"root": "hdfs:///cr5", "driver_root": "/srv/cr5", "lambda_grid": [3.0],
     "dumps_dir": "/mnt/dumps", "wikis": ["de", "fr"]}
)
spec = importlib.util.spec_from_file_location("cr5_dag_manual", dag_file)
manual = importlib.util.module_from_spec(spec)
spec.loader.exec_module(manual)
wdag = manual.wikipedia_dag
sensor = wdag.get_task("wait_for_dump").partial_kwargs
out["manual"] = {"timetable": type(manual.dag.timetable).__name__,
                 "retries": manual.dag.get_task("train").retries,
                 "params": {k: v for k, v in manual.dag.params.validate().items()
                            if k in ("root", "driver_root", "lambda_grid", "corpus")},
                 "wikipedia_timetable": type(wdag.timetable).__name__,
                 "wikipedia_params": {k: v for k, v in wdag.params.validate().items()
                                      if k in ("root", "lambda_grid", "dumps_dir", "wikis")},
                 "sensor": [seconds(sensor["poke_interval"]), seconds(sensor["timeout"]),
                            sensor["retries"]]}
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
    assert dagbag["dag_ids"] == ["cr5_retrain", "cr5_wikipedia"]


def assert_stage_chain(dag: dict, chain: list[str], first_upstream: list[str]) -> None:
    """``dag``'s tasks ``chain`` run in order, one Cr5StageOperator each, the first after
    ``first_upstream``; the branches after theirs."""
    tasks = dag["tasks"]
    if dag["topological"] is not None:
        order = dag["topological"]
        assert [t for t in order if t in chain] == chain
        for stage, after in BRANCHES.items():
            assert order.index(stage) > order.index(after)
    for i, stage in enumerate(chain):
        t = tasks[stage]
        assert t["class"] in ("Cr5StageOperator", "Cr5WikipediaIngestOperator")
        assert t["is_spark_submit"] and not t["mapped"]
        assert t["stage"] == stage
        assert t["conn_id"] == "spark_default"
        assert t["upstream"] == ([chain[i - 1]] if i else first_upstream)
        branches = [b for b, after in BRANCHES.items() if after == stage]
        assert t["downstream"] == sorted(([chain[i + 1]] if i + 1 < len(chain) else []) + branches)
    for stage, after in BRANCHES.items():
        t = tasks[stage]
        assert t["class"] == "Cr5StageOperator" and t["stage"] == stage
        assert t["upstream"] == [after] and t["downstream"] == []


def test_task_graph_is_the_stage_chain(dagbag):
    dag = dagbag["dag"]
    assert sorted(dag["tasks"]) == sorted(CHAIN + list(BRANCHES))
    assert_stage_chain(dag, CHAIN, [])
    assert all(t["class"] == "Cr5StageOperator" for t in dag["tasks"].values())


def test_wikipedia_dag_waits_for_the_dumps_then_runs_the_chain(dagbag):
    """cr5_wikipedia: plan_dumps -> wait_for_dump (mapped, one per wiki, reschedule mode) ->
    ingest_wikipedia -> the same chain as cr5_retrain's from split on."""
    dag = dagbag["wikipedia"]
    tasks = dag["tasks"]
    assert sorted(tasks) == sorted(DUMP_TASKS + WIKIPEDIA_CHAIN + list(BRANCHES))
    if dag["topological"] is not None:
        assert dag["topological"][:3] == [*DUMP_TASKS, "ingest_wikipedia"]
    assert_stage_chain(dag, WIKIPEDIA_CHAIN, ["wait_for_dump"])
    assert tasks["ingest_wikipedia"]["class"] == "Cr5WikipediaIngestOperator"
    plan, wait = tasks["plan_dumps"], tasks["wait_for_dump"]
    assert plan["upstream"] == [] and plan["downstream"] == ["wait_for_dump"]
    assert plan["retries"] == 0  # a bad parameter: no point in retrying
    assert wait["class"] == "DumpStatusSensor" and wait["mapped"]
    assert wait["upstream"] == ["plan_dumps"] and wait["downstream"] == ["ingest_wikipedia"]
    assert wait["mode"] == "reschedule"  # frees its worker slot between pokes
    assert wait["poke_interval"] == 30 * 60 and wait["timeout"] == 240 * 3600
    assert wait["map_index_template"] == "{{ task.target['wiki'] }}"
    # The same tasks as cr5_retrain from split on (split after its own ingestion).
    corpus = dagbag["dag"]["tasks"]
    for name in [*WIKIPEDIA_CHAIN[1:], *BRANCHES]:
        expected = (
            dict(corpus[name], upstream=["ingest_wikipedia"]) if name == "split" else corpus[name]
        )
        assert tasks[name] == expected, name
    assert dag["schedule"] == "0 3 1,20 * *" and dag["timetable"] == "CronTriggerTimetable"
    assert (dag["catchup"], dag["max_active_runs"]) == (False, 1)
    task = dagbag["ingest_task"]
    assert task["task_id"] == task["stage"] == "ingest_wikipedia"
    assert task["application"] == "jobs/ingest_wikipedia.py"
    assert task["outlets"] == ["cr5/documents"]


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
    wikipedia = dagbag["wikipedia"]["tasks"]
    assert {stage: [a["name"] for a in t["outlets"]] for stage, t in wikipedia.items()} == {
        **{k: v for k, v in outlets.items() if k != "ingest"},
        "ingest_wikipedia": ["cr5/documents"],  # the same assets, whichever DAG wrote them
        "plan_dumps": [],
        "wait_for_dump": [],
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
    tasks = list(dag["tasks"].values())
    tasks += [t for n, t in dagbag["wikipedia"]["tasks"].items() if n != "plan_dumps"]
    for t in tasks:
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
        # One CR5_PARAMS for both DAGs: each takes the names it has.
        "wikipedia_timetable": "NullTimetable",
        "wikipedia_params": {
            "wikis": ["de", "fr"],
            "dumps_dir": "/mnt/dumps",
            "lambda_grid": [3.0],
            "root": "hdfs:///cr5",
        },
        # CR5_DUMP_POKE_MINUTES, CR5_DUMP_TIMEOUT_HOURS; CR5_RETRIES for the sensors too.
        "sensor": [5 * 60, 48 * 3600, 0],
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


def test_wikipedia_params_defaults_and_validation(dagbag):
    params = dagbag["wikipedia"]["params"]
    shared = {k: v for k, v in dagbag["dag"]["params"].items() if k not in ("corpus", "languages")}
    assert params == {
        "wikis": ["en", "de", "fr", "es"],
        "dump_date": None,
        "dumps_url": "https://dumps.wikimedia.org",
        "dumps_dir": None,
        "wikidata_sitelinks": True,
        "dump_tables": [],
        "wait_for_files": True,
        **shared,
    }
    # Language codes (unique), YYYYMMDD, a URL or an absolute directory, directories the
    # executors can open (no HDFS: the dumps are read with Python file I/O), known tables.
    bad = dagbag["wikipedia"]["bad_params"]
    assert len(bad) == 16 and all(v == "ParamValidationError" for v in bad.values()), bad


def test_dump_run_dates_and_targets(dagbag):
    # Wikimedia's runs start on the 1st and the 20th (UTC).
    assert dagbag["dump_dates"] == {
        "2025-01-03 03:00:00+00:00": "20250101",
        "2025-01-19 23:59:00+00:00": "20250101",
        "2025-01-20 00:00:00+00:00": "20250120",
        "2025-01-31 12:00:00+00:00": "20250120",
        "2025-01-20 00:30:00+01:00": "20250101",
    }
    targets = dagbag["targets"]
    # The dumps site's status, but no dumps_dir: the executors would have nothing to read.
    assert targets["default_url"].startswith("ValueError: dumps_dir is null and dumps_url")
    en, yue, wikidata = targets["mirror"]
    articles = ["articlesmultistreamdumprecombine", "articlesmultistreamdump"]
    assert en == {
        "lang": "en",
        "wiki": "enwiki",
        "date": "20241220",
        "status_url": "https://mirror.example/dumps/enwiki/20241220/dumpstatus.json",
        "directory": "/mnt/dumps/enwiki/20241220",
        "roles": {
            "articles": articles,
            "langlinks": ["langlinkstable"],
            "page_props": ["pagepropstable"],
        },
        "wait_for_files": True,
    }
    assert yue["wiki"] == "zh_yuewiki"  # the pipeline's own dbname table
    assert yue["status_url"].endswith("/zh_yuewiki/20241220/dumpstatus.json")
    assert wikidata["lang"] is None and wikidata["wiki"] == "wikidatawiki"
    assert wikidata["roles"] == {"sitelinks": ["wbitemspersitetable"]}
    # A local mirror: its directory holds the files too; no Wikidata; no file check.
    [de] = targets["local"]
    assert de["status_url"] == "/srv/dumps/dewiki/20250101/dumpstatus.json"
    assert de["directory"] == "/srv/dumps/dewiki/20250101"
    assert de["roles"] == {"articles": articles} and de["wait_for_files"] is False


def test_dump_sensor_on_each_status(dagbag):
    """The sensor's poke on status files (file:// and HTTP) in every state."""
    sensor, tmp = dagbag["sensor"], dagbag["sensor_dir"]
    en = f"{tmp}/enwiki/{DUMP_DATE}/enwiki-{DUMP_DATE}-pages-articles-multistream"
    # done: the recombined file and its index (not the parts of articlesmultistreamdump,
    # which are not even on disk), whatever other jobs still wait
    assert sensor["en_recombined"] == {
        "done": True,
        "xcom": {
            "lang": "en",
            "wiki": "enwiki",
            "date": DUMP_DATE,
            "files": {"articles": [f"{en}-index.txt.bz2", f"{en}.xml.bz2"]},
        },
    }
    assert sensor["en_over_http"] == sensor["en_recombined"]
    # parts in their order (2 before 10), and the langlinks table
    de = sensor["de_parts_langlinks"]["xcom"]["files"]
    assert [p.rsplit("/", 1)[1] for p in de["articles"]] == [
        f"dewiki-{DUMP_DATE}-pages-articles-multistream2.xml-p2p9.bz2",
        f"dewiki-{DUMP_DATE}-pages-articles-multistream10.xml-p10p19.bz2",
        f"dewiki-{DUMP_DATE}-pages-articles-multistream-index2.txt-p2p9.bz2",
        f"dewiki-{DUMP_DATE}-pages-articles-multistream-index10.txt-p10p19.bz2",
    ]
    assert de["langlinks"] == [f"{tmp}/dewiki/{DUMP_DATE}/dewiki-{DUMP_DATE}-langlinks.sql.gz"]
    assert sensor["wikidata"]["xcom"]["files"] == {
        "sitelinks": [
            f"{tmp}/wikidatawiki/{DUMP_DATE}/wikidatawiki-{DUMP_DATE}-wb_items_per_site.sql.gz"
        ]
    }
    # not yet: in progress, the job not listed yet, no dumpstatus.json (file, HTTP 404), the
    # mirror still copying a file (unless told not to look)
    for key in ["fr_in_progress", "it_not_listed", "ru_missing", "ru_missing_http",
                "pt_file_copying"]:  # fmt: skip
        assert sensor[key] == {"done": False, "xcom": None}, key
    assert sensor["pt_no_file_check"]["done"] is True
    # failed: at once, without retries, saying which job and where
    failed = sensor["es_failed"]
    assert failed["error"] == "AirflowFailException"
    assert "eswiki dump 20250101: langlinkstable: failed according to file://" in failed["message"]
    assert "Clear this task" in failed["message"]
    assert sensor["pl_done_no_files"]["error"] == "AirflowFailException"
    assert "done but lists no files" in sensor["pl_done_no_files"]["message"]
    # errors (retried like any): the server fails, not a dumpstatus.json
    assert sensor["http_500"]["error"] == "DumpStatusError"
    assert "HTTP 500" in sensor["http_500"]["message"]
    assert sensor["nl_not_json"]["error"] == "DumpStatusError"
    assert "is not JSON" in sensor["nl_not_json"]["message"]
    assert "no 'jobs' object" in sensor["sv_no_jobs"]["message"]


def test_ingest_settings_from_the_sensed_dumps(dagbag):
    """What ingest_wikipedia's job is told: each language's dump (one file and its index, or
    the parts without), the tables, Wikidata's sitelinks; the jobs read them as meant."""
    from pipeline.config import load_config

    tmp = dagbag["sensor_dir"]
    settings = dagbag["ingest_task"]["settings"]
    assert settings == dagbag["wikipedia_settings"]
    assert [s.split("=", 1)[0] for s in settings] == [
        "wikipedia.dumps",
        "wikipedia.multistream_index",
        "wikipedia.langlinks",
        "wikipedia.wikidata_sitelinks",
    ]
    cfg = load_config([REPO / "conf" / "local.yaml"], settings).wikipedia
    en = f"{tmp}/enwiki/{DUMP_DATE}/enwiki-{DUMP_DATE}-pages-articles-multistream"
    de = f"{tmp}/dewiki/{DUMP_DATE}/dewiki-{DUMP_DATE}-pages-articles-multistream"
    assert cfg.dumps == {
        "en": f"{en}.xml.bz2",
        "de": f"{de}2.xml-p2p9.bz2,{de}10.xml-p10p19.bz2",
    }
    assert cfg.multistream_index == {"en": f"{en}-index.txt.bz2"}
    assert cfg.langlinks == {"de": f"{tmp}/dewiki/{DUMP_DATE}/dewiki-{DUMP_DATE}-langlinks.sql.gz"}
    assert cfg.wikidata_sitelinks.endswith(f"wikidatawiki-{DUMP_DATE}-wb_items_per_site.sql.gz")
    assert dagbag["wikipedia_settings_none"] == (
        "ValueError: no Wikipedia dump was sensed: nothing to ingest"
    )
    assert dagbag["ingest_task"]["settings_nothing_sensed"].startswith(
        "AirflowFailException: no dumps from wait_for_dump"
    )
    # They come after the parameters' settings and before the overrides (which win).
    assert dagbag["helpers"]["args_stage_settings"][-4:] == [
        "--set", 'wikipedia.dumps={"en": "/d/en.xml.bz2"}', "--set", "wikipedia.cleaner=fast",
    ]  # fmt: skip


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

# Runs in .venv-airflow after `airflow dags test`: the runs of a DAG (argv[1]) and their
# tasks' states; a mapped task's instances as task_id[its rendered map index].
STATES_SNIPPET = r"""
import json, sys
from airflow.models import DagRun, TaskInstance
from airflow.utils.session import create_session
def name(ti):
    if ti.map_index < 0:
        return ti.task_id
    return f"{ti.task_id}[{ti.rendered_map_index or ti.map_index}]"
with create_session() as s:
    runs = s.query(DagRun).filter(DagRun.dag_id == sys.argv[1]).all()
    out = [{"run_id": r.run_id, "state": str(r.state), "conf": r.conf,
            "tasks": {name(ti): {"state": str(ti.state), "try_number": ti.try_number}
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

WIKI = DATA / "wiki"
#: The Spark connection of the slow test's DAG run: a local[2] master, written as JSON.
LOCAL_CONN = json.dumps({"conn_type": "spark", "host": "local[2]"})
#: JVMs for seconds-long jobs on tiny data: C1 JIT only and the serial collector burn far
#: less CPU starting up than C2 does compiling (a tiny stage: ~45 s -> ~28 s on 2 cores).
QUICK_JVMS = {
    f"spark.{side}.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
    for side in ("driver", "executor")
}
#: The wikis of the dump-driven run: the bundled real dump samples (en: multistream with its
#: index; bg: a single bz2 stream, UTF-16; de: the hand-made dump), and Wikidata's
#: sitelinks table for their concept ids (tests/data/wiki/PROVENANCE.md).
WIKIS = ["en", "de", "bg"]
#: Tiny-data settings: the samples align 5 en-de concepts (bg's one article shares none), so
#: one test concept for en-de and none for validation (a single λ), every article whatever
#: its length, every word, r = 2, no baselines, two shuffle partitions.
TINY = [
    'split.pairs=["en-de"]',
    "split.n_test=1",
    "split.n_validation=0",
    "features.min_df=1",
    "features.min_unique_words=1",
    "features.max_unique_words=1000000",
    "train.r=2",
    "evaluate.methods=[]",
    "spark.shuffle_partitions=2",
]


def write_dumps_mirror(mirror: Path, date: str) -> dict[str, list[Path]]:
    """The bundled dump samples laid out as dumps.wikimedia.org (and its mirrors) lay out a
    dump run: ``<wiki>/<date>/`` with Wikimedia's file names and a ``dumpstatus.json`` in
    Wikimedia's format (``{"jobs": {job: {"status", "updated", "files": {name: {"size",
    "url", "sha1", "md5"}}}}, "version"}``). enwiki is laid out as a big wiki: its articles
    job lists parts (not on disk) and the recombine job the single file and its index; jobs
    the run does not read still wait, run or failed. Returns the files by wiki."""

    def run_dir(wiki: str, files: dict[str, Path | bytes], jobs: dict[str, Any]) -> list[Path]:
        """``<wiki>/<date>/``: ``files`` (name -> a sample to link to, or bytes) and the
        status of ``jobs`` (job -> the names it lists as done, or another status)."""
        d = mirror / wiki / date
        d.mkdir(parents=True)
        entries = {}
        for name, source in files.items():
            path = d / name
            if isinstance(source, bytes):
                path.write_bytes(source)
            else:
                path.symlink_to(source)
            data = path.read_bytes()
            entries[name] = {
                "size": len(data),
                "url": f"/{wiki}/{date}/{name}",
                "sha1": hashlib.sha1(data).hexdigest(),
                "md5": hashlib.md5(data).hexdigest(),
            }
        status = {}
        for job, names in jobs.items():
            done = not isinstance(names, str)
            listed = {n: entries.get(n, {"size": 1, "url": f"/{wiki}/{date}/{n}"}) for n in names}
            status[job] = {
                "status": "done" if done else names,
                "updated": "2025-01-02 10:00:00",
                "files": listed if done else {},
            }
        (d / "dumpstatus.json").write_text(json.dumps({"jobs": status, "version": "0.8"}))
        return [d / n for n in files]

    en, de, bg = (f"{w}wiki-{date}-pages-articles-multistream" for w in ("en", "de", "bg"))
    sitelinks = f"wikidatawiki-{date}-wb_items_per_site.sql.gz"
    de_xml = (WIKI / "handmade" / "dewiki-sample-pages-articles.xml").read_bytes()
    return {
        "enwiki": run_dir(
            "enwiki",
            {
                f"{en}.xml.bz2": WIKI / "enwiki-sample-pages-articles-multistream.xml.bz2",
                f"{en}-index.txt.bz2": WIKI
                / "enwiki-sample-pages-articles-multistream-index.txt.bz2",
            },
            {
                "articlesmultistreamdump": [f"{en}1.xml-p1p41242.bz2", f"{en}2.xml-p41243p9.bz2"],
                "articlesmultistreamdumprecombine": [f"{en}.xml.bz2", f"{en}-index.txt.bz2"],
                "metahistorybz2dump": "waiting",
                "abstractsdump": "in-progress",
            },
        ),
        "dewiki": run_dir(  # the hand-made dump, compressed as Wikimedia's are
            "dewiki",
            {f"{de}.xml.bz2": bz2.compress(de_xml)},
            {"articlesmultistreamdump": [f"{de}.xml.bz2"], "langlinkstable": "failed"},
        ),
        "bgwiki": run_dir(
            "bgwiki",
            {f"{bg}.xml.bz2": WIKI / "bgwiki-latest-pages-articles-shortened.xml.bz2"},
            {"articlesmultistreamdump": [f"{bg}.xml.bz2"]},
        ),
        "wikidatawiki": run_dir(
            "wikidatawiki",
            {sitelinks: WIKI / "handmade" / "wikidatawiki-sample-wb_items_per_site.sql.gz"},
            {"wbitemspersitetable": [sitelinks]},
        ),
    }


def snippet_json(venv: Path, snippet: str, env: dict[str, str], cwd: Path, *args: str) -> Any:
    """Run ``snippet`` with .venv-airflow's Python; what it printed after ``CR5-JSON``."""
    proc = run([str(venv / "bin" / "python"), "-c", snippet, *args], env, timeout=300, cwd=cwd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [line] = [ln for ln in proc.stdout.splitlines() if ln.startswith("CR5-JSON ")]
    return json.loads(line[len("CR5-JSON ") :])


def embeddings(path: Path):
    """The embeddings dataset as (doc_ids, vectors), sorted by doc_id."""
    import numpy as np
    import pyarrow.parquet as pq

    t = pq.read_table(path, columns=["doc_id", "vector"]).sort_by("doc_id")
    return t.column("doc_id").to_pylist(), np.stack(
        t.column("vector").to_numpy(zero_copy_only=False)
    )


@pytest.mark.slow
def test_dags_test_runs_the_chain_from_the_dumps(tmp_path):
    """``airflow dags test cr5_wikipedia`` on the bundled dump samples as a dumps mirror (its
    dumpstatus.json files written here), on a local[2] master: the sensors, one
    ``ingest_wikipedia`` for all wikis, the chain to evaluate and the search index, the asset
    events; then one task again (idempotent). Last, cr5_retrain's own first task,
    ``ingest``, on a corpus, submitted to a Spark standalone cluster (cr5_retrain's other
    tasks are cr5_wikipedia's: test_wikipedia_dag_waits_for_the_dumps_then_runs_the_chain)."""
    import numpy as np

    venv = airflow_venv()
    airflow = str(venv / "bin" / "airflow")
    assert (PROJECT_BIN / "spark-submit").exists(), "run bash scripts/setup.sh first"
    home = tmp_path / "airflow-home"
    home.mkdir()
    runs, driver, mirror = tmp_path / "runs", tmp_path / "driver", tmp_path / "dumps"
    dumps = write_dumps_mirror(mirror, DUMP_DATE)
    t_start = time.perf_counter()
    # Failures surface at once instead of after minutes of retry delays. The DAG run's
    # spark-submits go to a local[2] master (a connection as JSON): no executor JVM to
    # start per stage.
    env = airflow_env(home, CR5_RETRIES="0", AIRFLOW_CONN_SPARK_DEFAULT=LOCAL_CONN)
    proc = run([airflow, "db", "migrate"], env, timeout=600, cwd=home)
    assert proc.returncode == 0, (
        f"airflow db migrate failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    )

    conf = {
        "wikis": WIKIS,
        "dumps_url": mirror.as_uri(),  # file://...; the files are read from its directory
        # dump_date: null, the run of the 1st (the logical date is the 3rd)
        "profiles": ["conf/local.yaml", "conf/sample.yaml"],
        "root": str(runs),
        "driver_root": str(driver),  # model, checkpoints and reports apart from the datasets
        "lambda_grid": [1.0],
        "overrides": TINY,
        "driver_memory": "1g",
        "spark_conf": QUICK_JVMS,
        # executor_python stays null: the project's venv, the master being on this machine.
    }
    root, driver_dir = runs / RUN_KEY, driver / RUN_KEY
    t0 = time.perf_counter()
    proc = run(
        [airflow, "dags", "test", "cr5_wikipedia", LOGICAL_DATE, "-c", json.dumps(conf)],
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
    log = (tmp_path / "dags-test.log").read_text()
    for stage in [*WIKIPEDIA_CHAIN, *BRANCHES]:  # one spark-submit each, to the local master
        assert f"cr5 stage {stage} on local[2]," in log, f"no spark-submit of {stage}"

    [dag_run] = snippet_json(venv, STATES_SNIPPET, env, home, "cr5_wikipedia")
    assert dag_run["state"] == "success", dag_run
    assert dag_run["conf"]["root"] == str(runs)
    states = {t: s["state"] for t, s in dag_run["tasks"].items()}
    sensors = [f"wait_for_dump[{w}]" for w in ["enwiki", "dewiki", "bgwiki", "wikidatawiki"]]
    assert states == dict.fromkeys(["plan_dumps", *sensors, *WIKIPEDIA_CHAIN, *BRANCHES], "success")

    # One ingestion read every wiki's dump as the sensors found them in the mirror.
    documents = json.loads((root / "documents" / "_manifest.json").read_text())
    report = documents["report"]
    assert report["dumps"] == {
        "en": [str(dumps["enwiki"][0])],
        "de": [str(dumps["dewiki"][0])],
        "bg": [str(dumps["bgwiki"][0])],
    }
    assert report["dbnames"] == {"bg": ["bgwiki"], "de": ["dewiki"], "en": ["enwiki"]}
    assert report["config"]["multistream_index"] == {"en": str(dumps["enwiki"][1])}
    assert report["config"]["wikidata_sitelinks"] == str(dumps["wikidatawiki"][0])
    assert report["documents_per_language"] == {"bg": 1, "de": 5, "en": 5}
    assert documents["rows"] == 11
    # Every stage's output, under this run's own root (datasets) and driver directory.
    for name in ["splits", "vocabulary", "tfidf", "concepts", "embeddings", "evaluation"]:
        assert (root / name / "_manifest.json").exists(), f"{name} missing under {root}"
    model = json.loads((driver_dir / "model" / "model.json").read_text())
    assert model["r"] == 2 and float(model["lam"]) == 1.0
    assert model["languages"] == ["de", "en"]  # bg's one article aligns with none
    evaluation = json.loads((driver_dir / "reports" / "evaluation.json").read_text())
    assert evaluation["r"] == 2
    directions = {(r["query_lang"], r["target_lang"]) for r in evaluation["results"]}
    assert directions == {("de", "en"), ("en", "de")}
    assert (driver_dir / "reports" / "evaluation.md").exists()
    index = json.loads((driver_dir / "index" / "_manifest.json").read_text())
    assert index["model"]["fingerprint"] and index["rows"] == 10
    assert index["csls"]["sources"]  # the CSLS job ran on the executors
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
    events = {e["asset"]: e for e in snippet_json(venv, ASSET_EVENTS_SNIPPET, env, home)}
    assert sorted(events) == ["cr5/documents", "cr5/embeddings", "cr5/index", "cr5/model"]
    assert {e["task_id"] for e in events.values()} == {
        "ingest_wikipedia", "train", "embed", "index",
    }  # fmt: skip
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
    assert model_extra["model_version"] == version and model_extra["r"] == 2
    assert model_extra["path"] == str(driver_dir / "model")
    assert model_extra["languages"] == model["languages"]
    index_extra = events["cr5/index"]["extra"]
    assert index_extra["rows"] == index["rows"] and index_extra["path"].endswith("index")
    assert index_extra["model_fingerprint"] == index["model"]["fingerprint"]
    # and the `airflow dags test` log names them, and what each sensor found
    assert all(f"asset {name}:" in log for name in events), "asset events not logged"
    for wiki in dumps:
        assert f"{wiki} dump {DUMP_DATE}: done:" in log, f"no sensor line for {wiki}"

    # Run a task of the same DAG run again: it rewrites the same dataset, same data.
    manifest = root / "embeddings" / "_manifest.json"
    before, first = manifest.stat().st_mtime_ns, embeddings(root / "embeddings")
    t1 = time.perf_counter()
    proc = run(
        [airflow, "tasks", "test", "cr5_wikipedia", "embed", dag_run["run_id"]],
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

    # cr5_retrain's first task on a corpus (here the documents just ingested): its `corpus`
    # parameter is ingest.input, its run under its own root; submitted to a standalone
    # cluster, whose executors run the project's venv (the master being on loopback).
    corpus_runs = tmp_path / "corpus-runs"
    params = {
        "corpus": str(root / "documents"),
        "profiles": ["conf/local.yaml"],
        "root": str(corpus_runs),
        "overrides": ["spark.shuffle_partitions=2"],
        "driver_memory": "1g",
        "spark_conf": QUICK_JVMS,
    }
    standalone = load_standalone()
    with standalone.StandaloneCluster(tmp_path / "cluster", cores=2, memory="2g") as cluster:
        # The provider reads a spark://host:port URI as conn_type spark, host and port and
        # submits to spark://host:port (see test_masters_on_this_machine_...).
        env["AIRFLOW_CONN_SPARK_DEFAULT"] = cluster.master_url
        t2 = time.perf_counter()
        proc = run(
            [
                airflow,
                "tasks",
                "test",
                "cr5_retrain",
                "ingest",
                LOGICAL_DATE,
                "-t",
                json.dumps(params),
            ],
            env,
            timeout=1200,
            cwd=home,
        )
        ingest_wall = time.perf_counter() - t2
        (tmp_path / "ingest-test.log").write_text(proc.stdout + proc.stderr)
        assert proc.returncode == 0, f"cr5_retrain's ingest failed:\n{proc.stdout[-4000:]}"
        status = cluster.status()
    apps = status.get("completedapps", []) + status.get("activeapps", [])
    assert [a["name"] for a in apps] == ["cr5-ingest"], apps
    assert f"cr5 stage ingest on {cluster.master_url}," in proc.stdout + proc.stderr
    ingested = json.loads((corpus_runs / RUN_KEY / "documents" / "_manifest.json").read_text())
    assert ingested["rows"] == documents["rows"]
    assert ingested["rows_by_lang"] == documents["rows_by_lang"]
    assert "asset cr5/documents:" in proc.stdout + proc.stderr
    total = time.perf_counter() - t_start
    print(
        f"\nairflow dags test: {dags_test_wall:.1f} s; embed again: {rerun_wall:.1f} s; "
        f"cr5_retrain ingest: {ingest_wall:.1f} s; "
        f"whole test (db migrate, cluster, checks): {total:.1f} s"
    )
