"""Classic crosslingual baselines (Platt et al. 2010) on the same corpus backend as Cr5.

Every ``fit_<method>(backend, *, r, ..., seed)`` returns a
:class:`~pipeline.baselines.common.BaselineResult` whose ``components[l]`` (shape (p_l, r))
embeds a TF-IDF row of language l as ``x @ components[l]``, like Cr5's Φ_lᵀ:

* :func:`~pipeline.baselines.untranslated.fit_untranslated` — TF-IDF cosine over the union
  vocabulary (identical strings shared); sparse selection maps;
* :func:`~pipeline.baselines.cl_lsi.fit_cl_lsi` — SVD of the concept × stacked-term matrix YᵀX;
* :func:`~pipeline.baselines.cca.fit_cca` — regularised (multi-set) CCA on concept-aligned views;
* :func:`~pipeline.baselines.opca.fit_opca` — oriented PCA, S v = σ (N + γI) v.

They share the solver parameters of :class:`pipeline.linalg.params.Cr5Params`; γ is declared
in :mod:`pipeline.baselines.params` (the configuration's ``train`` section embeds both). The
names below load on first use (:mod:`pipeline.lazy`), so that importing that module loads no
numpy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.lazy import lazy_exports

if TYPE_CHECKING:
    from pipeline.baselines.cca import fit_cca
    from pipeline.baselines.cl_lsi import fit_cl_lsi
    from pipeline.baselines.common import BaselineResult, pencil_eigsh
    from pipeline.baselines.opca import fit_opca
    from pipeline.baselines.params import BaselineParams
    from pipeline.baselines.registry import FIT_FUNCTIONS
    from pipeline.baselines.untranslated import fit_untranslated, selection_maps, union_vocabulary

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "fit_cca": "cca",
        "fit_cl_lsi": "cl_lsi",
        "BaselineResult": "common",
        "pencil_eigsh": "common",
        "fit_opca": "opca",
        "BaselineParams": "params",
        "FIT_FUNCTIONS": "registry",
        "fit_untranslated": "untranslated",
        "selection_maps": "untranslated",
        "union_vocabulary": "untranslated",
    },
)

__all__ = [
    "FIT_FUNCTIONS",
    "BaselineParams",
    "BaselineResult",
    "fit_cca",
    "fit_cl_lsi",
    "fit_opca",
    "fit_untranslated",
    "pencil_eigsh",
    "selection_maps",
    "union_vocabulary",
]
