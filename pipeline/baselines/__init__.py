"""Classic crosslingual baselines (Platt et al. 2010) on the same corpus backend as Cr5.

Every ``fit_<method>(backend, *, r, ..., seed)`` returns a
:class:`~pipeline.baselines.common.BaselineResult` whose ``components[l]`` (shape (p_l, r))
embeds a TF-IDF row of language l as ``x @ components[l]``, like Cr5's Φ_lᵀ:

* :func:`~pipeline.baselines.untranslated.fit_untranslated` — TF-IDF cosine over the union
  vocabulary (identical strings shared); sparse selection maps;
* :func:`~pipeline.baselines.cl_lsi.fit_cl_lsi` — SVD of the concept × stacked-term matrix YᵀX;
* :func:`~pipeline.baselines.cca.fit_cca` — regularised (multi-set) CCA on concept-aligned views;
* :func:`~pipeline.baselines.opca.fit_opca` — oriented PCA, S v = σ (N + γI) v.
"""

from pipeline.baselines.cca import fit_cca
from pipeline.baselines.cl_lsi import fit_cl_lsi
from pipeline.baselines.common import BaselineResult, pencil_eigsh
from pipeline.baselines.opca import fit_opca
from pipeline.baselines.untranslated import fit_untranslated, selection_maps, union_vocabulary

#: ``train.method`` value -> fit function (Cr5 itself lives in :mod:`pipeline.linalg.cr5`).
FIT_FUNCTIONS = {
    "untranslated": fit_untranslated,
    "cl_lsi": fit_cl_lsi,
    "cca": fit_cca,
    "opca": fit_opca,
}

__all__ = [
    "FIT_FUNCTIONS",
    "BaselineResult",
    "fit_cca",
    "fit_cl_lsi",
    "fit_opca",
    "fit_untranslated",
    "pencil_eigsh",
    "selection_maps",
    "union_vocabulary",
]
