"""Per-pass cost of the Spark corpus backend against the local one (one gram pass, b = 120).

Builds the tfidf dataset of the bundled DDTP sample (ingest -> vocabulary -> tfidf with
``conf/local.yaml`` + ``conf/short-docs.yaml``) under a temporary root, then times, per
language and backend (float32 passes), the median of ``--repeats`` gram passes, and splits the
Spark cost into its fixed parts:

* ``empty job``  — a job over the same number of partitions doing nothing (task launch with
  reused Python workers, scheduling, result collection);
* ``touch``      — a job that only deserialises the cached CSR blocks;
* ``broadcast``  — ``sc.broadcast`` + ``destroy`` of V (p_l x 120 float32), driver side.

Usage::

    OPENBLAS_NUM_THREADS=1 python bench/bench_backend_overhead.py [--repeats 15]
        [--out bench/results/backend_overhead.txt]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from pipeline.backends import make_backend  # noqa: E402
from pipeline.config import load_config  # noqa: E402
from pipeline.spark import get_spark  # noqa: E402
from pipeline.stages import get_stage  # noqa: E402

B = 120


def median_ms(fn, repeats: int) -> float:
    fn()  # warm-up (Python workers, broadcast paths)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "backend_overhead.txt"))
    args = ap.parse_args(argv)

    root = tempfile.mkdtemp(prefix="cr5-bench-")
    cfg = load_config(
        [REPO / "conf" / "local.yaml", REPO / "conf" / "short-docs.yaml"],
        [f"paths.root={root}", f"ingest.input={REPO / 'data/sample/ddtp_en_de_fr_es.parquet'}"],
    )
    spark = get_spark(cfg.spark)
    sc = spark.sparkContext
    for stage in ("ingest", "vocabulary", "tfidf"):
        get_stage(stage)(spark, cfg)
    path = cfg.paths.dataset("tfidf")

    t0 = time.perf_counter()
    local = make_backend("local", spark, path, dtype="float32")
    t_local = time.perf_counter() - t0
    t0 = time.perf_counter()
    remote = make_backend("spark", spark, path, dtype="float32")
    t_spark = time.perf_counter() - t0
    # Empty jobs use a builtin as the task function: a lambda defined in ``__main__`` is
    # pickled by value and was measured to add ~0.5 s per job here.
    empty: dict[int, object] = {}

    rng = np.random.default_rng(0)
    lines = [
        "Spark vs local corpus backend: one gram pass X_l^T (X_l V), V of shape (p_l, 120), "
        "float32 passes",
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, master {sc.master}, OPENBLAS_NUM_THREADS="
        f"{os.environ.get('OPENBLAS_NUM_THREADS')}, median of {args.repeats}",
        f"load: local {t_local:.2f} s (toArrow + CSR), spark {t_spark:.2f} s "
        "(mapInArrow -> cached CSR blocks + column statistics, languages concurrently)",
        "",
        f"{'lang':>4} {'n_l':>6} {'p_l':>6} {'nnz':>8} {'parts':>5} {'block MB':>8} "
        f"{'local ms':>8} {'spark ms':>8} {'ratio':>6} {'empty job':>9} {'touch':>6} "
        f"{'bcast':>6}",
    ]
    for lang in local.languages:
        x = local.matrix(lang)
        v = rng.standard_normal((x.shape[1], B))
        t_loc = median_ms(lambda lang=lang, v=v: local.gram(lang, v), args.repeats)
        t_sp = median_ms(lambda lang=lang, v=v: remote.gram(lang, v), args.repeats)
        parts = remote.n_partitions(lang)
        if parts not in empty:
            empty[parts] = sc.parallelize(range(parts), parts).cache()
            empty[parts].count()
        t_empty = median_ms(
            lambda parts=parts: empty[parts].mapPartitions(iter).collect(), args.repeats
        )
        t_touch = median_ms(lambda lang=lang: remote._touch(lang), args.repeats)
        v32 = v.astype(np.float32)
        t_bc = median_ms(lambda v32=v32: sc.broadcast(v32).destroy(), args.repeats)
        mb = (x.data.nbytes + x.indices.nbytes + x.indptr.nbytes) / 2**20
        lines.append(
            f"{lang:>4} {x.shape[0]:>6} {x.shape[1]:>6} {x.nnz:>8} {parts:>5} {mb:>8.2f} "
            f"{t_loc:>8.1f} {t_sp:>8.1f} {t_sp / t_loc:>6.1f} {t_empty:>9.1f} {t_touch:>6.1f} "
            f"{t_bc:>6.1f}"
        )
    lines += [
        "",
        "columns: local/spark ms = median wall time of one gram pass; ratio = spark / local;",
        "empty job = job over the same number of partitions doing nothing; touch = job that",
        "only unpickles the cached blocks; bcast = sc.broadcast(V float32) + destroy (driver).",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    remote.close()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
