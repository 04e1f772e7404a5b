"""Atomic, idempotent dataset writes and checked reads.

A dataset is a Parquet directory with a ``_manifest.json`` written last. A writer
never touches the published directory while it works:

1. the data is written to a hidden sibling ``.<name>.tmp-<uuid>`` (Spark and
   Hadoop skip names starting with ``.``), then the manifest is added to it;
2. the previous version, if any, is renamed to ``.<name>.old-<uuid>``;
3. the temporary directory is renamed to ``<name>`` and the old one deleted.

A job killed in step 1 leaves the previous dataset as it was (the stale temporary
directory is removed by the next write). A crash between 2 and 3 leaves the
previous version under ``.old-``; the next write or read restores it. Readers
require the manifest, so a half-written directory is never read as a dataset.
Renames go through Hadoop's FileSystem, so this works on local disks and HDFS;
object stores without atomic rename should use the Delta output format.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import uuid
from collections.abc import Mapping
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pipeline import __version__
from pipeline.errors import DatasetNotFoundError, InputDataError
from pipeline.io.schemas import DatasetSpec

log = logging.getLogger(__name__)

MANIFEST = "_manifest.json"


class HadoopFS:
    """The few Hadoop FileSystem operations the atomic commit needs."""

    def __init__(self, spark: SparkSession, path: str) -> None:
        jvm = spark.sparkContext._jvm
        self._jvm = jvm
        self._Path = jvm.org.apache.hadoop.fs.Path
        self.fs = self._Path(path).getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())

    def path(self, p: str):
        return self._Path(p)

    def exists(self, p: str) -> bool:
        return bool(self.fs.exists(self._Path(p)))

    def rename(self, src: str, dst: str) -> None:
        if not self.fs.rename(self._Path(src), self._Path(dst)):
            raise OSError(f"could not rename {src} to {dst}")

    def delete(self, p: str) -> None:
        self.fs.delete(self._Path(p), True)

    def mkdirs(self, p: str) -> None:
        self.fs.mkdirs(self._Path(p))

    def list_names(self, p: str) -> list[str]:
        if not self.exists(p):
            return []
        return [s.getPath().getName() for s in self.fs.listStatus(self._Path(p))]

    def write_text(self, p: str, text: str) -> None:
        out = self.fs.create(self._Path(p), True)
        try:
            out.write(bytearray(text.encode("utf-8")))
        finally:
            out.close()

    def read_text(self, p: str) -> str:
        stream = self.fs.open(self._Path(p))
        try:
            return str(self._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
        finally:
            stream.close()


def _split(path: str) -> tuple[str, str]:
    path = path.rstrip("/")
    parent, _, name = path.rpartition("/")
    return (parent or "."), name


def _recover(fs: HadoopFS, path: str) -> None:
    """Restore a version stranded by a crash mid-commit; drop stale temporaries."""
    parent, name = _split(path)
    siblings = fs.list_names(parent)
    olds = sorted(s for s in siblings if s.startswith(f".{name}.old-"))
    if olds and not fs.exists(path):
        log.warning("restoring %s from %s left by an interrupted commit", path, olds[-1])
        fs.rename(f"{parent}/{olds[-1]}", path)
        olds = olds[:-1]
    for stale in olds + [s for s in siblings if s.startswith(f".{name}.tmp-")]:
        log.info("removing leftover %s/%s from an interrupted write", parent, stale)
        fs.delete(f"{parent}/{stale}")


def conform(df: DataFrame, spec: DatasetSpec) -> DataFrame:
    """Select ``spec``'s columns in order, cast to its types; error on a missing column."""
    missing = [c for c in spec.columns if c not in df.columns]
    if missing:
        raise InputDataError(f"dataset {spec.name!r} is missing columns {missing}")
    have = {f.name: f.dataType.simpleString() for f in df.schema.fields}
    # Compare type names, not nullability: Spark cannot cast array<int> (nullable
    # elements) to array<int> (non-null elements), and need not.
    return df.select(
        *[
            F.col(f.name)
            if have[f.name] == f.dataType.simpleString()
            else F.col(f.name).cast(f.dataType).alias(f.name)
            for f in spec.schema.fields
        ]
    )


def write_dataset(
    spark: SparkSession,
    df: DataFrame,
    spec: DatasetSpec,
    path: str,
    *,
    manifest: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Write ``df`` as dataset ``spec`` at ``path`` atomically; return the manifest."""
    fs = HadoopFS(spark, path)
    _recover(fs, path)
    parent, name = _split(path)
    fs.mkdirs(parent)
    token = uuid.uuid4().hex[:12]
    tmp = f"{parent}/.{name}.tmp-{token}"
    writer = conform(df, spec).write.mode("errorifexists")
    if spec.partition_by:
        writer = writer.partitionBy(*spec.partition_by)
    try:
        writer.parquet(tmp)
        full = {
            "dataset": spec.name,
            "producer": spec.producer,
            "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "library_version": __version__,
            "schema": json.loads(spec.schema.json()),
            **(manifest or {}),
        }
        fs.write_text(f"{tmp}/{MANIFEST}", json.dumps(full, indent=2, sort_keys=True, default=str))
        old = f"{parent}/.{name}.old-{token}"
        if fs.exists(path):
            fs.rename(path, old)
        fs.rename(tmp, path)
        if fs.exists(old):
            fs.delete(old)
    except BaseException:
        # Leave nothing half-written behind; the published version is untouched.
        if fs.exists(tmp):
            fs.delete(tmp)
        raise
    log.info("wrote dataset %s to %s", spec.name, path)
    return full


def read_manifest(spark: SparkSession, spec: DatasetSpec, path: str) -> dict[str, Any]:
    """Return the manifest of dataset ``spec`` at ``path``; error clearly if absent."""
    fs = HadoopFS(spark, path)
    if not fs.exists(f"{path.rstrip('/')}/{MANIFEST}"):
        _recover(fs, path)
    if not fs.exists(f"{path.rstrip('/')}/{MANIFEST}"):
        what = "does not exist" if not fs.exists(path) else f"is incomplete (no {MANIFEST})"
        raise DatasetNotFoundError(
            f"dataset {spec.name!r} at {path} {what}. Fix: run the {spec.producer!r} stage first "
            f"(python jobs/{spec.producer}.py --conf conf/<profile>.yaml), or point "
            f"paths.{spec.name} at an existing dataset."
        )
    return json.loads(fs.read_text(f"{path.rstrip('/')}/{MANIFEST}"))


def read_dataset(spark: SparkSession, spec: DatasetSpec, path: str) -> DataFrame:
    """Read dataset ``spec`` from ``path`` with its declared schema and column order."""
    read_manifest(spark, spec, path)
    return conform(spark.read.parquet(path), spec)
