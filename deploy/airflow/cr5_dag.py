"""Airflow DAGs ``cr5_retrain`` and ``cr5_wikipedia``: the Cr5 chain, a spark-submit per stage.

``cr5_retrain`` trains on an aligned corpus: ``ingest → split → vocabulary → tfidf → train →
embed → evaluate`` (pipeline/stages/__init__.py's DEMO_CHAIN), and ``index`` (the search
index, :data:`BRANCHES`) after ``embed``, beside ``evaluate``; each a
:class:`Cr5StageOperator` (a ``SparkSubmitOperator`` from
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

``cr5_wikipedia`` trains on Wikimedia's dumps instead of a pre-built corpus:
``plan_dumps → wait_for_dump[<wiki>...] → ingest_wikipedia → split → ... → evaluate`` (and
``index`` after ``embed``), the same chain from ``split`` on. ``plan_dumps`` names the dump run
(``dump_date``; by default the run of the 1st or the 20th that the DAG run's date falls in)
and what to wait for; ``wait_for_dump`` (a :class:`DumpStatusSensor`, mapped: one task
instance per wiki, plus ``wikidatawiki`` when the concepts come from Wikidata) reads
``<dumps_url>/<wiki>/<date>/dumpstatus.json`` in reschedule mode until the jobs whose files
the run reads are ``done``, and, with ``wait_for_files``, until those files are under
``dumps_dir`` at the size the status lists (a mirror still copying them); a ``failed`` job
fails it at once, and it gives up after ``CR5_DUMP_TIMEOUT_HOURS``. One ``ingest_wikipedia``
task then reads every wiki: concept ids join the languages (Wikidata sitelinks,
interlanguage-link components), so they are ingested together into one ``documents``
dataset, written atomically; Spark parallelises inside the task (a work item per range of
bz2 streams). Its parameters: the shared ones above (``lambda_grid``, ``profiles``,
``root``, ``driver_root``, ``overrides``, ``executor_python``, ``spark_conf``,
``driver_memory``, ``repo``, ``venv``) and

- ``wikis``: the Wikipedias, by language code (``en``, ``de``, ...; the wiki is
  ``enwiki``, ``dewiki``, ...);
- ``dump_date``: ``YYYYMMDD`` of the dump run; null: the run's (see above);
- ``dumps_url``: where ``<wiki>/<date>/dumpstatus.json`` is read: https://dumps.wikimedia.org,
  a mirror's URL, or a directory (absolute path or ``file://``);
- ``dumps_dir``: the directory of the dump files, ``<dumps_dir>/<wiki>/<date>/<file>`` (the
  layout of the dumps site and its mirrors), as every Spark executor sees it; null: the
  directory ``dumps_url`` names;
- ``wikidata_sitelinks``: take concept ids from Wikidata's ``wb_items_per_site`` table dump;
- ``dump_tables``: per-wiki table dumps to read as well: ``langlinks`` (concept ids from
  interlanguage links), ``page_props`` (disambiguation pages);
- ``wait_for_files``: wait for the files under ``dumps_dir`` as well as for the status.

Its schedule: ``CR5_WIKIPEDIA_SCHEDULE`` (default 03:00 UTC on the 1st and 20th, when the
dump runs start; the sensors wait for them), its defaults from ``CR5_PARAMS`` too (each DAG
takes the names it has); the sensors poke every ``CR5_DUMP_POKE_MINUTES`` (30).
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
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import (
    DAG,
    Asset,
    BaseHook,
    BaseSensorOperator,
    Param,
    PokeReturnValue,
    get_current_context,
    task,
)
from airflow.sdk.exceptions import AirflowFailException

REPO = Path(os.environ.get("CR5_REPO") or Path(__file__).resolve().parents[2])
# The pipeline's pure modules (stage names, parameter declarations, wiki names; no Spark, no
# numpy) are read from the repository this DAG submits, so the two cannot disagree.
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
from pipeline.config import param_info  # noqa: E402
from pipeline.params import json_schema  # noqa: E402
from pipeline.stages import DEMO_CHAIN  # noqa: E402
from pipeline.wikipedia.wikis import expected_dbname  # noqa: E402

CHAIN: tuple[str, ...] = DEMO_CHAIN
#: cr5_wikipedia's chain: the dumps' ingestion, then the same stages as cr5_retrain's.
WIKIPEDIA_CHAIN: tuple[str, ...] = ("ingest_wikipedia", *(s for s in CHAIN if s != "ingest"))
#: Stages that branch off the chain: (stage, the chain stage it runs after). The search index
#: needs only the embeddings, so it runs beside evaluate (it needs faiss in the venv:
#: pip install 'cr5-on-spark[search]').
BRANCHES: tuple[tuple[str, str], ...] = (("index", "embed"),)
CONN_ID = os.environ.get("CR5_SPARK_CONN_ID", "spark_default")
SCHEDULE = os.environ.get("CR5_SCHEDULE", "0 3 3,22 * *")
#: cr5_wikipedia starts when Wikimedia's dump runs do (the 1st and the 20th); its sensors wait.
WIKIPEDIA_SCHEDULE = os.environ.get("CR5_WIKIPEDIA_SCHEDULE", "0 3 1,20 * *")
RETRIES = int(os.environ.get("CR5_RETRIES", "2"))
#: How often the dump sensors read dumpstatus.json, and how long they wait in all: big wikis'
#: article dumps take days, and the next dump run starts after 11 to 19 days.
DUMP_POKE_MINUTES = float(os.environ.get("CR5_DUMP_POKE_MINUTES", "30"))
DUMP_TIMEOUT_HOURS = float(os.environ.get("CR5_DUMP_TIMEOUT_HOURS", "240"))
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
#: service reloads on ``cr5/index``). Both DAGs update the same assets: they are the
#: product, whichever corpus it was trained on.
OUTLETS: dict[str, tuple[str, ...]] = {
    "ingest": ("documents",),
    "ingest_wikipedia": ("documents",),
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


def _shared_params() -> dict[str, Param]:
    """The parameters both DAGs take (new objects for each DAG)."""
    return {
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
        "driver_memory": _param(
            "driver_memory", "4g", type="string", pattern="^[0-9]+[kmgtKMGT]?$"
        ),
        "repo": _param("repo", str(REPO), type="string", minLength=1),
        "venv": _param("venv", None, type=["null", "string"], description="null: <repo>/.venv"),
    }


def corpus_params() -> dict[str, Param]:
    """cr5_retrain's parameters: the corpus to ingest, and the shared ones."""
    return {
        "corpus": _param(
            "corpus",
            None,
            type=["null", "string"],
            description="ingest.input (null: the profiles')",
        ),
        "languages": _param(
            "languages",
            [],
            type="array",
            items={"type": "string", "pattern": "^[A-Za-z0-9_-]+$"},
            description="ingest.languages ([]: the profiles')",
        ),
        **_shared_params(),
    }


#: Where Wikimedia publishes its dumps (and each run's dumpstatus.json).
DUMPS_URL = "https://dumps.wikimedia.org"
#: A directory: an absolute path or a file:// URL (the executors read the dumps with Python
#: file I/O, so they must be files every executor sees).
_DIRECTORY = "^(/|file:///)"


def wikipedia_params() -> dict[str, Param]:
    """cr5_wikipedia's parameters: which dumps, where, what besides the articles; and the
    shared ones."""
    return {
        "wikis": _param(
            "wikis",
            ["en", "de", "fr", "es"],
            type="array",
            minItems=1,
            uniqueItems=True,
            items={"type": "string", "pattern": "^[a-z][a-z0-9-]*$"},
            description="Wikipedias by language code (en: enwiki)",
        ),
        "dump_date": _param(
            "dump_date",
            None,
            type=["null", "string"],
            pattern="^[0-9]{8}$",
            description="YYYYMMDD of the dump run (null: the 1st or 20th the run's date is in)",
        ),
        "dumps_url": _param(
            "dumps_url",
            DUMPS_URL,
            type="string",
            pattern=f"^https?://|{_DIRECTORY}",
            description="where <wiki>/<date>/dumpstatus.json is read: a URL or a directory",
        ),
        "dumps_dir": _param(
            "dumps_dir",
            None,
            type=["null", "string"],
            pattern=_DIRECTORY,
            description="the dump files as the executors see them, <dumps_dir>/<wiki>/<date>/ "
            "(null: dumps_url's directory)",
        ),
        "wikidata_sitelinks": _param(
            "wikidata_sitelinks",
            True,
            type="boolean",
            description="concept ids from wikidatawiki's wb_items_per_site table dump",
        ),
        "dump_tables": _param(
            "dump_tables",
            [],
            type="array",
            uniqueItems=True,
            items={"enum": sorted(TABLE_JOBS)},
            description="each wiki's table dumps to read too: langlinks, page_props",
        ),
        "wait_for_files": _param(
            "wait_for_files",
            True,
            type="boolean",
            description="wait until the listed files are under dumps_dir at their sizes",
        ),
        **_shared_params(),
    }


# --------------------------------------------------------------------------- the dumps

#: The jobs of a wiki's dump run (keys of dumpstatus.json's "jobs") whose files the run reads,
#: by role. The first job the status lists is the one waited for: big wikis' articles come
#: in parts (articlesmultistreamdump), recombined into one file with one index
#: (articlesmultistreamdumprecombine), which the ingestion splits by its index; small
#: wikis have no recombine job, their articlesmultistreamdump is one file and its index.
ARTICLES_JOBS: tuple[str, ...] = ("articlesmultistreamdumprecombine", "articlesmultistreamdump")
#: Table dumps (each wiki's SQL tables) by the name of the ``dump_tables`` parameter.
TABLE_JOBS: dict[str, str] = {"langlinks": "langlinkstable", "page_props": "pagepropstable"}
#: Wikidata's sitelinks table, in wikidatawiki's dump run.
SITELINKS_WIKI, SITELINKS_JOB = "wikidatawiki", "wbitemspersitetable"


def dump_run_date(when: dt.datetime) -> str:
    """The Wikimedia dump run ``when`` falls in: runs start on the 1st and the 20th of each
    month (UTC), named by that day as ``YYYYMMDD``."""
    when = when.astimezone(dt.timezone.utc)
    return f"{when:%Y%m}{20 if when.day >= 20 else 1:02d}"


def _directory(location: str) -> str | None:
    """The local directory a ``file://`` URL or an absolute path names; None for http(s)."""
    if location.startswith(("http://", "https://")):
        return None
    if location.startswith("file://"):
        location = urllib.parse.unquote(urllib.parse.urlparse(location).path)
    if not location.startswith("/"):
        raise ValueError(f"{location!r} is neither an http(s) URL nor an absolute path")
    return location.rstrip("/") or "/"


def dump_targets(params: Mapping[str, Any], when: dt.datetime) -> list[dict[str, Any]]:
    """What each ``wait_for_dump`` task waits for: one target per wiki (and wikidatawiki when
    ``wikidata_sitelinks``), with its dumpstatus.json, its files' directory and its jobs by
    role (the first listed of each role's jobs is waited for)."""
    date = params.get("dump_date") or dump_run_date(when)
    base = str(params.get("dumps_url") or DUMPS_URL).rstrip("/")
    directory = params.get("dumps_dir") or _directory(base)
    if directory is None:
        raise ValueError(
            f"dumps_dir is null and dumps_url {base!r} is a URL: set dumps_dir to the "
            "directory that holds the dump files as every Spark executor sees it "
            "(<dumps_dir>/<wiki>/<date>/..., the layout of the dumps site and its mirrors)"
        )
    directory = _directory(directory)
    tables = list(params.get("dump_tables") or [])
    unknown = sorted(set(tables) - set(TABLE_JOBS))
    if unknown:
        raise ValueError(f"dump_tables {unknown} unknown; tables: {sorted(TABLE_JOBS)}")

    def target(lang: str | None, wiki: str, roles: dict[str, list[str]]) -> dict[str, Any]:
        return {
            "lang": lang,
            "wiki": wiki,
            "date": date,
            "status_url": f"{base}/{wiki}/{date}/dumpstatus.json",
            "directory": f"{directory.rstrip('/')}/{wiki}/{date}",
            "roles": roles,
            "wait_for_files": bool(params.get("wait_for_files", True)),
        }

    targets = [
        target(
            lang,
            expected_dbname(lang),
            {"articles": list(ARTICLES_JOBS), **{t: [TABLE_JOBS[t]] for t in tables}},
        )
        for lang in params["wikis"]
    ]
    if params.get("wikidata_sitelinks", True):
        targets.append(target(None, SITELINKS_WIKI, {"sitelinks": [SITELINKS_JOB]}))
    return targets


class DumpStatusError(RuntimeError):
    """A dumpstatus.json that cannot be read (other than not published yet) or is not one."""


def read_dump_status(url: str, timeout: float = 60.0) -> dict[str, Any] | None:
    """The dumpstatus.json at ``url`` (http(s), file:// or a path); None while it does not
    exist (HTTP 404, no file): the dump run has not started. Anything else that keeps it from
    being read, or a document without a ``jobs`` object, is a :class:`DumpStatusError`."""
    path = None if url.startswith(("http://", "https://")) else Path(_directory(url) or url)
    try:
        if path is None:
            request = urllib.request.Request(
                url, headers={"User-Agent": "cr5-on-spark Airflow DAG cr5_wikipedia"}
            )
            try:
                with urllib.request.urlopen(request, timeout=timeout) as response:
                    raw = response.read()
            except urllib.error.HTTPError as exc:
                if exc.code == 404:
                    return None
                raise DumpStatusError(f"{url}: HTTP {exc.code} {exc.reason}") from exc
        else:
            if not path.exists():
                return None
            raw = path.read_bytes()
        status = json.loads(raw)
    except (OSError, urllib.error.URLError) as exc:
        raise DumpStatusError(f"cannot read {url}: {exc}") from exc
    except ValueError as exc:  # JSON (and UnicodeDecodeError)
        raise DumpStatusError(f"{url} is not JSON: {exc}") from exc
    if not isinstance(status, dict) or not isinstance(status.get("jobs"), dict):
        raise DumpStatusError(f"{url} is not a Wikimedia dumpstatus.json: no 'jobs' object")
    return status


class DumpCheck:
    """What a dumpstatus.json says about a target's roles: the done jobs' files (role ->
    job and ``{file name: its entry}``), and the jobs still waiting or failed (role ->
    ``"job: status"``). (A plain class: the module also loads outside ``sys.modules``.)"""

    def __init__(self) -> None:
        self.done: dict[str, tuple[str, dict[str, Any]]] = {}
        self.waiting: dict[str, str] = {}
        self.failed: dict[str, str] = {}


def check_dump(status: Mapping[str, Any], roles: Mapping[str, Sequence[str]]) -> DumpCheck:
    """Each role's job in ``status`` (the first of its jobs the status lists): ``done`` with
    its files, ``failed``, or anything else (``waiting``, ``in-progress``, not listed yet)."""
    check = DumpCheck()
    jobs = status["jobs"]
    for role, candidates in roles.items():
        job = next((j for j in candidates if j in jobs), None)
        if job is None:
            check.waiting[role] = f"{' or '.join(candidates)}: not listed"
            continue
        state = str(jobs[job].get("status"))
        if state == "done":
            check.done[role] = (job, dict(jobs[job].get("files") or {}))
            if not check.done[role][1]:
                check.failed[role] = f"{job}: done but lists no files"
        elif state == "failed":
            check.failed[role] = f"{job}: failed"
        else:
            check.waiting[role] = f"{job}: {state}"
    return check


def missing_files(directory: str, files: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The files of ``files`` (name -> dumpstatus entry) that are not in ``directory`` at the
    size their entry lists (or at all, without a size): a mirror still copying them."""
    missing = []
    for name, info in sorted(files.items()):
        path = Path(directory) / name
        size = info.get("size")
        if not path.is_file():
            missing.append(f"{path}: absent")
        elif size is not None and path.stat().st_size != int(size):
            missing.append(f"{path}: {path.stat().st_size} bytes of {size}")
    return missing


class DumpStatusSensor(BaseSensorOperator):
    """Waits for one wiki's dump: succeeds when every job whose files the run reads is
    ``done`` in ``<dumps_url>/<wiki>/<date>/dumpstatus.json`` (and, with ``wait_for_files``,
    when those files are in the target's directory at their listed sizes), returning them
    as its XCom ``{"lang", "wiki", "date", "files": {role: [paths]}}``.

    ``target`` is one of :func:`dump_targets`' (the task is mapped over them). Not published
    yet, a job waiting or in progress: poke again (reschedule mode frees the worker
    meanwhile) until the sensor's timeout. A ``failed`` job fails the task without retries:
    Wikimedia may rerun it, then clear the task. A status that cannot be read or is no
    dumpstatus.json fails the task like any error (with retries).
    """

    def __init__(self, *, target: dict[str, Any], **kwargs: Any) -> None:
        kwargs.setdefault("mode", "reschedule")
        super().__init__(**kwargs)
        self.target = target

    def poke(self, context: Any) -> bool | PokeReturnValue:
        t = self.target
        where = f"{t['wiki']} dump {t['date']}"
        status = read_dump_status(t["status_url"])
        if status is None:
            self.log.info("%s: %s not published yet", where, t["status_url"])
            return False
        check = check_dump(status, t["roles"])
        if check.failed:
            raise AirflowFailException(
                f"{where}: {'; '.join(check.failed.values())} according to {t['status_url']}. "
                "Clear this task to wait again once Wikimedia has rerun the job, or run on "
                "another dump_date."
            )
        if check.waiting:
            self.log.info("%s: waiting for %s", where, "; ".join(check.waiting.values()))
            return False
        files = {role: files for role, (_, files) in check.done.items()}
        if t.get("wait_for_files", True):
            missing = [
                m
                for role_files in files.values()
                for m in missing_files(t["directory"], role_files)
            ]
            if missing:
                self.log.info("%s: done, waiting for its files: %s", where, "; ".join(missing))
                return False
        paths = {
            role: [f"{t['directory']}/{name}" for name in sorted(role_files, key=_natural)]
            for role, role_files in files.items()
        }
        self.log.info("%s: done: %s", where, json.dumps(paths))
        return PokeReturnValue(
            is_done=True,
            xcom_value={"lang": t["lang"], "wiki": t["wiki"], "date": t["date"], "files": paths},
        )


def _natural(name: str) -> list[Any]:
    """Sort key putting part 2 before part 10 (``...multistream2.xml...`` < ``...10...``)."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def wikipedia_settings(dumps: Sequence[Mapping[str, Any]]) -> list[str]:
    """``--set`` settings of the ``wikipedia`` section for the sensed dumps (the
    ``wait_for_dump`` tasks' XComs): each language's articles (its single multistream file
    with its index, or its parts), langlinks and page_props, and Wikidata's sitelinks."""
    dumps_by_lang: dict[str, str] = {}
    index: dict[str, str] = {}
    tables: dict[str, dict[str, str]] = {role: {} for role in TABLE_JOBS}
    sitelinks: list[str] = []
    for dump in dumps:
        files, lang = dump["files"], dump["lang"]
        for paths in files.values():
            for path in paths:
                if "," in path:  # wikipedia.dumps separates parts with commas
                    raise ValueError(f"dump file paths must not contain commas: {path!r}")
        if "articles" in files:
            indexes = [p for p in files["articles"] if "-index" in Path(p).name]
            articles = [p for p in files["articles"] if p not in indexes]
            if not articles:
                raise ValueError(f"{dump['wiki']} {dump['date']}: no article files in {files}")
            dumps_by_lang[lang] = ",".join(articles)
            if len(articles) == 1 and len(indexes) == 1:  # parts are split at bz2 blocks
                index[lang] = indexes[0]
        for role in TABLE_JOBS:
            if role in files:
                tables[role][lang] = ",".join(files[role])
        sitelinks += files.get("sitelinks", [])
    if not dumps_by_lang:
        raise ValueError("no Wikipedia dump was sensed: nothing to ingest")
    settings = [
        f"wikipedia.dumps={json.dumps(dumps_by_lang, sort_keys=True)}",
        f"wikipedia.multistream_index={json.dumps(index, sort_keys=True)}",
    ]
    for role, by_lang in tables.items():
        if by_lang:
            settings.append(f"wikipedia.{role}={json.dumps(by_lang, sort_keys=True)}")
    if sitelinks:
        settings.append(f"wikipedia.wikidata_sitelinks={json.dumps(','.join(sitelinks))}")
    return settings


# --------------------------------------------------------------------------- the stages


def _check_defaults() -> None:
    """``CR5_PARAMS`` may name only parameters of these DAGs (a misspelt name is an error)."""
    known = set(corpus_params()) | set(wikipedia_params())
    if set(DEFAULTS) - known:
        raise ValueError(
            f"CR5_PARAMS names unknown parameters {sorted(set(DEFAULTS) - known)}; "
            f"parameters are {sorted(known)}"
        )


_check_defaults()
PARAMS = corpus_params()


def run_time(context: Any) -> dt.datetime:
    """When this DAG run is for: its logical date, else when it was due."""
    return context.get("logical_date") or context["dag_run"].run_after


def run_key(context: Any) -> str:
    """A path-safe name for this DAG run: its logical date, else when it was due (UTC)."""
    return run_time(context).astimezone(dt.timezone.utc).strftime("%Y%m%dT%H%M%S")


def run_paths(params: dict[str, Any], key: str) -> tuple[str, str | None]:
    """This run's root (``<root>/<key>``) and the separate directory of what the driver
    writes itself (``<driver_root>/<key>``; None: under the root). Both may be any store
    the cluster's Hadoop configuration resolves (pipeline/io/storage.py)."""
    root = f"{params['root'].rstrip('/')}/{key}"
    driver_root = params.get("driver_root")
    if driver_root:
        return root, f"{driver_root.rstrip('/')}/{key}"
    return root, None


def stage_arguments(
    params: dict[str, Any],
    root: str,
    driver_dir: str | None = None,
    stage_settings: Sequence[str] = (),
) -> list[str]:
    """jobs/<stage>.py's arguments: the profiles, then ``--set`` from the parameters.

    Values are written as JSON, which the jobs parse as YAML: strings stay strings
    whatever they contain. ``params``' templates must be rendered already.
    ``stage_settings`` (what the stage's task found out, e.g. the sensed dumps) come
    before the ``overrides``, which are applied last.
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
    settings += list(stage_settings)
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
        self.application_args = stage_arguments(
            params, root, driver_dir, self.stage_settings(context)
        )
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

    def stage_settings(self, context: Any) -> list[str]:
        """More ``--set`` settings of this stage from the run (none here)."""
        return []

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


class Cr5WikipediaIngestOperator(Cr5StageOperator):
    """``jobs/ingest_wikipedia.py`` on the dumps the ``wait_for_dump`` sensors found: their
    files become the ``wikipedia`` section's settings (:func:`wikipedia_settings`)."""

    def __init__(self, *, sensors: str = "wait_for_dump", **kwargs: Any) -> None:
        super().__init__(stage="ingest_wikipedia", **kwargs)
        self.sensors = sensors

    def stage_settings(self, context: Any) -> list[str]:
        # A list of task ids: every mapped instance's XCom, as a list even for one wiki.
        dumps = [d for d in context["ti"].xcom_pull(task_ids=[self.sensors]) if d]
        if not dumps:
            raise AirflowFailException(
                f"no dumps from {self.sensors}: run the DAG's sensors before {self.task_id}"
            )
        return wikipedia_settings(dumps)


def _dag(dag_id: str, description: str, schedule: str, params: dict[str, Param]) -> DAG:
    """A DAG with the settings both share: the schedule (a cron expression, or "none"),
    one active run, no catch-up, the retries of :data:`RETRIES`."""
    return DAG(
        dag_id=dag_id,
        description=description,
        schedule=None if schedule.strip().lower() in ("", "none") else schedule,
        start_date=dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc),
        catchup=False,
        max_active_runs=1,
        params=params,
        tags=["cr5", "spark"],
        default_args={
            "retries": RETRIES,
            "retry_delay": dt.timedelta(minutes=5),
            "retry_exponential_backoff": 2.0,
            "max_retry_delay": dt.timedelta(hours=1),
            "execution_timeout": dt.timedelta(hours=24),
        },
        doc_md=__doc__,
    )


def stage_tasks(
    stages: Sequence[str],
    branches: Sequence[tuple[str, str]] = BRANCHES,
    first: Cr5StageOperator | None = None,
) -> dict[str, Cr5StageOperator]:
    """The chain's tasks, one :class:`Cr5StageOperator` per stage in order (``first``, if
    given, is the first stage's task), and the branches after theirs; in the DAG of the
    enclosing ``with``."""
    tasks: dict[str, Cr5StageOperator] = {}
    previous = None
    for stage in stages:
        op = first if first is not None and not tasks else Cr5StageOperator(stage=stage)
        if previous is not None:
            previous >> op
        previous = tasks[stage] = op
    for stage, after in branches:
        if after in tasks:
            tasks[after] >> Cr5StageOperator(stage=stage)
    return tasks


def build_dag(
    dag_id: str = "cr5_retrain",
    stages: Sequence[str] = CHAIN,
    branches: Sequence[tuple[str, str]] = BRANCHES,
) -> DAG:
    """``cr5_retrain``: the chain on an aligned corpus (the ``corpus`` parameter)."""
    with _dag(
        dag_id,
        "Cr5 crosslingual embeddings: ingest, split, features, train, embed, evaluate, "
        "search index",
        SCHEDULE,
        PARAMS,
    ) as dag:
        stage_tasks(stages, branches)
    return dag


@task(task_id="plan_dumps", retries=0)
def plan_dumps() -> list[dict[str, Any]]:
    """The dumps this run waits for (:func:`dump_targets`), from its parameters and date."""
    context = get_current_context()
    return dump_targets(context["params"], run_time(context))


def build_wikipedia_dag(
    dag_id: str = "cr5_wikipedia",
    stages: Sequence[str] = WIKIPEDIA_CHAIN,
    branches: Sequence[tuple[str, str]] = BRANCHES,
) -> DAG:
    """``cr5_wikipedia``: wait for each wiki's dump, ingest them all, then the chain."""
    if stages[0] != "ingest_wikipedia":
        raise ValueError(f"{dag_id}'s chain starts with ingest_wikipedia, not {stages[0]}")
    with _dag(
        dag_id,
        "Cr5 crosslingual embeddings from Wikimedia's dumps: wait for them, ingest, split, "
        "features, train, embed, evaluate, search index",
        WIKIPEDIA_SCHEDULE,
        wikipedia_params(),
    ) as dag:
        sensors = DumpStatusSensor.partial(
            task_id="wait_for_dump",
            mode="reschedule",  # frees the worker between pokes (days for big wikis)
            poke_interval=dt.timedelta(minutes=DUMP_POKE_MINUTES),
            timeout=dt.timedelta(hours=DUMP_TIMEOUT_HOURS),
            map_index_template="{{ task.target['wiki'] }}",
        ).expand(target=plan_dumps())
        ingest = Cr5WikipediaIngestOperator(sensors="wait_for_dump")
        sensors >> ingest
        stage_tasks(stages, branches, first=ingest)
    return dag


dag = build_dag()
wikipedia_dag = build_wikipedia_dag()
