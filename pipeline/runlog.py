"""The run's log file: the console gets progress and one paragraph per failure, the file gets
everything.

Every job writes ``<paths.logs>/<stages>-<UTC time>-<pid>.log`` (``paths.logs`` defaults to
``<paths.root>/logs``): the Python log at DEBUG level, the full trace (Python and Java) of a
failure, and the output of the Spark driver's JVM: Spark's log4j messages, the output of
its Python workers in local mode, and anything the JVM prints at shutdown. How the JVM's
output gets there depends on who started it:

- a plain ``python jobs/<stage>.py`` run starts the JVM itself; the JVM is launched with
  its standard output and error on the log file (:func:`child_output_to`), so it inherits
  them, and so do its Python workers;
- under ``spark-submit`` the JVM is already running: its log4j configuration is replaced by
  one that appends to the log file, and its ``System.err`` is pointed there too
  (:func:`jvm_output_to`), before the SparkContext starts.

A log file that cannot be written (a full disk) stops being written without a word on the
console: the failure paragraph still reaches it.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from pipeline.io.storage import is_local, join, local_path, scratch_root, storage_for

__all__ = [
    "RunLog",
    "child_output_to",
    "jvm_output_to",
    "log_directory",
    "start_run_log",
]

log = logging.getLogger(__name__)

_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def log_directory(root: str, logs: str | None) -> str:
    """``paths.logs``, else ``<paths.root>/logs`` (a local directory or any store's URI)."""
    if logs:
        return local_path(logs)
    return join(local_path(root), "logs")


class _QuietFileHandler(logging.FileHandler):
    """A file handler that goes silent when its file cannot be written (a full disk), instead
    of printing a "Logging error" trace on the console."""

    def handleError(self, record: logging.LogRecord) -> None:
        self.broken = True

    broken = False


def _not_py4j(record: logging.LogRecord) -> bool:
    """False for what py4j logs through the *root* logger (``logging.info("Exception while
    sending command.", exc_info=True)`` when the JVM dies): a Py4J trace the console must not
    show; the failure's one paragraph says what happened, the log file keeps the trace."""
    return os.path.basename(os.path.dirname(record.pathname)) != "py4j"


class RunLog:
    """The log file of one run, attached to the root logger until :meth:`close`.

    Attributes
    ----------
    path : pathlib.Path
        The log file (local: a file handler appends to it).
    remote : str or None
        Where the file is published when ``paths.logs`` is on another store (HDFS, an object
        store, ``viewfs://``): :meth:`publish` copies it there while the Spark session that
        reaches the store still runs; the local file is the driver's scratch copy.
    """

    def __init__(self, path: Path, remote: str | None = None) -> None:
        self.path = path
        self.remote = remote
        self._written: set[int] = set()
        self._handler: _QuietFileHandler | None = None
        self._levels: tuple[int, dict[logging.Handler, int]] | None = None

    def open(self) -> RunLog:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handler = _QuietFileHandler(self.path, encoding="utf-8", delay=False)
        handler.setLevel(logging.DEBUG)
        handler.setFormatter(logging.Formatter(_FORMAT, datefmt="%Y-%m-%d %H:%M:%S"))
        root = logging.getLogger()
        self._levels = (root.level, {h: h.level for h in root.handlers})
        if root.level != logging.DEBUG:
            # the console handlers keep the level asked for; the file gets DEBUG
            for h in root.handlers:
                if h.level == logging.NOTSET:
                    h.setLevel(root.level or logging.WARNING)
            root.setLevel(logging.DEBUG)
        for h in root.handlers:  # the console: py4j's own traces go to the file only
            h.addFilter(_not_py4j)
        root.addHandler(handler)
        for noisy in ("py4j", "py4j.clientserver", "py4j.java_gateway"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
        self._handler = handler
        return self

    @property
    def location(self) -> str:
        """Where to read the log: the published copy when there is one."""
        return self.remote or str(self.path)

    def publish(self, spark: Any = None) -> None:
        """Copy the log file to :attr:`remote` (a no-op for a local log); a failure to do so
        is logged, never raised (the run's own outcome matters more)."""
        if self.remote is None:
            return
        try:
            store = storage_for(self.remote, spark)
            if self._handler is not None:
                self._handler.flush()
            staged = f"{self.remote}.tmp"  # uploaded beside, then renamed over the last copy
            for old in (staged, self.remote):
                if store.exists(old):
                    store.delete(old)
            store.put(str(self.path), staged)
            store.rename(staged, self.remote)
        except Exception as exc:  # the log must never fail the run
            log.warning("could not copy the run log to %s (%s)", self.remote, exc)
            self.remote = None

    def write_trace(self, exc: BaseException, text: str) -> None:
        """Append the full trace ``text`` of ``exc`` once (a failure is reported both before
        the session stops, so that a published log has it, and after)."""
        if id(exc) in self._written:
            return
        self._written.add(id(exc))
        self.write(text)

    def write(self, text: str) -> None:
        """Append ``text`` to the file (a failure's full trace)."""
        if self._handler is None or self._handler.broken:
            return
        with contextlib.suppress(OSError):
            self._handler.acquire()
            try:
                self._handler.flush()
                with open(self.path, "a", encoding="utf-8") as f:
                    f.write(text if text.endswith("\n") else text + "\n")
            finally:
                self._handler.release()

    def close(self) -> None:
        if self._handler is not None:
            root = logging.getLogger()
            root.removeHandler(self._handler)
            for h in root.handlers:
                h.removeFilter(_not_py4j)
            with contextlib.suppress(OSError):
                self._handler.close()
            self._handler = None
            if self._levels is not None:
                level, handlers = self._levels
                root.setLevel(level)
                for h, h_level in handlers.items():
                    h.setLevel(h_level)


def start_run_log(directory: str, stages: Sequence[str]) -> RunLog | None:
    """Open ``<directory>/<stages>-<UTC time>-<pid>.log``; None (with a warning) when the
    directory cannot be written. For a ``directory`` on another store the file is written
    in the driver's scratch directory and published there (:meth:`RunLog.publish`)."""
    when = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    name = "+".join(stages) if len(stages) <= 3 else f"{stages[0]}-to-{stages[-1]}"
    file = f"{name}-{when}-{os.getpid()}.log"
    remote = None if is_local(directory) else join(directory, file)
    path = Path(scratch_root()) / "cr5-logs" / file if remote else Path(directory) / file
    try:
        return RunLog(path.absolute(), remote).open()
    except OSError as exc:
        log.warning("cannot write the run log %s (%s): traces go to the console", path, exc)
        return None


@contextlib.contextmanager
def child_output_to(path: str | os.PathLike | None) -> Iterator[None]:
    """While the block runs, file descriptors 1 and 2 of this process point at ``path``
    (appending), so a child process started in the block (the JVM) writes its output there.

    The console handlers of :mod:`logging` write to the same descriptors, so a message
    logged inside the block lands in the file only; keep the block to the launch.
    """
    if path is None:
        yield
        return
    try:
        fd = os.open(os.fspath(path), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError:
        yield
        return
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    saved = [os.dup(1), os.dup(2)]
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (*saved, fd):
            os.close(f)


_LOG4J2 = """\
status = error
appender.file.type = File
appender.file.name = file
appender.file.fileName = {path}
appender.file.append = true
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{yyyy-MM-dd HH:mm:ss}} %p %c{{1}}: %m%n%ex
rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
"""


def jvm_output_to(jvm: Any, path: str | os.PathLike) -> None:
    """Point a running JVM's log4j output and ``System.err`` at ``path`` (appending).

    For ``spark-submit`` runs, whose JVM started before this process; ``jvm`` is the Py4J
    view of it. Failures are logged (to the file) and otherwise ignored.
    """
    config = Path(f"{path}.log4j2.properties")
    try:
        config.write_text(_LOG4J2.format(path=Path(path).absolute()), encoding="utf-8")
        uri = jvm.java.io.File(str(config.absolute())).toURI()
        jvm.org.apache.logging.log4j.core.config.Configurator.reconfigure(uri)
        stream = jvm.java.io.PrintStream(jvm.java.io.FileOutputStream(os.fspath(path), True), True)
        jvm.java.lang.System.setErr(stream)
    except Exception:
        log.debug("could not send the JVM's output to %s", path, exc_info=True)
