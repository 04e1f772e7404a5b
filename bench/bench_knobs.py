#!/usr/bin/env python3
"""Which solver knobs trade time for quality: our train stage under several settings, one run.

Fits Cr5 (local backend, float32 passes) on one corpus with the solver defaults and then with
one or two knobs changed at a time, and reports wall and CPU time, eigensolver iterations,
passes over X and held-out P@1 (mean over directions, and the worst direction against the
first configuration, the defaults). The README's "Solver knobs" guide quotes this table.

Usage (repository root)::

    OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/bench_knobs.py --corpus ddtp --r 100 \\
        --repeats 3 --out bench/results/knobs_ddtp_r100.json > bench/results/knobs_ddtp_r100.txt

``--repeats N`` fits every configuration N times, alternating, and reports median times
(single fits drift by up to 1.5x on a shared machine).

``--corpus ddtp`` needs the full DDTP corpus of ``bench/build_ddtp_full.sh`` (``--corpus-path``,
default ``$DDTP_FULL`` or ``~/.cache/cr5/ddtp_full.parquet``); ``synthetic`` generates the
200k-document corpus of ``bench/bench_train.py``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import ast
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_train import median_walls, retrieval, validation_set
from bench.ddtp_sample import default_full_path, load_sample_corpus
from bench.machine import machine_info
from bench.synthetic import make_synthetic_corpus

#: (label, solver keyword overrides): the defaults first, then one knob at a time.
CONFIGS: list[tuple[str, dict]] = [
    ("defaults", {}),
    ("cg_rtol=0.01 (paper)", {"cg_rtol": 0.01}),
    ("cg_rtol=0.05", {"cg_rtol": 0.05}),
    ("block_size=r+oversampling", {"block_size": "wide"}),
    ("block_size=16", {"block_size": 16}),
    ("start_steps=4", {"start_steps": 4}),
    ("start_steps=0 (random start)", {"start_steps": 0}),
    ("eig_rtol=0.03", {"eig_rtol": 0.03}),
    ("stop_rule=validation", {"stop_rule": "validation"}),
    ("paper tolerances, wide block", {"cg_rtol": 0.01, "block_size": "wide"}),
    ("cg_dtype=float64", {"cg_dtype": "float64"}),
    # the thick-restart size (the 2M r = 300 run's memory plan narrowed it to 375)
    ("max_basis=375", {"max_basis": 375}),
    ("max_basis=500", {"max_basis": 500}),
    ("max_basis=600", {"max_basis": 600}),
    ("max_basis=800", {"max_basis": 800}),
    # wider blocks: fewer passes (Spark jobs) for more column-passes; a richer preconditioner
    ("block_size=40", {"block_size": 40}),
    ("block_size=50", {"block_size": 50}),
    ("precond_rank=96", {"precond_rank": 96}),
    # looser eigensolver solves (issue 48: the CG is ~80 % of the passes at r = 300)
    ("cg_rtol=0.1", {"cg_rtol": 0.1}),
    ("cg_rtol=0.1 + block_size=40", {"cg_rtol": 0.1, "block_size": 40}),
    ("cg_rtol=0.05 + block_size=40", {"cg_rtol": 0.05, "block_size": 40}),
    ("cg_rtol=0.05 + block_size=50", {"cg_rtol": 0.05, "block_size": 50}),
]


def parse_label(label: str) -> dict:
    """Overrides of a label outside :data:`CONFIGS`: ``"key=value + key=value"`` (values as
    Python literals), so any combination can be tried without editing the table."""
    out = {}
    for part in label.split("+"):
        key, sep, value = part.strip().partition("=")
        if not sep:
            raise SystemExit(f"--only: {part!r} is neither a known label nor key=value")
        try:
            out[key.strip()] = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError):
            out[key.strip()] = value.strip()
    return out


def fit_once(
    be: Any, args: argparse.Namespace, label: str, overrides: dict, validation: Any, corpus: Any
) -> dict | None:
    """One fit with the defaults changed by ``overrides``; its record (None: skipped)."""
    from pipeline.linalg import solve_cr5
    from pipeline.linalg.backend import passes_by_phase

    kw = {"lam": args.lam, "r": args.r, "seed": 0, **overrides}
    if kw.get("block_size") == "wide":
        kw["block_size"] = args.r + 20
    if kw.get("stop_rule") == "validation":
        if validation is None:
            print(f"-- {label}: skipped (no validation concepts)")
            return None
        kw["validation"] = validation
    be.reset_counts()
    w0, c0 = time.perf_counter(), time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = solve_cr5(be, **kw)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    ret = retrieval(res.components, corpus.test)
    h = res.history
    # CG iterations of the eigensolver's solves (stages cr5/eig<i>), per language and solve
    eig_cg = [n for rec in h["solves"] if "/eig" in rec["stage"] for n in rec["n_iter"].values()]

    return {
        "label": label,
        "overrides": {k: v for k, v in kw.items() if k not in ("validation",)},
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "block_size": h["block_size"],
        "eigensolver_iterations": h["eigensolver"]["n_iter"],
        "stopped_by": h["stopping"]["stopped_by"],
        "column_passes": int(sum(h["passes"]["column_passes"].values())),
        "passes": int(sum(h["passes"]["passes"].values())),
        "passes_by_phase": passes_by_phase(h["passes"]),
        "max_basis": h["max_basis"],
        "restarts": h["eigensolver"]["n_restarts"],
        "timings": h["timings"],
        "eig_cg_iterations_per_solve": round(float(np.mean(eig_cg)), 2) if eig_cg else None,
        "P@1_mean": round(float(np.mean([v["p@1"] for v in ret.values()])), 4),
        "P@1_min": round(float(min(v["p@1"] for v in ret.values())), 4),
        "P@1": {k: v["p@1"] for k, v in ret.items()},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", choices=("ddtp", "synthetic"), default="ddtp")
    ap.add_argument("--corpus-path", type=Path, default=None)
    ap.add_argument("--docs", type=int, default=200_000, help="synthetic: documents")
    ap.add_argument("--r", type=int, default=100)
    ap.add_argument("--lam", type=float, default=1.0)
    ap.add_argument("--test", type=int, default=500, help="ddtp: held-out test concepts")
    ap.add_argument(
        "--validation", type=int, default=300, help="ddtp: validation concepts (stop_rule)"
    )
    ap.add_argument("--only", default=None, help="comma-separated labels to run")
    ap.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="fit every configuration this many times, alternating, and report median times",
    )
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error(f"--repeats must be >= 1; got {args.repeats}")

    info = machine_info()
    print("== machine: " + ", ".join(f"{k}={v}" for k, v in info.items()), flush=True)
    t0 = time.perf_counter()
    if args.corpus == "ddtp":
        corpus = load_sample_corpus(
            path=args.corpus_path or default_full_path(),
            n_test=args.test,
            n_validation=args.validation,
        )
    else:
        corpus = make_synthetic_corpus(
            n_docs=args.docs, n_languages=3, vocab=50_000, n_topics=200, n_test=1_000, seed=0
        )
    from pipeline.backends.local import LocalCorpusBackend

    be = LocalCorpusBackend(corpus.train, corpus.n_concepts, dtype="float32")
    ci = corpus.info
    print(
        f"== corpus {args.corpus} ({time.perf_counter() - t0:.1f} s): n = {ci['n_train']}, "
        f"K = {corpus.n_concepts}, nnz = {ci['nnz']}, r = {args.r}, lambda = {args.lam}",
        flush=True,
    )
    validation = validation_set(corpus)
    only = args.only.split(",") if args.only else None
    known = dict(CONFIGS)
    configs = (
        [(label, known[label] if label in known else parse_label(label)) for label in only]
        if only
        else CONFIGS
    )
    # repeats alternate the configurations, so that the machine's drift hits all of them
    reps = [
        [
            run
            for label, overrides in configs
            if (run := fit_once(be, args, label, overrides, validation, corpus)) is not None
        ]
        for _ in range(args.repeats)
    ]
    rows: list[dict] = []
    for row in median_walls(reps):
        label = row["label"]
        if rows:
            ref = rows[0]
            row["wall_over_defaults"] = round(row["wall_s"] / ref["wall_s"], 2)
            row["worst_direction_vs_defaults"] = round(
                min(row["P@1"][k] - ref["P@1"][k] for k in row["P@1"]), 4
            )
        rows.append(row)
        print(
            f"{label:32s} wall {row['wall_s']:6.1f} s  cpu {row['cpu_s']:6.1f} s  "
            f"b {row['block_size']:4d}  it {row['eigensolver_iterations']:3d}  "
            f"col-passes {row['column_passes']:7d}  P@1 {row['P@1_mean']:.4f}  worst dir vs "
            f"defaults {row.get('worst_direction_vs_defaults', 0.0):+.3f}  ({row['stopped_by']})",
            flush=True,
        )
        print(
            "    passes by phase (passes/column-passes): "
            + ", ".join(
                f"{ph} {n['passes']}/{n['column_passes']}"
                for ph, n in row["passes_by_phase"].items()
            )
            + f"; max_basis {row['max_basis']}, {row['restarts']} restarts",
            flush=True,
        )
    if args.out:
        record = {"machine": info, "args": vars(args), "corpus": ci, "runs": rows}
        args.out.write_text(json.dumps(record, indent=1, default=str) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
