"""What the integrity checks cost: checksums on write, checks on read, against writing and
reading the same data.

Writes a synthetic ``tfidf``-shaped Parquet dataset with pyarrow (hive directories
``lang=xx/``, zstd, ``--rows`` rows of ``--nnz`` random (index, value) pairs, float32 values:
barely compressible), then times, as medians of ``--repeats`` runs in one process:

* ``write``: pyarrow writing the dataset (the least any writer pays; Spark's writer pays
  more), the baseline of
* ``checksums``: the writer's SHA-256 of every file (:func:`pipeline.io.integrity.file_checksums`,
  4 threads), right after the write (page cache warm, as in a stage);
* ``read``: pyarrow reading the whole dataset into memory (the least a reader pays), the
  baseline of
* ``verify sizes``: the reader's check without checksums (one listing);
* ``verify checksums``: the reader's full check (listing and SHA-256, 4 threads).

Usage::

    OPENBLAS_NUM_THREADS=1 python bench/bench_integrity.py [--rows 400000] [--nnz 60]
        [--repeats 5] [--out bench/results/integrity]
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
import pyarrow.dataset as ds  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from bench.machine import machine_info  # noqa: E402
from pipeline.io import integrity  # noqa: E402

LANGS = ("de", "en", "es", "fr")


def write(root: Path, rows: int, nnz: int, files_per_lang: int, seed: int = 0) -> None:
    """The dataset: per language ``files_per_lang`` files of sorted random term indices and
    float32 values, written with zstd like Spark's writer."""
    rng = np.random.default_rng(seed)
    per_file = rows // (len(LANGS) * files_per_lang)
    for lang in LANGS:
        (root / f"lang={lang}").mkdir(parents=True)
        for f in range(files_per_lang):
            idx = np.sort(rng.integers(0, 200_000, size=(per_file, nnz), dtype=np.int32), axis=1)
            val = rng.random((per_file, nnz), dtype=np.float32)
            offsets = pa.array(np.arange(0, per_file * nnz + 1, nnz, dtype=np.int32))
            table = pa.table(
                {
                    "row": pa.array(np.arange(per_file, dtype=np.int64)),
                    "indices": pa.ListArray.from_arrays(offsets, pa.array(idx.ravel())),
                    "values": pa.ListArray.from_arrays(offsets, pa.array(val.ravel())),
                }
            )
            pq.write_table(
                table, root / f"lang={lang}" / f"part-{f:05d}.parquet", compression="zstd"
            )


def median_s(fn, repeats: int) -> tuple[float, list[float]]:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), [round(t, 4) for t in times]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=400_000)
    p.add_argument("--nnz", type=int, default=60)
    p.add_argument("--files-per-lang", type=int, default=4)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", default=str(REPO / "bench" / "results" / "integrity"))
    args = p.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="cr5-integrity-"))
    try:
        root = base / "tfidf"
        counter = iter(range(10**6))

        def fresh_write() -> None:
            target = base / f"w{next(counter)}"
            write(target, args.rows, args.nnz, args.files_per_lang)
            shutil.rmtree(target)

        write(root, args.rows, args.nnz, args.files_per_lang)
        files = {p.relative_to(root).as_posix(): p.stat().st_size for p in root.rglob("*.parquet")}
        total = sum(files.values())
        manifest = {"files": files, "checksums": integrity.file_checksums(str(root), files)}
        integrity.seal(manifest)
        results = {}
        results["write"] = median_s(fresh_write, args.repeats)
        results["checksums"] = median_s(
            lambda: integrity.file_checksums(str(root), files), args.repeats
        )
        results["read"] = median_s(
            lambda: ds.dataset(root, format="parquet", partitioning="hive").to_table(),
            args.repeats,
        )
        results["verify sizes"] = median_s(
            lambda: integrity.verify_dataset(
                str(root), manifest, dataset="tfidf", producer="tfidf", checksums=False
            ),
            args.repeats,
        )
        results["verify checksums"] = median_s(
            lambda: integrity.verify_dataset(
                str(root), manifest, dataset="tfidf", producer="tfidf", checksums=True
            ),
            args.repeats,
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    mb = total / 2**20
    ratios = {
        "checksums / write": results["checksums"][0] / results["write"][0],
        "verify sizes / read": results["verify sizes"][0] / results["read"][0],
        "verify checksums / read": results["verify checksums"][0] / results["read"][0],
    }
    lines = [
        f"dataset: {args.rows} rows x {args.nnz} nonzeros, {len(files)} files, {mb:.1f} MB "
        f"(zstd Parquet), median of {args.repeats}",
        *(
            f"{name:>17}: {med:8.3f} s  ({mb / med:7.0f} MB/s)"
            for name, (med, _) in results.items()
        ),
        *(f"{name:>25}: {value:.3f}" for name, value in ratios.items()),
    ]
    text = "\n".join(lines)
    print(text)
    out = Path(args.out)
    out.with_suffix(".txt").write_text(text + "\n")
    record = {
        "machine": machine_info("pyarrow"),
        "args": vars(args),
        "bytes": total,
        "files": len(files),
        "seconds": {k: {"median": v[0], "runs": v[1]} for k, v in results.items()},
        "ratios": ratios,
    }
    out.with_suffix(".json").write_text(json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
