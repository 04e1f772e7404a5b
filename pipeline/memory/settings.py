"""What Spark gives each process, from its memory settings.

Sizes as the JVM and Spark write them (:func:`parse_size`, :func:`format_size`); the
concurrent tasks of a local master (:func:`local_slots`); what a session's properties give
the driver's JVM, the driver's Python and each Python worker (:class:`SparkMemory`,
:func:`spark_memory`); and the local-mode heap of ``spark.driver_memory: auto``
(:func:`local_heap`).

Local mode: the JVM heap is what the machine's usable memory leaves after the stage's Python
needs, at most :data:`LOCAL_HEAP_SHARE` of it, at least :data:`HEAP_MIN`, and never above
:data:`HEAP_MAX`. On a cluster the heaps are the user's (``spark.driver.memory``,
``spark.executor.memory``) and each Python worker gets ``spark.executor.pyspark.memory``
divided by ``spark.executor.cores``, or else its share of ``spark.executor.memoryOverhead``
beyond what the JVM itself needs off its heap.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from pipeline.memory.machine import GiB, Machine, MiB

__all__ = [
    "HEAP_MAX",
    "HEAP_MIN",
    "JVM_HEAP_FACTOR",
    "JVM_NONHEAP",
    "LOCAL_HEAP_SHARE",
    "OVERHEAD_MIN",
    "SparkMemory",
    "format_size",
    "jvm_resident",
    "local_heap",
    "local_slots",
    "parse_size",
    "spark_memory",
]

#: The local-mode heap never takes more than this share of the usable memory...
LOCAL_HEAP_SHARE = 0.5
#: ... nor less than this (Spark's own structures, task results, broadcasts)...
HEAP_MIN = 2 * GiB
#: ... nor more than this (the JVM's compressed object pointers stop at 32 GB).
HEAP_MAX = 31 * GiB
#: A JVM's resident memory beyond its heap (metaspace, code cache, threads, direct and Arrow
#: buffers), as a share of the heap plus a constant.
JVM_HEAP_FACTOR = 1.1
JVM_NONHEAP = 512 * MiB
#: Spark keeps this much of an executor's overhead for the JVM's own off-heap use.
OVERHEAD_MIN = 384 * MiB

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtp]?)(?:i?b)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 2**10, "m": MiB, "g": GiB, "t": 2**40, "p": 2**50}


def parse_size(text: str | int, *, default_unit: str = "") -> int:
    """Bytes of a JVM / Spark size (``"4g"``, ``"512m"``, ``"1.5gb"``; a bare number is in
    ``default_unit``, as Spark reads ``spark.executor.memory: 4096`` in MiB)."""
    match = _SIZE.match(str(text))
    if not match:
        raise ValueError(f"not a memory size: {text!r} (use e.g. 4g or 512m)")
    number, unit = match.groups()
    return int(float(number) * _UNITS[(unit or default_unit).lower()])


def format_size(n: int) -> str:
    """A JVM size that is at most ``n`` bytes: whole GiB from 1 GiB up (``"10g"``), else MiB."""
    return f"{n // GiB}g" if n >= GiB else f"{max(1, n // MiB)}m"


def jvm_resident(heap: int) -> int:
    """Resident memory of a JVM with ``heap`` bytes of heap (when the heap is used up)."""
    return int(JVM_HEAP_FACTOR * heap) + JVM_NONHEAP


def local_slots(master: str, cores: int) -> int:
    """Concurrent tasks of a local master (``local``: 1, ``local[N]``: N, ``local[*]``: cores)."""
    match = re.match(r"local(?:\[(\d+|\*)(?:,\s*\d+)?\])?$", master.strip())
    if not match or not master.startswith("local"):
        raise ValueError(f"not a local master: {master!r}")
    n = match.group(1)
    return 1 if n is None else (cores if n == "*" else int(n))


@dataclass(frozen=True)
class SparkMemory:
    """What Spark gives each kind of process.

    Attributes
    ----------
    local : bool
        Driver and executors in one JVM on this machine.
    slots : int
        Concurrent tasks per executor (local mode: of the one JVM), i.e. Python workers.
    driver_heap : int
        The driver JVM's heap (local mode: also the executors').
    worker_python : int
        Python memory of one worker.
    driver_python : int
        Python memory of the driver.
    """

    local: bool
    slots: int
    driver_heap: int
    worker_python: int
    driver_python: int

    @classmethod
    def local_mode(cls, machine: Machine, heap: int, slots: int) -> SparkMemory:
        """One machine: the driver's Python and the workers share what the JVM leaves; the
        split between them is the plan's (:func:`~pipeline.memory.plan.plan_train`), so both
        get all of it here."""
        left = max(0, machine.usable - jvm_resident(heap))
        return cls(True, slots, heap, left, left)

    @classmethod
    def cluster(cls, conf: Mapping[str, str], machine: Machine, driver_heap: int) -> SparkMemory:
        """From the executors' settings (``spark.executor.*``); the driver runs on this
        machine (client mode) beside its JVM."""
        slots = int(conf.get("spark.executor.cores", "1"))
        executor = parse_size(conf.get("spark.executor.memory", "1g"), default_unit="m")
        if "spark.executor.pyspark.memory" in conf:
            worker = parse_size(conf["spark.executor.pyspark.memory"], default_unit="m") // slots
        else:
            overhead = conf.get("spark.executor.memoryOverhead")
            total = (
                parse_size(overhead, default_unit="m")
                if overhead
                else max(OVERHEAD_MIN, int(0.1 * executor))
            )
            worker = max(0, total - OVERHEAD_MIN) // slots
        driver = max(0, machine.usable - jvm_resident(driver_heap))
        return cls(False, slots, driver_heap, worker, driver)


def local_heap(
    machine: Machine, python_need: int | None = None, jvm_need: int | None = None
) -> int:
    """The local-mode heap of ``spark.driver_memory: auto``: what ``python_need`` (the stage's
    driver and workers' Python together) leaves of the usable memory, at most
    :data:`LOCAL_HEAP_SHARE` of it, within [:data:`HEAP_MIN`, :data:`HEAP_MAX`]; never below
    ``jvm_need`` (the stage's JVM need: the Python side's plan then works with what is left,
    or stops). Without a known need, the share itself. Whole GiB."""
    cap = min(HEAP_MAX, int(LOCAL_HEAP_SHARE * machine.usable))
    if python_need is not None:
        room = (machine.usable - python_need - JVM_NONHEAP) / JVM_HEAP_FACTOR
        cap = min(cap, int(room))
    heap = max(HEAP_MIN, cap) // GiB * GiB
    if jvm_need is not None and heap < jvm_need:
        heap = min(HEAP_MAX, -(-jvm_need // GiB) * GiB)
    return heap


def spark_memory(conf: Mapping[str, str], parallelism: int, machine: Machine) -> SparkMemory:
    """What a running (or about to start) session gives each process, from its properties:
    ``spark.master``, ``spark.driver.memory`` (Spark's default 1g), and on a cluster the
    executors' (:meth:`SparkMemory.cluster`); ``parallelism`` is the local mode's slots."""
    heap = parse_size(conf.get("spark.driver.memory", "1g"), default_unit="m")
    if str(conf.get("spark.master", "local")).startswith("local"):
        return SparkMemory.local_mode(machine, heap, max(1, parallelism))
    return SparkMemory.cluster(conf, machine, heap)
