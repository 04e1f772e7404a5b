"""Where the Spark ML stages keep model directories: temporary ones, and the copy under a
saved stage's path.

A saved :class:`~pipeline.sparkml.Cr5Embedding` is pyspark.ml's ``metadata/`` (the
parameters, :class:`~pyspark.ml.util.DefaultParamsWriter`) plus ``model/``, the project's
model directory (:mod:`pipeline.model.format`): ``.npy`` arrays, Parquet vocabularies and
``model.json`` with every file's SHA-256, nothing pickled. The model is read with plain file
I/O, so a stage saved to a local (or locally mounted) path is copied with Python; one saved
to another file system (``hdfs://``, ``s3a://``) goes through Hadoop's FileSystem, which
needs a classic session (a Spark Connect client has no JVM).
"""

from __future__ import annotations

import atexit
import logging
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

from pipeline.errors import ModelError
from pipeline.io.storage import staged_directory
from pipeline.spark import is_connect

__all__ = [
    "get_directory",
    "is_local_path",
    "put_directory",
    "remove_path",
    "temporary_directory",
    "unique_child",
]

log = logging.getLogger(__name__)

_TEMPORARY: list[Path] = []


def _remove_temporary() -> None:
    for path in _TEMPORARY:
        shutil.rmtree(path, ignore_errors=True)


atexit.register(_remove_temporary)


def temporary_directory(prefix: str) -> Path:
    """A new directory in the system's temporary directory, removed when Python exits
    (not earlier: a DataFrame transformed with a model may be computed long after the
    model object is gone)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    _TEMPORARY.append(path)
    return path


def is_local_path(path: str) -> bool:
    """A path on this machine's disk: no scheme, or ``file:``."""
    return "://" not in path or path.startswith("file:")


def _local(path: str) -> Path:
    return Path(path.removeprefix("file://").removeprefix("file:"))


def put_directory(spark: Any, source: Path, dest: str) -> None:
    """Copy the local directory ``source`` to ``dest`` (which must not exist yet).

    A local ``dest`` is written to a temporary sibling and renamed into place; another file
    system's is copied by Hadoop's FileSystem (classic sessions).
    """
    if is_local_path(dest):
        target = _local(dest)
        if target.exists():
            raise ModelError(f"{target} exists already; save with .write().overwrite()")
        with staged_directory(target) as tmp:
            shutil.copytree(source, tmp, dirs_exist_ok=True)
        return
    fs = _hadoop(spark, dest, "save to")
    fs.fs.copyFromLocalFile(False, False, fs.path(str(source)), fs.path(dest))


def get_directory(spark: Any, source: str) -> Path:
    """The directory ``source`` on this machine's disk: itself when local, else a copy in a
    temporary directory (copied by Hadoop's FileSystem; classic sessions)."""
    if is_local_path(source):
        path = _local(source)
        if not path.is_dir():
            raise ModelError(f"no model directory at {source}")
        return path
    fs = _hadoop(spark, source, "load from")
    if not fs.exists(source):
        raise ModelError(f"no model directory at {source}")
    target = temporary_directory("cr5-model-") / "model"
    fs.fs.copyToLocalFile(False, fs.path(source), fs.path(str(target)), True)
    return target


def remove_path(spark: Any, path: str) -> None:
    """Delete ``path`` (a file or directory tree) if it exists."""
    if is_local_path(path):
        target = _local(path)
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
        return
    fs = _hadoop(spark, path, "delete")
    fs.delete(path)


def unique_child(parent: str, prefix: str) -> str:
    """``<parent>/<prefix><random hex>``: a new name under ``parent``."""
    return f"{parent.rstrip('/')}/{prefix}{uuid.uuid4().hex[:12]}"


def _hadoop(spark: Any, path: str, what: str) -> Any:
    if is_connect(spark):
        raise ModelError(
            f"cannot {what} {path} from a Spark Connect session: the model directory is "
            "copied with Hadoop's FileSystem, which only a classic session has. Fix: use a "
            "local (or locally mounted) path."
        )
    from pipeline.io.hadoop import HadoopFS

    return HadoopFS(spark, path)
