"""The solvers' own error for a bad argument: it names the argument, not a configuration key.

linalg knows nothing of the configuration (docs/design.md, section 5). A solver called with
an argument out of its range raises :class:`SolverArgumentError` naming that argument (a
field of :class:`~pipeline.linalg.params.Cr5Params`, e.g. ``r``, ``max_basis``,
``stop_rule``); the stage boundary that called the solver with a configuration (the training
service, :func:`pipeline.training.fit.fit_method`) translates it into a
:class:`~pipeline.errors.ConfigError` naming the key (``train.<argument>``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pipeline.linalg.params import max_rank
from pipeline.params import check_params

__all__ = ["RankError", "SolverArgumentError", "check_arguments", "check_rank"]


class SolverArgumentError(ValueError):
    """A solver argument is invalid; ``argument`` is its name (a solver parameter's)."""

    def __init__(self, argument: str, message: str) -> None:
        super().__init__(message)
        self.argument = argument

    def __reduce__(self) -> tuple[Any, ...]:  # picklable with its argument (Spark tasks)
        return type(self), (self.argument, str(self))


class RankError(SolverArgumentError):
    """``r`` exceeds the rank bound of the corpus: ``limit`` = ``bound(n_concepts, n_terms)``."""

    def __init__(self, message: str, *, r: int, limit: int, n_concepts: int, n_terms: int):
        super().__init__("r", message)
        self.r, self.limit, self.n_concepts, self.n_terms = r, limit, n_concepts, n_terms

    def __reduce__(self) -> tuple[Any, ...]:
        sizes = {"r": self.r, "limit": self.limit}
        sizes |= {"n_concepts": self.n_concepts, "n_terms": self.n_terms}
        return _rank_error, (str(self), sizes)


def _rank_error(message: str, sizes: dict[str, int]) -> RankError:
    return RankError(message, **sizes)


def check_rank(
    r: int,
    n_concepts: int,
    n_terms: int,
    *,
    bound: Callable[[int, int], int] = max_rank,
    owner: str = "Cr5Solver",
) -> None:
    """The one check of ``r`` against a corpus of ``n_concepts`` concepts and ``n_terms``
    terms: :class:`RankError` when ``r > bound(n_concepts, n_terms)`` (the method's rank
    bound; default :func:`~pipeline.linalg.params.max_rank`, ``min(K - 1, p)``). The
    preflight and the training service call it too, and word its error for the
    configuration (:func:`pipeline.preflight.check_rank`)."""
    limit = bound(n_concepts, n_terms)
    if r <= limit:
        return
    formula = "min(n_concepts - 1, n_terms) = " if bound is max_rank else ""
    raise RankError(
        f"{owner} parameter 'r' must be <= {formula}{limit} for this corpus "
        f"(K={n_concepts}, p={n_terms}); got {r}: set a smaller r",
        r=r,
        limit=limit,
        n_concepts=n_concepts,
        n_terms=n_terms,
    )


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
