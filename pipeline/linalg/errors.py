"""The solvers' own error for a bad argument: it names the argument, not a configuration key.

linalg knows nothing of the configuration (docs/design.md, section 5). A solver called with
an argument out of its range raises :class:`SolverArgumentError` naming that argument (a
field of :class:`~pipeline.linalg.params.Cr5Params`, e.g. ``r``, ``max_basis``,
``stop_rule``); the stage boundary that called the solver with a configuration (the training
service, :func:`pipeline.training.fit.fit_method`) translates it into a
:class:`~pipeline.errors.ConfigError` naming the key (``train.<argument>``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline.params import check_params

__all__ = ["SolverArgumentError", "check_arguments"]


class SolverArgumentError(ValueError):
    """A solver argument is invalid; ``argument`` is its name (a solver parameter's)."""

    def __init__(self, argument: str, message: str) -> None:
        super().__init__(message)
        self.argument = argument

    def __reduce__(self) -> tuple[Any, ...]:  # picklable with its argument (Spark tasks)
        return type(self), (self.argument, str(self))


def check_arguments(cls: type, values: Mapping[str, Any], *, owner: str) -> dict[str, Any]:
    """:func:`pipeline.params.check_params` of ``values`` against the declarations of
    ``cls``, naming no configuration key: the first bad value raises
    :class:`SolverArgumentError` naming its argument. Returns the checked values."""
    out: dict[str, Any] = {}
    for name, value in values.items():
        try:
            out.update(check_params(cls, {name: value}, owner=owner, prefix=None))
        except ValueError as exc:  # the declaration's check (a ConfigError, a ValueError)
            raise SolverArgumentError(name, str(exc)) from None
    return out
