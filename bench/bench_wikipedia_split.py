"""Single-stream ``pages-articles.xml.bz2``: one task against tasks split at bz2 blocks.

    D=$GENSIM_TEST_DATA/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2
    OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/bench_wikipedia_split.py --dump $D \\
        --copies 6 --out bench/results/wikipedia_split.txt

The dump (the largest at hand: gensim's 1.7 MB shortened enwiki dump, 206 pages) is
rebuilt as ONE bz2 stream holding its pages ``--copies`` times (compression level 9 =
900 kB blocks, as Wikimedia's dumps), and parsed + cleaned (:func:`parse_item`: pages,
classification, cleaning, one row per page) four ways:

- ``in_process``: the whole file as one work item (what a plain ``.bz2`` was before:
  one task, the in-process parser);
- ``blocks_1_process``: the work items of the block split (``split_bytes`` decompressed
  bytes each), run one after the other in one process: the cost of splitting;
- ``blocks_2_processes``: the same items on a pool of 2 processes (the machine has 2
  cores): the scaling, without Spark;
- ``spark_1_task`` / ``spark_blocks``: the stage's parse job (:func:`parse_dumps`,
  counted) on ``local[2]`` over the single item and over the block items.

Wall time and CPU time (summed over the processes) are reported; the machine is shared,
so the load average is recorded with the numbers.
"""

from __future__ import annotations

import argparse
import bz2
import importlib.util
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def build_dump(src: str, copies: int, out: str) -> tuple[int, int]:
    """Write ``out``: the pages of ``src`` ``copies`` times, one bz2 stream; (pages, bytes)."""
    spec = importlib.util.spec_from_file_location(
        "make_samples", REPO / "tests" / "data" / "wiki" / "make_samples.py"
    )
    samples = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(samples)
    xml = bz2.decompress(Path(src).read_bytes()).decode("utf-8")
    head, pages, foot = samples.split_dump(xml)
    body = head + "".join(pages * copies) + foot
    data = body.encode("utf-8")
    Path(out).write_bytes(bz2.compress(data, 9))
    return len(pages) * copies, len(data)


def _run_items(items, wiki) -> tuple[int, float]:
    from pipeline.wikipedia.parse import parse_item

    c0, n = time.process_time(), 0
    for item in items:
        for row in parse_item(item, wiki):
            n += row[1] in ("page", "problem")
    return n, time.process_time() - c0


def _one(args):
    n, cpu = _run_items([args[0]], args[1])
    return n, cpu, os.getpid()


def _best(fn, repeat: int):
    """Best (smallest wall) of ``repeat`` runs of ``fn() -> (n, wall, cpu, busiest_cpu)``."""
    return min((fn() for _ in range(repeat)), key=lambda r: r[1])


def measure(path: str, split_bytes: int, spark: bool, repeat: int) -> dict:
    from pipeline.wikipedia.config import WikipediaConfig
    from pipeline.wikipedia.plan import WorkItem, plan_work

    wiki = WikipediaConfig(dumps={"en": path}, split_bytes=split_bytes, on_missing_concept="own_id")
    blocks = plan_work(wiki)
    whole = [WorkItem("en", path, 0, None, blocks[0].namespaces, False, blocks[0].dbname)]
    out: dict = {"block_items": len(blocks)}

    def serial(items):
        t0 = time.perf_counter()
        n, cpu = _run_items(items, wiki)
        return n, time.perf_counter() - t0, cpu, cpu

    def pooled():
        with mp.get_context("fork").Pool(2) as pool:
            t0 = time.perf_counter()
            parts = pool.map(_one, [(it, wiki) for it in blocks], chunksize=1)
            wall = time.perf_counter() - t0
        per_process: dict[int, float] = {}
        for _, cpu, pid in parts:
            per_process[pid] = per_process.get(pid, 0.0) + cpu
        return sum(p[0] for p in parts), wall, sum(per_process.values()), max(per_process.values())

    out["in_process"] = _best(lambda: serial(whole), repeat)
    out["blocks_1_process"] = _best(lambda: serial(blocks), repeat)
    out["blocks_2_processes"] = _best(pooled, repeat)

    if spark:
        from pipeline.config import load_config
        from pipeline.spark import get_spark
        from pipeline.wikipedia.parse import parse_dumps

        cfg = load_config([], ["spark.master=local[2]", "spark.shuffle_partitions=2"])
        session = get_spark(cfg.spark)
        parse_dumps(session, wiki, blocks[:2]).count()  # JVM and Python workers warm
        for name, items in (("spark_1_task", whole), ("spark_blocks", blocks)):

            def job(items=items):
                t0 = time.perf_counter()
                rows = parse_dumps(session, wiki, items).filter("kind in ('page', 'problem')")
                return rows.count(), time.perf_counter() - t0, None, None

            out[name] = _best(job, repeat)
        session.stop()
    return out


def render(dump: str, copies: int, pages: int, size: int, path: str, r: dict) -> str:
    load = os.getloadavg()
    base = r["in_process"][1]
    lines = [
        "Single-stream bz2 dump: one task vs tasks split at bz2 blocks "
        "(bench/bench_wikipedia_split.py)",
        f"input: {os.path.basename(dump)} x {copies} as ONE bz2 stream (level 9): {pages} pages, "
        f"{size / 1e6:.1f} MB XML, {os.path.getsize(path) / 1e6:.1f} MB bz2; "
        f"{r['block_items']} block work items",
        f"machine: {os.cpu_count()} cores, load average {load[0]:.1f} / {load[1]:.1f} / "
        f"{load[2]:.1f} after the run (shared machine); python {sys.version.split()[0]}",
        "",
        f"{'run':<22}{'pages':>7}{'wall s':>9}{'pages/s':>9}{'cpu s':>8}{'busiest cpu s':>15}"
        f"{'speed-up wall':>15}{'speed-up cpu':>14}",
    ]
    base_cpu = r["in_process"][3]
    for name in (
        "in_process",
        "blocks_1_process",
        "blocks_2_processes",
        "spark_1_task",
        "spark_blocks",
    ):
        if name not in r:
            continue
        n, wall, cpu, busiest = r[name]
        ref = r["spark_1_task"][1] if name == "spark_blocks" else base
        lines.append(
            f"{name:<22}{n:>7}{wall:>9.2f}{n / wall:>9.1f}"
            f"{'' if cpu is None else f'{cpu:.2f}':>8}"
            f"{'' if busiest is None else f'{busiest:.2f}':>15}{ref / wall:>14.2f}x"
            f"{'' if busiest is None else f'{base_cpu / busiest:.2f}x':>14}"
        )
    lines += [
        "(best of the repeats by wall time. speed-up wall: against in_process; spark_blocks",
        "against spark_1_task, same session. busiest cpu s: CPU seconds of the process that",
        "worked longest = the wall time on idle cores; speed-up cpu = in_process CPU / that,",
        "the scaling the split allows whatever the machine's load)",
    ]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dump", required=True)
    p.add_argument("--copies", type=int, default=6)
    p.add_argument("--split-bytes", type=int, default=8_000_000)
    p.add_argument("--no-spark", action="store_true")
    p.add_argument("--repeat", type=int, default=2, help="best wall time of this many runs")
    p.add_argument("--workdir", default="/tmp/bench_wikipedia_split")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    os.makedirs(args.workdir, exist_ok=True)
    path = os.path.join(args.workdir, "enwiki-single-stream-pages-articles.xml.bz2")
    pages, size = build_dump(args.dump, args.copies, path)
    r = measure(path, args.split_bytes, not args.no_spark, args.repeat)
    text = render(args.dump, args.copies, pages, size, path, r)
    print(text)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
