"""The whole chain at a given size: generate -> train -> embed -> evaluate, measured per stage.

Every stage runs as its own process (``python jobs/<stage>.py``, which starts its own
local Spark JVM), so each stage's peak memory is its own. Per stage this records:

* wall time of the process (Spark session start included; ``session_start_s`` from the
  event log says how much of it);
* CPU seconds: a sampler thread reads ``/proc`` every ``--interval`` s for the stage's
  process tree and keeps each process's last ``utime + stime``, split into the driver
  (the Python process we started), the JVM (driver and executors: ``local[N]`` runs both in
  one JVM) and the Python workers (``pyspark.daemon`` and its forks); plus
  ``getrusage(RUSAGE_CHILDREN)`` around the stage (processes reaped by their parents);
* peak memory: ``VmHWM`` (exact high-water mark) of the driver Python and of the JVM, the
  largest single Python worker's ``VmHWM``, and the largest sampled sums (driver + JVM;
  all Python workers; the whole tree);
* Spark's own metrics from the stage's event log (``spark.eventLog.*`` set in a per-stage
  profile): jobs, stages and tasks, executor CPU and run time, GC, input / output /
  shuffle-read / shuffle-write bytes, result bytes returned to the driver, spill, and the
  bytes broadcast (the sizes of the distinct ``broadcast_*_piece*`` blocks: what each
  executor fetches once);
* the stage's own report: passes over X, eigensolver iterations and fit time (train), the
  embed throughput, P@k and MRR per direction (evaluate).

Usage (repository root)::

    OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/bench_chain.py --docs 10000 --r 100 \\
        --also-local --out bench/results/chain_10k.json
    .venv/bin/python bench/bench_chain.py --plot bench/results/chain_10k.json \\
        bench/results/chain_100k.json --plot-out bench/results/chain_scaling.png

Options not listed by ``--help`` are passed to the generator (``bench/wikishape.py``:
``--vocab``, ``--topics``, ...); ``--set key=value`` goes to every stage.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.machine import machine_info as shared_machine_info  # noqa: E402
from bench.machine import process_tree  # noqa: E402

PYTHON = sys.executable
MB = 1024.0 * 1024.0
CLK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


# --------------------------------------------------------------------------- machine


def machine_info() -> dict[str, Any]:
    """bench/machine.py's facts, plus the Java version Spark runs on."""
    java = subprocess.run(["java", "-version"], capture_output=True, text=True)
    return {
        **shared_machine_info("pyarrow", "pyspark"),
        "java": (java.stderr.splitlines() or ["?"])[0],
    }


# --------------------------------------------------------------------------- /proc sampler


def _status_kib(pid: int, key: str) -> float:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(key):
                    return float(line.split()[1])
    except OSError:
        pass
    return 0.0


class TreeSampler(threading.Thread):
    """Samples CPU and memory of the process tree rooted at ``root`` (see module docstring)."""

    def __init__(self, root: int, interval: float, extra_roots: tuple[int, ...] = ()) -> None:
        super().__init__(daemon=True)
        self.root = root
        #: Standalone workers: their executors (JVM and Python workers) are not the stage's
        #: children but theirs.
        self.extra_roots = extra_roots
        self.interval = interval
        self.stop_event = threading.Event()
        self.samples = 0
        self.ticks: dict[int, int] = {}
        self.kind: dict[int, str] = {}
        self.hwm: dict[int, float] = {}  # VmHWM, KiB
        self.peak = {"driver_plus_jvm": 0.0, "python_workers_sum": 0.0, "tree": 0.0}
        self.max_workers = 0

    def _tree(self) -> dict[int, list[str]]:
        tree = process_tree(self.root)
        for root in self.extra_roots:
            tree.update(process_tree(root))
        return tree

    def _classify(self, pid: int) -> str:
        if pid == self.root:
            return "driver"
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            return "other"
        if "java" in cmd.split(" ")[0]:
            if "CoarseGrainedExecutorBackend" in cmd:
                return "executor_jvm"
            if "deploy.worker.Worker" in cmd or "deploy.master.Master" in cmd:
                return "other"  # the cluster's daemons
            return "jvm"
        if "pyspark.daemon" in cmd or "pyspark.worker" in cmd:
            return "python_worker"
        return "other"

    def sample(self) -> None:
        tree = self._tree()
        rss = {"driver": 0.0, "jvm": 0.0, "executor_jvm": 0.0, "python_worker": 0.0, "other": 0.0}
        n_workers = 0
        for pid, fields in tree.items():
            # Re-read every time: a fork shows its parent's command line until it execs. Never
            # back to "other": an exiting JVM (a zombie while the stage waits for it) has no
            # command line, and its peak and CPU must stay the JVM's.
            kind = self._classify(pid)
            if kind == "other" and self.kind.get(pid, "other") != "other":
                kind = self.kind[pid]
            self.kind[pid] = kind
            # stat fields 14, 15 (utime, stime) and 24 (rss pages), after "pid (comm) "
            self.ticks[pid] = int(fields[11]) + int(fields[12])
            rss[kind] += int(fields[21]) * PAGE / 1024.0
            self.hwm[pid] = max(self.hwm.get(pid, 0.0), _status_kib(pid, "VmHWM:"))
            n_workers += kind == "python_worker"
        pk = self.peak
        pk["driver_plus_jvm"] = max(pk["driver_plus_jvm"], rss["driver"] + rss["jvm"])
        pk["executor_jvms"] = max(pk.get("executor_jvms", 0.0), rss["executor_jvm"])
        pk["python_workers_sum"] = max(pk["python_workers_sum"], rss["python_worker"])
        pk["tree"] = max(pk["tree"], sum(rss.values()))
        self.max_workers = max(self.max_workers, n_workers)
        self.samples += 1

    def run(self) -> None:
        while not self.stop_event.is_set():
            self.sample()
            self.stop_event.wait(self.interval)

    def result(self) -> dict[str, Any]:
        def cpu(kind: str) -> float:
            return sum(t for p, t in self.ticks.items() if self.kind.get(p) == kind) / CLK

        def hwm(kind: str) -> float:
            vals = [h for p, h in self.hwm.items() if self.kind.get(p) == kind]
            return max(vals, default=0.0) / 1024.0

        return {
            "samples": self.samples,
            "cpu_s": {
                k: round(cpu(k), 2)
                for k in ("driver", "jvm", "executor_jvm", "python_worker", "other")
            },
            "cpu_s_total": round(sum(self.ticks.values()) / CLK, 2),
            "peak_mb": {
                "driver_python_hwm": round(hwm("driver"), 1),
                "jvm_hwm": round(hwm("jvm"), 1),
                "executor_jvm_hwm_max": round(hwm("executor_jvm"), 1),
                "executor_jvms_rss_sum": round(self.peak.get("executor_jvms", 0.0) / 1024.0, 1),
                "python_worker_hwm_max": round(hwm("python_worker"), 1),
                "driver_plus_jvm_rss": round(self.peak["driver_plus_jvm"] / 1024.0, 1),
                "python_workers_rss_sum": round(self.peak["python_workers_sum"] / 1024.0, 1),
                "tree_rss": round(self.peak["tree"] / 1024.0, 1),
            },
            "python_workers_max_count": self.max_workers,
        }


# --------------------------------------------------------------------------- event log


def spark_metrics(event_dir: Path, launched_epoch: float | None = None) -> dict[str, Any]:
    """Totals over the Spark application(s) whose event logs are in ``event_dir``.

    ``launched_epoch``: when the stage process started (``time.time()``); the delay to
    the application's start event is reported as ``session_start_s``.
    """
    tot = {
        "jobs": 0,
        "stages": 0,
        "tasks": 0,
        "executor_run_s": 0.0,
        "executor_cpu_s": 0.0,
        "jvm_gc_s": 0.0,
        "input_bytes": 0,
        "output_bytes": 0,
        "shuffle_write_bytes": 0,
        "shuffle_read_bytes": 0,
        "result_bytes": 0,
        "spill_memory_bytes": 0,
        "spill_disk_bytes": 0,
        "peak_execution_memory_max": 0,
        "broadcast_bytes": 0,
        "broadcasts": 0,
    }
    pieces: dict[str, int] = {}
    start = None
    app_start = None
    # Spark 4 writes rolling logs: eventlog_v2_<app>/events_<n>_<app>.
    files = [f for f in event_dir.rglob("*") if f.is_file()] if event_dir.exists() else []
    files.sort(
        key=lambda f: (
            str(f.parent),
            int(f.name.split("_")[1])
            if f.name.startswith("events_") and f.name.split("_")[1].isdigit()
            else 0,
        )
    )
    for f in files:
        # only the event files (not appstatus markers or Hadoop's .crc side files, which
        # Spark renames while the application ends)
        if not f.name.startswith("events_"):
            continue
        with open(f) as fh:
            for line in fh:
                try:
                    ev = json.loads(line)
                except ValueError:
                    continue
                kind = ev.get("Event")
                if kind == "SparkListenerJobStart":
                    tot["jobs"] += 1
                elif kind == "SparkListenerStageCompleted":
                    tot["stages"] += 1
                elif kind == "SparkListenerApplicationStart":
                    app_start = ev.get("Timestamp")
                elif kind == "SparkListenerTaskEnd":
                    tot["tasks"] += 1
                    m = ev.get("Task Metrics") or {}
                    tot["executor_run_s"] += m.get("Executor Run Time", 0) / 1e3
                    tot["executor_cpu_s"] += m.get("Executor CPU Time", 0) / 1e9
                    tot["jvm_gc_s"] += m.get("JVM GC Time", 0) / 1e3
                    tot["result_bytes"] += m.get("Result Size", 0)
                    tot["spill_memory_bytes"] += m.get("Memory Bytes Spilled", 0)
                    tot["spill_disk_bytes"] += m.get("Disk Bytes Spilled", 0)
                    tot["peak_execution_memory_max"] = max(
                        tot["peak_execution_memory_max"], m.get("Peak Execution Memory", 0)
                    )
                    tot["input_bytes"] += (m.get("Input Metrics") or {}).get("Bytes Read", 0)
                    tot["output_bytes"] += (m.get("Output Metrics") or {}).get("Bytes Written", 0)
                    sw = m.get("Shuffle Write Metrics") or {}
                    tot["shuffle_write_bytes"] += sw.get("Shuffle Bytes Written", 0)
                    sr = m.get("Shuffle Read Metrics") or {}
                    tot["shuffle_read_bytes"] += sr.get("Remote Bytes Read", 0) + sr.get(
                        "Local Bytes Read", 0
                    )
                elif kind == "SparkListenerBlockUpdated":
                    info = ev.get("Block Updated Info") or {}
                    block = str(info.get("Block ID", ""))
                    if block.startswith("broadcast_") and "_piece" in block:
                        size = int(info.get("Memory Size", 0)) + int(info.get("Disk Size", 0))
                        if size > 0:
                            pieces[block] = max(pieces.get(block, 0), size)
                if start is None and ev.get("Timestamp"):
                    start = ev["Timestamp"]
    tot["broadcast_bytes"] = int(sum(pieces.values()))
    tot["broadcasts"] = len({b.split("_piece")[0] for b in pieces})
    for k in ("executor_run_s", "executor_cpu_s", "jvm_gc_s"):
        tot[k] = round(tot[k], 2)
    if app_start is not None and launched_epoch is not None:
        tot["session_start_s"] = round(app_start / 1e3 - launched_epoch, 2)
    return tot


# --------------------------------------------------------------------------- stages


def run_stage(
    name: str,
    cmd: list[str],
    workdir: Path,
    interval: float,
    env: dict[str, str],
    extra_roots: tuple[int, ...] = (),
) -> dict[str, Any]:
    """Run one stage process, sampled; return wall, CPU, memory and its output's tail."""
    log_path = workdir / "logs" / f"{name}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    print(f"-- {name}: {' '.join(cmd)}", flush=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    launched = time.time()
    t0 = time.perf_counter()
    with open(log_path, "w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
        sampler = TreeSampler(proc.pid, interval, extra_roots)
        sampler.start()
        rc = proc.wait()
        sampler.stop_event.set()
        sampler.join()
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if rc != 0:
        tail = log_path.read_text(errors="replace").splitlines()[-30:]
        raise SystemExit(f"stage {name} failed (exit {rc}); log {log_path}:\n" + "\n".join(tail))
    res = {
        "wall_s": round(wall, 2),
        **sampler.result(),
        "cpu_s_rusage_children": round(
            (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 2
        ),
        "log": str(log_path),
        "launched_epoch": launched,
    }
    print(
        f"   {name}: {wall:.1f} s wall, {res['cpu_s_total']:.1f} CPU-s, peak JVM "
        f"{res['peak_mb']['jvm_hwm']:.0f} MB, driver Python "
        f"{res['peak_mb']['driver_python_hwm']:.0f} MB",
        flush=True,
    )
    return res


def _stage_profile(workdir: Path, name: str, more: dict[str, str] | None = None) -> Path:
    events = workdir / "events" / name
    events.mkdir(parents=True, exist_ok=True)
    path = workdir / "profiles" / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    conf = {
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": events.resolve().as_uri(),
        "spark.eventLog.compress": "false",
        "spark.eventLog.logBlockUpdates.enabled": "true",
        "spark.eventLog.logStageExecutorMetrics": "true",
        **(more or {}),
    }
    path.write_text(json.dumps({"spark": {"conf": conf}}, indent=2))
    return path


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def _manifest(root: Path, dataset: str) -> dict[str, Any]:
    return _read_json(root / dataset / "_manifest.json").get("report", {})


def _quality(report: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"directions": []}
    for row in report.get("results", []):
        out["directions"].append(
            {
                "direction": f"{row['query_lang']}->{row['target_lang']}",
                "measure": row["measure"],
                "P@1": row["precision_at"].get("1", row["precision_at"].get(1)),
                "P@10": row["precision_at"].get("10", row["precision_at"].get(10)),
                "MRR": row["mrr"],
                "n_queries": row["n_queries"],
                "n_candidates": row["n_candidates"],
            }
        )
    for m in ("cosine", "csls"):
        vals = [d["P@1"] for d in out["directions"] if d["measure"] == m]
        if vals:
            out[f"P@1_mean_{m}"] = round(sum(vals) / len(vals), 4)
            out[f"P@1_min_{m}"] = round(min(vals), 4)
    cands = [d["n_candidates"] for d in out["directions"]]
    if cands:
        out["chance_P@1_max"] = round(1.0 / min(cands), 6)
    return out


def _cluster_settings(args: argparse.Namespace, cluster: Any) -> tuple[list[str], dict]:
    """``--set`` values and Spark properties that run a stage on the standalone cluster."""
    conf = {
        "spark.executor.memory": args.executor_memory,
        "spark.executor.cores": str(args.worker_cores),
        "spark.pyspark.python": PYTHON,
        "spark.executorEnv.PYTHONPATH": str(ROOT),
        "spark.executorEnv.OPENBLAS_NUM_THREADS": "1",
    }
    if args.executor_pyspark_memory:
        conf["spark.executor.pyspark.memory"] = args.executor_pyspark_memory
    if args.executor_overhead:
        conf["spark.executor.memoryOverhead"] = args.executor_overhead
    return [f"spark.master={cluster.master_url}"], conf


def run_chain(
    args: argparse.Namespace, generator_args: list[str], cluster: Any = None
) -> dict[str, Any]:
    workdir = Path(args.workdir or f"/tmp/cr5_chain_{args.docs}").resolve()
    generated = workdir / "out"
    root = workdir / "out_text" if args.text_stages else generated
    workdir.mkdir(parents=True, exist_ok=True)
    n_test = args.n_test or min(1000, max(100, args.docs // 100))
    base = [
        "--conf",
        str(ROOT / "conf" / "local.yaml"),
        "--conf",
        str(ROOT / "bench" / "wikishape.yaml"),
    ]
    sets = [
        f"paths.root={root}",
        f"train.r={args.r}",
        f"split.n_test={n_test}",
        f"spark.driver_memory={args.driver_memory}",
        *args.overrides,
    ]
    cluster_conf: dict[str, str] = {}
    extra_roots: tuple[int, ...] = ()
    if cluster is not None:
        master_sets, cluster_conf = _cluster_settings(args, cluster)
        sets += master_sets
        extra_roots = tuple(proc.pid for proc in cluster.workers.values())
    env = dict(os.environ)
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    env["PYTHONPATH"] = str(ROOT) + (
        os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""
    )

    def command(stage: str, script: str, extra: list[str]) -> list[str]:
        prof = _stage_profile(workdir, stage, cluster_conf)
        return [
            PYTHON,
            str(ROOT / script),
            *base,
            "--conf",
            str(prof),
            *[x for s in sets for x in ("--set", s)],
            *extra,
        ]

    result: dict[str, Any] = {
        "label": args.label or f"{args.docs // 1000}k",
        "cluster": None
        if cluster is None
        else {
            "workers": args.standalone,
            "worker_cores": args.worker_cores,
            "worker_memory": args.worker_memory,
            **cluster_conf,
        },
        "docs": args.docs,
        "r": args.r,
        "n_test_per_pair": n_test,
        "workdir": str(workdir),
        "overrides": sets,
        "generator_args": generator_args,
        "machine": machine_info(),
        "commit": _commit(),
        # what the cost model must know about the code that ran (bench/cost_model.py)
        "solver_features": list(SOLVER_FEATURES),
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "stages": {},
    }
    stages = result["stages"]
    plan: list[tuple[str, str, list[str]]] = []
    if not args.skip_generate:
        gen_report = workdir / "generate.json"
        plan.append(
            (
                "generate",
                "bench/wikishape.py",
                [
                    *("--set", f"paths.root={generated}"),
                    *("--docs", str(args.docs), "--seed", str(args.seed)),
                    *("--report", str(gen_report), *generator_args),
                ],
            )
        )
    if args.text_stages:  # the README's stage commands on the generated text
        plan += [
            ("ingest", "jobs/ingest.py", ["--set", f"ingest.input={generated / 'documents'}"]),
            ("split", "jobs/split.py", []),
            ("vocabulary", "jobs/vocabulary.py", []),
            ("tfidf", "jobs/tfidf.py", []),
        ]
    if args.also_local:
        plan.append(
            (
                "train_local",
                "jobs/train.py",
                ["--set", "train.backend=local", "--set", f"paths.model={root / 'model_local'}"],
            )
        )
    plan += [
        ("train", "jobs/train.py", ["--set", "train.backend=spark"]),
        ("embed", "jobs/embed.py", []),
        ("evaluate", "jobs/evaluate.py", []),
    ]
    records = workdir / "records"
    records.mkdir(parents=True, exist_ok=True)
    if args.skip_generate and (records / "generate.json").exists():
        # The corpus's own record from the run that generated it.
        stages["generate"] = _read_json(records / "generate.json")
    t_all = time.perf_counter()
    for name, script, extra in plan:
        if args.resume and (records / f"{name}.json").exists():
            stages[name] = _read_json(records / f"{name}.json")
            print(f"-- {name}: measured before, record reused (--resume)", flush=True)
            if name == "evaluate":
                result["quality"] = _quality(_manifest(root, "evaluation"))
            continue
        # a previous (interrupted) run's event log must not count in this one
        shutil.rmtree(workdir / "events" / name, ignore_errors=True)
        (workdir / "events" / name).mkdir(parents=True, exist_ok=True)
        stages[name] = run_stage(
            name, command(name, script, extra), workdir, args.interval, env, extra_roots
        )
        stages[name]["spark"] = spark_metrics(
            workdir / "events" / name, stages[name].pop("launched_epoch")
        )
        if name == "generate":
            rep = _read_json(workdir / "generate.json")
            stages[name]["report"] = {
                k: rep[k]
                for k in (
                    "documents_total",
                    "documents_per_language",
                    "documents",
                    "nnz",
                    "concepts",
                    "per_language",
                    "heldout_concepts",
                    "seconds",
                )
            }
            stages[name]["docs_per_s"] = round(rep["documents_total"] / stages[name]["wall_s"], 1)
        elif name.startswith("train"):
            model = root / ("model_local" if name == "train_local" else "model")
            meta = _read_json(model / "model.json")
            tr = meta.get("training", {})
            hist = meta.get("solver", {}).get("history", {})
            stages[name]["report"] = {
                "backend": tr.get("backend"),
                "fit_s": tr.get("fit_seconds"),
                "load_s": tr.get("load_seconds"),
                # the Spark backend's fused and resident languages (the memory plan's choice)
                "placement": tr.get("placement"),
                # the memory plan's eigensolver settings (spill_dir, max_basis), if any
                "planned_solver_settings": tr.get("planned_solver_settings"),
                "passes_over_x": tr.get("passes_over_x"),
                "eigensolver_iterations": hist.get("eigensolver", {}).get("n_iter")
                if isinstance(hist.get("eigensolver"), dict)
                else None,
                "eigenvalues_first_last": [meta["eigenvalues"][0], meta["eigenvalues"][-1]]
                if meta.get("eigenvalues")
                else None,
                # what bench/cost_model.py needs: block width, basis, CG iterations and
                # seconds per solve and language, timings of the fit's phases
                "solver": solver_summary(hist),
                # the stopping rule's record: the objective, σ and (stop_rule validation) the
                # validation P@1 of every eigensolver iteration
                "stopping": hist.get("stopping"),
            }
        elif name == "embed":
            rep = _manifest(root, "embeddings")
            stages[name]["report"] = {
                "documents": rep.get("documents"),
                "embed_s": rep.get("embed_seconds"),
                "docs_per_s_embed": round(rep["documents"] / rep["embed_seconds"], 1)
                if rep.get("embed_seconds")
                else None,
            }
        elif name == "evaluate":
            rep = _manifest(root, "evaluation")
            stages[name]["report"] = {
                "engine": rep.get("engine"),
                "test_s": rep.get("test_seconds"),
                "candidates": rep.get("candidates"),
            }
            result["quality"] = _quality(rep)
        # Each stage's record as soon as it is complete: a later --skip-generate run
        # reuses the corpus's, and an interrupted run keeps what it measured.
        (records / f"{name}.json").write_text(json.dumps(stages[name], indent=1))
    result["total_wall_s"] = round(time.perf_counter() - t_all, 1)
    tf = _manifest(root, "tfidf")
    result["corpus"] = {
        "documents_total": stages.get("generate", {}).get("report", {}).get("documents_total"),
        "training_documents": tf.get("documents"),
        "nnz": tf.get("nnz"),
        "concepts": tf.get("concepts"),
        "per_language": tf.get("per_language"),
    }
    if "train_local" in stages:
        result["spark_over_local_fit"] = round(
            stages["train"]["report"]["fit_s"] / stages["train_local"]["report"]["fit_s"], 2
        )
    return result


def solver_summary(history: dict[str, Any]) -> dict[str, Any]:
    """The parts of a model's solver history the cost model uses (bench/cost_model.py)."""
    return {
        key: history.get(key)
        for key in ("block_size", "max_basis", "n_concepts", "n_terms", "languages", "timings")
    } | {
        "eigensolver_iterations": (history.get("eigensolver") or {}).get("n_iter"),
        "solves": [
            {k: s.get(k) for k in ("stage", "n_rhs", "n_iter", "seconds")}
            for s in history.get("solves", [])
        ],
    }


# --------------------------------------------------------------------------- table and plot


def _gb(x: float) -> str:
    return f"{x / 1e9:.2f}" if x >= 1e7 else f"{x / 1e6:.1f} MB"


def table(result: dict[str, Any]) -> str:
    """The per-stage Markdown table of one run."""
    head = (
        "| stage | wall [s] | CPU [s] driver / JVM / Py workers | peak MB driver Py / JVM / "
        "Py worker (max) / Py workers (sum) | shuffle write [GB] | broadcast [GB] | result to "
        "driver [GB] | jobs / tasks | notes |"
    )
    lines = [head, "|" + "---|" * 9]
    for name, s in result["stages"].items():
        c, p, sp = s["cpu_s"], s["peak_mb"], s["spark"]
        rep = s.get("report", {})
        note = ""
        if name == "generate":
            note = f"{s['docs_per_s']:,.0f} docs/s end to end"
        elif name.startswith("train"):
            px = rep.get("passes_over_x") or {}
            note = (
                f"{rep.get('backend')}: fit {rep.get('fit_s')} s, load {rep.get('load_s')} s, "
                f"{sum(px.get('passes', {}).values())} passes (per language, all kinds), "
                f"{rep.get('eigensolver_iterations')} Lanczos iterations"
            )
        elif name == "embed":
            note = f"{rep.get('docs_per_s_embed'):,} docs/s in embed_seconds"
        elif name == "evaluate":
            q = result.get("quality", {})
            note = (
                f"P@1 mean cosine {q.get('P@1_mean_cosine')} (min {q.get('P@1_min_cosine')}), "
                f"csls {q.get('P@1_mean_csls')}"
            )
        lines.append(
            f"| {name} | {s['wall_s']:.1f} | {c['driver']:.1f} / {c['jvm']:.1f} / "
            f"{c['python_worker']:.1f} | {p['driver_python_hwm']:.0f} / {p['jvm_hwm']:.0f} / "
            f"{p['python_worker_hwm_max']:.0f} / {p['python_workers_rss_sum']:.0f} | "
            f"{_gb(sp['shuffle_write_bytes'])} | {_gb(sp['broadcast_bytes'])} | "
            f"{_gb(sp['result_bytes'])} | {sp['jobs']} / {sp['tasks']} | {note} |"
        )
    return "\n".join(lines)


def loglog_slopes(paths: list[Path]) -> dict[str, float]:
    """Least-squares slope of log(time) against log(nnz) over the runs, per stage (wall
    time) and for the fits alone (``fit:<stage>``, the solver without session and load)."""
    runs = [_read_json(p) for p in paths]
    series: dict[str, list[tuple[float, float]]] = {}
    for r in runs:
        nnz = r["corpus"]["nnz"]
        for name, st in r["stages"].items():
            series.setdefault(name, []).append((nnz, st["wall_s"]))
            fit = (st.get("report") or {}).get("fit_s")
            if fit:
                series.setdefault(f"fit:{name}", []).append((nnz, fit))
    out = {}
    for name, pts in series.items():
        if len({n for n, _ in pts}) >= 2:
            x, y = np.log([n for n, _ in pts]), np.log([t for _, t in pts])
            out[name] = round(float(np.polyfit(x, y, 1)[0]), 3)
    return out


def plot(paths: list[Path], out: Path) -> None:
    """Log-log: wall time and peak memory of each stage against nnz, over runs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = sorted((_read_json(p) for p in paths), key=lambda r: r["corpus"]["nnz"])
    names = list(dict.fromkeys(n for r in runs for n in r["stages"]))
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    for i, name in enumerate(names):
        color = f"C{i}"
        pts = [(r["corpus"]["nnz"], r["stages"][name]) for r in runs if name in r["stages"]]
        x = [n for n, _ in pts]
        axes[0].plot(x, [s["wall_s"] for _, s in pts], "o-", color=color, label=name)
        axes[1].plot(
            x,
            [s["peak_mb"]["driver_python_hwm"] + s["peak_mb"]["jvm_hwm"] for _, s in pts],
            "o-",
            color=color,
            label=f"{name}: driver Py + JVM",
        )
        axes[1].plot(
            x,
            [s["peak_mb"]["python_workers_rss_sum"] for _, s in pts],
            "x--",
            color=color,
            label=f"{name}: Py workers",
        )
    axes[0].set_title("wall time per stage")
    axes[0].set_ylabel("seconds")
    axes[1].set_title("peak memory per stage")
    axes[1].set_ylabel("MB")
    for ax in axes:
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("nnz of X (training TF-IDF nonzeros)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    axes[1].legend(fontsize=6, ncol=2)
    sizes = ", ".join(f"{r['label']} (nnz {r['corpus']['nnz']:,})" for r in runs)
    fig.suptitle(f"Cr5 chain on Spark, local[2]: {sizes}", fontsize=9)
    fig.tight_layout()
    tmp = out.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=110)
    os.replace(tmp, out)
    print(f"wrote {out}")


#: Code behaviours the cost model distinguishes (runs recorded before a feature lack it):
#: ``ct_language_rows``: each language's Cᵀ result is its concepts' rows (K_l x b), not K x b;
#: ``phi_float32``: Φ is computed from the float32 images without p x r float64 copies;
#: ``basis_float32``: the Lanczos basis is kept in the passes' dtype (float32), not float64;
#: ``images_only_result``: the eigensolver returns no K x r Ritz vectors (Φ needs only their
#: images), and Φᵀ is written over Φ*ᵀ (one p x r array in the Φ step, not two);
#: ``basis_freed_result``: the eigensolver frees its basis before making the Ritz vectors'
#: images, and under the residual rule the monitor makes no best iteration's Φ*ᵀ.
SOLVER_FEATURES = (
    "ct_language_rows",
    "phi_float32",
    "resident_workers",
    "fused_tasks",
    "basis_float32",
    "images_only_result",
    "basis_freed_result",
)


def _commit() -> str | None:
    """The repository's HEAD commit (None outside a git checkout)."""
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True
        )
    except OSError:
        return None
    return out.stdout.strip() or None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    p.add_argument("--docs", type=int, default=10_000, help="total documents (generator knob)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--r", type=int, default=100)
    p.add_argument("--n-test", type=int, default=None, help="default min(1000, max(100, docs/100))")
    p.add_argument(
        "--driver-memory", default="auto", help="spark.driver_memory (auto: the memory plan)"
    )
    p.add_argument("--also-local", action="store_true", help="also train on the local backend")
    p.add_argument("--skip-generate", action="store_true", help="reuse the workdir's corpus")
    p.add_argument(
        "--resume",
        action="store_true",
        help="reuse the records of stages an interrupted run of this workdir completed",
    )
    p.add_argument("--workdir", help="default /tmp/cr5_chain_<docs>")
    p.add_argument("--label")
    p.add_argument("--interval", type=float, default=0.25, help="/proc sampling period [s]")
    p.add_argument("--set", action="append", default=[], dest="overrides", metavar="K=V")
    p.add_argument("--out", type=Path, help="JSON result (e.g. bench/results/chain_10k.json)")
    p.add_argument(
        "--text-stages",
        action="store_true",
        help="after the generator, run the real ingest, split, vocabulary and tfidf stages on "
        "its documents (a root of their own, out_text/), then train, embed and evaluate there",
    )
    p.add_argument(
        "--standalone",
        type=int,
        default=0,
        metavar="N",
        help="run every stage on a Spark standalone cluster of N workers on this machine "
        "(deploy/standalone.py; executors and their Python workers are sampled too)",
    )
    p.add_argument("--worker-cores", type=int, default=1, help="cores of each standalone worker")
    p.add_argument("--worker-memory", default="8g", help="memory of each standalone worker")
    p.add_argument(
        "--executor-memory", default="4g", help="spark.executor.memory on the standalone cluster"
    )
    p.add_argument(
        "--executor-pyspark-memory",
        default=None,
        help="spark.executor.pyspark.memory on the standalone cluster (the memory plan's "
        "Python workers); default: none set",
    )
    p.add_argument(
        "--executor-overhead",
        default=None,
        help="spark.executor.memoryOverhead on the standalone cluster: the memory plan gives "
        "each Python worker its share beyond 384 MB (standalone enforces no limit, unlike "
        "spark.executor.pyspark.memory's address-space cap); default: none set",
    )
    p.add_argument("--plot", type=Path, nargs="+", help="only plot these JSON results")
    p.add_argument("--plot-out", type=Path, default=ROOT / "bench/results/chain_scaling.png")
    args, generator_args = p.parse_known_args(argv)
    if args.plot:
        plot(args.plot, args.plot_out)
        print("log-log slope of time against nnz:", json.dumps(loglog_slopes(args.plot)))
        for path in args.plot:
            r = _read_json(path)
            print(f"\n{r['label']}: nnz {r['corpus']['nnz']:,}\n{table(r)}")
        return 0
    if args.standalone:
        import importlib.util

        # deploy/ is not a package: load its standalone.py as a module
        spec = importlib.util.spec_from_file_location(
            "cr5_standalone", ROOT / "deploy/standalone.py"
        )
        standalone = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = standalone
        spec.loader.exec_module(standalone)
        with standalone.StandaloneCluster(
            Path(args.workdir or f"/tmp/cr5_chain_{args.docs}") / "standalone",
            cores=args.worker_cores,
            memory=args.worker_memory,
            workers=args.standalone,
        ) as cluster:
            result = run_chain(args, generator_args, cluster)
    else:
        result = run_chain(args, generator_args)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(result, indent=2, sort_keys=True))
        os.replace(tmp, args.out)
    print(f"\n{result['label']}: nnz {result['corpus']['nnz']:,}, total {result['total_wall_s']} s")
    print(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
