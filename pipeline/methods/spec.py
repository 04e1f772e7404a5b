"""What a method is: :class:`MethodSpec`, one per value of ``train.method``.

Every part of the pipeline that treats methods differently (which have a rank, which
checkpoint, what the evaluation tunes, how the memory plan counts the driver, which need the
local evaluation engine, ...) reads it from the method's spec instead of keeping its own list
of names. The specs themselves are the entries of :mod:`pipeline.methods.registry`.

This module imports nothing but the standard library: the configuration, which the Airflow
DAG imports without numpy, checks ``train.method`` against the registry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["DriverMemory", "Family", "MethodSpec", "ModelKind", "Similarity", "TunedBy"]

#: How a method meets its training rows: ``corpus-level`` methods fit on the corpus backend's
#: products over all rows (Cr5, the eigenproblem baselines, untranslated); ``concept-grouped``
#: ones on the rows grouped by concept, a concept's documents side by side
#: (:mod:`pipeline.linalg.groups`); ``neural`` ones train a network on parallel pairs with
#: PyTorch (:mod:`pipeline.neural`).
Family = Literal["corpus-level", "concept-grouped", "neural"]

#: What the model directory holds: ``dense`` per-language maps (a TF-IDF row embeds as
#: ``x @ Φ_l``), ``sparse`` selection maps (untranslated), ``topics`` topic-word matrices
#: that embed by folding-in, or an ``encoder`` network (T-LASER).
ModelKind = Literal["dense", "sparse", "topics", "encoder"]

#: The method's own similarity of two embeddings, scored beside ``evaluate.measures``.
Similarity = Literal["cosine", "l1"]

#: The parameter the evaluation chooses on the validation concepts: ``lam`` from
#: ``evaluate.lambda_grid``, ``gamma`` from ``evaluate.gamma_grid``, or None.
TunedBy = Literal["lam", "gamma"] | None


@dataclass(frozen=True)
class DriverMemory:
    """How the memory plan (:mod:`pipeline.memory`) counts a method's peak in the driver's
    Python, before any Spark work: the formula it names, which
    :func:`pipeline.methods.driver_memory.driver_need` evaluates on the fit's sizes.

    Attributes
    ----------
    formula : {"solver", "state", "base"}
        ``solver``: Cr5's eigensolver plan (basis, images, solves, the local backend's X, and
        the Spark backend's fused languages in the Python workers); ``state``: the Python
        base, a state of ``pr_arrays`` float64 arrays of p x r, and the local backend's X;
        ``base``: the Python base only (untranslated's selection maps are small, the neural
        methods train in processes of their own).
    pr_arrays : float
        ``state``: the count of p x r float64 arrays, from the driver peak measured at one
        size (bench/results/classic_costs_100k.json, docs/performance.md "Memory").
    """

    formula: Literal["solver", "state", "base"]
    pr_arrays: float = 0.0

    def __post_init__(self) -> None:
        if (self.formula == "state") != (self.pr_arrays > 0):
            raise ValueError("DriverMemory: pr_arrays > 0 exactly for the state formula")


@dataclass(frozen=True)
class MethodSpec:
    """One method: its name, how it fits, and every property the pipeline asks of it.

    Attributes
    ----------
    name : str
        The value of ``train.method`` and of ``evaluate.methods``, and the model's
        ``model.json`` ``method``.
    family : Family
        How it meets its training rows (:data:`Family`).
    fit : str or callable
        ``fit(t, data, checkpoint) -> FittedModel``: ``t`` the train section
        (:class:`~pipeline.config.TrainConfig`), ``data`` the loaded training rows
        (:class:`~pipeline.training.rows.TrainingData`), ``checkpoint`` the directory its
        checkpoints go to (None unless ``checkpoints``); the result is a
        :class:`~pipeline.methods.fitted.FittedModel`. The built-in methods name it as
        ``"module:function"``, imported when a model is trained (:mod:`pipeline.training.fit`),
        so that the registry loads without the fits' numpy, scipy and PyTorch; a method
        registered at run time may give the function itself.
    model_kind : ModelKind
        What the model directory holds (:data:`ModelKind`).
    params : type or None
        The parameter class declaring the method's own keys (:mod:`pipeline.params`), the
        nested section ``train.<name>.<key>`` of the configuration; None if it has none
        (the eigensolver's and the backend's keys, which Cr5 and the corpus-level baselines
        share, stay flat ``train`` keys).
    rank_bound : callable or None
        ``rank_bound(K, p)``: the largest ``train.r`` a corpus of K training concepts and p
        terms allows, checked before the fit; None when ``train.r`` does not set its
        dimension (untranslated's is its vocabulary, a neural method's its own size key).
    checkpoints : bool
        Whether its fit checkpoints and resumes under the training service's checkpoint
        directory (``train.checkpoint_dir``).
    tuned_by : TunedBy
        The parameter the evaluation chooses for it on the validation concepts.
    similarity : Similarity
        Its own similarity, recorded in ``model.json`` and scored by the evaluation.
    driver_memory : DriverMemory
        How the memory plan counts its driver (:class:`DriverMemory`).
    texts : bool
        It trains on the documents' raw texts, which the training service then loads beside
        the TF-IDF rows (the encoder methods).
    epoch_validation : bool
        It chooses its epoch on the validation concepts' TF-IDF rows, which the training
        service loads with the training rows when the split stage's concepts are held out.
    iteration_validation : bool
        Its eigensolver scores the validation concepts' TF-IDF rows at every iteration under
        ``train.stop_rule: validation`` (Cr5), which the training service then loads with the
        training rows.
    phi_star : bool
        Its model keeps Λ and Q of Φ*Φ*ᵀ (``FittedModel.shared``), from which its Φ* word
        vectors follow (:meth:`~pipeline.model.cr5_model.Cr5Model.phi_star_transform`; Cr5).
    """

    name: str
    family: Family
    fit: str | Callable[..., Any]
    model_kind: ModelKind = "dense"
    params: type | None = None
    rank_bound: Callable[[int, int], int] | None = None
    checkpoints: bool = False
    tuned_by: TunedBy = None
    similarity: Similarity = "cosine"
    driver_memory: DriverMemory = DriverMemory("base")
    texts: bool = False
    epoch_validation: bool = False
    iteration_validation: bool = False
    phi_star: bool = False

    @property
    def has_rank(self) -> bool:
        """Whether ``train.r`` sets its dimension (and is checked against the corpus)."""
        return self.rank_bound is not None

    @property
    def needs_local_engine(self) -> bool:
        """Whether its vectors need the evaluation's local engine: sparse vectors, or a
        similarity other than cosine, which the Spark engine does not compute."""
        return self.model_kind == "sparse" or self.similarity != "cosine"
