"""The concept-grouped corpus in this process (:class:`~pipeline.linalg.groups.GroupedCorpus`).

The blocks are a list on the driver; a step runs its task on each block, the blocks on a
few threads (the tasks spend their time in scipy's sparse products and numpy, which release
the GIL for most of it), and adds the partials in block order like the Spark engine.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from pipeline.linalg.backend import TermLayout
from pipeline.linalg.groups import GroupBlock, GroupedCorpus, Task, build_blocks

__all__ = ["LocalGroupedCorpus"]


class LocalGroupedCorpus(GroupedCorpus):
    """Blocks held in this process.

    Parameters
    ----------
    blocks : sequence of GroupBlock
    layout, n_docs, n_concepts, weighting
        As for :class:`~pipeline.linalg.groups.GroupedCorpus`.
    n_blocks : int
        The block count the blocks were cut with (blocks without documents are absent).
    max_workers : int, optional
        Threads running the blocks' tasks (default: 2, or 1 for a single block).
    """

    def __init__(
        self,
        blocks: Sequence[GroupBlock],
        layout: TermLayout,
        n_docs: dict[str, int],
        n_concepts: int,
        *,
        n_blocks: int,
        weighting: str,
        max_workers: int | None = None,
    ) -> None:
        nnz = sum(int(b.x.nnz) for b in blocks)
        super().__init__(layout, n_docs, n_concepts, n_blocks, weighting, nnz)
        self.blocks = sorted(blocks, key=lambda b: b.index)
        self.states: list[Any] = [None] * len(self.blocks)
        self.max_workers = max_workers if max_workers is not None else 2

    @classmethod
    def from_matrices(
        cls,
        data: dict[str, tuple[Any, np.ndarray]],
        n_concepts: int,
        *,
        n_blocks: int,
        weighting: str = "counts",
        max_workers: int | None = None,
    ) -> LocalGroupedCorpus:
        """From ``{lang: (X_l (n_l, p_l) sparse, concept_index_l (n_l,))}`` (row i of X_l is
        the document with row number i); the mapping's order is the language order."""
        import scipy.sparse as sp

        langs = list(data)
        layout = TermLayout(langs, [int(data[lang][0].shape[1]) for lang in langs])
        n_docs = {lang: int(data[lang][0].shape[0]) for lang in langs}
        offsets = np.concatenate([[0], np.cumsum([n_docs[lang] for lang in langs])[:-1]])
        mats = [sp.csr_matrix(data[lang][0]) for lang in langs]
        lengths = np.concatenate([np.diff(m.indptr) for m in mats])
        blocks = build_blocks(
            lang=np.repeat(np.arange(len(langs)), [n_docs[lang] for lang in langs]),
            row=np.concatenate([np.arange(n_docs[lang]) for lang in langs]),
            concept=np.concatenate([np.asarray(data[lang][1], dtype=np.int64) for lang in langs]),
            indptr=np.concatenate([[0], np.cumsum(lengths)]),
            indices=np.concatenate([m.indices for m in mats]),
            values=np.concatenate([m.data for m in mats]),
            layout=layout,
            doc_offsets=offsets,
            n_blocks=n_blocks,
        )
        return cls(
            blocks,
            layout,
            n_docs,
            n_concepts,
            n_blocks=n_blocks,
            weighting=weighting,
            max_workers=max_workers,
        )

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
    ) -> LocalGroupedCorpus:
        """Collect ``frame`` (columns ``lang_index, row, concept_index, indices, values``,
        one row per training document) to the driver and cut its blocks."""
        from pipeline.backends.loader import csr_arrays

        table = frame.toArrow()
        indptr, indices, values = csr_arrays(table.column("indices"), table.column("values"))
        offsets = np.concatenate([[0], np.cumsum([n_docs[lg] for lg in layout.languages])[:-1]])
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
        return cls(blocks, layout, n_docs, n_concepts, n_blocks=n_blocks, weighting=weighting)

    def _run(
        self,
        task: Task,
        shared: Any,
        *,
        update_state: bool,
        description: str,
        on_partial: Callable[[Any], None],
    ) -> list:
        def one(i: int) -> tuple[Any, Any, Any]:
            return task(self.blocks[i], self.states[i], shared)

        workers = min(len(self.blocks), self.max_workers)
        states, extras = [], []

        def consume(outs: Iterator[tuple[Any, Any, Any]]) -> None:
            # in block order; each partial is added and dropped before the next one is read
            for block, (state, part, extra) in zip(self.blocks, outs, strict=True):
                on_partial(part)
                states.append(state)
                extras.append((block.index, extra))

        if workers <= 1:
            consume(one(i) for i in range(len(self.blocks)))
        else:
            with ThreadPoolExecutor(workers, thread_name_prefix="groups") as pool:
                consume(pool.map(one, range(len(self.blocks))))
        if update_state:
            self.states = states
        return extras
