#!/usr/bin/env python3
"""Levers against the eigensolver's iterations and CG work at r = 300, measured on full fits.

Issue 48 lists candidates for fewer passes at r = 300. Some need no library option
(``solve_cr5`` keywords: ``max_basis``, ``cg_rtol``, ``block_size``, ...); two are
experiments that this script wires in itself, so that the library carries no option that
measured no gain:

* ``keep=+N``: each thick restart keeps ``r + N`` Ritz vectors (the library keeps r when
  ``max_basis`` leaves room for only a few blocks beyond r; keeping more is the usual remedy
  for a slow tail in Krylov–Schur);
* ``recycle=N``: every eigensolver solve ``B_l X = U_l`` starts its CG from the Galerkin
  guess on the last N earlier solves of that language, ``X0 = S (Sᵀ U_S)⁻¹ Sᵀ U`` (S the
  earlier solutions, U_S their right-hand sides; ``Sᵀ B_l S = Sᵀ U_S``), i.e. a warm start
  across Lanczos iterations.

Every variant is a full fit on the local backend (float32 passes) of the synthetic corpus of
``bench/bench_train.py`` at ``--docs`` documents, recorded as ``bench/bench_knobs.py``
records its fits (iterations, restarts, passes and column-passes by phase, the eigensolver's
CG iterations per solve, held-out P@1 mean and worst direction).

Usage (repository root)::

    OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/bench_eig_levers.py --docs 30000 --r 300 \\
        defaults 'keep=+50' max_basis=600 max_basis=800 recycle=400 \\
        --out bench/results/eig_levers_30k_r300.json
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_knobs import fit_once
from bench.machine import machine_info
from bench.synthetic import make_synthetic_corpus

#: solve_cr5 keywords a variant may set as ``key=value`` (the value parsed as JSON)
KEYWORDS = ("max_basis", "cg_rtol", "block_size", "precond_rank", "eig_rtol", "start_steps")


@contextmanager
def restart_keep(extra: int) -> Iterator[None]:
    """Thick restarts keep ``r + extra`` Ritz vectors (at most ``max_basis - 2 b``)."""
    import pipeline.linalg.block_lanczos as bl

    original = bl._LanczosRun._restart_size

    def keep(self: Any, max_basis: int) -> int:
        return max(original(self, max_basis), min(self.r + extra, max_basis - 2 * self.b))

    bl._LanczosRun._restart_size = keep
    try:
        yield
    finally:
        bl._LanczosRun._restart_size = original


@contextmanager
def recycled_guesses(cap: int, stats: list[dict]) -> Iterator[None]:
    """The eigensolver's solves (more than one right-hand side, no guess of their own) start
    from the Galerkin guess on the language's last ``cap`` earlier solutions; each solve's
    initial relative residual and CG iterations are appended to ``stats``."""
    import pipeline.linalg.woodbury as wb

    original = wb.WoodburyInverse.solve_blockdiag
    history: dict[int, dict[str, tuple[list[np.ndarray], list[np.ndarray]]]] = {}

    def solve(self: Any, u: np.ndarray, *, x0: np.ndarray | None = None, **kw: Any) -> Any:
        if u.shape[1] < 2 or x0 is not None:
            return original(self, u, x0=x0, **kw)
        hist = history.setdefault(id(self), {lang: ([], []) for lang in self.layout.languages})
        parts = self.layout.split(np.asarray(u, dtype=np.float64))
        guess = np.zeros((self.layout.n_terms, u.shape[1]))
        rows = self.layout.split(guess)
        for lang, (sols, rhs) in hist.items():
            if sols:
                s, b = np.hstack(sols), np.hstack(rhs)
                g = s.T @ b
                w, v = np.linalg.eigh(0.5 * (g + g.T))
                ok = w > 1e-8 * w.max()
                rows[lang][...] = s @ (
                    v[:, ok] @ ((v[:, ok].T @ (s.T @ parts[lang])) / w[ok, None])
                )
        x, results = original(self, u, x0=guess, **kw)
        for lang, part in self.layout.split(x).items():
            sols, rhs = hist[lang]
            sols.append(part.copy())
            rhs.append(parts[lang].copy())
            while sum(a.shape[1] for a in sols) > cap:
                sols.pop(0)
                rhs.pop(0)
            res = results[lang]
            stats.append(
                {
                    "lang": lang,
                    "cg_iterations": int(res.n_iter),
                    "initial_relative_residual": float(np.max(res.residual_norms[0])),
                }
            )
        return x, results

    wb.WoodburyInverse.solve_blockdiag = solve
    try:
        yield
    finally:
        wb.WoodburyInverse.solve_blockdiag = original


def parse_variant(spec: str) -> tuple[dict, Callable[[list[dict]], Any] | None]:
    """``defaults``, ``keep=+N``, ``recycle=N`` or ``key=value`` for a :data:`KEYWORDS` key;
    several ``key=value`` settings joined by commas change several keywords at once."""
    if spec == "defaults":
        return {}, None
    if "," in spec:
        kw: dict = {}
        for part in spec.split(","):
            more, wiring = parse_variant(part)
            if wiring is not None:
                raise SystemExit(f"variant {spec!r}: keep and recycle cannot be combined")
            kw |= more
        return kw, None
    key, sep, value = spec.partition("=")
    if not sep:
        raise SystemExit(f"variant {spec!r}: expected defaults or key=value")
    if key == "keep":
        return {}, lambda stats: restart_keep(int(value))
    if key == "recycle":
        return {}, lambda stats: recycled_guesses(int(value), stats)
    if key not in KEYWORDS:
        raise SystemExit(f"variant {spec!r}: key must be keep, recycle or one of {KEYWORDS}")
    return {key: json.loads(value)}, None


def fit(be: Any, corpus: Any, r: int, spec: str) -> dict:
    """One full fit of variant ``spec``: bench_knobs.py's record of it (iterations, passes by
    phase, CG iterations per solve, P@1), with the recycled guesses' initial residuals."""
    kw, wiring = parse_variant(spec)
    stats: list[dict] = []
    with wiring(stats) if wiring else nullcontext():
        row = fit_once(be, argparse.Namespace(lam=1.0, r=r), spec, kw, None, corpus)
    assert row is not None  # only a validation stop rule is skipped, and none is set here
    if stats:
        row["recycled_initial_relative_residual_median"] = round(
            float(np.median([s["initial_relative_residual"] for s in stats])), 3
        )
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("variants", nargs="+", help="defaults, keep=+N, recycle=N or key=value")
    ap.add_argument("--docs", type=int, default=30_000)
    ap.add_argument("--r", type=int, default=300)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    for spec in args.variants:
        parse_variant(spec)  # refuse a bad variant before the corpus is built
    from pipeline.backends.local import LocalCorpusBackend

    info = machine_info()
    print("== machine: " + ", ".join(f"{k}={v}" for k, v in info.items()), flush=True)
    corpus = make_synthetic_corpus(
        n_docs=args.docs, n_languages=3, vocab=50_000, n_topics=200, n_test=1_000, seed=0
    )
    be = LocalCorpusBackend(corpus.train, corpus.n_concepts, dtype="float32")
    print(f"== corpus: {corpus.info['n_train']} documents, nnz {corpus.info['nnz']}", flush=True)
    rows = []
    for spec in args.variants:
        row = fit(be, corpus, args.r, spec)
        rows.append(row)
        print(
            f"{spec:18s} wall {row['wall_s']:6.1f} s  it {row['eigensolver_iterations']:3d}  "
            f"restarts {row['restarts']:2d}  passes {row['passes']:5d}  "
            f"col-passes {row['column_passes']:6d}  CG/solve {row['eig_cg_iterations_per_solve']}"
            f"  P@1 {row['P@1_mean']:.4f} (min {row['P@1_min']:.4f})"
            + (
                f"  recycled r0 median {row['recycled_initial_relative_residual_median']}"
                if "recycled_initial_relative_residual_median" in row
                else ""
            ),
            flush=True,
        )
    if args.out:
        record = {
            "machine": info,
            "args": vars(args) | {"out": str(args.out)},
            "corpus": corpus.info,
            "runs": rows,
        }
        args.out.write_text(json.dumps(record, indent=1, default=str) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
