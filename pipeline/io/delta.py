"""Datasets as Delta Lake tables (``paths.format: delta``).

Every write of a dataset is one Delta commit in overwrite mode: a rerun of a stage
makes a new table version with the same content, and the earlier versions stay in
the history (time travel) until a ``VACUUM``. Two routes write and read the same
standard tables:

**Native** (Delta's jars on the Spark classpath, e.g. ``--packages
io.delta:delta-spark_2.13:<version>``; see ``deploy/README.md``): Spark's own Delta
data source, ``df.write.format("delta").mode("overwrite")`` and
``spark.read.format("delta")``.

**delta-rs** (otherwise; needs the ``deltalake`` package, ``pip install
'cr5-on-spark[delta]'``): the executors write the Parquet data files, as for the
Parquet format, into a new directory ``<table>/data-<token>/`` (hive-style
partition directories below it); the driver then lists them in one small Spark job
(path, size, modification time, row count, partition values) and commits them with
delta-rs as *one* transaction whose add actions are the new files and whose remove
actions are all files of the previous version. No data goes through the driver. A
failure before the commit deletes ``data-<token>/`` and leaves the table at its
previous version; a writer killed outright leaves an unreferenced ``data-<token>/``
that no reader sees and ``VACUUM`` removes. Reading takes the current version's
files from the Delta log and hands them to ``spark.read.parquet``, with the
partition columns restored from the partition directories (or, for files not laid
out that way, from the log's partition values).

**Manifest.** The dataset manifest (the ``_manifest.json`` of a Parquet dataset) is
stored in the commit itself, as the JSON string ``commitInfo.userMetadata``, so it
is atomic with the data it describes. :func:`read_delta_manifest` returns the one of
the newest commit that carries a manifest (commits by other tools, e.g. OPTIMIZE,
are skipped), plus ``delta_version``, the version that commit made. It is visible to
any Delta client: ``DeltaTable(path).history()`` (delta-rs or delta-spark) or
``DESCRIBE HISTORY``.

The first write of a table (version 0) is built in a hidden temporary sibling and
renamed into place by :mod:`pipeline.io.datasets`, like a Parquet dataset; later
writes commit in place.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Mapping
from functools import reduce
from types import ModuleType
from typing import Any
from urllib.parse import unquote, urlsplit

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from pipeline.errors import ConfigError
from pipeline.io.hadoop import HadoopFS
from pipeline.io.schemas import DatasetSpec

log = logging.getLogger(__name__)

DELTA_LOG = "_delta_log"
INSTALL_HINT = "pip install 'cr5-on-spark[delta]'"
# The class whose presence on the driver's classpath selects the native route.
NATIVE_CLASS = "io.delta.tables.DeltaTable"
# Where a Parquet file's partition value is null, Spark writes this directory value.
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
_COMMIT_FILE = re.compile(r"^(\d{20})\.json$")
# Table features whose files a plain Parquet read would get wrong (renamed physical
# columns, rows deleted by a side file): such tables need the native route.
_UNREADABLE_FEATURES = frozenset({"columnMapping", "deletionVectors"})

_native_cache: dict[str, bool] = {}


# --------------------------------------------------------------------------- routes


def is_delta_table(fs: HadoopFS, path: str) -> bool:
    """True when ``path`` holds a Delta table (has a ``_delta_log`` directory)."""
    return fs.exists(f"{path.rstrip('/')}/{DELTA_LOG}")


def native_available(spark: SparkSession) -> bool:
    """True when the JVM can load Delta's classes (delta-spark jars on the classpath).

    The answer is cached per Spark application.
    """
    key = spark.sparkContext.applicationId
    if key not in _native_cache:
        jvm = spark.sparkContext._jvm
        try:
            loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
            jvm.java.lang.Class.forName(NATIVE_CLASS, False, loader)
            found = True
        except Exception:
            found = False
        _native_cache[key] = found
        log.info(
            "Delta route: %s",
            "Spark's native Delta data source (delta-spark jars found)"
            if found
            else "delta-rs commits of Spark-written Parquet files (no delta-spark jars)",
        )
    return _native_cache[key]


def _deltalake(purpose: str) -> ModuleType:
    """Import ``deltalake`` (with its transaction module) or explain how to get it."""
    try:
        import deltalake
        import deltalake.transaction  # AddAction, create_table_with_add_actions
    except ImportError as exc:
        raise ConfigError(
            f"{purpose} needs either Delta's jars on the Spark classpath (delta-spark, see "
            f"deploy/README.md, 'Delta Lake output') or the deltalake package, which is not "
            f"installed ({exc}). Fix: {INSTALL_HINT}, or set paths.format=parquet."
        ) from exc
    return deltalake


def _table_uri(fs: HadoopFS, path: str) -> tuple[str, str, str]:
    """``(deltalake URI, decoded absolute path, Spark path string)`` of table ``path``."""
    scheme, abspath, qualified = fs.qualify(path)
    if scheme in ("", "file"):
        return abspath, abspath, qualified.rstrip("/")
    # delta-rs names Hadoop's s3a:// store s3://; other schemes are the same.
    uri = "s3://" + qualified.split("://", 1)[1] if scheme == "s3a" else qualified
    return uri.rstrip("/"), abspath, qualified.rstrip("/")


# --------------------------------------------------------------------------- writing


def write_delta(
    spark: SparkSession,
    df: DataFrame,
    spec: DatasetSpec,
    path: str,
    manifest: Mapping[str, Any],
) -> None:
    """Commit ``df`` as a new version of the Delta table at ``path`` (overwrite mode).

    Creates the table (version 0) when ``path`` holds none. ``df`` must already have
    ``spec``'s columns (:func:`pipeline.io.datasets.conform`); ``manifest`` becomes the
    commit's ``userMetadata``.

    Raises
    ------
    ConfigError
        When neither Delta's jars nor the ``deltalake`` package are available (checked
        before any data is written).
    """
    text = json.dumps(manifest, sort_keys=True, default=str)
    if native_available(spark):
        writer = (
            df.write.format("delta")
            .mode("overwrite")
            # The spec is authoritative: a changed schema replaces the table's.
            .option("overwriteSchema", "true")
            .option("userMetadata", text)
        )
        if spec.partition_by:
            writer = writer.partitionBy(*spec.partition_by)
        writer.save(path)
        return
    dl = _deltalake(f"writing dataset {spec.name!r} as a Delta table (paths.format=delta)")
    fs = HadoopFS(spark, path)
    uri, root, _ = _table_uri(fs, path)
    before = _version(dl, uri) if is_delta_table(fs, path) else None
    staging = f"{path.rstrip('/')}/data-{uuid.uuid4().hex[:12]}"
    try:
        adds = stage_files(spark, df, spec, fs, root, staging)
        commit(dl, uri, adds, spec, text, create=before is None)
    except BaseException:
        if not _maybe_committed(dl, uri, fs, path, before) and fs.exists(staging):
            fs.delete(staging)
        raise
    log.info("committed %d files of %s to Delta table %s", len(adds), spec.name, path)


def _version(dl: ModuleType, uri: str) -> int:
    return int(dl.DeltaTable(uri).version())


def _maybe_committed(dl: ModuleType, uri: str, fs: HadoopFS, path: str, before: int | None) -> bool:
    """After a failed write: could a commit referencing the new files have happened?

    Errs on the side of True (the new files are then kept; VACUUM removes them if
    unreferenced), e.g. for a commit that raised after writing its log entry.
    """
    if before is None:
        return is_delta_table(fs, path)
    try:
        return _version(dl, uri) != before
    except Exception:
        return True


def stage_files(
    spark: SparkSession,
    df: DataFrame,
    spec: DatasetSpec,
    fs: HadoopFS,
    root: str,
    staging: str,
) -> list[Any]:
    """Write ``df`` as Parquet files under ``staging`` with Spark; describe them.

    Parameters
    ----------
    fs : HadoopFS
        The file system of the table.
    root : str
        The table's decoded absolute path (``staging`` is a directory below it).
    staging : str
        A new directory for the files, inside the table.

    Returns
    -------
    list of deltalake.transaction.AddAction
        One per data file, its path relative to the table root.
    """
    from deltalake.transaction import AddAction

    writer = df.write.mode("errorifexists")
    if spec.partition_by:
        writer = writer.partitionBy(*spec.partition_by)
    writer.parquet(staging)
    fs.delete(f"{staging}/_SUCCESS")
    # One small job over the files' metadata (row counts come from the footers).
    files = (
        spark.read.schema(spec.schema)
        .parquet(staging)
        .groupBy(
            F.col("_metadata.file_path").alias("file"),
            F.col("_metadata.file_size").alias("size"),
            F.unix_millis(F.col("_metadata.file_modification_time")).alias("mtime"),
            *[F.col(c).cast("string").alias(c) for c in spec.partition_by],
        )
        .count()
        .collect()
    )
    adds = []
    for r in files:
        # file_path is an encoded URI; delta-rs wants the decoded path relative to the root.
        physical = unquote(urlsplit(r["file"]).path)
        if not physical.startswith(root + "/"):
            raise OSError(f"Spark wrote {physical}, outside the Delta table {root}")
        adds.append(
            AddAction(
                physical[len(root) + 1 :],
                int(r["size"]),
                {c: r[c] for c in spec.partition_by},
                int(r["mtime"]),
                True,
                json.dumps({"numRecords": int(r["count"])}),
            )
        )
    return adds


def commit(
    dl: ModuleType,
    uri: str,
    adds: list[Any],
    spec: DatasetSpec,
    manifest_json: str,
    *,
    create: bool,
) -> None:
    """One Delta commit: ``adds`` replace every file of the current version.

    ``create`` makes version 0 of a new table; otherwise the commit is an overwrite,
    for which delta-rs derives the remove actions of all current files itself.
    """
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(spec.schema)
    props = dl.CommitProperties(custom_metadata={"userMetadata": manifest_json})
    partition_by = list(spec.partition_by) or None
    if create:
        dl.transaction.create_table_with_add_actions(
            uri,
            dl.Schema.from_arrow(schema),
            adds,
            mode="error",
            partition_by=partition_by,
            name=spec.name,
            description=f"cr5 dataset {spec.name!r} (written by stage {spec.producer!r})",
            commit_properties=props,
        )
    else:
        dl.DeltaTable(uri).create_write_transaction(
            adds,
            mode="overwrite",
            schema=schema,
            partition_by=partition_by,
            commit_properties=props,
        )


# --------------------------------------------------------------------------- reading


def read_delta_manifest(fs: HadoopFS, path: str) -> dict[str, Any] | None:
    """The manifest of the newest commit that carries one, or None.

    Read straight from the Delta log's commit files (``_delta_log/<version>.json``),
    so it works on both routes and needs neither delta-rs nor Delta's jars. The
    returned mapping has ``delta_version``, the table version that commit created.
    """
    log_dir = f"{path.rstrip('/')}/{DELTA_LOG}"
    versions = sorted(
        (int(m.group(1)) for m in map(_COMMIT_FILE.match, fs.list_names(log_dir)) if m),
        reverse=True,
    )
    for version in versions:
        for line in fs.read_text(f"{log_dir}/{version:020d}.json").splitlines():
            if '"commitInfo"' not in line:
                continue
            info = json.loads(line).get("commitInfo") or {}
            try:
                manifest = json.loads(info.get("userMetadata") or "null")
            except json.JSONDecodeError:
                manifest = None
            if isinstance(manifest, dict) and "dataset" in manifest:
                return {**manifest, "delta_version": version}
            break
    return None


def read_delta(spark: SparkSession, path: str) -> DataFrame:
    """The current version of the Delta table at ``path`` as a DataFrame.

    Raises
    ------
    ConfigError
        When neither route is available, or the table uses a feature (column mapping,
        deletion vectors) only the native route reads correctly.
    """
    if native_available(spark):
        return spark.read.format("delta").load(path)
    from pyspark.sql.pandas.types import from_arrow_schema

    dl = _deltalake(f"reading the Delta table {path}")
    import pyarrow as pa

    fs = HadoopFS(spark, path)
    uri, _, root = _table_uri(fs, path)
    table = dl.DeltaTable(uri)
    _check_plain_parquet(table, path)
    schema = from_arrow_schema(pa.schema(table.schema().to_arrow()))
    parts = list(table.metadata().partition_columns)
    actions = pa.table(table.get_add_actions(flatten=True))
    rows = actions.select(["path", *[f"partition.{c}" for c in parts]]).to_pylist()
    if not rows:
        return spark.createDataFrame([], schema)
    if not parts:
        return spark.read.schema(schema).parquet(*[_absolute(root, r["path"]) for r in rows])
    # Group the files by how their partition values can be restored: from hive-style
    # directories under a common base (one read with basePath), else per partition.
    groups: dict[tuple[str, Any], list[str]] = {}
    for r in rows:
        file = _absolute(root, r["path"])
        values = tuple(r[f"partition.{c}"] for c in parts)
        base = _hive_base(file, parts, values)
        key = ("base", base) if base is not None else ("values", values)
        groups.setdefault(key, []).append(file)
    data_schema = StructType([f for f in schema.fields if f.name not in parts])
    frames = []
    for (kind, key), files in groups.items():
        if kind == "base":
            frames.append(spark.read.schema(schema).option("basePath", key).parquet(*files))
        else:
            df = spark.read.schema(data_schema).parquet(*files)
            for c, v in zip(parts, key):
                df = df.withColumn(c, F.lit(v).cast(schema[c].dataType))
            frames.append(df.select(*schema.names))
    return reduce(DataFrame.unionByName, frames)


def _check_plain_parquet(table: Any, path: str) -> None:
    """Refuse tables whose data files are not plain Parquet of the table's columns."""
    protocol = table.protocol()
    features = set(protocol.reader_features or ())
    mapping = (table.metadata().configuration or {}).get("delta.columnMapping.mode", "none")
    bad = sorted(features & _UNREADABLE_FEATURES)
    if mapping not in (None, "none") or (protocol.min_reader_version == 2 and not features):
        bad = sorted({*bad, "columnMapping"})
    if bad:
        raise ConfigError(
            f"the Delta table {path} uses {', '.join(bad)}, which the delta-rs route (plain "
            f"Parquet reads) cannot apply. Fix: read it with Delta's jars on the Spark "
            f"classpath (deploy/README.md, 'Delta Lake output')."
        )


def _absolute(root: str, logged: str) -> str:
    """A data file's path for Spark from its Delta log path (a URI-encoded reference,
    relative to the table root unless absolute)."""
    if "://" in logged:
        scheme, rest = logged.split("://", 1)
        return f"{scheme}://{unquote(rest)}"
    rel = unquote(logged)
    return rel if rel.startswith("/") else f"{root}/{rel}"


def _hive_base(file: str, parts: list[str], values: tuple[Any, ...]) -> str | None:
    """The directory above ``file``'s ``col=value`` directories when they match ``values``.

    Returns None when the file is not laid out that way (then its partition values
    are taken from the Delta log instead of its path).
    """
    dirs = file.rsplit("/", 1)[0].split("/")
    if len(dirs) <= len(parts):
        return None
    for name, col, value in zip(dirs[-len(parts) :], parts, values):
        key, eq, raw = name.partition("=")
        if not eq or key != col:
            return None
        decoded = None if raw == HIVE_NULL else unquote(raw)
        if decoded != (None if value is None else str(value)):
            return None
    return "/".join(dirs[: -len(parts)])
