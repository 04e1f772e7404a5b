"""The baselines' own parameters, declared once (:func:`~pipeline.params.param`).

The baselines share the solver parameters of :class:`pipeline.linalg.params.Cr5Params`
(r, tolerances, seed, checkpoint cadence, ...), which stay flat keys of the ``train``
section, and add their own, declared here in one class per method; the configuration
nests each under the method's name (``train.<method>.<key>``, built from the method
registry's ``params``):

* :class:`GammaParams`: the regularisation γ, in :class:`CcaParams` (``train.cca.*``),
  :class:`OpcaParams` (``train.opca.*``) and :class:`S2NetParams` (OPCA's start);
* :class:`GroupedParams`: how the concept-grouped corpus is partitioned, in every
  concept-grouped method's class;
* :class:`PlsaParams`: the topic model JPLSA (``train.jplsa.*``), with
  :class:`CplsaParams` adding CPLSA's posterior regularisation (``train.cplsa.*``);
* :class:`S2NetParams`: S2Net (``train.s2net.*``).

A field's ``legacy`` metadata names the flat key it had before the sections were nested
(``train.plsa_topic_prior``); the loader maps such a key to the new ones with a warning for
one release (:func:`pipeline.methods.registry.legacy_keys`).

This module imports nothing but the parameter declarations (:mod:`pipeline.params`,
:mod:`pipeline.neural.params`) and the standard library: the configuration, which the
Airflow DAG imports without numpy, embeds it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pipeline.neural.params import EpochValidationParams
from pipeline.params import legacy, param

__all__ = [
    "CCA_DEFAULTS",
    "CPLSA_DEFAULTS",
    "OPCA_DEFAULTS",
    "PLSA_DEFAULTS",
    "S2NET_DEFAULTS",
    "CcaParams",
    "CplsaParams",
    "GammaParams",
    "GroupedParams",
    "OpcaParams",
    "PlsaParams",
    "S2NetParams",
]


def _gamma(default: float) -> Any:
    """The declaration of γ with a method's own default."""
    return param(
        default,
        lo=0.0,
        lo_open=True,
        doc="Regularisation γ of the per-sample covariances (CCA, OPCA; S2Net: of the OPCA "
        "fit it starts from). The evaluation chooses it from evaluate.gamma_grid when that "
        "has two or more values, and so does the train stage (train.tune).",
        extra=legacy("gamma"),
    )


#: OPCA's default γ, also S2Net's start's: the value the evaluation's γ grid chose for OPCA
#: on the DDTP sample and the full DDTP corpus, where CCA's choice was 1e-3 (bench/README.md,
#: "S2Net's start"; docs/evaluation.md).
OPCA_GAMMA = 1e-4


@dataclass(frozen=True)
class GammaParams:
    """The regularisation γ of the generalised eigenproblems (CCA, OPCA)."""

    gamma: float = _gamma(1e-3)


@dataclass(frozen=True)
class GroupedParams:
    """How the concept-grouped training corpus of a method of document pairs is cut."""

    pair_partitions: int | None = param(
        None,
        lo=1,
        doc="Blocks of the concept-grouped training corpus (a concept's documents stay in one "
        "block; concept k goes to block k mod this). Each block is one task of an EM or "
        "gradient step. None: one block per 500,000 nonzeros, at least 2. The local and spark "
        "backends cut the same blocks, so they fit the same model.",
        extra=legacy("pair_partitions"),
    )


@dataclass(frozen=True)
class CcaParams(GammaParams):
    """CCA (generalised eigenproblem of the concept views); the keys ``train.cca.*``."""


@dataclass(frozen=True)
class OpcaParams(GammaParams):
    """OPCA (oriented PCA of the concept-mean differences); the keys ``train.opca.*``."""

    gamma: float = _gamma(OPCA_GAMMA)


@dataclass(frozen=True)
class PlsaParams(GroupedParams):
    """JPLSA (Platt, Toutanova and Yih 2010): MAP EM of a topic model of the training
    concepts; the keys ``train.jplsa.*`` (and CPLSA's, :class:`CplsaParams`). The number of
    topics is ``train.r``."""

    topic_prior: float = param(
        1.1,
        lo=1.0,
        doc="Dirichlet parameter α_θ (>= 1) of every topic distribution: the MAP M-step adds "
        "α_θ - 1 to each topic's expected count (also in folding-in).",
        extra=legacy("plsa_topic_prior"),
    )
    word_prior: float = param(
        1.01,
        lo=1.0,
        doc="Dirichlet parameter α_β (>= 1) of every topic's word distribution: the M-step "
        "adds α_β - 1 to each word's expected count.",
        extra=legacy("plsa_word_prior"),
    )
    init_mix: float = param(
        0.5,
        lo=0.0,
        hi=1.0,
        hi_open=True,
        doc="Deterministic start: each language's words, sorted by training frequency, are "
        "dealt to the topics in turn; topic t starts as (1 - mix) x uniform over the words "
        "dealt to it + mix x uniform over all words.",
        extra=legacy("plsa_init_mix"),
    )
    maxiter: int = param(50, lo=1, doc="EM iteration cap.", extra=legacy("plsa_maxiter"))
    tol: float = param(
        1e-4,
        lo=0.0,
        doc="EM stops when the log posterior rose by less than this fraction of its "
        "magnitude in one iteration; 0: only the cap (or the validation rule) stops it.",
        extra=legacy("plsa_tol"),
    )
    stop_rule: Literal["likelihood", "validation"] = param(
        "likelihood",
        doc="likelihood: tol or maxiter end EM and the last iteration is the model; "
        "validation: also stop when P@1 (L1 on folded-in topic vectors) of "
        "train.validation_concepts held-out concepts has not improved for patience "
        "iterations, and keep the best iteration (needs features.heldout_concepts: splits).",
        extra=legacy("plsa_stop_rule"),
    )
    patience: int = param(
        3,
        lo=1,
        doc="stop_rule=validation: EM iterations without improvement.",
        extra=legacy("plsa_patience"),
    )
    fold_in_steps: int = param(
        1,
        lo=1,
        doc="EM steps of folding-in (embedding a single document: its topic distribution "
        "with the topic-word distributions fixed), from the uniform distribution.",
        extra=legacy("plsa_fold_in_steps"),
    )


@dataclass(frozen=True)
class CplsaParams(PlsaParams):
    """CPLSA: JPLSA's topic model with posterior regularisation; the keys ``train.cplsa.*``."""

    pr_epsilon: float = param(
        0.01,
        lo=0.0,
        doc="The posterior of a concept's documents is projected onto the set where every "
        "document's expected fraction of tokens in each topic is within this of the first "
        "document's (posterior regularisation).",
        extra=legacy("plsa_pr_epsilon"),
    )
    pr_maxiter: int = param(
        20,
        lo=1,
        doc="Projected-gradient steps of the KL projection per EM iteration (the dual "
        "variables are kept between iterations, so later iterations need few).",
        extra=legacy("plsa_pr_maxiter"),
    )
    pr_tol: float = param(
        1e-3,
        lo=0.0,
        doc="A concept's projection stops when no constraint is violated by more than this "
        "(in topic fractions).",
        extra=legacy("plsa_pr_tol"),
    )


@dataclass(frozen=True)
class S2NetParams(GammaParams, GroupedParams, EpochValidationParams):
    """S2Net (Yih et al. 2011): a siamese linear projection of TF-IDF vectors trained from
    OPCA's (fitted with this section's ``gamma``); the keys ``train.s2net.*``. The dimension
    is ``train.r``."""

    gamma: float = _gamma(OPCA_GAMMA)
    learning_rates: list[float] = param(
        default_factory=lambda: [10.0, 100.0],
        lo=0.0,
        lo_open=True,
        doc="Learning rates tried, each from OPCA's projection (rescaled so that training "
        "documents project to unit median norm; the step is the rate times the mean gradient "
        "per triple, which is small once most triples are well separated); with "
        "epochs, the best on validation P@1 (cosine) is kept.",
        extra=legacy("s2net_learning_rates"),
    )
    epochs: list[int] = param(
        default_factory=lambda: [0, 1, 3, 10],
        lo=0,
        doc="Epochs compared on validation (one run per learning rate, scored after these "
        "epochs); 0 is OPCA's projection itself. More than one (rate, epochs) candidate "
        "needs features.heldout_concepts: splits.",
        extra=legacy("s2net_epochs"),
    )
    batch_concepts: int = param(
        512,
        lo=1,
        doc="Training concepts per mini-batch (all their document pairs).",
        extra=legacy("s2net_batch_concepts"),
    )
    scale: float = param(
        10.0,
        lo=0.0,
        lo_open=True,
        doc="Scale γ of the loss log(1 + exp(-γ Δ)), Δ = cos(related) - cos(unrelated).",
        extra=legacy("s2net_gamma"),
    )
    negatives: int = param(
        1,
        lo=1,
        doc="Unrelated pairs per related pair: the first document with a document of the "
        "second one's language drawn from another concept of the mini-batch.",
        extra=legacy("s2net_negatives"),
    )


#: The declared defaults, for keyword defaults of the fit functions.
CCA_DEFAULTS = CcaParams()
OPCA_DEFAULTS = OpcaParams()
PLSA_DEFAULTS = PlsaParams()
CPLSA_DEFAULTS = CplsaParams()
S2NET_DEFAULTS = S2NetParams()
