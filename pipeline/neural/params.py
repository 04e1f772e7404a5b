"""The neural methods' parameters, declared once (:func:`~pipeline.params.param`).

XCNN, T-LASER and cT-LASER (``train.method`` xcnn, tlaser, ctlaser; docs/neural.md) share the
training loop's settings (:class:`NeuralLoopParams`: epochs, batch, learning rate, processes)
and add their model sizes: :class:`XcnnParams`, :class:`TlaserParams` and
:class:`CtlaserParams` (T-LASER's sizes and its distance constraint). The configuration nests
each under its method's name (``train.xcnn.epochs``, ``train.tlaser.dim``,
``train.ctlaser.beta``; built from the method registry's ``params``). The defaults fit a
2-core machine; the papers' sizes are in docs/neural.md. A field's ``legacy`` metadata names
its flat key before the sections were nested (``train.neural_epochs``), which the loader maps
with a warning for one release.

This module imports nothing but :mod:`pipeline.params` and the standard library: the
configuration, which the Airflow DAG imports without PyTorch, embeds it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pipeline.params import legacy, param

__all__ = [
    "CTLASER_DEFAULTS",
    "TLASER_DEFAULTS",
    "XCNN_DEFAULTS",
    "CtlaserParams",
    "EpochValidationParams",
    "NeuralLoopParams",
    "TlaserParams",
    "XcnnParams",
]


def _weight_decay(default: float) -> Any:
    """The declaration of the loop's weight decay with a method's own default."""
    return param(
        default,
        lo=0.0,
        doc="Decoupled weight decay (AdamW): every step shrinks every weight by lr times this, "
        "a ridge-like pull towards zero against memorising the training pairs (XCNN's "
        "default 1, with center, is what made it generalise: bench/README.md); 0: Adam.",
    )


@dataclass(frozen=True)
class EpochValidationParams:
    """How a method that chooses its epoch on the validation concepts scores an epoch (the
    neural methods, S2Net)."""

    validation_distractors: int = param(
        2000,
        lo=0,
        doc="Training documents per language (a seeded sample) added to the candidates of "
        "the per-epoch validation P@1, so the epoch is chosen ranking among training "
        "documents as the evaluation does (its pool holds every document up to "
        "evaluate.max_candidates); 0: among the validation documents only, where a model "
        "that memorises its training pairs looks far better than the evaluation finds it.",
        extra=legacy("neural_validation_distractors"),
    )


@dataclass(frozen=True)
class NeuralLoopParams(EpochValidationParams):
    """The training loop the neural methods share (:mod:`pipeline.neural.loop`)."""

    epochs: int = param(
        10,
        lo=1,
        doc="Training epochs (one pass over the parallel pairs each); the model kept is the "
        "epoch with the best validation P@1 (features.heldout_concepts set), else the last.",
        extra=legacy("neural_epochs"),
    )
    batch_size: int = param(
        64,
        lo=2,
        doc="Parallel pairs per optimisation step, over all processes (split evenly among "
        "them; a trailing partial batch of an epoch is dropped).",
        extra=legacy("neural_batch_size"),
    )
    lr: float = param(
        1e-3, lo=0.0, lo_open=True, doc="Adam learning rate.", extra=legacy("neural_lr")
    )
    weight_decay: float = _weight_decay(0.0)
    processes: int = param(
        2,
        lo=1,
        doc="Training processes launched by pyspark's TorchDistributor (local mode: on the "
        "driver machine; one gradient all-reduce per step); 1: train in the driver process.",
        extra=legacy("neural_processes"),
    )
    threads: int = param(
        1,
        lo=1,
        doc="PyTorch CPU threads per training process and per embedding worker.",
        extra=legacy("neural_threads"),
    )
    device: Literal["auto", "cpu", "cuda"] = param(
        "auto",
        doc="Where the training loop runs: cuda (a GPU; with processes > 1, one per process "
        "through TorchDistributor's use_gpu), cpu, or auto (cuda when PyTorch sees a GPU, "
        "else cpu). The trained weights are the same format either way; embedding runs on "
        "the CPU.",
    )
    progress_seconds: float = param(
        60.0,
        lo=0.0,
        doc="Within an epoch, the first training process logs one line this often: the step, "
        "the epoch's mean loss so far, steps per second and the epoch's ETA (an epoch on a "
        "large parallel corpus runs for many minutes between its epoch lines). 0: off.",
    )


@dataclass(frozen=True)
class XcnnParams(NeuralLoopParams):
    """XCNN; the keys ``train.xcnn.*``."""

    dim: int = param(
        128, lo=1, doc="Embedding dimension (the paper's 128).", extra=legacy("xcnn_dim")
    )
    scale: float = param(
        5.0,
        lo=0.0,
        lo_open=True,
        doc="Noise-contrastive loss: the cosine similarities are multiplied by this before "
        "the logistic loss (softplus(-s·cos⁺) + softplus(s·cos⁻)).",
        extra=legacy("xcnn_scale"),
    )
    term_dropout: float = param(
        0.0,
        lo=0.0,
        hi=1.0,
        hi_open=True,
        doc="Fraction of each training document's terms dropped at random in every step "
        "(the rest scaled by 1/(1 - fraction)), so a pair cannot be matched on the few rare "
        "terms only it contains; 0: none.",
    )
    weight_decay: float = _weight_decay(1.0)  # with center, what made XCNN generalise
    center: bool = param(
        True,
        doc="Subtract each language's mean training embedding from its embeddings (stored "
        "in the model, languages/<lang>/offset.npy, and applied wherever it embeds; the "
        "epoch is chosen on centred embeddings too): XCNN's embeddings of one language "
        "share a common vector that cosine otherwise ranks on.",
    )


@dataclass(frozen=True)
class TlaserParams(NeuralLoopParams):
    """T-LASER; the keys ``train.tlaser.*`` (and cT-LASER's, :class:`CtlaserParams`)."""

    dim: int = param(
        128, lo=8, doc="Model width d_model (= embedding dimension).", extra=legacy("tlaser_dim")
    )
    heads: int = param(4, lo=1, doc="Attention heads (divides dim).", extra=legacy("tlaser_heads"))
    layers: int = param(
        2, lo=1, doc="Encoder layers (the decoder has one).", extra=legacy("tlaser_layers")
    )
    ff: int = param(256, lo=1, doc="Feed-forward width.", extra=legacy("tlaser_ff"))
    vocab_size: int = param(
        4000,
        lo=16,
        doc="Shared sentencepiece (BPE) vocabulary size over all languages.",
        extra=legacy("tlaser_vocab_size"),
    )
    max_tokens: int = param(
        64,
        lo=4,
        doc="Subword tokens kept per document (after the start tag).",
        extra=legacy("tlaser_max_tokens"),
    )
    parallel_corpus: str | None = param(
        None,
        doc="A documents dataset (columns doc_id, concept_id, lang, title, text; e.g. the "
        "segment-level corpus scripts/build_parallel_corpus.py makes from Debian's "
        "translations) whose documents in the training languages add parallel pairs (the "
        "same concept_id in two languages) to the training rows' pairs, as the paper trains "
        "on Europarl; its texts also train the subword vocabulary. Read from any store.",
    )
    parallel_only: bool = param(
        False,
        doc="Train on the parallel_corpus's pairs alone: the training rows' documents stay "
        "as unrelated documents (cT-LASER's negatives) and validation distractors, but form "
        "no pairs (the paper's setting: a sentence-level corpus, document-level tasks).",
    )
    parallel_max_concepts: int = param(
        0,
        lo=0,
        doc="Keep a seeded sample of this many of the parallel_corpus's concepts (0: all), "
        "to bound an epoch's time.",
    )


@dataclass(frozen=True)
class CtlaserParams(TlaserParams):
    """cT-LASER: T-LASER with a distance constraint; the keys ``train.ctlaser.*``."""

    beta: float = param(
        0.5,
        lo=0.0,
        doc="Weight of the distance-constraint loss against the translation loss (the paper "
        "chooses from 0.25, 0.5, 1).",
        extra=legacy("ctlaser_beta"),
    )
    margin: float = param(
        1.0,
        lo=0.0,
        doc="Margin of the distance constraint's unrelated-sentence term (in units of the "
        "batch's mean vector norm).",
        extra=legacy("ctlaser_margin"),
    )
    center: bool = param(
        False,
        doc="Measure the batch's mean vector norm on the vectors less their batch mean (true) "
        "instead of the paper's uncentred norm (false), which the network can inflate by "
        "adding one vector to every embedding (docs/neural.md).",
        extra=legacy("ctlaser_center"),
    )
    warmup_epochs: int = param(
        0,
        lo=0,
        doc="Epochs over which the constraint's weight rises linearly from 0 to beta (epoch e, "
        "counted from 0, trains with beta·min(1, e/warmup_epochs)), so the encoder learns "
        "to translate before the constraint pulls translations together; 0: beta from the "
        "first step (the paper's).",
    )


#: The declared defaults.
XCNN_DEFAULTS = XcnnParams()
TLASER_DEFAULTS = TlaserParams()
CTLASER_DEFAULTS = CtlaserParams()
