"""Fitting the neural methods (``train.method`` xcnn, tlaser, ctlaser) for the training service.

The method's :class:`~pipeline.neural.loop.Task` is built from the loaded training rows and
trained by :func:`~pipeline.neural.loop.run_loop`, either in the driver process
(``train.neural_processes: 1``) or in ``train.neural_processes`` processes that pyspark's
``TorchDistributor`` starts (local mode: ``torchrun`` on the driver machine, gloo all-reduce;
the task, training rows included, is pickled to them). The result is a
:class:`~pipeline.training.fit.FittedModel` whose components are the per-language maps
(XCNN: H_l = tanh(W_l + b_l)).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from pipeline.config import TrainConfig
from pipeline.errors import ConfigError
from pipeline.neural.loop import LoopSettings, distributed_entry, run_loop
from pipeline.neural.params import NEURAL_METHODS

__all__ = ["NEURAL_METHODS", "fit_neural", "loop_settings", "train_task"]

log = logging.getLogger(__name__)


def loop_settings(t: TrainConfig, checkpoint: str | None) -> LoopSettings:
    """The loop's settings from the train section."""
    return LoopSettings(
        epochs=t.neural_epochs,
        batch_size=t.neural_batch_size,
        lr=t.neural_lr,
        seed=t.seed,
        checkpoint_dir=checkpoint,
        threads=t.neural_threads,
    )


def train_task(task: Any, settings: LoopSettings, processes: int) -> dict[str, Any]:
    """Run the loop in this process (``processes == 1``) or through TorchDistributor."""
    if processes == 1:
        return run_loop(task, settings)
    from pyspark.ml.torch.distributor import TorchDistributor

    log.info("neural: training in %d TorchDistributor processes (local mode)", processes)
    distributor = TorchDistributor(num_processes=processes, local_mode=True, use_gpu=False)
    return distributor.run(distributed_entry, task, settings)


def _xcnn_task(t: TrainConfig, data: Any) -> Any:
    from pipeline.neural.xcnn import XcnnTask

    backend = data.backend
    if not hasattr(backend, "matrix"):
        raise ConfigError(
            f"train.method={t.method} trains on the TF-IDF rows in the driver; set "
            "train.backend=local"
        )
    langs = list(backend.languages)
    return XcnnTask(
        langs=langs,
        rows=[backend.matrix(lang).tocsr() for lang in langs],
        concepts=[np.asarray(backend.concept_index(lang)) for lang in langs],
        dim=t.xcnn_dim,
        scale=t.xcnn_scale,
        validation=data.validation,
    )


def fit_neural(t: TrainConfig, data: Any, checkpoint: str | None) -> Any:
    """Fit ``t.method`` on ``data``; a FittedModel (history: the per-epoch record)."""
    from pipeline.training.fit import FittedModel

    if t.method != "xcnn":
        raise ConfigError(f"train.method={t.method} is not implemented here")
    task = _xcnn_task(t, data)
    if task.n_items == 0:
        raise ConfigError(
            "XCNN trains on parallel pairs, but no concept has documents in two of the "
            f"training languages {list(data.backend.languages)}"
        )
    result = train_task(task, loop_settings(t, checkpoint), t.neural_processes)
    history = {
        "epochs": result["history"],
        "chosen_epoch": result["chosen_epoch"],
        "resumed_after": result["resumed_after"],
        "processes": result["world_size"],
        "pairs": task.n_items,
        "selection": "validation P@1" if data.validation is not None else "last epoch",
    }
    return FittedModel(
        components=result["weights"],
        means={},
        eigenvalues=np.zeros(0),
        history=history,
        n_iter=len(result["history"]),
    )
