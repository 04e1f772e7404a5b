"""The solvers' working precisions: one pass over X, a CG's vectors, a preconditioner's
products. Below the backend contract and the solvers, which both check dtypes with it."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["PASS_DTYPES", "working_dtype"]

#: Allowed values of the backend ``dtype`` option (the arithmetic of one pass over X), and of
#: the solvers' working precisions (:func:`working_dtype`).
PASS_DTYPES = ("float32", "float64")


def working_dtype(value: Any, name: str = "dtype") -> np.dtype:
    """``value`` as a numpy dtype of :data:`PASS_DTYPES` (a CG's vectors, a preconditioner's
    products); ValueError naming ``name`` otherwise."""
    dtype = np.dtype(value)
    if dtype.name not in PASS_DTYPES:
        raise ValueError(f"{name} must be float32 or float64; got {dtype}")
    return dtype
