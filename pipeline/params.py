"""Declared parameters: one typed field carries a parameter's default, range and help text.

Like ``pyspark.ml``'s ``Param`` (which carries its doc and converter), a parameter is declared
once with :func:`param`, as a field of a frozen dataclass, and everything else is derived from
that declaration: the YAML loader's type and range checks (:mod:`pipeline.config`), the
solvers' keyword defaults and their checks at ``fit`` (:func:`check_params`), ``--help-config``
and the configuration reference (:func:`describe_section`), and the Airflow DAG's params.

The maths packages declare their own parameters this way (``pipeline/linalg/params.py``,
``pipeline/retrieval/params.py``, ``pipeline/baselines/params.py``) and the configuration
sections embed those classes, so each key is declared once, by the code that uses it.

This module is a leaf: it imports nothing of the pipeline but :mod:`pipeline.errors`, and
nothing outside the standard library (the Airflow DAG imports it without numpy or Spark).
"""

from __future__ import annotations

import dataclasses
import json
import numbers
import re
import types
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import MISSING, dataclass, field
from typing import Annotated, Any, Literal

from pipeline.errors import ConfigError

__all__ = [
    "NESTED",
    "Choice",
    "ParamInfo",
    "Range",
    "check_params",
    "check_range",
    "check_section",
    "coerce",
    "describe_section",
    "json_schema",
    "legacy",
    "param",
    "section_params",
]


@dataclass(frozen=True)
class Range:
    """An interval of allowed numbers; ``lo_open``/``hi_open`` exclude the end points.

    For a list-valued parameter the range applies to every element.
    """

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False

    def __contains__(self, value: Any) -> bool:
        if self.lo is not None and (value <= self.lo if self.lo_open else value < self.lo):
            return False
        return not (self.hi is not None and (value >= self.hi if self.hi_open else value > self.hi))

    def __str__(self) -> str:
        if self.hi is None:
            return f"> {self.lo:g}" if self.lo_open else f">= {self.lo:g}"
        left = "(" if self.lo_open or self.lo is None else "["
        right = ")" if self.hi_open else "]"
        lo = "-inf" if self.lo is None else f"{self.lo:g}"
        return f"in {left}{lo}, {self.hi:g}{right}"


def param(
    default: Any = MISSING,
    *,
    doc: str,
    lo: float | None = None,
    hi: float | None = None,
    lo_open: bool = False,
    hi_open: bool = False,
    default_factory: Any = MISSING,
    extra: Mapping[str, Any] | None = None,
) -> Any:
    """A dataclass field declaring one parameter: default, allowed range and help text.

    Parameters
    ----------
    default, default_factory
        As for :func:`dataclasses.field` (a list default needs ``default_factory``).
    doc : str
        One or two sentences for ``--help-config``, the reference and error messages.
    lo, hi : float, optional
        Inclusive bounds (exclusive with ``lo_open``/``hi_open``); for lists, per element.
    extra : mapping, optional
        Further field metadata for the declaring package (e.g. whether a solver parameter
        binds a checkpoint, :mod:`pipeline.linalg.params`).
    """
    rng = None if lo is None and hi is None else Range(lo, hi, lo_open, hi_open)
    meta = {**(extra or {}), "doc": " ".join(doc.split()), "range": rng}
    if default_factory is not MISSING:
        return field(default_factory=default_factory, metadata=meta)
    return field(default=default, metadata=meta)


def legacy(name: str) -> dict[str, str]:
    """``extra`` metadata of a field that replaced the flat ``train.<name>`` key of the release
    before the per-method sections; the loader maps the old key to it, with a warning
    (:func:`pipeline.methods.registry.legacy_keys`)."""
    return {"legacy": name}


@dataclass(frozen=True)
class Choice:
    """The allowed values of a string parameter declared ``Annotated[str, Choice(values)]``,
    read each time a value is checked or described instead of once at declaration.

    A ``Literal`` fixes its values when the section is defined; a registry that grows after
    the configuration is imported (a method registered at run time,
    :mod:`pipeline.methods.registry`) needs them read later. Every consumer of a declaration
    (the loader's checks, ``--help-config``, the reference, JSON schemas) sees such a
    parameter as the ``Literal`` of the values of the moment, so the two spellings describe
    and check alike.
    """

    values: Callable[[], Sequence[str]]

    def literal(self) -> Any:
        """``Literal[v1, v2, ...]`` of the current values."""
        return Literal[tuple(self.values())]


def _resolved(tp: Any) -> Any:
    """``tp`` with an ``Annotated`` wrapper resolved: a :class:`Choice` becomes the
    ``Literal`` of its current values, any other metadata is dropped."""
    if typing.get_origin(tp) is not Annotated:
        return tp
    base, *metadata = typing.get_args(tp)
    for item in metadata:
        if isinstance(item, Choice):
            return item.literal()
    return base


@dataclass(frozen=True)
class ParamInfo:
    """What :func:`section_params` tells about one declared field."""

    name: str
    type: Any
    default: Any
    doc: str
    range: Range | None

    def allowed(self) -> str:
        """The allowed values as text, e.g. ``an int >= 1`` or ``None or a number in (0, 1)``."""
        return _describe_type(self.type, self.range)


#: Field metadata marking a section's mapping of nested sections named at run time (the
#: ``train`` section's per-method sections): no parameter itself, so :func:`section_params`
#: leaves it out; the loader builds it and the reference lists its sections.
NESTED = "nested_sections"


def section_params(cls: type) -> Iterator[ParamInfo]:
    """The declared fields of a configuration dataclass, in declaration order (a field
    holding nested sections named at run time, :data:`NESTED`, is none)."""
    hints = typing.get_type_hints(cls, include_extras=True)
    for f in dataclasses.fields(cls):
        if f.metadata.get(NESTED):
            continue
        if f.default is not MISSING:
            default = f.default
        elif f.default_factory is not MISSING:
            default = f.default_factory()
        else:
            default = MISSING
        yield ParamInfo(
            name=f.name,
            type=hints[f.name],
            default=default,
            doc=f.metadata.get("doc", ""),
            range=f.metadata.get("range"),
        )


def _type_name(tp: Any) -> str:
    tp = _resolved(tp)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin is list:
        return f"a list of {_type_name(args[0]).removeprefix('a ').removeprefix('an ')}s"
    if origin is dict:
        return "a mapping"
    if dataclasses.is_dataclass(tp):
        return "a mapping (section)"
    return {
        bool: "true or false",
        int: "an int",
        float: "a real number",
        str: "a string",
    }.get(tp, getattr(tp, "__name__", str(tp)))


def _describe_type(tp: Any, rng: Range | None) -> str:
    tp = _resolved(tp)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType) and type(None) in args:
        inner = [a for a in args if a is not type(None)]
        return "None or " + " or ".join(_describe_type(a, rng) for a in inner)
    text = _type_name(tp)
    if rng is not None:
        text += f" {rng}" if origin is not list else f" (each {rng})"
    return text


def coerce(tp: Any, value: Any, *, key: str, where: str = "") -> Any:
    """``value`` checked against type ``tp`` (and converted where lossless).

    ``where`` is appended to messages (e.g. `` (from conf/x.yaml)``). Nested dataclasses are
    not handled here (the loader builds sections itself).

    Raises
    ------
    ConfigError
        Naming ``key``, the expected type and the value received.
    """
    tp = _resolved(tp)
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)

    def fail(expected: str) -> ConfigError:
        return ConfigError(
            f"configuration key {key!r}{where} must be {expected}, "
            f"got {type(value).__name__} {value!r}"
        )

    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:
            return coerce(inner[0], value, key=key, where=where)
        raise fail(" or ".join(getattr(a, "__name__", str(a)) for a in args))
    if origin is Literal:
        if value not in args:
            raise fail("one of " + ", ".join(repr(a) for a in args))
        return value
    if origin is list:
        if not isinstance(value, list | tuple):
            raise fail("a list")
        return [coerce(args[0], v, key=f"{key}[{i}]", where=where) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, Mapping):
            raise fail("a mapping")
        return {str(k): coerce(args[1], v, key=f"{key}.{k}", where=where) for k, v in value.items()}
    if tp is bool:
        if not isinstance(value, bool) and type(value).__name__ != "bool_":  # numpy.bool_
            raise fail("true or false")
        return bool(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise fail("an integer")
        return int(value)
    if tp is float:
        if isinstance(value, str):
            # PyYAML (YAML 1.1) reads 1e-4 as a string; 1.0e-4 would be a float.
            try:
                return float(value)
            except ValueError:
                raise fail("a number") from None
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise fail("a number")
        return float(value)
    if tp is str:
        # Spark properties are strings but YAML reads 8 as int: accept scalars for str.
        if isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
        if not isinstance(value, str):
            raise fail("a string")
        return value
    raise TypeError(f"unsupported configuration type {tp!r} for {key}")  # schema bug


def check_range(info: ParamInfo, value: Any, *, key: str, where: str = "") -> None:
    """Raise :class:`ConfigError` when ``value`` (or an element of a list) is out of range."""
    rng = info.range
    if rng is None or value is None:
        return
    for v in value if isinstance(value, list) else [value]:
        if v not in rng:
            raise ConfigError(
                f"configuration key {key!r}{where} = {value!r} is out of range: "
                f"must be {info.allowed()}"
            )


def check_params(
    cls: type,
    values: Mapping[str, Any],
    *,
    owner: str,
    prefix: str | None = "",
    names: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Check keyword arguments against the fields of section ``cls`` that declare them.

    Used by estimators at ``fit`` (and the Spark ML stages when a parameter is set) so that
    a solver called from Python gets the same checks as a configuration file (names not
    declared by ``cls`` are skipped). ``names`` maps a field to the name the caller knows
    it by (e.g. ``cg_rtol`` to the Spark ML parameter ``cgRtol``); ``prefix`` None: the
    fields are no configuration keys (the message names none).

    Returns
    -------
    dict
        The checked values, converted where lossless (an int for a float field, a list for
        a tuple), under their field names.

    Raises
    ------
    ConfigError
        ``"<owner> parameter '<name>' must be <allowed>; got <value> (configuration key
        <prefix><field>)"``.
    """
    infos = {info.name: info for info in section_params(cls)}
    out = {}
    for name, value in values.items():
        info = infos.get(name)
        if info is None:
            continue
        key = (prefix or "") + name
        try:
            coerced = coerce(info.type, value, key=key)
            check_range(info, coerced, key=key)
        except ConfigError:
            shown = (names or {}).get(name, name)
            where = "" if prefix is None else f" (configuration key {key})"
            raise ConfigError(
                f"{owner} parameter {shown!r} must be {info.allowed()}; got {value!r}{where}"
            ) from None
        out[name] = coerced
    return out


def check_section(obj: Any, *, prefix: str) -> None:
    """Type- and range-check every field of a section instance built in Python (the YAML
    loader checks its values as it builds them); ``prefix`` is e.g. ``"evaluate."``."""
    for info in section_params(type(obj)):
        if dataclasses.is_dataclass(info.type):
            continue
        key = prefix + info.name
        value = coerce(info.type, getattr(obj, info.name), key=key)
        check_range(info, value, key=key)


def json_schema(info: ParamInfo) -> dict[str, Any]:
    """A JSON-schema fragment for the parameter (Airflow ``Param``s, UIs): type, enum, range."""
    return _schema(info.type, info.range)


def _schema(tp: Any, rng: Range | None) -> dict[str, Any]:
    tp = _resolved(tp)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        out = _schema(inner[0], rng) if len(inner) == 1 else {}
        kinds = out.get("type", [])
        out["type"] = [*(kinds if isinstance(kinds, list) else [kinds]), "null"]
        return out
    if origin is Literal:
        return {"enum": list(args)}
    if origin is list:
        return {"type": "array", "items": _schema(args[0], rng)}
    if origin is dict:
        return {"type": "object", "additionalProperties": _schema(args[1], None)}
    out: dict[str, Any] = {
        "type": {bool: "boolean", int: "integer", float: "number", str: "string"}[tp]
    }
    if rng is not None and tp in (int, float):
        if rng.lo is not None:
            out["exclusiveMinimum" if rng.lo_open else "minimum"] = rng.lo
        if rng.hi is not None:
            out["exclusiveMaximum" if rng.hi_open else "maximum"] = rng.hi
    return out


def _plain(text: str) -> str:
    """Sphinx roles and double backticks to plain Markdown code spans."""
    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"`\1`", text)
    return text.replace("``", "`")


def _reference_order(cls: type) -> list[ParamInfo]:
    """The fields of ``cls`` for the reference: those it declares itself first, then those of
    each parameter class it embeds (its dataclass bases, in method resolution order)."""
    infos = {info.name: info for info in section_params(cls)}
    order: list[str] = []
    for klass in cls.__mro__:
        if not dataclasses.is_dataclass(klass):
            continue
        inherited = {
            f.name
            for base in klass.__bases__
            if dataclasses.is_dataclass(base)
            for f in dataclasses.fields(base)
        }
        order += [
            f.name
            for f in dataclasses.fields(klass)
            if f.name not in inherited and f.name not in order
        ]
    return [infos[name] for name in order if name in infos]


def describe_section(name: str, cls: type) -> list[str]:
    """Markdown lines documenting every key of section ``name`` (for the reference/--help)."""
    lines = []
    doc = (cls.__doc__ or "").strip().splitlines()
    lines.append(f"### `{name}`" + (f": {_plain(doc[0])}" if doc else ""))
    lines.append("")
    lines.append("| key | allowed | default | meaning |")
    lines.append("|---|---|---|---|")
    for info in _reference_order(cls):
        if dataclasses.is_dataclass(info.type):
            continue
        default = (
            "required"
            if info.default is MISSING
            else f"`{json.dumps(info.default, ensure_ascii=False)}`"
        )
        allowed = info.allowed().replace("|", "\\|")
        meaning = info.doc.replace("|", "\\|")
        lines.append(f"| `{name}.{info.name}` | {allowed} | {default} | {meaning} |")
    lines.append("")
    return lines
