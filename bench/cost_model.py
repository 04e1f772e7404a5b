"""Cost model of the chain: train time and driver memory, embed and evaluate times.

The formulas are documented in ``docs/scaling.md``; this script evaluates them, fits their
machine constants by least squares on ``bench_chain.py`` runs, checks the predictions
against runs (ratio predicted / measured, jointly and leave-one-out) and applies them to
the paper's settings.

Usage (repository root)::

    .venv/bin/python bench/cost_model.py --calibrate bench/results/chain_1M.json \\
        bench/results/chain_100k.json --leave-one-out
    .venv/bin/python bench/cost_model.py --calibrate bench/results/chain_1M.json \\
        bench/results/chain_100k.json --paper

What is taken from a checked run and what is predicted: the corpus sizes (n_l, p_l, z_l,
K), the block width b, the Lanczos iterations I and the CG iterations of every solve and
language (its ``report.solver``, or for runs recorded before that field existed
``<run>.history.json`` beside it) are inputs; every time and memory figure is predicted.
Fitting uses the run's phase timings (warm start, each language's seconds in each
eigensolver solve, the rest of the fit); checking compares only the stage totals.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# The eigensolver's block width and basis cap are the solver's own rule (pipeline/linalg/params.py).
from pipeline.linalg.dense import MAX_ROWS, MAX_THREADS  # noqa: E402
from pipeline.linalg.params import CR5_DEFAULTS, default_block_size, default_max_basis  # noqa: E402

# The driver-memory parts are the methods' own model, the one the memory plan uses
# (pipeline/methods/driver_memory.py); :func:`driver_mb` combines them into its peak moments.
from pipeline.methods.driver_memory import (  # noqa: E402
    CG_ARRAYS,
    SOLVE_ARRAYS,
    basis_bytes,
    cg_bytes,
    ct_results_bytes,
    images_bytes,
    precond_bytes,
    ritz_images_bytes,
    solve_bytes,
    spilled_bytes,
    x_bytes,
)

MB = 2**20

#: Cached row blocks of a language: 1 up to this many nonzeros, else max(cores, z / this)
#: (pipeline.backends.spark.NNZ_PER_PARTITION).
NNZ_PER_PARTITION = 2_000_000

#: Driver Python of a Spark stage that holds no data (interpreter, numpy, scipy, pyspark,
#: pyarrow): the embed stage's driver peak in both chain runs (140.5 / 140.3 MB).
DRIVER_BASE_MB = 140.0

#: Live p_l x b arrays of one language's block CG at its peak, and p x b arrays while Â⁻¹
#: is applied (pipeline.methods.driver_memory.CG_ARRAYS and SOLVE_ARRAYS, which say which).
CG_BLOCKS = CG_ARRAYS
SOLVE_BLOCKS = SOLVE_ARRAYS

#: float64 element reads + writes per term and column of one block CG iteration, counted in
#: pipeline/linalg/block_cg.py (two dot products, two axpys through the scratch block, the
#: residual norm, the preconditioner, the direction update, A·P with its float32 casts and
#: λV): the unit of the fitted constant g.
CG_TOUCHES = 31

#: ... of the driver's work around one C product per term and column (result to float64,
#: concatenation, the centring outer product, its scaling and subtraction)...
C_TOUCHES = 10


def ct_touches(s: Sizes) -> float:
    """... and per column around one Cᵀ product: each language's result converted and added
    (4.5 touches per row: K rows per language in runs before ``ct_language_rows``, its own
    K_l = n_l rows since), then the zeroed sum and the centring term (5 per concept)."""
    rows = s.n if s.ct_language_rows else len(s.languages) * s.concepts
    return 4.5 * rows + 5 * s.concepts


# --------------------------------------------------------------------------- sizes


@dataclass
class Sizes:
    """What the model needs to know about a training run."""

    nnz: dict[str, int]  # z_l
    terms: dict[str, int]  # p_l
    docs: dict[str, int]  # n_l training documents (= the language's concepts K_l)
    concepts: int  # K
    r: int
    block: int  # b
    lanczos_iterations: int = 2  # I
    start_steps: int = 2  # s
    #: q_{l,i}: CG iterations of language l in eigensolver iteration i (one dict per i)
    cg_iterations: list[dict[str, float]] = field(default_factory=list)
    w_iterations: dict[str, float] = field(default_factory=dict)  # q_w,l
    cores: int = 2  # per executor (local[N]: N)
    executors: int = 1
    solve_in_task_max_nnz: int = 125_000_000  # the auto default here (24 GB, local[2])
    solve_tasks: int | None = None  # None: all cores (defaultParallelism)
    max_basis: int | None = None  # None: max(r, b) + 4b
    #: Cᵀ results are each language's K_l rows (bench_chain SOLVER_FEATURES; older runs: K)
    ct_language_rows: bool = True
    #: train.precond_rank: the CG preconditioner's p_l x k basis per language on the driver,
    #: float32 (the pass dtype; 0 for the recorded runs, which predate it)
    precond_rank: int = 0
    #: Φ from the float32 images (8 p r at its peak; 24 p r before ``phi_float32``)
    phi_float32: bool = True
    #: the Lanczos basis in the passes' dtype, float32 (``basis_float32``; before, float64)
    basis_float32: bool = True
    #: the eigensolver's result without the K x r Ritz vectors (``images_only_result``;
    #: before, K x r float64 beside the basis and the images at the end of the fit)
    images_only_result: bool = True
    #: the basis freed before the result's Ritz images are made (``basis_freed_result``;
    #: before, K x m beside the images and the Ritz images at the end of the eigensolver)
    basis_freed_result: bool = True
    #: ``train.spill_dir``: the basis and the images are files of which the driver holds the
    #: block being applied and the row chunks in flight (spilled_bytes), not K x m and p x m
    spilled: bool = False
    #: Fused languages resident in the Python workers (``resident_workers``): a worker reads
    #: a language's blocks once, then its tasks multiply one CSR matrix; before, every task
    #: of every fused job re-read (read·z_l) and multiplied block by block.
    resident: bool = False
    #: The resident languages when the run kept only some (its ``placement``); None: every
    #: fused language (when ``resident``).
    resident_langs: list[str] | None = None
    #: train.solve_in_task_memory_mb (the worker's CG vectors, for the memory check)
    solve_memory_mb: int = 512
    #: ``fused_tasks``: with solve_tasks unset a fused job has cores // languages tasks
    #: (pipeline.backends.spark_solve.fused_tasks); before, all cores
    tasks_per_language: bool = True

    @property
    def languages(self) -> list[str]:
        return list(self.nnz)

    @property
    def p(self) -> int:
        return sum(self.terms.values())

    @property
    def z(self) -> int:
        return sum(self.nnz.values())

    @property
    def n(self) -> int:
        return sum(self.docs.values())

    @property
    def total_cores(self) -> int:
        return self.cores * self.executors

    def basis_cap(self) -> int:
        """The basis buffer's columns: train.max_basis, default max(r, b) + 4b."""
        cap = self.max_basis or default_max_basis(self.r, self.block)
        return min(cap, self.concepts)

    def q(self, lang: str, it: int) -> float:
        """CG iterations of ``lang`` in eigensolver iteration ``it`` (0-based)."""
        if it < len(self.cg_iterations):
            return float(self.cg_iterations[it][lang])
        return float(self.cg_iterations[-1][lang]) if self.cg_iterations else 30.0

    def partitions(self, lang: str) -> int:
        z = self.nnz[lang]
        return 1 if z <= NNZ_PER_PARTITION else max(self.total_cores, -(-z // NNZ_PER_PARTITION))

    def fused(self, lang: str) -> bool:
        return self.nnz[lang] <= self.solve_in_task_max_nnz

    def is_resident(self, lang: str) -> bool:
        """Whether the workers keep ``lang``'s X_l between jobs."""
        in_set = self.resident_langs is None or lang in self.resident_langs
        return self.resident and self.fused(lang) and in_set

    def tasks(self, columns: int) -> int:
        """Tasks of a fused job over ``columns`` right-hand sides
        (pipeline.backends.spark_solve.fused_tasks)."""
        default = self.total_cores
        if self.tasks_per_language:
            default = max(1, self.total_cores // max(1, len(self.nnz)))
        return max(1, min(columns, self.solve_tasks or default))


# --------------------------------------------------------------------------- constants


@dataclass
class Machine:
    """Machine constants. The first seven are fitted (:func:`calibrate`); ``job_s`` and
    ``shuffle_s_per_byte`` come from separate measurements (docs/scaling.md)."""

    a_local: float = 1.2e-9  # s per nonzero and column: X_lᵀ(X_l V) in the local backend
    a_spark: float = 1.8e-9  # the same inside a Spark task, block by block
    a_one: float = 4e-9  # s per nonzero: one-column X_lᵀ(X_l v) (the w solve)
    g: float = 1e-8  # s per term and column: block CG's vector work per iteration
    read: float = 1e-7  # s per nonzero: a Spark task unpickling a language's cached blocks
    tau: float = 5e-9  # s per byte broadcast to or collected from the executors
    dense_flops: float = 1e10  # driver BLAS (one thread)
    job_s: float = 0.07  # one Spark job's fixed latency (bench/results/backend_overhead.txt)
    #: s per byte and core of a row-partitioned pass's keyed merge of partials (first 1M
    #: Spark run, bench/README.md: 42 x 200k x 120 doubles in 50-197 s on 2 cores). Not
    #: checked: no language of the chain runs is above train.solve_in_task_max_nnz.
    shuffle_s_per_byte: float = 2.5e-8

    FITTED = ("a_local", "a_spark", "a_one", "g", "read", "tau", "dense_flops")


# --------------------------------------------------------------------------- scheduling


def processor_sharing(
    works: Sequence[float], cores: int, background: list[float] | None = None
) -> tuple[list[float], float]:
    """Finish times of threads sharing ``cores`` equally (the local backend: one Python
    thread per language, the GIL released in the kernels), each thread at most one core.

    ``background`` (remaining works of threads that started earlier, e.g. the w solve) share
    the cores too and are updated in place. Returns (finish times, the phase's wall = last
    finish of ``works``)."""
    left = [float(w) for w in works]
    bg = background if background is not None else []
    finish = [0.0] * len(left)
    t = 0.0
    while any(w > 1e-12 for w in left):
        active = [i for i, w in enumerate(left) if w > 1e-12]
        bg_active = [j for j, w in enumerate(bg) if w > 1e-12]
        rate = min(1.0, cores / (len(active) + len(bg_active)))
        step = min([left[i] for i in active] + [bg[j] for j in bg_active]) / rate
        t += step
        for i in active:
            left[i] -= step * rate
            if left[i] <= 1e-12:
                left[i], finish[i] = 0.0, t
        for j in bg_active:
            bg[j] = max(0.0, bg[j] - step * rate)
    return finish, t


def list_schedule(
    jobs: Sequence[tuple[int, float]], slots: list[float]
) -> tuple[list[float], float]:
    """Spark's FIFO scheduler: the tasks of ``jobs`` (n_tasks, seconds per task), in
    submission order, each on the slot that frees first. ``slots`` (free times relative to
    the phase start, e.g. busy with the w solve's task) are updated in place. Returns
    (finish time of each job, the phase's wall)."""
    finish = []
    for n_tasks, seconds in jobs:
        end = 0.0
        for _ in range(n_tasks):
            k = min(range(len(slots)), key=slots.__getitem__)
            slots[k] += seconds
            end = max(end, slots[k])
        finish.append(end)
    return finish, max(finish, default=0.0)


# --------------------------------------------------------------------------- work per task


def dense_flops(s: Sizes) -> float:
    """Driver-side dense flops of a fit (pipeline/linalg/block_lanczos.py, cr5.py):
    orthonormalising the start block and each warm-start step (4Kb² each), per Lanczos
    iteration two classical Gram-Schmidt passes against the basis (4K·m_i·b) and the new
    block's QR (4Kb²), then the Ritz vectors (2K·m·r), Φ*ᵀ from the kept images
    (2p·min(Ib, m_cap)·r) and Eq. 15 (4pr²)."""
    k, b, p, r, cap = s.concepts, s.block, s.p, s.r, s.basis_cap()
    d = (s.start_steps + 1) * 4.0 * k * b * b
    for i in range(1, s.lanczos_iterations + 1):
        d += 4.0 * k * min(i * b, cap) * b + 4.0 * k * b * b
    m_final = min((s.lanczos_iterations + 1) * b, cap)
    d += 2.0 * k * m_final * r + 2.0 * p * min(s.lanczos_iterations * b, cap) * r + 4.0 * p * r**2
    return d


def _product_local(s: Sizes, mc: Machine, lang: str) -> float:
    """One C or Cᵀ product of a language (half a product pair), local backend, one core."""
    return 0.5 * mc.a_local * s.nnz[lang] * s.block


def _solve_local(s: Sizes, mc: Machine, lang: str, q: float, cols: int) -> float:
    """A block CG solve of ``cols`` columns, local backend, one core: per iteration the
    product pair (a·z) and the vector work (g·p) per column."""
    a = mc.a_local if cols > 1 else mc.a_one / max(cols, 1)
    return q * cols * (a * s.nnz[lang] + mc.g * s.terms[lang])


def _driver_product_s(s: Sizes, mc: Machine, kind: str) -> float:
    """The driver's array work around one C or Cᵀ product (element touches x g / CG_TOUCHES)."""
    c_part = C_TOUCHES * s.p
    touches = c_part if kind == "xt_gather" else ct_touches(s)
    return mc.g / CG_TOUCHES * touches * s.block


def _spark_product_jobs(s: Sizes, mc: Machine, lang: str, kind: str) -> tuple[int, float, float]:
    """(tasks, seconds per task, bytes moved) of one C (``xt_gather``) or Cᵀ (``x_scatter``)
    product of a language on Spark (pipeline/backends/spark.py ``_run``).

    Fused (several blocks, z_l <= solve_in_task_max_nnz): ``tasks(b)`` tasks each gather
    every block (read·z_l) and multiply their share of the columns. One block: one task.
    Row-partitioned: one task per block, whose partial (xt_gather: ~p_l x b float64, as
    Zipfian blocks touch most terms; x_scatter: the block's concepts x b) goes through the
    keyed merge (shuffle). Bytes: the broadcast block
    (P[concepts_l] float32 and its index, or V float32) and the float64 result (p_l x b or
    K_l x b, K x b before ``ct_language_rows``)."""
    z, p, b = s.nnz[lang], s.terms[lang], s.block
    parts = s.partitions(lang)
    rows = p if kind == "xt_gather" else (s.docs[lang] if s.ct_language_rows else s.concepts)
    sent = s.docs[lang] * (4 * b + 8) if kind == "xt_gather" else 4 * p * b
    moved = sent + 8.0 * rows * b
    if s.is_resident(lang):  # shares of the columns of the worker's X_l
        n = s.tasks(b)
        return n, 0.5 * mc.a_spark * z * b / n, moved
    if parts == 1:
        return 1, mc.read * z + 0.5 * mc.a_spark * z * b, moved
    if s.fused(lang):
        n = s.tasks(b)
        return n, mc.read * z + 0.5 * mc.a_spark * z * b / n, moved
    zp = z / parts
    # a block's partial: the terms it touches (~p_l) or its own concepts (n_l / parts)
    partial = p if kind == "xt_gather" else s.docs[lang] / parts
    shuffle = mc.shuffle_s_per_byte * 8.0 * partial * b
    return parts, mc.read * zp + 0.5 * mc.a_spark * zp * b + shuffle, moved


def _spark_solve_jobs(
    s: Sizes, mc: Machine, lang: str, q: float, cols: int
) -> tuple[list[tuple[int, float]], float, float]:
    """Jobs [(tasks, seconds per task)], bytes moved and driver seconds of one solve of
    ``cols`` columns on Spark. Fused: one job of ``tasks(cols)`` tasks, each gathering the
    blocks and running CG on its columns (right-hand sides out, solutions back). Else one
    gram job per CG iteration (the CG's vectors then live on the driver)."""
    z, p = s.nnz[lang], s.terms[lang]
    a = mc.a_spark if cols > 1 else mc.a_one / max(cols, 1)
    if s.fused(lang):
        n = s.tasks(cols)
        read = 0.0 if s.is_resident(lang) else mc.read * z
        task = read + q * (cols / n) * (a * z + mc.g * p)
        return [(n, task)], 16.0 * p * cols + 8.0 * p, 0.0
    parts = s.partitions(lang)
    zp = z / parts
    task = mc.read * zp + a * zp * cols + mc.shuffle_s_per_byte * 8.0 * p * cols
    jobs = [(parts, task)] * max(1, round(q))
    return jobs, q * 12.0 * p * cols, q * mc.g * p * cols


# --------------------------------------------------------------------------- fit time


@dataclass
class Prediction:
    """Predicted fit: the phases' walls and, per eigensolver solve, each language's
    finish time (what the fit is calibrated on)."""

    mean: float
    warm: float
    products: float  # the eigensolver iterations' C and Cᵀ products
    solves: list[float]
    solve_finish: list[dict[str, float]]
    dense: float
    bytes_moved: float = 0.0

    @property
    def total(self) -> float:
        return self.mean + self.warm + self.products + sum(self.solves) + self.dense

    @property
    def rest(self) -> float:
        """What the fit spends outside the warm start and the eigensolver's solves."""
        return self.total - self.warm - sum(self.solves)


def predict_local(s: Sizes, mc: Machine) -> Prediction:
    """Local backend: every phase is the languages' threads sharing the cores (the w solve
    runs in the background from the start); the driver's dense work is sequential."""
    langs, c = s.languages, s.cores
    w_bg = [_solve_local(s, mc, lang, s.w_iterations.get(lang, 100.0), 1) for lang in langs]
    products = [_product_local(s, mc, lang) for lang in langs]

    def product(kind: str) -> float:
        return processor_sharing(products, c, w_bg)[1] + _driver_product_s(s, mc, kind)

    warm = sum(product(k) for _ in range(s.start_steps) for k in ("xt_gather", "x_scatter"))
    prod = 0.0
    walls, finish = [], []
    for it in range(s.lanczos_iterations):
        prod += product("xt_gather")
        works = [_solve_local(s, mc, lang, s.q(lang, it), s.block) for lang in langs]
        f, wall = processor_sharing(works, c, w_bg)
        walls.append(wall)
        finish.append(dict(zip(langs, f, strict=True)))
        prod += product("x_scatter")
    mean = 3.0 * mc.a_one * s.z / c  # column sums, squared sums, concept counts
    return Prediction(mean, warm, prod, walls, finish, dense_flops(s) / mc.dense_flops)


def predict_spark(s: Sizes, mc: Machine, order: list[list[str]] | None = None) -> Prediction:
    """Spark backend: every phase's tasks are list-scheduled on the executor cores in
    submission order (the w solve's tasks occupy slots first), plus one job latency per
    phase; bytes broadcast and collected cost tau each, on the same cores in local mode
    (driver and executors share the machine), on the driver otherwise.

    ``order`` (per eigensolver solve, the languages in submission order) is only used to
    predict each language's finish time; the phase's wall does not depend on it when a
    language's tasks fill the cores."""
    langs, cores = s.languages, s.total_cores
    shared = s.executors == 1
    moved = 0.0

    def phase(jobs: list[tuple[int, float]], nbytes: float, slots: list[float]) -> float:
        nonlocal moved
        moved += nbytes
        _, wall = list_schedule(jobs, slots)
        for k in range(len(slots)):
            slots[k] = max(0.0, slots[k] - wall)
        transfer = mc.tau * nbytes
        wall = wall + transfer / cores if shared else max(wall, transfer)
        return wall + mc.job_s

    def products(kind: str, slots: list[float]) -> float:
        jobs = [_spark_product_jobs(s, mc, lang, kind) for lang in langs]
        wall = phase([(n, t) for n, t, _ in jobs], sum(m for _, _, m in jobs), slots)
        return wall + _driver_product_s(s, mc, kind)

    slots = [0.0] * cores
    w_jobs, w_bytes = [], 0.0
    for lang in langs:
        jobs, nbytes, _ = _spark_solve_jobs(s, mc, lang, s.w_iterations.get(lang, 100.0), 1)
        w_jobs += jobs
        w_bytes += nbytes
    # each worker reads every resident language once, at the first jobs
    w_jobs += [(cores, mc.read * s.nnz[lang]) for lang in langs if s.is_resident(lang)]
    list_schedule(w_jobs, slots)  # the background w solve takes slots first
    moved += w_bytes
    warm = sum(products(k, slots) for _ in range(s.start_steps) for k in ("xt_gather", "x_scatter"))
    prod, walls, finish = 0.0, [], []
    for it in range(s.lanczos_iterations):
        prod += products("xt_gather", slots)
        seq = (order[it] if order and it < len(order) else None) or langs
        jobs, nbytes, driver = [], 0.0, 0.0
        for lang in seq:
            j, m, d = _spark_solve_jobs(s, mc, lang, s.q(lang, it), s.block)
            jobs.append(j)
            nbytes += m
            driver = max(driver, d)
        flat = [job for js in jobs for job in js]
        ends, _ = list_schedule(flat, list(slots))
        f, k = {}, 0
        for lang, js in zip(seq, jobs, strict=True):
            k += len(js)
            f[lang] = ends[k - 1] + mc.job_s * len(js)
        finish.append(f)
        n_jobs = max(len(js) for js in jobs)
        walls.append(phase(flat, nbytes, slots) + driver + mc.job_s * (n_jobs - 1))
        prod += products("x_scatter", slots)
    mean = 3 * mc.job_s  # column statistics come with the load; μ, ν, diag(B) are small jobs
    return Prediction(mean, warm, prod, walls, finish, dense_flops(s) / mc.dense_flops, moved)


def predict(s: Sizes, mc: Machine, backend: str, **kw: Any) -> Prediction:
    return predict_local(s, mc) if backend == "local" else predict_spark(s, mc, **kw)


# --------------------------------------------------------------------------- memory


def driver_mb(s: Sizes, backend: str) -> dict[str, float]:
    """Peak driver Python memory, counted from the code (no fitted constant): the largest
    of three moments of the last eigensolver iteration and its result, on top of

    * base: the Python driver without data (DRIVER_BASE_MB, measured);
    * local backend: X (float32 values + int32 indices, int64 row pointers and concept ids).

    In moments 1 and 2 (and 3 before ``basis_freed_result``), the basis: the Lanczos buffer,
    K x m_cap float32 (float64 before ``basis_float32``), allocated once (every page is
    touched from the first block on: the written part of each row spans its pages), so it
    does not grow with the iterations.

    Moment 1, Â⁻¹ applied: the images kept before it (float32 p x min((I-1)b, m_cap)) and
    SOLVE_BLOCKS float64 p x b arrays; on Spark the CG vectors of languages above
    solve_in_task_max_nnz (CG_BLOCKS p_l x b, they run on the driver); locally every
    language's block CG at once (CG_BLOCKS p_l x b, the first being U, so it replaces the
    solve blocks) and X V (n x b float32).
    Moment 2, Cᵀ applied: the images (float32 p x min(Ib, m_cap)), Â⁻¹CV (p x b float64),
    every language's result (held until summed in language order: its K_l = n_l rows,
    float64; K rows before ``ct_language_rows``) and their K x b sum.
    """
    k, p, b, cap = s.concepts, s.p, s.block, s.basis_cap()
    item = 4 if s.basis_float32 else 8
    basis = {"basis": float(basis_bytes(k, cap, item))}
    if s.spilled:  # the block and the chunks in flight of the larger array, as the plan
        rows = min(max(k, p), MAX_THREADS * MAX_ROWS)  # a driver of >= 8 cores: the most
        basis = {"basis": float(spilled_bytes(k, p, cap, b, item, rows))}
    common = {"base": DRIVER_BASE_MB * MB}
    if s.precond_rank:
        common["precond"] = float(precond_bytes(p, s.precond_rank))
    if backend == "local":
        common["X"] = float(x_bytes(s.z, s.n))
    kept = 0 if s.spilled else 1  # spilled images count in the basis's chunks
    one = basis | {
        "images": kept * float(images_bytes(p, min((s.lanczos_iterations - 1) * b, cap)))
    }
    if backend == "local":
        one["cg"] = float(cg_bytes(p, b, 8))
        one["xv"] = 4.0 * s.n * b
    else:
        one["solve"] = float(solve_bytes(p, b))
        unfused = sum(s.terms[lang] for lang in s.languages if not s.fused(lang))
        one["cg_unfused"] = float(cg_bytes(unfused, b, 8))
    rows = s.n if s.ct_language_rows else len(s.languages) * k
    two = basis | {
        "images": kept * float(images_bytes(p, min(s.lanczos_iterations * b, cap))),
        "solve": 8.0 * p * b,
        "ct_results": float(ct_results_bytes(k + rows, b)),
    }
    # Moment 3, the eigensolver's result (block_lanczos.py result(); before
    # ``images_only_result`` also the K x r float64 Ritz vectors): the images buffer and the
    # Ritz vectors' images (float32 p x r); before ``basis_freed_result`` the basis too
    # (then the peak when b << r).
    freed = s.basis_freed_result and s.images_only_result and not s.spilled
    three = ({} if freed else basis) | {
        "images": kept * float(images_bytes(p, min(s.lanczos_iterations * b, cap))),
        # Φ's own step comes after the basis and the images are freed (Φᵀ over Φ*ᵀ since
        # ``phi_in_place``; 8 p r before, beside the images until they were freed); before
        # phi_float32 its float64 copies (24 p r) were the larger
        "ritz_images": float(ritz_images_bytes(p, s.r)) if s.phi_float32 else 24.0 * p * s.r,
    }
    if s.phi_float32 and not s.images_only_result:
        three["ritz_images"] = 8.0 * p * s.r  # the older Φ step (Φ*ᵀ and Φᵀ, float32)
    if not s.images_only_result:  # the Ritz vectors, K x (r + oversampling) float64
        three["ritz_vectors"] = 8.0 * k * s.r
    peak = max(one, two, three, key=lambda d: sum(d.values()))
    parts = common | peak
    return (
        {key: v / MB for key, v in parts.items()}
        | {"moment": 1.0 if peak is one else (2.0 if peak is two else 3.0)}
        | {"total": sum(parts.values()) / MB}
    )


def executor_mb(s: Sizes) -> dict[str, float]:
    """Per executor: the cached X (~8 bytes per nonzero, serialized CSR) spread over the
    executors; per fused-solve task, the gathered X_l of the largest fused language (24
    bytes per nonzero at peak) and its CG vectors (at most train.solve_in_task_memory_mb =
    512 MB)."""
    fused = [s.nnz[lang] for lang in s.languages if s.fused(lang)]
    return {
        "jvm_cached_X": 8.0 * s.z / s.executors / MB,
        "python_per_solving_task": (24.0 * max(fused, default=0)) / MB + 512.0,
        "broadcast_per_pass": 4.0 * max(max(s.terms.values()), s.concepts) * s.block / MB,
    }


# --------------------------------------------------------------------------- runs


def _read(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def _solver(path: Path, stage: str) -> dict[str, Any]:
    solver = _read(path)["stages"][stage]["report"].get("solver")
    if solver:
        return solver
    side = path.with_name(path.stem + ".history.json")
    if not side.exists():
        raise SystemExit(f"{path}: no solver summary in {stage} and no {side.name}")
    return _read(side)[stage]


def sizes_of_run(path: Path, stage: str = "train") -> Sizes:
    """Sizes of a bench_chain.py run, with its solver's measured iteration counts."""
    run = _read(path)
    per = run["corpus"]["per_language"]
    solver = _solver(path, stage)
    eig = [x for x in solver["solves"] if str(x["stage"]).startswith("cr5/eig")]
    w = [x for x in solver["solves"] if x["stage"] == "cr5/w"]
    langs = sorted(per)
    return Sizes(
        nnz={lang: int(per[lang]["nnz"]) for lang in langs},
        terms={lang: int(per[lang]["vocabulary"]) for lang in langs},
        docs={lang: int(per[lang]["documents"]) for lang in langs},
        concepts=int(run["corpus"]["concepts"]),
        r=int(run["r"]),
        block=int(solver["block_size"]),
        lanczos_iterations=int(solver.get("eigensolver_iterations") or len(eig)),
        cg_iterations=[{lang: float(x["n_iter"][lang]) for lang in langs} for x in eig],
        w_iterations={lang: float(w[0]["n_iter"][lang]) for lang in langs} if w else {},
        cores=int(run["machine"].get("cores") or 2),
        max_basis=solver.get("max_basis"),
        ct_language_rows="ct_language_rows" in run.get("solver_features", []),
        phi_float32="phi_float32" in run.get("solver_features", []),
        basis_float32="basis_float32" in run.get("solver_features", []),
        images_only_result="images_only_result" in run.get("solver_features", []),
        basis_freed_result="basis_freed_result" in run.get("solver_features", []),
        resident="resident_workers" in run.get("solver_features", []),
        tasks_per_language="fused_tasks" in run.get("solver_features", []),
        **(
            _overridden_sizes(run.get("overrides", []))
            | _placement_sizes(run["stages"].get(stage, {}))
        ),
    )


def _overridden_sizes(overrides: list[str]) -> dict[str, Any]:
    """Sizes fields a run set with ``--set`` (e.g. train.solve_in_task_max_nnz)."""
    out: dict[str, Any] = {}
    for item in overrides:
        key, _, value = item.partition("=")
        if key == "train.solve_in_task_max_nnz" and value not in ("", "null"):
            out["solve_in_task_max_nnz"] = int(value)
        if key == "train.spill_dir" and value not in ("", "null"):
            out["spilled"] = True
    return out


def _placement_sizes(record: dict[str, Any]) -> dict[str, Any]:
    """The fused limit and resident languages a Spark train stage ran with: what the memory
    plan chose (its record's ``report.placement``, from model.json's ``training.placement``;
    backfilled from the backend's log line into runs recorded before that), and ``spilled``
    when the plan put the basis and images in files (``report.planned_solver_settings``);
    nothing for a local-backend stage or a run without them."""
    report = record.get("report") or {}
    out: dict[str, Any] = {}
    if (report.get("planned_solver_settings") or {}).get("spill_dir"):
        out["spilled"] = True
    placement = report.get("placement")
    if not placement:
        return out
    return out | {
        "solve_in_task_max_nnz": int(placement["solve_in_task_max_nnz"]),
        "resident_langs": list(placement["resident"]),
    }


STAGES = (("train_local", "local"), ("train", "spark"))


@dataclass
class Observed:
    """What one train stage of a run measured: totals and the phases fitted on."""

    fit_s: float
    driver_mb: float
    warm: float
    solve_seconds: list[dict[str, float]]  # per eigensolver solve, per language
    bytes_moved: float

    @property
    def rest(self) -> float:
        return self.fit_s - self.warm - sum(max(x.values()) for x in self.solve_seconds)


def observed(path: Path, stage: str) -> Observed:
    st = _read(path)["stages"][stage]
    rep = st["report"]
    solver = _solver(path, stage)
    eig = [x for x in solver["solves"] if str(x["stage"]).startswith("cr5/eig")]
    timings = solver.get("timings") or rep["solver"]["timings"]
    sp = st.get("spark", {})
    return Observed(
        fit_s=float(rep["fit_s"]),
        driver_mb=float(st["peak_mb"]["driver_python_hwm"]),
        warm=float(timings["warm_start"]),
        solve_seconds=[{k: float(v) for k, v in x["seconds"].items()} for x in eig],
        bytes_moved=float(sp.get("broadcast_bytes", 0)) + float(sp.get("result_bytes", 0)),
    )


def _finish_order(obs: Observed) -> list[list[str]]:
    return [sorted(x, key=x.__getitem__) for x in obs.solve_seconds]


# --------------------------------------------------------------------------- calibration


def residuals(mc: Machine, data: list[tuple[Sizes, Observed, str]]) -> list[float]:
    """log(predicted / measured) of the phases: the warm start, the rest of the fit (1 each)
    and every language's seconds in every eigensolver solve (weight 1/L each)."""
    out = []
    for s, obs, backend in data:
        kw = {"order": _finish_order(obs)} if backend == "spark" else {}
        pr = predict(s, mc, backend, **kw)
        out.append(math.log(pr.warm / obs.warm))
        out.append(math.log(max(pr.rest, 1e-3) / max(obs.rest, 1e-3)))
        w = 1.0 / math.sqrt(len(s.languages))
        for got, want in zip(pr.solve_finish, obs.solve_seconds, strict=False):
            out += [w * math.log(got[lang] / want[lang]) for lang in want]
    return out


def calibrate(paths: Sequence[Path]) -> Machine:
    """Least squares (in log space, so every constant stays positive) of the fitted machine
    constants over the phases of the runs' local and Spark train stages."""
    from scipy.optimize import least_squares

    data = []
    for path in paths:
        stages = _read(path)["stages"]
        data += [
            (sizes_of_run(path, st), observed(path, st), be) for st, be in STAGES if st in stages
        ]
    start = Machine()
    names = Machine.FITTED
    x0 = [math.log(getattr(start, n)) for n in names]

    def fun(x: Sequence[float]) -> list[float]:
        mc = replace(start, **{n: math.exp(v) for n, v in zip(names, x, strict=True)})
        return residuals(mc, data)

    res = least_squares(fun, x0, method="trf", x_scale=1.0)
    return replace(start, **{n: math.exp(v) for n, v in zip(names, res.x, strict=True)})


def check(path: Path, mc: Machine) -> list[dict[str, Any]]:
    rows = []
    stages = _read(path)["stages"]
    for stage, backend in STAGES:
        if stage not in stages:
            continue
        s, obs = sizes_of_run(path, stage), observed(path, stage)
        pr = predict(s, mc, backend)
        d = driver_mb(s, backend)["total"]
        rows.append(
            {
                "run": path.stem,
                "stage": stage,
                "nnz": s.z,
                "fit_s": (round(pr.total, 1), obs.fit_s, round(pr.total / obs.fit_s, 2)),
                "driver_mb": (round(d), round(obs.driver_mb), round(d / obs.driver_mb, 2)),
                "bytes": (pr.bytes_moved, obs.bytes_moved),
            }
        )
    return rows


# --------------------------------------------------------------------------- embed, evaluate


def _docs_and_pairs(path: Path) -> tuple[int, float, dict[str, Any]]:
    run = _read(path)
    dirs = [x for x in run["quality"]["directions"] if x["measure"] == "cosine"]
    pairs = float(sum(x["n_queries"] * x["n_candidates"] for x in dirs))
    return int(run["stages"]["embed"]["report"]["documents"]), pairs, run["stages"]


def fit_stages(path: Path, job_s: float = Machine.job_s) -> dict[str, float]:
    """Embed: wall = F_embed + n·t_doc, F_embed = the stage's wall outside embed_seconds
    (session, model load and checksum, counts), t_doc = embed_seconds per document.
    Evaluate: retrieval seconds (report.test_s) = J·job_s + t_pair·Σ queries x candidates,
    J = the stage's Spark jobs, job_s measured separately."""
    docs, pairs, st = _docs_and_pairs(path)
    emb, ev = st["embed"], st["evaluate"]
    jobs = float(ev["spark"]["jobs"])
    return {
        "embed_fixed_s": emb["wall_s"] - emb["report"]["embed_s"],
        "embed_s_per_doc": emb["report"]["embed_s"] / docs,
        "retrieval_s_per_pair": (ev["report"]["test_s"] - jobs * job_s) / pairs,
    }


def check_stages(path: Path, consts: dict[str, float], job_s: float = Machine.job_s) -> dict:
    docs, pairs, st = _docs_and_pairs(path)
    emb, ev = st["embed"], st["evaluate"]
    e = consts["embed_fixed_s"] + docs * consts["embed_s_per_doc"]
    t = float(ev["spark"]["jobs"]) * job_s + pairs * consts["retrieval_s_per_pair"]
    return {
        "embed_wall": (round(e, 1), emb["wall_s"], round(e / emb["wall_s"], 2)),
        "retrieval": (round(t, 1), ev["report"]["test_s"], round(t / ev["report"]["test_s"], 2)),
    }


# --------------------------------------------------------------------------- paper


def paper_settings() -> dict[str, Sizes]:
    """The paper's settings (Josifoski et al., WSDM 2019): 200k terms per language, r = 300.

    Document and nonzero counts are estimates from the paper's description (training
    documents with 50-1,000 unique words; every concept in >= 2 languages); the cores are
    a cluster's (32 executors x 4 cores) with conf/cluster.yaml (fused solves up to 64M
    nonzeros, solve_tasks null). The block is narrow at r = 300
    (pipeline.linalg.params.default_block_size: b = 25) and needs ~35 Lanczos iterations
    (measured on the 200k synthetic corpus at r = 300 with the current defaults, 28 on the
    DDTP corpus; bench/README.md); CG iterations 20 per solve at train.cg_rtol = 0.03 (0.67x
    those at 0.01 in bench_knobs; the chain runs at 0.01: 14-40) and 30 for w at its default
    tolerance cg_rtol / 30 (24 on the 200k Wikipedia-shaped corpus, bench_w_rtol.py; 77-106
    at the earlier 1e-6).
    """

    def setting(docs: dict[str, int], concepts: int) -> Sizes:
        avg_unique = 250
        iters = 35
        return Sizes(
            nnz={lang: n * avg_unique for lang, n in docs.items()},
            terms=dict.fromkeys(docs, 200_000),
            docs=dict(docs),
            concepts=concepts,
            r=300,
            block=default_block_size(300, CR5_DEFAULTS.oversampling, warm=True),  # 25
            lanczos_iterations=iters,
            cg_iterations=[dict.fromkeys(docs, 20.0)] * iters,
            w_iterations=dict.fromkeys(docs, 30.0),
            cores=4,
            executors=32,
            solve_in_task_max_nnz=64_000_000,  # conf/cluster.yaml
            precond_rank=32,
        )

    four = {"en": 3_000_000, "it": 1_000_000, "da": 200_000, "vi": 800_000}
    big = ["en", "de", "fr", "es", "it", "ru", "ja", "zh", "pt", "pl", "nl", "sv", "uk", "vi"]
    rest = [f"l{i}" for i in range(14)]
    twenty_eight = dict.fromkeys(big, 1_000_000) | dict.fromkeys(rest, 200_000)
    twenty_eight["en"] = 3_000_000
    return {
        "4 languages": setting(four, 2_500_000),
        "28 languages": setting(twenty_eight, 6_000_000),
    }


# --------------------------------------------------------------------------- report


def _table(rows: list[dict[str, Any]], title: str) -> None:
    print(
        f"\n{title}\n| run | stage | nnz | fit predicted / measured [s] | ratio | driver "
        "predicted / measured [MB] | ratio | bytes moved predicted / recorded [GB] |\n"
        "|---|---|---|---|---|---|---|---|"
    )
    for row in rows:
        t, d, by = row["fit_s"], row["driver_mb"], row["bytes"]
        moved = f"{by[0] / 1e9:.2f} / {by[1] / 1e9:.2f}" if row["stage"] == "train" else "-"
        print(
            f"| {row['run']} | {row['stage']} | {row['nnz']:,} | {t[0]} / {t[1]} | {t[2]} "
            f"| {d[0]:,} / {d[1]:,} | {d[2]} | {moved} |"
        )


def _print_constants(label: str, mc: Machine) -> None:
    vals = ", ".join(f"{k}={v:.3g}" for k, v in asdict(mc).items())
    print(f"machine constants ({label}): {vals}")


#: The clusters the paper's settings are predicted on: (executors, cores per executor).
PAPER_CLUSTERS = ((32, 4), (4, 4))


def _paper(mc: Machine) -> None:
    for (name, base), (executors, cores) in itertools.product(
        paper_settings().items(), PAPER_CLUSTERS
    ):
        s = replace(base, executors=executors, cores=cores)
        pr = predict_spark(s, mc)
        d = driver_mb(s, "spark")
        spilled = driver_mb(replace(s, spilled=True), "spark")
        e = executor_mb(s)
        unfused = [lang for lang in s.languages if not s.fused(lang)]
        skip = ("total", "moment")
        print(
            f"\n{name}: nnz {s.z:,}, K {s.concepts:,}, p {s.p:,}, r {s.r}, b {s.block}, basis "
            f"{s.basis_cap()} columns, {s.executors} x {s.cores} cores; one job per CG "
            f"iteration (above 64M nonzeros): {', '.join(unfused) or 'none'}\n"
            f"  fit ~{pr.total / 3600:.1f} h (warm start {pr.warm:.0f} s, solves "
            f"{sum(pr.solves):.0f} s, eigensolver products {pr.products:.0f} s, dense "
            f"{pr.dense:.0f} s); {pr.bytes_moved / 1e12:.2f} TB broadcast + collected\n"
            f"  driver Python ~{d['total'] / 1024:.1f} GB "
            f"({', '.join(f'{k} {v / 1024:.1f}' for k, v in d.items() if k not in skip)}); "
            f"with train.spill_dir ~{spilled['total'] / 1024:.1f} GB "
            f"({', '.join(f'{k} {v / 1024:.1f}' for k, v in spilled.items() if k not in skip)})\n"
            f"  executor: cached X {e['jvm_cached_X'] / 1024:.1f} GB (JVM), fused-solve "
            f"task {e['python_per_solving_task'] / 1024:.1f} GB (Python), broadcast "
            f"{e['broadcast_per_pass']:.0f} MB per pass"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--calibrate", type=Path, nargs="+", help="bench_chain.py runs (JSON) to fit on"
    )
    ap.add_argument(
        "--extract",
        type=Path,
        nargs=2,
        metavar=("WORKDIR", "OUT"),
        help="write the solver summaries of a bench_chain.py work directory's models to OUT "
        "(<run>.history.json, for runs recorded before the train records carried them)",
    )
    ap.add_argument("--check", type=Path, nargs="*", default=[], help="further runs to predict")
    ap.add_argument(
        "--leave-one-out",
        action="store_true",
        help="also fit on each calibration run alone and predict the others",
    )
    ap.add_argument("--paper", action="store_true", help="apply to the paper's settings")
    ap.add_argument(
        "--what-if",
        type=Path,
        metavar="RUN",
        help="predict the Spark fit of RUN's corpus with the sizes of --with changed (e.g. "
        "r=300 block=25 lanczos_iterations=35), its last eigensolver iteration's CG counts "
        "repeated",
    )
    ap.add_argument(
        "--with",
        dest="changes",
        nargs="*",
        default=[],
        metavar="FIELD=VALUE",
        help="Sizes fields for --what-if (resident_langs as a comma list, none for [])",
    )
    args = ap.parse_args(argv)
    if args.extract:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        from bench.bench_chain import solver_summary

        workdir, out = args.extract
        summaries = {}
        for stage, model in (("train", "model"), ("train_local", "model_local")):
            meta = workdir / "out" / model / "model.json"
            if meta.exists():
                hist = _read(meta)["solver"]["history"]
                summaries[stage] = solver_summary(hist)
        out.write_text(json.dumps(summaries, indent=1))
        print(f"wrote {out}: {sorted(summaries)}")
        return 0
    if not args.calibrate:
        ap.error("--calibrate is required")
    runs = list(args.calibrate)
    fits: list[tuple[str, list[Path], list[Path]]] = [("joint", runs, runs + args.check)]
    if args.leave_one_out and len(runs) > 1:
        fits += [(f"on {p.stem} only", [p], [q for q in runs if q != p] + args.check) for p in runs]
    mc_joint = None
    for label, cal, targets in fits:
        mc = calibrate(cal)
        mc_joint = mc_joint or mc
        _print_constants(label, mc)
        _table([row for path in targets for row in check(path, mc)], f"fit {label}:")
        for path in targets:
            consts = fit_stages(cal[0]) if len(cal) == 1 else _mean_stage_constants(cal)
            print(f"  {path.stem} embed / retrieval: {check_stages(path, consts)}")
    if args.paper:
        assert mc_joint is not None
        _paper(mc_joint)
    if args.what_if:
        assert mc_joint is not None
        _what_if(args.what_if, args.changes, mc_joint)
    return 0


def _what_if(path: Path, changes: Sequence[str], mc: Machine) -> None:
    """The Spark fit and driver peak of ``path``'s corpus with some sizes changed."""
    s = sizes_of_run(path, "train")
    kw: dict[str, Any] = {}
    for item in changes:
        key, _, value = item.partition("=")
        if key == "resident_langs":
            kw[key] = [] if value == "none" else value.split(",")
        else:
            kw[key] = int(value)
    if "max_basis" not in kw and {"r", "block"} & set(kw):
        kw["max_basis"] = None  # the run's recorded basis belongs to its r and b
    iters = kw.get("lanczos_iterations", s.lanczos_iterations)
    kw["cg_iterations"] = [s.cg_iterations[-1]] * iters
    s = replace(s, **kw)
    pr = predict(s, mc, "spark")
    fused = [lang for lang in s.languages if s.fused(lang)]
    resident = [lang for lang in s.languages if s.is_resident(lang)]
    print(
        f"\nwhat if {path.stem} with {' '.join(changes)}: fused {fused}, resident {resident}: "
        f"Spark fit ~{pr.total:,.0f} s (warm start {pr.warm:,.0f}, solves "
        f"{sum(pr.solves):,.0f}, products {pr.products:,.0f}, dense {pr.dense:,.0f}); driver "
        f"~{driver_mb(s, 'spark')['total'] / 1024:.1f} GB"
    )


def _mean_stage_constants(paths: Sequence[Path]) -> dict[str, float]:
    """Embed and evaluate constants of several runs: fixed parts averaged, per-unit costs
    from the summed work (least squares of a proportional model weights by size)."""
    fits = [fit_stages(p) for p in paths]
    out = {"embed_fixed_s": sum(f["embed_fixed_s"] for f in fits) / len(fits)}
    docs, pairs, emb, ret = 0.0, 0.0, 0.0, 0.0
    for p in paths:
        d, pr, st = _docs_and_pairs(p)
        docs += d
        pairs += pr
        emb += st["embed"]["report"]["embed_s"]
        ret += st["evaluate"]["report"]["test_s"] - st["evaluate"]["spark"]["jobs"] * Machine.job_s
    out["embed_s_per_doc"] = emb / docs
    out["retrieval_s_per_pair"] = ret / pairs
    return out


if __name__ == "__main__":
    sys.exit(main())
