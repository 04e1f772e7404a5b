"""The baselines by ``train.method`` value: :data:`FIT_FUNCTIONS`."""

from __future__ import annotations

from collections.abc import Callable

from pipeline.baselines.cca import fit_cca
from pipeline.baselines.cl_lsi import fit_cl_lsi
from pipeline.baselines.common import BaselineResult
from pipeline.baselines.opca import fit_opca
from pipeline.baselines.untranslated import fit_untranslated

__all__ = ["FIT_FUNCTIONS"]

#: ``train.method`` value -> fit function (Cr5 itself lives in :mod:`pipeline.linalg.cr5`).
FIT_FUNCTIONS: dict[str, Callable[..., BaselineResult]] = {
    "untranslated": fit_untranslated,
    "cl_lsi": fit_cl_lsi,
    "cca": fit_cca,
    "opca": fit_opca,
}
