"""Memory planning: what a stage needs, what Spark gives each process, and settings that fit.

A run's memory lives in three kinds of process, and a stage fails when any of them runs out:

- the **driver's Python** (train: the eigensolver's basis, images and Φ; the local backend's X);
- the **JVM heap**: in local mode one JVM runs the driver and the executors, so it also holds
  the executors' cached blocks, broadcasts and task results; on a cluster the driver's JVM
  and one per executor;
- the **Python workers**, one per running task (task slot): the train stage's fused languages
  (X_l resident between jobs, :mod:`pipeline.backends.spark_resident`) and CG vectors; the
  embed stage's Φ_l and a batch.

Before any Spark work, :func:`plan_train` estimates each from the tfidf manifest (the
formulas of docs/performance.md, "Memory"), chooses the settings the user left to it
(``train.solve_in_task_max_nnz``, ``train.resident_memory_mb``, and a narrower
``train.max_basis`` when the default basis would leave a language unfused) so that the
processes fit what Spark gives them, and otherwise raises :class:`MemoryPlanError` (exit 2) with one
paragraph naming the need, the memory available and the settings that would fit.

Local mode, ``spark.driver_memory: auto`` (:func:`local_heap`): the JVM heap is what the
machine's usable memory (:data:`USABLE_FRACTION` of physical memory or of the cgroup limit,
or what the kernel reports available if that is less) leaves after the stage's Python
needs, at most :data:`LOCAL_HEAP_SHARE` of it, at least :data:`HEAP_MIN`, and never above
:data:`HEAP_MAX`. On a cluster the heaps are the user's
(``spark.driver.memory``, ``spark.executor.memory``) and each Python worker gets
``spark.executor.pyspark.memory`` divided by ``spark.executor.cores``, or else its share of
``spark.executor.memoryOverhead`` beyond what the JVM itself needs off its heap.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pipeline.config import Config, TrainConfig
from pipeline.errors import ConfigError
from pipeline.methods.registry import find_method, get_method

__all__ = [
    "HEAP_MAX",
    "HEAP_MIN",
    "LOCAL_HEAP_SHARE",
    "USABLE_FRACTION",
    "Machine",
    "MemoryPlanError",
    "SparkMemory",
    "TrainPlan",
    "TrainSizes",
    "classic_driver_need",
    "default_basis",
    "driver_formula",
    "driver_memory",
    "embed_worker_need",
    "format_size",
    "known_train_sizes",
    "local_heap",
    "parse_size",
    "plan_embed",
    "plan_methods",
    "plan_train",
    "preflight_embed",
    "preflight_evaluate",
    "session_heap",
    "spark_memory",
    "train_jvm_need",
    "train_python_need",
]

log = logging.getLogger(__name__)

MiB = 2**20
GiB = 2**30

#: Share of the machine's memory the run may use; the rest is the OS's, its page cache's and
#: other processes'.
USABLE_FRACTION = 0.85
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
#: The driver's Python without data (interpreter, numpy, scipy, pyspark, pyarrow), and one
#: Python worker's.
DRIVER_PYTHON_BASE = 300 * MiB
WORKER_PYTHON_BASE = 150 * MiB
#: Spark keeps this much of an executor's overhead for the JVM's own off-heap use.
OVERHEAD_MIN = 384 * MiB

#: Python memory of one document of an embed batch beyond the model: its text, tokens,
#: TF-IDF row and vector, in Arrow and numpy. Calibrated on the 1M Wikipedia-shaped chain
#: (bench/README.md, "The whole chain"): two workers of ~650 MB each, 320 MB of it Φ.
EMBED_BYTES_PER_ROW = 32 * 2**10

#: Float arrays of p_l x b live at once in one language's block CG (pipeline/linalg/
#: block_cg.py) and of p x b while Â⁻¹ is applied (pipeline/linalg/woodbury.py).
CG_ARRAYS = 11
SOLVE_ARRAYS = 5

#: The Spark backend's JVM heap: X's blocks are built, pickled and cached in the JVM (with
#: four languages loading at once), and the passes' results cross it. A floor of 1.5x the
#: cached X plus 1 GiB, set from the 1M and 2M chains (bench/README.md, "2M documents: the
#: README's stage commands").
JVM_X_FACTOR = 1.5
JVM_TRAIN_BASE = 1 * GiB


def driver_formula(method: str) -> str:
    """How the plan counts ``method``'s driver Python: its spec's
    :class:`~pipeline.methods.spec.DriverMemory` formula (``solver``, ``state`` or
    ``base``); ``base`` for a name no method has (the word-mapping document baselines of
    ``evaluate.methods``, which are not trained)."""
    spec = find_method(method)
    return spec.driver_memory.formula if spec is not None else "base"


class MemoryPlanError(ConfigError):
    """A stage cannot fit the memory it is given; the message names the settings that fit."""


# --- sizes ------------------------------------------------------------------------------------

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


def _gb(n: float) -> str:
    return f"{n / GiB:.1f} GB"


@dataclass(frozen=True)
class Machine:
    """Memory and cores of the machine this process runs on.

    ``memory`` is the physical memory, or the cgroup limit where one is lower (a container);
    ``available`` what the kernel reports free for new work now (``MemAvailable``), when known.
    """

    memory: int
    cores: int
    available: int | None = None

    @classmethod
    def detect(cls) -> Machine:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
            try:
                with open(path, encoding="ascii") as f:
                    limit = f.read().strip()
            except OSError:
                continue
            if limit.isdigit() and 0 < int(limit) < memory:
                memory = int(limit)
        return cls(memory=memory, cores=len(os.sched_getaffinity(0)), available=_first_available())

    @property
    def usable(self) -> int:
        """:data:`USABLE_FRACTION` of the memory, or what is available now if that is less
        (other programs' memory is not the run's to take)."""
        share = int(USABLE_FRACTION * self.memory)
        return share if self.available is None else min(share, self.available)


@functools.cache
def _first_available() -> int | None:
    """``MemAvailable`` as this process first read it. Read once: the session's heap is planned
    from it, and the driver's own JVM growing into that heap lowers later readings, which
    would count the heap twice and refuse a fit that the session was sized for."""
    return _mem_available()


def _mem_available() -> int | None:
    """``MemAvailable`` of /proc/meminfo in bytes (None where there is none)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


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
        split between them is the plan's (:func:`plan_train`), so both get all of it here."""
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


# --- the train stage --------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainSizes:
    """A training problem's sizes, from the tfidf dataset's manifest.

    Attributes
    ----------
    nnz, docs, terms : dict of str to int
        Per language: nonzeros z_l, documents n_l and vocabulary p_l.
    concepts : int
        K.
    """

    nnz: dict[str, int]
    docs: dict[str, int]
    terms: dict[str, int]
    concepts: int

    @classmethod
    def from_manifest(
        cls, manifest: Mapping[str, Any], languages: Sequence[str] = ()
    ) -> TrainSizes:
        """From a tfidf manifest (``report.per_language``, ``report.concepts``); ``languages``
        restricts it (empty: all)."""
        report = manifest.get("report") or {}
        per = report.get("per_language") or {}
        langs = [lang for lang in (languages or sorted(per)) if lang in per]
        return cls(
            nnz={lang: int(per[lang]["nnz"]) for lang in langs},
            docs={lang: int(per[lang]["documents"]) for lang in langs},
            terms={lang: int(per[lang]["vocabulary"]) for lang in langs},
            concepts=int(report.get("concepts", 0)),
        )

    @property
    def p(self) -> int:
        return sum(self.terms.values())

    @property
    def n(self) -> int:
        return sum(self.docs.values())

    @property
    def z(self) -> int:
        return sum(self.nnz.values())


def _solver_widths(sizes: TrainSizes, t: TrainConfig) -> tuple[int, int, int]:
    """(r, block width b, basis columns m) as the solver will resolve them."""
    from pipeline.linalg.cr5 import default_max_basis, resolve_block_size

    r = min(t.r, max(1, sizes.concepts - 1))
    b = resolve_block_size(r, t.oversampling, t.block_size, sizes.concepts, warm=t.start_steps > 0)
    m = min(t.max_basis or default_max_basis(r, b), sizes.concepts)
    return r, b, m


def default_basis(sizes: TrainSizes, t: TrainConfig) -> int:
    """The eigensolver's basis columns at ``t``'s cap (its default when None) for ``sizes``."""
    return _solver_widths(sizes, t)[2]


def train_driver_need(sizes: TrainSizes, t: TrainConfig, unfused: Sequence[str] = ()) -> dict:
    """The driver Python's peak of a Cr5 fit, by part (bytes): the basis (K x m float64), the
    kept images (p x m float32), the larger of applying Â⁻¹ (p x b arrays) and forming Φ
    (p x r, twice), the preconditioners, the Cᵀ results; X itself on the local backend, and
    on Spark the CG vectors of unfused languages (their CG runs on the driver)."""
    r, b, m = _solver_widths(sizes, t)
    item = 4 if (t.cg_dtype or t.dtype) == "float32" else 8
    p, k = sizes.p, sizes.concepts
    parts = {
        "base": DRIVER_PYTHON_BASE,
        "basis": 8 * k * m,
        "images": 4 * p * m,
        "solve or Φ": max(8 * SOLVE_ARRAYS * p * b, 8 * p * r),
        "preconditioners": 4 * p * t.precond_rank,
        "Cᵀ results": 8 * (k + sizes.n) * b,
    }
    if t.backend == "local":
        parts["X"] = 8 * sizes.z + 16 * sizes.n
        parts["CG vectors"] = CG_ARRAYS * item * p * b
    elif unfused:
        parts["CG vectors"] = CG_ARRAYS * item * sum(sizes.terms[lang] for lang in unfused) * b
    return parts


def classic_driver_need(sizes: TrainSizes, t: TrainConfig) -> dict:
    """The driver Python's peak of a classic method's fit (``t.method``, whose spec's driver
    memory is a p x r ``state``), by part (bytes): its p x r state and, on the local backend,
    X."""
    r = min(t.r, max(1, sizes.concepts - 1))
    arrays = get_method(t.method).driver_memory.pr_arrays
    parts = {
        "base": DRIVER_PYTHON_BASE,
        f"{t.method} state": int(arrays * 8 * sizes.p * r),
    }
    if t.backend == "local":
        parts["X"] = 8 * sizes.z + 16 * sizes.n
    return parts


def train_worker_need(
    sizes: TrainSizes, t: TrainConfig, resident: Sequence[str], filling: str | None
) -> dict:
    """One Python worker's peak (bytes): the resident languages, the one it reads from the
    cached blocks (``filling``), and one solving task's CG vectors."""
    from pipeline.backends.spark_resident import FILL_BYTES_PER_NNZ, resident_bytes

    item = 4 if t.dtype == "float32" else 8
    parts = {
        "base": WORKER_PYTHON_BASE,
        "resident X": sum(resident_bytes(sizes.nnz[g], sizes.docs[g], item) for g in resident),
        "CG vectors": t.solve_in_task_memory_mb * MiB,
    }
    if filling is not None:
        parts["reading X"] = FILL_BYTES_PER_NNZ * sizes.nnz[filling]
        if filling in resident:  # counted once: its resident copy is what the read builds
            parts["reading X"] -= resident_bytes(sizes.nnz[filling], sizes.docs[filling], item)
    return parts


def train_jvm_need(sizes: TrainSizes, t: TrainConfig) -> int | None:
    """The local JVM heap a Spark-backend fit needs (bytes): :data:`JVM_X_FACTOR` times X's
    cached blocks (float32 values and int32 indices per nonzero, int64 row offsets) plus
    :data:`JVM_TRAIN_BASE`; None on the local backend (X stays in the driver's Python)."""
    if t.backend != "spark":
        return None
    return int(JVM_X_FACTOR * (8 * sizes.z + 8 * sizes.n)) + JVM_TRAIN_BASE


def train_python_need(sizes: TrainSizes, t: TrainConfig, slots: int) -> int:
    """All Python memory of a fit with every language fused and resident (the local heap
    rule's need for a Spark-backend train; the local backend's driver alone otherwise; a
    classic method's driver)."""
    if driver_formula(t.method) == "state":
        return sum(classic_driver_need(sizes, t).values())
    driver = sum(train_driver_need(sizes, t).values())
    if t.backend == "local":
        return driver
    langs = list(sizes.nnz)
    largest = max(langs, key=lambda g: sizes.nnz[g])
    return driver + slots * sum(train_worker_need(sizes, t, langs, largest).values())


@dataclass
class TrainPlan:
    """The memory plan of one train stage.

    Attributes
    ----------
    fused, resident : list of str
        Languages whose solves and passes run as one job each, and those of them kept in the
        Python workers between jobs.
    resident_budget : int
        Worker memory for resident languages (bytes), from which the backend picks the same
        ``resident`` languages.
    driver, worker : dict of str to int
        The estimated peaks by part (bytes): the driver's Python, one Python worker.
    driver_available, worker_available : int
        What those processes get (bytes).
    slots : int
        Python workers (concurrent tasks) per executor.
    """

    fused: list[str] = field(default_factory=list)
    resident: list[str] = field(default_factory=list)
    resident_budget: int = 0
    driver: dict[str, int] = field(default_factory=dict)
    worker: dict[str, int] = field(default_factory=dict)
    driver_available: int = 0
    worker_available: int = 0
    slots: int = 1
    max_basis: int | None = None

    def solver_options(self) -> dict[str, int]:
        """The eigensolver settings the plan chose: ``max_basis`` when it narrowed the basis
        (:func:`plan_train`), else nothing."""
        return {} if self.max_basis is None else {"max_basis": self.max_basis}

    def unfused(self, sizes: TrainSizes) -> list[str]:
        """The languages of a Spark-backend fit left to one job per CG iteration."""
        if not self.worker:
            return []
        return [g for g in sizes.nnz if g not in self.fused]

    def backend_options(self, sizes: TrainSizes, t: TrainConfig) -> dict[str, int]:
        """The Spark backend's options the configuration left to the plan (``None``)."""
        if t.backend != "spark":
            return {}
        opts = {}
        if t.solve_in_task_max_nnz is None:
            opts["solve_in_task_max_nnz"] = max((sizes.nnz[g] for g in self.fused), default=0)
        if t.resident_memory_mb is None:
            opts["resident_memory_mb"] = self.resident_budget // MiB
        return opts

    def unfused_warning(self, sizes: TrainSizes, t: TrainConfig) -> str | None:
        """A paragraph when the plan left a language of a Spark-backend fit unfused although
        the configuration left the choice to it: that language then costs one Spark job per
        CG iteration with its CG on the driver, which the cost model puts at several times
        the fit (bench/README.md, "r = 300 at 2M documents"); None otherwise."""
        if t.backend != "spark" or t.solve_in_task_max_nnz is not None:
            return None
        unfused = sorted(self.unfused(sizes), key=lambda g: -sizes.nnz[g])
        if not unfused:
            return None
        largest = unfused[0]
        need = train_worker_need(sizes, t, [], largest)
        return (
            f"{', '.join(unfused)} will run one Spark job per CG iteration (its CG on the "
            f"driver), many times slower than a fused solve: a Python worker needs about "
            f"{_gb(sum(need.values()))} to read {largest} ({sizes.nnz[largest] / 1e6:.1f}M "
            f"nonzeros) and gets {_gb(self.worker_available)} beside the driver's "
            f"~{_gb(sum(self.driver.values()))} ({_largest_parts(self.driver)}). To fuse it: "
            f"give the workers more memory (on a cluster spark.executor.pyspark.memory), run "
            f"fewer tasks at once (spark.master=local[1])"
            + (
                ", or leave train.max_basis unset (the plan then narrows the driver's "
                "Lanczos basis when that fuses more)."
                if t.max_basis is not None
                else "."
            )
        )

    def describe(self) -> str:
        """One line for the log."""
        text = f"driver Python ~{_gb(sum(self.driver.values()))} of {_gb(self.driver_available)}"
        if self.max_basis is not None:
            text += f" (eigensolver basis narrowed to {self.max_basis} columns)"
        if self.worker:
            text += (
                f"; {self.slots} Python workers ~{_gb(sum(self.worker.values()))} each of "
                f"{_gb(self.worker_available)}; fused: {', '.join(self.fused) or 'none'}; "
                f"resident: {', '.join(self.resident) or 'none'}"
            )
        return text


def _worker_peak(sizes: TrainSizes, t: TrainConfig, fused: list[str], resident: list[str]) -> dict:
    """A worker's peak parts while it holds ``resident`` and reads the largest fused
    language that is not resident (or, all being resident, the largest)."""
    reading = [g for g in fused if g not in resident] or fused
    filling = max(reading, key=lambda g: sizes.nnz[g]) if reading else None
    return train_worker_need(sizes, t, resident, filling)


def _choose_fused(
    sizes: TrainSizes, t: TrainConfig, worker_mem: int
) -> tuple[list[str], list[str], int]:
    """Fused languages, resident ones and the residency budget within a worker's memory.

    Fuse every language a worker can read while holding nothing (a fused language's solve
    costs one job, an unfused one a job per CG iteration with its CG on the driver). Then the
    budget for resident languages: what a worker has left beside reading the largest fused
    language (only its excess over its resident copy if all are kept, else all of it); the
    backend keeps the largest languages that fit it
    (:func:`~pipeline.backends.spark_resident.kept_languages`), the same choice as here.
    Settings the configuration gives are kept.
    """
    from pipeline.backends.spark_resident import (
        FILL_BYTES_PER_NNZ,
        RESIDENT_BYTES_PER_NNZ,
        kept_languages,
    )

    langs = sorted(sizes.nnz, key=lambda g: -sizes.nnz[g])
    if t.solve_in_task_max_nnz is not None:
        fused = [g for g in langs if sizes.nnz[g] <= t.solve_in_task_max_nnz]
    else:
        fused = [g for g in langs if sum(_worker_peak(sizes, t, [g], []).values()) <= worker_mem]
    if not fused:
        return fused, [], 0
    item = 4 if t.dtype == "float32" else 8
    each = {g: (sizes.nnz[g], sizes.docs[g]) for g in fused}
    fixed = WORKER_PYTHON_BASE + t.solve_in_task_memory_mb * MiB
    z_max = sizes.nnz[fused[0]]
    if t.resident_memory_mb is not None:
        budgets = [t.resident_memory_mb * MiB]
    else:
        all_kept = worker_mem - fixed - (FILL_BYTES_PER_NNZ - RESIDENT_BYTES_PER_NNZ) * z_max
        budgets = [all_kept, worker_mem - fixed - FILL_BYTES_PER_NNZ * z_max]
    for budget in budgets:
        budget = max(0, budget) // MiB * MiB  # the backend gets whole MiB
        resident = kept_languages(each, budget, item)
        resident = [g for g in fused if g in resident]
        if sum(_worker_peak(sizes, t, fused, resident).values()) <= worker_mem:
            break
    return fused, resident, budget


def plan_train(sizes: TrainSizes, cfg: Config, mem: SparkMemory) -> TrainPlan:
    """Settings of one train stage that fit ``mem``, or :class:`MemoryPlanError`.

    In local mode the driver's Python and the workers share one budget: the driver is
    counted first and the workers split the rest. On a cluster each has its own.

    A Cr5 fit whose ``train.max_basis`` is left to the plan (None) and whose default basis
    (``max(r, b) + 4b`` columns, K x m float64 in the driver) leaves a language unfused or
    the driver short gets the widest narrower basis, down to the eigensolver's smallest
    ``max(r, b) + 2b`` in steps of b, that fuses every language and fits; failing that, the
    one that fits with the fewest unfused nonzeros. A narrower basis costs more thick
    restarts (a few more iterations); an unfused language costs a Spark job per CG
    iteration, several times the fit (bench/README.md, "r = 300 at 2M documents").
    """
    t = cfg.train
    first = _plan_or_error(sizes, cfg, mem)
    if driver_formula(t.method) != "solver" or t.max_basis is not None:
        return _returned(first)
    if isinstance(first, TrainPlan) and not first.unfused(sizes):
        return first
    best = first
    for m in _narrower_bases(sizes, t):
        narrowed = dataclasses.replace(cfg, train=dataclasses.replace(t, max_basis=m))
        plan = _plan_or_error(sizes, narrowed, mem)
        if not isinstance(plan, TrainPlan):
            continue
        plan.max_basis = m
        if not isinstance(best, TrainPlan) or _unfused_nnz(plan, sizes) < _unfused_nnz(best, sizes):
            best = plan
        if not plan.unfused(sizes):
            break
    return _returned(best)


def _plan_or_error(sizes: TrainSizes, cfg: Config, mem: SparkMemory) -> TrainPlan | Exception:
    try:
        return _plan_train_at(sizes, cfg, mem)
    except MemoryPlanError as err:
        return err


def _returned(plan: TrainPlan | Exception) -> TrainPlan:
    if isinstance(plan, Exception):
        raise plan
    return plan


def _unfused_nnz(plan: TrainPlan, sizes: TrainSizes) -> int:
    return sum(sizes.nnz[g] for g in plan.unfused(sizes))


def _narrower_bases(sizes: TrainSizes, t: TrainConfig) -> list[int]:
    """Basis caps below the default, widest first: steps of b down to max(r, b) + 2b."""
    from pipeline.linalg.cr5 import smallest_max_basis

    r, b, m = _solver_widths(sizes, t)
    low = smallest_max_basis(r, b)
    caps = list(range(m - b, low - 1, -b))
    if m > low and low not in caps:
        caps.append(low)
    return caps


def _plan_train_at(sizes: TrainSizes, cfg: Config, mem: SparkMemory) -> TrainPlan:
    """:func:`plan_train` at the configuration's basis cap."""
    t = cfg.train
    formula = driver_formula(t.method)
    if formula == "state":
        plan = TrainPlan(driver=classic_driver_need(sizes, t), driver_available=mem.driver_python)
        _check_driver(plan, sizes, cfg, mem)
        return plan
    if formula != "solver":
        return TrainPlan(driver={"base": DRIVER_PYTHON_BASE}, driver_available=mem.driver_python)
    if t.backend == "local":
        plan = TrainPlan(driver=train_driver_need(sizes, t), driver_available=mem.driver_python)
        _check_driver(plan, sizes, cfg, mem)
        return plan
    worker_mem = mem.worker_python
    fused, unfused = list(sizes.nnz), []
    for _ in range(len(sizes.nnz) + 1):  # fewer fused: more CG on the driver, less for workers
        if mem.local:
            peak = sum(train_driver_need(sizes, t, unfused).values())
            worker_mem = max(0, mem.driver_python - peak) // mem.slots
        fused, resident, budget = _choose_fused(sizes, t, worker_mem)
        if [g for g in sizes.nnz if g not in fused] == unfused:
            break
        unfused = [g for g in sizes.nnz if g not in fused]
    worker = _worker_peak(sizes, t, fused, resident) if fused else {}
    driver_available = mem.driver_python
    if mem.local:
        driver_available -= mem.slots * sum(worker.values())
    plan = TrainPlan(
        fused=fused,
        resident=resident,
        resident_budget=budget,
        driver=train_driver_need(sizes, t, [g for g in sizes.nnz if g not in fused]),
        worker=worker,
        driver_available=driver_available,
        worker_available=worker_mem,
        slots=mem.slots,
    )
    if worker and sum(worker.values()) > worker_mem:
        raise MemoryPlanError(_worker_paragraph(plan, sizes, cfg, mem))
    _check_driver(plan, sizes, cfg, mem)
    return plan


def _what(sizes: TrainSizes, cfg: Config) -> str:
    t = cfg.train
    return (
        f"train ({t.method}, {t.backend} backend) on {sizes.n:,} documents "
        f"({sizes.z / 1e6:.1f}M nonzeros, {len(sizes.nnz)} languages, K = {sizes.concepts:,}, "
        f"r = {t.r})"
    )


def _largest_parts(parts: Mapping[str, int]) -> str:
    top = sorted(parts.items(), key=lambda kv: -kv[1])[:3]
    return ", ".join(f"{name} {_gb(size)}" for name, size in top)


def _check_driver(plan: TrainPlan, sizes: TrainSizes, cfg: Config, mem: SparkMemory) -> None:
    need = sum(plan.driver.values())
    if need <= plan.driver_available:
        return
    t = cfg.train
    fixes = []
    if t.backend == "local" and plan.driver.get("X", 0) >= need - plan.driver_available:
        fixes.append("--set train.backend=spark (X then stays on the executors)")
    if t.r > 100:
        fixes.append(f"a smaller train.r (now {t.r})")
    fixes.append("a machine (or a client-mode driver) with more memory")
    where = "this machine leaves it" if mem.local else "the driver's host leaves it"
    raise MemoryPlanError(
        f"{_what(sizes, cfg)} needs about {_gb(need)} in the driver's Python "
        f"({_largest_parts(plan.driver)}), but {where} {_gb(max(0, plan.driver_available))} "
        f"beside a {format_size(mem.driver_heap)} JVM heap"
        + (f" and {plan.slots} Python workers" if plan.worker and mem.local else "")
        + ". Fix: "
        + "; or ".join(fixes)
        + "."
    )


def _worker_paragraph(plan: TrainPlan, sizes: TrainSizes, cfg: Config, mem: SparkMemory) -> str:
    where = (
        "on this machine beside the driver's Python and the JVM"
        if mem.local
        else "(spark.executor.pyspark.memory / spark.executor.cores, or else the share of "
        "spark.executor.memoryOverhead)"
    )
    t = cfg.train
    if t.solve_in_task_max_nnz is not None or t.resident_memory_mb is not None:
        settings = (
            "lower train.solve_in_task_max_nnz or train.resident_memory_mb, or leave both "
            "unset (the plan then chooses them)"
        )
    else:
        settings = "--set train.solve_in_task_max_nnz=0 (no fused language)"
    return (
        f"{_what(sizes, cfg)}: each Python worker needs about {_gb(sum(plan.worker.values()))} "
        f"({_largest_parts(plan.worker)}) but gets {_gb(plan.worker_available)} {where}. "
        f"Fix: {settings}; or give the workers more memory (on a cluster "
        f"spark.executor.pyspark.memory), or run fewer tasks at once (spark.master=local[1])."
    )


# --- the embed stage --------------------------------------------------------------------------


def embed_worker_need(meta: Mapping[str, Any], languages: Sequence[str], batch_rows: int) -> dict:
    """One Python worker's peak in the embed stage (bytes), by part: the model's files of
    ``languages`` (Φ_l, its mean and vocabulary: a worker loads each language it meets whole
    and keeps it, and with Spark's free task placement every worker meets every language),
    the arrays every language shares, and one batch of ``batch_rows`` documents."""
    files = meta.get("files") or {}
    wanted = set(languages)
    model = 0
    for path, info in files.items():
        parts = path.split("/")
        if parts[0] != "languages" or (len(parts) > 1 and parts[1] in wanted):
            model += int(info.get("bytes", 0))
    return {
        "base": WORKER_PYTHON_BASE,
        "model": model,
        "batch": batch_rows * EMBED_BYTES_PER_ROW,
    }


@dataclass
class EmbedPlan:
    """The embed stage's Python workers: the estimate by part and what each gets (bytes)."""

    worker: dict[str, int]
    worker_available: int
    slots: int
    languages: list[str]

    def describe(self) -> str:
        return (
            f"{self.slots} Python workers ~{_gb(sum(self.worker.values()))} each "
            f"({_largest_parts(self.worker)}) of {_gb(self.worker_available)}"
        )


def plan_embed(
    meta: Mapping[str, Any], languages: Sequence[str], cfg: Config, mem: SparkMemory
) -> EmbedPlan:
    """Check that the embed stage's Python workers fit ``mem``, or :class:`MemoryPlanError`
    naming the settings that would. In local mode each worker gets its share of what the
    JVM leaves; on a cluster ``spark.executor.pyspark.memory`` per core."""
    need = embed_worker_need(meta, languages, cfg.embed.batch_rows)
    available = mem.worker_python // mem.slots if mem.local else mem.worker_python
    plan = EmbedPlan(need, available, mem.slots, list(languages))
    if sum(need.values()) <= available:
        return plan
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
    raise MemoryPlanError(
        f"embed with the {len(languages)}-language model of r = {meta.get('r')}: each "
        f"Python worker holds every language's Φ it meets and a batch, about "
        f"{_gb(sum(need.values()))} ({_largest_parts(need)}), but gets "
        f"{_gb(max(0, available))} {where}. Fix: " + "; or ".join(fixes) + "."
    )


def known_embed_need(cfg: Config, stages: Sequence[str]) -> tuple[dict, list[str]] | None:
    """The model's ``model.json`` and the languages the embed stage among ``stages`` will
    embed, when the model exists before the run (no train stage of the run rewrites it) and
    is a local directory; else None (the stage is then not planned)."""
    if "embed" not in stages or "train" in stages[: list(stages).index("embed")]:
        return None
    try:  # model.json read as plain JSON: the embed stage checks the model itself
        with open(os.path.join(cfg.paths.dataset("model"), "model.json"), encoding="utf-8") as f:
            meta = json.load(f)
    except (OSError, ValueError):  # missing, remote or damaged: the stage reports it
        return None
    if not isinstance(meta, dict):
        return None
    langs = [str(lang) for lang in meta.get("languages") or []]
    if cfg.embed.languages:
        chosen = {str(lang).strip().lower() for lang in cfg.embed.languages}
        langs = [lang for lang in langs if lang in chosen]
    return meta, langs


def spark_memory(conf: Mapping[str, str], parallelism: int, machine: Machine) -> SparkMemory:
    """What a running (or about to start) session gives each process, from its properties:
    ``spark.master``, ``spark.driver.memory`` (Spark's default 1g), and on a cluster the
    executors' (:meth:`SparkMemory.cluster`); ``parallelism`` is the local mode's slots."""
    heap = parse_size(conf.get("spark.driver.memory", "1g"), default_unit="m")
    if str(conf.get("spark.master", "local")).startswith("local"):
        return SparkMemory.local_mode(machine, heap, max(1, parallelism))
    return SparkMemory.cluster(conf, machine, heap)


def session_heap(cfg: Config, stages: Sequence[str], machine: Machine) -> int:
    """The driver heap of ``spark.driver_memory: auto`` for running ``stages`` in one JVM:
    :func:`local_heap` of the largest Python need among the train stage's, the embed stage's
    and the evaluate stage's classic comparison methods' whose data exists already (a stage
    after a tfidf of the same run is planned when it starts, within the heap the session
    has). In local mode that JVM also runs the executors; with a cluster master only the
    driver's needs count."""
    sizes = known_train_sizes(cfg, stages)
    embed = known_embed_need(cfg, stages)
    classic = _evaluate_classic_need(cfg, stages)
    if sizes is None and embed is None and classic is None:
        return local_heap(machine)
    # On a cluster master (a client-mode driver started here) the executors, their cached X
    # and their Python workers are the cluster's: this machine holds the driver's JVM and
    # Python only.
    local = cfg.spark.master.startswith("local")
    slots = local_slots(cfg.spark.master, machine.cores) if local else 0
    needs = [DRIVER_PYTHON_BASE]
    jvm = None
    if sizes is not None:
        needs.append(train_python_need(sizes, cfg.train, slots))
        jvm = train_jvm_need(sizes, cfg.train) if local else None
    if classic is not None:
        needs.append(classic)
    if embed is not None and local:
        worker = embed_worker_need(embed[0], embed[1], cfg.embed.batch_rows)
        needs.append(DRIVER_PYTHON_BASE + slots * sum(worker.values()))
    return local_heap(machine, max(needs), jvm)


def _evaluate_classic_need(cfg: Config, stages: Sequence[str]) -> int | None:
    """The largest driver need of the evaluate stage's classic comparison methods among
    ``stages`` (bytes), when its training rows exist before the run; else None."""
    methods = [m for m in cfg.evaluate.methods if driver_formula(m) == "state"]
    if "evaluate" not in stages or not methods:
        return None
    sizes = _tfidf_sizes(cfg, stages, "evaluate")
    if sizes is None:
        return None
    return max(
        sum(classic_driver_need(sizes, dataclasses.replace(cfg.train, method=m)).values())
        for m in methods
    )


def known_train_sizes(cfg: Config, stages: Sequence[str]) -> TrainSizes | None:
    """The sizes of the train stage among ``stages``, from the tfidf manifest, when the data
    exists before the run (no earlier stage of the run rewrites it) and is local."""

    if "train" not in stages or driver_formula(cfg.train.method) == "base":
        return None
    return _tfidf_sizes(cfg, stages, "train")


def _tfidf_sizes(cfg: Config, stages: Sequence[str], stage: str) -> TrainSizes | None:
    """The training rows' sizes for ``stage`` from the tfidf manifest, when the data exists
    before the run (no earlier stage of the run rewrites it) and is local."""
    from pipeline.io.local_manifest import dataset_manifest

    before = stages[: list(stages).index(stage)]
    if any(s in ("ingest", "ingest_wikipedia", "vocabulary", "tfidf") for s in before):
        return None
    manifest = dataset_manifest(cfg.paths.dataset("tfidf"))
    if manifest is None or cfg.train.setup != "joint":
        return None
    sizes = TrainSizes.from_manifest(manifest, cfg.train.languages)
    return sizes if sizes.nnz else None


def driver_memory(cfg: Config, stages: Sequence[str]) -> str:
    """``spark.driver.memory`` for a local session: the profile's value, or for ``auto`` the
    planned heap (:func:`session_heap`)."""
    if cfg.spark.driver_memory != "auto":
        return cfg.spark.driver_memory
    machine = Machine.detect()
    heap = session_heap(cfg, stages, machine)
    log.info(
        "memory: %s usable of %s on this machine; JVM heap %s (spark.driver_memory: auto)",
        _gb(machine.usable),
        _gb(machine.memory),
        format_size(heap),
    )
    return format_size(heap)


def preflight_train(cfg: Config, stages: Sequence[str]) -> TrainPlan | None:
    """Plan the train stage among ``stages`` before Spark starts (plain ``python`` runs,
    whose session memory this process decides): :class:`MemoryPlanError` if it cannot fit.
    None when its data does not exist yet (the stage plans again when it starts)."""
    sizes = known_train_sizes(cfg, stages)
    if sizes is None:
        return None
    return plan_train(sizes, cfg, _session_memory(cfg, stages))


def plan_methods(
    sizes: TrainSizes, cfg: Config, methods: Sequence[str], mem: SparkMemory
) -> dict[str, TrainPlan]:
    """The driver plan of each classic method among ``methods`` (the evaluate stage's
    comparison methods, fitted one after another in the driver on the model's training rows
    with its r); :class:`MemoryPlanError` naming the first that cannot fit."""
    plans = {}
    for method in methods:
        if driver_formula(method) != "state":
            continue
        c = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, method=method))
        try:
            plans[method] = plan_train(sizes, c, mem)
        except MemoryPlanError as exc:
            raise MemoryPlanError(
                f"evaluate.methods: {exc} Or drop {method} from evaluate.methods."
            ) from None
    return plans


def preflight_evaluate(cfg: Config, stages: Sequence[str]) -> dict[str, TrainPlan] | None:
    """Plan the evaluate stage's classic comparison methods among ``stages`` before Spark
    starts; None when none is listed or the training rows do not exist yet (the stage
    checks again before it fits them)."""
    if "evaluate" not in stages or not any(
        driver_formula(m) == "state" for m in cfg.evaluate.methods
    ):
        return None
    sizes = _tfidf_sizes(cfg, stages, "evaluate")
    if sizes is None:
        return None
    return plan_methods(sizes, cfg, cfg.evaluate.methods, _session_memory(cfg, stages))


def preflight_embed(cfg: Config, stages: Sequence[str]) -> EmbedPlan | None:
    """Check the embed stage among ``stages`` before Spark starts: :class:`MemoryPlanError`
    if its Python workers cannot hold the model's languages and a batch. None when the
    model does not exist yet, or on a cluster without ``spark.executor.pyspark.memory``
    (Spark then puts no bound of its own on the workers' Python)."""
    known = known_embed_need(cfg, stages)
    local = cfg.spark.master.startswith("local")
    if known is None or (not local and "spark.executor.pyspark.memory" not in cfg.spark.conf):
        return None
    plan = plan_embed(known[0], known[1], cfg, _session_memory(cfg, stages))
    log.info("embed memory plan: %s", plan.describe())
    return plan


def _session_memory(cfg: Config, stages: Sequence[str]) -> SparkMemory:
    """What the session that will run ``stages`` gives each process (:func:`spark_memory`
    with the heap ``spark.driver_memory: auto`` would choose)."""
    machine = Machine.detect()
    memory = cfg.spark.driver_memory
    if memory == "auto":
        memory = format_size(session_heap(cfg, stages, machine))
    conf = {**cfg.spark.conf, "spark.master": cfg.spark.master, "spark.driver.memory": memory}
    master = cfg.spark.master
    slots = local_slots(master, machine.cores) if master.startswith("local") else 1
    return spark_memory(conf, slots, machine)
