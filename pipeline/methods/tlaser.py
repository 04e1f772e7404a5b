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
    concepts = {lang: train[lang].column("concept_index").to_numpy() for lang in langs}
    pool = [len(texts[lang]) for lang in langs]
    if p.parallel_only and not p.parallel_corpus:
        raise ConfigError(
            f"train.{t.method}.parallel_only is set but train.{t.method}.parallel_corpus is "
            "not: name the parallel corpus to train on"
        )
    if p.parallel_only:
        concepts = {
            lang: _unpaired(len(texts[lang]), i, len(langs)) for i, lang in enumerate(langs)
        }
    if p.parallel_corpus:
        extra = parallel_corpus(data, p, langs, t.seed)
        offset = 1 + max((int(c.max()) for c in concepts.values() if c.size), default=-1)
        for lang in langs:
            texts[lang] = texts[lang] + extra[lang][0]
            concepts[lang] = np.concatenate([concepts[lang], extra[lang][1] + offset])
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
        constraint = {
            "beta": p.beta,
            "margin": p.margin,
            "center": p.center,
            "warmup_epochs": p.warmup_epochs,
        }
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
        concepts=[concepts[lang] for lang in langs],
        tags=[vocab.tag(lang) for lang in langs],
        sizes=sizes,
        **constraint,
        validation=validation or None,
        distractors=p.validation_distractors,
        distractor_pool=pool,
    )
    return task, vocab.proto


def _unpaired(n: int, lang: int, n_langs: int) -> np.ndarray:
    """Concept indices no other document has (negative, distinct across the ``n_langs``
    languages): the documents stay in the task but form no parallel pairs."""
    return -1 - (lang + np.arange(n, dtype=np.int64) * n_langs)


def parallel_corpus(
    data: Any, p: TlaserParams, langs: list[str], seed: int
) -> dict[str, tuple[list[str], np.ndarray]]:
    """The documents of ``p.parallel_corpus`` in ``langs``: per language the texts and their
    concept indices (0-based, over the corpus's concepts that have two or more of the
    languages, a seeded sample of ``p.parallel_max_concepts`` of them when set); one
    document per concept and language (the first by doc_id)."""
    from pyspark.sql import functions as F

    from pipeline.io.datasets import conform, read_table
    from pipeline.io.schemas import DOCUMENTS
    from pipeline.neural.parallel import parallel_documents

    if data.rows is None:
        raise ConfigError(
            "train.<method>.parallel_corpus is read with the train stage's Spark session; "
            "these rows were not read from a dataset"
        )
    df = conform(read_table(data.rows.spark, p.parallel_corpus), DOCUMENTS)
    table = df.where(F.col("lang").isin(langs)).select("concept_id", "lang", "doc_id", "text")
    out = parallel_documents(table.toArrow(), langs, p.parallel_max_concepts, seed)
    n_concepts = np.unique(np.concatenate([out[lang][1] for lang in langs])).size
    if n_concepts == 0:
        raise ConfigError(
            f"the parallel corpus {p.parallel_corpus} has no concept with documents in two of "
            f"the training languages {langs}"
        )
    log.info(
        "neural: %d parallel concepts from %s (%s documents)",
        n_concepts,
        p.parallel_corpus,
        ", ".join(f"{lang} {len(out[lang][0])}" for lang in langs),
    )
    return out


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
