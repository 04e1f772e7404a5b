#!/usr/bin/env python3
"""How tight the Woodbury correction's solve ``w = B⁻¹μ`` has to be (``train.w_rtol``).

``Â⁻¹u = B⁻¹u + c w (wᵀu)`` with ``c = n / (1 − n μᵀw)``: an error in w reaches every
application of M = Cᵀ Â⁻¹ C through the correction, amplified in c by ``γ / (1 − γ)``
(γ = n μᵀw). The eigensolver's own solves of B⁻¹U stop at ``train.cg_rtol``, so w only has
to be accurate enough that its share of M's error is small beside theirs.

This script loads a ``tfidf`` dataset written by the pipeline onto the local backend, draws
a random orthonormal K x b block Q, forms U = C Q, and measures the relative error of
``M Q`` (Frobenius norm, against a reference with w at ``--ref-rtol`` and B⁻¹U at
``--ref-rtol``):

* from the eigensolver's own solve (B⁻¹U at the default ``cg_rtol``, the pass dtype), the
  error level every Lanczos iteration already carries;
* from w alone, at each ``--w-rtols`` value (B⁻¹U exact), with the CG iterations the w solve
  took (its passes: one per iteration and language).

Usage (repository root)::

    OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/bench_w_rtol.py \\
        /work/c200v/out/tfidf --out bench/results/w_rtol_200k.json
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
    ap.add_argument("--w-rtols", default="1e-2,3e-3,1e-3,1e-4,1e-6")
    ap.add_argument("--ref-rtol", type=float, default=1e-8)
    ap.add_argument("--block", type=int, default=25, help="b: the eigensolver's block width")
    ap.add_argument("--lam", type=float, default=1.0)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    w_rtols = [float(t) for t in args.w_rtols.split(",")]

    from pipeline.linalg.cr5 import CrossCovariance, concept_frequencies
    from pipeline.linalg.params import CR5_DEFAULTS
    from pipeline.linalg.woodbury import WoodburyInverse, global_mean

    be, info, corpus = load_tfidf_backend(args.tfidf)
    mu, nu = global_mean(be), concept_frequencies(be)
    cross = CrossCovariance(be, mu, nu)
    q, _ = np.linalg.qr(np.random.default_rng(0).standard_normal((be.n_concepts, args.block)))
    u = cross.matmat(q)

    def w_solve(rtol: float) -> tuple[WoodburyInverse, int, float]:
        ainv = WoodburyInverse(be, args.lam, mu=mu, w_rtol=rtol)
        ainv._ensure_preconditioners()
        be.reset_counts()
        t = time.perf_counter()
        ainv.prepare()
        return ainv, int(sum(be.pass_counts["passes"].values())), time.perf_counter() - t

    ref, ref_passes, _ = w_solve(args.ref_rtol)
    gamma = ref.n * float(mu @ ref.w)
    print(f"== reference w: {ref_passes} passes, gamma = {gamma:.6f}", flush=True)
    t = time.perf_counter()
    y_ref, _ = ref.solve_blockdiag(u, rtol=args.ref_rtol, dtype=np.float64, stage="ref")
    print(f"== reference B^-1 U: {time.perf_counter() - t:.1f} s", flush=True)

    def m_q(ainv: WoodburyInverse, y: np.ndarray) -> np.ndarray:
        z = y + ainv.c * np.outer(ainv.w, ainv.w @ u)
        return cross.rmatmat(z)

    mq_ref = m_q(ref, y_ref)
    norm = float(np.linalg.norm(mq_ref))
    y_cg, _ = ref.solve_blockdiag(u, rtol=CR5_DEFAULTS.cg_rtol, stage="eig")
    cg_err = float(np.linalg.norm(m_q(ref, y_cg) - mq_ref)) / norm
    print(f"== the eigensolver's solve (cg_rtol {CR5_DEFAULTS.cg_rtol}): M Q error {cg_err:.3e}")
    rows = []
    for rtol in w_rtols:
        ainv, passes, secs = w_solve(rtol)
        err = float(np.linalg.norm(m_q(ainv, y_ref) - mq_ref)) / norm
        row = {
            "w_rtol": rtol,
            "w_passes": passes,
            "w_seconds": round(secs, 1),
            "c_rel_error": abs(ainv.c / ref.c - 1.0),
            "mq_rel_error": err,
            "vs_cg_error": err / cg_err,
        }
        rows.append(row)
        print(
            f"w_rtol {rtol:7.0e}: {passes:4d} passes ({secs:6.1f} s), c error "
            f"{row['c_rel_error']:.2e}, M Q error {err:.2e} = {err / cg_err:.3f}x the solve's",
            flush=True,
        )
    if args.out:
        record = {
            "machine": info,
            "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "corpus": corpus,
            "gamma": gamma,
            "reference_w_passes": ref_passes,
            "cg_rtol": CR5_DEFAULTS.cg_rtol,
            "cg_mq_rel_error": cg_err,
            "runs": rows,
        }
        args.out.write_text(json.dumps(record, indent=1) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
