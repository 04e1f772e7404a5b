"""The concept-grouped corpus cached on the Spark executors
(:class:`~pipeline.linalg.groups.GroupedCorpus`).

Building: the training rows (a DataFrame of ``lang_index, row, concept_index, indices,
values``) are shuffled by block (``concept_index mod n_blocks``); each partition turns its
rows into :class:`~pipeline.linalg.groups.GroupBlock` s with the same
:func:`~pipeline.linalg.groups.build_blocks` the local engine uses (Arrow batches, no loop
over rows). The RDD of ``(block, state)`` records is cached and locally checkpointed.

One step is one Spark job: ``shared`` is broadcast, every record runs the task, and

* the partials and extras go to the driver, which adds the partials in block order
  (``"driver"``, up to :data:`DRIVER_MAX_BLOCKS` blocks), or the partials are cut into term
  ranges that are summed on the executors (``reduceByKey``) so that the driver receives each
  row of the result once (``"row_ranges"``, more blocks);
* with ``update_state``, the records with their new states become the cached RDD of the next
  step (the old one is unpersisted). Each generation is locally checkpointed, so the lineage
  stays one step long and the broadcasts of earlier steps can be destroyed; a lost executor
  then fails the step, and the fit resumes from its own checkpoint
  (:class:`~pipeline.linalg.checkpoint.CheckpointStore`) instead of recomputing every
  earlier step.

Task functions are module-level and shipped as ``functools.partial`` objects holding only the
task, a broadcast and plain values.
"""

from __future__ import annotations

import functools
import logging
import math
import pickle
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark import StorageLevel

from pipeline.backends.loader import csr_arrays
from pipeline.backends.spark_blocks import merge_rows
from pipeline.linalg.backend import TermLayout
from pipeline.linalg.groups import GroupedCorpus, Task, build_blocks

__all__ = ["DRIVER_MAX_BLOCKS", "SparkGroupedCorpus"]

log = logging.getLogger(__name__)

#: Up to this many blocks the partials are added on the driver; beyond, by term range.
DRIVER_MAX_BLOCKS = 8
#: Target size of one term range of the executor-side sum.
_RANGE_BYTES = 32 * 2**20


def _blocks_of_partition(
    layout: TermLayout, offsets: list[int], n_blocks: int, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow``: the partition's rows -> one ``(block, payload)`` record per block."""
    batches = [b for b in batches if b.num_rows]
    if not batches:  # a partition without documents (hash partitioning of block numbers)
        return
    table = pa.Table.from_batches(batches)
    indptr, indices, values = csr_arrays(table.column("indices"), table.column("values"))
    blocks = build_blocks(
        lang=table.column("lang_index").to_numpy(),
        row=table.column("row").to_numpy(),
        concept=table.column("concept_index").to_numpy(),
        indptr=indptr,
        indices=indices,
        values=values,
        layout=layout,
        doc_offsets=offsets,
        n_blocks=n_blocks,
    )
    yield pa.RecordBatch.from_arrays(
        [
            pa.array([b.index for b in blocks], pa.int64()),
            pa.array([pickle.dumps(b, protocol=5) for b in blocks], pa.binary()),
        ],
        names=["block", "payload"],
    )


def _record_of(row: Any) -> tuple[Any, None]:
    return pickle.loads(bytes(row["payload"])), None


def _apply(task: Task, bc: Any, records: Iterator[tuple]) -> Iterator[tuple]:
    """Run ``task`` on each ``(block, state)``: ``(block, state', partial, extra)``."""
    shared = bc.value if bc is not None else None
    for block, state in records:
        new_state, partial, extra = task(block, state, shared)
        yield block, new_state, partial, extra


def _output(rec: tuple) -> tuple:
    block, _, partial, extra = rec
    return block.index, partial, extra


def _extra(rec: tuple) -> tuple:
    return rec[0].index, rec[3]


def _record(rec: tuple) -> tuple:
    return rec[0], rec[1]


def _pieces(edges: np.ndarray, rec: tuple) -> Iterator[tuple]:
    """A record's compact partial cut at the term ``edges``: ``(range, (ids, values))``."""
    part = rec[2]
    if part is None:
        return
    ids, values = part
    cuts = np.searchsorted(ids, edges)
    for key in range(len(edges) - 1):
        lo, hi = cuts[key], cuts[key + 1]
        if hi > lo:
            yield key, (ids[lo:hi], np.asarray(values[lo:hi], dtype=np.float64))


class SparkGroupedCorpus(GroupedCorpus):
    """Blocks cached on the executors (module docstring).

    Use :meth:`from_frame`. ``records``: the cached RDD of ``(GroupBlock, state)``.
    """

    def __init__(
        self,
        sc: Any,
        records: Any,
        layout: TermLayout,
        n_docs: dict[str, int],
        n_concepts: int,
        *,
        n_blocks: int,
        weighting: str,
        nnz: int,
    ) -> None:
        super().__init__(layout, n_docs, n_concepts, n_blocks, weighting, nnz)
        self._sc = sc
        self.records = records
        self.width_hint = 0

    @classmethod
    def from_frame(
        cls,
        frame: Any,
        layout: TermLayout,
        n_docs: dict[str, int],
        n_concepts: int,
        *,
        n_blocks: int,
        weighting: str,
    ) -> SparkGroupedCorpus:
        """Build and cache the blocks of ``frame`` (columns ``lang_index, row,
        concept_index, indices, values``: one row per training document)."""
        from pyspark.sql import functions as F

        sc = frame.sparkSession.sparkContext
        offsets = np.concatenate([[0], np.cumsum([n_docs[lg] for lg in layout.languages])[:-1]])
        fn = functools.partial(_blocks_of_partition, layout, [int(o) for o in offsets], n_blocks)
        keyed = frame.withColumn("_block", F.col("concept_index") % F.lit(n_blocks))
        records = (
            keyed.repartition(n_blocks, "_block")
            .drop("_block")
            .mapInArrow(fn, "block long, payload binary")
            .rdd.map(_record_of)
            .persist(StorageLevel.MEMORY_AND_DISK)
        )
        records.localCheckpoint()
        sc.setJobDescription(f"grouped corpus: {n_blocks} blocks of {weighting} rows")
        try:
            nnz = records.map(lambda rec: int(rec[0].x.nnz)).sum()
        finally:
            sc.setJobDescription(None)
        log.info("grouped corpus (%s): %d blocks cached, nnz %d", weighting, n_blocks, nnz)
        return cls(
            sc,
            records,
            layout,
            n_docs,
            n_concepts,
            n_blocks=n_blocks,
            weighting=weighting,
            nnz=int(nnz),
        )

    def _run(
        self,
        task: Task,
        shared: Any,
        *,
        update_state: bool,
        description: str,
        on_partial: Callable[[Any], None],
    ) -> list:
        sc = self._sc
        if sc is None or self.records is None:
            raise RuntimeError("the grouped corpus was closed")
        bc = sc.broadcast(shared) if shared is not None else None
        sc.setJobDescription(description)
        try:
            mapped = self.records.mapPartitions(functools.partial(_apply, task, bc))
            if update_state:
                mapped = mapped.persist(StorageLevel.MEMORY_AND_DISK)
                mapped.localCheckpoint()
            parts, extras = self._collect(mapped, shared)
            for _, part in sorted(parts, key=lambda p: p[0]):
                on_partial(part)
            if update_state:
                records = mapped.map(_record).persist(StorageLevel.MEMORY_AND_DISK)
                records.localCheckpoint()
                records.count()
                mapped.unpersist()
                self.records.unpersist()
                self.records = records
        finally:
            sc.setJobDescription(None)
            if bc is not None:
                bc.destroy()
        return extras

    def _collect(self, mapped: Any, shared: Any) -> tuple[list, list]:
        """The partials (route of the module docstring) and the extras of one step."""
        if self.n_blocks <= DRIVER_MAX_BLOCKS:
            outs = mapped.map(_output).collect()
            return [(i, p) for i, p, _ in outs], [(i, e) for i, _, e in outs]
        own = not mapped.is_cached  # the two jobs below must not run the task twice
        if own:
            mapped = mapped.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            extras = mapped.map(_extra).collect()
            width = max(1, self.width_hint)
            ranges = math.ceil(self.n_terms * width * 8 / _RANGE_BYTES)
            ranges = max(2, min(self.n_blocks, ranges))
            edges = np.linspace(0, self.n_terms, ranges + 1).round().astype(np.int64)
            summed = (
                mapped.flatMap(functools.partial(_pieces, edges))
                .reduceByKey(merge_rows, numPartitions=ranges)
                .collect()
            )
        finally:
            if own:
                mapped.unpersist()
        # one compact partial per term range: disjoint ids, added in range order
        return list(summed), extras

    def step(self, task: Task, shared: Any = None, *, width: int = 0, **kw: Any) -> Any:
        self.width_hint = width
        return super().step(task, shared, width=width, **kw)

    def close(self) -> None:
        if self.records is not None:
            self.records.unpersist()
        self.records = None

    def __getstate__(self) -> dict:
        raise TypeError("a SparkGroupedCorpus stays on the driver (it holds an RDD)")
