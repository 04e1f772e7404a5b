"""A Spark standalone cluster (a master and one or more workers) on 127.0.0.1, from pip's pyspark.

For trying ``deploy/submit.sh --master spark://...`` on one machine, and for the
cluster and Airflow tests. Everything binds to 127.0.0.1 on free ports; the
processes are ours (started here, stopped here by PID).

    python deploy/standalone.py [--cores 2] [--memory 4g] [--workers 1] [--dir /tmp/cr5-standalone]

prints the master URL and runs until interrupted (Ctrl-C stops master and workers).
From Python::

    with StandaloneCluster(workdir) as cluster:
        subprocess.run(["deploy/submit.sh", "--master", cluster.master_url, "demo", ...])
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def spark_class() -> str:
    """``spark-class`` from SPARK_HOME, else next to this interpreter (pip's pyspark)."""
    home = os.environ.get("SPARK_HOME")
    if home and Path(home, "bin", "spark-class").exists():
        return str(Path(home, "bin", "spark-class"))
    here = Path(sys.executable).parent / "spark-class"
    if here.exists():
        return str(here)
    found = shutil.which("spark-class")
    if not found:
        raise FileNotFoundError("spark-class not found: set SPARK_HOME or install pyspark")
    return found


def spark_env() -> dict[str, str]:
    """This environment plus SPARK_HOME (pip's pyspark) and JAVA_HOME when needed."""
    env = dict(os.environ)
    if not env.get("SPARK_HOME"):
        # spark-class's own search runs the ``python3`` on PATH, which may not be ours.
        import importlib.util

        spec = importlib.util.find_spec("pyspark")
        if spec and spec.origin:
            env["SPARK_HOME"] = str(Path(spec.origin).parent)
    if not env.get("JAVA_HOME"):
        out = subprocess.run(
            [sys.executable, "-m", "pipeline.java", "--export"],
            capture_output=True,
            text=True,
            check=False,
            cwd=REPO,
        ).stdout
        for line in out.splitlines():
            # "export JAVA_HOME=..." (nothing when java on PATH is good enough)
            if line.startswith("export ") and "=" in line:
                key, _, value = line[len("export ") :].partition("=")
                env[key.strip()] = value.strip().strip("'\"")
    return env


def session_pids(sid: int) -> list[int]:
    """PIDs of the processes in session ``sid`` (Linux ``/proc``), the leader included."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid:  # field 6 of stat: the session id
            pids.append(int(entry))
    return sorted(pids)


class StandaloneCluster:
    """Start a master and ``workers`` workers on 127.0.0.1; stop them (by PID) on exit.

    Each worker runs in a process session of its own, with the executors it launches and
    their Python workers: :meth:`kill_worker` kills that whole session with SIGKILL (a
    machine lost), :meth:`restart_worker` starts a fresh worker in its place.
    """

    def __init__(
        self, workdir: str | Path, *, cores: int = 2, memory: str = "4g", workers: int = 1
    ) -> None:
        self.workdir = Path(workdir)
        self.cores = cores
        self.memory = memory
        self.n_workers = workers
        self.port = free_port()
        self.webui_port = free_port()
        self.procs: list[subprocess.Popen] = []
        self.workers: dict[int, subprocess.Popen] = {}

    @property
    def master_url(self) -> str:
        return f"spark://{HOST}:{self.port}"

    @property
    def webui_url(self) -> str:
        return f"http://{HOST}:{self.webui_port}"

    def _start(self, name: str, args: list[str], env: dict[str, str]) -> subprocess.Popen:
        logf = open(self.workdir / f"{name}.log", "ab")  # noqa: SIM115 (lives with the process)
        # A session of its own: Ctrl-C in a terminal reaches only our stop().
        proc = subprocess.Popen(
            [spark_class(), *args],
            stdout=logf,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=self.workdir,
            start_new_session=True,
        )
        logf.close()
        self.procs.append(proc)
        log.info("started %s (pid %d)", name, proc.pid)
        return proc

    def _env(self) -> dict[str, str]:
        env = spark_env()
        env.update(
            SPARK_LOCAL_IP=HOST,
            SPARK_LOCAL_DIRS=str(self.workdir / "local"),
            SPARK_WORKER_DIR=str(self.workdir / "worker"),
            SPARK_LOG_DIR=str(self.workdir),
        )
        return env

    def start(self, timeout: float = 90.0) -> StandaloneCluster:
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "worker").mkdir(exist_ok=True)
        (self.workdir / "local").mkdir(exist_ok=True)
        env = self._env()
        try:
            self._start(
                "master",
                [
                    "org.apache.spark.deploy.master.Master",
                    "--host",
                    HOST,
                    "--port",
                    str(self.port),
                    "--webui-port",
                    str(self.webui_port),
                ],
                env,
            )
            self._wait(lambda s: True, timeout, "master")
            for index in range(self.n_workers):
                self._start_worker(index, env)
            self._wait_workers(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_worker(self, index: int, env: dict[str, str]) -> subprocess.Popen:
        work = self.workdir / "worker" / str(index)
        work.mkdir(parents=True, exist_ok=True)
        proc = self._start(
            "worker" if index == 0 else f"worker-{index}",
            [
                "org.apache.spark.deploy.worker.Worker",
                self.master_url,
                "--host",
                HOST,
                "--port",
                str(free_port()),
                "--webui-port",
                str(free_port()),
                "--cores",
                str(self.cores),
                "--memory",
                self.memory,
                "--work-dir",
                str(work),
            ],
            env,
        )
        self.workers[index] = proc
        return proc

    def _wait_workers(self, timeout: float) -> None:
        n = len(self.workers)
        self._wait(
            lambda s: sum(w.get("state") == "ALIVE" for w in s.get("workers", [])) >= n,
            timeout,
            f"{n} worker(s)",
        )

    def kill_worker(self, index: int) -> list[int]:
        """SIGKILL worker ``index`` with its executors and their Python workers (its process
        session); return the PIDs that were in it."""
        proc = self.workers.pop(index)
        pids = session_pids(proc.pid)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
        self.procs.remove(proc)
        return pids

    def restart_worker(self, index: int, timeout: float = 90.0) -> None:
        """Start a new worker in place of worker ``index`` and wait until it is ALIVE."""
        if index in self.workers:
            raise ValueError(f"worker {index} is running")
        self._start_worker(index, self._env())
        self._wait_workers(timeout)

    def status(self) -> dict:
        """The master's JSON status page (workers, applications)."""
        with urllib.request.urlopen(f"{self.webui_url}/json/", timeout=5) as resp:
            return json.load(resp)

    def _wait(self, ready, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(
                        f"standalone {what} exited with {p.returncode}; see {self.workdir}/*.log"
                    )
            try:
                if ready(self.status()):
                    return
            except OSError:
                pass
            time.sleep(0.5)
        raise TimeoutError(f"standalone {what} not ready after {timeout:.0f} s; see {self.workdir}")

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the workers, then the master (SIGTERM, then SIGKILL), by the PIDs we started."""
        for proc in reversed(self.procs):
            if proc.poll() is None:
                # The worker's shutdown hook kills the executors it launched.
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout)
        self.procs.clear()
        self.workers.clear()

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cores", type=int, default=2)
    p.add_argument("--memory", default="4g")
    p.add_argument("--workers", type=int, default=1, help="workers on this machine")
    p.add_argument("--dir", default=None, help="logs and work directory (default: a temp dir)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    workdir = Path(args.dir or tempfile.mkdtemp(prefix="cr5-standalone-"))
    with StandaloneCluster(
        workdir, cores=args.cores, memory=args.memory, workers=args.workers
    ) as cluster:
        print(f"master {cluster.master_url}  web UI {cluster.webui_url}  logs {workdir}")
        print("Ctrl-C stops the master and the workers.", flush=True)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    return 0


if __name__ == "__main__":
    sys.exit(main())
