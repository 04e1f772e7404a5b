"""A fitted method as the model writer takes it: :class:`FittedModel`.

Every method's fit (:attr:`pipeline.methods.spec.MethodSpec.fit`) ends in one, whatever its
family, so the training service (:mod:`pipeline.training.service`) writes every model the
same way. It has a module of its own so that the fits and the service both import it without
importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from pipeline.baselines.common import BaselineResult

__all__ = ["FittedModel"]


@dataclass
class FittedModel:
    """A fitted method, as the model writer needs it.

    Attributes
    ----------
    components : dict of str to ndarray of shape (p_l, r)
        Per-language maps Φ_lᵀ (scipy sparse CSR of shape (p_l, |union vocabulary|) for the
        untranslated baseline; the network's weights for an encoder method).
    means : dict of str to ndarray of shape (p_l,)
        The centring each language's map was fitted with (empty when the method has none).
    eigenvalues : ndarray of shape (r,)
        The method's leading eigenvalues, descending (empty for untranslated).
    history : dict
        The solver's JSON-serialisable record.
    n_iter : int or None
        Eigensolver iterations (None for untranslated).
    shared : dict of str to ndarray
        Model-wide arrays: Λ and Q of Φ*Φ*ᵀ = QΛQᵀ for Cr5 (the Φ* word vectors are
        Φ_lᵀ Λ^{1/2} Qᵀ); an encoder's sentencepiece model; empty for the baselines.
    started_from : str or None
        Cr5's eigensolver start: ``"surrogate"`` or ``"previous_fit"``.
    path_from : float or None
        λ of the fit Cr5 started from.
    path_fits : list of dict
        One record per fit of ``train.path_factors``.
    folding_in : dict or None
        The topic models' embedding settings (the maps are topic-word matrices), else None.
    offsets : dict of str to ndarray of shape (r,)
        Per language, the vector subtracted from its embeddings
        (:attr:`pipeline.model.format.LanguageMap.offset`); empty for most methods.

    The method's similarity is its spec's (:attr:`~pipeline.methods.spec.MethodSpec.similarity`).
    """

    components: dict[str, Any]
    means: dict[str, np.ndarray]
    eigenvalues: np.ndarray
    history: dict[str, Any]
    n_iter: int | None
    shared: dict[str, np.ndarray] = field(default_factory=dict)
    started_from: str | None = None
    path_from: float | None = None
    path_fits: list[dict[str, Any]] = field(default_factory=list)
    folding_in: dict[str, Any] | None = None
    offsets: dict[str, np.ndarray] = field(default_factory=dict)

    @classmethod
    def from_baseline(
        cls,
        result: BaselineResult,
        *,
        n_iter: int | None,
        history: dict[str, Any] | None = None,
    ) -> FittedModel:
        """A baseline's result (:class:`~pipeline.baselines.common.BaselineResult`, what the
        classic methods' solvers return): its maps, centring (none: empty), eigenvalues,
        history (or ``history`` instead) and folding-in settings, with ``n_iter`` read from
        its history as the method's fit knows it."""
        return cls(
            components=result.components,
            means=result.mean or {},
            eigenvalues=result.eigenvalues,
            history=result.history if history is None else history,
            n_iter=n_iter,
            folding_in=result.folding_in,
        )
