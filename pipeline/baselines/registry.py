"""The baselines by ``train.method`` value: :data:`FIT_FUNCTIONS`."""

from __future__ import annotations

from collections.abc import Callable

from pipeline.baselines.cca import fit_cca
from pipeline.baselines.cl_lsi import fit_cl_lsi
from pipeline.baselines.common import BaselineResult
from pipeline.baselines.opca import fit_opca
from pipeline.baselines.params import GROUPED_METHODS, TOPIC_METHODS
from pipeline.baselines.plsa import fit_cplsa, fit_jplsa
from pipeline.baselines.s2net import fit_s2net
from pipeline.baselines.untranslated import fit_untranslated

__all__ = ["FIT_FUNCTIONS", "GROUPED_METHODS", "TOPIC_METHODS"]

#: ``train.method`` value -> fit function (Cr5 itself lives in :mod:`pipeline.linalg.cr5`).
#: The first four take a :class:`~pipeline.linalg.backend.CorpusBackend`; jplsa, cplsa and
#: s2net a :class:`~pipeline.linalg.groups.GroupedCorpus` (s2net also OPCA's map to start from).
FIT_FUNCTIONS: dict[str, Callable[..., BaselineResult]] = {
    "untranslated": fit_untranslated,
    "cl_lsi": fit_cl_lsi,
    "cca": fit_cca,
    "opca": fit_opca,
    "jplsa": fit_jplsa,
    "cplsa": fit_cplsa,
    "s2net": fit_s2net,
}
