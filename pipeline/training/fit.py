"""Fitting ``train.method`` on loaded training rows: Cr5 or one of the baselines.

Every method's fit ends in a :class:`FittedModel`, the one shape the model writer
(:mod:`pipeline.training.service`) takes.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipeline.baselines import FIT_FUNCTIONS, GROUPED_METHODS, TOPIC_METHODS
from pipeline.config import TrainConfig
from pipeline.io.storage import remote_storage
from pipeline.linalg.checkpoint import CheckpointStore
from pipeline.linalg.cr5 import Cr5Solver
from pipeline.model.format import GRAM_EIGENVALUES, GRAM_EIGENVECTORS
from pipeline.neural.params import NEURAL_METHODS
from pipeline.training.rows import TrainingData

__all__ = ["FittedModel", "fit_baseline", "fit_method"]

log = logging.getLogger(__name__)


@dataclass
class FittedModel:
    """A fitted method, as the model writer needs it.

    Attributes
    ----------
    components : dict of str to ndarray of shape (p_l, r)
        Per-language maps Φ_lᵀ (scipy sparse CSR of shape (p_l, |union vocabulary|) for the
        untranslated baseline).
    means : dict of str to ndarray of shape (p_l,)
        The centring each language's map was fitted with (empty when the method has none).
    eigenvalues : ndarray of shape (r,)
        The method's leading eigenvalues, descending (empty for untranslated).
    history : dict
        The solver's JSON-serialisable record.
    n_iter : int or None
        Eigensolver iterations (None for untranslated).
    shared : dict of str to ndarray
        Model-wide arrays: Λ and Q of Φ*Φ*ᵀ = QΛQᵀ for Cr5 (the Φ* word vectors are
        Φ_lᵀ Λ^{1/2} Qᵀ); empty for the baselines.
    started_from : str or None
        Cr5's eigensolver start: ``"surrogate"`` or ``"previous_fit"``.
    path_from : float or None
        λ of the fit Cr5 started from.
    path_fits : list of dict
        One record per fit of ``train.path_factors``.
    folding_in : dict or None
        The topic models' embedding settings (the maps are topic-word matrices), else None.
    similarity : str
        The method's own similarity (``"l1"`` for the topic models, else ``"cosine"``).
    """

    components: dict[str, Any]
    means: dict[str, np.ndarray]
    eigenvalues: np.ndarray
    history: dict[str, Any]
    n_iter: int | None
    shared: dict[str, np.ndarray] = field(default_factory=dict)
    started_from: str | None = None
    path_from: float | None = None
    path_fits: list[dict[str, Any]] = field(default_factory=list)
    folding_in: dict[str, Any] | None = None
    similarity: str = "cosine"


def fit_method(t: TrainConfig, data: TrainingData, checkpoint: str | None) -> FittedModel:
    """Fit ``t.method`` on ``data`` (Cr5, JPLSA, CPLSA and S2Net checkpoint under
    ``checkpoint`` when given)."""
    if t.method == "cr5":
        return _fit_cr5(t, data, checkpoint)
    if t.method in GROUPED_METHODS:
        return _fit_grouped(t, data, checkpoint)
    if t.method in NEURAL_METHODS:
        from pipeline.training.neural import fit_neural

        return fit_neural(t, data, checkpoint)
    return _fit_baseline_model(t, data)


def _fit_grouped(t: TrainConfig, data: TrainingData, ckpt: str | None) -> FittedModel:
    """JPLSA, CPLSA or S2Net on the training rows grouped by concept
    (:meth:`TrainingData.grouped`); S2Net starts from OPCA fitted on the same rows with
    ``train.gamma``."""
    corpus = data.grouped(GROUPED_METHODS[t.method])
    store = CheckpointStore(ckpt, files=remote_storage(ckpt)) if ckpt else None
    if t.method in TOPIC_METHODS:
        validation = None
        if t.plsa_stop_rule == "validation":
            validation = data.validation_rows("counts", "train.plsa_stop_rule=validation")
        options = {
            "r": t.r,
            "topic_prior": t.plsa_topic_prior,
            "word_prior": t.plsa_word_prior,
            "init_mix": t.plsa_init_mix,
            "maxiter": t.plsa_maxiter,
            "tol": t.plsa_tol,
            "stop_rule": t.plsa_stop_rule,
            "patience": t.plsa_patience,
            "fold_in_steps": t.plsa_fold_in_steps,
            "validation": validation,
            "checkpoint": store,
            "checkpoint_every": t.checkpoint_every,
            "checkpoint_seconds": t.checkpoint_seconds,
        }
        if t.method == "cplsa":
            options.update(
                pr_epsilon=t.plsa_pr_epsilon, pr_maxiter=t.plsa_pr_maxiter, pr_tol=t.plsa_pr_tol
            )
        fitted = FIT_FUNCTIONS[t.method](corpus, **options)
        n_iter = fitted.history["n_iter"]
    else:
        validation = None
        if len(t.s2net_learning_rates) * len(set(t.s2net_epochs)) > 1:
            validation = data.validation_rows(
                "tfidf", "train.s2net_learning_rates / train.s2net_epochs (several candidates)"
            )
        opca = fit_baseline(dataclasses.replace(t, method="opca"), data.backend)
        fitted = FIT_FUNCTIONS["s2net"](
            corpus,
            opca.components,
            r=t.r,
            learning_rates=t.s2net_learning_rates,
            epochs=t.s2net_epochs,
            batch_concepts=t.s2net_batch_concepts,
            gamma=t.s2net_gamma,
            negatives=t.s2net_negatives,
            validation=validation,
            distractors=t.neural_validation_distractors,
            checkpoint=store,
            seed=t.seed,
        )
        fitted.history["init"] = opca.history
        n_iter = fitted.history["chosen"]["epochs"]
    return FittedModel(
        components=fitted.components,
        means={},
        eigenvalues=fitted.eigenvalues,
        history=fitted.history,
        n_iter=n_iter,
        folding_in=fitted.folding_in,
        similarity=fitted.similarity,
    )


def fit_baseline(t: Any, backend: Any, terms: dict[str, Any] | None = None) -> Any:
    """Fit the baseline ``t.method`` with the train section's shared solver settings.

    ``terms`` (per-language vocabularies in term_index order) is needed by untranslated.
    """
    if t.method == "untranslated":
        return FIT_FUNCTIONS["untranslated"](backend, terms=terms, seed=t.seed)
    common = {
        "r": t.r,
        "oversampling": t.oversampling,
        "block_size": t.block_size,
        "eig_rtol": t.eig_rtol,
        "eig_maxiter": t.eig_maxiter,
        "max_basis": t.max_basis,
        "max_workers": t.max_workers,
        "seed": t.seed,
    }
    if t.method in ("cca", "opca"):
        common.update(gamma=t.gamma, cg_rtol=t.cg_rtol, cg_maxiter=t.cg_maxiter)
    return FIT_FUNCTIONS[t.method](backend, **common)


def _fit_cr5(t: TrainConfig, data: TrainingData, ckpt: str | None) -> FittedModel:
    """Cr5 at ``t.lam``: from the previous fit's start when ``data`` chains its fits, else
    after the ``train.path_factors`` fits, else from the surrogate start."""
    backend = data.backend
    if data.solver_options:  # what the memory plan chose where the configuration left it
        t = dataclasses.replace(t, **data.solver_options)
    path_fits: list[dict[str, Any]] = []
    start = data.path_start if data.chain_starts else None
    if start is None and t.path_factors:
        start, path_fits = _fit_path_to(t, backend)
    solver = Cr5Solver(
        t, checkpoint=CheckpointStore(ckpt, files=remote_storage(ckpt)) if ckpt else None
    )
    solver.fit(backend, start=start, keep_start=data.chain_starts, validation=data.validation)
    if data.chain_starts:
        data.path_start = solver.path_start_
    return FittedModel(
        components=solver.components_,
        means=solver.mean_,
        eigenvalues=solver.eigenvalues_,
        history=solver.history_,
        n_iter=solver.n_iter_,
        shared={
            GRAM_EIGENVALUES: solver.gram_eigenvalues_,
            GRAM_EIGENVECTORS: solver.gram_eigenvectors_,
        },
        started_from="surrogate" if start is None else "previous_fit",
        path_from=None if start is None else start.lam,
        path_fits=path_fits,
    )


def _fit_path_to(t: TrainConfig, backend: Any) -> tuple[Any, list[dict[str, Any]]]:
    """``train.path_factors``: the fits at λ times each factor, largest first, each started
    from the previous one; returns the last one's PathStart and a record per fit. (No
    checkpoints: a rerun refits the path, which costs less than the final fit.)"""
    start, fits = None, []
    for factor in sorted(t.path_factors, reverse=True):
        lam = t.lam * float(factor)
        t0 = time.perf_counter()
        params = {**t.solver_params(), "lam": lam, "stop_rule": "residual"}
        solver = Cr5Solver(**params).fit(backend, start=start, keep_start=True)
        start = solver.path_start_
        fits.append(
            {
                "lam": lam,
                "seconds": round(time.perf_counter() - t0, 3),
                "eigensolver_iterations": solver.n_iter_,
            }
        )
        log.info(
            "path fit at lambda %g: %d iterations, %.1fs", lam, solver.n_iter_, fits[-1]["seconds"]
        )
    return start, fits


def _fit_baseline_model(t: TrainConfig, data: TrainingData) -> FittedModel:
    """A baseline of :data:`pipeline.baselines.FIT_FUNCTIONS`; untranslated gets the
    vocabularies' terms."""
    terms = None
    if t.method == "untranslated":
        terms = {
            lang: data.vocabulary[lang]["terms"].to_pylist() for lang in data.backend.languages
        }
    fitted = fit_baseline(t, data.backend, terms)
    history = {k: v for k, v in fitted.history.items() if k != "union_terms"}  # in the maps
    return FittedModel(
        components=fitted.components,
        means=fitted.mean or {},
        eigenvalues=fitted.eigenvalues,
        history=history,
        n_iter=history.get("eigensolver", {}).get("n_iter"),
    )
