"""Retrieval-evaluation benchmark: blocked exact cosine / CSLS against one dense matrix product.

Evaluates ``--queries`` queries against ``--candidates`` synthetic candidates (dimension ``--dim``,
float32; each query's true target is a noisy copy of it) with
:func:`pipeline.retrieval.cosine_retrieval` and :func:`pipeline.retrieval.csls_retrieval`
(``source="queries"``, k = 10), and reports their wall times as ratios to a single dense
matrix product of the same size (``queries × dim @ dim × candidates``), measured in the same run.
The dense product is the floor any exact evaluation pays; the blocked run never holds the
``n_q × n_c`` matrix (the dense product's output alone is ``4 n_q n_c`` bytes).

Peak memory is the process's maximum resident set size (``resource.getrusage``), sampled after
each phase; the dense product runs last so its output does not hide the retrieval's peak.

Usage::

    OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/bench_retrieval.py \\
        --out bench/results/retrieval.txt
"""

from __future__ import annotations

import os

# Must precede the numpy import (2-core shared machine: single-threaded BLAS).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import platform
import resource
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from pipeline.retrieval import (  # noqa: E402
    DEFAULT_BLOCK_C,
    DEFAULT_BLOCK_Q,
    cosine_retrieval,
    csls_retrieval,
    retrieval_metrics,
)

MB = 1024.0 * 1024.0


def peak_rss_mb() -> float:
    """Maximum resident set size of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def make_data(n_q: int, n_c: int, dim: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gaussian candidates; query i's target is a random candidate replaced by a noisy copy."""
    rng = np.random.default_rng(seed)
    candidates = np.empty((n_c, dim), dtype=np.float32)
    for lo in range(0, n_c, 50_000):  # float32 directly, in chunks: no float64 temporary
        hi = min(lo + 50_000, n_c)
        candidates[lo:hi] = rng.standard_normal((hi - lo, dim), dtype=np.float32)
    queries = rng.standard_normal((n_q, dim), dtype=np.float32)
    targets = rng.choice(n_c, size=n_q, replace=False).astype(np.int64)
    # cos(query, target) ≈ 1 / sqrt(1 + noise²): from 0.9 down to below the best random
    # candidate's cosine (≈ 4.5 / sqrt(r) for 200k candidates), so ranks spread out.
    noise = rng.uniform(0.5, 6.0, size=(n_q, 1)).astype(np.float32)
    unit_q = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    candidates[targets] = unit_q + noise * candidates[targets] / np.float32(np.sqrt(dim))
    return queries, candidates, targets


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--candidates", type=int, default=200_000)
    ap.add_argument("--dim", type=int, default=300)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--csls-k", type=int, default=10)
    ap.add_argument("--block-q", type=int, default=DEFAULT_BLOCK_Q)
    ap.add_argument("--block-c", type=int, default=DEFAULT_BLOCK_C)
    ap.add_argument("--repeats", type=int, default=3, help="timed rounds (min kept)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="also write the report here")
    args = ap.parse_args(argv)

    lines: list[str] = []

    def emit(msg: str = "") -> None:
        print(msg, flush=True)
        lines.append(msg)

    n_q, n_c, dim = args.queries, args.candidates, args.dim
    emit("# bench_retrieval: blocked exact retrieval vs one dense matrix product")
    emit(f"date            {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
    emit(f"machine         {platform.machine()}  {cpu_model()}")
    emit(
        f"cores           os.cpu_count()={os.cpu_count()}  "
        f"usable={len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else '?'}"
    )
    emit(
        f"threads         OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}  "
        f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}"
    )
    emit(f"load average    {' '.join(f'{x:.2f}' for x in os.getloadavg())} (1/5/15 min, at start)")
    emit(f"software        python {platform.python_version()}  numpy {np.__version__}")
    emit(
        f"sizes           queries={n_q}  candidates={n_c}  r={dim}  float32  k={args.k}  "
        f"csls_k={args.csls_k}  block_q={args.block_q}  block_c={args.block_c}  "
        f"repeats={args.repeats} (min reported)"
    )

    rss0 = peak_rss_mb()
    t0 = time.perf_counter()
    queries, candidates, targets = make_data(n_q, n_c, dim, args.seed)
    emit(
        f"data            {time.perf_counter() - t0:.2f} s to generate; candidates "
        f"{candidates.nbytes / MB:.0f} MiB, queries {queries.nbytes / MB:.1f} MiB"
    )
    rss_data = peak_rss_mb()
    emit(f"peak RSS        {rss0:.0f} MiB at start, {rss_data:.0f} MiB after data")
    emit()

    blocks = {"block_q": args.block_q, "block_c": args.block_c}

    def run_cosine() -> object:
        return cosine_retrieval(queries, candidates, targets, k=args.k, **blocks)

    def run_csls() -> object:
        return csls_retrieval(
            queries,
            candidates,
            targets,
            k=args.k,
            csls_k=args.csls_k,
            source="queries",
            **blocks,
        )

    def dense_product() -> None:
        out = queries @ candidates.T
        del out

    # Round-robin repeats (cosine, CSLS, dense) so that load from other processes on the
    # shared machine hits all three alike; round 1 runs the dense product last, so the peak-RSS
    # samples taken after the retrieval runs are not hidden by its n_q × n_c output. Wall and
    # process CPU time are both recorded: CPU time is much less sensitive to other tenants.
    phases = {"dense": dense_product, "cosine": run_cosine, "csls": run_csls}
    wall: dict[str, list[float]] = {name: [] for name in phases}
    cpu: dict[str, list[float]] = {name: [] for name in phases}
    rss: dict[str, float] = {}
    results: dict[str, object] = {}
    for rep in range(args.repeats):
        for name in ("cosine", "csls", "dense"):
            w0, c0 = time.perf_counter(), time.process_time()
            results[name] = phases[name]()
            wall[name].append(time.perf_counter() - w0)
            cpu[name].append(time.process_time() - c0)
            if rep == 0:
                rss[name] = peak_rss_mb()
    # Working memory of each phase alone: numpy reports its buffers to tracemalloc.
    traced: dict[str, float] = {}
    for name in ("cosine", "csls", "dense"):
        tracemalloc.start()
        phases[name]()
        traced[name] = tracemalloc.get_traced_memory()[1] / MB
        tracemalloc.stop()

    gflop = 2.0 * n_q * n_c * dim / 1e9
    labels = {"dense": "dense Q @ C.T", "cosine": "cosine retrieval", "csls": "CSLS retrieval"}
    emit(
        f"{'phase':18s} {'wall min':>9s} {'CPU min':>9s} {'wall/dense':>11s} {'CPU/dense':>10s} "
        f"{'median':>7s} {'peak RSS':>9s} {'traced':>9s}   wall runs (s) / per-round ratios"
    )
    for name in ("dense", "cosine", "csls"):
        round_ratios = [w / d for w, d in zip(wall[name], wall["dense"])]
        emit(
            f"{labels[name]:18s} {min(wall[name]):8.3f}s {min(cpu[name]):8.3f}s "
            f"{min(wall[name]) / min(wall['dense']):11.2f} "
            f"{min(cpu[name]) / min(cpu['dense']):10.2f} "
            f"{np.median(round_ratios):7.2f} {rss[name]:5.0f} MiB {traced[name]:5.1f} MiB   "
            f"{', '.join(f'{t:.2f}' for t in wall[name])} / "
            f"{', '.join(f'{r:.2f}' for r in round_ratios)}"
        )
    emit(
        f"dense product: {gflop:.0f} GFLOP, {gflop / min(wall['dense']):.1f} GFLOP/s at its best "
        f"run; its output alone is {4 * n_q * n_c / MB:.0f} MiB"
    )
    emit(
        "CSLS = 2 block-product passes: r_S (candidates × queries), then the ranking pass, "
        "which also yields r_T"
    )
    emit(
        "median: of the per-round wall ratios; peak RSS: process high-water mark after the "
        "phase's first run (data: "
        f"{rss_data:.0f} MiB); traced peak: tracemalloc peak of one extra run of the phase "
        "alone (its working memory, inputs excluded)"
    )
    cos_res, csls_res = results["cosine"], results["csls"]
    emit()
    for name, res in (("cosine", cos_res), ("csls", csls_res)):
        m = retrieval_metrics(res.ranks)
        vals = "  ".join(f"{key}={val:.4f}" for key, val in m.as_dict().items() if "@" in key)
        emit(
            f"quality {name:6s}  {vals}  MRR={m.mrr:.4f}  n_queries={m.n_queries}  "
            f"n_missing_targets={m.n_missing_targets}  median rank={np.median(res.ranks):.0f}"
        )

    emit(f"load average    {' '.join(f'{x:.2f}' for x in os.getloadavg())} (at end)")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
