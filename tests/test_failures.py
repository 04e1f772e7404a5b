"""The error boundary (pipeline/failures.py, the runner, the CLI): real failures of Spark, the
JVM, Python workers and the operating system become one paragraph with the setting or action
that fixes them; the trace goes to the log file.

The Spark cases raise real exceptions in the test session (a Python worker that kills
itself, memory exhausted in a Python worker and in the JVM, a module missing on the
executors, a full tmpfs under Spark's writer); the operating-system cases raise real
``OSError``s. tests/test_fault_injection.py runs whole jobs against real faults.
"""

from __future__ import annotations

import errno
import os
import re
import socket
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from pipeline import failures
from pipeline.errors import EnvironmentFailure, InputDataError
from tests.conftest import REPO

SETTINGS = {"spark.master": "local[2]", "spark.driver_memory": "2g"}


def described(exc: BaseException, **kwargs) -> failures.Failure:
    failure = failures.describe(exc, settings=SETTINGS, **kwargs)
    text = failure.paragraph
    assert "\n" not in text and "Traceback" not in text and "\tat " not in text, text
    return failure


def raised(fn) -> BaseException:
    try:
        fn()
    except BaseException as exc:  # any failure is what is wanted
        return exc
    raise AssertionError("nothing was raised")


# --------------------------------------------------------------------------- Spark


def _kill_self(_):
    os.kill(os.getpid(), 9)


def _allocate(_):
    return np.empty(10**15)  # a real MemoryError (numpy's _ArrayMemoryError)


def _import_missing(_):
    import no_such_module_for_cr5  # noqa: F401


def _raise_input_error(_):
    raise InputDataError("tfidf row 7 has 3 indices but 2 values. Fix: rerun the tfidf stage.")


def _divide(x):
    return x / 0


@pytest.mark.parametrize(
    ("task", "kind", "code", "needles"),
    [
        (_kill_self, "python_worker", 2, ["a Python worker process of Spark died", "local[N,F]"]),
        (_allocate, "out_of_memory", 2, ["a Python worker", "spark.executor.pyspark.memory"]),
        (_import_missing, "python_env", 2, ["'no_such_module_for_cr5'", "spark.pyspark.python"]),
        (_raise_input_error, "input", 2, ["stage probe: tfidf row 7 has 3 indices but 2 values"]),
        (_divide, "bug", 1, ["ZeroDivisionError: division by zero", "report it"]),
    ],
    ids=["worker-killed", "worker-oom", "module-missing", "project-error", "bug"],
)
def test_failures_in_python_workers(spark, task, kind, code, needles):
    exc = raised(lambda: spark.sparkContext.parallelize(range(2), 2).map(task).collect())
    failure = described(exc, stage="probe")
    assert (failure.kind, failure.exit_code) == (kind, code), failure.paragraph
    for needle in needles:
        assert needle in failure.paragraph, failure.paragraph
    assert spark.range(3).count() == 3  # the session survives


def test_driver_jvm_out_of_memory_names_the_driver_memory(spark):
    jvm = spark.sparkContext._jvm
    # 8 GB of longs in a 2 GB heap: refused at once, nothing else is disturbed
    exc = raised(lambda: jvm.java.lang.reflect.Array.newInstance(jvm.java.lang.Long.TYPE, 2**30))
    failure = described(exc, stage="train")
    assert failure.kind == "out_of_memory" and failure.exit_code == 2
    assert "the Spark driver's JVM ran out of heap memory" in failure.paragraph
    assert "raise spark.driver_memory (now 2g)" in failure.paragraph


def test_spark_writer_on_a_full_disk_names_the_path(spark, tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(disk)]
    if subprocess.run(mount, capture_output=True, check=False).returncode != 0:
        pytest.skip("mounting a tmpfs is not permitted here")
    try:
        df = spark.range(100_000).selectExpr("id", "uuid() AS u")
        exc = raised(lambda: df.write.parquet(str(disk / "x")))
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
    failure = described(exc, stage="ingest")
    assert failure.kind == "no_space" and failure.exit_code == 2
    assert f"no space left on device) at {disk}/x" in failure.paragraph


# --------------------------------------------------------------------------- the OS


def _real_oserror(code: int, path: Path) -> OSError:
    exc = OSError(code, os.strerror(code), str(path))
    return failures.annotate(exc, dataset="tfidf", path=str(path.parent))


@pytest.mark.parametrize(
    ("code", "kind", "needles"),
    [
        (errno.ENOSPC, "no_space", ["no space left on device", "dataset 'tfidf'", "paths.root"]),
        (errno.EDQUOT, "no_space", ["disk quota"]),
        (errno.EFBIG, "no_space", ["RLIMIT_FSIZE", "ulimit -f"]),
        (errno.EACCES, "permission", ["permission to write or read", "was denied"]),
        (errno.EPERM, "permission", ["was denied", "ownership"]),
        (errno.EROFS, "permission", ["became read-only", "remount"]),
        (errno.EIO, "io", ["input/output error"]),
        (errno.EMFILE, "io", ["too many open files", "ulimit -n"]),
    ],
)
def test_operating_system_errors(tmp_path, code, kind, needles):
    failure = described(_real_oserror(code, tmp_path / "out" / "f.parquet"), stage="tfidf")
    assert (failure.kind, failure.exit_code) == (kind, 2), failure.paragraph
    assert failure.paragraph.startswith("stage tfidf: ")
    for needle in needles:
        assert needle in failure.paragraph, failure.paragraph
    assert "every dataset and model published before is unchanged" in failure.paragraph


def test_real_errors_of_the_file_system(tmp_path):
    full = raised(lambda: open("/dev/full", "wb").write(b"x" * 10_000_000))  # noqa: SIM115
    assert described(full).kind == "no_space"
    hidden = tmp_path / "out" / ".tfidf.owner-abc"
    exc = failures.annotate(
        PermissionError(errno.EACCES, "Permission denied", str(hidden)),
        path=str(tmp_path / "out" / "tfidf"),
    )
    # a writer's hidden temporary is named by its directory
    assert f"read {tmp_path / 'out'} was denied" in described(exc).paragraph


def test_driver_python_memory_and_the_hint_hook():
    exc = raised(lambda: np.empty(10**15))
    assert described(exc, stage="train").paragraph.startswith(
        "stage train: the Python driver process ran out of memory. Fix:"
    )

    def plan(info: failures.FailureInfo) -> str | None:
        if info.kind == "out_of_memory":
            return f"The memory plan estimated {info.stage} needs 9.5 GiB in the {info.site}."
        return None

    def broken(info: failures.FailureInfo) -> str:
        raise RuntimeError("a hint must not hide the failure")

    failures.register_hint(plan)
    failures.register_hint(broken)
    try:
        text = described(exc, stage="train").paragraph
    finally:
        failures.unregister_hint(plan)
        failures.unregister_hint(broken)
    assert (
        "out of memory. The memory plan estimated train needs 9.5 GiB in the driver_python. Fix:"
        in text
    )
    assert "memory plan" not in described(exc, stage="train").paragraph


@pytest.mark.parametrize(
    ("site", "settings", "needles"),
    [
        ("driver_jvm", {"spark.master": "yarn", "spark.driver_memory": "4g"},
         ["driver's JVM", "spark.driver_memory (now 4g)"]),
        ("driver_jvm", {"submitted": "true"}, ["--driver-memory"]),
        ("executor_jvm", {"spark.master": "yarn", "spark.executor.memory": "8g"},
         ["an executor's JVM", "spark.executor.memory (now 8g)"]),
        ("executor_jvm", {"spark.master": "local[2]"}, ["spark.driver_memory"]),
        ("python_worker", {"spark.executor.pyspark.memory": "2g"},
         ["spark.executor.pyspark.memory (now 2g)", "train.solve_in_task_max_nnz"]),
        ("driver_python", {}, ["train.backend=spark"]),
    ],
)  # fmt: skip
def test_the_out_of_memory_paragraph_names_the_setting(site, settings, needles):
    text = failures.oom_paragraph(
        site, stage="train", settings=settings, details=["Train needs about 9 GB there."]
    )
    assert "Train needs about 9 GB there. Fix: " in text
    for needle in needles:
        assert needle in text, text


def test_a_java_trace_text_is_classified_without_the_jvm():
    class Py4JJavaError(Exception):  # as py4j names it; the text is a real Spark message
        pass

    text = (
        "An error occurred while calling o88.collectToPython.\n: org.apache.spark.SparkException"
        ": Job aborted due to stage failure: Task 3 in stage 12.0 failed 4 times, most recent "
        "failure: Lost task 3.3 in stage 12.0 (TID 40) (10.0.0.7 executor 3): "
        "ExecutorLostFailure (executor 3 exited caused by one of the running tasks) Reason: "
        "Container killed by YARN for exceeding physical memory limits. 9.1 GB of 9 GB used.\n"
        "\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages(...)"
    )
    yarn = {"spark.master": "yarn", "spark.executor.memoryOverhead": "1g"}
    failure = failures.describe(Py4JJavaError(text), stage="embed", settings=yarn)
    assert failure.kind == "out_of_memory" and "\n" not in failure.paragraph
    assert "an executor went over its memory limit" in failure.paragraph
    assert "spark.executor.memoryOverhead (now 1g)" in failure.paragraph
    text = text.replace("Container killed by YARN for exceeding physical memory limits", "lost")
    failure = described(Py4JJavaError(text.replace("9.1 GB of 9 GB used", "")), stage="embed")
    assert failure.kind == "executors_lost"
    assert (
        "after 4 attempt(s)" in failure.paragraph and "spark.task.maxFailures" in failure.paragraph
    )


def test_a_jvm_that_died_during_a_call_is_read_from_the_log(tmp_path):
    """The 2M chain's train: the JVM died of "Java heap space" inside collectAndServe, so the
    Py4J error's message could no longer be read (its str() asks the dead JVM); the JVM's own
    lines are in the log file. One out-of-memory paragraph, not "a bug" with a trace."""

    class Py4JJavaError(Exception):
        def __str__(self) -> str:
            raise ConnectionError("Answer from Java side is empty")

    log = tmp_path / "train.log"
    log.write_text(
        "26/11/27 05:02:29 ERROR Executor: Exception in task 61.0 in stage 4.0 (TID 70)\n"
        "java.lang.OutOfMemoryError: Java heap space\n"
        "\tat java.base/java.util.Arrays.copyOf(Arrays.java:3537)\n"
        "26/11/27 05:02:29 WARN TaskSetManager: Lost task 61.0 in stage 4.0 (TID 70) "
        "(localhost executor driver): java.lang.OutOfMemoryError: Java heap space\n"
    )
    local = {"spark.master": "local[*]", "spark.driver_memory": "auto"}
    dead = Py4JJavaError("An error occurred while calling z:PythonRDD.collectAndServe.\n")
    failure = failures.describe(dead, stage="train", log_file=str(log), settings=local)
    assert failure.kind == "out_of_memory" and failure.exit_code == 2, failure.paragraph
    assert "\n" not in failure.paragraph and "spark.driver_memory" in failure.paragraph
    # without the JVM's lines it is still named as a JVM that died, not as a bug
    log.write_text("nothing of note\n")
    failure = failures.describe(dead, stage="train", log_file=str(log), settings=local)
    assert failure.kind == "jvm_gone" and "stopped answering" in failure.paragraph

    # a message read by remember() while the JVM was up is what counts once it is gone (the
    # runner stops the JVM before it describes the failure: a full disk stays a full disk)
    class Py4JLater(Exception):
        alive = True

        def __str__(self) -> str:
            if not Py4JLater.alive:
                raise ConnectionError("Answer from Java side is empty")
            return "java.io.IOException: No space left on device"

    Py4JLater.__name__ = "Py4JJavaError"
    later = failures.remember(Py4JLater())
    Py4JLater.alive = False
    failure = failures.describe(later, stage="ingest", log_file=str(log), settings=local)
    assert failure.kind == "no_space", failure.paragraph
    # a Py4J error whose message reads is classified by its message as before
    alive = Py4JJavaError.__bases__[0]("An error occurred while calling o1.x: boom")
    assert failures.describe(alive, stage="train", log_file=str(log)).kind == "bug"


def test_a_dead_jvm_is_asked_for_the_message_once(tmp_path):
    """Each str() of a Py4J error asks the gateway (a dead JVM answers after a connection
    attempt): describing the failure reads the chain once."""
    asked = []

    class Py4JJavaError(Exception):
        def __str__(self) -> str:
            asked.append(1)
            raise ConnectionError("Answer from Java side is empty")

    log = tmp_path / "train.log"
    log.write_text("nothing of note\n")
    failure = failures.describe(Py4JJavaError("call"), stage="train", log_file=str(log))
    assert failure.kind == "jvm_gone" and len(asked) == 1


# --------------------------------------------------------------------------- the master


def test_the_wait_for_a_master_is_bounded():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nobody listens there
    t0 = time.monotonic()
    with pytest.raises(EnvironmentFailure, match=rf"spark://127.0.0.1:{port} \(127.0.0.1"):
        failures.wait_for_master(f"spark://127.0.0.1:{port}", 1.0)
    assert 1.0 <= time.monotonic() - t0 < 5
    failures.wait_for_master("local[2]", 0)  # nothing to wait for
    failures.wait_for_master("yarn", 0)


def test_a_master_that_comes_up_within_the_wait_is_used():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    timer = threading.Timer(0.8, listener.listen)
    timer.start()
    try:
        t0 = time.monotonic()
        failures.wait_for_master(f"spark://127.0.0.1:{closed},127.0.0.1:{port}", 10.0)
        assert 0.5 < time.monotonic() - t0 < 8
    finally:
        timer.cancel()
        listener.close()


# --------------------------------------------------------------------------- runner, CLI


def _runner(monkeypatch, capsys, tmp_path, stage_fn) -> tuple[int, str]:
    import pipeline.runner as runner

    real = runner.get_stage
    monkeypatch.setattr(runner, "get_stage", lambda n: stage_fn if n == "split" else real(n))
    code = runner.main(
        ["split"], ["--conf", str(REPO / "conf" / "local.yaml"), "--set", f"paths.root={tmp_path}"]
    )
    return code, capsys.readouterr().err


def test_the_runner_prints_one_paragraph_and_logs_the_trace(spark, monkeypatch, capsys, tmp_path):
    def out_of_memory(spark_, cfg):
        spark_.range(5).count()
        np.empty(10**15)

    code, err = _runner(monkeypatch, capsys, tmp_path, out_of_memory)
    assert code == 2
    [line] = [x for x in err.splitlines() if x.startswith("error: ")]
    assert line.startswith("error: stage split: the Python driver process ran out of memory.")
    log = Path(re.search(r"Full log: (\S+)$", line).group(1))
    assert log.parent == tmp_path / "logs"
    text = log.read_text()
    assert "Traceback (most recent call last)" in text and "_ArrayMemoryError" in text
    assert "Traceback" not in err
    assert spark.range(2).count() == 2  # a session the runner did not start stays up

    def bug(spark_, cfg):
        return {}["missing"]

    code, err = _runner(monkeypatch, capsys, tmp_path, bug)
    assert code == 1
    assert "a bug of Cr5-on-Spark" in err and "KeyError: 'missing'" in err
    assert "Traceback" not in err


def test_py4j_s_own_traces_reach_the_log_file_not_the_console(spark, monkeypatch, capsys,
                                                               tmp_path):  # fmt: skip
    """py4j logs "Exception while sending command." with a trace through the *root* logger
    when the JVM dies; the console shows the failure's paragraph only."""
    import logging
    import sys

    def jvm_dies(spark_, cfg):
        try:
            raise ConnectionError("Answer from Java side is empty")
        except ConnectionError:
            record = logging.LogRecord("root", logging.INFO, "/x/py4j/java_gateway.py", 1056,
                                       "Exception while sending command.", None,
                                       sys.exc_info())  # fmt: skip
        logging.getLogger().handle(record)
        raise MemoryError

    # the console handler a job's configure_logging installs (pytest's own handlers make
    # basicConfig a no-op here)
    console = logging.StreamHandler(sys.stderr)
    console.setLevel(logging.INFO)
    logging.getLogger().addHandler(console)
    try:
        code, err = _runner(monkeypatch, capsys, tmp_path, jvm_dies)
    finally:
        logging.getLogger().removeHandler(console)
    assert "stage split: starting" in err  # the console does show INFO records
    assert code == 2 and "Exception while sending command" not in err and "Traceback" not in err
    [line] = [x for x in err.splitlines() if x.startswith("error: ")]
    log = Path(re.search(r"Full log: (\S+)$", line).group(1))
    assert "Exception while sending command." in log.read_text()


def test_the_cli_boundary(monkeypatch, capsys, tmp_path):
    from pipeline import cli
    from pipeline.model import Cr5Model

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "vectors.npy"))

    monkeypatch.setattr(Cr5Model, "load", full)
    assert cli.main(["embed", "--model", "m", "--lang", "en"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: python -m pipeline embed: the disk ran out of space")
    assert "Its output was not written" in err and "Full log: " in err

    def bug(*args, **kwargs):
        raise ValueError("an unexpected value")

    monkeypatch.setattr(Cr5Model, "load", bug)
    assert cli.main(["embed", "--model", "m", "--lang", "en"]) == 1
    err = capsys.readouterr().err
    assert "a bug of Cr5-on-Spark" in err and "ValueError: an unexpected value" in err
    log = Path(re.search(r"Full log: (\S+)$", err.strip()).group(1))
    assert "Traceback" in log.read_text() and "Traceback" not in err


def test_the_rebuild_command_is_this_run_s_command():
    failures.set_invocation("jobs/train.py", ["conf/local.yaml", "my profile.yaml"], ["a.b=[1, 2]"])
    assert failures.rebuild_command("tfidf") == (
        "python jobs/tfidf.py --conf conf/local.yaml --conf 'my profile.yaml' --set 'a.b=[1, 2]'"
    )


def test_a_jvm_that_does_not_start_is_named():
    class PySparkRuntimeError(Exception):  # pyspark's, with its message
        pass

    exc = PySparkRuntimeError(
        "[JAVA_GATEWAY_EXITED] Java gateway process exited before sending its port number."
    )
    failure = described(exc, stage="ingest")
    assert failure.kind == "jvm_start" and failure.exit_code == 2
    assert "spark.driver_memory (now 2g)" in failure.paragraph


def test_a_stage_waits_for_the_jvm_it_launched_to_exit(monkeypatch):
    """The runner's stop: the session stopped, the gateway shut down, the JVM's stdin closed
    and its exit awaited, so the stage's memory is back before its process ends. A ``cat``
    stands in for the JVM (it exits when its stdin closes, as the gateway server does)."""
    import subprocess

    from pyspark import SparkContext

    import pipeline.runner as runner

    class Gateway:
        def __init__(self) -> None:
            self.proc = subprocess.Popen(["cat"], stdin=subprocess.PIPE)
            self.closed = False

        def shutdown(self) -> None:
            self.closed = True

    class Session:
        stopped = False

        def stop(self) -> None:
            Session.stopped = True

    gateway = Gateway()
    monkeypatch.setattr(SparkContext, "_gateway", gateway)
    monkeypatch.setattr(SparkContext, "_jvm", object())
    runner._stop(Session())
    assert Session.stopped and gateway.closed
    assert gateway.proc.returncode == 0  # waited for: it has exited
    assert SparkContext._gateway is None and SparkContext._jvm is None
