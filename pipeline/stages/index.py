"""Stage ``index``: the ``embeddings`` dataset to a search index (:mod:`pipeline.search`).

Runs after ``embed``. For every language of the embeddings it builds a faiss index, cut
into shards that Spark tasks build in parallel (:mod:`pipeline.search.build`), keeps each
document's title and the start of its text for result pages, and, with ``search.csls``,
precomputes each document's CSLS term against every other indexed language. The index is
written to ``paths.index`` (a local directory, like the model) and replaced atomically
with its manifest last; it records the model's fingerprint and the embeddings' identity,
and the search side refuses to answer with another model.

The embeddings must have been made by the model at ``paths.model``: the embed stage
records the model's fingerprint in its manifest, and a mismatch stops this stage (exit 2)
before anything is built.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import time
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pipeline import __version__
from pipeline.config import Config
from pipeline.errors import DatasetNotFoundError, ModelError
from pipeline.io.datasets import HadoopFS, read_dataset, read_manifest
from pipeline.io.locations import to_manifest
from pipeline.io.publish import MANIFEST, LocalFS, data_files, publish, write_lock
from pipeline.io.schemas import DOCUMENTS, EMBEDDINGS
from pipeline.io.storage import staged_directory, storage_for
from pipeline.model.format import model_fingerprint, read_model_json
from pipeline.search.build import BuildParams, build_shards, compute_csls, plan_shards
from pipeline.search.format import INDEX_FORMAT_VERSION

log = logging.getLogger(__name__)


def _check_embeddings(
    emb: dict[str, Any], meta: dict[str, Any], model_path: str, emb_path: str
) -> list[str]:
    """Refuse embeddings another model made; return warnings."""
    report = emb.get("report") or {}
    fingerprint = model_fingerprint(meta)
    made_by = report.get("model_fingerprint")
    if made_by is not None and made_by != fingerprint:
        raise ModelError(
            f"the embeddings at {emb_path} were made by model {made_by}, but paths.model "
            f"({model_path}) is model {fingerprint}: an index of them could not be queried "
            "with this model. Fix: rerun the embed stage with this model (python jobs/embed.py) "
            "and then this one, or point paths.model at the model that made them."
        )
    dim = report.get("dim")
    if dim is not None and int(dim) != int(meta["r"]):
        raise ModelError(
            f"the embeddings at {emb_path} have dimension {dim}, the model at {model_path} "
            f"r = {meta['r']}: they come from another model. Fix: rerun the embed stage."
        )
    if made_by is None:
        msg = (
            f"the embeddings manifest at {emb_path} predates model fingerprints: this stage "
            f"cannot check that the model at {model_path} made them (same dimension "
            f"{meta['r']}); rerun the embed stage to record it"
        )
        log.warning("%s", msg)
        return [msg]
    return []


def _titles(spark: SparkSession, cfg: Config) -> tuple[DataFrame | None, list[str]]:
    """``doc_id, title, text`` of the embedded documents (their input), or None."""
    if cfg.embed.input is not None:
        from pipeline.stages.embed import read_input

        df = read_input(spark, cfg)
        title = F.col("title") if "title" in df.columns else F.lit(None)
        return df.select(
            F.col("doc_id").cast("string"),
            title.cast("string").alias("title"),
            F.col("text").cast("string"),
        ), []
    try:
        docs = read_dataset(spark, DOCUMENTS, cfg.paths.dataset("documents"))
    except DatasetNotFoundError:
        msg = (
            f"no documents dataset at {cfg.paths.dataset('documents')}: results will have no "
            "titles or snippets"
        )
        log.warning("%s", msg)
        return None, [msg]
    return docs.select("doc_id", "title", "text"), []


def _index_path(spark: SparkSession, cfg: Config) -> str:
    """``paths.index`` as written: an absolute local path, or the URI (any store the
    session's Hadoop configuration resolves; the index is built in a local scratch
    directory and published there, :mod:`pipeline.io.storage`)."""
    path = cfg.paths.dataset("index")
    fs = HadoopFS(spark, path)
    return fs.qualify(path)[1] if fs.is_local() else path


def run(spark: SparkSession, cfg: Config) -> dict[str, Any]:
    """Build the search index of ``embeddings`` at ``paths.index``; return the report."""
    s = cfg.search
    t_start = time.perf_counter()
    model_path = cfg.paths.dataset("model")
    meta = read_model_json(model_path)
    if meta.get("phi_format", "dense") == "selection":
        raise ModelError(
            f"model {model_path} is a {meta.get('method')!r} model with sparse vectors; the "
            "search index holds the dense vectors of the embeddings dataset"
        )
    emb_path = cfg.paths.dataset("embeddings")
    emb = read_manifest(spark, EMBEDDINGS, emb_path)
    warnings_ = _check_embeddings(emb, meta, model_path, emb_path)
    embeddings = read_dataset(spark, EMBEDDINGS, emb_path)
    rows_by_lang = {k: int(v) for k, v in (emb.get("rows_by_lang") or {}).items()}
    if not rows_by_lang:  # a manifest without per-language counts (a Delta table)
        rows_by_lang = {r["lang"]: r["count"] for r in embeddings.groupBy("lang").count().collect()}
    plans = plan_shards(rows_by_lang, s)
    if not plans:
        raise DatasetNotFoundError(
            f"the embeddings at {emb_path} have no rows: nothing to index. Fix: run the embed "
            "stage on documents in the model's languages."
        )
    index_path = _index_path(spark, cfg)
    titles, more = _titles(spark, cfg)
    warnings_ += more
    params = BuildParams(
        dim=int(meta["r"]),
        hnsw_m=s.hnsw_m,
        ef_construction=s.hnsw_ef_construction,
        threads=s.build_threads,
        ivf_lists=s.ivf_lists,
    )
    csls_k = cfg.evaluate.csls_k
    timings: dict[str, float] = {}
    ops = LocalFS()

    def write(tmp: str) -> dict[str, Any]:
        directory = Path(tmp)
        directory.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        layout = build_shards(
            spark, embeddings, titles, plans, params, directory, snippet_chars=s.snippet_chars
        )
        timings["build_seconds"] = round(time.perf_counter() - t0, 2)
        sources: dict[str, list[str]] = {}
        if s.csls:
            t0 = time.perf_counter()
            sources = compute_csls(
                spark,
                directory,
                layout,
                k=csls_k,
                ef_search=s.csls_ef_search,
                nprobe=s.csls_nprobe,
                threads=s.build_threads,
                token=lock.owner.token,
            )
            timings["csls_seconds"] = round(time.perf_counter() - t0, 2)
        manifest = _manifest(cfg, meta, emb, layout, sources, model_path, emb_path, index_path)
        manifest["write_token"] = lock.owner.token
        manifest["report"] = _report(layout, sources, timings, warnings_, index_path)
        manifest["files"] = data_files(ops, tmp)
        manifest["report"]["index_bytes"] = sum(manifest["files"].values())
        text = json.dumps(manifest, indent=2, sort_keys=True, default=str)
        ops.write_text(f"{tmp}/{MANIFEST}", text)
        return manifest

    store = storage_for(index_path, spark)
    with write_lock(
        store,
        index_path,
        wait_seconds=cfg.paths.write_lock_wait_seconds,
        stale_seconds=cfg.paths.stale_write_seconds,
        dataset="index",
    ) as lock:
        holder: dict[str, Any] = {}
        if isinstance(store, LocalFS):
            publish(ops, lock, lambda tmp: holder.setdefault("manifest", write(tmp)))
        else:  # built locally, then uploaded and committed (rename or commit marker)
            with staged_directory(index_path, spark=spark, lock=lock) as tmp:
                holder["manifest"] = write(str(tmp))
    report = holder["manifest"]["report"]
    report["seconds"] = round(time.perf_counter() - t_start, 2)
    log.info("index: wrote %s (%d documents)", index_path, report["documents"])
    return report


def _manifest(
    cfg: Config,
    meta: dict[str, Any],
    emb: dict[str, Any],
    layout: dict[str, dict[str, Any]],
    sources: dict[str, list[str]],
    model_path: str,
    emb_path: str,
    index_path: str,
) -> dict[str, Any]:
    """Everything but the files, the write token and the report."""
    s = cfg.search
    root = cfg.paths.root
    return {
        "dataset": "index",
        "producer": "index",
        "format_version": INDEX_FORMAT_VERSION,
        "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "library_version": __version__,
        "similarity": "cosine",
        "index_path": to_manifest(index_path, root),
        "model": {
            "path": to_manifest(model_path, root),
            "fingerprint": model_fingerprint(meta),
            "created_utc": meta.get("created_utc"),
            "r": int(meta["r"]),
            "languages": list(meta["languages"]),
        },
        "embeddings": {
            "path": to_manifest(emb_path, root),
            "created_utc": emb.get("created_utc"),
            "write_token": emb.get("write_token"),
            "rows": emb.get("rows"),
            "model_fingerprint": (emb.get("report") or {}).get("model_fingerprint"),
        },
        "build": {
            "index_type": s.index_type,
            "flat_max_rows": s.flat_max_rows,
            "shard_rows": s.shard_rows,
            "hnsw_m": s.hnsw_m,
            "hnsw_ef_construction": s.hnsw_ef_construction,
            "ivf_lists": s.ivf_lists,
            "build_threads": s.build_threads,
            "snippet_chars": s.snippet_chars,
        },
        "search": {"ef_search": s.ef_search, "nprobe": s.nprobe, "csls_rerank": s.csls_rerank},
        "csls": (
            {
                "k": cfg.evaluate.csls_k,
                "ef_search": s.csls_ef_search,
                "nprobe": s.csls_nprobe,
                "sources": sources,
            }
            if s.csls
            else None
        ),
        "languages": layout,
        "rows": sum(info["rows"] for info in layout.values()),
    }


def _report(
    layout: dict[str, dict[str, Any]],
    sources: dict[str, list[str]],
    timings: dict[str, float],
    warnings_: list[str],
    index_path: str,
) -> dict[str, Any]:
    skipped = {
        lang: info["skipped_zero_vectors"]
        for lang, info in layout.items()
        if info["skipped_zero_vectors"]
    }
    if skipped:
        msg = (
            f"{sum(skipped.values())} document(s) with a zero vector (no known word) are not "
            "indexed: " + ", ".join(f"{lang} {n}" for lang, n in sorted(skipped.items()))
        )
        log.warning("%s", msg)
        warnings_ = [*warnings_, msg]
    return {
        "path": index_path,
        "per_language": {
            lang: {
                "documents": info["rows"],
                "shards": len(info["shards"]),
                "kind": info["kind"],
                "zero_vectors": info["skipped_zero_vectors"],
            }
            for lang, info in sorted(layout.items())
        },
        "documents": sum(info["rows"] for info in layout.values()),
        "csls_pairs": sum(len(v) for v in sources.values()),
        **timings,
        "warnings": warnings_,
    }
