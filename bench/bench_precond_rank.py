#!/usr/bin/env python3
"""CG iterations of one eigensolver-sized solve against the preconditioner's rank.

The eigensolver's CG is most of a Cr5 fit's passes at r = 300, and its iterations per solve
grow with the corpus (bench/README.md, "r = 300: where the passes go"). This script loads a
``tfidf`` dataset written by the pipeline (for example ``<workdir>/out_text/tfidf`` of a
bench_chain.py run) onto the local backend, draws one random orthonormal K x b block Q,
forms ``U = C Q`` as the eigensolver does, and solves ``B_l X = U_l`` for every language
with the spectral-Jacobi preconditioner at each ``--ranks`` value (``train.precond_rank``),
at the default CG tolerance. It reports, per rank, the preconditioner's build time and
passes, the solve's CG iterations and column-passes per language, and the solve's wall time.

Usage (repository root)::

    OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/bench_precond_rank.py \\
        /work/c200v/out_text/tfidf --ranks 0,32,64,128,256 \\
        --out bench/results/precond_rank_200k.json
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.tfidf_backend import load_tfidf_backend


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tfidf", help="a tfidf dataset written by the pipeline's tfidf stage")
    ap.add_argument("--ranks", default="0,32,64,128,256")
    ap.add_argument("--block", type=int, default=25, help="b: the eigensolver's block width")
    ap.add_argument("--lam", type=float, default=1.0)
    ap.add_argument(
        "--dense-chunk-mb",
        default=None,
        help="comma-separated budgets of the products' column chunks in MiB "
        "(pipeline/linalg/sparse_products.py; 0: whole blocks); each is a run per rank",
    )
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    ranks = [int(k) for k in args.ranks.split(",")]
    budgets = [None] if args.dense_chunk_mb is None else args.dense_chunk_mb.split(",")

    from pipeline.linalg import sparse_products
    from pipeline.linalg.cr5 import CrossCovariance, concept_frequencies
    from pipeline.linalg.woodbury import WoodburyInverse, global_mean

    be, info, corpus = load_tfidf_backend(args.tfidf)
    mu, nu = global_mean(be), concept_frequencies(be)
    q, _ = np.linalg.qr(np.random.default_rng(0).standard_normal((be.n_concepts, args.block)))
    u = CrossCovariance(be, mu, nu).matmat(q)
    rows = []
    default_budget = sparse_products.DENSE_CHUNK_BYTES
    for rank, budget in ((k, mb) for k in ranks for mb in budgets):
        mib = None if budget is None else float(budget)
        sparse_products.DENSE_CHUNK_BYTES = (
            default_budget if mib is None else int(mib * 2**20) if mib > 0 else 2**62
        )
        ainv = WoodburyInverse(be, args.lam, precond_rank=rank, mu=mu)
        be.reset_counts()
        t0 = time.perf_counter()
        ainv._ensure_preconditioners()  # prepare() would also solve w
        build_s = time.perf_counter() - t0
        build_passes = int(sum(be.pass_counts["column_passes"].values()))
        t0 = time.perf_counter()
        _, results = ainv.solve_blockdiag(u, stage="bench")
        row = {
            "precond_rank": rank,
            "dense_chunk_mb": mib if mib is not None else default_budget / 2**20,
            "build_s": round(build_s, 1),
            "build_column_passes": build_passes,
            "solve_s": round(time.perf_counter() - t0, 1),
            "cg_iterations": {lang: int(r.n_iter) for lang, r in results.items()},
            "column_passes": {lang: int(r.n_column_passes) for lang, r in results.items()},
        }
        rows.append(row)
        print(
            f"rank {rank:4d}, chunks <= {row['dense_chunk_mb']:g} MiB: "
            f"build {row['build_s']:6.1f} s ({build_passes} column-passes), "
            f"solve {row['solve_s']:6.1f} s, CG iterations {row['cg_iterations']}, "
            f"column-passes {sum(row['column_passes'].values())}",
            flush=True,
        )
    if args.out:
        record = {"machine": info, "args": vars(args) | {"out": str(args.out)}, "corpus": corpus}
        args.out.write_text(json.dumps(record | {"runs": rows}, indent=1) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
