"""Command-line driver shared by every ``jobs/<stage>.py`` entry point.

Usage (``spark-submit`` or plain ``python``)::

    jobs/<stage>.py --conf conf/local.yaml [--conf more.yaml] [--set key.path=value ...]

or, with the package installed, the console script (:mod:`pipeline.cli`, the same options)::

    cr5 <stage> --conf local [--conf more.yaml] [--set key.path=value ...]

A ``--conf`` is a YAML file or the name of a profile shipped in the package (``local``,
``sample``, ...; :mod:`pipeline.config.profiles`); without one, the packaged ``local``.
``--help-config [SECTION]`` prints the configuration reference. The whole configuration is
loaded and checked (every key's type and range, cross-field rules) before a SparkSession starts.

Exit status: 0 on success, 2 on a user error (bad configuration or input) or a failure of
the environment (unreachable master, lost executors, memory or disk exhausted, changed
permissions, a damaged dataset; :mod:`pipeline.failures`), 1 on anything unexpected (a bug).
Each failure prints one paragraph saying what to fix; the full trace, Python's and Java's,
goes to the run's log file (:mod:`pipeline.runlog`, ``paths.logs``), named at its end.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import sys
import time
from collections.abc import Sequence

from pipeline import failures
from pipeline.config import (
    DEFAULT_PROFILE,
    Config,
    default_profiles,
    load_config,
    packaged_profiles,
    reference_markdown,
)
from pipeline.errors import PipelineError
from pipeline.runlog import RunLog, log_directory, start_run_log
from pipeline.stages import DEMO_CHAIN, get_stage

log = logging.getLogger("pipeline")


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    """Add the options every stage command takes (``jobs/<stage>.py``, ``cr5 <stage>``):
    ``--conf``, ``--set``, ``--log-level``, ``--help-config`` and ``--outputs-json``."""
    p.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="PROFILE",
        help="configuration profile: a YAML file, or the name of one shipped in the package "
        f"({', '.join(packaged_profiles()) or 'none in this installation'}: conf/*.yaml); "
        f"repeat to layer (later wins). Default: {DEFAULT_PROFILE}",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY.PATH=VALUE",
        dest="overrides",
        help="override one key, e.g. features.min_df=2",
    )
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    p.add_argument(
        "--help-config",
        nargs="?",
        const="",
        metavar="SECTION",
        help="print every configuration key (type, allowed values, default, meaning) of SECTION "
        "(default: all sections) and exit",
    )
    p.add_argument(
        "--outputs-json",
        metavar="FILE",
        help="after each stage, write what it produced (datasets' paths and rows, the model's "
        "version) to this local JSON file, read from the manifests (pipeline/outputs.py)",
    )


def parse_args(argv: Sequence[str] | None, stages: Sequence[str] | None) -> argparse.Namespace:
    """The options of ``jobs/<stage>.py`` (``stages``: that stage) or, with ``stages`` None,
    of ``jobs/chain.py`` (which adds ``--stages``)."""
    p = argparse.ArgumentParser(
        prog="jobs/" + (stages[0] if stages and len(stages) == 1 else "chain") + ".py",
        description="Run Cr5-on-Spark stage(s): " + (", ".join(stages) if stages else "any"),
    )
    add_run_arguments(p)
    if stages is None:
        p.add_argument(
            "--stages",
            help="comma-separated stages to run in order in one Spark session, "
            "or 'demo' for the README's chain",
        )
    return p.parse_args(argv)


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
        stream=sys.stderr,
    )
    # py4j chatters at INFO about every gateway call.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    # Python warnings go through logging: a line on the console, the details in the log file.
    logging.captureWarnings(True)


def run_stages(
    names: Sequence[str],
    cfg: Config,
    *,
    log_file: str | None = None,
    outputs_json: str | None = None,
    run_log: RunLog | None = None,
) -> dict[str, dict]:
    """Run stages in order in one SparkSession; return their reports by name.

    A session started here is stopped at the end, whatever happens, so that no Spark
    thread is left to print at exit; one that existed before (a test's) is kept. An
    exception leaves annotated with the stage that raised it and the stages that finished
    (:func:`pipeline.failures.annotate`). With ``outputs_json``, what each stage produced
    is written there after it (:mod:`pipeline.outputs`). While a stage runs, its Spark jobs'
    progress is logged every ``spark.progress_seconds`` (:mod:`pipeline.progress`). A
    ``run_log`` on another store is published through the session before it stops (with a
    failure's trace), since that store may be reachable only through the session's Hadoop
    configuration.
    """
    from pyspark import SparkContext

    from pipeline.memory import driver_memory
    from pipeline.outputs import stage_outputs, write_outputs
    from pipeline.preflight import check_remote_output_paths
    from pipeline.progress import stage_progress
    from pipeline.spark import get_spark

    fns = [(n, get_stage(n)) for n in names]
    created = SparkContext._active_spark_context is None
    spark = None
    reports: dict[str, dict] = {}
    current = None
    heap = None
    outputs: dict[str, dict] = {}
    try:
        heap = driver_memory(cfg, names)
        spark = get_spark(cfg.spark, driver_memory=heap, log_file=log_file)
        check_remote_output_paths(spark, cfg)
        for name, fn in fns:
            current = name
            t0 = time.perf_counter()
            log.info("stage %s: starting", name)
            spark.sparkContext.setJobGroup(name, f"cr5 stage {name}", interruptOnCancel=True)
            with stage_progress(spark, name, interval=cfg.spark.progress_seconds):
                report = fn(spark, cfg)
            report["wall_seconds"] = round(time.perf_counter() - t0, 2)
            log.info("stage %s: finished in %.1f s", name, report["wall_seconds"])
            reports[name] = report
            print(summarize(name, report), flush=True)
            if outputs_json:
                outputs[name] = stage_outputs(spark, cfg.paths, name)
                write_outputs(outputs_json, outputs)
    except BaseException as exc:
        failures.annotate(exc, stage=current, completed=list(reports), driver_memory=heap)
        failures.remember(exc)  # the Java messages, before the JVM is shut down below
        if run_log is not None and run_log.remote:
            run_log.write_trace(exc, failures.full_trace(exc))
            run_log.publish(spark)
        if created and spark is not None:
            _stop(spark)
            spark = None
            if current is not None:
                _sweep_leftovers(cfg, current)
        raise
    finally:
        if spark is not None and run_log is not None:
            run_log.publish(spark)
        if created and spark is not None:
            _stop(spark)
    return reports


def _sweep_leftovers(cfg: Config, stage: str) -> None:
    """After a failed stage's session is stopped (its Python workers with it), remove the
    temporaries of the stage's local datasets that no live writer owns.

    The writer deletes its temporary when the stage fails, but a task of the failed job that
    was still writing can outlive the job's abort by a moment and recreate a directory in
    it. The commit protocol's recovery (:func:`pipeline.io.publish.recover`) touches only
    ownerless leftovers and those of dead writers, never a live writer's. Stores other than
    the local disk are left to the next writer's recovery (no JVM here any more to reach
    them).
    """
    from urllib.parse import urlparse

    from pipeline.io.arrow_scan import local_path
    from pipeline.io.publish import LocalFS, recover
    from pipeline.io.schemas import written_by

    for name in written_by(stage):
        path = cfg.paths.dataset(name)
        if urlparse(path).scheme not in ("", "file"):
            continue
        local = os.path.abspath(local_path(path)).rstrip("/")
        if not os.path.isdir(os.path.dirname(local)):
            continue
        try:
            recover(LocalFS(), local, stale_seconds=cfg.paths.stale_write_seconds)
        except OSError:
            log.debug("sweeping leftovers of %s failed", local, exc_info=True)


#: How long a stage waits for the JVM it launched to exit once its session is stopped.
JVM_EXIT_SECONDS = 60.0


def _stop(spark) -> None:  # spark: pyspark.sql.SparkSession
    """Stop the session, then shut down the JVM this process launched and wait for it to
    exit (up to :data:`JVM_EXIT_SECONDS`); a JVM that is already gone is not an error here.

    Waiting gives the stage's memory back before its process ends: the next stage's memory
    plan reads what the machine has available when it starts, which a JVM still exiting
    would understate (bench/README.md, "2M documents: the README's stage commands").
    """
    from pyspark import SparkContext

    try:
        spark.stop()
    except Exception:
        log.debug("stopping the SparkSession failed", exc_info=True)
    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    if gateway is None or proc is None:
        return
    try:
        gateway.shutdown()
    except Exception:
        log.debug("shutting down the Py4J gateway failed", exc_info=True)
    try:
        if proc.stdin is not None:
            proc.stdin.close()  # the JVM's gateway server exits when its stdin closes
        proc.wait(timeout=JVM_EXIT_SECONDS)
    except Exception:
        log.warning("the Spark JVM (pid %s) did not exit within %.0f s", proc.pid,
                    JVM_EXIT_SECONDS)  # fmt: skip
    # a later session of this process launches a JVM of its own
    SparkContext._gateway = None
    SparkContext._jvm = None


def run_settings(cfg: Config) -> dict[str, str]:
    """The settings a failure paragraph quotes (:func:`pipeline.failures.describe`)."""
    from pipeline.spark import launched_by_spark_submit

    settings = {
        "spark.master": cfg.spark.master,
        "spark.driver_memory": cfg.spark.driver_memory,
        **{str(k): str(v) for k, v in cfg.spark.conf.items()},
    }
    if launched_by_spark_submit():
        settings.update({"submitted": "true", "spark.master": "spark-submit's --master"})
    return settings


def summarize(name: str, report: dict) -> str:
    """A few readable lines per stage; the full report is in the dataset's manifest."""
    head = f"== {name}: {report.get('wall_seconds')} s -> {report.get('path', '')}"
    lines = [head]
    per_lang = report.get("per_language") or {
        lang: {"documents": n} for lang, n in (report.get("documents_per_language") or {}).items()
    }
    if name == "vocabulary":
        per_lang = {
            lang: {
                "training documents": report["training_documents"].get(lang, 0),
                "vocabulary": size,
            }
            for lang, size in report.get("vocabulary_size", {}).items()
        }
    if per_lang:
        cols = sorted({c for v in per_lang.values() for c in v})
        lines.append("   lang " + "".join(f"{c:>20}" for c in cols))
        for lang, v in sorted(per_lang.items()):
            lines.append(f"   {lang:<4} " + "".join(f"{v.get(c, ''):>20}" for c in cols))
    keys = (
        "documents",
        "concepts",
        "nnz",
        "dropped",
        "languages",
        "setup",
        "r",
        "lam",
        "eigenvalues",
        "eigensolver_iterations",
        "fit_seconds",
        "passes_over_x",
    )
    extra = {k: report[k] for k in keys if k in report}
    if extra:
        lines.append("   " + json.dumps(extra, sort_keys=True, default=str))
    for warning in report.get("warnings") or ():
        lines.append(f"   WARNING: {warning}")
    if name == "evaluate" and report.get("table"):
        lines.append(report["table"])
        for label, key in (("report", "report_md"), ("data", "report_json"), ("plot", "plot")):
            if report.get(key):
                lines.append(f"   {label}: {report[key]}")
    return "\n".join(lines)


def main(stages: Sequence[str] | None = None, argv: Sequence[str] | None = None) -> int:
    """The job scripts' entry point: run ``stages`` (None: those of ``--stages``) with the
    options in ``argv``; return the exit status."""
    return run_command(parse_args(argv, stages), stages)


def run_command(
    args: argparse.Namespace, stages: Sequence[str] | None, *, prog: str | None = None
) -> int:
    """Run parsed stage options (:func:`add_run_arguments`): ``stages`` in order (None:
    ``args.stages``, comma-separated names or ``demo``); return the exit status.

    ``prog`` is the console command that parsed them (``cr5``, ``python -m pipeline``), which
    a failure's advice repeats (``cr5 run <stage> ...``); None: a job script of the checkout.
    """
    if args.help_config is not None:
        try:
            print(reference_markdown([args.help_config] if args.help_config else None))
        except PipelineError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        return 0
    if stages is None and not args.stages:
        print("error: --stages is required (e.g. --stages demo)", file=sys.stderr)
        return 2
    configure_logging(args.log_level)
    if stages:
        names = list(stages)
    elif args.stages.strip() == "demo":
        names = list(DEMO_CHAIN)
    else:
        # word-vectors and word_vectors alike (the console script's spelling of its commands)
        names = [s.strip().replace("-", "_") for s in args.stages.split(",") if s.strip()]
    run_log: RunLog | None = None
    settings: dict[str, str] = {}
    try:
        profiles = args.conf or default_profiles()
        script = f"jobs/{names[0] if stages and len(names) == 1 else 'chain'}.py"
        failures.set_invocation(
            prog or script,
            profiles,
            args.overrides,
            rerun=[*shlex.split(prog), "run"] if prog else None,
        )
        cfg = load_config(profiles, args.overrides)
        settings = run_settings(cfg)
        if cfg.spark.driver_malloc_tuning:
            from pipeline.allocator import tune_malloc

            tune_malloc()
        for name in names:
            get_stage(name)  # fail on a typo before starting Spark
        from pipeline.io.integrity import configure as configure_integrity
        from pipeline.preflight import run_preflight
        from pipeline.spark import launched_by_spark_submit

        configure_integrity(checksum_max_bytes=cfg.paths.checksum_max_bytes)
        run_preflight(cfg, names, submitted=launched_by_spark_submit())
        run_log = start_run_log(log_directory(cfg.paths.root, cfg.paths.logs), names)
        if run_log is not None:
            log.info("log file: %s", run_log.location)
        run_stages(
            names,
            cfg,
            log_file=str(run_log.path) if run_log else None,
            outputs_json=args.outputs_json,
            run_log=run_log,
        )
    except (Exception, KeyboardInterrupt) as exc:
        return report_failure(exc, run_log, settings)
    finally:
        if run_log is not None:
            run_log.close()
    return 0


def report_failure(exc: BaseException, run_log: RunLog | None, settings: dict[str, str]) -> int:
    """Print the one paragraph of ``exc`` on the console, write its full trace to the log
    file (or, for a bug before the log file exists, to a file in the temporary directory),
    and return the exit status."""
    context = failures.context_of(exc)
    heap = context.get("driver_memory")
    if heap and settings.get("spark.driver_memory") == "auto" and "submitted" not in settings:
        settings = {**settings, "spark.driver_memory": f"auto, which gave {heap}"}
    where = run_log.location if run_log is not None else None
    if where is None and not isinstance(exc, PipelineError):
        where = failures.fallback_log(failures.full_trace(exc))
    failure = failures.describe(
        exc,
        log_file=str(where) if where else None,
        settings=settings,
        completed=context.get("completed", ()),
    )
    if run_log is not None:
        log.debug("failure: %s", failure.paragraph)
        run_log.write_trace(exc, failures.full_trace(exc))
    failures.print_paragraph(failure)
    return failure.exit_code
