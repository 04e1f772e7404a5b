"""Classic crosslingual baselines (Platt et al. 2010) on the same corpus backend as Cr5.

Every ``fit_<method>(backend, *, r, ..., seed)`` returns a
:class:`~pipeline.baselines.common.BaselineResult` whose ``components[l]`` (shape (p_l, r))
embeds a TF-IDF row of language l as ``x @ components[l]``, like Cr5's Φ_lᵀ:

* :func:`~pipeline.baselines.untranslated.fit_untranslated` — TF-IDF cosine over the union
  vocabulary (identical strings shared); sparse selection maps;
* :func:`~pipeline.baselines.cl_lsi.fit_cl_lsi` — SVD of the concept × stacked-term matrix YᵀX;
* :func:`~pipeline.baselines.cca.fit_cca` — regularised (multi-set) CCA on concept-aligned views;
* :func:`~pipeline.baselines.opca.fit_opca` — oriented PCA, S v = σ (N + γI) v;
* :func:`~pipeline.baselines.plsa.fit_jplsa`, :func:`~pipeline.baselines.plsa.fit_cplsa` —
  topic models of the concepts (joint, and coupled by posterior regularisation), MAP EM on a
  :class:`~pipeline.linalg.groups.GroupedCorpus` of term counts; their ``components[l]`` are
  topic-word matrices that embed by folding-in (:mod:`pipeline.baselines.topics`);
* :func:`~pipeline.baselines.s2net.fit_s2net` — a siamese linear projection trained from
  OPCA's by mini-batch gradient descent on a GroupedCorpus of TF-IDF rows.

They share the solver parameters of :class:`pipeline.linalg.params.Cr5Params`; their own are
declared in :mod:`pipeline.baselines.params`, one class per method (the configuration's
sections ``train.<method>``). The names below load on first use (:mod:`pipeline.lazy`), so
that importing that module loads no numpy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.lazy import lazy_exports

if TYPE_CHECKING:
    from pipeline.baselines.cca import fit_cca
    from pipeline.baselines.cl_lsi import fit_cl_lsi
    from pipeline.baselines.common import BaselineResult, pencil_eigsh
    from pipeline.baselines.opca import fit_opca
    from pipeline.baselines.params import (
        CcaParams,
        CplsaParams,
        OpcaParams,
        PlsaParams,
        S2NetParams,
    )
    from pipeline.baselines.plsa import fit_cplsa, fit_jplsa
    from pipeline.baselines.s2net import fit_s2net
    from pipeline.baselines.topics import fold_in
    from pipeline.baselines.untranslated import fit_untranslated, selection_maps, union_vocabulary

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "fit_cca": "cca",
        "fit_cl_lsi": "cl_lsi",
        "BaselineResult": "common",
        "pencil_eigsh": "common",
        "fit_opca": "opca",
        "CcaParams": "params",
        "CplsaParams": "params",
        "OpcaParams": "params",
        "PlsaParams": "params",
        "S2NetParams": "params",
        "fit_cplsa": "plsa",
        "fit_jplsa": "plsa",
        "fit_s2net": "s2net",
        "fold_in": "topics",
        "fit_untranslated": "untranslated",
        "selection_maps": "untranslated",
        "union_vocabulary": "untranslated",
    },
)

__all__ = [
    "BaselineResult",
    "CcaParams",
    "CplsaParams",
    "OpcaParams",
    "PlsaParams",
    "S2NetParams",
    "fit_cca",
    "fit_cl_lsi",
    "fit_cplsa",
    "fit_jplsa",
    "fit_opca",
    "fit_s2net",
    "fit_untranslated",
    "fold_in",
    "pencil_eigsh",
    "selection_maps",
    "union_vocabulary",
]
