"""Resumable solves: what a solver needs of a checkpoint store, and the data it saves.

A solver saves named states (arrays and JSON-able metadata) in a :class:`CheckpointStore`
that its caller makes and passes in, bound first to the problem's fingerprint; it never
touches a file. The directory that holds them on the local disk, HDFS or an object store is
the storage layer's (:class:`pipeline.io.checkpoints.CheckpointDirectory`). Here: the
protocol, :class:`ColumnBlocks` (the eigensolver's tracked images, saved as the one array
they form without stacking them), :class:`CheckpointMismatchError` and the digests that
make fingerprints.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any, BinaryIO, Protocol, runtime_checkable

import numpy as np

from pipeline.errors import PipelineError
from pipeline.linalg.spill import release_rows

__all__ = [
    "CheckpointCadence",
    "CheckpointMismatchError",
    "CheckpointStore",
    "ColumnBlocks",
    "array_digest",
    "checkpoint_gap",
    "fingerprint_hash",
]

#: rows per write of a :class:`ColumnBlocks` array (a few MB per step for p x 500 float32)
WRITE_STEP_ROWS = 4096


class ColumnBlocks:
    """2-D arrays with the same rows, standing for ``np.hstack(blocks)`` without forming it.

    A store's :meth:`~CheckpointStore.save` streams it into one ``.npy`` file
    (:meth:`write_npy`), which loads as that array; ``np.asarray`` and :meth:`copy` form it.
    """

    def __init__(self, blocks: list[np.ndarray]) -> None:
        if not blocks or len({b.shape[0] for b in blocks}) != 1 or any(b.ndim != 2 for b in blocks):
            raise ValueError("ColumnBlocks needs one or more 2-D arrays with the same rows")
        self.blocks = blocks
        self.dtype = np.result_type(*blocks)
        self.shape = (blocks[0].shape[0], sum(b.shape[1] for b in blocks))

    def __array__(self, dtype: np.dtype | None = None, copy: bool | None = None) -> np.ndarray:
        out = np.hstack(self.blocks)
        return out if dtype is None else out.astype(dtype, copy=False)

    def copy(self) -> np.ndarray:
        """``np.hstack(blocks)``: a new array."""
        return np.hstack(self.blocks)

    def write_npy(self, f: BinaryIO) -> None:
        """The ``.npy`` bytes of ``np.hstack(blocks)``, row step by row step."""
        np.lib.format.write_array_header_1_0(
            f,
            {
                "descr": np.lib.format.dtype_to_descr(self.dtype),
                "fortran_order": False,
                "shape": self.shape,
            },
        )
        for start in range(0, self.shape[0], WRITE_STEP_ROWS):
            stop = start + WRITE_STEP_ROWS
            step = np.hstack([b[start:stop].astype(self.dtype, copy=False) for b in self.blocks])
            f.write(step.tobytes())
            for b in self.blocks:  # file-backed blocks: the written rows leave the process
                release_rows(b, slice(start, stop))


class CheckpointMismatchError(PipelineError, ValueError):
    """A checkpoint directory belongs to a different problem (or is corrupt)."""


def checkpoint_gap(least_seconds: float, write_seconds: float, max_share: float) -> float:
    """Seconds to wait after a checkpoint that took ``write_seconds`` before the next one:
    ``least_seconds``, or longer so that writing takes at most ``max_share`` of the wall
    time (``write_seconds * (1 - max_share) / max_share``). ``least_seconds == 0`` means
    every time, so no bound applies then.

    Why: a checkpoint writes the whole Lanczos basis and images (K x basis and p x basis),
    and how long that takes depends on the storage, not the solve; a fixed interval that
    suits a local disk would spend most of a fit writing to an object store.
    """
    if least_seconds <= 0:
        return 0.0
    return max(float(least_seconds), float(write_seconds) * (1.0 - max_share) / max_share)


class CheckpointCadence:
    """When a solver's next checkpoint is due: ``least_seconds`` after the last one ended
    (0: every time it asks), or later so that writing takes at most ``max_share`` of the wall
    time (:func:`checkpoint_gap`; 1: no such bound). ``start`` is the clock reading the first
    wait counts from (default now; ``-inf``: the first ask is due)."""

    def __init__(
        self, least_seconds: float, max_share: float = 1.0, *, start: float | None = None
    ) -> None:
        self.least_seconds, self.max_share = float(least_seconds), float(max_share)
        self.last_end = time.perf_counter() if start is None else float(start)
        self.gap = self.least_seconds
        self.last_write = 0.0

    def due(self) -> bool:
        """Whether a checkpoint asked for now should be written."""
        return time.perf_counter() - self.last_end >= self.gap

    def written(self, started: float) -> None:
        """Record a checkpoint written from clock reading ``started`` until now."""
        self.last_end = time.perf_counter()
        self.last_write = self.last_end - started
        self.gap = checkpoint_gap(self.least_seconds, self.last_write, self.max_share)


def fingerprint_hash(fingerprint: dict) -> str:
    """SHA-256 of the canonical JSON of ``fingerprint``."""
    text = json.dumps(fingerprint, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def array_digest(*arrays: np.ndarray) -> str:
    """SHA-256 of the bytes of ``arrays`` (for data identity in fingerprints)."""
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(str((a.dtype.str, a.shape)).encode())
        h.update(a.tobytes())
    return h.hexdigest()


@runtime_checkable
class CheckpointStore(Protocol):
    """Where a solver keeps its resumable states: named sets of arrays with JSON-able
    metadata, for one problem. :class:`pipeline.io.checkpoints.CheckpointDirectory` is the
    file-backed one; any object with these methods will do (the tests use one in memory).
    """

    #: where the states are, for messages (a path or URI)
    directory: Any

    def bind(self, fingerprint: dict) -> CheckpointStore:
        """This store bound to the problem ``fingerprint`` (a JSON-able dict); raises
        :class:`CheckpointMismatchError` when the store holds states of another problem."""
        ...

    def save(self, name: str, arrays: dict[str, Any], meta: dict) -> None:
        """Replace state ``name`` by ``arrays`` (ndarrays or :class:`ColumnBlocks`) and
        ``meta``, atomically: a crash leaves the previous state loadable."""
        ...

    def load(self, name: str) -> tuple[dict[str, np.ndarray], dict] | None:
        """The latest state ``name`` as ``(arrays, meta)``, None when there is none;
        :class:`CheckpointMismatchError` when it is another problem's or damaged."""
        ...

    def names(self) -> list[str]:
        """The names of the states saved, sorted."""
        ...

    def delete(self, name: str) -> None:
        """Remove state ``name`` (nothing when there is none)."""
        ...
