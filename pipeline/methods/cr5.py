"""Cr5's fit (``train.method=cr5``): :class:`~pipeline.linalg.cr5.Cr5Solver` at ``train.lam``,
optionally after a λ path (``train.path_factors``) or from the previous fit on the same rows
(the evaluation's warm-started λ grid)."""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

from pipeline.config import TrainConfig
from pipeline.linalg.cr5 import Cr5Solver
from pipeline.methods.checkpoints import checkpoint_store
from pipeline.methods.fitted import FittedModel
from pipeline.model.format import GRAM_EIGENVALUES, GRAM_EIGENVECTORS

__all__ = ["fit"]

log = logging.getLogger(__name__)


def fit(t: TrainConfig, data: Any, checkpoint: str | None) -> FittedModel:
    """Cr5 at ``t.lam`` on the training rows ``data``: from the previous fit's start when
    ``data`` chains its fits, else after the ``train.path_factors`` fits, else from the
    surrogate start; the eigensolver settings the memory plan chose
    (``data.solver_options``) apply where the configuration left them."""
    backend = data.backend
    if data.solver_options:  # what the memory plan chose where the configuration left it
        t = dataclasses.replace(t, **data.solver_options)
    path_fits: list[dict[str, Any]] = []
    start = data.path_start if data.chain_starts else None
    if start is None and t.path_factors:
        start, path_fits = _fit_path_to(t, backend)
    solver = Cr5Solver(t, checkpoint=checkpoint_store(checkpoint))
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
