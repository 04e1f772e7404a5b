"""A Spark standalone cluster (one master, one worker) on 127.0.0.1, from pip's pyspark.

For trying ``deploy/submit.sh --master spark://...`` on one machine, and for the
cluster and Airflow tests. Everything binds to 127.0.0.1 on free ports; the
processes are ours (started here, stopped here by PID).

    python deploy/standalone.py [--cores 2] [--memory 4g] [--dir /tmp/cr5-standalone]

prints the master URL and runs until interrupted (Ctrl-C stops master and worker).
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


class StandaloneCluster:
    """Start a master and one worker on 127.0.0.1; stop both (by PID) on exit."""

    def __init__(self, workdir: str | Path, *, cores: int = 2, memory: str = "4g") -> None:
        self.workdir = Path(workdir)
        self.cores = cores
        self.memory = memory
        self.port = free_port()
        self.webui_port = free_port()
        self.worker_port = free_port()
        self.worker_webui_port = free_port()
        self.procs: list[subprocess.Popen] = []

    @property
    def master_url(self) -> str:
        return f"spark://{HOST}:{self.port}"

    @property
    def webui_url(self) -> str:
        return f"http://{HOST}:{self.webui_port}"

    def _start(self, name: str, args: list[str], env: dict[str, str]) -> subprocess.Popen:
        logf = open(self.workdir / f"{name}.log", "wb")  # noqa: SIM115 (lives with the process)
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

    def start(self, timeout: float = 90.0) -> StandaloneCluster:
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "worker").mkdir(exist_ok=True)
        (self.workdir / "local").mkdir(exist_ok=True)
        env = spark_env()
        env.update(
            SPARK_LOCAL_IP=HOST,
            SPARK_LOCAL_DIRS=str(self.workdir / "local"),
            SPARK_WORKER_DIR=str(self.workdir / "worker"),
            SPARK_LOG_DIR=str(self.workdir),
        )
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
            self._start(
                "worker",
                [
                    "org.apache.spark.deploy.worker.Worker",
                    self.master_url,
                    "--host",
                    HOST,
                    "--port",
                    str(self.worker_port),
                    "--webui-port",
                    str(self.worker_webui_port),
                    "--cores",
                    str(self.cores),
                    "--memory",
                    self.memory,
                    "--work-dir",
                    str(self.workdir / "worker"),
                ],
                env,
            )
            self._wait(
                lambda s: any(w.get("state") == "ALIVE" for w in s.get("workers", [])),
                timeout,
                "worker",
            )
        except BaseException:
            self.stop()
            raise
        return self

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
        """Stop the worker, then the master (SIGTERM, then SIGKILL), by the PIDs we started."""
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

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cores", type=int, default=2)
    p.add_argument("--memory", default="4g")
    p.add_argument("--dir", default=None, help="logs and work directory (default: a temp dir)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    workdir = Path(args.dir or tempfile.mkdtemp(prefix="cr5-standalone-"))
    with StandaloneCluster(workdir, cores=args.cores, memory=args.memory) as cluster:
        print(f"master {cluster.master_url}  web UI {cluster.webui_url}  logs {workdir}")
        print("Ctrl-C stops the master and the worker.", flush=True)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    return 0


if __name__ == "__main__":
    sys.exit(main())
