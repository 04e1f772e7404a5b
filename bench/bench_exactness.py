"""How near the exact Cr5 solution are our fits, and does nearness buy retrieval?

For each λ of ``--eval-lams`` this fits Cr5 three ways on one corpus (local backend) — as a
λ path from the largest λ of ``--path-lams`` down (``evaluate.lambda_warm_start``),
independently (the surrogate warm start), and "exactly" (``--exact-eig-rtol`` and
``--exact-cg-rtol``, default 0.003 and 1e-4) — and reports for each: the Eq. 9 objective
``tr(Pᵀ M P)`` of its r leading Ritz vectors P with M applied through 1e-6 CG solves (the
exact fit's is the largest reachable), the principal angles of P to the exact fit's, and
held-out P@1 (cosine, mean over ordered language pairs). bench/README.md ("λ path") has the
results: at small λ the exact solution retrieves worst; the loose fits' stopping point
regularises.

Examples::

    OPENBLAS_NUM_THREADS=1 python bench/bench_exactness.py --corpus sample --r 100 \\
        --out bench/results/exactness_sample_r100.json
    OPENBLAS_NUM_THREADS=1 python bench/bench_exactness.py --corpus synthetic --docs 200000 \\
        --vocab 50000 --r 100 --out bench/results/exactness_200k_r100.json   # ~25 min
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import scipy.linalg as sla

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_train import (
    arg_parser,
    load_corpus,
    machine_info,
    make_our_backend,
    retrieval,
    solver_options,
)


def objectives(backend, blocks: list[np.ndarray], lam: float) -> list[float]:
    """Eq. 9 objective ``tr(Pᵀ Cᵀ Â⁻¹ C P)`` of each orthonormal P (K x r) in ``blocks``, with
    one Woodbury set-up at λ and one 1e-6 solve for all of them."""
    from pipeline.linalg.cr5 import CrossCovariance, concept_frequencies
    from pipeline.linalg.woodbury import WoodburyInverse, global_mean

    mu = global_mean(backend)
    cmat = CrossCovariance(backend, mu, concept_frequencies(backend))
    ainv = WoodburyInverse(backend, lam, rtol=1e-6, w_rtol=1e-9, maxiter=5000, mu=mu)
    p = np.hstack(blocks)
    mp = cmat.rmatmat(ainv.solve(cmat.matmat(p)))
    diag = np.einsum("ij,ij->j", p, mp)  # pᵀ M p per column; a block's trace is their sum
    splits = np.cumsum([blk.shape[1] for blk in blocks])[:-1]
    return [float(part.sum()) for part in np.split(diag, splits)]


def main(argv: list[str] | None = None) -> int:
    ap = arg_parser(__doc__.split("\n\n")[0])
    ap.add_argument("--path-lams", default="0.3,1,3,10", help="the λ path (fitted largest first)")
    ap.add_argument("--eval-lams", default="0.3,1", help="λ values compared (on the path)")
    ap.add_argument("--exact-eig-rtol", type=float, default=0.003)
    ap.add_argument("--exact-cg-rtol", type=float, default=1e-4)
    args = ap.parse_args(argv)
    path_lams = sorted((float(x) for x in args.path_lams.split(",")), reverse=True)
    eval_lams = [float(x) for x in args.eval_lams.split(",")]
    if not set(eval_lams) <= set(path_lams):
        raise SystemExit(f"--eval-lams {eval_lams} must be on the path {path_lams}")
    exact = {"eig_rtol": args.exact_eig_rtol, "cg_rtol": args.exact_cg_rtol}
    return run(args, path_lams, eval_lams, exact)


def run(args, path_lams: list[float], eval_lams: list[float], exact: dict) -> int:
    from pipeline.linalg import solve_cr5

    info = machine_info()
    corpus = load_corpus(args)
    print(f"== machine {info}")
    print(f"== corpus {args.corpus}: {corpus.info['n_train']} training docs, r = {args.r}")
    # the options bench_train parses (CG and eigensolver tolerances, preconditioner, start)
    kw = solver_options(args, corpus)
    fits: dict[tuple[str, float], tuple[np.ndarray, dict, float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench_exactness_") as tmp:
        backend, close, _ = make_our_backend("local", corpus, Path(tmp), None, None)
        try:
            start = None
            for lam in path_lams:
                t0 = time.perf_counter()
                res = solve_cr5(backend, lam=lam, start=start, keep_start=True, **kw)
                start = res.path_start
                if lam in eval_lams:
                    vecs = start.vectors[:, : args.r].copy()
                    fits[("path", lam)] = (vecs, res.components, time.perf_counter() - t0)
            for lam in eval_lams:
                for mode, extra_kw in (("independent", {}), ("exact", exact)):
                    t0 = time.perf_counter()
                    res = solve_cr5(backend, lam=lam, keep_start=True, **{**kw, **extra_kw})
                    vecs = res.path_start.vectors[:, : args.r].copy()
                    fits[(mode, lam)] = (vecs, res.components, time.perf_counter() - t0)
            rows = []
            modes = ("path", "independent", "exact")
            for lam in eval_lams:
                ref = fits[("exact", lam)][0]
                objs = objectives(backend, [fits[(mode, lam)][0] for mode in modes], lam)
                for mode, obj in zip(modes, objs, strict=True):
                    vecs, comps, secs = fits[(mode, lam)]
                    ang = np.rad2deg(sla.subspace_angles(vecs, ref))
                    p1 = float(np.mean([v["p@1"] for v in retrieval(comps, corpus.test).values()]))
                    rows.append(
                        {
                            "lam": lam,
                            "fit": mode,
                            "objective": round(obj, 4),
                            "angle_to_exact_mean_deg": round(float(ang.mean()), 1),
                            "P@1_mean": round(p1, 4),
                            "fit_seconds": round(secs, 2),
                        }
                    )
                    print("  ", rows[-1], flush=True)
        finally:
            if close is not None:
                close()
    if args.out is not None:
        out = {"args": {k: str(v) for k, v in vars(args).items()}, "machine": info}
        out.update({"path_lams": path_lams, "exact": exact, "corpus": corpus.info, "rows": rows})
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=2, default=float) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
