"""Dense, deterministic 0..n-1 indices over a sorted DataFrame, without a global window.

``row_number()`` over an unpartitioned window moves every row into one task. Here
the rows are range-partitioned by the sort key instead; each row gets
``offset[partition] + position in partition``, where the offsets are prefix sums
of the (small) per-partition counts. The frame with its partition ids is cached
before counting so that the counts and the ids come from the same materialisation.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

_PARTITION_BITS = 33  # monotonically_increasing_id puts the partition id above bit 33


def dense_index(df: DataFrame, order_by: Sequence[str], name: str) -> DataFrame:
    """Return ``df`` with a long column ``name`` numbering its rows 0.. in ``order_by`` order.

    ``order_by`` must be a unique key of ``df`` for the numbering to be reproducible.
    """
    spark = df.sparkSession
    tagged = (
        df.orderBy(*order_by)
        .withColumn("_pid", F.spark_partition_id())
        .withColumn("_mid", F.monotonically_increasing_id())
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    counts = sorted((r["_pid"], r["count"]) for r in tagged.groupBy("_pid").count().collect())
    offsets, total = [], 0
    for pid, count in counts:
        offsets.append((pid, total))
        total += count
    offset_df = spark.createDataFrame(offsets or [(0, 0)], "_pid int, _offset long")
    local = F.col("_mid") - F.shiftleft(F.col("_pid").cast("long"), _PARTITION_BITS)
    return (
        tagged.join(F.broadcast(offset_df), "_pid")
        .withColumn(name, F.col("_offset") + local)
        .drop("_pid", "_mid", "_offset")
    )
