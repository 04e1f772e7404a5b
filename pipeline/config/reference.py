"""The configuration reference, generated from the declarations: :func:`reference_markdown`
(``python -m pipeline config-reference``, ``--help-config``) and :func:`param_info`."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Sequence

from pipeline.config.sections import Config
from pipeline.errors import ConfigError
from pipeline.params import ParamInfo, describe_section, section_params

__all__ = ["param_info", "reference_markdown"]


def param_info(key: str) -> ParamInfo:
    """The declaration of ``section.key`` (type, default, range, doc)."""
    section, _, name = key.partition(".")
    hints = typing.get_type_hints(Config)
    if section not in hints:
        raise ConfigError(f"unknown configuration section {section!r}; sections: {list(hints)}")
    cls = hints[section]
    nested = cls.nested_sections() if hasattr(cls, "nested_sections") else {}
    inner, _, rest = name.partition(".")
    if rest and inner in nested:  # train.<method>.<key>
        cls, name = nested[inner], rest
    for info in section_params(cls):
        if info.name == name:
            return info
    raise ConfigError(f"unknown configuration key {key!r}")


def reference_markdown(sections: Sequence[str] | None = None) -> str:
    """The configuration reference (every key, allowed values, default, meaning) as Markdown,
    generated from the declarations of :mod:`pipeline.config.sections`
    (``python -m pipeline config-reference``)."""
    hints = typing.get_type_hints(Config)
    names = sections or [f.name for f in dataclasses.fields(Config)]
    lines: list[str] = []
    if not sections:
        lines += [
            "# Configuration reference",
            "",
            "Every key of every section: its allowed values, default and meaning, generated from",
            "the declarations in `pipeline/config/sections.py` and the parameter classes of the",
            "maths that it embeds (`pipeline/linalg/params.py`, `pipeline/retrieval/params.py`)",
            "or nests, one section `train.<method>` per registered method with keys of its own",
            "(`pipeline/baselines/params.py`, `pipeline/neural/params.py`, named by the method's",
            "`params` in `pipeline/methods/registry.py`): `python -m pipeline config-reference >",
            "docs/configuration.md`; a test keeps this file current. `jobs/<stage>.py",
            "--help-config [SECTION]` prints the same. Set keys in a YAML profile (`--conf`) or",
            "with `--set section.key=value` (the value is YAML).",
            "",
        ]
    for name in names:
        if name not in hints:
            raise ConfigError(f"unknown configuration section {name!r}; sections: {list(hints)}")
        cls = hints[name]
        lines.extend(describe_section(name, cls))
        # the sections nested in it, named at run time (train.<method>, from the registry)
        nested = cls.nested_sections() if hasattr(cls, "nested_sections") else {}
        for inner, section in nested.items():
            lines.extend(describe_section(f"{name}.{inner}", section))
    return "\n".join(lines)
