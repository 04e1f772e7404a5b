"""Spark ML benchmark: ``Cr5Embedding.transform`` against the Python API on one core.

What it does:

1. documents: a ``documents`` dataset (``--documents``, e.g. the Wikipedia-shaped corpus of
   ``bench/wikishape.py``), or one generated here with ``bench/wikishape.py`` (``--docs``);
2. **fit**: ``Pipeline([SQLTransformer, Cr5(r=--r)])`` fitted on the documents of the first
   ``--train-concepts`` concepts (timed; the model the transform uses);
3. **API** (one process, one core, Spark idle): :meth:`Cr5Model.embed` on ``--api-docs``
   documents of the input, read with pyarrow, in batches of ``--batch`` texts of one
   language (the model loaded before the clock starts);
4. **transform** (``local[2]``): the fitted PipelineModel's ``transform`` over every document,
   written to Spark's ``noop`` sink so that every vector is computed and handed back to the
   JVM and nothing else is measured; Python workers start before the clock (a warm-up
   transform of 1,000 documents);
5. equality: ``--sample`` documents, transform's vector against ``Cr5Model.embed``.

The figure is transform documents/s (2 cores) over the API's documents/s on one core; the
target is at least 0.5. CPU seconds of the Python workers, JVM and driver are sampled from
``/proc`` for the transform.

Usage (repository root)::

    OPENBLAS_NUM_THREADS=1 nice -n 10 .venv/bin/python bench/bench_sparkml.py \\
        --documents /tmp/cr5_chain_1000000/out/documents --r 300 \\
        --out bench/results/sparkml.json > bench/results/sparkml.txt
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.machine import machine_info, process_tree  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def emit(line: str = "") -> None:
    print(line, flush=True)


def cpu_seconds(root: int) -> dict[str, float]:
    """CPU seconds (user + system) of ``root``'s process tree, by kind."""
    out = {"driver": 0.0, "jvm": 0.0, "python_workers": 0.0}
    for pid, fields in process_tree(root).items():
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        seconds = (int(fields[11]) + int(fields[12])) / TICK
        if pid == root:
            out["driver"] += seconds
        elif "java" in cmd.split(" ")[0]:
            out["jvm"] += seconds
        elif "pyspark.daemon" in cmd or "pyspark/daemon" in cmd or "worker" in cmd:
            out["python_workers"] += seconds
    return {k: round(v, 1) for k, v in out.items()}


def generate_documents(args: argparse.Namespace, root: Path) -> str:
    """``bench/wikishape.py --docs N`` into ``root``; returns the documents dataset."""
    cmd = [
        sys.executable,
        str(ROOT / "bench" / "wikishape.py"),
        "--conf",
        str(ROOT / "conf" / "local.yaml"),
        "--conf",
        str(ROOT / "bench" / "wikishape.yaml"),
        "--set",
        f"paths.root={root}",
        "--docs",
        str(args.docs),
    ]
    subprocess.run(cmd, check=True, cwd=ROOT)
    return str(root / "documents")


def api_rate(model_dir: str, documents: str, n_docs: int, batch: int) -> dict[str, Any]:
    """Cr5Model.embed on the first ``n_docs`` documents (pyarrow), one process."""
    from pipeline.model import Cr5Model

    model = Cr5Model.load(model_dir)  # every language read before the clock
    for lang in model.languages:
        model.embed(["warm up"], lang)
    table = pads.dataset(documents, format="parquet", partitioning="hive").to_table(
        columns=["lang", "text"]
    )
    langs = pc.cast(table.column("lang"), pa.string())
    per_lang = {}
    left = n_docs
    for lang in sorted(set(langs.to_pylist()) & set(model.languages)):
        texts = table.column("text").filter(pc.equal(langs, lang)).combine_chunks()
        take = min(left, len(texts) * n_docs // table.num_rows + 1, len(texts))
        per_lang[lang] = texts.slice(0, take)
        left -= take
    n = sum(len(t) for t in per_lang.values())
    c0, t0 = time.process_time(), time.perf_counter()
    for lang, texts in per_lang.items():
        for lo in range(0, len(texts), batch):
            model.embed(texts.slice(lo, batch), lang)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {
        "documents": n,
        "per_language": {lang: len(t) for lang, t in per_lang.items()},
        "wall_seconds": round(wall, 2),
        "cpu_seconds": round(cpu, 2),
        "docs_per_second": round(n / wall, 1),
        "docs_per_cpu_second": round(n / cpu, 1),
    }


def fit_model(docs: Any, args: argparse.Namespace, work: Path) -> tuple[Any, dict[str, Any]]:
    """``Pipeline([SQLTransformer, Cr5])`` fitted on the documents of the first
    ``--train-concepts`` concepts (in id order); the PipelineModel and the fit's record."""
    from pyspark.ml import Pipeline
    from pyspark.ml.feature import SQLTransformer
    from pyspark.sql import functions as F

    from pipeline.model import Cr5Model
    from pipeline.sparkml import Cr5

    concepts = docs.select("concept_id").distinct().orderBy("concept_id").limit(args.train_concepts)
    train = docs.join(F.broadcast(concepts), "concept_id")
    pipeline = Pipeline(
        stages=[
            SQLTransformer(statement="SELECT doc_id, concept_id, lang, text FROM __THIS__"),
            Cr5(r=args.r, workDir=str(work)),
        ]
    )
    t0 = time.perf_counter()
    model = pipeline.fit(train)
    wall = time.perf_counter() - t0
    stage = model.stages[-1]
    summary = stage.summary
    cr5 = Cr5Model.load(stage.modelDirectory)
    return model, {
        "wall_seconds": round(wall, 1),
        "training_documents": summary["documents"],
        "concepts": summary["concepts"],
        "languages": summary["languages"],
        "r": summary["r"],
        "solver_seconds": summary["fit_seconds"],
        "eigensolver_iterations": summary["eigensolver_iterations"],
        "vocabulary": {lang: len(cr5.word_vectors(lang)[0]) for lang in cr5.languages},
    }


def reuse_model(path: str) -> tuple[Any, dict[str, Any]]:
    """The PipelineModel of ``--model`` (a saved fit): the SQL step and Cr5Embedding."""
    from pyspark.ml import PipelineModel
    from pyspark.ml.feature import SQLTransformer

    from pipeline.model import Cr5Model
    from pipeline.sparkml import Cr5Embedding

    sql = SQLTransformer(statement="SELECT doc_id, concept_id, lang, text FROM __THIS__")
    model = PipelineModel(stages=[sql, Cr5Embedding.from_model(path)])
    cr5 = Cr5Model.load(path)
    meta, training = cr5.meta, cr5.meta["training"]
    return model, {
        "reused": path,
        "training_documents": sum(training["documents"].values()),
        "concepts": training["concepts"],
        "languages": meta["languages"],
        "r": meta["r"],
        "solver_seconds": training["fit_seconds"],
        "vocabulary": {lang: len(cr5.word_vectors(lang)[0]) for lang in cr5.languages},
    }


def time_transform(model: Any, docs: Any, n_docs: int, cores: int) -> dict[str, Any]:
    """The PipelineModel's transform of every document into the noop sink (after a warm-up
    of 1,000 documents that starts the Python workers): wall and CPU seconds."""
    model.transform(docs.limit(1000)).write.format("noop").mode("overwrite").save()
    me = os.getpid()
    cpu0 = cpu_seconds(me)
    t0 = time.perf_counter()
    model.transform(docs).write.format("noop").mode("overwrite").save()
    wall = time.perf_counter() - t0
    cpu1 = cpu_seconds(me)
    cpu = {k: round(cpu1[k] - cpu0[k], 1) for k in cpu0}
    return {
        "documents": n_docs,
        "cores": cores,
        "wall_seconds": round(wall, 1),
        "docs_per_second": round(n_docs / wall, 1),
        "docs_per_second_per_core": round(n_docs / wall / cores, 1),
        "cpu_seconds": cpu,
        "docs_per_cpu_second": round(n_docs / max(sum(cpu.values()), 1e-9), 1),
    }


def equality(model: Any, docs: Any, n: int) -> dict[str, Any]:
    """Transform's vectors of ``n`` documents (a hash sample) against Cr5Model.embed."""
    from pyspark.sql import functions as F

    from pipeline.model import Cr5Model

    sample = model.transform(docs.orderBy(F.xxhash64("doc_id")).limit(n))
    rows = sample.select("lang", "text", "embedding").toArrow()
    api = Cr5Model.load(model.stages[-1].modelDirectory)
    diff = 0.0
    for lang in pc.unique(rows.column("lang")).to_pylist():
        sub = rows.filter(pc.equal(rows.column("lang"), lang))
        want = api.embed(sub.column("text").combine_chunks(), lang)
        got = np.stack(sub.column("embedding").to_numpy(zero_copy_only=False))
        diff = max(diff, float(np.abs(got - want).max()))
    return {"sample": rows.num_rows, "max_abs_diff": diff}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--documents", help="a documents dataset (default: generate --docs)")
    p.add_argument("--docs", type=int, default=1_000_000, help="documents to generate")
    p.add_argument("--r", type=int, default=300)
    p.add_argument("--train-concepts", type=int, default=20_000)
    p.add_argument("--api-docs", type=int, default=100_000)
    p.add_argument("--batch", type=int, default=4096, help="API batch (embed.batch_rows)")
    p.add_argument("--sample", type=int, default=1000)
    p.add_argument("--master", default="local[2]")
    p.add_argument("--workdir", help="scratch directory (default: a temporary one)")
    p.add_argument(
        "--model",
        help="a model directory: used when it exists (no fit), else the fitted model is "
        "copied there (reruns skip the fit)",
    )
    p.add_argument("--driver-memory", default="4g")
    p.add_argument("--out", help="write the results as JSON here")
    args = p.parse_args(argv)

    from pipeline.config import load_config
    from pipeline.spark import get_spark

    work = Path(args.workdir or tempfile.mkdtemp(prefix="cr5-bench-sparkml-"))
    res: dict[str, Any] = {
        "machine": machine_info("pyarrow", "pyspark"),
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
    }
    documents = args.documents or generate_documents(args, work / "generated")
    cfg = load_config(
        [ROOT / "conf" / "local.yaml"],
        [
            f"spark.master={args.master}",
            f"spark.driver_memory={args.driver_memory}",
            "spark.conf={spark.ui.showConsoleProgress: 'false'}",
        ],
    )
    spark = get_spark(cfg.spark)
    docs = spark.read.parquet(documents).select("doc_id", "concept_id", "lang", "text")
    n_docs = docs.count()
    emit(f"documents: {n_docs:,} at {documents}")
    res["documents"] = n_docs

    if args.model and (Path(args.model) / "model.json").exists():
        model, res["fit"] = reuse_model(args.model)
    else:
        model, res["fit"] = fit_model(docs, args, work)
        if args.model:
            shutil.copytree(model.stages[-1].modelDirectory, args.model)
    emit(f"fit: {json.dumps(res['fit'])}")
    stage = model.stages[-1]

    # 3. the Python API on one core
    res["api"] = api_rate(stage.modelDirectory, documents, args.api_docs, args.batch)
    emit(f"API (1 core): {json.dumps(res['api'])}")

    # 4. transform, into the noop sink
    res["transform"] = time_transform(model, docs, n_docs, spark.sparkContext.defaultParallelism)
    emit(f"transform ({args.master}): {json.dumps(res['transform'])}")

    # 5. equality on a sample
    res["equality"] = equality(model, docs, args.sample)
    emit(f"equality: {json.dumps(res['equality'])}")

    api_rate_ = res["api"]["docs_per_second"]
    res["ratio"] = {
        "transform_over_api_per_core": round(res["transform"]["docs_per_second"] / api_rate_, 3),
        "transform_per_core_over_api_per_core": round(
            res["transform"]["docs_per_second_per_core"] / api_rate_, 3
        ),
        "per_cpu_second": round(
            res["transform"]["docs_per_cpu_second"] / res["api"]["docs_per_cpu_second"], 3
        ),
    }
    res["machine"]["load_after"] = [round(x, 2) for x in os.getloadavg()]
    cores = res["transform"]["cores"]
    emit(
        f"transform {res['transform']['docs_per_second']:,.0f} docs/s on {cores} cores; API "
        f"{api_rate_:,.0f} docs/s on 1 core; ratio {res['ratio']['transform_over_api_per_core']}"
        f" (per core {res['ratio']['transform_per_core_over_api_per_core']}, per CPU-second "
        f"{res['ratio']['per_cpu_second']}); target >= 0.5"
    )
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=1, sort_keys=True, default=str) + "\n")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
