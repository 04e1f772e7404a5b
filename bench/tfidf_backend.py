"""A pipeline-written ``tfidf`` dataset on the local backend, for the solver benchmarks that
measure single solves on a real corpus (bench_precond_rank.py, bench_w_rtol.py)."""

from __future__ import annotations

import time
from typing import Any

from bench.machine import machine_info

__all__ = ["load_tfidf_backend"]


def load_tfidf_backend(tfidf: str) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """``(backend, machine, corpus)``: the float32 local backend of ``tfidf``, the machine's
    record, and the corpus's sizes and load time. Prints both records. Spark only reads the
    dataset (a small local session, stopped before returning); the solves run locally."""
    from pipeline.backends.loader import local_backend_from_tfidf
    from pipeline.config import SparkConfig
    from pipeline.spark import get_spark

    info = machine_info()
    print("== machine: " + ", ".join(f"{k}={v}" for k, v in info.items()), flush=True)
    spark = get_spark(
        SparkConfig(master="local[2]", driver_memory="3g", conf={"spark.ui.enabled": "false"})
    )
    t0 = time.perf_counter()
    be = local_backend_from_tfidf(spark, tfidf, dtype="float32")
    spark.stop()
    corpus = {
        "concepts": be.n_concepts,
        "terms": {lang: be.n_terms(lang) for lang in be.languages},
        "docs": {lang: be.n_docs(lang) for lang in be.languages},
        "load_s": round(time.perf_counter() - t0, 1),
    }
    print(f"== corpus: {corpus}", flush=True)
    return be, info, corpus
