"""Progress of a stage's Spark jobs (pipeline/progress.py): one line per interval while a job
runs, with tasks done/total, rate and ETA; nothing while none runs; through the runner."""

from __future__ import annotations

import itertools
import logging
import re
import threading
import time
from pathlib import Path

import pytest

from pipeline.progress import format_eta, format_rate, stage_progress

REPO = Path(__file__).resolve().parent.parent

LINE = re.compile(
    r"^(?P<stage>\S+): jobs? (?P<jobs>[\d, ]+)(?: \((?P<desc>.*)\))?: "
    r"(?P<done>[\d,]+)/(?P<total>[\d,]+) tasks, .*?"
    r"(?P<rate>rate unknown|\S+ tasks/s), (?P<eta>ETA (?:unknown|\S+)), elapsed \S+$"
)


def _lines(caplog) -> list[tuple[float, re.Match]]:
    out = []
    for r in caplog.records:
        if r.name == "pipeline.progress" and r.levelno == logging.INFO:
            m = LINE.match(r.getMessage())
            assert m, r.getMessage()
            out.append((r.created, m))
    return out


def test_rate_and_eta_formatting():
    assert format_rate(None) == "rate unknown"
    assert format_rate(0.0) == "rate unknown"
    assert format_rate(float("nan")) == "rate unknown"
    assert format_rate(41.234) == "41.2 tasks/s"
    assert format_rate(1 / 12) == "0.0833 tasks/s"
    assert format_rate(12345.6) == "12,346 tasks/s"
    assert format_rate(100.4) == "100 tasks/s"
    assert format_eta(0, 8, None) == "ETA unknown"  # no rate yet
    assert format_eta(2, 8, 0.5) == "ETA 12.0s"
    assert format_eta(100, 5000, 41.2) == "ETA 1m59s"
    assert format_eta(0, 100_000, 10.0) == "ETA 2h46m"
    assert format_eta(8, 8, 1.0) == "ETA 0.0s"
    assert format_eta(8, 8, 1.0, waiting=1) == "ETA unknown"  # a later stage will start
    assert format_eta(0, 0, None) == "ETA unknown"


def test_the_terminal_bar_keeps_its_numbers_within_the_width():
    from pipeline.progress import JobProgress, ProgressReporter

    now = [100.0]
    reporter = ProgressReporter(None, "embed", interval=30, bar=False, clock=lambda: now[0])
    job = JobProgress(12, 5, 80, 2, 0, 0, "embed: read, embed and write 4 task(s)" + "!" * 60)
    reporter._samples.append((110.0, 5))
    now[0] = 110.0
    for width in (200, 100, 80):
        text = reporter.bar_text([job], width)
        assert len(text) <= width - 1
        assert text.endswith("] 5/80 tasks 0.5 tasks/s ETA 2m30s elapsed 10.0s"), text
        assert text.startswith("embed ")


def _slow(x):
    import time

    time.sleep(1.5)
    return x


def test_a_line_per_interval_while_a_job_runs_and_none_without(spark, caplog):
    caplog.set_level(logging.INFO, logger="pipeline.progress")
    sc = spark.sparkContext
    interval, tolerance = 0.5, 0.5
    counted = []

    def job():
        sc.setJobDescription("progress test: 8 slow tasks")
        try:
            # 8 tasks of 1.5 s on local[2]: four waves, about 6 s
            counted.append(sc.parallelize(range(8), 8).map(_slow).count())
        finally:
            sc.setJobDescription(None)

    with stage_progress(spark, "teststage", interval=interval, bar=False) as reporter:
        time.sleep(2 * interval + 0.2)  # no Spark job: nothing
        assert _lines(caplog) == []
        worker = threading.Thread(target=job)
        worker.start()
        while not sc.statusTracker().getActiveJobsIds() and worker.is_alive():
            time.sleep(0.01)
        t_active = time.time()
        worker.join()
        t_end = time.time()
        time.sleep(2 * interval + 0.2)  # the job is over: nothing more
    assert counted == [8] and t_end - t_active > 4
    lines = _lines(caplog)
    assert reporter is not None and reporter.lines == len(lines)
    times = [t for t, _ in lines]
    assert times[0] - t_active <= interval + tolerance
    assert t_end - times[-1] <= interval + tolerance
    assert times[-1] <= t_end + tolerance
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert max(gaps) <= interval + tolerance, gaps
    done = [int(m["done"]) for _, m in lines]
    assert done == sorted(done) and done[0] < done[-1], done
    for _, m in lines:
        assert m["stage"] == "teststage"
        assert m["desc"] == "progress test: 8 slow tasks"
        assert m["total"] == "8"
        assert len(m["jobs"].split(",")) == 1
    # once a task has finished there is a rate and an ETA
    timed = [m for _, m in lines if m["rate"] != "rate unknown"]
    assert timed and all(m["eta"] != "ETA unknown" for m in timed if m["done"] != "8")
    assert [m for _, m in lines if int(m["done"]) < 8][-1]["eta"] != "ETA unknown"


class _Connect:
    """Stands for a Spark Connect session (pipeline.spark.is_connect reads the module)."""

    __module__ = "pyspark.sql.connect.session"

    @property
    def sparkContext(self):
        raise AssertionError("a Spark Connect session has no SparkContext")


class _BrokenContext:
    def statusTracker(self):
        raise RuntimeError("the JVM is gone")


class _Session:
    sparkContext = _BrokenContext()


def test_off_on_connect_and_a_failing_poll_never_reaches_the_stage(caplog):
    with stage_progress(_Session(), "s", interval=0) as reporter:
        assert reporter is None
    with stage_progress(_Connect(), "s", interval=0.1) as reporter:
        assert reporter is None
    caplog.set_level(logging.DEBUG, logger="pipeline.progress")
    with stage_progress(_Session(), "s", interval=0.05, bar=False) as reporter:
        time.sleep(0.3)
    assert reporter is not None and reporter.lines == 0
    assert not reporter._thread.is_alive()  # joined on exit
    failed = [r for r in caplog.records if "polling Spark's job progress failed" in r.message]
    assert failed and all(r.levelno == logging.DEBUG for r in failed)


@pytest.mark.slow
def test_a_real_stage_through_the_runner_logs_progress(spark, tmp_path, caplog, capsys):
    """ingest on the bundled sample, as jobs/ingest.py runs it: its run log and the console's
    log records hold progress lines naming the stage, with a rate and an ETA."""
    from pipeline.runner import main

    caplog.set_level(logging.INFO, logger="pipeline.progress")
    argv = [
        "--conf", str(REPO / "conf" / "local.yaml"),
        "--set", f"paths.root={tmp_path / 'out'}",
        "--set", "spark.shuffle_partitions=2",
        "--set", "spark.progress_seconds=0.1",
    ]  # fmt: skip
    assert main(["ingest"], argv) == 0
    lines = _lines(caplog)
    assert lines, "no progress line"
    assert all(m["stage"] == "ingest" for _, m in lines)
    assert all(m["desc"] for _, m in lines)  # the runner's job group, or the stage's own
    assert any(m["rate"] != "rate unknown" and "ETA" in m["eta"] for _, m in lines)
    [log_file] = (tmp_path / "out" / "logs").glob("ingest-*.log")
    text = log_file.read_text(encoding="utf-8")
    assert re.search(r"INFO pipeline\.progress: ingest: jobs? \d+.* tasks, .*ETA ", text)
