"""T-LASER's fit (``train.method=tlaser``): a transformer encoder-decoder trained to translate
between the training languages' documents (:class:`pipeline.neural.tlaser.TLaserTask`) on a
sentencepiece vocabulary learned here; the model is the encoder. cT-LASER
(:mod:`pipeline.methods.ctlaser`) is the same fit with its distance constraint."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from pipeline.config import TrainConfig
from pipeline.errors import ConfigError
from pipeline.methods.fitted import FittedModel
from pipeline.methods.neural import fit_task
from pipeline.neural.params import CtlaserParams, TlaserParams

__all__ = ["fit", "fit_encoder"]

log = logging.getLogger(__name__)


def _encoder_task(t: TrainConfig, data: Any, p: TlaserParams) -> tuple[Any, bytes]:
    """The T-LASER / cT-LASER task and its sentencepiece model (learned here on the training
    documents of every language); ``p`` the method's section (cT-LASER's adds the distance
    constraint, T-LASER's has none: β = 0)."""
    import pyarrow.compute as pc

    from pipeline.neural.tlaser import EncoderSizes, SubwordVocabulary, TLaserTask

    if data.texts is None:
        raise ConfigError(f"train.method={t.method}: the training texts were not loaded")
    langs = list(data.backend.languages)
    train = data.texts["training"]
    texts = {lang: train[lang].column("text").to_pylist() for lang in langs}
    vocab = SubwordVocabulary.train([x for lang in langs for x in texts[lang]], langs, p.vocab_size)
    log.info(
        "neural: %d subword pieces learned on %d documents",
        len(vocab),
        sum(len(v) for v in texts.values()),
    )
    sizes = EncoderSizes(
        vocab=len(vocab),
        dim=p.dim,
        heads=p.heads,
        layers=p.layers,
        ff=p.ff,
        max_tokens=p.max_tokens,
    )
    constraint: dict[str, Any] = {}  # T-LASER: TLaserTask's β = 0
    if isinstance(p, CtlaserParams):
        constraint = {"beta": p.beta, "margin": p.margin, "center": p.center}
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
        **constraint,
        validation=validation or None,
        distractors=p.validation_distractors,
    )
    return task, vocab.proto


def fit_encoder(t: TrainConfig, data: Any, checkpoint: str | None, p: TlaserParams) -> FittedModel:
    """The encoder trained on the raw texts of ``data`` with the method's section ``p``
    (:class:`~pipeline.neural.params.CtlaserParams`: with the distance constraint);
    ``components`` holds the network's weights and ``shared`` the sentencepiece model's
    bytes (as a uint8 array) under ``"subwords.model"``."""
    task, proto = _encoder_task(t, data, p)
    return fit_task(
        t,
        p,
        data,
        checkpoint,
        task,
        shared={"subwords.model": np.frombuffer(proto, dtype=np.uint8)},
        history={"vocabulary_size": task.sizes.vocab},
    )


def fit(t: TrainConfig, data: Any, checkpoint: str | None) -> FittedModel:
    """T-LASER: the translation loss alone (the section ``train.tlaser``)."""
    return fit_encoder(t, data, checkpoint, t.params_of("tlaser"))
