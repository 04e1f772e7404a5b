"""Fault injection with real processes: lost workers, killed Python workers, a full disk, a
file system that refuses writes mid-run, an unreachable master.

Each case runs a real job (``jobs/chain.py`` in a process of its own) and checks its exit
status, what it printed, and the data: either the same result as an undisturbed run
(Spark recovered by lineage), or exit 2 with one paragraph and every previously published
file byte for byte as it was.

- A two-worker standalone cluster (``deploy/standalone.py``, one core each) is started once
  for the module; a worker is killed with ``kill -9`` of its whole process session (the
  worker, its executor and their Python workers: a machine lost) while ``train`` runs its
  fused solves, while ``embed`` runs and while ``tfidf`` writes, and a single Python worker
  while ``embed`` runs. The results must equal, to the bit, those of an undisturbed
  local-mode run of the same stages (the module's reference, in-process).
- In local mode a killed Python worker fails the task (``local[N]`` does not retry): exit 2.
- A disk that fills during a write: the run root on a small tmpfs (``mount -t tmpfs``; where
  mounting is not permitted, a file-size limit, RLIMIT_FSIZE, makes the write fail instead).
- Permissions changed mid-run: the run root made immutable (``chattr +i``) once the stage
  started, so its write cannot create its files.
- An unreachable master: exit 2 after ``spark.master_wait_seconds``, not Spark's minute.

A driver killed mid-train that resumes from its checkpoint is tested in
tests/test_stages_train.py (test_training_killed_midway_resumes_to_the_same_answer).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from tests.conftest import REPO, SAMPLE, load_standalone

pytestmark = pytest.mark.slow

PROFILES = [str(REPO / "conf" / "local.yaml"), str(REPO / "conf" / "short-docs.yaml")]
SETTINGS = [
    "spark.shuffle_partitions=2",
    "spark.driver_memory=1g",
    "train.backend=spark",
    "train.r=10",
    "train.checkpoint_dir=",
    # the same solver route in local mode and on the cluster, whatever memory either has:
    # every language fused, and kept resident in the Python workers between jobs
    "train.solve_in_task_max_nnz=10000000",
    "train.resident_memory_mb=64",
]
ENV = {
    **os.environ,
    "PYTHONPATH": str(REPO),
    "OPENBLAS_NUM_THREADS": "1",
    # the executors of the standalone cluster run this interpreter (this project's packages)
    "PYSPARK_PYTHON": sys.executable,
}
INPUTS = ("documents", "vocabulary", "tfidf", "concepts")


def _args(stages: str, root: Path, *extra: str) -> list[str]:
    args = ["--stages", stages]
    for p in PROFILES:
        args += ["--conf", p]
    for item in [f"paths.root={root}", *SETTINGS, *extra]:
        args += ["--set", item]
    return args


class Job:
    """A ``jobs/chain.py`` process; its output is collected line by line as it comes."""

    def __init__(self, stages: str, root: Path, *extra: str, preexec=None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(REPO / "jobs" / "chain.py"), *_args(stages, root, *extra)],
            cwd=REPO,
            env=ENV,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            preexec_fn=preexec,
        )
        self.out: list[str] = []
        self.err: list[str] = []
        self._readers = [
            threading.Thread(target=self._read, args=(self.proc.stdout, self.out), daemon=True),
            threading.Thread(target=self._read, args=(self.proc.stderr, self.err), daemon=True),
        ]
        for t in self._readers:
            t.start()

    @staticmethod
    def _read(stream, into: list[str]) -> None:
        for line in stream:
            into.append(line)

    def wait_for(self, pattern: str, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while not any(re.search(pattern, line) for line in list(self.err)):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.finish(timeout=30)
                raise AssertionError(f"never saw {pattern!r}:\n{''.join(self.err)[-3000:]}")
            time.sleep(0.1)

    def finish(self, timeout: float = 600) -> tuple[int, str, str]:
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            raise
        for t in self._readers:
            t.join(10)
        return code, "".join(self.out), "".join(self.err)

    def log_file(self) -> str:
        found = re.search(r"log file: (\S+)", "".join(self.err))
        assert found, "".join(self.err)
        return Path(found.group(1)).read_text(errors="replace")


# --------------------------------------------------------------------------- processes


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _processes() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, session id) of every process."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (st := _stat(int(entry))) is not None:
            out[int(entry)] = (int(st[1]), int(st[3]))
    return out


def python_workers(*, session: int | None = None, ancestor: int | None = None) -> list[int]:
    """Forked Python workers of Spark (children of a ``pyspark.daemon``) in a session or
    below a process."""
    procs = _processes()

    def below(pid: int) -> bool:
        seen = 0
        while pid in procs and seen < 64:
            pid, seen = procs[pid][0], seen + 1
            if pid == ancestor:
                return True
        return False

    found = []
    for pid, (ppid, sid) in procs.items():
        if session is not None and sid != session:
            continue
        if ancestor is not None and not below(pid):
            continue
        if "pyspark.daemon" in _cmdline(pid) and "pyspark.daemon" in _cmdline(ppid):
            found.append(pid)
    return sorted(found)


def _cpu(pid: int) -> int:
    st = _stat(pid)
    return int(st[11]) + int(st[12]) if st else -1


def busy_python_worker(job: Job, timeout: float = 300, **where: int) -> int:
    """A Python worker that is running a task (its CPU time grows), waiting for one while
    ``job`` runs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and job.proc.poll() is None:
        workers = python_workers(**where)
        before = {pid: _cpu(pid) for pid in workers}
        time.sleep(0.3)
        busy = [pid for pid in workers if _cpu(pid) > before[pid] >= 0]
        if busy:
            return busy[0]
    code, _out, err = job.finish(timeout=60)
    raise AssertionError(f"no busy Python worker appeared ({where}); exit {code}:\n{err[-3000:]}")


def snapshot(root: Path) -> dict[str, str]:
    """SHA-256 of every file under ``root`` but the run logs."""
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "logs" not in p.relative_to(root).parts
    }


def table(path: Path, keys: list[str]) -> pa.Table:
    t = pq.read_table(path)
    t = t.select(sorted(t.column_names))
    for i, field in enumerate(t.schema):
        if pa.types.is_dictionary(field.type):
            t = t.set_column(i, field.name, t.column(i).cast(pa.string()))
    return t.sort_by([(k, "ascending") for k in keys])


def model_arrays(path: Path) -> dict[str, np.ndarray]:
    return {p.relative_to(path).as_posix(): np.load(p) for p in sorted(path.rglob("*.npy"))}


def copy_root(source: Path, dest: Path, names: tuple[str, ...]) -> Path:
    dest.mkdir(parents=True)
    for name in names:
        shutil.copytree(source / name, dest / name)
    return dest


def assert_one_paragraph(err: str, *needles: str) -> str:
    """The console output ends with one ``error:`` paragraph and holds no trace."""
    assert "Traceback" not in err and "\tat " not in err and "Exception in thread" not in err, err
    message = err[err.index("error: ") :]
    assert message.count("\n") == 1, err
    for needle in needles:
        assert needle in message, (needle, message)
    return message


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def reference(spark, tmp_path_factory):
    """The undisturbed run, in local mode in-process: ingest, vocabulary, tfidf, train and
    embed on 300 concepts of the sample in en, de, fr."""
    from pipeline.runner import main

    base = tmp_path_factory.mktemp("faults")
    t = pq.read_table(SAMPLE)
    t = t.filter(pc.is_in(t.column("lang"), pa.array(["en", "de", "fr"])))
    concepts = sorted(set(t.column("concept_id").to_pylist()))[::4][:300]
    t = t.filter(pc.is_in(t.column("concept_id"), pa.array(concepts)))
    corpus = base / "corpus.parquet"
    pq.write_table(t, corpus)
    root = base / "out"
    stages = "ingest,vocabulary,tfidf,train,embed"
    assert main(None, _args(stages, root, f"ingest.input={corpus}")) == 0
    return root


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    standalone = load_standalone()
    workdir = tmp_path_factory.mktemp("standalone")
    before = os.environ.get("PYSPARK_PYTHON")
    os.environ["PYSPARK_PYTHON"] = sys.executable  # the workers pass it to their executors
    try:
        with standalone.StandaloneCluster(workdir, cores=1, memory="1g", workers=2) as c:
            yield c
    finally:
        if before is None:
            os.environ.pop("PYSPARK_PYTHON", None)
        else:
            os.environ["PYSPARK_PYTHON"] = before


def lose_worker(cluster, job: Job, after: str, index: int = 1) -> None:
    """Once ``after`` was logged and worker ``index`` runs a task, kill -9 it (with its
    executor and Python workers)."""
    job.wait_for(after)
    busy_python_worker(job, session=cluster.workers[index].pid)
    cluster.kill_worker(index)


def cluster_job(cluster, stages: str, root: Path) -> Job:
    # The memory plan sizes the executors' Python workers from spark.executor.memoryOverhead
    # (a standalone worker does not count it: it only has to cover the plan)
    conf = '{"spark.executor.memoryOverhead": "2g"}'
    return Job(stages, root, f"spark.master={cluster.master_url}", f"spark.conf={conf}")


def recovered(job: Job) -> str:
    code, _out, err = job.finish()
    assert code == 0, err[-4000:]
    # the console has the progress log only: Spark's warnings and traces went to the log file
    assert "error:" not in err and "Traceback" not in err and "\tat " not in err, err
    assert not re.search(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (WARN|ERROR)", err, re.M), err
    log = job.log_file()
    assert "Lost executor" in log or "Lost task" in log, "the fault did not reach the job"
    return log


# --------------------------------------------------------------------------- lost workers


def test_worker_lost_during_training_gives_the_same_model(cluster, reference, tmp_path):
    root = copy_root(reference, tmp_path / "out", INPUTS)
    job = cluster_job(cluster, "train", root)
    try:
        lose_worker(cluster, job, r"cr5/eigensolver it=1/")  # during the fused CG solves
        recovered(job)
    finally:
        if 1 not in cluster.workers:  # killed: a fresh worker for the next case
            cluster.restart_worker(1)
    want, got = model_arrays(reference / "model"), model_arrays(root / "model")
    assert list(want) == list(got)
    for name in want:
        assert np.array_equal(want[name], got[name]), name  # to the bit
    meta = json.loads((root / "model" / "model.json").read_text())
    assert meta["training"]["backend"] == "spark"


def test_worker_lost_during_embedding_gives_the_same_embeddings(cluster, reference, tmp_path):
    root = copy_root(reference, tmp_path / "out", (*INPUTS, "model"))
    job = cluster_job(cluster, "embed", root)
    try:
        lose_worker(cluster, job, r"stage embed: starting")
        recovered(job)
    finally:
        if 1 not in cluster.workers:  # killed: a fresh worker for the next case
            cluster.restart_worker(1)
    want = table(reference / "embeddings", ["doc_id"])
    got = table(root / "embeddings", ["doc_id"])
    assert want.num_rows > 0 and want.equals(got)


def test_worker_lost_during_a_write_gives_the_same_dataset(cluster, reference, tmp_path):
    root = copy_root(reference, tmp_path / "out", ("documents", "vocabulary"))
    job = cluster_job(cluster, "tfidf", root)
    try:
        lose_worker(cluster, job, r"stage tfidf: starting")
        recovered(job)
    finally:
        if 1 not in cluster.workers:  # killed: a fresh worker for the next case
            cluster.restart_worker(1)
    for name, keys in (("tfidf", ["lang", "row"]), ("concepts", ["concept_index"])):
        want, got = table(reference / name, keys), table(root / name, keys)
        assert want.num_rows > 0 and want.equals(got), name
    assert not [n for n in os.listdir(root) if n.startswith(".")]  # no leftovers


def test_python_worker_killed_on_a_cluster_is_retried(cluster, reference, tmp_path):
    root = copy_root(reference, tmp_path / "out", (*INPUTS, "model"))
    job = cluster_job(cluster, "embed", root)
    job.wait_for(r"stage embed: starting")
    victim = busy_python_worker(job, session=cluster.workers[0].pid)
    os.kill(victim, signal.SIGKILL)
    recovered(job)
    want = table(reference / "embeddings", ["doc_id"])
    assert want.equals(table(root / "embeddings", ["doc_id"]))


# --------------------------------------------------------------------------- local mode


def test_python_worker_killed_in_local_mode_exits_2_and_keeps_the_data(reference, tmp_path):
    root = copy_root(reference, tmp_path / "out", (*INPUTS, "model", "embeddings"))
    before = snapshot(root)
    job = Job("embed", root)
    job.wait_for(r"stage embed: starting")
    os.kill(busy_python_worker(job, ancestor=job.proc.pid), signal.SIGKILL)
    code, _out, err = job.finish()
    assert code == 2, err
    assert_one_paragraph(
        err, "stage embed: a Python worker process of Spark died", "local[N,F]", "Full log: "
    )
    assert snapshot(root) == before
    assert not [n for n in os.listdir(root) if n.startswith(".")]
    assert "Python worker exited unexpectedly" in job.log_file()


def _small_corpus(path: Path, n_concepts: int) -> Path:
    t = pq.read_table(SAMPLE)
    t = t.filter(pc.is_in(t.column("lang"), pa.array(["en", "de"])))
    concepts = sorted(set(t.column("concept_id").to_pylist()))[:n_concepts]
    pq.write_table(t.filter(pc.is_in(t.column("concept_id"), pa.array(concepts))), path)
    return path


def _mount_tmpfs(where: Path, size: str) -> bool:
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
        capture_output=True,
        check=False,
    )
    return done.returncode == 0


def _fsize_limit(limit: int):
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def test_disk_full_during_a_write_exits_2_and_keeps_the_data(spark, tmp_path):
    from pipeline.runner import main

    disk = tmp_path / "disk"
    mounted = _mount_tmpfs(disk, "512k")  # holds the small documents dataset, not the sample's
    try:
        root = disk / "out"
        small = _small_corpus(tmp_path / "small.parquet", 60)
        assert main(None, _args("ingest", root, f"ingest.input={small}")) == 0
        before = snapshot(root)
        if mounted:
            job = Job("ingest", root, f"ingest.input={SAMPLE}")
            needles = ["no space left on device", "while writing dataset 'documents'", str(root)]
        else:  # no mount: a file-size limit fails the write instead (EFBIG)
            job = Job("ingest", root, f"ingest.input={SAMPLE}", preexec=_fsize_limit(1 << 18))
            needles = ["RLIMIT_FSIZE", "while writing dataset 'documents'"]
        code, _out, err = job.finish()
        assert code == 2, err
        assert_one_paragraph(err, "stage ingest:", *needles, "unchanged")
        assert snapshot(root) == before  # the published documents, byte for byte
        assert not [n for n in os.listdir(root) if n.startswith(".")]  # temporary removed
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(disk)], check=False)


def test_permissions_changed_mid_run_exit_2_and_keep_the_data(reference, tmp_path):
    if shutil.which("chattr") is None:
        pytest.skip("chattr (e2fsprogs) is not installed")
    root = copy_root(reference, tmp_path / "out", ("documents", "vocabulary"))
    before = snapshot(root)
    job = Job("vocabulary", root)
    try:
        job.wait_for(r"stage vocabulary: starting")
        locked = subprocess.run(["chattr", "+i", str(root)], capture_output=True, check=False)
        if locked.returncode != 0:
            job.finish()
            pytest.skip(f"chattr +i is not supported here: {locked.stderr!r}")
        code, _out, err = job.finish()
    finally:
        subprocess.run(["chattr", "-i", str(root)], check=False)
    assert code == 2, err
    assert_one_paragraph(
        err, "stage vocabulary:", "was denied", f"{root}", "dataset 'vocabulary'", "unchanged"
    )
    assert snapshot(root) == before


def test_unreachable_master_is_one_paragraph_after_a_bounded_wait(tmp_path):
    standalone = load_standalone()
    root = tmp_path / "out"
    port = standalone.free_port()  # nobody listens there
    t0 = time.monotonic()
    job = Job(
        "tfidf", root, f"spark.master=spark://127.0.0.1:{port}", "spark.master_wait_seconds=3"
    )
    code, _out, err = job.finish(timeout=120)
    took = time.monotonic() - t0
    assert code == 2, err
    assert_one_paragraph(
        err, f"no Spark master answers at spark://127.0.0.1:{port}", "spark.master_wait_seconds"
    )
    assert took < 30, took  # the bound, not Spark's minute of registration attempts
    assert snapshot(root) == {}
