"""What the storage layer costs: publishing and reading a model through the session's Hadoop
FileSystem (a ``viewfs://`` mount onto a local directory) against the local disk.

Builds a synthetic Cr5-shaped model (``--langs`` languages of ``--terms`` terms, Φ_lᵀ
float32 of r = ``--r`` columns: barely compressible), then times, as medians of
``--repeats`` alternating runs in one process with one local Spark session:

* ``save local``: :func:`pipeline.model.save_model` to a local directory (staged in a
  sibling, renamed into place), the baseline of
* ``save viewfs``: the same model to ``viewfs://bench/data/...``: staged in a local scratch
  directory, uploaded by the driver's JVM (``copyFromLocalFile``), renamed into place;
* ``load local``: :meth:`pipeline.model.Cr5Model.load` with every SHA-256 checked (the
  second read after the write: the first pays for pages just written), the baseline of
* ``load viewfs, cold``: the same from the store into an empty local cache (copy, sizes and
  SHA-256 checked against model.json, then the load's own checks);
* ``load viewfs, warm``: again, with the cache entry in place (model.json read from the store
  and hashed to find it).

The store is the local disk underneath, so the ratios are the layer's own overhead (py4j,
Hadoop's local FileSystem, the extra copy), not a network's.

Usage::

    OPENBLAS_NUM_THREADS=1 python bench/bench_storage.py [--terms 100000] [--r 100]
        [--langs 4] [--repeats 3] [--out bench/results/storage]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

from bench.machine import machine_info  # noqa: E402


def model_maps(langs: int, terms: int, r: int) -> dict:
    from pipeline.model import LanguageMap

    rng = np.random.default_rng(0)
    return {
        f"l{i}": LanguageMap(
            terms=pa.array([f"t{i}_{j}" for j in range(terms)]),
            idf=rng.uniform(0.5, 8, terms).astype(np.float32),
            df=rng.integers(1, 1000, terms),
            phi=rng.normal(size=(terms, r)).astype(np.float32),
            mean=rng.uniform(size=terms).astype(np.float32),
        )
        for i in range(langs)
    }


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--terms", type=int, default=100_000)
    p.add_argument("--r", type=int, default=100)
    p.add_argument("--langs", type=int, default=4)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default=str(REPO / "bench" / "results" / "storage"))
    args = p.parse_args()

    from pipeline.config import load_config
    from pipeline.model import Cr5Model, save_model
    from pipeline.spark import get_spark

    work = Path(tempfile.mkdtemp(prefix="cr5-bench-storage-"))
    os.environ["CR5_CACHE_DIR"] = str(work / "cache")
    os.environ["CR5_SCRATCH_DIR"] = str(work)
    (work / "store").mkdir()
    cfg = load_config([REPO / "conf" / "local.yaml"], ["spark.app_name=bench-storage"])
    spark = get_spark(cfg.spark)
    spark.sparkContext._jsc.hadoopConfiguration().set(
        "fs.viewfs.mounttable.bench.link./data", (work / "store").as_uri()
    )
    maps = model_maps(args.langs, args.terms, args.r)
    meta = {"r": args.r, "lam": 1.0}
    local, remote = str(work / "local" / "model"), "viewfs://bench/data/model"
    times: dict[str, list[float]] = {
        k: []
        for k in (
            "save local",
            "save viewfs",
            "load local",
            "load viewfs, cold",
            "load viewfs, warm",
        )
    }
    for _ in range(args.repeats):
        times["save local"].append(timed(lambda: save_model(local, maps, meta)))
        times["save viewfs"].append(timed(lambda: save_model(remote, maps, meta)))
        Cr5Model.load(local)  # the first read after a write is slower (page cache): untimed
        times["load local"].append(timed(lambda: Cr5Model.load(local)))
        shutil.rmtree(work / "cache", ignore_errors=True)
        times["load viewfs, cold"].append(timed(lambda: Cr5Model.load(remote)))
        times["load viewfs, warm"].append(timed(lambda: Cr5Model.load(remote)))
    size = sum(f.stat().st_size for f in Path(local).rglob("*") if f.is_file())
    med = {k: statistics.median(v) for k, v in times.items()}
    ratios = {
        "save viewfs / save local": med["save viewfs"] / med["save local"],
        "load viewfs, cold / load local": med["load viewfs, cold"] / med["load local"],
        "load viewfs, warm / load local": med["load viewfs, warm"] / med["load local"],
    }
    lines = [
        f"model: {args.langs} languages x {args.terms} terms, r = {args.r}: "
        f"{size / 2**20:.0f} MB; medians of {args.repeats} runs",
        *(f"{k:>20}: {v:7.2f} s" for k, v in med.items()),
        *(f"{k:>32}: {v:5.2f}x" for k, v in ratios.items()),
    ]
    print("\n".join(lines))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".txt").write_text("\n".join(lines) + "\n")
    record = {
        "args": vars(args),
        "model_bytes": size,
        "seconds": times,
        "median_seconds": med,
        "ratios": ratios,
        "machine": machine_info("pyspark", "pyarrow"),
    }
    out.with_suffix(".json").write_text(json.dumps(record, indent=1, default=str))
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
