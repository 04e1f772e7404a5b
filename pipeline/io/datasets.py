"""Atomic, idempotent dataset writes and checked reads.

A dataset is a Parquet directory with a ``_manifest.json`` written last. A writer
never touches the published directory while it works:

1. it takes the dataset's write lock and owns a hidden sibling ``.<name>.tmp-<token>``
   (Spark and Hadoop skip names starting with ``.``) through an owner record
   (:mod:`pipeline.io.publish`: host, pid, process start time, heartbeat); a second
   writer waits ``paths.write_lock_wait_seconds`` or fails clearly;
2. the data is written to the temporary directory, its rows are counted from the
   files, then the manifest is added (``rows``, ``rows_by_<partition>``, ``files``,
   ``write_token``);
3. the manifest and the files are checked against each other, the previous version,
   if any, is renamed to ``.<name>.old-<token>``, the temporary directory to
   ``<name>``, and the old one deleted.

A job killed in step 2 leaves the previous dataset as it was; its temporary directory
is removed by the next writer once its owner is known to be gone (never a live
writer's). A crash between the two renames leaves the previous version under
``.old-``; the next write or read restores it. Readers require the manifest, so a
half-written directory is never read as a dataset. On local disks the protocol uses
POSIX calls (atomic exclusive create and rename); elsewhere Hadoop's FileSystem, so
this works on HDFS too; object stores without atomic rename should use the Delta
output format.

With ``paths.format: delta`` (``format="delta"`` here) a dataset is a Delta Lake
table instead, written by :mod:`pipeline.io.delta`: each write is one atomic Delta
commit (a new table version; overwrite mode, so earlier versions stay in the
history) and the manifest is stored in that commit. Only a table replacing a
Parquet dataset is built in a temporary sibling and renamed into place as above.
Delta writes take the same write lock, so concurrent runs commit one after the other.
Readers do not care about the format: a directory with a ``_delta_log/`` is read as
a Delta table, whatever the configuration says.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import urllib.parse
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pipeline import __version__
from pipeline.errors import (
    ConcurrentWriteError,
    ConfigError,
    DamagedDatasetError,
    DatasetIntegrityError,
    DatasetNotFoundError,
    InputDataError,
)
from pipeline.failures import annotate
from pipeline.io import delta, integrity
from pipeline.io.hadoop import HadoopFS as HadoopFS  # re-exported: stages import it here
from pipeline.io.publish import (
    MANIFEST,
    FileOps,
    LocalFS,
    data_files,
    lock_defaults,
    publish,
    recover,
    write_lock,
)
from pipeline.io.schemas import DatasetSpec

if TYPE_CHECKING:
    from pipeline.config import PathsConfig

log = logging.getLogger(__name__)

FORMATS = ("parquet", "delta")
Format = Literal["parquet", "delta"]


def write_options(paths: PathsConfig) -> dict[str, Any]:
    """The keyword arguments of :func:`write_dataset` that ``paths.*`` sets."""
    return {
        "format": paths.format,
        "wait_seconds": paths.write_lock_wait_seconds,
        "stale_seconds": paths.stale_write_seconds,
    }


def _ops(fs: HadoopFS, path: str) -> tuple[FileOps, str]:
    """The file operations of the commit protocol for ``path``, and the path they use.

    Local disks get :class:`~pipeline.io.publish.LocalFS` (POSIX atomic create and
    rename) and the absolute path; other stores Hadoop's FileSystem and ``path``.
    """
    if fs.is_local():
        return LocalFS(), fs.qualify(path)[1]
    return fs, path.rstrip("/")


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
    wait_seconds: float | None = None,
    stale_seconds: float | None = None,
    expected_rows: int | None = None,
    files: Callable[[str], Mapping[str, Any]] | None = None,
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
    wait_seconds, stale_seconds : float, optional
        ``paths.write_lock_wait_seconds`` and ``paths.stale_write_seconds``
        (:func:`write_options`; default: their defaults).
    expected_rows : int, optional
        The number of rows the stage computed; the write fails, publishing nothing, if
        the files written hold a different number.
    files : callable, optional
        Instead of ``df`` (pass None): ``files(directory)`` writes the dataset's Parquet
        files itself (``spec``'s schema, hive directories of ``spec.partition_by``) under
        the local ``directory`` and returns manifest entries known only after the write
        (merged over ``manifest``; an ``expected_rows`` entry is checked like the
        argument). For stages whose executors write Arrow data directly (the ``embed``
        stage); Parquet format on a local file system only.

    Raises
    ------
    ConfigError
        For an unknown format, or ``delta`` without Delta's jars or ``deltalake``.
    ConcurrentWriteError
        When another run holds the dataset's write lock for longer than
        ``wait_seconds``, or took this run's lock over.
    DatasetIntegrityError
        When the rows written differ from ``expected_rows``.
    """
    if format not in FORMATS:
        raise ConfigError(f"dataset format {format!r} is not one of {', '.join(FORMATS)}")
    full = _base_manifest(spec, format, manifest)
    if files is not None and (format != "parquet" or df is not None):
        raise ValueError("write_dataset(files=...) writes Parquet only, without a DataFrame")
    data = conform(df, spec) if df is not None else None
    fs = HadoopFS(spark, path)
    ops, where = _ops(fs, path)
    if format == "parquet" and not fs.atomic_rename:
        _warn_rename_is_a_copy(fs, path)
    default_wait, default_stale = lock_defaults()
    wait = default_wait if wait_seconds is None else wait_seconds
    stale = default_stale if stale_seconds is None else stale_seconds
    try:
        _write_locked(
            spark, fs, ops, where, spec, data, files, full, format, wait, stale, expected_rows
        )
    except BaseException as exc:
        # A failure names the dataset it was writing (pipeline/failures.py).
        annotate(exc, dataset=spec.name, path=path)
        raise
    log.info("wrote dataset %s to %s (%s, %s rows)", spec.name, path, format, full.get("rows"))
    return full


_WARNED_STORES: set[str] = set()


def _warn_rename_is_a_copy(fs: HadoopFS, path: str) -> None:
    """Once per store: a Parquet dataset's commit is a directory rename, a copy on object
    stores, so a reader there may see a half-renamed dataset; Delta commits are atomic."""
    scheme = str(fs.fs.getUri().getScheme())
    if scheme in _WARNED_STORES:
        return
    _WARNED_STORES.add(scheme)
    log.warning(
        "%s: directory renames on %s:// are copies, so a reader may see a dataset half "
        "replaced while it is committed; set paths.format=delta for atomic commits there "
        "(deploy/README.md, 'Where outputs go')",
        path,
        scheme,
    )


def _write_locked(
    spark: SparkSession,
    fs: HadoopFS,
    ops: FileOps,
    where: str,
    spec: DatasetSpec,
    data: DataFrame | None,
    files: Callable[[str], Mapping[str, Any]] | None,
    full: dict[str, Any],
    format: Format,
    wait: float,
    stale: float,
    expected_rows: int | None,
) -> None:
    """The locked part of :func:`write_dataset`: a Delta commit or the Parquet publish."""
    path = where
    with write_lock(ops, where, wait_seconds=wait, stale_seconds=stale, dataset=spec.name) as lock:
        full["write_token"] = lock.owner.token
        if format == "delta":
            if delta.is_delta_table(fs, where) or not fs.exists(where):
                # A commit is atomic by itself: no temporary copy needed.
                delta.write_delta(spark, data, spec, where, full)
            else:
                log.info("replacing the Parquet dataset at %s with a Delta table", path)
                publish(ops, lock, lambda tmp: delta.write_delta(spark, data, spec, tmp, full))
            lock.verify()
            _check_delta(spark, fs, spec, where, full, expected_rows)
        else:
            if delta.is_delta_table(fs, where):
                log.warning(
                    "paths.format=parquet: replacing the Delta table at %s, and its history, "
                    "with a Parquet dataset",
                    path,
                )
            if files is not None and not isinstance(ops, LocalFS):
                raise ValueError(f"write_dataset(files=...) needs a local path: {path}")
            publish(
                ops,
                lock,
                lambda tmp: _write_parquet(spark, ops, spec, tmp, data, files, full, expected_rows),
            )


def _base_manifest(
    spec: DatasetSpec, format: Format, extra: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The manifest entries every dataset has, then ``extra`` over them."""
    return {
        "dataset": spec.name,
        "producer": spec.producer,
        "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "library_version": __version__,
        "format": format,
        "schema": json.loads(spec.schema.json()),
        **(extra or {}),
    }


def _write_parquet(
    spark: SparkSession,
    ops: FileOps,
    spec: DatasetSpec,
    tmp: str,
    data: DataFrame | None,
    files: Callable[[str], Mapping[str, Any]] | None,
    manifest: dict[str, Any],
    expected_rows: int | None,
) -> dict[str, Any]:
    """Write the Parquet files (from ``data`` or by ``files``), count them, add the manifest.

    Runs on the temporary directory ``tmp`` that :func:`publish` then renames into place;
    updates ``manifest`` in place and returns it.
    """
    expected = expected_rows
    if files is not None:
        ops.mkdirs(tmp)
        extra = dict(files(tmp))
        expected = extra.pop("expected_rows", expected)
        manifest.update(extra)
    else:
        writer = data.write.mode("errorifexists")
        if spec.partition_by:
            writer = writer.partitionBy(*spec.partition_by)
        writer.parquet(tmp)
    manifest["files"] = data_files(ops, tmp)
    count = _count_rows_local if files is not None else _count_rows
    manifest.update(count(spark, spec, tmp, manifest["files"], expected))
    store = None if isinstance(ops, LocalFS) else ops.file_checksum  # type: ignore[attr-defined]
    manifest["checksums"] = integrity.file_checksums(tmp, manifest["files"], store_checksum=store)
    text = json.dumps(integrity.seal(manifest), indent=2, sort_keys=True, default=str)
    ops.write_text(f"{tmp}/{MANIFEST}", text)
    return manifest


def _count_rows(
    spark: SparkSession,
    spec: DatasetSpec,
    directory: str,
    written: Mapping[str, int],
    expected: int | None,
) -> dict[str, Any]:
    """``rows`` (and ``rows_by_<partition column>``) of the Parquet files in ``directory``.

    Row counts come from the files' footers (no column is read).
    """
    # The data files themselves, not the hidden directory (Spark would warn that it
    # ignores a path starting with "."); partition values come from the directories.
    files = [
        f"{directory}/{rel}"
        for rel in written
        if rel.endswith(".parquet") and not rel.rsplit("/", 1)[-1].startswith((".", "_"))
    ]
    out: dict[str, Any] = {}
    if not files:
        out["rows"] = 0
        if len(spec.partition_by) == 1:
            out[f"rows_by_{spec.partition_by[0]}"] = {}
        _check_rows(spec, directory, out["rows"], expected)
        return out
    df = spark.read.schema(spec.schema).option("basePath", directory).parquet(*files)
    if len(spec.partition_by) == 1:
        col = spec.partition_by[0]
        by = {str(r[col]): int(r["count"]) for r in df.groupBy(col).count().collect()}
        out[f"rows_by_{col}"] = dict(sorted(by.items()))
        out["rows"] = sum(by.values())
    else:
        out["rows"] = df.count()
    _check_rows(spec, directory, out["rows"], expected)
    return out


def _count_rows_local(
    spark: SparkSession | None,
    spec: DatasetSpec,
    directory: str,
    written: Mapping[str, int],
    expected: int | None,
) -> dict[str, Any]:
    """:func:`_count_rows` for files on the driver's file system, read with pyarrow.

    Same footers, same answer, without a Spark job (the direct writes of ``files=`` are
    local by contract). Partition values come from the ``column=value`` directory names.
    """
    import pyarrow.parquet as pq

    col = spec.partition_by[0] if len(spec.partition_by) == 1 else None
    rows = 0
    by: dict[str, int] = {}
    for rel in written:
        name = rel.rsplit("/", 1)[-1]
        if not rel.endswith(".parquet") or name.startswith((".", "_")):
            continue
        n = pq.ParquetFile(f"{directory}/{rel}").metadata.num_rows
        rows += n
        if col is not None:
            parts = dict(
                seg.split("=", 1) for seg in rel.split("/")[:-1] if seg.startswith(f"{col}=")
            )
            if col not in parts:
                raise DatasetIntegrityError(
                    f"dataset {spec.name!r}: file {directory}/{rel} is not inside a "
                    f"{col}=<value> directory; nothing was published"
                )
            key = urllib.parse.unquote(parts[col])
            by[key] = by.get(key, 0) + n
    out: dict[str, Any] = {"rows": rows}
    if col is not None:
        out[f"rows_by_{col}"] = dict(sorted(by.items()))
    _check_rows(spec, directory, rows, expected)
    return out


def _check_rows(spec: DatasetSpec, directory: str, rows: int, expected: int | None) -> None:
    if expected is not None and rows != expected:
        raise DatasetIntegrityError(
            f"dataset {spec.name!r}: the files written to {directory} hold {rows} rows "
            f"but the stage computed {expected}; nothing was published. This is a bug or a "
            "concurrent modification of the temporary directory: rerun the stage."
        )


def _check_delta(
    spark: SparkSession,
    fs: HadoopFS,
    spec: DatasetSpec,
    path: str,
    full: Mapping[str, Any],
    expected: int | None,
) -> None:
    """After a Delta write: the newest manifest is this writer's (and rows as expected)."""
    found = delta.read_delta_manifest(fs, path)
    if found is None or found.get("write_token") != full["write_token"]:
        raise ConcurrentWriteError(
            f"dataset {spec.name!r} at {path}: the newest Delta commit is not this run's "
            f"(its write token is {None if found is None else found.get('write_token')!r}): "
            "another run committed to the table while this run held its write lock."
        )
    if expected is not None:
        rows = read_table(spark, path, fs=fs).count()
        if rows != expected:
            raise DatasetIntegrityError(
                f"dataset {spec.name!r} at {path}: Delta version {found['delta_version']} "
                f"holds {rows} rows but the stage computed {expected}."
            )


def read_manifest(spark: SparkSession, spec: DatasetSpec, path: str) -> dict[str, Any]:
    """Return the manifest of dataset ``spec`` at ``path``; error clearly if absent.

    For a Delta table it is the manifest stored in its newest cr5 commit, with
    ``delta_version`` added (:func:`pipeline.io.delta.read_delta_manifest`).
    """
    return _manifest_of(HadoopFS(spark, path), spec, path)


def _manifest_of(fs: HadoopFS, spec: DatasetSpec, path: str) -> dict[str, Any]:
    root = path.rstrip("/")
    if not (fs.exists(f"{root}/{MANIFEST}") or delta.is_delta_table(fs, root)):
        ops, where = _ops(fs, path)
        recover(ops, where, stale_seconds=lock_defaults()[1])
    if delta.is_delta_table(fs, root):
        found = delta.read_delta_manifest(fs, root)
        if found is not None:
            return found
        what = "is a Delta table without a cr5 manifest in its commits"
    elif fs.exists(f"{root}/{MANIFEST}"):
        return _checked_manifest(fs, root, name=spec.name, producer=spec.producer)
    else:
        what = "does not exist" if not fs.exists(path) else f"is incomplete (no {MANIFEST})"
    raise DatasetNotFoundError(
        f"dataset {spec.name!r} at {path} {what}. Fix: run the {spec.producer!r} stage first "
        f"(python jobs/{spec.producer}.py --conf conf/<profile>.yaml), or point "
        f"paths.{spec.name} at an existing dataset."
    )


def _checked_manifest(fs: HadoopFS, root: str, *, name: str, producer: str) -> dict[str, Any]:
    """The manifest of the Parquet dataset at ``root``, after checking the dataset's files
    against it (:func:`verify_files`: sizes always, checksums up to
    ``paths.checksum_max_bytes``). ``name`` and ``producer`` name it unless the manifest
    does."""
    root = root.rstrip("/")
    where = _ops(fs, root)[1]
    try:
        manifest = json.loads(fs.read_text(f"{root}/{MANIFEST}"))
        if not isinstance(manifest, dict):
            raise ValueError("not a JSON object")
    except (ValueError, UnicodeDecodeError) as exc:
        raise DamagedDatasetError(
            integrity.damaged_message(
                dataset=name,
                path=where,
                producer=producer,
                file=MANIFEST,
                what=f"is not a readable manifest ({exc})",
            )
        ) from None
    verify_files(fs, root, manifest, name=name, producer=producer)
    return manifest


def verify_files(
    fs: HadoopFS,
    root: str,
    manifest: Mapping[str, Any],
    *,
    name: str,
    producer: str,
    checksums: bool | None = None,
) -> bool:
    """Check the files of the Parquet dataset at ``root`` against ``manifest``; raise
    :class:`~pipeline.errors.DamagedDatasetError`. Returns whether checksums were compared
    (``checksums``: True always, False never, None up to ``paths.checksum_max_bytes``).
    The manifest's ``dataset`` and ``producer`` name it in the message, else ``name`` and
    ``producer``."""
    ops, where = _ops(fs, root)
    local = isinstance(ops, LocalFS)
    return integrity.verify_dataset(
        where,
        manifest,
        dataset=str(manifest.get("dataset") or name),
        producer=str(manifest.get("producer") or producer),
        list_files=None if local else fs.list_files,
        store_checksum=None if local else fs.file_checksum,
        checksums=checksums,
        manifest_name=MANIFEST,
    )


def read_dataset(spark: SparkSession, spec: DatasetSpec, path: str) -> DataFrame:
    """Read dataset ``spec`` from ``path`` with its declared schema and column order.

    A Delta table is read as such (its current version) whatever ``paths.format`` says.
    """
    fs = HadoopFS(spark, path)
    _manifest_of(fs, spec, path)
    return conform(read_table(spark, path, fs=fs, verify=False), spec)


def read_table(
    spark: SparkSession, path: str, *, fs: HadoopFS | None = None, verify: bool = True
) -> DataFrame:
    """Read the Parquet file(s) or the Delta table (current version) at ``path``.

    For inputs that need not be datasets of this pipeline (no manifest required). A
    directory that holds a manifest is one, and with ``verify`` its files are checked
    against it first (:func:`verify_files`), like :func:`read_dataset` does.
    """
    fs = fs or HadoopFS(spark, path)
    if delta.is_delta_table(fs, path):
        return delta.read_delta(spark, path)
    if verify and fs.exists(f"{path.rstrip('/')}/{MANIFEST}"):
        _checked_manifest(fs, path, name=path.rstrip("/").rsplit("/", 1)[-1], producer="")
    return spark.read.parquet(path)
