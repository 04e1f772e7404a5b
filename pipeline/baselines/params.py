"""The baselines' own parameter, declared once (:func:`~pipeline.params.param`).

The baselines share the solver parameters of :class:`pipeline.linalg.params.Cr5Params`
(r, tolerances, seed, ...) and add the regularisation γ of CCA and OPCA, declared here. The
configuration's ``train`` section embeds :class:`BaselineParams`
(:class:`pipeline.config.TrainConfig` subclasses it), so ``train.gamma`` *is*
:attr:`BaselineParams.gamma`.

This module imports nothing but :mod:`pipeline.params` and the standard library: the
configuration, which the Airflow DAG imports without numpy, embeds it.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.params import param

__all__ = ["BASELINE_DEFAULTS", "BaselineParams"]


@dataclass(frozen=True)
class BaselineParams:
    """Parameters of the baselines beyond the solver's; the keys ``train.<name>``."""

    gamma: float = param(
        1e-3,
        lo=0.0,
        lo_open=True,
        doc="Regularisation of the CCA and OPCA baselines (per-sample covariances).",
    )


#: The declared defaults, for keyword defaults of the fit functions.
BASELINE_DEFAULTS = BaselineParams()
