"""Training benchmark: our Cr5 solver against a straightforward single-machine baseline.

Both methods run on the same seeded synthetic corpus (``bench/synthetic.py``) in one process:

* **ours** — :func:`pipeline.linalg.solve_cr5` (block Lanczos on M = CᵀÂ⁻¹C, Woodbury
  split into per-language Jacobi-preconditioned block CG, float32 passes), on the local or
  the Spark backend;
* **baseline** — what the original Cr5 code does: ``scipy.sparse.linalg.eigsh`` on M as a
  LinearOperator applied one vector at a time, each application solving Â x = C v with
  unpreconditioned ``scipy.sparse.linalg.cg`` on the whole Â = X̂ᵀX̂ + λI (implicit centring,
  no Woodbury, no per-language split), float64; then Φ*ᵀ = Â⁻¹ C P by r more CG solves and
  row orthonormalisation (Eq. 15).

Reported per method: wall and CPU time, passes over X, peak memory, and crosslingual retrieval
quality (P@1, MRR, cosine) on held-out documents; then the ratios baseline / ours and the
principal angles between the two Φ's.

Usage::

    OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/bench_train.py --docs 20000 \\
        --out bench/results/train_small.json
"""

from __future__ import annotations

import os

# Must precede the numpy import: multithreaded BLAS was 5-8x slower on the 2-core machine.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import importlib.util
import json
import logging
import resource
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator, cg, eigsh

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.ddtp_sample import SAMPLE, default_full_path, load_sample_corpus  # noqa: E402
from bench.machine import machine_info  # noqa: E402
from bench.synthetic import SyntheticCorpus, make_synthetic_corpus  # noqa: E402
from pipeline.allocator import tune_malloc  # noqa: E402
from pipeline.config import TRAIN_DEFAULTS  # noqa: E402
from pipeline.linalg.backend import CorpusBackend  # noqa: E402

log = logging.getLogger("bench_train")

MB = 1024.0 * 1024.0


# --- measurement helpers ----------------------------------------------------------------------


def cpu_seconds() -> float:
    """User + system CPU time of this process (all threads)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def maxrss_mb() -> float:
    """Process resident-set high-water mark (Linux: ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


class Measure:
    """Wall time, CPU time, tracemalloc peak (above the level at entry) and ru_maxrss."""

    def __enter__(self) -> Measure:
        self.traced = tracemalloc.is_tracing()
        if self.traced:
            tracemalloc.reset_peak()
        self.heap0 = tracemalloc.get_traced_memory()[0]
        self.cpu0 = cpu_seconds()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.wall = time.perf_counter() - self.t0
        self.cpu = cpu_seconds() - self.cpu0
        peak = tracemalloc.get_traced_memory()[1] - self.heap0
        self.heap_peak_mb = peak / MB if self.traced else float("nan")
        self.maxrss_mb = maxrss_mb()

    def to_dict(self) -> dict:
        return {
            "wall_s": round(self.wall, 3),
            "cpu_s": round(self.cpu, 3),
            "tracemalloc_peak_mb": round(self.heap_peak_mb, 1) if self.traced else None,
            "maxrss_after_mb": round(self.maxrss_mb, 1),
        }


# --- pass accounting for our backend ----------------------------------------------------------


def count_language_passes(backend, nnz: dict[str, int]) -> dict:
    """Wrap the backend's pass methods on the instance to count passes per language.

    Returns the (live) counter dict ``{method: {lang: [passes, column_passes]}}``.
    """
    counts: dict[str, dict[str, list[int]]] = {}
    # x_scatter_rows is the Cᵀ product's form of x_scatter (the same pass, compact rows)
    for method, kind in (
        ("gram", "gram"),
        ("xt_gather", "xt_gather"),
        ("x_scatter", "x_scatter"),
        ("x_scatter_rows", "x_scatter"),
    ):
        counts.setdefault(kind, {lang: [0, 0] for lang in nnz})
        original = getattr(backend, method)

        def wrapped(lang, block, _orig=original, _c=counts[kind], **kw):
            _c[lang][0] += 1
            _c[lang][1] += 1 if np.ndim(block) == 1 else int(np.shape(block)[1])
            return _orig(lang, block, **kw)

        setattr(backend, method, wrapped)

    # whole CG solves run next to X_l (Spark, single-block languages): each iteration is a
    # gram pass over X_l that never goes through backend.gram
    original_solve = backend.solve_gram

    def solve_gram(lang, rhs, _orig=original_solve, _c=counts["gram"], **kw):
        result = _orig(lang, rhs, **kw)
        if result is not None:
            _c[lang][0] += result.n_iter
            _c[lang][1] += result.n_column_passes
        return result

    backend.solve_gram = solve_gram
    return counts


def full_x_equivalents(counts: dict, nnz: dict[str, int]) -> dict:
    """Per-language passes weighted by nnz_l / nnz: passes over the *whole* X (data volume)."""
    total = float(sum(nnz.values()))
    out = {"passes": 0.0, "column_passes": 0.0, "by_method": {}}
    for method, per in counts.items():
        p = sum(v[0] * nnz[lang] / total for lang, v in per.items())
        c = sum(v[1] * nnz[lang] / total for lang, v in per.items())
        out["by_method"][method] = {"passes": round(p, 1), "column_passes": round(c, 1)}
        out["passes"] += p
        out["column_passes"] += c
    out["passes"] = round(out["passes"], 1)
    out["column_passes"] = round(out["column_passes"], 1)
    return out


# --- the baseline -----------------------------------------------------------------------------


def baseline_cr5(
    train: dict[str, tuple[sp.csr_matrix, np.ndarray]],
    n_concepts: int,
    *,
    lam: float,
    r: int,
    cg_rtol: float = 0.01,
    cg_maxiter: int = 500,
    eig_tol: float = 0.1,
    seed: int = 0,
) -> tuple[dict[str, np.ndarray], np.ndarray, dict]:
    """The original method, one vector at a time (see the module docstring).

    Returns ``(components {lang: Φ_lᵀ (p_l, r)}, eigenvalues (r,) descending, stats)``.
    One "pass over X" is one traversal of all rows of X carrying one vector: Xᵀ(Xu) in a CG
    iteration, Xᵀ(Y v) in a C-product and Yᵀ(Xu) in a Cᵀ-product (the same definition as the
    backends' ``gram`` / ``xt_gather`` / ``x_scatter``); ``sparse_matvecs`` counts scipy kernel
    calls (a CG iteration makes two).
    """
    langs = list(train)
    x = sp.block_diag([train[lang][0] for lang in langs], format="csr", dtype=np.float64)
    y = np.concatenate([train[lang][1] for lang in langs]).astype(np.int64)
    xt = x.T  # implicit CSC view, no copy
    n, p = x.shape
    k = int(n_concepts)
    mu = np.asarray(x.sum(axis=0)).ravel() / n
    nu = np.bincount(y, minlength=k) / n
    stats = {
        "passes": {"gram": 0, "xt_gather": 0, "x_scatter": 0},
        "sparse_matvecs": 0,
        "m_applications": 0,
        "cg_solves": 0,
        "cg_iterations": 0,
        "cg_not_converged": 0,
        "cg_iterations_per_solve": [],
    }
    ps = stats["passes"]

    def a_mv(u: np.ndarray) -> np.ndarray:
        u = np.ravel(u)
        ps["gram"] += 1
        stats["sparse_matvecs"] += 2
        return xt @ (x @ u) - (n * (mu @ u)) * mu + lam * u

    a_op = LinearOperator((p, p), matvec=a_mv, dtype=np.float64)

    def c_mv(v: np.ndarray) -> np.ndarray:
        v = np.ravel(v)
        ps["xt_gather"] += 1
        stats["sparse_matvecs"] += 1
        return xt @ v[y] - (n * (nu @ v)) * mu

    def ct_mv(u: np.ndarray) -> np.ndarray:
        u = np.ravel(u)
        ps["x_scatter"] += 1
        stats["sparse_matvecs"] += 1
        return np.bincount(y, weights=x @ u, minlength=k) - (n * (mu @ u)) * nu

    def solve(rhs: np.ndarray) -> np.ndarray:
        it = [0]

        def cb(_xk):
            it[0] += 1

        sol, info = cg(a_op, rhs, rtol=cg_rtol, maxiter=cg_maxiter, callback=cb)
        stats["cg_solves"] += 1
        stats["cg_iterations"] += it[0]
        stats["cg_iterations_per_solve"].append(it[0])
        if info != 0:
            stats["cg_not_converged"] += 1
        return sol

    def m_mv(v: np.ndarray) -> np.ndarray:
        stats["m_applications"] += 1
        return ct_mv(solve(c_mv(v)))

    m_op = LinearOperator((k, k), matvec=m_mv, dtype=np.float64)
    v0 = np.random.default_rng(seed).standard_normal(k)
    t0 = time.perf_counter()
    vals, vecs = eigsh(m_op, k=r, which="LA", tol=eig_tol, v0=v0)
    stats["eigsh_seconds"] = round(time.perf_counter() - t0, 3)
    stats["eigsh_m_applications"] = stats["m_applications"]
    order = np.argsort(vals)[::-1]
    vals, vecs = vals[order], vecs[:, order]

    t0 = time.perf_counter()
    phi_star_t = np.column_stack([solve(c_mv(vecs[:, j])) for j in range(r)])
    gram = phi_star_t.T @ phi_star_t
    lam_g, q = np.linalg.eigh(0.5 * (gram + gram.T))
    lam_g, q = lam_g[::-1], q[:, ::-1]
    phi_t = (phi_star_t @ q) / np.sqrt(lam_g)
    stats["phi_seconds"] = round(time.perf_counter() - t0, 3)
    its = np.asarray(stats.pop("cg_iterations_per_solve"))
    stats["cg_iterations_per_solve"] = {
        "min": int(its.min()),
        "median": float(np.median(its)),
        "max": int(its.max()),
    }
    bounds = np.cumsum([0] + [train[lang][0].shape[1] for lang in langs])
    comps = {
        lang: np.ascontiguousarray(phi_t[bounds[i] : bounds[i + 1]], dtype=np.float32)
        for i, lang in enumerate(langs)
    }
    return comps, vals, stats


# --- our solver -------------------------------------------------------------------------------


def write_tfidf_dataset(corpus: SyntheticCorpus, path: Path) -> None:
    """Write the training rows as a ``tfidf`` dataset (Parquet by lang + manifest)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    per_language = {}
    for lang, (x, concepts) in corpus.train.items():
        x = sp.csr_matrix(x)
        x.sort_indices()
        n = x.shape[0]
        offsets = pa.array(x.indptr.astype(np.int32))
        table = pa.table(
            {
                "row": pa.array(np.arange(n, dtype=np.int64)),
                "doc_id": pa.array([f"{lang}:{i}" for i in range(n)]),
                "concept_id": pa.array([f"Q{c}" for c in concepts]),
                "concept_index": pa.array(concepts.astype(np.int64)),
                "indices": pa.ListArray.from_arrays(offsets, pa.array(x.indices.astype(np.int32))),
                "values": pa.ListArray.from_arrays(offsets, pa.array(x.data.astype(np.float32))),
            }
        )
        part = path / f"lang={lang}"
        part.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, part / "part-0.parquet", row_group_size=50_000)
        per_language[lang] = {"documents": n, "vocabulary": x.shape[1], "nnz": int(x.nnz)}
    manifest = {
        "dataset": "tfidf",
        "producer": "tfidf",
        "report": {"concepts": corpus.n_concepts, "per_language": per_language},
    }
    (path / "_manifest.json").write_text(json.dumps(manifest, indent=2))


def make_our_backend(
    kind: str,
    corpus: SyntheticCorpus,
    workdir: Path,
    spark_master: str,
    partitions: int | None = None,
):
    """Return ``(backend, closer, setup_info)`` for ``kind`` in {"local", "spark"}."""
    from pipeline.backends.local import LocalCorpusBackend

    if kind == "local":
        return LocalCorpusBackend(corpus.train, corpus.n_concepts, dtype="float32"), None, {}
    if importlib.util.find_spec("pipeline.backends.spark") is None:
        return None, None, {"skipped": "pipeline/backends/spark.py does not exist yet"}
    from pipeline.backends import make_backend
    from pipeline.config import SparkConfig
    from pipeline.spark import get_spark

    t0 = time.perf_counter()
    path = workdir / "tfidf"
    write_tfidf_dataset(corpus, path)
    t1 = time.perf_counter()
    spark = get_spark(
        SparkConfig(
            master=spark_master,
            driver_memory="6g",
            conf={"spark.ui.showConsoleProgress": "false"},
        )
    )
    t2 = time.perf_counter()
    backend = make_backend(
        "spark",
        spark,
        str(path),
        languages=list(corpus.train),
        partitions_per_language=partitions,
    )
    t3 = time.perf_counter()
    setup = {
        "master": spark_master,
        "write_parquet_s": round(t1 - t0, 2),
        "session_start_s": round(t2 - t1, 2),
        "load_and_cache_s": round(t3 - t2, 2),
        "partitions": {lang: backend.n_partitions(lang) for lang in backend.languages},
    }

    def close() -> None:
        backend.close()
        spark.stop()

    return backend, close, setup


# --- evaluation -------------------------------------------------------------------------------


def retrieval(
    components: dict[str, np.ndarray], test: dict[str, tuple[sp.csr_matrix, np.ndarray]]
) -> dict:
    """P@1 and MRR (cosine) of held-out crosslingual retrieval for every ordered pair.

    Queries: held-out documents of language A; candidates: all held-out documents of B; the
    target is the document of the same concept (row i of every language is concept i).
    """
    emb = {}
    for lang, (x, _) in test.items():
        e = np.asarray(x @ components[lang], dtype=np.float64)
        e /= np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-30)
        emb[lang] = e
    out = {}
    langs = list(test)
    for a in langs:
        for b in langs:
            if a == b:
                continue
            s = emb[a] @ emb[b].T
            true = np.diag(s)
            rank = 1 + (s > true[:, None]).sum(axis=1)
            out[f"{a}->{b}"] = {
                "p@1": round(float(np.mean(rank == 1)), 4),
                "mrr": round(float(np.mean(1.0 / rank)), 4),
                "n_queries": int(s.shape[0]),
                "n_candidates": int(s.shape[1]),
            }
    return out


def principal_angles(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> dict:
    langs = list(a)
    pa_ = np.concatenate([a[lang] for lang in langs]).astype(np.float64)
    pb_ = np.concatenate([b[lang] for lang in langs]).astype(np.float64)
    ang = np.degrees(sla.subspace_angles(pa_, pb_))[::-1]  # ascending
    r = ang.size
    out = {
        "r": r,
        "degrees_min": round(float(ang.min()), 2),
        "degrees_median": round(float(np.median(ang)), 2),
        "degrees_max": round(float(ang.max()), 2),
        "n_below_10deg": int((ang < 10).sum()),
        "n_below_30deg": int((ang < 30).sum()),
    }
    top = max(1, r // 5)
    sub = np.degrees(sla.subspace_angles(pa_[:, :top], pb_[:, :top]))
    out[f"top{top}_degrees_max"] = round(float(sub.max()), 2)
    return out


# --- main -------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return arg_parser().parse_args(argv)


def arg_parser(description: str | None = None) -> argparse.ArgumentParser:
    """The benchmark's options (bench_exactness.py extends them)."""
    ap = argparse.ArgumentParser(description=description or __doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=20_000, help="training documents (target)")
    ap.add_argument("--languages", type=int, default=3)
    ap.add_argument("--concepts", type=int, default=None, help="default: one doc per pair")
    ap.add_argument("--vocab", type=int, default=20_000, help="p of the first language")
    ap.add_argument("--topics", type=int, default=200)
    ap.add_argument("--tokens", type=float, default=60.0, help="mean tokens per document")
    ap.add_argument(
        "--corpus",
        choices=("synthetic", "sample", "ddtp"),
        default="synthetic",
        help="synthetic (bench/synthetic.py, the size options apply), the bundled DDTP "
        "sample (bench/ddtp_sample.py) or the full DDTP corpus (--corpus-path)",
    )
    ap.add_argument(
        "--corpus-path",
        type=Path,
        default=None,
        help="--corpus ddtp: the Parquet file of bench/build_ddtp_full.sh "
        "(default: $DDTP_FULL, else ~/.cache/cr5/ddtp_full.parquet)",
    )
    ap.add_argument(
        "--corpus-languages",
        default=None,
        help="sample/ddtp: comma-separated subset of en,de,fr,es (default: all four)",
    )
    ap.add_argument(
        "--test",
        type=int,
        default=None,
        help="held-out concepts (synthetic 1000, sample 300, ddtp 500)",
    )
    ap.add_argument(
        "--validation",
        type=int,
        default=0,
        help="sample/ddtp: further held-out concepts (disjoint from test) in corpus.validation",
    )
    ap.add_argument("--r", type=int, default=50)
    ap.add_argument("--oversampling", type=int, default=20)
    ap.add_argument(
        "--block-size", type=int, default=None, help="eigensolver block (default: solver rule)"
    )
    ap.add_argument(
        "--start-steps", type=int, default=2, help="warm-start steps (0: random start block)"
    )
    ap.add_argument(
        "--no-reuse-solves",
        action="store_true",
        help="form Phi by a final solve instead of from the eigensolver's solves",
    )
    ap.add_argument("--lam", type=float, default=1.0)
    ap.add_argument(
        "--stop-rule",
        choices=("residual", "validation"),
        default="residual",
        help="ours: train.stop_rule; validation needs --validation N (sample/ddtp corpora)",
    )
    ap.add_argument("--stop-patience", type=int, default=TRAIN_DEFAULTS.stop_patience)
    ap.add_argument(
        "--cg-rtol",
        type=float,
        default=TRAIN_DEFAULTS.cg_rtol,
        help="our CG tolerance (default: train.cg_rtol); the baseline keeps the paper's 0.01",
    )
    ap.add_argument(
        "--eig-rtol",
        type=float,
        default=0.1,
        help="our eigensolver tolerance (default: the paper's 0.1, as the baseline's eigsh)",
    )
    ap.add_argument(
        "--precond-rank",
        type=int,
        default=TRAIN_DEFAULTS.precond_rank,
        help="ours: train.precond_rank (0: plain Jacobi CG preconditioner)",
    )
    ap.add_argument("--backend", choices=("local", "spark"), default="local")
    ap.add_argument("--spark-master", default="local[2]")
    ap.add_argument(
        "--partitions", type=int, default=None, help="spark: row partitions per language"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--no-tracemalloc",
        action="store_true",
        help="time without tracemalloc (its allocation hooks slow ours, multi-threaded and "
        "allocating many small blocks, more than the baseline: DDTP r = 100, b = 16: 7.5 s "
        "traced vs 5.8 s); memory is then ru_maxrss only",
    )
    ap.add_argument("--skip-baseline", action="store_true")
    ap.add_argument(
        "--no-malloc-tuning",
        action="store_true",
        help="leave glibc's malloc thresholds alone (the pipeline sets them: "
        "spark.driver_malloc_tuning; runs before 2026-11-25 20:40 did not)",
    )
    ap.add_argument(
        "--also-local",
        action="store_true",
        help="with --backend spark: also fit on the local backend first (same run, ratio)",
    )
    ap.add_argument(
        "--baseline-eig-tol",
        type=float,
        default=0.1,
        help="eigsh tol of the baseline (paper: 0.1); smaller to match our retrieval quality",
    )
    ap.add_argument(
        "--lambda-grid",
        default=None,
        help="comma-separated λ values: fit the grid twice on one backend, as a path from the "
        "largest λ down, each λ starting from the previous λ's Ritz vectors "
        "(evaluate.lambda_warm_start), and independently; "
        "report the grid's cost over one fit and the chosen λ (by held-out P@1) of each",
    )
    ap.add_argument(
        "--grid-repeats",
        type=int,
        default=1,
        help="with --lambda-grid: fit both grids this many times, alternating independent and "
        "path, and report each fit's median wall time (this machine's wall times of one fit "
        "vary by up to 1.5x between runs)",
    )
    ap.add_argument("--out", type=Path, default=None, help="bench/results/train_<name>.json")
    return ap


def load_corpus(args: argparse.Namespace) -> SyntheticCorpus:
    """The corpus the options name: synthetic (generated), the bundled sample or full DDTP."""
    if args.corpus in ("sample", "ddtp"):
        ddtp = args.corpus == "ddtp"
        langs = args.corpus_languages.split(",") if args.corpus_languages else None
        return load_sample_corpus(
            n_test=args.test or (500 if ddtp else 300),
            seed=args.seed,
            path=(args.corpus_path or default_full_path()) if ddtp else SAMPLE,
            n_validation=args.validation,
            languages=langs,
        )
    elif args.validation or args.corpus_languages:
        raise SystemExit("--validation and --corpus-languages apply to --corpus sample/ddtp")
    else:
        return make_synthetic_corpus(
            n_docs=args.docs,
            n_languages=args.languages,
            n_concepts=args.concepts,
            vocab=args.vocab,
            n_topics=args.topics,
            mean_tokens=args.tokens,
            n_test=args.test or 1_000,
            seed=args.seed,
        )


def solver_options(args: argparse.Namespace, corpus: SyntheticCorpus) -> dict:
    """solve_cr5's keyword arguments from the options (all but λ, the block and the start)."""
    return {
        "r": args.r,
        "oversampling": args.oversampling,
        "cg_rtol": args.cg_rtol,
        "cg_maxiter": 500,
        "precond_rank": args.precond_rank,
        "eig_rtol": args.eig_rtol,
        "eig_maxiter": 250,
        "seed": args.seed,
        "start_steps": args.start_steps,
        "reuse_solves": not args.no_reuse_solves,
        "stop_rule": args.stop_rule,
        "stop_patience": args.stop_patience,
        "validation": validation_set(corpus),
    }


def fit_grid(
    mode: str,
    grid: list[float],
    args: argparse.Namespace,
    corpus: SyntheticCorpus,
    backend: CorpusBackend,
    options: dict,
    rep: int,
) -> list[dict]:
    """One λ grid on ``backend``: ``mode`` "independent" (each λ from its own warm start) or
    "path" (largest λ first, each fit started from the previous one); a record per fit."""
    from pipeline.linalg import solve_cr5

    start, fits = None, []
    for lam in sorted(grid, reverse=mode == "path"):
        with Measure() as m:
            res = solve_cr5(
                backend,
                lam=lam,
                block_size=args.block_size,
                start=start if mode == "path" else None,
                keep_start=mode == "path",
                **options,
            )
        start = res.path_start
        ret = retrieval(res.components, corpus.test)
        p1s = [v["p@1"] for v in ret.values()]
        fits.append(
            {
                "lam": lam,
                "wall_s": round(m.wall, 2),
                "cpu_s": round(m.cpu, 2),
                "eigensolver_iterations": res.history["eigensolver"]["n_iter"],
                "column_passes": sum(res.history["passes"]["column_passes"].values()),
                "stopped_by": res.history["eigensolver"]["stopped_by"],
                "P@1_mean": round(float(np.mean(p1s)), 4),
                "P@1_min": round(float(np.min(p1s)), 4),
            }
        )
        if corpus.validation:  # λ is then chosen on it, as the evaluate stage does
            val = retrieval(res.components, corpus.validation).values()
            fits[-1]["validation_P@1"] = round(float(np.mean([v["p@1"] for v in val])), 4)
        print(f"   λ grid [{mode}, run {rep + 1}] {fits[-1]}", flush=True)
    return fits


#: the fields of a fit record that may differ between repeated runs of the same fit
TIMINGS = ("wall_s", "cpu_s", "timings")


def median_walls(reps: list[list[dict]]) -> list[dict]:
    """The first run's fit records with each wall and CPU time replaced by its median over
    the runs (all runs kept in ``wall_s_runs``); ``reps[i][j]``: run i of fit j. The solves
    are deterministic: a run whose record differs from the first in anything but its
    :data:`TIMINGS` (passes, iterations, P@1) is an error, not noise."""
    fits = []
    for records in zip(*reps, strict=True):
        first = records[0]
        same = {k: v for k, v in first.items() if k not in TIMINGS}
        for other in records[1:]:
            if {k: v for k, v in other.items() if k not in TIMINGS} != same:
                raise RuntimeError(f"repeated runs of one fit differ: {first} vs {other}")
        walls = [rec["wall_s"] for rec in records]
        fits.append(
            {
                **first,
                "wall_s": round(float(np.median(walls)), 2),
                "cpu_s": round(float(np.median([rec["cpu_s"] for rec in records])), 2),
                **({"wall_s_runs": walls} if len(walls) > 1 else {}),
            }
        )
    return fits


def run_lambda_grid(
    kind: str, args: argparse.Namespace, corpus: SyntheticCorpus, nnz: dict[str, int], b: int
) -> dict:
    """The λ grid on one backend, fitted independently and as a path (largest λ first, each
    fit started from the previous one's leading Ritz vectors; issue 16: ≤ 2x one fit)."""
    grid = [float(x) for x in args.lambda_grid.split(",")]
    out: dict = {"grid": grid, "stop_rule": args.stop_rule, "stop_patience": args.stop_patience}
    options = solver_options(args, corpus)
    with tempfile.TemporaryDirectory(prefix="bench_train_") as tmp:
        backend, close, _ = make_our_backend(
            kind, corpus, Path(tmp), args.spark_master, args.partitions
        )
        try:
            runs: dict[str, list[list[dict]]] = {"independent": [], "path": []}
            # alternating the modes spreads the machine's drift over both
            for rep in range(args.grid_repeats):
                for mode in ("independent", "path"):
                    runs[mode].append(fit_grid(mode, grid, args, corpus, backend, options, rep))
            for mode, reps in runs.items():
                fits = median_walls(reps)
                key = "validation_P@1" if corpus.validation else "P@1_mean"
                best = max(fits, key=lambda f: f[key])
                out[mode] = {
                    "fits": fits,
                    "total_wall_s": round(sum(f["wall_s"] for f in fits), 2),
                    "total_column_passes": sum(f["column_passes"] for f in fits),
                    "chosen_by": key,
                    "chosen_lam": best["lam"],
                    "chosen_P@1": best["P@1_mean"],
                }
        finally:
            if close is not None:
                close()
    modes = ("independent", "path")
    one_fit = out["independent"]["total_wall_s"] / len(grid)
    one_fit_passes = out["independent"]["total_column_passes"] / len(grid)
    out["grid_over_one_fit"] = {m: round(out[m]["total_wall_s"] / one_fit, 2) for m in modes}
    out["grid_column_passes_over_one_fit"] = {
        m: round(out[m]["total_column_passes"] / one_fit_passes, 2) for m in modes
    }
    at_lam = [f for f in out["independent"]["fits"] if f["lam"] == float(args.lam)]
    if at_lam:  # the fit a user would run without a grid
        out["grid_over_fit_at_lam"] = {
            m: round(out[m]["total_wall_s"] / at_lam[0]["wall_s"], 2) for m in modes
        }
    print(
        f"== λ grid {grid}: cost over one fit (mean independent fit): wall "
        f"{out['grid_over_one_fit']}, column-passes {out['grid_column_passes_over_one_fit']}; "
        f"over the fit at λ = {args.lam:g}: {out.get('grid_over_fit_at_lam')}"
    )
    for m in modes:
        print(
            f"   {m}: chosen λ = {out[m]['chosen_lam']:g} (by {out[m]['chosen_by']}), "
            f"held-out P@1 {out[m]['chosen_P@1']}"
        )
    return out


def validation_set(corpus: SyntheticCorpus):
    """The corpus's validation hold-out as the solver's ValidationSet (None when empty)."""
    from pipeline.linalg.monitor import ValidationSet

    if not corpus.validation:
        return None
    return ValidationSet(
        {lang: x for lang, (x, _) in corpus.validation.items()},
        {lang: np.asarray(c) for lang, (_, c) in corpus.validation.items()},
    )


def run_ours(
    kind: str, args: argparse.Namespace, corpus: SyntheticCorpus, nnz: dict[str, int], b: int
) -> tuple[dict, dict | None]:
    """Fit ours on backend ``kind``; returns (results entry, components or None)."""
    from pipeline.linalg import solve_cr5

    with tempfile.TemporaryDirectory(prefix="bench_train_") as tmp:
        backend, close, setup = make_our_backend(
            kind, corpus, Path(tmp), args.spark_master, args.partitions
        )
        if backend is None:
            print(f"== ours [{kind}]: SKIPPED: {setup['skipped']}")
            return {"backend": kind, **setup}, None
        if setup:
            print(f"== ours [{kind}] setup (not timed below): {setup}")
        counts = count_language_passes(backend, nnz)
        print(f"== ours [{kind}] running ...", flush=True)
        try:
            with Measure() as m_ours:
                res = solve_cr5(backend, lam=args.lam, block_size=b, **solver_options(args, corpus))
        finally:
            if close is not None:
                close()
    h = res.history
    solves = h["solves"]
    entry = {
        "backend": kind,
        "setup": setup,
        **m_ours.to_dict(),
        "timings": h["timings"],
        "eigensolver_iterations": h["eigensolver"]["n_iter"],
        "eigensolver_converged": h["eigensolver"]["converged"],
        "stopping": {k: v for k, v in h["stopping"].items() if k != "iterations"},
        "monitor": [
            {k: v for k, v in rec.items() if k != "validation_per_direction"}
            for rec in h["stopping"]["iterations"]
        ],
        "backend_pass_counts": h["passes"],
        "per_language_passes": counts,
        "full_x_equivalent": full_x_equivalents(counts, nnz),
        "cg_iterations_per_solve": {
            lang: [s["n_iter"].get(lang) for s in solves] for lang in corpus.train
        },
        "eigenvalues_top5": [round(float(v), 6) for v in res.eigenvalues[:5]],
        "retrieval": retrieval(res.components, corpus.test),
    }
    fx = entry["full_x_equivalent"]
    print(
        f"   done: {m_ours.wall:.1f} s wall, {m_ours.cpu:.1f} s CPU, "
        f"{h['eigensolver']['n_iter']} Lanczos iterations, "
        f"{fx['passes']} full-X passes ({fx['column_passes']} column-passes), stopped by "
        f"{h['stopping']['stopped_by']} (returned iteration {h['stopping']['returned_iteration']})"
    )
    return entry, res.components


def fmt_row(cells: list, widths: list[int]) -> str:
    return "  ".join(
        str(c).rjust(w) if i else str(c).ljust(w)
        for i, (c, w) in enumerate(zip(cells, widths, strict=True))
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.stop_rule == "validation" and not args.validation:
        raise SystemExit("--stop-rule validation needs --validation N (validation concepts)")
    if args.grid_repeats < 1:
        raise SystemExit(f"--grid-repeats must be >= 1; got {args.grid_repeats}")
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    if not args.no_tracemalloc:
        tracemalloc.start()
    info = machine_info()
    # as the pipeline's runner does (spark.driver_malloc_tuning); both methods run after it
    info["malloc_tuning"] = False if args.no_malloc_tuning else tune_malloc()
    print("== machine")
    for key, val in info.items():
        print(f"  {key}: {val}")
    if info["OPENBLAS_NUM_THREADS"] != "1":
        print("  WARNING: OPENBLAS_NUM_THREADS is not 1 (multithreaded BLAS was 5-8x slower here)")

    with Measure() as m_gen:
        corpus = load_corpus(args)
    ci = corpus.info
    nnz = {lang: v["nnz"] for lang, v in ci["per_language"].items()}
    # The eigensolver's block width (the solver's own default rule).
    from pipeline.linalg.cr5 import default_block_size

    b = args.block_size or default_block_size(args.r, args.oversampling, warm=args.start_steps > 0)
    b = min(b, corpus.n_concepts)
    print(f"== corpus {args.corpus} (built in {m_gen.wall:.1f} s, seed {args.seed})")
    print(
        f"  n = {ci['n_train']} training docs, K = {corpus.n_concepts} training concepts, "
        f"nnz = {ci['nnz']}, topics = {ci['n_topics']}, "
        f"held-out concepts = {len(next(iter(corpus.test.values()))[1])}, "
        f"validation concepts = {ci.get('n_validation', 0)}"
    )
    for lang, v in ci["per_language"].items():
        print(
            f"  {lang}: n_l = {v['n_train']:>7}  p_l = {v['p']:>6}  nnz_l = {v['nnz']:>9}  "
            f"coverage = {v['coverage']:.2f}  test docs = {v['n_test']}"
        )
    print(
        f"  r = {args.r}, oversampling = {args.oversampling}, b = {b}, lambda = {args.lam}, "
        f"warm-start steps = {args.start_steps}, reuse solves = {not args.no_reuse_solves}, "
        f"CG preconditioner rank = {args.precond_rank}"
    )
    print(
        f"  tolerances: CG rtol {args.cg_rtol} ours / 0.01 baseline, maxiter 500, eigensolver "
        f"rtol {args.eig_rtol} ours / 0.1 baseline (ours: maxiter 250; w = B^-1 mu solved to "
        "1e-6)"
    )
    results: dict = {
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "machine": info,
        "corpus": ci,
        "block_size": b,
        "memory_note": (
            "tracemalloc_peak_mb: peak of Python/numpy heap allocations (numpy and scipy.sparse "
            "arrays are traced) during the phase, above the level at its start; "
            "maxrss_after_mb: process RSS high-water mark (ru_maxrss) after the phase, "
            "cumulative over the run; neither includes Spark JVM/executor memory"
        ),
    }

    if args.lambda_grid:
        results["lambda_grid"] = run_lambda_grid(args.backend, args, corpus, nnz, b)
        if args.out is not None:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(results, indent=2, default=float) + "\n")
            print(f"\nwrote {args.out}")
        return 0

    # --- ours ------------------------------------------------------------------------------
    ours_comps = None
    if args.backend == "spark" and args.also_local:
        results["ours_local"], _ = run_ours("local", args, corpus, nnz, b)
    results["ours"], ours_comps = run_ours(args.backend, args, corpus, nnz, b)
    if "ours_local" in results and "wall_s" in results["ours"]:
        sp_, lo = results["ours"], results["ours_local"]
        results["ratio_spark_over_local"] = {"wall": round(sp_["wall_s"] / lo["wall_s"], 2)}
        print(
            f"== spark / local (same run, same corpus): wall {sp_['wall_s']:.1f} s / "
            f"{lo['wall_s']:.1f} s = {results['ratio_spark_over_local']['wall']}"
        )

    # --- baseline --------------------------------------------------------------------------
    base_comps = None
    if args.skip_baseline:
        print("== baseline: skipped (--skip-baseline)")
    else:
        print(
            f"== baseline [scipy eigsh tol {args.baseline_eig_tol} + cg, one vector at a time, "
            "float64] running ...",
            flush=True,
        )
        with Measure() as m_base:
            base_comps, base_vals, bstats = baseline_cr5(
                corpus.train,
                corpus.n_concepts,
                lam=args.lam,
                r=args.r,
                eig_tol=args.baseline_eig_tol,
                seed=args.seed,
            )
        total_passes = sum(bstats["passes"].values())
        results["baseline"] = {
            **m_base.to_dict(),
            **bstats,
            "full_x_equivalent": {"passes": total_passes, "column_passes": total_passes},
            "eigenvalues_top5": [round(float(v), 6) for v in base_vals[:5]],
            "retrieval": retrieval(base_comps, corpus.test),
        }
        print(
            f"   done: {m_base.wall:.1f} s wall, {m_base.cpu:.1f} s CPU, "
            f"{bstats['m_applications']} M applications, {bstats['cg_iterations']} CG iterations, "
            f"{total_passes} passes"
        )

    if ours_comps is not None and base_comps is not None:
        results["principal_angles"] = principal_angles(ours_comps, base_comps)
        o, bl = results["ours"], results["baseline"]
        results["ratio_baseline_over_ours"] = {
            "wall": round(bl["wall_s"] / o["wall_s"], 2),
            "cpu": round(bl["cpu_s"] / o["cpu_s"], 2),
            "passes": round(
                bl["full_x_equivalent"]["passes"] / o["full_x_equivalent"]["passes"], 2
            ),
            "column_passes": round(
                bl["full_x_equivalent"]["column_passes"] / o["full_x_equivalent"]["column_passes"],
                2,
            ),
            "tracemalloc_peak": round(bl["tracemalloc_peak_mb"] / o["tracemalloc_peak_mb"], 2)
            if o["tracemalloc_peak_mb"]
            else None,
        }

    print_table(results, corpus)
    if "ratio_spark_over_local" in results:
        print(f"  spark / local wall time (same run): {results['ratio_spark_over_local']['wall']}")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2, default=float) + "\n")
        print(f"\nwrote {args.out}")
    return 0


def print_table(results: dict, corpus: SyntheticCorpus) -> None:
    langs = list(corpus.train)
    a, b = langs[0], langs[1]
    methods = [m for m in ("ours_local", "ours", "baseline") if "wall_s" in results.get(m, {})]
    if not methods:
        return
    with_ratio = "ours" in methods and "baseline" in methods
    print("\n== results")
    widths = [34] + [16] * len(methods) + ([16] if with_ratio else [])
    head = ["", *methods] + (["baseline/ours"] if with_ratio else [])
    print(fmt_row(head, widths))
    ratio = results.get("ratio_baseline_over_ours", {})

    def row(label: str, key, ratio_key: str | None = None) -> None:
        cells = [label] + [key(results[m]) for m in methods]
        if with_ratio:
            cells.append(ratio.get(ratio_key, "") if ratio_key else "")
        print(fmt_row(cells, widths))

    row("wall time [s]", lambda r: f"{r['wall_s']:.1f}", "wall")
    row("CPU time [s]", lambda r: f"{r['cpu_s']:.1f}", "cpu")
    row("passes over X (full-X equiv.)", lambda r: r["full_x_equivalent"]["passes"], "passes")
    row(
        "column-passes (full-X equiv.)",
        lambda r: r["full_x_equivalent"]["column_passes"],
        "column_passes",
    )
    row(
        "peak heap, tracemalloc [MB]",
        lambda r: "-" if r["tracemalloc_peak_mb"] is None else f"{r['tracemalloc_peak_mb']:.0f}",
        "tracemalloc_peak",
    )
    row("ru_maxrss after phase [MB]", lambda r: f"{r['maxrss_after_mb']:.0f}")
    for pair in (f"{a}->{b}", f"{b}->{a}"):
        row(f"P@1 {pair}", lambda r, p=pair: f"{r['retrieval'][p]['p@1']:.3f}")
        row(f"MRR {pair}", lambda r, p=pair: f"{r['retrieval'][p]['mrr']:.3f}")

    def mean_over_pairs(r: dict, key: str) -> str:
        return f"{np.mean([v[key] for v in r['retrieval'].values()]):.3f}"

    row("P@1 mean over all pairs", lambda r: mean_over_pairs(r, "p@1"))
    row("MRR mean over all pairs", lambda r: mean_over_pairs(r, "mrr"))
    row("top eigenvalue of M", lambda r: f"{r['eigenvalues_top5'][0]:.4g}")
    if "baseline" in methods:
        bl = results["baseline"]
        print(
            f"  baseline: {bl['m_applications']} M applications ({bl['eigsh_m_applications']} in "
            f"eigsh), {bl['cg_solves']} CG solves, {bl['cg_iterations']} CG iterations "
            f"(per solve {bl['cg_iterations_per_solve']}), {bl['cg_not_converged']} not converged; "
            f"eigsh {bl['eigsh_seconds']} s, Phi {bl['phi_seconds']} s"
        )
    if "ours" in methods:
        o = results["ours"]
        print(
            f"  ours: {o['eigensolver_iterations']} block-Lanczos iterations "
            f"(converged={o['eigensolver_converged']}), timings {o['timings']}"
        )
        print(f"  ours: backend pass counts (per-language passes) {o['backend_pass_counts']}")
        print(f"  ours: CG iterations per solve {o['cg_iterations_per_solve']}")
    if "principal_angles" in results:
        print(f"  principal angles ours vs baseline: {results['principal_angles']}")


if __name__ == "__main__":
    raise SystemExit(main())
