"""What the neural methods' fits (XCNN, T-LASER, cT-LASER) share: the training loop, run in
the driver process or in processes that pyspark's ``TorchDistributor`` starts, and its result
as a :class:`~pipeline.methods.fitted.FittedModel`.

A method's :class:`~pipeline.neural.loop.Task` (built by its own fit from the loaded training
rows) is trained by :func:`~pipeline.neural.loop.run_loop`, either in the driver process
(``train.<method>.processes: 1``) or in that many processes (local mode:
``torchrun`` on the driver machine, gloo all-reduce; the task, training rows included, is
pickled to them).
"""

from __future__ import annotations

import hashlib
import logging
import os
from typing import Any

import numpy as np

from pipeline.config import TrainConfig
from pipeline.errors import ConfigError
from pipeline.io.storage import is_local, scratch_root
from pipeline.methods.fitted import FittedModel
from pipeline.neural.loop import (
    LoopSettings,
    distributed_entry,
    import_torch,
    resolve_device,
    run_loop,
)
from pipeline.neural.params import NeuralLoopParams

__all__ = ["fit_task", "loop_settings", "train_task"]

log = logging.getLogger(__name__)


def _loop_checkpoint(checkpoint: str | None) -> str | None:
    """Where the loop's processes keep their per-epoch checkpoints: ``checkpoint`` on a local
    disk; for another store, a directory of the driver's scratch space named after it (the
    TorchDistributor processes have no Spark session to reach a Hadoop-only store, and
    ``torch.save`` writes local files), with a warning that it does not outlive the machine."""
    if checkpoint is None or is_local(checkpoint):
        return checkpoint
    name = hashlib.sha256(checkpoint.encode()).hexdigest()[:16]
    local = os.path.join(scratch_root(), "cr5-neural-checkpoints", name)
    log.warning(
        "neural: checkpoints of %s are kept on the driver's disk, %s (the training processes "
        "cannot reach that store); a rerun on this machine resumes from them",
        checkpoint,
        local,
    )
    return local


def loop_settings(t: TrainConfig, p: NeuralLoopParams, checkpoint: str | None) -> LoopSettings:
    """The loop's settings: the method's section ``p`` (``train.<method>``) and the train
    section's seed."""
    return LoopSettings(
        epochs=p.epochs,
        batch_size=p.batch_size,
        lr=p.lr,
        weight_decay=p.weight_decay,
        seed=t.seed,
        checkpoint_dir=checkpoint,
        threads=p.threads,
        device=p.device,
        progress_seconds=p.progress_seconds,
    )


def train_task(task: Any, settings: LoopSettings, processes: int) -> dict[str, Any]:
    """Run the loop in this process (``processes == 1``) or through TorchDistributor (one
    GPU per process when the loop's device resolves to cuda)."""
    if processes == 1:
        return run_loop(task, settings)
    from pyspark.ml.torch.distributor import TorchDistributor

    use_gpu = resolve_device(import_torch(), settings.device).type == "cuda"
    log.info(
        "neural: training in %d TorchDistributor processes (local mode%s)",
        processes,
        ", one GPU each" if use_gpu else "",
    )
    distributor = TorchDistributor(num_processes=processes, local_mode=True, use_gpu=use_gpu)
    return distributor.run(distributed_entry, task, settings)


def fit_task(
    t: TrainConfig,
    p: NeuralLoopParams,
    data: Any,
    checkpoint: str | None,
    task: Any,
    *,
    shared: dict[str, np.ndarray] | None = None,
    history: dict[str, Any] | None = None,
) -> FittedModel:
    """Train ``task`` with the loop settings ``p`` (the method's section), checkpointed under
    ``checkpoint``; a FittedModel whose components are the loop's weights, ``shared`` its
    model-wide arrays, and whose history is the per-epoch record with ``history`` (the
    method's own entries) added before the selection rule."""
    if task.n_items == 0:
        raise ConfigError(
            f"{t.method} trains on parallel pairs, but no concept has documents in two of the "
            f"training languages {list(data.backend.languages)}"
        )
    result = train_task(task, loop_settings(t, p, _loop_checkpoint(checkpoint)), p.processes)
    record = {
        "epochs": result["history"],
        "chosen_epoch": result["chosen_epoch"],
        "resumed_after": result["resumed_after"],
        "processes": result["world_size"],
        "peak_rss_mb_per_process": result["peak_rss_mb"],
        "pairs": task.n_items,
        **(history or {}),
        "selection": "validation P@1" if task.validation is not None else "last epoch",
    }
    return FittedModel(
        components=result["weights"],
        means={},
        eigenvalues=np.zeros(0),
        history=record,
        n_iter=len(result["history"]),
        shared=shared or {},
    )
