"""Language pairs as the configuration writes them: ``"l1-l2"``."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence

from pipeline.errors import ConfigError

__all__ = ["all_pairs", "canonical", "parse_pair"]


def parse_pair(text: str, *, key: str) -> tuple[str, str]:
    """``"en-de"`` -> ``("en", "de")``; a ConfigError naming ``key`` otherwise."""
    parts = [p.strip() for p in str(text).split("-")]
    if len(parts) != 2 or not all(parts) or parts[0] == parts[1]:
        raise ConfigError(
            f"{key}: {text!r} is not a language pair; write two different languages "
            "joined by '-', e.g. en-de"
        )
    return parts[0], parts[1]


def canonical(pair: Sequence[str]) -> str:
    """The unordered pair's name: the two languages sorted, joined by '-'."""
    a, b = sorted(pair)
    return f"{a}-{b}"


def all_pairs(languages: Iterable[str]) -> list[tuple[str, str]]:
    """Every unordered pair of ``languages`` (sorted)."""
    return list(itertools.combinations(sorted(set(languages)), 2))
