"""The training documents grouped by concept, in blocks: the engine of JPLSA, CPLSA and S2Net.

The Cr5 family sees X through block products (:class:`~pipeline.linalg.backend.CorpusBackend`).
Methods that work on *document pairs* need a concept's documents side by side instead: a
topic model fits one topic distribution per concept (JPLSA) or couples the documents of a
concept (CPLSA), and S2Net compares a concept's documents with each other and with other
concepts'. :class:`GroupedCorpus` holds the training rows grouped by concept and cut into
:class:`GroupBlock` s (concept k goes to block ``k mod n_blocks``, so a concept never spans two
blocks and every engine cuts the same blocks). A method's step runs one *task* on every block,
where the block lives:

    task(block, state, shared) -> (state', partial, extra)

* ``state``: what the method keeps per block between steps (a topic model's topic
  distributions of the block's documents or concepts); ``None`` at first. With
  ``update_state`` the engine keeps ``state'``, else it is ignored;
* ``partial``: ``None`` or a compact partial ``(ids, values)``, ``ids`` sorted distinct row
  numbers of an ``n_rows x width`` result (for example the stacked vocabulary, p) and
  ``values`` of shape (len(ids), width): the engine adds the partials of all blocks into one
  dense float64 array (expected word counts, gradients);
* ``extra``: anything small, returned per block (log-likelihoods, counts, collected states).

The local engine (:mod:`pipeline.backends.local_groups`) keeps the blocks in this process;
the Spark engine (:mod:`pipeline.backends.spark_groups`) caches them on the executors, one
step being one Spark job with ``shared`` broadcast. Both add the partials in block order when
they reach the driver, so with the same blocks they return the same numbers.

Everything here is numpy and scipy: the blocks are built from flat arrays
(:func:`build_blocks`) by either engine.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from pipeline.linalg.backend import TermLayout
from pipeline.linalg.monitor import distractor_rows

__all__ = [
    "GroupBlock",
    "GroupedCorpus",
    "StepResult",
    "Task",
    "add_partial",
    "build_blocks",
    "default_blocks",
]

#: ``task(block, state, shared) -> (state', partial or None, extra)`` (module docstring).
Task = Callable[["GroupBlock", Any, Any], tuple[Any, Any, Any]]

#: Nonzeros per block of :func:`default_blocks`.
NNZ_PER_BLOCK = 500_000


@dataclass
class GroupBlock:
    """The documents of some concepts, with their rows over the terms they use.

    Attributes
    ----------
    index : int
        Block number (the concepts ``k`` with ``k mod n_blocks == index``).
    concepts : ndarray of int64, shape (g,)
        The block's concept indices, ascending.
    doc_group : ndarray of int64, shape (n,)
        Position in ``concepts`` of each document; documents are sorted by concept, then
        language.
    doc_lang : ndarray of int64, shape (n,)
        Language of each document (its position in the corpus' language order).
    doc_key : ndarray of int64, shape (n,)
        Global document number: ``offset[lang] + row`` (rows numbered per language).
    cols : ndarray of int64, shape (m,)
        The stacked-vocabulary term ids (``TermLayout`` rows) the block's documents use.
    x : scipy.sparse.csr_matrix of float64, shape (n, m)
        The documents' rows over ``cols`` (term counts or TF-IDF weights).
    """

    index: int
    concepts: np.ndarray
    doc_group: np.ndarray
    doc_lang: np.ndarray
    doc_key: np.ndarray
    cols: np.ndarray
    x: sp.csr_matrix
    _group_x: sp.csr_matrix | None = field(default=None, repr=False)

    @property
    def n_docs(self) -> int:
        return int(self.x.shape[0])

    @property
    def n_groups(self) -> int:
        return int(self.concepts.shape[0])

    def group_indicator(self) -> sp.csr_matrix:
        """``G`` of shape (g, n): ``G[j, i] = 1`` when document i belongs to concept j."""
        n = self.n_docs
        return sp.csr_matrix((np.ones(n), (self.doc_group, np.arange(n))), shape=(self.n_groups, n))

    def group_rows(self) -> sp.csr_matrix:
        """Rows of whole concepts: ``G @ x``, shape (g, m) (the sum of a concept's documents,
        which use disjoint stacked term ids since each is in one language)."""
        if self._group_x is None:
            gx = (self.group_indicator() @ self.x).tocsr()
            gx.sort_indices()
            self._group_x = gx
        return self._group_x

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_group_x"] = None  # derived: rebuilt where it is used
        return state


def build_blocks(
    *,
    lang: np.ndarray,
    row: np.ndarray,
    concept: np.ndarray,
    indptr: np.ndarray,
    indices: np.ndarray,
    values: np.ndarray,
    layout: TermLayout,
    doc_offsets: Sequence[int],
    n_blocks: int,
) -> list[GroupBlock]:
    """The :class:`GroupBlock` s of some documents (those of whole concepts).

    Parameters
    ----------
    lang : ndarray of int, shape (n,)
        Language position of each document (in ``layout.languages``).
    row : ndarray of int, shape (n,)
        Row number of each document within its language.
    concept : ndarray of int, shape (n,)
        Concept index of each document.
    indptr, indices, values : ndarray
        The documents' rows in CSR form, ``indices`` the per-language term_index.
    layout : TermLayout
        The stacked vocabulary (term ids become ``offset[lang] + term_index``).
    doc_offsets : sequence of int
        First global document number of each language.
    n_blocks : int
        Concept k goes to block ``k mod n_blocks``.

    Returns
    -------
    list of GroupBlock
        One per block that has documents here, by block index; inside a block the
        documents are sorted by (concept, language), so the arrival order does not matter.
    """
    lang = np.asarray(lang, dtype=np.int64)
    concept = np.asarray(concept, dtype=np.int64)
    row = np.asarray(row, dtype=np.int64)
    indptr = np.asarray(indptr, dtype=np.int64)
    starts = np.array([layout.slices[lg].start for lg in layout.languages], dtype=np.int64)
    lengths = np.diff(indptr)
    term = np.asarray(indices, dtype=np.int64) + np.repeat(starts[lang], lengths)
    x_all = sp.csr_matrix(
        (np.asarray(values, dtype=np.float64), term, indptr), shape=(lang.size, layout.n_terms)
    )
    block_of = concept % n_blocks
    out = []
    for b in np.unique(block_of):
        docs = np.flatnonzero(block_of == b)
        docs = docs[np.lexsort((lang[docs], concept[docs]))]
        x = x_all[docs]
        cols, local = np.unique(x.indices, return_inverse=True)
        xb = sp.csr_matrix((x.data, local.astype(np.int64), x.indptr), shape=(docs.size, cols.size))
        xb.sort_indices()
        concepts, doc_group = np.unique(concept[docs], return_inverse=True)
        out.append(
            GroupBlock(
                index=int(b),
                concepts=concepts.astype(np.int64),
                doc_group=doc_group.astype(np.int64),
                doc_lang=lang[docs],
                doc_key=np.asarray(doc_offsets, dtype=np.int64)[lang[docs]] + row[docs],
                cols=cols.astype(np.int64),
                x=xb,
            )
        )
    return out


def default_blocks(nnz: int, requested: int | None, n_concepts: int) -> int:
    """Blocks of a corpus: ``requested``, else one per :data:`NNZ_PER_BLOCK` nonzeros (at
    least 2); never more than the concepts."""
    n = requested if requested is not None else max(2, -(-int(nnz) // NNZ_PER_BLOCK))
    return max(1, min(int(n), max(1, int(n_concepts))))


def add_partial(out: np.ndarray | None, part: tuple[np.ndarray, np.ndarray] | None) -> None:
    """Add one compact partial ``(ids, values)`` into the dense result ``out`` (in place)."""
    if out is not None and part is not None:
        ids, values = part
        out[ids] += values


@dataclass
class StepResult:
    """What one step over all blocks returns.

    Attributes
    ----------
    total : ndarray of shape (n_rows, width) or None
        The sum of the blocks' compact partials (None when the step has none).
    extras : list
        Each block's ``extra``, in block order.
    """

    total: np.ndarray | None
    extras: list


class GroupedCorpus(ABC):
    """Training documents grouped by concept in blocks (module docstring).

    Parameters
    ----------
    layout : TermLayout
        The stacked vocabulary of the languages.
    n_docs : dict of str to int
        Training documents per language.
    n_concepts : int
        K (concept indices run 0..K-1; some may have no document here).
    n_blocks : int
    weighting : {"counts", "tfidf"}
        What the rows hold: raw term counts (topic models) or L2-normalised TF-IDF.
    nnz : int
        Nonzeros of all rows.
    """

    def __init__(
        self,
        layout: TermLayout,
        n_docs: dict[str, int],
        n_concepts: int,
        n_blocks: int,
        weighting: str,
        nnz: int,
    ) -> None:
        self.layout = layout
        self.n_docs = dict(n_docs)
        self.n_concepts = int(n_concepts)
        self.n_blocks = int(n_blocks)
        self.weighting = weighting
        self.nnz = int(nnz)
        self.steps = 0

    @property
    def languages(self) -> tuple[str, ...]:
        return self.layout.languages

    @property
    def n_terms(self) -> int:
        return self.layout.n_terms

    def doc_offsets(self) -> np.ndarray:
        """First global document number of each language (``GroupBlock.doc_key``)."""
        sizes = [self.n_docs[lang] for lang in self.languages]
        return np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)

    def step(
        self,
        task: Task,
        shared: Any = None,
        *,
        n_rows: int = 0,
        width: int = 0,
        update_state: bool = False,
        description: str = "step",
    ) -> StepResult:
        """Run ``task`` on every block (module docstring); the summed partials (a dense
        (n_rows, width) array, None when ``width`` is 0) and the extras in block order."""
        self.steps += 1
        total = np.zeros((n_rows, width), dtype=np.float64) if width else None
        extras = self._run(
            task,
            shared,
            update_state=update_state,
            description=description,
            on_partial=lambda part: add_partial(total, part),
        )
        return StepResult(total, [e for _, e in sorted(extras, key=lambda p: p[0])])

    @abstractmethod
    def _run(
        self,
        task: Task,
        shared: Any,
        *,
        update_state: bool,
        description: str,
        on_partial: Callable[[Any], None],
    ) -> list:
        """Run one step: call ``on_partial`` with every block's partial, in block order, as
        they come (so that they need not all be held at once); return ``[(block index,
        extra)]``."""

    def document_count(self) -> int:
        """Documents in all blocks (one step)."""
        out = self.step(_count_task, None, description="count documents")
        return int(sum(out.extras))

    def sample_rows(self, count: int) -> dict[str, sp.csr_matrix]:
        """A seeded sample of ``min(count, n_l)`` training rows of each language l, over its
        own terms: (k_l, p_l) in row order. The rows are
        :func:`~pipeline.linalg.monitor.distractor_rows` (seed: the language's position),
        the neural methods' sample; one step, each block returning only its sampled rows."""
        offsets = self.doc_offsets()
        picked = {
            lang: distractor_rows(self.n_docs[lang], count, seed=i)
            for i, lang in enumerate(self.languages)
        }
        wanted = np.concatenate(
            [offsets[i] + picked[lang] for i, lang in enumerate(self.languages)]
        )
        out = self.step(_rows_task, (np.sort(wanted), self.n_terms), description="sample rows")
        parts = [e for e in out.extras if e[0].size] or [
            (np.zeros(0, np.int64), sp.csr_matrix((0, self.n_terms)))
        ]
        keys = np.concatenate([k for k, _ in parts])
        rows = sp.vstack([x for _, x in parts], format="csr")
        result = {}
        for i, lang in enumerate(self.languages):
            ends = (offsets[i], offsets[i] + self.n_docs[lang])
            mine = np.flatnonzero((keys >= ends[0]) & (keys < ends[1]))
            mine = mine[np.argsort(keys[mine])]
            result[lang] = rows[mine][:, self.layout.slices[lang]].tocsr()
        return result

    def reset_state(self) -> None:
        """Forget every block's state (a new fit starts from ``None``)."""
        self.step(_clear_state, None, update_state=True, description="reset state")

    def close(self) -> None:  # noqa: B027 (optional hook: nothing to release in-process)
        """Release the blocks (the Spark engine unpersists its cached RDD)."""


def _clear_state(block: GroupBlock, state: Any, shared: Any) -> tuple[None, None, None]:
    return None, None, None


def _rows_task(block: GroupBlock, state: Any, shared: tuple) -> tuple[Any, None, tuple]:
    """The block's documents among the sorted global numbers ``wanted``: (their numbers,
    their rows over all ``n_terms`` stacked terms)."""
    wanted, n_terms = shared
    mask = np.isin(block.doc_key, wanted)
    sub = block.x[mask].tocsr()
    rows = sp.csr_matrix(
        (sub.data, block.cols[sub.indices], sub.indptr), shape=(sub.shape[0], n_terms)
    )
    return state, None, (block.doc_key[mask], rows)


def _count_task(block: GroupBlock, state: Any, shared: Any) -> tuple[Any, None, int]:
    return state, None, block.n_docs
