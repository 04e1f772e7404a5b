"""A dataset's manifest read from the local file system, without Spark.

For the checks that run before a SparkSession exists (:mod:`pipeline.preflight`,
:mod:`pipeline.memory`): the sizes an earlier run recorded (documents, nonzeros, vocabulary,
concepts) decide what this run may do. Datasets on other stores (``hdfs://``, ``s3a://``)
are not read here; their checks happen once Spark has started.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from typing import Any

__all__ = ["dataset_manifest", "local_fs_path"]


def local_fs_path(path: str) -> str | None:
    """The local file-system path of ``path``, or None for a URI of another store."""
    if path.startswith("file://"):
        return path[len("file://") :]
    if path.startswith("file:"):
        return path[len("file:") :]
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", path):
        return None  # hdfs://, s3a://, gs://, abfss://, viewfs://, ...
    return path


def dataset_manifest(path: str) -> dict[str, Any] | None:
    """The manifest of the local dataset at ``path`` (Parquet or Delta), if any."""
    local = local_fs_path(path)
    if local is None or not os.path.isdir(local):
        return None
    file = os.path.join(local, "_manifest.json")
    if os.path.isfile(file):
        # A manifest that does not parse is reported, with the fix, by the stage's reader
        # (pipeline/io/integrity.py); the checks before Spark go without it.
        with open(file, encoding="utf-8") as f, contextlib.suppress(ValueError):
            found = json.load(f)
            return found if isinstance(found, dict) else None
        return None
    if os.path.isdir(os.path.join(local, "_delta_log")):
        from pipeline.io.delta import read_delta_manifest
        from pipeline.io.publish import LocalFS

        with contextlib.suppress(OSError, ValueError):
            return read_delta_manifest(LocalFS(), os.path.abspath(local))
    return None
