"""Making a model directory readable by the executors that embed with it.

The driver writes models to its own disk. In local mode the executors share that disk
and read the directory in place. On a cluster they do not, and Spark will not ship a
local *directory* (``addFile(dir, recursive=True)`` is refused outside local mode), so
the directory is zipped once per model version (uncompressed: ``.npy`` arrays barely
compress) and shipped with ``SparkContext.addArchive``, which unpacks it on every
executor. A model on a cluster's store (``hdfs://``, ``s3a://``, ...) is first copied into
the driver's verified local cache (:func:`pipeline.model.format.model_directory`: its
committed version, checked against ``model.json``) and shipped from there the same way.

The archive name carries the SHA-256 of ``model.json`` (which holds every file's
checksum), so a retrained model never collides with a version shipped earlier in the
same Spark application.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from pipeline.model.format import model_directory

__all__ = ["resolve_model_location", "ship_model", "ship_model_to_session", "worker_model"]

_ARCHIVE = "sparkarchive:"


def _zip_model(path: Path, out: Path) -> None:
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as z:
        for f in sorted(path.rglob("*")):
            if f.is_file():
                z.write(f, f.relative_to(path).as_posix())
    os.replace(tmp, out)


def ship_model(sc: Any, path: str) -> str:
    """Make the model at ``path`` reachable from executors; return its location token.

    Parameters
    ----------
    sc : pyspark.SparkContext
    path : str
        The model directory (local path, ``file:`` URI, or a URI on shared storage).

    Returns
    -------
    str
        A token for :func:`resolve_model_location` (a plain path in local mode).
    """
    from pyspark import SparkFiles

    # A model on a remote store is read through the driver's verified local cache: its
    # committed version (pipeline.io.storage), checked against model.json.
    local = model_directory(path)
    if sc.master.startswith("local"):
        return str(local.absolute())
    digest = hashlib.sha256((local / "model.json").read_bytes()).hexdigest()[:16]
    name = f"cr5-model-{digest}.zip"
    # Spark's per-application file directory on the driver: removed when the app ends.
    staging = Path(SparkFiles.getRootDirectory()) / "cr5-model-staging"
    staging.mkdir(parents=True, exist_ok=True)
    archive = staging / name
    if not archive.exists():
        _zip_model(local, archive)
        sc.addArchive(str(archive))
    return _ARCHIVE + name


def ship_model_to_session(spark: Any, path: str) -> str:
    """:func:`ship_model` for a SparkSession, classic or Spark Connect.

    With a local master (``local[...]``, the executors share the driver's disk) the location
    is the directory itself and no SparkContext is touched. A classic session on a cluster
    ships as :func:`ship_model` does. A Spark Connect session on a cluster has no
    SparkContext: the zipped directory goes to the session's artifacts
    (``SparkSession.addArtifacts(..., archive=True)``), which Spark unpacks on the executors.
    """
    master = str(spark.conf.get("spark.master", "") or "")
    if master.startswith("local"):
        return str(model_directory(path).absolute())
    if not type(spark).__module__.startswith("pyspark.sql.connect"):
        return ship_model(spark.sparkContext, path)
    local = model_directory(path)  # a remote model through pyarrow.fs, on the client
    digest = hashlib.sha256((local / "model.json").read_bytes()).hexdigest()[:16]
    name = f"cr5-model-{digest}.zip"
    staging = Path(tempfile.gettempdir()) / "cr5-model-staging"
    staging.mkdir(parents=True, exist_ok=True)
    archive = staging / name
    if not archive.exists():
        _zip_model(local, archive)
    try:
        spark.addArtifacts(str(archive), archive=True)
    except Exception as exc:  # the session has it already (same name, same content)
        if "already exists" not in str(exc).lower():
            raise
    return _ARCHIVE + name


def resolve_model_location(location: str) -> str:
    """On an executor: the local directory of a model shipped by :func:`ship_model`."""
    if location.startswith(_ARCHIVE):
        from pyspark import SparkFiles

        return SparkFiles.get(location.split(":", 1)[1])
    return location


# One model per Python worker process (workers are reused across tasks and jobs).
_WORKER_MODELS: dict[str, Any] = {}


def worker_model(location: str, version: str) -> Any:
    """On an executor: the :class:`~pipeline.model.Cr5Model` shipped to ``location``, loaded
    once per Python worker and per ``version`` (e.g. the model's ``created_utc``: in local mode
    the location is the model's path, which a retrained model reuses).

    Loaded lazily (only the languages the worker meets) and without checksums: the driver
    verified them before shipping; sizes are still checked.
    """
    from pipeline.model.loading import load_model

    key = f"{location}@{version}"
    if key not in _WORKER_MODELS:
        _WORKER_MODELS[key] = load_model(resolve_model_location(location), verify=False, lazy=True)
    return _WORKER_MODELS[key]
