"""What the corpus-level baselines' fits share: the train section's eigensolver settings as
the keywords of ``pipeline.baselines``' fit functions, and their result as a
:class:`~pipeline.methods.fitted.FittedModel`."""

from __future__ import annotations

from typing import Any

from pipeline.baselines.common import BaselineResult
from pipeline.config import TrainConfig
from pipeline.methods.fitted import FittedModel

__all__ = ["baseline_model", "eigensolver_settings", "regularised_settings"]


def eigensolver_settings(t: TrainConfig) -> dict[str, Any]:
    """The block eigensolver's settings every eigenproblem baseline shares with Cr5."""
    return {
        "r": t.r,
        "oversampling": t.oversampling,
        "block_size": t.block_size,
        "eig_rtol": t.eig_rtol,
        "eig_maxiter": t.eig_maxiter,
        "max_basis": t.max_basis,
        "max_workers": t.max_workers,
        "seed": t.seed,
    }


def regularised_settings(t: TrainConfig, gamma: float) -> dict[str, Any]:
    """CCA's and OPCA's: the eigensolver's settings, γ (the method's own, ``train.cca.gamma``,
    ``train.opca.gamma``, or S2Net's ``train.s2net.gamma`` for its OPCA start) and the CG
    solves of N + γI."""
    return {
        **eigensolver_settings(t),
        "gamma": gamma,
        "cg_rtol": t.cg_rtol,
        "cg_maxiter": t.cg_maxiter,
    }


def baseline_model(fitted: BaselineResult) -> FittedModel:
    """A corpus-level baseline's result for the model writer (untranslated's union terms are
    in its maps, not its history)."""
    history = {k: v for k, v in fitted.history.items() if k != "union_terms"}
    n_iter = history.get("eigensolver", {}).get("n_iter")
    return FittedModel.from_baseline(fitted, n_iter=n_iter, history=history)
