"""Read a local Parquet dataset on the executors with pyarrow, without Spark's reader.

For a Python consumer of Arrow batches (``mapInArrow``), Spark's reader decodes every
Parquet page in the JVM and serialises the rows to Arrow again for the Python worker, a
large share of the embed stage's CPU (bench/README.md, "Embedding"). When the input is on a
local (or locally mounted) file system, the Python workers can read the row groups
themselves: the driver plans the scan from the files' footers (:func:`plan_scan`), Spark
only schedules one task per group of row groups, and each task streams its row groups with
pyarrow (:func:`read_pieces`).

The layout is the one Spark reads: hive-style partition directories (``lang=en/``) become
columns, and names starting with ``_`` or ``.`` (manifests, Spark's markers, temporary
directories of unfinished writes) are skipped.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from pipeline.errors import InputDataError

__all__ = [
    "Piece",
    "arrow_dataset",
    "local_path",
    "plan_scan",
    "read_pieces",
    "scan_schema",
    "string_column",
]

#: Like Spark's ``spark.sql.files.maxPartitionBytes`` / ``openCostInBytes``: a task reads
#: row groups up to this many bytes, and every row group counts at least the open cost.
MAX_TASK_BYTES = 128 * 2**20
OPEN_COST_BYTES = 4 * 2**20


@dataclass(frozen=True)
class Piece:
    """One row group of one file, with the hive partition values of its directory."""

    path: str
    row_group: int
    partition: tuple[tuple[str, str], ...] = ()
    bytes: int = 0


def local_path(path: str) -> str:
    """``file:///x`` or ``/x`` -> ``/x`` (the caller has checked the file system is local)."""
    parsed = urllib.parse.urlparse(path)
    return urllib.parse.unquote(parsed.path) if parsed.scheme == "file" else path


def arrow_dataset(path: str) -> ds.Dataset:
    """The Parquet dataset at the local ``path`` as pyarrow sees it (hive partitions,
    ``_`` and ``.`` names skipped: what Spark reads)."""
    try:
        return ds.dataset(
            local_path(path), format="parquet", partitioning="hive", ignore_prefixes=[".", "_"]
        )
    except (OSError, pa.ArrowInvalid) as exc:
        raise InputDataError(f"could not read the Parquet input {path}: {exc}") from exc


def scan_schema(path: str) -> pa.Schema:
    """The dataset's schema as pyarrow infers it (partition columns included)."""
    return arrow_dataset(path).schema


def plan_scan(path: str, parallelism: int) -> list[list[Piece]]:
    """The tasks of a scan of ``path``: consecutive row groups packed like Spark packs files,
    up to min(:data:`MAX_TASK_BYTES`, max(:data:`OPEN_COST_BYTES`, total / parallelism))
    bytes per task, so small inputs still spread over every core."""
    pieces: list[Piece] = []
    for fragment in arrow_dataset(path).get_fragments():
        keys = ds.get_partition_keys(fragment.partition_expression)
        partition = tuple(sorted((k, str(v)) for k, v in keys.items()))
        meta = fragment.metadata
        for i in range(meta.num_row_groups):
            size = max(OPEN_COST_BYTES, meta.row_group(i).total_byte_size)
            pieces.append(Piece(fragment.path, i, partition, size))
    total = sum(p.bytes for p in pieces)
    split = min(MAX_TASK_BYTES, max(OPEN_COST_BYTES, total // max(1, parallelism)))
    tasks: list[list[Piece]] = []
    size = 0
    for piece in pieces:
        if tasks and size + piece.bytes <= split:
            tasks[-1].append(piece)
            size += piece.bytes
        else:
            tasks.append([piece])
            size = piece.bytes
    return tasks


def read_pieces(
    pieces: Sequence[Piece], columns: Sequence[str], batch_rows: int
) -> Iterator[pa.RecordBatch]:
    """Stream ``columns`` of ``pieces`` in batches of at most ``batch_rows`` rows.

    Partition columns come from the directory names (as strings); a column a file lacks is
    all null. Memory is bounded by one batch (plus pyarrow's read-ahead of one row group's
    pages).
    """
    for piece in pieces:
        parts = dict(piece.partition)
        pf = pq.ParquetFile(piece.path)
        have = set(pf.schema_arrow.names)
        stored = [c for c in columns if c in have and c not in parts]
        for batch in pf.iter_batches(
            batch_size=batch_rows, row_groups=[piece.row_group], columns=stored
        ):
            n = batch.num_rows
            arrays = []
            for c in columns:
                if c in parts:
                    arrays.append(pa.array([parts[c]], pa.string()).take(np.zeros(n, np.int32)))
                elif c in have:
                    arrays.append(batch.column(c))
                else:
                    arrays.append(pa.nulls(n, pa.string()))
            yield pa.RecordBatch.from_arrays(arrays, names=list(columns))


def string_column(array: pa.Array) -> pa.Array:
    """``array`` as strings, as Spark's ``cast('string')`` gives for strings and integers."""
    if pa.types.is_string(array.type):
        return array
    return pc.cast(array, pa.string())
