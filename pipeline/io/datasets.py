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

With ``paths.format: delta`` (``format="delta"`` here) a dataset is a Delta Lake
table instead, written by :mod:`pipeline.io.delta`: each write is one atomic Delta
commit (a new table version; overwrite mode, so earlier versions stay in the
history) and the manifest is stored in that commit. Only a table replacing a
Parquet dataset is built in a temporary sibling and renamed into place as above.
Readers do not care about the format: a directory with a ``_delta_log/`` is read as
a Delta table, whatever the configuration says.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Literal

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pipeline import __version__
from pipeline.errors import ConfigError, DatasetNotFoundError, InputDataError
from pipeline.io import delta
from pipeline.io.hadoop import HadoopFS as HadoopFS  # re-exported: stages import it here
from pipeline.io.schemas import DatasetSpec

log = logging.getLogger(__name__)

MANIFEST = "_manifest.json"
FORMATS = ("parquet", "delta")
Format = Literal["parquet", "delta"]


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
    format: Format = "parquet",
) -> dict[str, Any]:
    """Write ``df`` as dataset ``spec`` at ``path`` atomically; return the manifest.

    Parameters
    ----------
    spark : SparkSession
    df : DataFrame
        Must have ``spec``'s columns (extra columns are dropped, types cast).
    spec : DatasetSpec
    path : str
        The dataset's directory (any Hadoop file system).
    manifest : mapping, optional
        Extra manifest entries (typically ``{"report": ...}``).
    format : {"parquet", "delta"}
        ``paths.format`` of the configuration: a Parquet directory with a
        ``_manifest.json``, or a new version of a Delta table (module docstring).

    Raises
    ------
    ConfigError
        For an unknown format, or ``delta`` without Delta's jars or ``deltalake``.
    """
    if format not in FORMATS:
        raise ConfigError(f"dataset format {format!r} is not one of {', '.join(FORMATS)}")
    full = {
        "dataset": spec.name,
        "producer": spec.producer,
        "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "library_version": __version__,
        "format": format,
        "schema": json.loads(spec.schema.json()),
        **(manifest or {}),
    }
    data = conform(df, spec)
    fs = HadoopFS(spark, path)
    _recover(fs, path)
    if format == "delta":
        if delta.is_delta_table(fs, path) or not fs.exists(path):
            # A commit is atomic by itself: no temporary copy needed.
            delta.write_delta(spark, data, spec, path, full)
        else:
            log.info("replacing the Parquet dataset at %s with a Delta table", path)
            _publish(fs, path, lambda tmp: delta.write_delta(spark, data, spec, tmp, full))
    else:
        if delta.is_delta_table(fs, path):
            log.warning(
                "paths.format=parquet: replacing the Delta table at %s, and its history, "
                "with a Parquet dataset",
                path,
            )

        def write_parquet(tmp: str) -> None:
            writer = data.write.mode("errorifexists")
            if spec.partition_by:
                writer = writer.partitionBy(*spec.partition_by)
            writer.parquet(tmp)
            text = json.dumps(full, indent=2, sort_keys=True, default=str)
            fs.write_text(f"{tmp}/{MANIFEST}", text)

        _publish(fs, path, write_parquet)
    log.info("wrote dataset %s to %s (%s)", spec.name, path, format)
    return full


def _publish(fs: HadoopFS, path: str, write: Callable[[str], None]) -> None:
    """Run ``write(tmp)`` on a hidden sibling, then rename it to ``path`` (steps 1-3)."""
    parent, name = _split(path)
    fs.mkdirs(parent)
    token = uuid.uuid4().hex[:12]
    tmp = f"{parent}/.{name}.tmp-{token}"
    try:
        write(tmp)
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


def read_manifest(spark: SparkSession, spec: DatasetSpec, path: str) -> dict[str, Any]:
    """Return the manifest of dataset ``spec`` at ``path``; error clearly if absent.

    For a Delta table it is the manifest stored in its newest cr5 commit, with
    ``delta_version`` added (:func:`pipeline.io.delta.read_delta_manifest`).
    """
    return _manifest_of(HadoopFS(spark, path), spec, path)


def _manifest_of(fs: HadoopFS, spec: DatasetSpec, path: str) -> dict[str, Any]:
    root = path.rstrip("/")
    if not (fs.exists(f"{root}/{MANIFEST}") or delta.is_delta_table(fs, root)):
        _recover(fs, path)
    if delta.is_delta_table(fs, root):
        found = delta.read_delta_manifest(fs, root)
        if found is not None:
            return found
        what = "is a Delta table without a cr5 manifest in its commits"
    elif fs.exists(f"{root}/{MANIFEST}"):
        return json.loads(fs.read_text(f"{root}/{MANIFEST}"))
    else:
        what = "does not exist" if not fs.exists(path) else f"is incomplete (no {MANIFEST})"
    raise DatasetNotFoundError(
        f"dataset {spec.name!r} at {path} {what}. Fix: run the {spec.producer!r} stage first "
        f"(python jobs/{spec.producer}.py --conf conf/<profile>.yaml), or point "
        f"paths.{spec.name} at an existing dataset."
    )


def read_dataset(spark: SparkSession, spec: DatasetSpec, path: str) -> DataFrame:
    """Read dataset ``spec`` from ``path`` with its declared schema and column order.

    A Delta table is read as such (its current version) whatever ``paths.format`` says.
    """
    fs = HadoopFS(spark, path)
    _manifest_of(fs, spec, path)
    return conform(read_table(spark, path, fs=fs), spec)


def read_table(spark: SparkSession, path: str, *, fs: HadoopFS | None = None) -> DataFrame:
    """Read the Parquet file(s) or the Delta table (current version) at ``path``.

    For inputs that need not be datasets of this pipeline (no manifest required).
    """
    fs = fs or HadoopFS(spark, path)
    if delta.is_delta_table(fs, path):
        return delta.read_delta(spark, path)
    return spark.read.parquet(path)
