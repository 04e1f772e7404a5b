"""Fitting ``train.method`` on loaded training rows: a lookup in the method registry.

The method's spec (:mod:`pipeline.methods.registry`) names its fit; this module imports it
(the built-in fits are named as ``"module:function"`` so that the registry, which the
configuration reads, loads without them) and calls it. Every fit ends in a
:class:`~pipeline.methods.fitted.FittedModel`, the one shape the model writer
(:mod:`pipeline.training.service`) takes.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from pipeline.config import TrainConfig
from pipeline.errors import ConfigError
from pipeline.linalg.errors import SolverArgumentError
from pipeline.methods.fitted import FittedModel
from pipeline.methods.registry import get_method
from pipeline.methods.spec import MethodSpec
from pipeline.training.rows import TrainingData

__all__ = ["FittedModel", "configuration_error", "fit_function", "fit_method"]


def fit_function(spec: MethodSpec) -> Callable[..., FittedModel]:
    """The fit of ``spec``: the function itself, or the one its ``"module:function"`` names."""
    if callable(spec.fit):
        return spec.fit
    module, _, name = spec.fit.partition(":")
    fit: Callable[..., FittedModel] = getattr(importlib.import_module(module), name)
    return fit


def fit_method(t: TrainConfig, data: TrainingData, checkpoint: str | None) -> FittedModel:
    """Fit ``t.method`` on ``data``; ``checkpoint``: where it keeps its state, None for a
    method whose spec does not checkpoint (the training service decides, as it also deletes
    the directory once the model is saved).

    The stage boundary of the solvers: a :class:`~pipeline.linalg.errors.SolverArgumentError`
    (naming a solver argument) leaves as the :class:`~pipeline.errors.ConfigError` naming its
    configuration key (:func:`configuration_error`)."""
    try:
        return fit_function(get_method(t.method))(t, data, checkpoint)
    except SolverArgumentError as exc:
        raise configuration_error(exc) from exc


def configuration_error(exc: SolverArgumentError, *, section: str = "train") -> ConfigError:
    """The :class:`~pipeline.errors.ConfigError` of a solver's argument error: its message
    and the configuration key the argument is set by (``<section>.<argument>``)."""
    return ConfigError(f"{exc} (configuration key {section}.{exc.argument})")
