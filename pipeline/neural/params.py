"""The neural methods' parameters, declared once (:func:`~pipeline.params.param`).

XCNN, T-LASER and cT-LASER (``train.method`` xcnn, tlaser, ctlaser; docs/neural.md) share the
training loop's settings (epochs, batch, learning rate, processes) and add their model sizes.
The configuration's ``train`` section embeds :class:`NeuralParams`
(:class:`pipeline.config.TrainConfig` subclasses it), so ``train.neural_epochs`` *is*
:attr:`NeuralParams.neural_epochs`. The defaults fit a 2-core machine; the papers' sizes are
in docs/neural.md.

This module imports nothing but :mod:`pipeline.params` and the standard library: the
configuration, which the Airflow DAG imports without PyTorch, embeds it.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.params import param

__all__ = ["NEURAL_DEFAULTS", "NeuralParams"]


@dataclass(frozen=True)
class NeuralParams:
    """Parameters of the neural methods; the keys ``train.<name>``."""

    neural_epochs: int = param(
        10,
        lo=1,
        doc="Training epochs of xcnn/tlaser/ctlaser (one pass over the parallel pairs each); "
        "the model kept is the epoch with the best validation P@1 (features.heldout_concepts "
        "set), else the last.",
    )
    neural_batch_size: int = param(
        64,
        lo=2,
        doc="Parallel pairs per optimisation step, over all processes (split evenly among "
        "them; a trailing partial batch of an epoch is dropped).",
    )
    neural_lr: float = param(1e-3, lo=0.0, lo_open=True, doc="Adam learning rate.")
    neural_processes: int = param(
        2,
        lo=1,
        doc="Training processes launched by pyspark's TorchDistributor (local mode: on the "
        "driver machine; one gradient all-reduce per step); 1: train in the driver process.",
    )
    neural_threads: int = param(
        1, lo=1, doc="PyTorch CPU threads per training process and per embedding worker."
    )
    neural_validation_distractors: int = param(
        2000,
        lo=0,
        doc="Training documents per language (a seeded sample) added to the candidates of "
        "the per-epoch validation P@1 (of the neural methods and S2Net), so the epoch is "
        "chosen ranking among training "
        "documents as the evaluation does (its pool holds every document up to "
        "evaluate.max_candidates); 0: among the validation documents only, where a model "
        "that memorises its training pairs looks far better than the evaluation finds it.",
    )
    xcnn_dim: int = param(128, lo=1, doc="XCNN embedding dimension (the paper's 128).")
    xcnn_scale: float = param(
        5.0,
        lo=0.0,
        lo_open=True,
        doc="XCNN noise-contrastive loss: the cosine similarities are multiplied by this "
        "before the logistic loss (softplus(-s·cos⁺) + softplus(s·cos⁻)).",
    )
    tlaser_dim: int = param(128, lo=8, doc="T-LASER model width d_model (= embedding dimension).")
    tlaser_heads: int = param(4, lo=1, doc="T-LASER attention heads (divides tlaser_dim).")
    tlaser_layers: int = param(2, lo=1, doc="T-LASER encoder layers (the decoder has one).")
    tlaser_ff: int = param(256, lo=1, doc="T-LASER feed-forward width.")
    tlaser_vocab_size: int = param(
        4000, lo=16, doc="Shared sentencepiece (BPE) vocabulary size over all languages."
    )
    tlaser_max_tokens: int = param(
        64, lo=4, doc="Subword tokens kept per document (after the start tag)."
    )
    ctlaser_beta: float = param(
        0.5,
        lo=0.0,
        doc="cT-LASER: weight of the distance-constraint loss against the translation loss "
        "(the paper chooses from 0.25, 0.5, 1).",
    )
    ctlaser_margin: float = param(
        1.0,
        lo=0.0,
        doc="cT-LASER: margin of the distance constraint's unrelated-sentence term (in units "
        "of the batch's mean vector norm).",
    )
    ctlaser_center: bool = param(
        False,
        doc="cT-LASER: measure the batch's mean vector norm on the vectors less their batch "
        "mean (true) instead of the paper's uncentred norm (false), which the network can "
        "inflate by adding one vector to every embedding (docs/neural.md).",
    )


#: The declared defaults.
NEURAL_DEFAULTS = NeuralParams()
