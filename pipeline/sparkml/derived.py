"""pyspark.ml ``Param``s derived from the project's parameter declarations.

A Spark ML parameter of :class:`~pipeline.sparkml.Cr5` or
:class:`~pipeline.sparkml.Cr5Embedding` is a configuration key under its camelCase name
(``train.cg_rtol`` is ``cgRtol``): its doc, default and allowed values come from the key's
one declaration (:func:`pipeline.params.param`), and its type converter is the
configuration's own check (:func:`pipeline.params.check_params`), so a bad value fails when
it is set, with the configuration's message. Checks across keys (``train.setup: pairwise``
needs ``train.pair``) run at ``fit``, before any Spark work, through the configuration
loader (:func:`configuration`).

Parameters that do not apply to a DataFrame stage are left out (:data:`LEFT_OUT`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.ml.param import Param, Params

from pipeline.config import (
    Config,
    EmbedConfig,
    FeaturesConfig,
    TextConfig,
    TrainConfig,
    build_section,
    validate,
)
from pipeline.methods.registry import method_sections
from pipeline.params import NESTED, ParamInfo, check_params, section_params
from pipeline.sparkml.params import StageParams

__all__ = [
    "EMBEDDING_PARAMS",
    "FIT_PARAMS",
    "LEFT_OUT",
    "OWNER",
    "DerivedParam",
    "camel_case",
    "configuration",
    "params_markdown",
    "params_mixin",
    "set_declared_defaults",
]

#: How the messages name the stages' parameters.
OWNER = "Spark ML"


def _other_methods() -> dict[str, str]:
    """The ``train`` keys of the methods' own sections, which are no parameter of the Cr5
    estimator: each registered method's section ``train.<method>`` (from the specs,
    :func:`~pipeline.methods.registry.method_sections`) and the field holding them."""
    reason = "the estimator fits Cr5 (the other methods are compared by the evaluate stage)"
    nested = next(f.name for f in dataclasses.fields(TrainConfig) if f.metadata.get(NESTED))
    return {
        f"train.{nested}": f"the methods' own sections train.<method>: {reason}",
        **{
            f"train.{name}": f"the section of method {name} ({cls.__name__}): {reason}"
            for name, cls in method_sections().items()
        },
    }


#: Configuration keys that are no parameter of the estimator, and why.
LEFT_OUT: dict[str, str] = {
    "train.method": "the estimator fits Cr5 (the baselines are compared by the evaluate stage)",
    **_other_methods(),
    "train.stop_rule": "validation stopping needs the split stage's validation concepts",
    "train.stop_patience": "validation stopping needs the split stage's validation concepts",
    "train.tune": "tuning on validation needs the split stage's concepts (the train stage)",
    "train.validation_concepts": "validation stopping needs the split stage's concepts",
    "train.validation_distractors": "validation stopping needs the split stage's concepts",
    "features.heldout_concepts": "fit trains on the DataFrame it is given: filter it first",
}


@dataclass(frozen=True, eq=False)
class DerivedParam:
    """One Spark ML parameter and the declaration it comes from.

    Attributes
    ----------
    name : str
        The Spark ML name (camelCase).
    section : str or None
        The configuration section (``"train"``), or None for :class:`StageParams`.
    declared_in : type
        The dataclass declaring the field.
    info : ParamInfo
        The declaration: field name, type, default, doc, range.
    """

    name: str
    section: str | None
    declared_in: type
    info: ParamInfo

    @property
    def key(self) -> str:
        """The configuration key (``train.cg_rtol``), or the field name."""
        return f"{self.section}.{self.info.name}" if self.section else self.info.name

    @property
    def doc(self) -> str:
        where = f" (configuration key {self.key})" if self.section else ""
        return f"{self.info.doc} Allowed: {self.info.allowed()}.{where}"

    def convert(self, value: Any) -> Any:
        """The value checked against the declaration (ConfigError with the configuration's
        message) and converted where lossless."""
        checked = check_params(
            self.declared_in,
            {self.info.name: value},
            owner=OWNER,
            prefix=None if self.section is None else self.section + ".",
            names={self.info.name: self.name},
        )
        return checked[self.info.name]


def camel_case(name: str) -> str:
    """``cg_rtol`` -> ``cgRtol``, ``min_df`` -> ``minDf``."""
    first, *rest = name.split("_")
    return first + "".join(part[:1].upper() + part[1:] for part in rest)


def _derive(declared_in: type, section: str | None, names: Iterable[str]) -> list[DerivedParam]:
    infos = {info.name: info for info in section_params(declared_in)}
    return [DerivedParam(camel_case(n), section, declared_in, infos[n]) for n in names]


def _all_but(declared_in: type, section: str) -> list[str]:
    return [
        info.name
        for info in section_params(declared_in)
        if f"{section}.{info.name}" not in LEFT_OUT
    ]


#: Parameters of the transformer, which the estimator has too and hands to its model.
EMBEDDING_PARAMS: tuple[DerivedParam, ...] = (
    *_derive(StageParams, None, ["lang_col", "output_type"]),
    *_derive(EmbedConfig, "embed", ["normalize", "on_unknown_language", "batch_rows"]),
)

#: Parameters of the estimator's fit: its columns, then ``train``, ``features``, ``text``.
FIT_PARAMS: tuple[DerivedParam, ...] = (
    *_derive(StageParams, None, ["concept_col", "doc_id_col", "work_dir"]),
    *_derive(TrainConfig, "train", _all_but(TrainConfig, "train")),
    *_derive(FeaturesConfig, "features", _all_but(FeaturesConfig, "features")),
    *_derive(TextConfig, "text", _all_but(TextConfig, "text")),
)


class _Converter:
    """A picklable type converter: :meth:`DerivedParam.convert`."""

    def __init__(self, derived: DerivedParam) -> None:
        self.derived = derived

    def __call__(self, value: Any) -> Any:
        return self.derived.convert(value)


def _getter(name: str) -> Callable[[Params], Any]:
    def get(self: Params) -> Any:
        return self.getOrDefault(name)

    get.__doc__ = f"The value of {name} (or its default)."
    return get


def _setter(name: str) -> Callable[[Params, Any], Params]:
    def set_(self: Params, value: Any) -> Params:
        return self._set(**{name: value})

    set_.__doc__ = f"Set {name}."
    return set_


def params_mixin(name: str, derived: Sequence[DerivedParam], doc: str, module: str) -> type:
    """A :class:`pyspark.ml.param.Params` mixin named ``name`` (of module ``module``)
    declaring ``derived``, with a ``get<Name>`` and a ``set<Name>`` method each; the stage
    sets the declared defaults with :func:`set_declared_defaults`."""
    namespace: dict[str, Any] = {"__doc__": doc, "__module__": module}
    for d in derived:
        namespace[d.name] = Param(Params._dummy(), d.name, d.doc, typeConverter=_Converter(d))
        title = d.name[:1].upper() + d.name[1:]
        namespace[f"get{title}"] = _getter(d.name)
        namespace[f"set{title}"] = _setter(d.name)
    namespace["_derived"] = tuple(derived)
    return type(name, (Params,), namespace)


def set_declared_defaults(stage: Params, derived: Iterable[DerivedParam]) -> None:
    """Give ``stage`` the declared default of every parameter in ``derived``."""
    stage._setDefault(**{d.name: d.info.default for d in derived})


def configuration(
    values: Mapping[DerivedParam, Any], *, paths: Mapping[str, Any] | None = None
) -> Config:
    """The :class:`~pipeline.config.Config` the parameter values make, checked by the
    configuration loader (each key, then the rules across keys) with its messages.

    ``values`` maps the configuration parameters to their values (stage parameters are
    ignored); ``paths`` sets the ``paths`` section. Raises ConfigError.
    """
    data: dict[str, dict[str, Any]] = {"paths": dict(paths or {})}
    sources = {}
    for d, value in values.items():
        if d.section is None:
            continue
        data.setdefault(d.section, {})[d.info.name] = value
        sources[d.key] = f"{OWNER} parameter {d.name}"
    return validate(build_section(Config, data, prefix="", sources=sources))


def params_markdown() -> str:
    """The stages' parameters as a Markdown table, generated from the declarations
    (``docs/spark-ml.md``, where a test keeps it current)."""
    lines = [
        "| parameter | stages | configuration key | allowed | default | meaning |",
        "|---|---|---|---|---|---|",
    ]
    shared = [
        ("inputCol", "both", "", "a string", '"text"', "Column of the documents' texts."),
        ("outputCol", "both", "", "a string", '"embedding"', "The embedding column."),
    ]
    for name, stages, key, allowed, default, meaning in shared:
        lines.append(f"| `{name}` | {stages} | {key} | {allowed} | `{default}` | {meaning} |")
    for stages, params in (("both", EMBEDDING_PARAMS), ("Cr5", FIT_PARAMS)):
        for d in params:
            key = f"`{d.key}`" if d.section else ""
            meaning = d.info.doc.replace("|", "\\|")
            default = json.dumps(d.info.default, ensure_ascii=False)
            allowed = d.info.allowed().replace("|", "\\|")
            lines.append(f"| `{d.name}` | {stages} | {key} | {allowed} | `{default}` | {meaning} |")
    return "\n".join(lines)
