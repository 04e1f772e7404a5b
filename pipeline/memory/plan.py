"""The memory plan: what a stage needs in each kind of process, and the settings that fit.

A run's memory lives in three kinds of process, and a stage fails when any of them runs out:

- the **driver's Python** (train: the eigensolver's basis, images and Φ; the local backend's X);
- the **JVM heap**: in local mode one JVM runs the driver and the executors, so it also holds
  the executors' cached blocks, broadcasts and task results; on a cluster the driver's JVM
  and one per executor;
- the **Python workers**, one per running task (task slot): the train stage's fused languages
  (X_l resident between jobs, :mod:`pipeline.backends.spark_resident`) and CG vectors; the
  embed stage's Φ_l and a batch.

:func:`plan_train` estimates each from the training rows' sizes (:class:`TrainSizes`; the
formulas of docs/performance.md, "Memory"; the driver's by the method's spec,
:mod:`pipeline.methods.driver_memory`), chooses the settings the user left to it
(``train.solve_in_task_max_nnz``, ``train.resident_memory_mb``, and a narrower
``train.max_basis`` when the default basis would leave a language unfused) so that the
processes fit what Spark gives them (:class:`~pipeline.memory.settings.SparkMemory`), and
otherwise raises :class:`~pipeline.memory.messages.MemoryPlanError`. :func:`plan_embed`
checks the embed stage's Python workers the same way.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pipeline.config import Config, TrainConfig
from pipeline.linalg.params import SPILL_AUTO
from pipeline.memory.machine import GiB, MiB
from pipeline.memory.messages import (
    MemoryPlanError,
    describe_fit,
    driver_paragraph,
    embed_paragraph,
    gb,
    largest_parts,
    unfused_paragraph,
    worker_paragraph,
)
from pipeline.memory.settings import SparkMemory
from pipeline.methods.driver_memory import (
    CG_ARRAYS,
    DRIVER_PYTHON_BASE,
    SOLVE_ARRAYS,
    DriverShape,
    driver_need,
    solver_need,
    state_need,
)
from pipeline.methods.registry import find_method, get_method
from pipeline.methods.spec import DriverMemory

__all__ = [
    "CG_ARRAYS",
    "DRIVER_PYTHON_BASE",
    "EMBED_BYTES_PER_ROW",
    "JVM_TRAIN_BASE",
    "JVM_X_FACTOR",
    "SOLVE_ARRAYS",
    "WORKER_PYTHON_BASE",
    "EmbedPlan",
    "TrainPlan",
    "TrainSizes",
    "classic_driver_need",
    "default_basis",
    "driver_formula",
    "embed_worker_need",
    "fit_driver_need",
    "plan_embed",
    "plan_methods",
    "plan_train",
    "train_driver_need",
    "train_jvm_need",
    "train_python_need",
    "train_worker_need",
]

#: One Python worker without data.
WORKER_PYTHON_BASE = 150 * MiB

#: Python memory of one document of an embed batch beyond the model: its text, tokens,
#: TF-IDF row and vector, in Arrow and numpy. Calibrated on the 1M Wikipedia-shaped chain
#: (bench/README.md, "The whole chain"): two workers of ~650 MB each, 320 MB of it Φ.
EMBED_BYTES_PER_ROW = 32 * 2**10

#: The Spark backend's JVM heap: X's blocks are built, pickled and cached in the JVM (with
#: four languages loading at once), and the passes' results cross it. A floor of 1.5x the
#: cached X plus 1 GiB, set from the 1M and 2M chains (bench/README.md, "2M documents: the
#: README's stage commands").
JVM_X_FACTOR = 1.5
JVM_TRAIN_BASE = 1 * GiB

_SOLVER = DriverMemory("solver")
_BASE = DriverMemory("base")


def _driver_memory(method: str) -> DriverMemory:
    """``method``'s spec's :class:`~pipeline.methods.spec.DriverMemory`; ``base`` for a name
    no method has (the word-mapping document baselines of ``evaluate.methods``, which are
    not trained)."""
    spec = find_method(method)
    return spec.driver_memory if spec is not None else _BASE


def driver_formula(method: str) -> str:
    """How the plan counts ``method``'s driver Python: its spec's
    :class:`~pipeline.methods.spec.DriverMemory` formula (``solver``, ``state`` or
    ``base``); ``base`` for a name no method has (the word-mapping document baselines of
    ``evaluate.methods``, which are not trained)."""
    return _driver_memory(method).formula


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
    from pipeline.linalg.params import default_max_basis, resolve_block_size

    r = min(t.r, max(1, sizes.concepts - 1))
    b = resolve_block_size(r, t.oversampling, t.block_size, sizes.concepts, warm=t.start_steps > 0)
    m = min(t.max_basis or default_max_basis(r, b), sizes.concepts)
    return r, b, m


def default_basis(sizes: TrainSizes, t: TrainConfig) -> int:
    """The eigensolver's basis columns at ``t``'s cap (its default when None) for ``sizes``."""
    return _solver_widths(sizes, t)[2]


def _driver_shape(
    sizes: TrainSizes, t: TrainConfig, formula: str, unfused: Sequence[str] = ()
) -> DriverShape:
    """The sizes a driver-memory formula reads, for a fit of ``t`` on ``sizes`` (the
    eigensolver's widths only for the ``solver`` formula)."""
    r = min(t.r, max(1, sizes.concepts - 1))
    shape = DriverShape(
        method=t.method,
        terms=sizes.p,
        concepts=sizes.concepts,
        docs=sizes.n,
        nnz=sizes.z,
        r=r,
        local=t.backend == "local",
    )
    if formula != "solver":
        return shape
    from pipeline.linalg.dense import resident_rows

    r, b, m = _solver_widths(sizes, t)
    return dataclasses.replace(
        shape,
        r=r,
        block=b,
        basis=m,
        cg_item=4 if (t.cg_dtype or t.dtype) == "float32" else 8,
        basis_item=4 if t.dtype == "float32" else 8,
        precond_rank=t.precond_rank,
        unfused_terms=sum(sizes.terms[lang] for lang in unfused) if unfused else None,
        spill_rows=None if t.spill_dir is None else resident_rows(max(sizes.concepts, sizes.p)),
    )


def fit_driver_need(sizes: TrainSizes, t: TrainConfig, unfused: Sequence[str] = ()) -> dict:
    """The driver Python's peak of a fit of ``t.method`` (bytes, by part), by the formula
    of its spec's :class:`~pipeline.methods.spec.DriverMemory`
    (:func:`pipeline.methods.driver_memory.driver_need`); ``unfused``: the Spark backend's
    languages whose CG runs on the driver."""
    memory = _driver_memory(t.method)
    return driver_need(memory, _driver_shape(sizes, t, memory.formula, unfused))


def train_driver_need(sizes: TrainSizes, t: TrainConfig, unfused: Sequence[str] = ()) -> dict:
    """The driver Python's peak of a Cr5 fit, by part (bytes): the basis (K x m in the passes'
    dtype), the kept images (p x m float32), the larger of applying Â⁻¹ (p x b arrays) and
    applying Cᵀ, the eigensolver's result (p x r float32 Ritz images, made after the basis
    is freed: counted beyond what it replaces), the preconditioners; X itself locally,
    and on Spark the CG vectors of unfused languages (their CG runs on the driver)
    (:func:`pipeline.methods.driver_memory.solver_need`)."""
    return solver_need(_SOLVER, _driver_shape(sizes, t, "solver", unfused))


def classic_driver_need(sizes: TrainSizes, t: TrainConfig) -> dict:
    """The driver Python's peak of a classic method's fit (``t.method``, whose spec's driver
    memory is a p x r ``state``), by part (bytes): its p x r state and, on the local backend,
    X (:func:`pipeline.methods.driver_memory.state_need`)."""
    return state_need(get_method(t.method).driver_memory, _driver_shape(sizes, t, "state"))


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
    spill_dir: str | None = None

    def solver_options(self) -> dict[str, int | str]:
        """The eigensolver settings the plan chose (:func:`plan_train`): ``max_basis`` when
        it narrowed the basis, ``spill_dir`` when it put the basis and images in files."""
        opts: dict[str, int | str] = {}
        if self.max_basis is not None:
            opts["max_basis"] = self.max_basis
        if self.spill_dir is not None:
            opts["spill_dir"] = self.spill_dir
        return opts

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
        need = train_worker_need(sizes, t, [], unfused[0])
        return unfused_paragraph(
            unfused, sizes.nnz[unfused[0]], need, self.worker_available, self.driver, t
        )

    def describe(self) -> str:
        """One line for the log."""
        text = f"driver Python ~{gb(sum(self.driver.values()))} of {gb(self.driver_available)}"
        if self.max_basis is not None:
            text += f" (eigensolver basis narrowed to {self.max_basis} columns)"
        if self.spill_dir is not None:
            text += f" (eigensolver basis and images in files under {self.spill_dir})"
        if self.worker:
            text += (
                f"; {self.slots} Python workers ~{gb(sum(self.worker.values()))} each of "
                f"{gb(self.worker_available)}; fused: {', '.join(self.fused) or 'none'}; "
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


def plan_train(sizes: TrainSizes, t: TrainConfig, mem: SparkMemory) -> TrainPlan:
    """Settings of one train stage (the train section ``t``) that fit ``mem``, or
    :class:`MemoryPlanError`.

    In local mode the driver's Python and the workers share one budget: the driver is
    counted first and the workers split the rest. On a cluster each has its own.

    A Cr5 fit whose default basis (``max(r, b) + 4b`` columns, K x m in the driver, and the
    p x m images) leaves a language unfused or the driver short, with ``train.spill_dir``
    unset, first gets them in files of the local scratch directory (``spill_dir`` ``auto``,
    when its file system has room): the same iterates, and the driver holds only the rows
    in use. Failing that, with ``train.max_basis`` left to the plan (None), it gets the
    widest narrower basis, down to the eigensolver's smallest
    ``max(r, b) + 2b`` in steps of b, that fuses every language and fits; failing that, the
    one that fits with the fewest unfused nonzeros. A narrower basis costs more thick
    restarts (a few more iterations); an unfused language costs a Spark job per CG
    iteration, several times the fit (bench/README.md, "r = 300 at 2M documents").
    """
    return _plan_fit(sizes, t, mem)


def _plan_fit(sizes: TrainSizes, t: TrainConfig, mem: SparkMemory) -> TrainPlan:
    """:func:`plan_train` of the train section ``t``."""
    first = _plan_or_error(sizes, t, mem)
    if driver_formula(t.method) != "solver":
        return _returned(first)
    if isinstance(first, TrainPlan) and not first.unfused(sizes):
        return first
    best = first
    if t.spill_dir is None and _spill_room(sizes, t):
        spilled = _plan_or_error(sizes, dataclasses.replace(t, spill_dir=SPILL_AUTO), mem)
        if isinstance(spilled, TrainPlan):
            spilled.spill_dir = SPILL_AUTO
            if not spilled.unfused(sizes):
                return spilled
            if not isinstance(best, TrainPlan) or _unfused_nnz(spilled, sizes) < _unfused_nnz(
                best, sizes
            ):
                best = spilled
    if t.max_basis is not None:
        return _returned(best)
    for m in _narrower_bases(sizes, t):
        plan = _plan_or_error(sizes, dataclasses.replace(t, max_basis=m), mem)
        if not isinstance(plan, TrainPlan):
            continue
        plan.max_basis = m
        if not isinstance(best, TrainPlan) or _unfused_nnz(plan, sizes) < _unfused_nnz(best, sizes):
            best = plan
        if not plan.unfused(sizes):
            break
    return _returned(best)


def _plan_or_error(sizes: TrainSizes, t: TrainConfig, mem: SparkMemory) -> TrainPlan | Exception:
    try:
        return _plan_train_at(sizes, t, mem)
    except MemoryPlanError as err:
        return err


def _returned(plan: TrainPlan | Exception) -> TrainPlan:
    if isinstance(plan, Exception):
        raise plan
    return plan


def _unfused_nnz(plan: TrainPlan, sizes: TrainSizes) -> int:
    return sum(sizes.nnz[g] for g in plan.unfused(sizes))


def _spill_room(sizes: TrainSizes, t: TrainConfig) -> bool:
    """Whether the local scratch directory's file system has room for the basis and the
    images (with a quarter to spare)."""
    from pipeline.linalg.spill import local_scratch_dir

    parts = train_driver_need(sizes, t)  # in memory: the files' sizes
    need = parts["basis"] + parts["images"]
    try:
        return shutil.disk_usage(local_scratch_dir()).free >= 1.25 * need
    except OSError:
        return False


def _narrower_bases(sizes: TrainSizes, t: TrainConfig) -> list[int]:
    """Basis caps below the default, widest first: steps of b down to max(r, b) + 2b."""
    from pipeline.linalg.params import smallest_max_basis

    r, b, m = _solver_widths(sizes, t)
    low = smallest_max_basis(r, b)
    caps = list(range(m - b, low - 1, -b))
    if m > low and low not in caps:
        caps.append(low)
    return caps


def _plan_train_at(sizes: TrainSizes, t: TrainConfig, mem: SparkMemory) -> TrainPlan:
    """:func:`plan_train` at the configuration's basis cap."""
    formula = driver_formula(t.method)
    if formula != "solver" or t.backend == "local":  # the driver's Python alone
        plan = TrainPlan(driver=fit_driver_need(sizes, t), driver_available=mem.driver_python)
        if formula != "base":  # the Python base alone is not checked
            _check_driver(plan, sizes, t, mem)
        return plan
    worker_mem = mem.worker_python
    fused, unfused = list(sizes.nnz), []
    for _ in range(len(sizes.nnz) + 1):  # fewer fused: more CG on the driver, less for workers
        if mem.local:
            peak = sum(fit_driver_need(sizes, t, unfused).values())
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
        driver=fit_driver_need(sizes, t, [g for g in sizes.nnz if g not in fused]),
        worker=worker,
        driver_available=driver_available,
        worker_available=worker_mem,
        slots=mem.slots,
    )
    if worker and sum(worker.values()) > worker_mem:
        raise MemoryPlanError(worker_paragraph(_what(sizes, t), worker, worker_mem, t, mem))
    _check_driver(plan, sizes, t, mem)
    return plan


def _what(sizes: TrainSizes, t: TrainConfig) -> str:
    return describe_fit(t, sizes.n, sizes.z, len(sizes.nnz), sizes.concepts)


def _check_driver(plan: TrainPlan, sizes: TrainSizes, t: TrainConfig, mem: SparkMemory) -> None:
    if sum(plan.driver.values()) > plan.driver_available:
        workers = plan.slots if plan.worker and mem.local else None
        raise MemoryPlanError(
            driver_paragraph(_what(sizes, t), plan.driver, plan.driver_available, workers, t, mem)
        )


def plan_methods(
    sizes: TrainSizes, t: TrainConfig, methods: Sequence[str], mem: SparkMemory
) -> dict[str, TrainPlan]:
    """The driver plan of each classic method among ``methods`` (the evaluate stage's
    comparison methods, fitted one after another in the driver on the model's training rows
    with its r); :class:`MemoryPlanError` naming the first that cannot fit."""
    plans = {}
    for method in methods:
        if driver_formula(method) != "state":
            continue
        try:
            plans[method] = _plan_fit(sizes, dataclasses.replace(t, method=method), mem)
        except MemoryPlanError as exc:
            raise MemoryPlanError(
                f"evaluate.methods: {exc} Or drop {method} from evaluate.methods."
            ) from None
    return plans


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
            f"{self.slots} Python workers ~{gb(sum(self.worker.values()))} each "
            f"({largest_parts(self.worker)}) of {gb(self.worker_available)}"
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
    raise MemoryPlanError(embed_paragraph(meta, languages, need, available, cfg, mem))
