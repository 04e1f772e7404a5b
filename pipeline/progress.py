"""Progress of a stage's Spark jobs: tasks done, rate and ETA, polled from the driver.

A long stage (``embed``, ``index``, ``ingest_wikipedia`` at Wikipedia scale) runs for hours
between its "starting" and "finished" lines, and Spark's own console bar is off when a run
log is written (:mod:`pipeline.spark`). :func:`stage_progress` runs a daemon thread beside the
stage that reads the counters of Spark's ``StatusTracker`` (no Spark job of its own, no work
per document) and, every ``interval`` seconds while a Spark job is active, logs one line::

    embed: job 12 (embed: read, embed and write 4 task(s)): 1,234/5,000 tasks, 8 running,
    41.2 tasks/s, ETA 1m31s, elapsed 2m10s

- tasks done and total are summed over the active jobs' stages that have started: a stage
  that has not may never run (Spark skips a stage whose shuffle output exists already;
  under adaptive execution a query's last job lists the earlier stages, which ran as jobs
  of their own), so its tasks count only while none of its job's stages has started; the
  total grows when a later stage starts;
- the rate is the tasks finished over the last three intervals (tasks finish in waves, one
  per core), or, when none finished in them (long tasks), since the active jobs began; the
  ETA is the tasks left over that rate, "ETA unknown" until a task has finished;
- elapsed is the time since the pipeline stage started.

While no Spark job is active (the driver computing on its own, e.g. the eigensolver, which
logs its own ETA) nothing is logged. When standard error is a terminal, a one-line bar is
redrawn there every ``bar_seconds`` as well; it never goes to the log file. A failed poll is
logged at DEBUG and ignored: progress never fails a stage. ``spark.progress_seconds`` sets
the interval (0: off); the runner (:mod:`pipeline.runner`) wraps every stage in it.
"""

from __future__ import annotations

import contextlib
import logging
import math
import shutil
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pipeline.linalg.progress import format_seconds

__all__ = [
    "JobProgress",
    "ProgressReporter",
    "format_eta",
    "format_rate",
    "stage_progress",
]

log = logging.getLogger(__name__)

#: Longest job description quoted in a line.
DESCRIPTION_CHARS = 80

#: The rate is measured over the last this many intervals (tasks finish in waves).
RATE_WINDOW_INTERVALS = 3


@dataclass(frozen=True)
class JobProgress:
    """One active Spark job's counters, summed over its stages that have started."""

    job_id: int
    done: int
    total: int
    running: int
    failed: int
    waiting_stages: int
    description: str | None = None


def format_rate(rate: float | None) -> str:
    """``"41.2 tasks/s"``, ``"0.0833 tasks/s"``, ``"1,235 tasks/s"`` or ``"rate unknown"``."""
    if rate is None or not math.isfinite(rate) or rate <= 0:
        return "rate unknown"
    return f"{rate:,.0f} tasks/s" if rate >= 100 else f"{rate:.3g} tasks/s"


def format_eta(done: int, total: int, rate: float | None, *, waiting: int = 0) -> str:
    """``"ETA 1m31s"``: the ``total - done`` tasks left at ``rate`` tasks/s
    (:func:`pipeline.linalg.progress.format_seconds`' formats). ``"ETA unknown"`` without a
    rate, or when nothing is known to be left while ``waiting`` stages have not started."""
    if total <= 0 or (done >= total and waiting):
        return "ETA unknown"
    if done >= total:
        return "ETA 0.0s"
    if rate is None or not math.isfinite(rate) or rate <= 0:
        return "ETA unknown"
    return "ETA " + format_seconds((total - done) / rate)


def _describe_jobs(jobs: Sequence[JobProgress]) -> str:
    ids = ", ".join(str(j.job_id) for j in jobs)
    descriptions = "; ".join(
        d if len(d) <= DESCRIPTION_CHARS else d[: DESCRIPTION_CHARS - 1] + "…"
        for d in dict.fromkeys(j.description for j in jobs if j.description)
    )
    head = ("job " if len(jobs) == 1 else "jobs ") + ids
    return f"{head} ({descriptions})" if descriptions else head


def _extras(jobs: Sequence[JobProgress]) -> str:
    running = sum(j.running for j in jobs)
    failed = sum(j.failed for j in jobs)
    parts = [f"{running} running"]
    if failed:
        parts.append(f"{failed} failed")
    return ", ".join(parts)


class ProgressReporter:
    """The poller behind :func:`stage_progress` (``clock`` is for tests).

    Attributes
    ----------
    lines : int
        Progress lines logged so far.
    """

    def __init__(
        self,
        sc: Any,  # pyspark.SparkContext
        stage: str,
        *,
        interval: float = 30.0,
        bar: bool | None = None,
        bar_seconds: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.sc, self.stage, self.interval = sc, stage, float(interval)
        self.bar = sys.stderr.isatty() if bar is None else bar
        self.bar_seconds = bar_seconds
        self.window = RATE_WINDOW_INTERVALS * self.interval
        self._clock = clock
        self.t0 = clock()
        self.lines = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._tracker: Any = None
        self._last_done: dict[int, int] = {}
        self._began: dict[int, float] = {}  # job id -> when first seen active (or before)
        self._described: dict[int, str | None] = {}
        self._describe_ok = True
        self._finished = 0  # tasks finished by this stage's jobs so far (monotone)
        self._samples: deque[tuple[float, int]] = deque([(self.t0, 0)])  # (time, _finished)
        self._last_sample_t = self.t0
        self._bar_shown = False
        self._bar_lock = threading.Lock()
        self._filtered: list[logging.Handler] = []

    # ------------------------------------------------------------------ polling

    def _stage_counts(self, tracker: Any, job_id: int, active_stages: set[int]) -> JobProgress:
        info = tracker.getJobInfo(job_id)
        done = total = running = failed = waiting = waiting_tasks = 0
        for sid in list(info.stageIds) if info is not None else ():
            st = tracker.getStageInfo(int(sid))
            if st is None:
                continue
            started = int(sid) in active_stages or (
                st.numCompletedTasks or st.numActiveTasks or st.numFailedTasks
            )
            if not started:
                waiting += 1
                waiting_tasks += st.numTasks
                continue
            done += st.numCompletedTasks
            total += st.numTasks
            running += st.numActiveTasks
            failed += st.numFailedTasks
        if not total:  # none has started yet: count them all (a skipped one shows it)
            total = waiting_tasks
        return JobProgress(job_id, done, total, running, failed, waiting)

    def _description(self, job_id: int) -> str | None:
        """The job's description (``setJobDescription``), else its group; read once per job
        from the driver's status store (an internal API: when it fails, never again)."""
        if job_id in self._described or not self._describe_ok:
            return self._described.get(job_id)
        text = None
        try:
            data = self.sc._jsc.sc().statusStore().job(job_id)
            for option in (data.description(), data.jobGroup()):
                if option.isDefined():
                    text = str(option.get())
                    break
        except Exception:
            log.debug("job descriptions are not readable; leaving them out", exc_info=True)
            self._describe_ok = False
        self._described[job_id] = text
        return text

    def poll(self) -> list[JobProgress]:
        """The active jobs' counters now; updates the rate's tally."""
        if self._tracker is None:
            self._tracker = self.sc.statusTracker()
        tracker = self._tracker
        now = self._clock()
        active_stages = set(tracker.getActiveStageIds())
        ids = list(tracker.getActiveJobsIds())
        jobs = [
            replace(self._stage_counts(tracker, j, active_stages), description=self._description(j))
            for j in ids
        ]
        # jobs that ended since the last poll: count their last tasks (still in the tracker)
        for job_id in set(self._last_done) - set(ids):
            try:
                final = self._stage_counts(tracker, job_id, active_stages).done
            except Exception:
                final = self._last_done[job_id]
            self._finished += max(0, final - self._last_done.pop(job_id))
            self._began.pop(job_id, None)
            self._described.pop(job_id, None)
        for j in jobs:
            self._finished += max(0, j.done - self._last_done.get(j.job_id, 0))
            self._last_done[j.job_id] = j.done
            # it started after the previous poll: that time bounds its age from above
            self._began.setdefault(j.job_id, self._last_sample_t)
        self._last_sample_t = now
        self._samples.append((now, self._finished))
        while len(self._samples) > 2 and self._samples[1][0] <= now - self.window:
            self._samples.popleft()
        return jobs

    def rate(self, jobs: Sequence[JobProgress]) -> float | None:
        """Tasks/s over the last :data:`RATE_WINDOW_INTERVALS` intervals, else (none finished
        in them) since the active jobs began; None while no task has finished."""
        now, finished = self._samples[-1]
        then, before = self._samples[0]
        if now > then and finished > before:
            return (finished - before) / (now - then)
        began = min((self._began[j.job_id] for j in jobs), default=now)
        done = sum(j.done for j in jobs)
        return done / (now - began) if done and now > began else None

    # ------------------------------------------------------------------ output

    def log_line(self, jobs: Sequence[JobProgress]) -> None:
        done = sum(j.done for j in jobs)
        total = sum(j.total for j in jobs)
        rate = self.rate(jobs)
        log.info(
            "%s: %s: %s/%s tasks, %s, %s, %s, elapsed %s",
            self.stage,
            _describe_jobs(jobs),
            f"{done:,}",
            f"{total:,}",
            _extras(jobs),
            format_rate(rate),
            format_eta(done, total, rate, waiting=sum(j.waiting_stages for j in jobs)),
            format_seconds(self._clock() - self.t0),
        )
        self.lines += 1

    def bar_text(self, jobs: Sequence[JobProgress], width: int) -> str:
        """``embed job 12 (…) [####......] 1,234/5,000 tasks 41.2 tasks/s ETA 1m31s
        elapsed 2m10s``, within ``width - 1`` columns (the description gives way first)."""
        done = sum(j.done for j in jobs)
        total = sum(j.total for j in jobs)
        rate = self.rate(jobs)
        eta = format_eta(done, total, rate, waiting=sum(j.waiting_stages for j in jobs))
        tail = (
            f" {done:,}/{total:,} tasks {format_rate(rate)} {eta}"
            f" elapsed {format_seconds(self._clock() - self.t0)}"
        )
        cells = 20
        head = f"{self.stage} {_describe_jobs(jobs)} "
        room = width - 1 - len(tail) - cells - 2
        if len(head) > room:
            head = head[: max(0, room - 2)] + "… " if room > 2 else ""
        full = round(cells * done / total) if total else 0
        return (head + "[" + "#" * full + "." * (cells - full) + "]" + tail)[: max(1, width - 1)]

    def _write_bar(self, text: str) -> None:
        with self._bar_lock:
            if not text and not self._bar_shown:
                return
            with contextlib.suppress(Exception):
                sys.stderr.write("\r" + text + "\x1b[K")
                sys.stderr.flush()
            self._bar_shown = bool(text)

    def _clear_bar(self, record: logging.LogRecord | None = None) -> bool:
        """Wipe the bar before a console log record prints (a :mod:`logging` filter)."""
        self._write_bar("")
        return True

    def _draw(self, jobs: Sequence[JobProgress]) -> None:
        if not jobs:
            self._write_bar("")
            return
        width = shutil.get_terminal_size((100, 24)).columns
        self._write_bar(self.bar_text(jobs, width))

    # ------------------------------------------------------------------ thread

    def _run(self) -> None:
        next_log = self.t0 + self.interval
        while True:
            wait = next_log - self._clock()
            if self.bar:
                wait = min(wait, self.bar_seconds)
            if self._stop.wait(max(0.0, wait)):
                return
            now = self._clock()
            due = now >= next_log - 1e-3
            while next_log <= now + 1e-3:
                next_log += self.interval
            try:
                jobs = self.poll()
                if due and jobs and log.isEnabledFor(logging.INFO):
                    self.log_line(jobs)
                if self.bar:
                    self._draw(jobs)
            except Exception:
                log.debug("polling Spark's job progress failed", exc_info=True)

    def start(self) -> ProgressReporter:
        if self.bar:
            # a console record wipes the bar first, so it does not print after the bar's text
            for h in logging.getLogger().handlers:
                if isinstance(h, logging.StreamHandler) and getattr(h, "stream", None) in (
                    sys.stderr,
                    sys.__stderr__,
                ):
                    h.addFilter(self._clear_bar)
                    self._filtered.append(h)
        self._thread = threading.Thread(
            target=self._run, name=f"cr5-progress-{self.stage}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.debug("the progress poller of %s did not stop within %.0f s (a Spark "
                          "call hangs); left behind as a daemon", self.stage, timeout)  # fmt: skip
        for h in self._filtered:
            h.removeFilter(self._clear_bar)
        self._filtered.clear()
        self._write_bar("")


@contextlib.contextmanager
def stage_progress(
    spark: Any,  # pyspark.sql.SparkSession
    stage: str,
    *,
    interval: float = 30.0,
    bar: bool | None = None,
    bar_seconds: float = 1.0,
) -> Iterator[ProgressReporter | None]:
    """Report the progress of ``stage``'s Spark jobs while the block runs (module docstring).

    Yields the :class:`ProgressReporter`, or None when there is nothing to do: ``interval``
    is 0 (progress off), or the session is a Spark Connect one (no SparkContext here). The
    poller is stopped and joined when the block ends, however it ends; nothing it does
    raises into the block.
    """
    from pipeline.spark import is_connect

    reporter = None
    if interval and interval > 0 and not is_connect(spark):
        try:
            reporter = ProgressReporter(
                spark.sparkContext, stage, interval=interval, bar=bar, bar_seconds=bar_seconds
            ).start()
        except Exception:
            log.debug("progress reporting of %s did not start", stage, exc_info=True)
            reporter = None
    try:
        yield reporter
    finally:
        if reporter is not None:
            try:
                reporter.stop()
            except Exception:
                log.debug("stopping the progress reporting of %s failed", stage, exc_info=True)
