"""The methods, one :class:`~pipeline.methods.spec.MethodSpec` entry each: the single place
that says what a method is.

``train.method`` and ``evaluate.methods`` accept the names registered here (checked when a
configuration is loaded, :class:`~pipeline.params.Choice`), and every question the pipeline
asks about a method (its rank, checkpoints, tuning, similarity, model kind, driver memory) is
answered by its entry. Adding a method is one module with its fit (``pipeline/methods/``)
plus one entry in :data:`BUILTIN` (docs/design.md §6); :func:`register` adds one at run
time (a plugin, a test).

The fits are named as ``"module:function"`` and imported only when a model is trained, so
this module imports nothing but parameter declarations: the configuration, which the Airflow
DAG imports without numpy, reads the names from it.

The driver-memory counts of the classic methods are their driver peaks measured at 100k
Wikipedia-shaped documents (bench/results/classic_costs_100k.json: Σp = 522,443, r = 100,
local backend; CL-LSI 1,411, CCA 10,784, OPCA 9,143, JPLSA 2,529, CPLSA 3,173, S2Net 9,532
MiB) less the Python base and X, divided by 8·Σp·r bytes. One measured size: the state grows
with Σp·r (K and n are smaller than Σp there), which is what the formula assumes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager

from pipeline.baselines.params import (
    CcaParams,
    CplsaParams,
    OpcaParams,
    PlsaParams,
    S2NetParams,
)
from pipeline.errors import ConfigError
from pipeline.linalg.params import max_rank
from pipeline.methods.spec import DriverMemory, MethodSpec
from pipeline.neural.params import CtlaserParams, TlaserParams, XcnnParams

__all__ = [
    "BUILTIN",
    "all_methods",
    "find_method",
    "get_method",
    "legacy_keys",
    "method_names",
    "method_sections",
    "register",
    "registered",
    "unregister",
]

_SOLVER = DriverMemory("solver")

#: The built-in methods, in the order the configuration reference lists them.
BUILTIN: tuple[MethodSpec, ...] = (
    MethodSpec(
        name="cr5",
        family="corpus-level",
        fit="pipeline.methods.cr5:fit",
        rank_bound=max_rank,
        checkpoints=True,
        tuned_by="lam",
        driver_memory=_SOLVER,
        iteration_validation=True,
        phi_star=True,
    ),
    MethodSpec(
        name="untranslated",
        family="corpus-level",
        fit="pipeline.methods.untranslated:fit",
        model_kind="sparse",
    ),
    MethodSpec(
        name="cl_lsi",
        family="corpus-level",
        fit="pipeline.methods.cl_lsi:fit",
        rank_bound=max_rank,
        driver_memory=DriverMemory("state", 2.5),
    ),
    MethodSpec(
        name="cca",
        family="corpus-level",
        fit="pipeline.methods.cca:fit",
        params=CcaParams,
        rank_bound=max_rank,
        tuned_by="gamma",
        driver_memory=DriverMemory("state", 26.0),
    ),
    MethodSpec(
        name="opca",
        family="corpus-level",
        fit="pipeline.methods.opca:fit",
        params=OpcaParams,
        rank_bound=max_rank,
        tuned_by="gamma",
        driver_memory=DriverMemory("state", 21.9),
    ),
    MethodSpec(
        name="jplsa",
        family="concept-grouped",
        fit="pipeline.methods.jplsa:fit",
        model_kind="topics",
        params=PlsaParams,
        rank_bound=max_rank,
        checkpoints=True,
        similarity="l1",
        driver_memory=DriverMemory("state", 5.3),
    ),
    MethodSpec(
        name="cplsa",
        family="concept-grouped",
        fit="pipeline.methods.cplsa:fit",
        model_kind="topics",
        params=CplsaParams,
        rank_bound=max_rank,
        checkpoints=True,
        similarity="l1",
        driver_memory=DriverMemory("state", 6.9),
    ),
    MethodSpec(
        name="s2net",
        family="concept-grouped",
        fit="pipeline.methods.s2net:fit",
        params=S2NetParams,
        rank_bound=max_rank,
        checkpoints=True,
        # its start is OPCA's map, whose γ it needs chosen as OPCA's is, or it begins below
        # the OPCA it is compared with
        tuned_by="gamma",
        driver_memory=DriverMemory("state", 22.9),
    ),
    MethodSpec(
        name="xcnn",
        family="neural",
        fit="pipeline.methods.xcnn:fit",
        params=XcnnParams,
        checkpoints=True,
        epoch_validation=True,
    ),
    MethodSpec(
        name="tlaser",
        family="neural",
        fit="pipeline.methods.tlaser:fit",
        params=TlaserParams,
        model_kind="encoder",
        checkpoints=True,
        texts=True,
    ),
    MethodSpec(
        name="ctlaser",
        family="neural",
        fit="pipeline.methods.ctlaser:fit",
        params=CtlaserParams,
        model_kind="encoder",
        checkpoints=True,
        texts=True,
    ),
)

_REGISTRY: dict[str, MethodSpec] = {spec.name: spec for spec in BUILTIN}


def method_names() -> tuple[str, ...]:
    """The registered names, built-in ones first (the allowed values of ``train.method``)."""
    return tuple(_REGISTRY)


def all_methods() -> tuple[MethodSpec, ...]:
    """Every registered spec, in :func:`method_names` order."""
    return tuple(_REGISTRY.values())


def method_sections() -> dict[str, type]:
    """The nested sections of ``train``: each registered method with a ``params`` class,
    under its name (``train.<method>.<key>``), in :func:`method_names` order."""
    return {spec.name: spec.params for spec in _REGISTRY.values() if spec.params is not None}


def legacy_keys() -> dict[str, tuple[str, ...]]:
    """The flat ``train`` keys of the release before the per-method sections, each with the
    keys (relative to ``train``) that it now sets: ``plsa_topic_prior`` ->
    ``("jplsa.topic_prior", "cplsa.topic_prior")``, ``gamma`` -> ``("cca.gamma",
    "opca.gamma", "s2net.gamma")``.

    Derived from the declarations: a field whose metadata names a ``legacy`` key maps it to
    that field of every registered method whose ``params`` class has the field (so a class
    shared by several methods, such as the neural training loop's, maps one old key to all
    of them). The loader accepts the old keys with a warning for one release.
    """
    out: dict[str, list[str]] = {}
    for name, cls in method_sections().items():
        for f in dataclasses.fields(cls):
            old = f.metadata.get("legacy")
            if old:
                out.setdefault(old, []).append(f"{name}.{f.name}")
    return {old: tuple(new) for old, new in out.items()}


def find_method(name: str) -> MethodSpec | None:
    """The spec of ``name``, or None for a name no method has (``evaluate.methods`` also
    holds the word-mapping document baselines ``avg_<map>``, which are not trained)."""
    return _REGISTRY.get(name)


def get_method(name: str) -> MethodSpec:
    """The spec of ``name``; :class:`~pipeline.errors.ConfigError` naming the registered
    methods when there is none."""
    spec = _REGISTRY.get(name)
    if spec is None:
        raise ConfigError(
            f"no method {name!r} is registered (train.method); the methods are "
            f"{', '.join(_REGISTRY)}"
        )
    return spec


def register(spec: MethodSpec) -> None:
    """Add ``spec``; ValueError when its name is taken (a built-in one cannot be replaced)."""
    if spec.name in _REGISTRY:
        raise ValueError(f"a method named {spec.name!r} is already registered")
    _REGISTRY[spec.name] = spec


def unregister(name: str) -> None:
    """Remove the method ``name`` registered by :func:`register` (not a built-in one)."""
    if any(spec.name == name for spec in BUILTIN):
        raise ValueError(f"{name!r} is a built-in method")
    _REGISTRY.pop(name, None)


@contextmanager
def registered(spec: MethodSpec) -> Iterator[MethodSpec]:
    """``spec`` registered for the ``with`` block, unregistered after it."""
    register(spec)
    try:
        yield spec
    finally:
        unregister(spec.name)
