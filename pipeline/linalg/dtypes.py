"""The solvers' working precisions: one pass over X, a CG's vectors, a preconditioner's
products. Below the backend contract and the solvers, which both check dtypes with it."""

from __future__ import annotations

from typing import Any

import numpy as np

from pipeline.linalg.params import PASS_DTYPES

__all__ = ["PASS_DTYPES", "working_dtype"]


def working_dtype(value: Any, name: str = "dtype") -> np.dtype:
    """``value`` as a numpy dtype of :data:`PASS_DTYPES` (a CG's vectors, a preconditioner's
    products); ValueError naming ``name`` otherwise."""
    dtype = np.dtype(value)
    if dtype.name not in PASS_DTYPES:
        raise ValueError(f"{name} must be float32 or float64; got {dtype}")
    return dtype
