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

import hashlib
import logging
import os
from typing import Any

import numpy as np

from pipeline.config import TrainConfig
from pipeline.errors import ConfigError
from pipeline.io.storage import is_local, scratch_root
from pipeline.neural.loop import LoopSettings, distributed_entry, run_loop
from pipeline.neural.params import NEURAL_METHODS

__all__ = ["NEURAL_METHODS", "fit_neural", "loop_settings", "train_task"]

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
        distractors=t.neural_validation_distractors,
    )


def _tlaser_task(t: TrainConfig, data: Any) -> tuple[Any, bytes]:
    """The T-LASER / cT-LASER task and its sentencepiece model (learned here on the training
    documents of every language)."""
    import pyarrow.compute as pc

    from pipeline.neural.tlaser import EncoderSizes, SubwordVocabulary, TLaserTask

    if data.texts is None:
        raise ConfigError(f"train.method={t.method}: the training texts were not loaded")
    langs = list(data.backend.languages)
    train = data.texts["training"]
    texts = {lang: train[lang].column("text").to_pylist() for lang in langs}
    vocab = SubwordVocabulary.train(
        [x for lang in langs for x in texts[lang]], langs, t.tlaser_vocab_size
    )
    log.info("neural: %d subword pieces learned on %d documents", len(vocab),
             sum(len(v) for v in texts.values()))  # fmt: skip
    sizes = EncoderSizes(
        vocab=len(vocab),
        dim=t.tlaser_dim,
        heads=t.tlaser_heads,
        layers=t.tlaser_layers,
        ff=t.tlaser_ff,
        max_tokens=t.tlaser_max_tokens,
    )
    validation = None
    val = data.texts["validation"]
    if val is not None and val.num_rows:
        validation = {}
        for lang in langs:
            sub = val.filter(pc.equal(val.column("lang"), lang))
            if sub.num_rows:
                ids = vocab.encode(sub.column("text").to_pylist(), sizes.max_tokens)
                validation[lang] = (ids, np.asarray(sub.column("concept_id").to_pylist()))
    task = TLaserTask(
        langs=langs,
        ids=[vocab.encode(texts[lang], sizes.max_tokens) for lang in langs],
        concepts=[train[lang].column("concept_index").to_numpy() for lang in langs],
        tags=[vocab.tag(lang) for lang in langs],
        sizes=sizes,
        beta=t.ctlaser_beta if t.method == "ctlaser" else 0.0,
        margin=t.ctlaser_margin,
        center=t.ctlaser_center,
        validation=validation or None,
        distractors=t.neural_validation_distractors,
    )
    return task, vocab.proto


def fit_neural(t: TrainConfig, data: Any, checkpoint: str | None) -> Any:
    """Fit ``t.method`` on ``data``; a FittedModel (history: the per-epoch record). For the
    encoder methods, ``components`` holds the network's weights and ``shared`` the
    sentencepiece model's bytes (as a uint8 array) under ``"subwords.model"``."""
    from pipeline.training.fit import FittedModel

    shared: dict[str, Any] = {}
    if t.method == "xcnn":
        task = _xcnn_task(t, data)
    else:
        task, proto = _tlaser_task(t, data)
        shared = {"subwords.model": np.frombuffer(proto, dtype=np.uint8)}
    if task.n_items == 0:
        raise ConfigError(
            f"{t.method} trains on parallel pairs, but no concept has documents in two of the "
            f"training languages {list(data.backend.languages)}"
        )
    result = train_task(task, loop_settings(t, _loop_checkpoint(checkpoint)), t.neural_processes)
    history = {
        "epochs": result["history"],
        "chosen_epoch": result["chosen_epoch"],
        "resumed_after": result["resumed_after"],
        "processes": result["world_size"],
        "peak_rss_mb_per_process": result["peak_rss_mb"],
        "pairs": task.n_items,
        **({"vocabulary_size": task.sizes.vocab} if t.method != "xcnn" else {}),
        "selection": "validation P@1" if task.validation is not None else "last epoch",
    }
    return FittedModel(
        components=result["weights"],
        means={},
        eigenvalues=np.zeros(0),
        history=history,
        n_iter=len(result["history"]),
        shared=shared,
    )
