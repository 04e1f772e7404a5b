"""One error boundary for every job and the command line: what failed, where, and the fix.

A failure of the environment (an unreachable master, executors or Python workers lost beyond
Spark's retries, memory or disk space exhausted, permissions changed mid-run, a published
file damaged) reaches the driver as a Python exception, often a Py4J error wrapping a Java
stack trace hundreds of lines long. :func:`describe` turns any exception into a
:class:`Failure`: one paragraph naming what failed, where (the stage, the dataset or path,
the process), the setting or action that fixes it, and the exit status (2 for the
environment and for bad input, 1 for an unexpected error, a bug). The runner
(:mod:`pipeline.runner`) and ``python -m pipeline`` (:mod:`pipeline.cli`) print that
paragraph and write the full trace to the run's log file (:mod:`pipeline.runlog`).

Context travels with the exception: :func:`annotate` records on it the stage, the dataset
being written and its path, so the paragraph can name them; :func:`set_invocation` records
the command line of the run, so a "rebuild it" advice (:func:`rebuild_command`) can be
copied and run as it is. Other parts of the pipeline may add a sentence to the paragraphs
through :func:`register_hint` (for example the memory plan's estimate of what a stage
needs, for an out-of-memory failure; :func:`oom_paragraph` builds that paragraph and takes
such details directly too).

This module imports nothing of the pipeline but :mod:`pipeline.errors`, and neither Spark nor
Py4J: it recognises their exceptions by class name and message, so every layer may use it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shlex
import socket
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pipeline.errors import EnvironmentFailure, PipelineError

__all__ = [
    "Failure",
    "FailureInfo",
    "MemorySite",
    "annotate",
    "context_of",
    "describe",
    "full_trace",
    "oom_paragraph",
    "rebuild_command",
    "register_hint",
    "remember",
    "set_invocation",
    "wait_for_master",
]

#: Exit status of a failure of the environment or of bad input (the message says what to
#: fix), and of an unexpected error (a bug).
EXIT_ENVIRONMENT = 2
EXIT_BUG = 1

#: Where memory ran out: the driver's JVM, the driver's Python process, an executor's JVM
#: heap, an executor's whole container (JVM, off-heap memory and Python workers, killed by
#: YARN, Kubernetes or the OS for passing its limit), or a Python worker of an executor
#: (which runs the UDFs, fused solves and embedding).
MemorySite = Literal[
    "driver_jvm", "driver_python", "executor_jvm", "executor_container", "python_worker"
]

_CONTEXT_ATTR = "_cr5_context"


@dataclass(frozen=True)
class Failure:
    """What :func:`describe` makes of an exception.

    Attributes
    ----------
    kind : str
        ``input`` (a :class:`~pipeline.errors.PipelineError`, also one raised in an
        executor), ``environment`` (an :class:`~pipeline.errors.EnvironmentFailure` such as
        an unreachable master), ``master``, ``executors_lost``, ``python_worker``,
        ``python_env`` (a module missing on the executors), ``out_of_memory``, ``no_space``,
        ``permission``, ``io``, ``damaged``, ``jvm_start``, ``jvm_gone``, ``interrupted`` or
        ``bug``.
    paragraph : str
        The one paragraph for the console (no trace).
    exit_code : int
        2 for the environment and bad input, 1 for a bug, 130 for an interrupt.
    """

    kind: str
    paragraph: str
    exit_code: int


@dataclass(frozen=True)
class FailureInfo:
    """What a hint provider (:func:`register_hint`) is told about a failure.

    Attributes
    ----------
    kind : str
        As :attr:`Failure.kind`.
    stage : str or None
        The stage that was running.
    site : str or None
        For ``out_of_memory``: a :data:`MemorySite`.
    settings : mapping of str to str
        The run's relevant settings (``spark.master``, ``spark.driver_memory``, Spark
        properties of ``spark.conf``), as the runner passed them.
    context : mapping of str to Any
        What :func:`annotate` recorded on the exception (stage, dataset, path, ...).
    """

    kind: str
    stage: str | None
    site: str | None = None
    settings: Mapping[str, str] = field(default_factory=dict)
    context: Mapping[str, Any] = field(default_factory=dict)


_hints: list[Callable[[FailureInfo], str | None]] = []
_invocation: dict[str, Any] = {}


def register_hint(provider: Callable[[FailureInfo], str | None]) -> None:
    """Add ``provider``: called for every failure described, it returns a sentence to add
    to the paragraph (before the fix) or None. A provider that raises is ignored."""
    if provider not in _hints:
        _hints.append(provider)


def unregister_hint(provider: Callable[[FailureInfo], str | None]) -> None:
    """Remove a provider added by :func:`register_hint` (no error when absent)."""
    if provider in _hints:
        _hints.remove(provider)


def _hint_sentences(info: FailureInfo) -> list[str]:
    out = []
    for provider in list(_hints):
        try:
            text = provider(info)
        except Exception:  # a hint must never hide the failure it explains
            continue
        if text:
            out.append(text.strip())
    return out


# --------------------------------------------------------------------------- context


def annotate(exc: BaseException, **context: Any) -> BaseException:
    """Record ``context`` (``stage``, ``dataset``, ``path``, ``action``, ...) on ``exc``.

    Keys already recorded are kept: the innermost code knows best where it was. Returns
    ``exc`` (``raise annotate(exc, dataset="tfidf")`` is not needed: annotate and re-raise).
    """
    try:
        current = dict(getattr(exc, _CONTEXT_ATTR, {}) or {})
        for key, value in context.items():
            if value is not None:
                current.setdefault(key, value)
        setattr(exc, _CONTEXT_ATTR, current)
    except (AttributeError, TypeError):  # an exception type without a __dict__
        pass
    return exc


def context_of(exc: BaseException) -> dict[str, Any]:
    """The context recorded on ``exc`` and on the exceptions it was raised from."""
    merged: dict[str, Any] = {}
    for e in _chain(exc):
        for key, value in (getattr(e, _CONTEXT_ATTR, None) or {}).items():
            merged.setdefault(key, value)
    return merged


def set_invocation(
    script: str,
    profiles: Sequence[str],
    overrides: Sequence[str],
    *,
    rerun: Sequence[str] | None = None,
) -> None:
    """Record how this run was started (for :func:`rebuild_command`).

    ``rerun`` is the command that runs one stage given its name as the next argument (the
    console script's ``("cr5", "run")``); None: ``python jobs/<stage>.py``, the job scripts
    of a checkout.
    """
    _invocation.clear()
    _invocation.update(
        script=script,
        profiles=list(profiles),
        overrides=list(overrides),
        rerun=list(rerun) if rerun else None,
    )


def rebuild_command(stage: str) -> str:
    """The command that reruns ``stage`` with this run's profiles and overrides: the way
    this run was started (``cr5 run <stage>`` after a ``cr5`` command, else
    ``python jobs/<stage>.py``).

    Without a recorded invocation (library use): ``python jobs/<stage>.py --conf <profile>``.
    """
    rerun = _invocation.get("rerun")
    args = [*rerun, stage] if rerun else ["python", f"jobs/{stage}.py"]
    if not _invocation:
        return " ".join([*args, "--conf", "conf/<profile>.yaml"])
    for profile in _invocation["profiles"]:
        args += ["--conf", profile]
    for item in _invocation["overrides"]:
        args += ["--set", item]
    return shlex.join(args)


# --------------------------------------------------------------------------- reading errors


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the exceptions it was raised from or while handling (no repeats)."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        yield cur
        cur = cur.__cause__ or cur.__context__


def _class_names(exc: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(exc).__mro__}


_TEXT_ATTR = "_cr5_failure_text"
_TRACE_ATTR = "_cr5_failure_trace"


def remember(exc: BaseException) -> BaseException:
    """Read the messages and the full trace of ``exc``'s chain now and keep them on it.

    A Py4J error's message is fetched from the JVM; the runner stops the session and its
    JVM before the failure is described, so it calls this first. Returns ``exc``."""
    for e in _chain(exc):
        # the JVM already gone, or no __dict__: read later if at all
        with contextlib.suppress(Exception):
            setattr(e, _TEXT_ATTR, str(e))
    with contextlib.suppress(Exception):
        setattr(exc, _TRACE_ATTR, "".join(traceback.format_exception(exc)))
    return exc


def _text(exc: BaseException) -> str:
    """``str(exc)`` (as :func:`remember` kept it, if it did); for a Py4J error this asks the
    JVM for the Java trace, which fails when the JVM is gone (then the class name and
    arguments)."""
    return _read(exc)[0]


def _read(exc: BaseException) -> tuple[str, bool]:
    """(:func:`_text` of ``exc``, whether ``str(exc)`` could be read)."""
    kept = getattr(exc, _TEXT_ATTR, None)
    if kept is not None:
        return kept, True
    try:
        return str(exc), True
    except Exception:
        try:
            return repr(exc.args), False
        except Exception:
            return type(exc).__name__, False


def _jvm_died(ev: _Evidence) -> bool:
    """A Py4J error whose message the JVM could no longer give when the chain was read: the
    JVM died during the call (its own last words are in the log file, not in the
    exception). Read once, in :meth:`_Evidence.of`: each attempt asks the gateway again."""
    return any("Py4JJavaError" in _class_names(e) for e in ev.unreadable)


#: How much of the end of the log file is searched for the JVM's own error lines.
_LOG_TAIL_BYTES = 4 * 2**20


def _java_errors(log_file: str | None) -> str:
    """The JVM's error lines (``java.lang.OutOfMemoryError``, a lost task) near the end of
    the run's log file, where its standard error goes; empty when there are none."""
    if not log_file:
        return ""
    try:
        with open(log_file, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - _LOG_TAIL_BYTES))
            tail = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    keep = ("java.lang.OutOfMemoryError", "GC overhead limit exceeded", "Lost task")
    lines = [line for line in tail.splitlines() if any(k in line for k in keep)]
    return "".join("\n" + line for line in lines[:5])


def full_trace(exc: BaseException) -> str:
    """Every frame of ``exc`` and its causes, Python and Java (for the log file)."""
    kept = getattr(exc, _TRACE_ATTR, None)
    if kept is not None:
        return kept
    try:
        return "".join(traceback.format_exception(exc))
    except Exception:  # a Py4J error whose JVM is gone
        return f"{type(exc).__name__}: {_text(exc)}"


@dataclass
class _Evidence:
    """The exception chain as the classifier reads it."""

    chain: list[BaseException]
    text: str  # every message of the chain, Java traces included
    context: dict[str, Any]
    unreadable: list[BaseException] = field(default_factory=list)  # str() raised

    @classmethod
    def of(cls, exc: BaseException) -> _Evidence:
        chain = list(_chain(exc))
        reads = [_read(e) for e in chain]
        text = "\n".join(f"{type(e).__name__}: {t}" for e, (t, _) in zip(chain, reads))
        unreadable = [e for e, (_, ok) in zip(chain, reads) if not ok]
        return cls(chain, text, context_of(exc), unreadable)

    def has(self, *needles: str) -> bool:
        return any(n in self.text for n in needles)

    def oserror(self, *codes: int) -> OSError | None:
        for e in self.chain:
            if isinstance(e, OSError) and e.errno in codes:
                return e
        return None

    def instance(self, kind: type[BaseException]) -> BaseException | None:
        return next((e for e in self.chain if isinstance(e, kind)), None)

    def named(self, *names: str) -> BaseException | None:
        return next((e for e in self.chain if _class_names(e) & set(names)), None)


# --------------------------------------------------------------------------- paragraphs


def _where(stage: str | None) -> str:
    if not stage:
        return "the run"
    return stage if " " in stage else f"stage {stage}"  # "python -m pipeline embed"


def _kept(stage: str | None, completed: Sequence[str]) -> str:
    if stage and " " in stage:
        return "Its output was not written (an output file that existed is unchanged)."
    done = f" (including the outputs of {', '.join(completed)}, finished earlier in this run)"
    return (
        f"Nothing of {_where(stage)} was published: every dataset and model published before "
        f"is unchanged{done if completed else ''}."
    )


def _tail(log_file: str | None) -> str:
    return f" Full log: {log_file}" if log_file else ""


def _retries(ev: _Evidence) -> str:
    found = re.search(r"failed (\d+) times?", ev.text)
    return f" after {found.group(1)} attempt(s)" if found else ""


def _path_in(ev: _Evidence, exc: OSError | None = None) -> str | None:
    """The most specific path the failure names: the OSError's, the annotated one, or a
    path in the Java message."""
    if exc is not None and exc.filename:
        name = os.fsdecode(exc.filename)
        # a writer's hidden temporary (".tfidf.tmp-…", ".tfidf.owner-…"): name its directory
        if os.path.basename(name).startswith(".") and ev.context.get("path"):
            return os.path.dirname(name)
        return name
    if ev.context.get("path"):
        return str(ev.context["path"])
    for pattern in _PATH_PATTERNS:
        found = re.search(pattern, ev.text)
        if found:
            return re.sub(r"^/+", "/", found.group(1).rstrip(".,;:"))
    return None


#: Where Java and Python messages name the file they failed on.
_PATH_PATTERNS = (
    r"\[Errno \d+\] [^:\n]+: '([^'\n]+)'",
    r"(?:writing rows to|to file|file|File|path) (?:file:)?(/[^\s'\"(),]+)",
    r"(?:file:)(/[^\s'\"(),]+)",
    r"(?:Checksum error|ChecksumException): (?:file:)?(/[^\s'\"(),]+)",
)


def _local_master(settings: Mapping[str, str]) -> bool:
    return str(settings.get("spark.master", "local")).startswith("local")


def oom_paragraph(
    site: MemorySite,
    *,
    stage: str | None = None,
    settings: Mapping[str, str] | None = None,
    details: Sequence[str] = (),
) -> str:
    """The paragraph for memory exhausted at ``site``: what ran out, the setting that gives
    it more (with its current value when ``settings`` has it) and what to lower instead.

    Parameters
    ----------
    site : {"driver_jvm", "driver_python", "executor_jvm", "executor_container", "python_worker"}
    stage : str, optional
        The stage that was running.
    settings : mapping, optional
        ``spark.master``, ``spark.driver_memory``, ``submitted`` ("true" under
        spark-submit) and Spark properties such as ``spark.executor.memory``.
    details : sequence of str
        Sentences to add before the fix, e.g. the memory plan's estimate of the stage's
        need ("train needs about 9.2 GB in the driver for X and the basis").
    """
    s = dict(settings or {})
    local = _local_master(s)
    submitted = s.get("submitted") == "true"

    def now(key: str, *, unset: str = "") -> str:
        """`` (now <value>)`` of a setting, else ``unset``."""
        value = s.get(key)
        return f" (now {value})" if value else unset

    unset = " (not set)"

    if site == "driver_jvm" or (site == "executor_jvm" and local):
        what = "the Spark driver's JVM ran out of heap memory" + (
            " (in local mode it also runs every task)" if local else ""
        )
        if submitted:
            fix = "raise spark-submit's --driver-memory"
        else:
            fix = (
                f"raise spark.driver_memory{now('spark.driver_memory')}, e.g. "
                "--set spark.driver_memory=8g"
            )
        fix += ", or run on a machine with more memory"
    elif site == "executor_jvm":
        what = "an executor's JVM ran out of heap memory"
        fix = (
            f"raise spark.executor.memory{now('spark.executor.memory', unset=unset)} in "
            "spark.conf (or "
            "spark-submit --executor-memory), or give each task less data "
            "(train.partitions_per_language, spark.shuffle_partitions)"
        )
    elif site == "executor_container":
        what = (
            "an executor went over its memory limit (JVM heap, off-heap memory and Python "
            "workers together) and was killed"
        )
        overhead = now("spark.executor.memoryOverhead", unset=unset)
        fix = (
            f"raise spark.executor.memoryOverhead{overhead} in spark.conf (it covers the "
            "Python workers unless spark.executor.pyspark.memory is set), or lower the "
            "Python workers' load (train.solve_in_task_max_nnz, embed.batch_rows)"
        )
    elif site == "python_worker":
        what = "a Python worker of Spark ran out of memory"
        limit = s.get("spark.executor.pyspark.memory")
        fix = (
            f"raise spark.executor.pyspark.memory (now {limit})"
            if limit
            else "give the executors' Python workers more memory (spark.executor.memoryOverhead, "
            "or spark.executor.pyspark.memory to bound them)"
        )
        if stage in ("train", "evaluate"):
            fix += (
                ", or lower train.solve_in_task_max_nnz so that fewer languages are solved "
                "whole inside one task"
            )
        elif stage == "embed":
            fix += ", or lower embed.batch_rows"
    else:
        what = "the Python driver process ran out of memory"
        fix = "run on a machine with more memory, or train a smaller problem"
        if stage in ("train", "evaluate"):
            fix += " (train.backend=spark keeps X on the executors, not in the driver)"
    sentences = [f"{_where(stage)}: {what}."]
    sentences += [d.strip() for d in details if d and d.strip()]
    sentences.append(f"Fix: {fix}.")
    return " ".join(sentences)


def _oom_site(ev: _Evidence) -> MemorySite | None:
    """Where memory ran out, or None when it did not."""
    in_task = ev.has("Lost task", "Task failed", "TaskSetManager", "times, most recent failure")
    if ev.has("java.lang.OutOfMemoryError", "GC overhead limit exceeded"):
        return "executor_jvm" if in_task else "driver_jvm"
    if ev.has("MemoryError") and ev.named("PythonException", "Py4JJavaError"):
        return "python_worker"
    if ev.instance(MemoryError) is not None or ev.oserror(errno.ENOMEM):
        return "driver_python"
    if ev.has("memory limits", "OOMKilled", "exit code 137", "exit status 137"):
        return "executor_container"
    return None


def _master_paragraph(ev: _Evidence, stage: str | None, settings: Mapping[str, str]) -> str:
    master = settings.get("spark.master", "the configured master")
    return (
        f"{_where(stage)}: the Spark master {master} did not accept this application "
        "(all masters unresponsive). Nothing was run. Fix: start the master or correct its URL "
        "(--set spark.master=... or spark-submit --master ...), and check that this machine "
        "can reach it."
    )


def _no_space_paragraph(ev: _Evidence, stage: str | None, exc: OSError | None) -> str:
    path = _path_in(ev, exc)
    dataset = ev.context.get("dataset")
    code = exc.errno if exc is not None else errno.ENOSPC
    if code == errno.EFBIG or ev.has("File too large"):
        what = "a file grew past the size this process may write (RLIMIT_FSIZE, ulimit -f)"
        fix = "raise the file-size limit (ulimit -f unlimited)"
    elif code == errno.EDQUOT or ev.has("Disk quota exceeded"):
        what = "the disk quota ran out"
        fix = "free space within your quota or ask for a larger one"
    else:
        what = "the disk ran out of space (no space left on device)"
        fix = "free space on that file system, or point paths.root there at a larger one"
    where = f" while writing dataset {dataset!r}" if dataset else ""
    at = f" at {path}" if path else ""
    scratch = (
        ""
        if dataset or (path and "blockmgr" not in path and "spark-" not in path)
        else " (Spark's scratch files: set spark.local.dir in spark.conf, or SPARK_LOCAL_DIRS, "
        "to a larger disk)"
    )
    return f"{_where(stage)}: {what}{where}{at}{scratch}. Fix: {fix}."


def _permission_paragraph(ev: _Evidence, stage: str | None, exc: OSError | None) -> str:
    path = _path_in(ev, exc)
    dataset = ev.context.get("dataset")
    at = f" {path}" if path else " a file or directory the run uses"
    if (exc is not None and exc.errno == errno.EROFS) or ev.has("Read-only file system"):
        what = f"the file system of{at} became read-only"
        fix = "remount it read-write (a disk error may have made it read-only: check it) or "
        fix += "point paths.root at another file system"
    else:
        what = f"permission to write or read{at} was denied"
        fix = "restore the permissions or ownership of that path for the user running the job"
    where = f" while writing dataset {dataset!r}" if dataset else ""
    return f"{_where(stage)}: {what}{where}. Fix: {fix}."


def _io_paragraph(ev: _Evidence, stage: str | None, exc: OSError) -> str:
    path = _path_in(ev, exc)
    at = f" on {path}" if path else ""
    if exc.errno in (errno.EMFILE, errno.ENFILE):
        return (
            f"{_where(stage)}: too many open files{at}. Fix: raise the open-file limit "
            "(ulimit -n) of the user running the job."
        )
    return (
        f"{_where(stage)}: an input/output error{at} ({exc.strerror or exc}). Fix: check the "
        "disk or network file system holding it (dmesg, the storage's health)."
    )


def _python_worker_paragraph(ev: _Evidence, stage: str | None, settings: Mapping[str, str]) -> str:
    local = _local_master(settings)
    signal_ = re.search(r"(?:signal|SIG)\s*(\d+|KILL|SEGV|TERM)", ev.text)
    how = f" (killed by signal {signal_.group(1)})" if signal_ else ""
    retry = (
        "in local mode a failed task is not retried: spark.master=local[N,F] retries it F times"
        if local
        else "Spark retried the task spark.task.maxFailures times"
    )
    return (
        f"{_where(stage)}: a Python worker process of Spark died{how} while running a "
        f"task{_retries(ev)}; {retry}. A worker killed by the operating system usually means "
        "the machine ran out of memory (see dmesg). Fix: rerun the stage; if it recurs, give "
        "the Python workers more memory (spark.executor.memoryOverhead, "
        "spark.executor.pyspark.memory) or lower their load (train.solve_in_task_max_nnz, "
        "embed.batch_rows)."
    )


def _python_env_paragraph(stage: str | None, module: str) -> str:
    return (
        f"{_where(stage)}: the executors' Python cannot import {module!r}: their interpreter is "
        "not the one with this project's dependencies. Fix: point spark.pyspark.python (in "
        "spark.conf, or PYSPARK_PYTHON) at an interpreter that has them on every worker, or ship "
        "a packed environment (deploy/submit.sh --env-archive; deploy/README.md)."
    )


def _executors_lost_paragraph(ev: _Evidence, stage: str | None) -> str:
    reason = re.search(r"Reason: ([^\n]+)", ev.text)
    why = f" ({reason.group(1).strip().rstrip('.')})" if reason else ""
    return (
        f"{_where(stage)}: executors were lost{why} and a task failed{_retries(ev)}, more "
        "than Spark retries (spark.task.maxFailures). Fix: check that the cluster's workers "
        "are up and have memory to spare (their logs name the cause), then rerun the stage; "
        "raise spark.task.maxFailures in spark.conf to ride out more losses."
    )


def _jvm_gone_paragraph(stage: str | None, settings: Mapping[str, str]) -> str:
    memory = settings.get("spark.driver_memory")
    now = f" (now {memory})" if memory else ""
    return (
        f"{_where(stage)}: the Spark driver's JVM stopped answering: it was killed (for "
        "example by the operating system's out-of-memory killer, see dmesg) or crashed. Fix: "
        f"rerun the stage; if it recurs, lower spark.driver_memory{now} below what the machine "
        "can give it alongside the Python driver, or use a machine with more memory."
    )


def _damaged_paragraph(ev: _Evidence, stage: str | None) -> str:
    path = _path_in(ev)
    where = f" {path}" if path else ""
    owner = _dataset_of(path) if path else None
    if owner:
        name, producer, root = owner
        rel = os.path.relpath(path.replace("file:", "", 1), root)
        return (
            f"{_where(stage)}: dataset {name!r} at {root} is damaged: its file {rel} cannot be "
            "read back as written (its bytes changed after it was written: a disk, memory or "
            f"copy error). Fix: rebuild it with the stage that writes it, {producer}: "
            f"{rebuild_command(producer)} (then rerun the stages after it)."
        )
    return (
        f"{_where(stage)}: the file{where} cannot be decoded (it is damaged or not what it "
        "should be). Fix: restore or rebuild it, then rerun the stage."
    )


def _dataset_of(path: str) -> tuple[str, str, str] | None:
    """(dataset name, producer stage, dataset directory) of a local path inside a dataset."""
    import json

    cur = os.path.dirname(path.replace("file:", "", 1))
    for _ in range(4):
        manifest = os.path.join(cur, "_manifest.json")
        if os.path.isfile(manifest):
            try:
                with open(manifest, encoding="utf-8") as f:
                    m = json.load(f)
                return str(m.get("dataset", os.path.basename(cur))), str(m.get("producer")), cur
            except (OSError, ValueError):
                return None
        cur = os.path.dirname(cur)
    return None


_DAMAGE = (
    "ChecksumException",
    "is not a Parquet file",
    "Parquet magic bytes not found",
    "ParquetDecodingException",
    "Couldn't deserialize thrift",
    "can not read class org.apache.parquet",
    "Unexpected end of stream",
    "Corrupted",
    "CorruptedException",
    "Decompression error",
    "FAILED_READ_FILE",
)
_PYTHON_WORKER = (
    "Python worker exited unexpectedly",
    "Python worker crashed",
    "PythonException: EOFError",
    "java.io.EOFException\n\tat org.apache.spark.api.python",
    "Crashed the Python worker",
)
_EXECUTOR_LOST = (
    "ExecutorLostFailure",
    "Lost executor",
    "executor lost",
    "Executor heartbeat timed out",
    "worker lost",
    "FetchFailed",
)
_JVM_GONE = (
    "Answer from Java side is empty",
    "Error while sending or receiving",
    "Py4JNetworkError",
    "Cannot call methods on a stopped SparkContext",
    "SparkContext was shut down",
    "An error occurred while trying to connect to the Java server",
)


def _classify(
    ev: _Evidence, stage: str | None, settings: Mapping[str, str]
) -> tuple[str, str, str | None]:
    """(kind, paragraph without the closing sentences, memory site) of an environment
    failure; ("bug", "", None) when the evidence fits none."""
    if ev.has("All masters are unresponsive", "Failed to connect to master"):
        return "master", _master_paragraph(ev, stage, settings), None
    if ev.has("JAVA_GATEWAY_EXITED", "Java gateway process exited"):
        memory = settings.get("spark.driver_memory")
        return (
            "jvm_start",
            f"{_where(stage)}: the Spark driver's JVM did not start (its own message is in the "
            "log file). Fix: check spark.driver_memory"
            + (f" (now {memory})" if memory else "")
            + " against the machine's free memory, and that Java 17+ runs (python -m "
            "pipeline.java).",
            None,
        )
    if ev.has(*_DAMAGE):
        return "damaged", _damaged_paragraph(ev, stage), None
    space = ev.oserror(errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
    if space is not None or ev.has("No space left on device", "Disk quota exceeded"):
        return "no_space", _no_space_paragraph(ev, stage, space), None
    perm = ev.oserror(errno.EACCES, errno.EPERM, errno.EROFS)
    if perm is not None or ev.has(
        "Permission denied", "AccessDeniedException", "AccessControlException",
        "Read-only file system",
    ):  # fmt: skip
        return "permission", _permission_paragraph(ev, stage, perm), None
    site = _oom_site(ev)
    if site is not None:
        return "out_of_memory", oom_paragraph(site, stage=stage, settings=settings), site
    missing = re.search(r"ModuleNotFoundError: No module named '([\w.]+)'", ev.text)
    if missing and ev.named("PythonException", "Py4JJavaError"):
        return "python_env", _python_env_paragraph(stage, missing.group(1)), None
    if ev.has(*_PYTHON_WORKER):
        return "python_worker", _python_worker_paragraph(ev, stage, settings), None
    if ev.has(*_EXECUTOR_LOST):
        return "executors_lost", _executors_lost_paragraph(ev, stage), None
    if ev.has(*_JVM_GONE) or ev.named("Py4JNetworkError"):
        return "jvm_gone", _jvm_gone_paragraph(stage, settings), None
    pipe = ev.oserror(errno.EPIPE)
    if pipe is not None and ev.instance(BrokenPipeError) is not None:
        return (
            "io",
            f"{_where(stage)}: its output pipe was closed before everything was written (the "
            "reading program exited). Fix: let the reader consume the whole output, or write "
            "to a file (--output).",
            None,
        )
    other = ev.oserror(errno.EIO, errno.EMFILE, errno.ENFILE)
    if other is not None:
        return "io", _io_paragraph(ev, stage, other), None
    return "bug", "", None


_FROM_EXECUTOR = re.compile(r"pipeline\.errors\.(\w+): ([^\n]+)")
_ERROR_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit)): (.+)$", re.MULTILINE)


def _summary(exc: BaseException) -> str:
    """``Type: message`` of what went wrong: for an error raised in a Python worker or the
    JVM, the innermost error line of its trace rather than the wrapper's."""
    text = _text(exc)
    found = [m for m in _ERROR_LINE.finditer(text) if "Py4JJavaError" not in m.group(1)]
    if found and type(exc).__name__ in ("PythonException", "Py4JJavaError"):
        last = found[-1]
        return f"{last.group(1)}: {last.group(2).strip()[:300]}"
    first = text.strip().splitlines()[0][:300] if text.strip() else ""
    return f"{type(exc).__name__}: {first}"


def describe(
    exc: BaseException,
    *,
    stage: str | None = None,
    log_file: str | None = None,
    settings: Mapping[str, str] | None = None,
    completed: Sequence[str] = (),
) -> Failure:
    """The :class:`Failure` that ``exc`` stands for (module docs).

    Parameters
    ----------
    exc : BaseException
    stage : str, optional
        The stage that was running (else the one :func:`annotate` recorded).
    log_file : str, optional
        Where the full trace is; named at the end of the paragraph.
    settings : mapping, optional
        The run's settings (``spark.master``, ``spark.driver_memory``, ``submitted``,
        Spark properties), quoted in the fixes.
    completed : sequence of str
        Stages of this run that finished (and published) before the failure.
    """
    settings = dict(settings or {})
    ev = _Evidence.of(exc)
    if _jvm_died(ev):
        ev.text += "\nPy4JNetworkError: Answer from Java side is empty" + _java_errors(log_file)
    stage = stage or ev.context.get("stage")
    if isinstance(exc, KeyboardInterrupt):
        return Failure(
            "interrupted",
            f"interrupted during {_where(stage)}. {_kept(stage, completed)}{_tail(log_file)}",
            130,
        )
    if isinstance(exc, EnvironmentFailure):
        return Failure("environment", str(exc) + _tail(log_file), EXIT_ENVIRONMENT)
    if isinstance(exc, PipelineError):
        return Failure("input", str(exc), EXIT_ENVIRONMENT)
    kind, paragraph, site = _classify(ev, stage, settings)
    if kind == "bug":
        found = _FROM_EXECUTOR.search(ev.text)
        if found:  # a project error raised in an executor's Python worker
            return Failure("input", f"{_where(stage)}: {found.group(2).strip()}", EXIT_ENVIRONMENT)
        paragraph = (
            f"{_where(stage)} failed with an unexpected error, a bug of Cr5-on-Spark or of a "
            f"library it uses: {_summary(exc)}. Please report it with the log file."
        )
        return Failure("bug", paragraph + " " + _kept(stage, completed) + _tail(log_file), EXIT_BUG)
    info = FailureInfo(kind, stage, site, settings, ev.context)
    extra = _hint_sentences(info)
    if extra:
        head, sep, fix = paragraph.partition(" Fix: ")
        paragraph = " ".join([head, *extra]) + (sep + fix if sep else "")
    closing = "" if kind == "master" else " " + _kept(stage, completed)
    return Failure(kind, paragraph + closing + _tail(log_file), EXIT_ENVIRONMENT)


# --------------------------------------------------------------------------- the master


def _master_addresses(master: str) -> list[tuple[str, int]]:
    """``spark://h1:p1,h2:p2`` -> [(h1, p1), (h2, p2)] (empty for other masters)."""
    if not master.startswith("spark://"):
        return []
    out = []
    for item in master[len("spark://") :].split(","):
        host, _, port = item.strip().rpartition(":")
        if host and port.isdigit():
            out.append((host.strip("[]"), int(port)))
    return out


def wait_for_master(master: str, seconds: float, *, key: str = "spark.master") -> None:
    """Return once a standalone master (``spark://``) accepts a TCP connection; raise
    :class:`~pipeline.errors.EnvironmentFailure` after ``seconds`` of trying.

    Spark itself would try to register for about a minute and then fail with a Java trace;
    this bounds the wait (``spark.master_wait_seconds``) and names the master. Other
    masters (local, YARN, Kubernetes) return at once.
    """
    addresses = _master_addresses(master)
    if not addresses:
        return
    deadline = time.monotonic() + max(0.0, seconds)
    while True:
        problems = []
        for host, port in addresses:
            left = max(0.5, min(5.0, deadline - time.monotonic()))
            try:
                with socket.create_connection((host, port), timeout=left):
                    return
            except OSError as exc:
                problems.append(f"{host}:{port}: {exc.strerror or exc}")
        if time.monotonic() >= deadline:
            break
        time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
    raise EnvironmentFailure(
        f"no Spark master answers at {master} ({'; '.join(problems)}), tried for {seconds:g} s "
        f"(spark.master_wait_seconds). Nothing was run. Fix: start the master (for a cluster "
        f"on this machine: python deploy/standalone.py) or correct its URL ({key}, or "
        "spark-submit --master), check that this machine can reach it, or raise "
        "spark.master_wait_seconds if it is still starting."
    )


def print_paragraph(failure: Failure, stream: Any = None) -> None:
    """Print ``error: <paragraph>`` to ``stream`` (default standard error)."""
    print(f"error: {failure.paragraph}", file=stream or sys.stderr, flush=True)


def fallback_log(text: str) -> str | None:
    """Write ``text`` (a trace) to ``<temporary directory>/cr5-logs/<time>-<pid>.log`` for a
    failure with no run log; return the file's path, or None when that fails too."""
    import tempfile

    directory = os.path.join(tempfile.gettempdir(), "cr5-logs")
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = os.path.join(directory, f"{stamp}-{os.getpid()}.log")
    try:
        os.makedirs(directory, exist_ok=True)
        with open(path, "a", encoding="utf-8") as f:
            f.write(text if text.endswith("\n") else text + "\n")
    except OSError:
        return None
    return path
