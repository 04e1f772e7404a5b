"""The checkpoint store a fit writes to, from the directory the training service chose."""

from __future__ import annotations

from pipeline.io.checkpoints import CheckpointDirectory
from pipeline.io.storage import remote_storage

__all__ = ["checkpoint_store"]


def checkpoint_store(directory: str | None) -> CheckpointDirectory | None:
    """A :class:`~pipeline.io.checkpoints.CheckpointDirectory` (the solvers'
    :class:`~pipeline.linalg.checkpoint.CheckpointStore`) over ``directory`` on whatever
    store holds it (:func:`~pipeline.io.storage.remote_storage`), or None without one."""
    return CheckpointDirectory(directory, files=remote_storage(directory)) if directory else None
