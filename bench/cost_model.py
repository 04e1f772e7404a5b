"""Cost model of the train stage: passes, time and memory from the corpus sizes.

The formulas are documented in ``docs/scaling.md``; this script evaluates them, fits their
machine constants on one ``bench_chain.py`` run, checks the predictions against the other
runs (ratio predicted / measured), and applies them to the paper's settings.

Usage (repository root)::

    .venv/bin/python bench/cost_model.py --calibrate bench/results/chain_100k.json \\
        --check bench/results/chain_10k.json bench/results/chain_1M.json
    .venv/bin/python bench/cost_model.py --calibrate bench/results/chain_100k.json --paper

A run's solver summary (block width, Lanczos iterations, CG iterations per solve) comes from
its train record (``report.solver``, written by bench_chain.py) or, for runs recorded before
that field existed, from ``<run>.history.json`` beside it (the model.json ``solver.history``).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

MB = 2**20

# --------------------------------------------------------------------------- sizes


@dataclass
class Sizes:
    """What the model needs to know about a training run."""

    nnz: dict[str, int]  # nonzeros per language
    terms: dict[str, int]  # p_l
    concepts: int  # K
    r: int
    block: int  # b, the eigensolver's block width
    lanczos_iterations: int = 2  # I
    start_steps: int = 2  # s (surrogate warm start)
    cg_iterations: dict[str, float] = field(default_factory=dict)  # q_l per M application
    w_iterations: dict[str, float] = field(default_factory=dict)  # q_w (one column, once)
    cores: int = 2  # executor cores (local[N]: N)
    executors: int = 1
    solve_in_task_max_nnz: int = 125_000_000  # the auto default on a 24 GB machine, local[2]

    @property
    def languages(self) -> list[str]:
        return list(self.nnz)

    @property
    def p(self) -> int:
        return sum(self.terms.values())

    def max_basis(self) -> int:
        """train.max_basis default: max(r, b) + 4b (pipeline.linalg.cr5.default_max_basis)."""
        return max(self.r, self.block) + 4 * self.block

    def basis_columns(self) -> int:
        """Columns the basis reaches: the start block plus one block per iteration, capped."""
        return min(self.max_basis(), (self.lanczos_iterations + 1) * self.block)

    def image_columns(self) -> int:
        """Kept images Â⁻¹CV: one column per applied basis column, capped like the basis."""
        return min(self.max_basis(), self.lanczos_iterations * self.block)


# --------------------------------------------------------------------------- passes


def passes(s: Sizes) -> dict[str, dict[str, float]]:
    """Column-passes over X_l per kind and language (one column through one X_l product).

    * C products (xt_gather X_lᵀ P[c_l], x_scatter Y_lᵀ X_l V): ``s + I`` each, ``b`` columns
      (the warm start's surrogate steps, then one C and one Cᵀ per Lanczos iteration);
    * gram X_lᵀ(X_l V): the Woodbury vector's solve (``q_w`` iterations, one column) plus
      ``q_l`` CG iterations of ``b`` columns per Lanczos iteration (Φ reuses these solves).
    """
    out: dict[str, dict[str, float]] = {}
    for lang in s.languages:
        q = s.cg_iterations.get(lang, 30.0)
        out[lang] = {
            "xt_gather": (s.start_steps + s.lanczos_iterations) * s.block,
            "x_scatter": (s.start_steps + s.lanczos_iterations) * s.block,
            "gram": s.w_iterations.get(lang, 100.0) + q * s.lanczos_iterations * s.block,
        }
    return out


def flops(s: Sizes) -> dict[str, float]:
    """Sparse flops per language: 2 per nonzero and column of X or Xᵀ (gram does both)."""
    out = {}
    for lang, kinds in passes(s).items():
        z = s.nnz[lang]
        out[lang] = 2.0 * z * (kinds["xt_gather"] + kinds["x_scatter"] + 2 * kinds["gram"])
    return out


#: Bytes block CG streams per row of X_l's columns, per right-hand side and iteration: the
#: preconditioner, two dot products, three axpys, the residual norm and the operator's
#: gather/cast/scatter of the block, ~19 float64 reads or writes (pipeline/linalg/block_cg.py).
CG_BYTES_PER_ROW = 150


def cg_vector_bytes(s: Sizes) -> float:
    """Memory traffic of block CG's vector work: it scales with p_l x b, not with the
    nonzeros, so it dominates where documents are short relative to the vocabulary
    (100k documents here: 33 nonzeros per term against 246 at 1M)."""
    total = 0.0
    for lang in s.languages:
        q = s.cg_iterations.get(lang, 30.0)
        cols = s.w_iterations.get(lang, 100.0) + q * s.lanczos_iterations * s.block
        total += CG_BYTES_PER_ROW * s.terms[lang] * cols
    return total


def measure_bandwidth() -> float:
    """Bytes per second one core streams through ``a += 0.5 * b`` (4 float64 streams)."""
    import time

    import numpy as np

    n = 32_000_000  # 256 MB per array: beyond any cache, like p_l x b CG blocks
    a, b = np.ones(n), np.ones(n)
    a += 0.5 * b
    t = time.perf_counter()
    for _ in range(5):
        a += 0.5 * b
    return 4 * 8 * n * 5 / (time.perf_counter() - t)


def dense_flops(s: Sizes) -> float:
    """Driver-side dense work: twice Gram-Schmidt of each new block against the basis
    (2 x 2Kmb), the Rayleigh-Ritz (m³) per iteration, Φ* = (images) S (2 p m r)."""
    k, b, m = s.concepts, s.block, s.basis_columns()
    per_iter = 2 * 2.0 * k * m * b + float(m) ** 3
    return s.lanczos_iterations * per_iter + 2.0 * s.p * s.image_columns() * s.r


# --------------------------------------------------------------------------- constants


@dataclass
class Machine:
    """Machine constants, fitted on one run (:func:`calibrate`)."""

    sparse_flops_per_core: float = 1.0e9  # effective rate of the float32 sparse products
    dense_flops: float = 5.0e9  # driver BLAS, one thread
    seconds_per_read_nnz: float = 5e-8  # Spark: one task reading one cached nonzero
    bytes_per_second: float = 5.8e9  # one core streaming numpy arrays (measure_bandwidth)
    python_base_mb: float = 200.0  # interpreter, numpy, pyspark, pyarrow


def spark_jobs(s: Sizes) -> dict[str, float]:
    """Spark jobs per language: one per C pass (``2 (s + I)``), and per solve one job when
    the language is fused (``nnz_l <= solve_in_task_max_nnz``), else one per CG iteration."""
    out = {}
    for lang in s.languages:
        c_jobs = 2 * (s.start_steps + s.lanczos_iterations)
        if s.nnz[lang] <= s.solve_in_task_max_nnz:
            out[lang] = c_jobs + 1 + s.lanczos_iterations
        else:
            q = s.cg_iterations.get(lang, 30.0)
            out[lang] = c_jobs + s.w_iterations.get(lang, 100.0) + q * s.lanczos_iterations
    return out


def spark_reads(s: Sizes) -> float:
    """Cached nonzeros read from the executors' block cache over the fit: a fused job's
    ``solve_tasks`` (= cores per executor) tasks each read all of X_l; an unfused pass
    reads each block once. Reading (JVM cache -> Python worker, unpickling) is what a
    Spark pass costs beyond the products."""
    reads = 0.0
    for lang, jobs in spark_jobs(s).items():
        fused = s.nnz[lang] <= s.solve_in_task_max_nnz
        reads += s.nnz[lang] * jobs * (s.cores if fused else 1)
    return reads


def fit_seconds(s: Sizes, mc: Machine, backend: str) -> dict[str, float]:
    """Predicted fit time: the languages' sparse work over the cores, the driver's dense
    work, and for Spark the reading of the cached blocks (:func:`spark_reads`).

    The local backend runs one thread per language and each language's products on one
    core, so the largest language bounds it (``max_l``); the Spark backend splits a fused
    solve's columns over ``solve_tasks`` tasks and a C pass over the row blocks."""
    fl = flops(s)
    total = sum(fl.values())
    cores = s.cores * s.executors
    work = total / cores if backend == "spark" else max(total / cores, max(fl.values()))
    sparse = work / mc.sparse_flops_per_core
    dense = dense_flops(s) / mc.dense_flops
    vectors = cg_vector_bytes(s) / (mc.bytes_per_second * cores)
    reads = spark_reads(s) * mc.seconds_per_read_nnz / cores if backend == "spark" else 0.0
    total = sparse + dense + vectors + reads
    return {"sparse": sparse, "dense": dense, "vectors": vectors, "reads": reads, "total": total}


def driver_mb(s: Sizes, mc: Machine, backend: str) -> dict[str, float]:
    """Peak driver Python memory.

    * basis V, one preallocated K x m float64 buffer (block Lanczos appends and restarts in
      place): 8·K·m;
    * kept images Â⁻¹CV (p x I·b float32): 4·p·I·b;
    * per language in flight, the right-hand sides, solutions and merged partials:
      ~3 p_l x b float64 blocks (24·p·b);
    * local backend only: X (float32 values + int32 indices: 8·nnz, with row pointers and
      the Arrow load transient ~12·nnz) and block CG's vectors, ~9 float64 p_l x b arrays per
      concurrently solving language (72·p·b).
    Nothing here grows with the iteration count: m is capped by train.max_basis.
    """
    k, p, b = s.concepts, s.p, s.block
    parts = {
        "python": mc.python_base_mb * MB,
        "basis": 8.0 * k * s.basis_columns(),
        "images": 4.0 * p * s.image_columns(),
        "blocks": 24.0 * p * b,
    }
    if backend == "local":
        z = sum(s.nnz.values())
        parts["X"] = 12.0 * z
        parts["cg"] = 72.0 * p * b
    return {key: v / MB for key, v in parts.items()} | {"total": sum(parts.values()) / MB}


def executor_mb(s: Sizes, solve_tasks: int | None = None) -> dict[str, float]:
    """Per executor: the cached X (~8 bytes per nonzero, serialized CSR) spread over the
    executors; per fused-solve task, the gathered X_l of the largest fused language (24
    bytes per nonzero at peak) and its CG vectors (at most train.solve_in_task_memory_mb =
    512 MB)."""
    z = sum(s.nnz.values())
    fused = [n for n in s.nnz.values() if n <= s.solve_in_task_max_nnz]
    big = max(fused, default=0)
    return {
        "jvm_cached_X": 8.0 * z / s.executors / MB,
        "python_per_solving_task": (24.0 * big) / MB + 512.0,
        "broadcast_per_pass": 4.0 * max(max(s.terms.values()), s.concepts) * s.block / MB,
    }


# --------------------------------------------------------------------------- runs


def _read(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def sizes_of_run(path: Path, stage: str = "train") -> Sizes:
    """Sizes of a bench_chain.py run, with its solver's measured iteration counts."""
    run = _read(path)
    per = run["corpus"]["per_language"]
    rec = run["stages"][stage]["report"]
    solver = rec.get("solver")
    if not solver:
        side = path.with_name(path.stem + ".history.json")
        if not side.exists():
            raise SystemExit(f"{path}: no solver summary in {stage} and no {side.name}")
        solver = _read(side)[stage]
    eig = [x for x in solver["solves"] if str(x["stage"]).startswith("cr5/eig")]
    w = [x for x in solver["solves"] if x["stage"] == "cr5/w"]
    langs = sorted(per)
    cg = {lang: sum(x["n_iter"][lang] for x in eig) / max(1, len(eig)) for lang in langs}
    return Sizes(
        nnz={lang: int(per[lang]["nnz"]) for lang in langs},
        terms={lang: int(per[lang]["vocabulary"]) for lang in langs},
        concepts=int(run["corpus"]["concepts"]),
        r=int(run["r"]),
        block=int(solver["block_size"]),
        lanczos_iterations=int(solver.get("eigensolver_iterations") or len(eig)),
        cg_iterations=cg,
        w_iterations={lang: float(w[0]["n_iter"][lang]) for lang in langs} if w else {},
        cores=int(run["machine"].get("cores") or 2),
    )


def measured(path: Path, stage: str) -> dict[str, float]:
    st = _read(path)["stages"][stage]
    return {
        "fit_s": float(st["report"]["fit_s"]),
        "driver_mb": float(st["peak_mb"]["driver_python_hwm"]),
    }


def calibrate(path: Path) -> Machine:
    """Fit the sparse rate on the local fit (sparse + dense work, no Spark) and the per-job
    cost on the Spark fit of the same run; the Python base from the Spark driver's peak."""
    mc = Machine(bytes_per_second=measure_bandwidth())
    s = sizes_of_run(path, "train_local")
    loc = measured(path, "train_local")
    dense = dense_flops(s) / mc.dense_flops
    dense += cg_vector_bytes(s) / (mc.bytes_per_second * s.cores * s.executors)
    fl = flops(s)
    work = max(sum(fl.values()) / (s.cores * s.executors), max(fl.values()))
    mc.sparse_flops_per_core = work / max(loc["fit_s"] - dense, 1e-3)
    sp = sizes_of_run(path, "train")
    spk = measured(path, "train")
    mc.seconds_per_read_nnz = 0.0
    base = fit_seconds(sp, mc, "spark")["total"]
    cores = sp.cores * sp.executors
    mc.seconds_per_read_nnz = max(spk["fit_s"] - base, 0.0) * cores / spark_reads(sp)
    rest = driver_mb(sp, mc, "spark")["total"] - mc.python_base_mb
    mc.python_base_mb = max(spk["driver_mb"] - rest, 100.0)
    return mc


def check(path: Path, mc: Machine) -> list[dict[str, Any]]:
    rows = []
    stages = [("train_local", "local"), ("train", "spark")]
    for stage, backend in stages:
        if stage not in _read(path)["stages"]:
            continue
        s = sizes_of_run(path, stage)
        got = measured(path, stage)
        t = fit_seconds(s, mc, backend)["total"]
        d = driver_mb(s, mc, backend)["total"]
        rows.append(
            {
                "run": path.stem,
                "stage": stage,
                "nnz": sum(s.nnz.values()),
                "fit_s": (round(t, 1), got["fit_s"], round(t / got["fit_s"], 2)),
                "driver_mb": (round(d), round(got["driver_mb"]), round(d / got["driver_mb"], 2)),
            }
        )
    return rows


# --------------------------------------------------------------------------- paper


def paper_settings() -> dict[str, Sizes]:
    """The paper's settings (Josifoski et al., WSDM 2019): 200k terms per language, r = 300.

    Document and nonzero counts are estimates from the paper's description (training
    documents with 50-1,000 unique words; every concept in >= 2 languages); the cores are
    a cluster's (32 executors x 4 cores). The block is narrow at r = 300
    (pipeline.linalg.cr5.default_block_size: b = 50) and needs ~14 Lanczos iterations
    (measured on the 200k synthetic corpus at r = 300, bench/README.md).
    """

    def setting(docs: dict[str, int], concepts: int) -> Sizes:
        avg_unique = 250
        return Sizes(
            nnz={lang: n * avg_unique for lang, n in docs.items()},
            terms=dict.fromkeys(docs, 200_000),
            concepts=concepts,
            r=300,
            block=50,
            lanczos_iterations=14,
            cg_iterations=dict.fromkeys(docs, 30.0),
            w_iterations=dict.fromkeys(docs, 100.0),
            cores=4,
            executors=32,
            solve_in_task_max_nnz=64_000_000,  # conf/cluster.yaml
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calibrate", type=Path, help="a bench_chain.py run (JSON)")
    ap.add_argument(
        "--extract",
        type=Path,
        nargs=2,
        metavar=("WORKDIR", "OUT"),
        help="write the solver summaries of a bench_chain.py work directory's models to OUT "
        "(<run>.history.json, for runs recorded before the train records carried them)",
    )
    ap.add_argument("--check", type=Path, nargs="*", default=[], help="runs to predict")
    ap.add_argument("--paper", action="store_true", help="apply to the paper's settings")
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
    if args.calibrate is None:
        ap.error("--calibrate is required")
    mc = calibrate(args.calibrate)
    print(f"machine constants from {args.calibrate.name}: {json.dumps(asdict(mc))}")
    rows = [row for path in [args.calibrate, *args.check] for row in check(path, mc)]
    if rows:
        print(
            "\n| run | stage | nnz | fit predicted / measured [s] | ratio | driver predicted "
            "/ measured [MB] | ratio |\n|---|---|---|---|---|---|---|"
        )
        for row in rows:
            t, d = row["fit_s"], row["driver_mb"]
            print(
                f"| {row['run']} | {row['stage']} | {row['nnz']:,} | {t[0]} / {t[1]} | {t[2]} "
                f"| {d[0]:,} / {d[1]:,} | {d[2]} |"
            )
    if args.paper:
        cluster = Machine(**{**asdict(mc)})
        for name, s in paper_settings().items():
            t = fit_seconds(s, cluster, "spark")
            d = driver_mb(s, cluster, "spark")
            e = executor_mb(s)
            print(
                f"\n{name}: nnz {sum(s.nnz.values()):,}, K {s.concepts:,}, p {s.p:,}, r {s.r}, "
                f"b {s.block}, basis {s.basis_columns()} columns, "
                f"{s.executors} x {s.cores} cores\n"
                f"  fit ~{t['total'] / 3600:.1f} h (sparse {t['sparse']:.0f} s, dense "
                f"{t['dense']:.0f} s, CG vectors {t['vectors']:.0f} s, reading cached blocks "
                f"{t['reads']:.0f} s)\n"
                f"  driver Python ~{d['total'] / 1024:.1f} GB "
                f"({', '.join(f'{k} {v / 1024:.1f}' for k, v in d.items() if k != 'total')})\n"
                f"  executor: cached X {e['jvm_cached_X'] / 1024:.1f} GB (JVM), fused-solve "
                f"task {e['python_per_solving_task'] / 1024:.1f} GB (Python), broadcast "
                f"{e['broadcast_per_pass']:.0f} MB per pass"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
