"""A small writer process for tests/test_faults.py: the dataset commit protocol of
pipeline/io/publish.py (the same code write_dataset runs) without Spark, so many
concurrent rounds stay fast.

    python -m tests.concurrent_writer PATH ROWS [--files N] [--sleep S] [--wait S]

Writes ROWS JSON-lines rows (tagged with this writer's token) in N part files,
sleeping S seconds per file, then the manifest with ``rows``, ``files`` and
``write_token``, and publishes. Exit 2 with ``error: ...`` on a pipeline error, as the
jobs do.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from pipeline.errors import PipelineError
from pipeline.io.publish import MANIFEST, LocalFS, data_files, publish, write_lock


def write(path: str, rows: int, files: int, sleep: float, wait: float, stale: float) -> None:
    fs = LocalFS()
    with write_lock(fs, path, wait_seconds=wait, stale_seconds=stale, dataset="test") as lock:
        token = lock.owner.token

        def write_parts(tmp: str) -> dict:
            fs.mkdirs(tmp)
            per = [rows // files + (i < rows % files) for i in range(files)]
            start = 0
            for i, n in enumerate(per):
                with open(f"{tmp}/part-{i:05d}.jsonl", "w") as f:
                    for j in range(start, start + n):
                        f.write(json.dumps({"row": j, "writer": token}) + "\n")
                start += n
                time.sleep(sleep)
            counted = sum(fs.read_text(f"{tmp}/{name}").count("\n") for name in data_files(fs, tmp))
            manifest = {
                "rows": counted,
                "files": data_files(fs, tmp),
                "write_token": token,
            }
            fs.write_text(f"{tmp}/{MANIFEST}", json.dumps(manifest))
            return manifest

        publish(fs, lock, write_parts)
    print(token, flush=True)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("path")
    p.add_argument("rows", type=int)
    p.add_argument("--files", type=int, default=4)
    p.add_argument("--sleep", type=float, default=0.02)
    p.add_argument("--wait", type=float, default=0.0)
    p.add_argument("--stale", type=float, default=300.0)
    a = p.parse_args()
    try:
        write(a.path, a.rows, a.files, a.sleep, a.wait, a.stale)
    except PipelineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
