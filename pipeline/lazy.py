"""Package namespaces whose re-exported names load on first use (PEP 562).

A package ``__init__`` that imports its modules' names eagerly makes importing *any* of its
modules load them all: importing the numpy-free ``pipeline.linalg.params`` would load numpy,
scipy and the solvers. The configuration embeds such parameter modules and must load without
numpy (the Airflow DAG imports it), so the maths packages re-export lazily::

    __getattr__, __dir__ = lazy_exports(__name__, {"block_cg": "block_cg", ...})

``from pipeline.linalg import block_cg`` then imports ``pipeline.linalg.block_cg`` at that
moment. Imports written under ``typing.TYPE_CHECKING`` beside the table keep the names
visible to type checkers and editors.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package`` whose names live in its modules.

    Parameters
    ----------
    package : str
        The package's ``__name__``.
    exports : mapping of str to str
        Exported name -> the module (relative to ``package``) that defines it.
    """

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        setattr(sys.modules[package], name, value)  # later look-ups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *exports})

    return __getattr__, __dir__
