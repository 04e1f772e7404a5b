#!/usr/bin/env python3
"""Where a Cr5 fit's passes over X go, phase by phase, from a recorded run.

A pass is one scan of a language's X_l carrying a block of b columns (one Spark job); a
column-pass counts the block's width (its cost grows with b). The phases:

* ``cr5/precond``: the CG preconditioner (randomized subspace iteration on X_lᵀX_l);
* ``cr5/w/cg``: the solve w = B⁻¹μ (one column, float64, in the background);
* ``cr5/start/C``, ``cr5/start/Ct``: the surrogate warm start's C and Cᵀ products;
* ``cr5/eig/C``, ``cr5/eig/cg``, ``cr5/eig/Ct``: each eigensolver iteration's C product,
  per-language block CG (Â⁻¹) and Cᵀ product;
* ``cr5/phi/...``: Φ's own solves (only without ``train.reuse_solves``); ``cr5/mean``: the
  column sums and counts.

Runs recorded since the backend counts passes by phase carry them (``passes_over_x``'s
``phase_passes`` / ``phase_column_passes``); for older runs the breakdown is rebuilt from
the per-solve CG records and the product counts (CG iterations per solve and language are
recorded; the preconditioner is the remainder of the gram passes; the warm start's
products are 2 per step and language, the rest the eigensolver's).

Usage::

    .venv/bin/python bench/pass_breakdown.py bench/results/chain_2M_r300_text.json [more.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from pipeline.linalg.backend import passes_by_phase  # noqa: E402


def train_report(run: dict[str, Any]) -> dict[str, Any]:
    """The train stage's report of a bench_chain.py record."""
    return run["stages"]["train"]["report"]


def rebuilt_phases(
    report: dict[str, Any], start_steps: int = 2, precond_columns: int = 40
) -> dict[str, dict[str, int]]:
    """The breakdown of a run recorded before passes were counted by phase (the module
    docstring says how). The CG's column-passes are the recorded gram column-passes less
    the w solve's (one column each) and the preconditioner's (``precond_columns`` a pass:
    the default precond_rank 32 + 8)."""
    solver = report["solver"]
    px = report["passes_over_x"]
    passes, columns = px["passes"], px["column_passes"]
    n_lang = len(solver["languages"])
    b = int(solver["block_size"])
    eig_cg = sum(
        sum(rec["n_iter"].values())
        for rec in solver["solves"]
        if str(rec["stage"]).startswith("cr5/eig")
    )
    w_cg = sum(sum(rec["n_iter"].values()) for rec in solver["solves"] if rec["stage"] == "cr5/w")
    start = start_steps * n_lang
    precond = passes["gram"] - eig_cg - w_cg
    out = {
        "cr5/eig/cg": {
            "passes": eig_cg,
            "column_passes": columns["gram"] - w_cg - precond * precond_columns,
        },
        "cr5/w/cg": {"passes": w_cg, "column_passes": w_cg},
        "cr5/precond": {"passes": precond, "column_passes": precond * precond_columns},
        "cr5/eig/C": {
            "passes": passes["xt_gather"] - start,
            "column_passes": columns["xt_gather"] - start * b,
        },
        "cr5/eig/Ct": {
            "passes": passes["x_scatter"] - start,
            "column_passes": columns["x_scatter"] - start * b,
        },
        "cr5/start/C": {"passes": start, "column_passes": start * b},
        "cr5/start/Ct": {"passes": start, "column_passes": start * b},
    }
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["passes"]))


def breakdown(run: dict[str, Any]) -> tuple[dict[str, dict[str, int]], bool]:
    """(phase -> passes and column-passes, whether it was recorded rather than rebuilt)."""
    report = train_report(run)
    px = report["passes_over_x"]
    if px.get("phase_passes"):
        # runs recorded before phase_of dropped the Spark backend's "/in-task"
        merged: dict[str, dict[str, int]] = {}
        for phase, n in passes_by_phase(px).items():
            into = merged.setdefault(phase.removesuffix("/in-task"), dict.fromkeys(n, 0))
            for key, value in n.items():
                into[key] += value
        return dict(sorted(merged.items(), key=lambda kv: -kv[1]["column_passes"])), True
    return rebuilt_phases(report), False


def print_breakdown(path: Path) -> None:
    run = json.loads(path.read_text())
    report = train_report(run)
    phases, recorded = breakdown(run)
    total = sum(v["passes"] for v in phases.values())
    total_cols = sum(v["column_passes"] for v in phases.values())
    solver = report["solver"]
    print(
        f"\n{path.name}: r = {run.get('r')}, {run['corpus']['documents_total']:,} documents, "
        f"fit {report['fit_s']:,.0f} s, {report['eigensolver_iterations']} eigensolver "
        f"iterations, b = {solver['block_size']}, basis {solver.get('max_basis')} "
        f"({'recorded' if recorded else 'rebuilt from the solve records'})"
    )
    print(f"  {'phase':16s} {'passes':>7s} {'share':>6s} {'col-passes':>11s} {'share':>6s}")
    for phase, n in phases.items():
        print(
            f"  {phase:16s} {n['passes']:7,d} {n['passes'] / total:6.1%} "
            f"{n['column_passes']:11,d} {n['column_passes'] / max(total_cols, 1):6.1%}"
        )
    print(f"  {'total':16s} {total:7,d} {'':6s} {total_cols:11,d}")
    per_it = phases.get("cr5/eig/cg", {}).get("passes", 0) / max(
        1, report["eigensolver_iterations"] * len(solver["languages"])
    )
    print(f"  CG iterations per eigensolver iteration and language: {per_it:.1f}")
    timings = solver.get("timings") or {}
    if timings:
        print("  seconds: " + ", ".join(f"{k} {v:,.0f}" for k, v in timings.items()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", type=Path, nargs="+", help="bench_chain.py records (JSON)")
    args = ap.parse_args(argv)
    for path in args.runs:
        print_breakdown(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
