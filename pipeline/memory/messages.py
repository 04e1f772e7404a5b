"""What the memory plan tells the user: :class:`MemoryPlanError` (exit 2) with one paragraph
naming the need, the memory available and the settings that would fit, the warning of a
language left unfused, and the sizes in those texts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pipeline.errors import ConfigError
from pipeline.memory.machine import GiB
from pipeline.memory.settings import SparkMemory, format_size

if TYPE_CHECKING:
    from pipeline.config import Config, TrainConfig

__all__ = [
    "MemoryPlanError",
    "describe_fit",
    "driver_paragraph",
    "embed_paragraph",
    "gb",
    "largest_parts",
    "unfused_paragraph",
    "worker_paragraph",
]


class MemoryPlanError(ConfigError):
    """A stage cannot fit the memory it is given; the message names the settings that fit."""


def gb(n: float) -> str:
    """``n`` bytes in GB with one decimal (GiB)."""
    return f"{n / GiB:.1f} GB"


def largest_parts(parts: Mapping[str, int]) -> str:
    """The three largest parts of an estimate, with their sizes."""
    top = sorted(parts.items(), key=lambda kv: -kv[1])[:3]
    return ", ".join(f"{name} {gb(size)}" for name, size in top)


def describe_fit(t: TrainConfig, docs: int, nnz: int, languages: int, concepts: int) -> str:
    """The fit a message is about: method, backend and sizes."""
    return (
        f"train ({t.method}, {t.backend} backend) on {docs:,} documents "
        f"({nnz / 1e6:.1f}M nonzeros, {languages} languages, K = {concepts:,}, "
        f"r = {t.r})"
    )


def driver_paragraph(
    fit: str,
    driver: Mapping[str, int],
    available: int,
    workers: int | None,
    t: TrainConfig,
    mem: SparkMemory,
) -> str:
    """The driver's Python of ``fit`` (:func:`describe_fit`) needs ``driver`` (by part),
    more than ``available``, beside the JVM heap and, in local mode, ``workers`` Python
    workers (None: none)."""
    need = sum(driver.values())
    fixes = []
    if t.backend == "local" and driver.get("X", 0) >= need - available:
        fixes.append("--set train.backend=spark (X then stays on the executors)")
    spillable = driver.get("basis", 0) + driver.get("images", 0)
    if t.spill_dir is None and spillable > 0:  # the eigensolver's formula has these parts
        fixes.append(
            "--set train.spill_dir=<a local directory with "
            f"{gb(spillable)} free> (the eigensolver's basis and images then live in files "
            "paged in row chunk by row chunk)"
        )
    if t.r > 100:
        fixes.append(f"a smaller train.r (now {t.r})")
    fixes.append("a machine (or a client-mode driver) with more memory")
    where = "this machine leaves it" if mem.local else "the driver's host leaves it"
    return (
        f"{fit} needs about {gb(need)} in the driver's Python "
        f"({largest_parts(driver)}), but {where} {gb(max(0, available))} "
        f"beside a {format_size(mem.driver_heap)} JVM heap"
        + (f" and {workers} Python workers" if workers is not None else "")
        + ". Fix: "
        + "; or ".join(fixes)
        + "."
    )


def worker_paragraph(
    fit: str, worker: Mapping[str, int], available: int, t: TrainConfig, mem: SparkMemory
) -> str:
    """A Python worker of the train stage's ``fit`` needs ``worker`` (by part), more than
    ``available``."""
    where = (
        "on this machine beside the driver's Python and the JVM"
        if mem.local
        else "(spark.executor.pyspark.memory / spark.executor.cores, or else the share of "
        "spark.executor.memoryOverhead)"
    )
    if t.solve_in_task_max_nnz is not None or t.resident_memory_mb is not None:
        settings = (
            "lower train.solve_in_task_max_nnz or train.resident_memory_mb, or leave both "
            "unset (the plan then chooses them)"
        )
    else:
        settings = "--set train.solve_in_task_max_nnz=0 (no fused language)"
    return (
        f"{fit}: each Python worker needs about {gb(sum(worker.values()))} "
        f"({largest_parts(worker)}) but gets {gb(available)} {where}. "
        f"Fix: {settings}; or give the workers more memory (on a cluster "
        f"spark.executor.pyspark.memory), or run fewer tasks at once (spark.master=local[1])."
    )


def unfused_paragraph(
    unfused: Sequence[str],
    largest_nnz: int,
    need: Mapping[str, int],
    available: int,
    driver: Mapping[str, int],
    t: TrainConfig,
) -> str:
    """The languages ``unfused`` (largest first, of ``largest_nnz`` nonzeros) will run one
    Spark job per CG iteration: a worker needs ``need`` to read the largest of them and gets
    ``available`` beside the driver's ``driver``."""
    largest = unfused[0]
    return (
        f"{', '.join(unfused)} will run one Spark job per CG iteration (its CG on the "
        f"driver), many times slower than a fused solve: a Python worker needs about "
        f"{gb(sum(need.values()))} to read {largest} ({largest_nnz / 1e6:.1f}M "
        f"nonzeros) and gets {gb(available)} beside the driver's "
        f"~{gb(sum(driver.values()))} ({largest_parts(driver)}). To fuse it: "
        f"give the workers more memory (on a cluster spark.executor.pyspark.memory), run "
        f"fewer tasks at once (spark.master=local[1])"
        + (
            ", or leave train.max_basis unset (the plan then narrows the driver's "
            "Lanczos basis when that fuses more)."
            if t.max_basis is not None
            else "."
        )
    )


def embed_paragraph(
    meta: Mapping[str, Any],
    languages: Sequence[str],
    need: Mapping[str, int],
    available: int,
    cfg: Config,
    mem: SparkMemory,
) -> str:
    """A Python worker of the embed stage needs ``need``, more than ``available``."""
    where = (
        f"on this machine, beside a {format_size(mem.driver_heap)} JVM heap, shared by "
        f"{mem.slots} workers"
        if mem.local
        else "(spark.executor.pyspark.memory / spark.executor.cores)"
    )
    fixes = [
        "embed fewer languages per run (--set embed.languages=[...], one run per group)",
        f"a smaller embed.batch_rows (now {cfg.embed.batch_rows})",
    ]
    if mem.local:
        fixes.append("fewer tasks at once (spark.master=local[1])")
        if cfg.spark.driver_memory != "auto":
            fixes.append("spark.driver_memory: auto (a heap sized for the workers)")
    else:
        fixes.append("more spark.executor.pyspark.memory")
    return (
        f"embed with the {len(languages)}-language model of r = {meta.get('r')}: each "
        f"Python worker holds every language's Φ it meets and a batch, about "
        f"{gb(sum(need.values()))} ({largest_parts(need)}), but gets "
        f"{gb(max(0, available))} {where}. Fix: " + "; or ".join(fixes) + "."
    )
