"""The checkpoint store a fit writes to, from the directory the training service chose."""

from __future__ import annotations

from pipeline.io.storage import remote_storage
from pipeline.linalg.checkpoint import CheckpointStore

__all__ = ["checkpoint_store"]


def checkpoint_store(directory: str | None) -> CheckpointStore | None:
    """A :class:`~pipeline.linalg.checkpoint.CheckpointStore` over ``directory`` on whatever
    store holds it (:func:`~pipeline.io.storage.remote_storage`), or None without one."""
    return CheckpointStore(directory, files=remote_storage(directory)) if directory else None
