#!/usr/bin/env python3
"""What one column of a Gram product ``X_lᵀ(X_l V)`` costs, against the block width and the kernel.

A fused Cr5 solve spends its time in the resident Gram product of
:class:`pipeline.backends.spark_solve._ResidentGram` (``x.T @ (x @ v)`` on a float32 CSR
X_l). Whether halving the eigensolver's passes with a wider block can also cut the fit
time turns on two questions this script answers on a real ``tfidf`` dataset:

* does a column cost more in a wider block (the dense operand V is p_l x b, gathered row by
  row, and outgrows the cache as b grows), and does splitting the width into column chunks
  (one more read of X_l per chunk) win it back;
* is scipy's kernel the limit, or the memory system: the same product from a compiled
  kernel (numba, when importable; it is not a dependency of the product) and from torch's
  CSR matmul (when importable), against scipy in the same run.

It also reports whether the language's term ids are in descending document frequency (the
vocabulary stage's order, which keeps the frequent rows of V together), and the product
with the columns put in that order, to show what the order is worth.

Per width and variant: the best of ``--reps`` runs of ``X @ V`` and ``Xᵀ @ Y``, ms per
column, and the ratio to scipy at the first width (the baseline of this run).

Usage (repository root)::

    OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/bench_spmm.py /work/chain2M_v/out_text/tfidf \\
        --langs en,vi --widths 25,50,60 --out bench/results/spmm_2M.json
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.tfidf_backend import load_tfidf_backend

#: A row's (language, width, variant), dropped from the written record.
KEY = "_key"

Product = Callable[[np.ndarray], tuple[float, float]]


def _best(fn: Product, reps: int) -> tuple[float, float]:
    """The smallest ``X @ V`` and ``Xᵀ @ Y`` seconds over ``reps`` runs of ``fn``."""
    runs = [fn() for _ in range(reps)]
    return min(r[0] for r in runs), min(r[1] for r in runs)


def scipy_product(x: sp.csr_matrix, chunk: int | None = None) -> Product:
    """The resident Gram's product, the width in equal pieces of at most ``chunk`` columns
    when given (each piece one more read of X)."""

    def run(v: np.ndarray) -> tuple[float, float]:
        pieces = -(-v.shape[1] // chunk) if chunk else 1
        step = -(-v.shape[1] // pieces)
        t_x = t_xt = 0.0
        for s in range(0, v.shape[1], step):
            piece = np.ascontiguousarray(v[:, s : s + step])
            t0 = time.perf_counter()
            y = x @ piece
            t1 = time.perf_counter()
            x.T @ y
            t_x, t_xt = t_x + t1 - t0, t_xt + time.perf_counter() - t1
        return t_x, t_xt

    return run


def numba_product(x: sp.csr_matrix) -> Product | None:
    """The same product from a compiled loop (a row's accumulator in registers, the width
    innermost so the compiler can vectorise it); None without numba."""
    try:
        from numba import njit
    except ImportError:
        return None

    @njit(fastmath=True, nogil=True)
    def gather(indptr, indices, data, v, out):  # pragma: no cover - compiled
        acc = np.empty(out.shape[1], dtype=out.dtype)
        for i in range(out.shape[0]):
            acc[:] = 0
            for jj in range(indptr[i], indptr[i + 1]):
                a, row = data[jj], v[indices[jj]]
                for c in range(acc.shape[0]):
                    acc[c] += a * row[c]
            out[i] = acc

    @njit(fastmath=True, nogil=True)
    def scatter(indptr, indices, data, y, out):  # pragma: no cover - compiled
        out[:] = 0
        for i in range(y.shape[0]):
            yi = y[i]
            for jj in range(indptr[i], indptr[i + 1]):
                a, o = data[jj], out[indices[jj]]
                for c in range(yi.shape[0]):
                    o[c] += a * yi[c]

    def run(v: np.ndarray) -> tuple[float, float]:
        y = np.empty((x.shape[0], v.shape[1]), np.float32)
        z = np.empty((x.shape[1], v.shape[1]), np.float32)
        t0 = time.perf_counter()
        gather(x.indptr, x.indices, x.data, v, y)
        t1 = time.perf_counter()
        scatter(x.indptr, x.indices, x.data, y, z)
        return t1 - t0, time.perf_counter() - t1

    tiny = np.ones((x.shape[1], 1), np.float32)
    run(tiny)  # compile outside the timing
    return run


def torch_product(x: sp.csr_matrix) -> Product | None:
    """torch's CSR matmul, one thread, for ``X @ V`` only (its transpose is a CSC product
    torch does not run natively on CPU); None without torch."""
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(1)
    xt = torch.sparse_csr_tensor(
        torch.from_numpy(x.indptr.astype(np.int64)),
        torch.from_numpy(x.indices.astype(np.int64)),
        torch.from_numpy(x.data),
        size=x.shape,
        check_invariants=False,
    )

    def run(v: np.ndarray) -> tuple[float, float]:
        vt = torch.from_numpy(v)
        t0 = time.perf_counter()
        xt @ vt
        return time.perf_counter() - t0, float("nan")

    return run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tfidf", help="a tfidf dataset written by the pipeline's tfidf stage")
    ap.add_argument("--langs", default=None, help="comma-separated (default: the largest)")
    ap.add_argument("--widths", default="25,50,60", help="block widths; the first is the baseline")
    ap.add_argument(
        "--chunk-columns",
        default="",
        help="comma-separated: also run the width in equal chunks of at most this many columns",
    )
    ap.add_argument(
        "--terms",
        type=int,
        default=None,
        help="keep only the N most frequent terms (a smaller dense operand at the same width)",
    )
    ap.add_argument(
        "--kernels",
        default="scipy,shuffled,numba,torch",
        help="which variants besides plain scipy (shuffled: term ids in random order)",
    )
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    widths = [int(b) for b in args.widths.split(",")]
    chunks = [int(c) for c in args.chunk_columns.split(",") if c]
    kernels = set(args.kernels.split(","))

    be, info, corpus = load_tfidf_backend(args.tfidf)
    langs = (
        args.langs.split(",")
        if args.langs
        else [max(be.languages, key=lambda lang: be.matrix(lang).nnz)]
    )
    rng = np.random.default_rng(0)
    rows: list[dict[str, Any]] = []
    for lang in langs:
        x = be.matrix(lang)
        if args.terms:
            top = np.argsort(-np.bincount(x.indices, minlength=x.shape[1]), kind="stable")
            x = x[:, np.sort(top[: args.terms])].tocsr()
        df = np.bincount(x.indices, minlength=x.shape[1])
        order = np.argsort(-df, kind="stable")
        in_df_order = bool(np.all(np.diff(df) <= 0))
        print(
            f"== {lang}: {x.shape[0]:,} x {x.shape[1]:,}, {x.nnz:,} nonzeros, "
            f"term ids in descending df: {in_df_order}",
            flush=True,
        )
        variants: dict[str, Product | None] = {"scipy": scipy_product(x)}
        for c in chunks:
            variants[f"scipy, chunks <= {c}"] = scipy_product(x, chunk=c)
        if "shuffled" in kernels:
            shuffled = x[:, rng.permutation(x.shape[1])].tocsr()
            variants["scipy, term ids shuffled"] = scipy_product(shuffled)
        if "numba" in kernels:
            variants["numba"] = numba_product(x)
        if "torch" in kernels:
            variants["torch (X @ V only)"] = torch_product(x)
        if not in_df_order:
            variants["scipy, df order"] = scipy_product(x[:, order].tocsr())
        base = None
        for b in widths:
            v = rng.standard_normal((x.shape[1], b)).astype(np.float32)
            for name, fn in variants.items():
                if fn is None:
                    print(f"   {name}: not importable, skipped", flush=True)
                    continue
                t_x, t_xt = _best(lambda fn=fn, v=v: fn(v), args.reps)
                total = t_x + (0.0 if np.isnan(t_xt) else t_xt)
                ms_per_col = 1000 * total / b
                if name == "scipy" and base is None:
                    base = ms_per_col
                comparable = not np.isnan(t_xt)
                row = {
                    KEY: (lang, b, name),
                    "lang": lang,
                    "width": b,
                    "variant": name,
                    "x_v_s": round(t_x, 3),
                    "xt_y_s": None if np.isnan(t_xt) else round(t_xt, 3),
                    "ms_per_column": round(ms_per_col, 1),
                    "vs_scipy_first_width": round(ms_per_col / base, 3) if comparable else None,
                    "x_v_vs_scipy_same_width": None,
                }
                same = next((r for r in rows if r[KEY] == (lang, b, "scipy")), None)
                if same is not None:
                    row["x_v_vs_scipy_same_width"] = round(t_x / same["x_v_s"], 3)
                rows.append(row)
                print(
                    f"   b={b:3d} {name:26s} X@V {t_x:6.2f} s  XᵀY "
                    f"{'   -  ' if not comparable else f'{t_xt:6.2f}'} s  "
                    f"{ms_per_col:6.1f} ms/column"
                    + (f" ({row['vs_scipy_first_width']:.2f}x baseline)" if comparable else "")
                    + (f", X@V {row['x_v_vs_scipy_same_width']:.2f}x scipy's" if same else ""),
                    flush=True,
                )
        base = None
    if args.out:
        record = {"machine": info, "args": vars(args) | {"out": str(args.out)}, "corpus": corpus}
        rows = [{k: v for k, v in r.items() if k != KEY} for r in rows]
        args.out.write_text(json.dumps(record | {"runs": rows}, indent=1) + "\n")
        args.out.with_suffix(".txt").write_text(
            "\n".join(
                f"{r['lang']} b={r['width']} {r['variant']}: X@V {r['x_v_s']} s, "
                f"XᵀY {r['xt_y_s']} s, {r['ms_per_column']} ms/column, "
                f"{r['vs_scipy_first_width']}x baseline"
                for r in rows
            )
            + "\n"
        )
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
