"""What a stage wrote, as its manifests record it: for schedulers downstream of a job.

``jobs/<stage>.py --outputs-json FILE`` writes, after each stage, the datasets it produced
(path, rows, rows per partition, when, the write's token) read back from their manifests,
and for ``train`` (and ``embed``, which embeds with it) the model directory's identity from
its ``model.json``: its version is the SHA-256 of ``model.json``, which holds every file's
checksum, so equal versions are equal models. The driver reads them, so every store Spark
reads works (HDFS, Delta); the Airflow DAG turns the file into its asset events
(``deploy/airflow/cr5_dag.py``).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pipeline.config import PathsConfig

__all__ = ["model_record", "stage_outputs", "write_outputs"]


def stage_outputs(spark: Any, paths: PathsConfig, stage: str) -> dict[str, Any]:
    """The datasets (and model) ``stage`` produced under ``paths``, from their manifests."""
    from pipeline.io.datasets import read_manifest
    from pipeline.io.schemas import written_by

    datasets = {}
    for name, spec in written_by(stage).items():
        path = paths.dataset(name)
        manifest = read_manifest(spark, spec, path)
        kept = ("rows", "created_utc", "write_token", "delta_version", "format")
        datasets[name] = {"path": path} | {
            k: v for k, v in manifest.items() if k in kept or k.startswith("rows_by_")
        }
    out: dict[str, Any] = {"datasets": datasets}
    if stage in ("train", "embed"):  # the model trained, or the one embedded with
        out["model"] = model_record(paths.dataset("model"))
    if stage == "index":  # a driver-local directory with a manifest of its own
        out["datasets"]["index"] = index_record(paths.index)
    return out


def index_record(path: str) -> dict[str, Any]:
    """A search index's identity and sizes from its ``_manifest.json``: rows, per language
    rows, creation time, write token, and the fingerprint of the model it serves."""
    from pipeline.search.format import read_index_manifest

    manifest = read_index_manifest(path)
    return {
        "path": path,
        "rows": manifest["rows"],
        "rows_by_lang": {lang: info["rows"] for lang, info in manifest["languages"].items()},
        "created_utc": manifest.get("created_utc"),
        "write_token": manifest.get("write_token"),
        "format": "faiss",
        "model_fingerprint": manifest["model"]["fingerprint"],
    }


def model_record(path: str) -> dict[str, Any]:
    """A model directory's identity and sizes from its ``model.json``."""
    from pipeline.model.format import MODEL_JSON, model_directory, read_model_json

    meta = read_model_json(path)
    digest = hashlib.sha256((model_directory(path) / MODEL_JSON).read_bytes()).hexdigest()
    training = meta.get("training", {})
    return {
        "path": path,
        "version": f"sha256:{digest[:16]}",
        "created_utc": meta.get("created_utc"),
        "method": meta.get("method"),
        "languages": meta.get("languages"),
        "r": meta.get("r"),
        "lam": meta.get("lam"),
        "documents": sum((training.get("documents") or {}).values()),
        "concepts": training.get("concepts"),
    }


def write_outputs(path: str, outputs: dict[str, Any]) -> None:
    """Write ``outputs`` as JSON to ``path``, a local file or any URI the session's storage
    resolves (atomically: a reader sees the previous file or this one)."""
    from pipeline.io.storage import write_file

    write_file(path, json.dumps(outputs, indent=1, sort_keys=True, default=str))
