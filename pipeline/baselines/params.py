"""The baselines' own parameters, declared once (:func:`~pipeline.params.param`).

The baselines share the solver parameters of :class:`pipeline.linalg.params.Cr5Params`
(r, tolerances, seed, checkpoint cadence, ...) and add their own, declared here:

* :class:`BaselineParams`: the regularisation γ of CCA and OPCA, and how the concept-grouped
  corpus of JPLSA, CPLSA and S2Net is partitioned;
* :class:`PlsaParams`: the topic models JPLSA and CPLSA (``train.plsa_*``);
* :class:`S2NetParams`: S2Net (``train.s2net_*``).

The configuration's ``train`` section embeds all three
(:class:`pipeline.config.TrainConfig` subclasses them), so ``train.gamma`` *is*
:attr:`BaselineParams.gamma`.

This module imports nothing but :mod:`pipeline.params` and the standard library: the
configuration, which the Airflow DAG imports without numpy, embeds it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pipeline.params import param

__all__ = [
    "BASELINE_DEFAULTS",
    "PLSA_DEFAULTS",
    "S2NET_DEFAULTS",
    "BaselineParams",
    "PlsaParams",
    "S2NetParams",
]


@dataclass(frozen=True)
class BaselineParams:
    """Parameters of the baselines beyond the solver's; the keys ``train.<name>``."""

    gamma: float = param(
        1e-3,
        lo=0.0,
        lo_open=True,
        doc="Regularisation of the CCA and OPCA baselines (per-sample covariances).",
    )
    pair_partitions: int | None = param(
        None,
        lo=1,
        doc="JPLSA, CPLSA, S2Net: blocks of the concept-grouped training corpus (a concept's "
        "documents stay in one block; concept k goes to block k mod this). Each block is one "
        "task of an EM or gradient step. None: one block per 500,000 nonzeros, at least 2. "
        "The local and spark backends cut the same blocks, so they fit the same model.",
    )


@dataclass(frozen=True)
class PlsaParams:
    """JPLSA and CPLSA (Platt, Toutanova and Yih 2010): MAP EM of a topic model of the
    training concepts; the keys ``train.plsa_*``. The number of topics is ``train.r``."""

    plsa_topic_prior: float = param(
        1.1,
        lo=1.0,
        doc="Dirichlet parameter α_θ (>= 1) of every topic distribution: the MAP M-step adds "
        "α_θ - 1 to each topic's expected count (also in folding-in).",
    )
    plsa_word_prior: float = param(
        1.01,
        lo=1.0,
        doc="Dirichlet parameter α_β (>= 1) of every topic's word distribution: the M-step "
        "adds α_β - 1 to each word's expected count.",
    )
    plsa_init_mix: float = param(
        0.5,
        lo=0.0,
        hi=1.0,
        hi_open=True,
        doc="Deterministic start: each language's words, sorted by training frequency, are "
        "dealt to the topics in turn; topic t starts as (1 - mix) x uniform over the words "
        "dealt to it + mix x uniform over all words.",
    )
    plsa_maxiter: int = param(50, lo=1, doc="EM iteration cap.")
    plsa_tol: float = param(
        1e-4,
        lo=0.0,
        doc="EM stops when the log posterior rose by less than this fraction of its "
        "magnitude in one iteration; 0: only the cap (or the validation rule) stops it.",
    )
    plsa_stop_rule: Literal["likelihood", "validation"] = param(
        "likelihood",
        doc="likelihood: plsa_tol or plsa_maxiter end EM and the last iteration is the "
        "model; validation: also stop when P@1 (L1 on folded-in topic vectors) of "
        "train.validation_concepts held-out concepts has not improved for plsa_patience "
        "iterations, and keep the best iteration (needs features.heldout_concepts: splits).",
    )
    plsa_patience: int = param(
        3, lo=1, doc="plsa_stop_rule=validation: EM iterations without improvement."
    )
    plsa_pr_epsilon: float = param(
        0.01,
        lo=0.0,
        doc="CPLSA: the posterior of a concept's documents is projected onto the set where "
        "every document's expected fraction of tokens in each topic is within this of the "
        "first document's (posterior regularisation).",
    )
    plsa_pr_maxiter: int = param(
        20,
        lo=1,
        doc="CPLSA: projected-gradient steps of the KL projection per EM iteration (the "
        "dual variables are kept between iterations, so later iterations need few).",
    )
    plsa_pr_tol: float = param(
        1e-3,
        lo=0.0,
        doc="CPLSA: a concept's projection stops when no constraint is violated by more "
        "than this (in topic fractions).",
    )
    plsa_fold_in_steps: int = param(
        1,
        lo=1,
        doc="EM steps of folding-in (embedding a single document: its topic distribution "
        "with the topic-word distributions fixed), from the uniform distribution.",
    )


@dataclass(frozen=True)
class S2NetParams:
    """S2Net (Yih et al. 2011): a siamese linear projection of TF-IDF vectors trained from
    OPCA's (with ``train.gamma``); the keys ``train.s2net_*``. The dimension is ``train.r``."""

    s2net_learning_rates: list[float] = param(
        default_factory=lambda: [10.0, 100.0],
        lo=0.0,
        lo_open=True,
        doc="Learning rates tried, each from OPCA's projection (rescaled so that training "
        "documents project to unit median norm; the step is the rate times the mean gradient "
        "per triple, which is small once most triples are well separated); with "
        "s2net_epochs, the best on validation P@1 (cosine) is kept.",
    )
    s2net_epochs: list[int] = param(
        default_factory=lambda: [0, 1, 3, 10],
        lo=0,
        doc="Epochs compared on validation (one run per learning rate, scored after these "
        "epochs); 0 is OPCA's projection itself. More than one (rate, epochs) candidate "
        "needs features.heldout_concepts: splits.",
    )
    s2net_batch_concepts: int = param(
        512, lo=1, doc="Training concepts per mini-batch (all their document pairs)."
    )
    s2net_gamma: float = param(
        10.0,
        lo=0.0,
        lo_open=True,
        doc="Scale γ of the loss log(1 + exp(-γ Δ)), Δ = cos(related) - cos(unrelated).",
    )
    s2net_negatives: int = param(
        1,
        lo=1,
        doc="Unrelated pairs per related pair: the first document with a document of the "
        "second one's language drawn from another concept of the mini-batch.",
    )


#: The declared defaults, for keyword defaults of the fit functions.
BASELINE_DEFAULTS = BaselineParams()
PLSA_DEFAULTS = PlsaParams()
S2NET_DEFAULTS = S2NetParams()
