"""Every shipped profile (conf/*.yaml) loads and validates, alone and layered as scripts/demo.sh,
the README and the profiles' own headers layer them, and every key it sets takes effect."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipeline.config import Config, load_config
from tests.conftest import REPO

CONF = REPO / "conf"
SHIPPED = sorted(path.name for path in CONF.glob("*.yaml"))

#: Profile stacks, later wins, as the project's own commands layer them.
STACKS: list[tuple[str, ...]] = [
    *[(name,) for name in SHIPPED],  # each alone (README's jobs, the Airflow DAG's cluster.yaml)
    ("local.yaml", "short-docs.yaml"),  # README: jobs/vocabulary.py on short documents
    ("local.yaml", "short-docs.yaml", "sample.yaml"),  # scripts/demo.sh, the README's demo
    ("short-docs.yaml", "cluster.yaml"),  # cluster.yaml's header: after a task profile
]


def _read(name: str) -> dict[str, Any]:
    return yaml.safe_load((CONF / name).read_text(encoding="utf-8")) or {}


def _merge(into: dict[str, Any], data: dict[str, Any]) -> None:
    """Recursive merge, later wins (the layering rule of :func:`load_config`)."""
    for key, value in data.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


def _plain(value: Any) -> Any:
    """Tuples as lists, so a YAML list compares equal to the tuple a Config field holds."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _mismatches(node: Any, data: dict[str, Any], prefix: str = "") -> list[str]:
    """``key: config value != profile value`` for every leaf key of ``data`` (a merged
    profile) whose value the loaded configuration ``node`` does not hold."""
    out = []
    for key, value in data.items():
        held = getattr(node, key)
        if dataclasses.is_dataclass(held) and isinstance(value, dict):
            out += _mismatches(held, value, f"{prefix}{key}.")
        elif _plain(held) != _plain(value):
            out.append(f"{prefix}{key}: {held!r} != {value!r}")
    return out


def test_every_shipped_profile_is_in_a_stack():
    assert {"cluster.yaml", "local.yaml", "sample.yaml", "short-docs.yaml"} <= set(SHIPPED)
    assert {name for stack in STACKS for name in stack} == set(SHIPPED)


@pytest.mark.parametrize("stack", STACKS, ids=["+".join(Path(n).stem for n in s) for s in STACKS])
def test_profile_stack_loads_validates_and_takes_effect(stack: tuple[str, ...]):
    """load_config validates (types, ranges, cross-field checks) and raises ConfigError on any
    problem; each key the stack sets, the last profile's where several set it, is what the
    configuration holds."""
    cfg = load_config([CONF / name for name in stack])
    assert isinstance(cfg, Config)
    merged: dict[str, Any] = {}
    for name in stack:
        _merge(merged, _read(name))
    assert merged, f"{stack} sets no key"
    assert _mismatches(cfg, merged) == []
