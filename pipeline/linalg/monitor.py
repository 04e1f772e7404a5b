"""What each eigensolver iteration is worth: the Cr5 objective, σ and validation retrieval.

The residual rule (``train.eig_rtol``) stops the eigensolver when every Ritz pair is accurate;
but the stopping point acts as a regulariser, and "more converged" is not "better retrieval"
(a tighter ``eig_rtol`` can lower P@1). This module measures, after every iteration, from
the Ritz pairs the eigensolver has anyway:

- the reduced-rank ridge objective ``‖Ŷ − X̂W‖² + λ‖W‖²`` of ``W = Â⁻¹C P Pᵀ`` for the current
  Ritz vectors P: it equals ``‖Ŷ‖² − tr(PᵀMP) = n(1 − ‖ν‖²) − Σθ_i`` (each document has one
  concept), so it costs nothing; ``relative_objective`` divides by ``‖Ŷ‖²``;
- σ_i = √θ_i, the singular values of ``Â^{-1/2} C P`` (first and r-th);
- optionally P@1 on a small **validation set** (documents of held-out concepts, a TF-IDF row
  block per language): every ordered pair of languages, queries of one language against all
  validation documents of the other, cosine similarity in the space of the current Φ (Eq. 15).

With ``stop_rule="validation"`` the monitor stops the eigensolver when validation P@1 has not
improved by more than ``min_delta`` for ``patience`` iterations, and keeps the best
iteration's Φ*ᵀ so that the solver returns it (the residual rule still ends the run if it is
met first; :attr:`IterationMonitor.stopped_by` says which rule stopped). The validation set
may carry training rows as further candidates (``ValidationSet.distractors``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from pipeline.linalg.dense import tall_matmul, tall_t_matmul
from pipeline.linalg.errors import SolverArgumentError
from pipeline.linalg.image_projections import ImageProjections, map_from_gram
from pipeline.ranking import pessimistic_ranks

__all__ = [
    "IterationMonitor",
    "ValidationSet",
    "directions_p_at_1",
    "distractor_rows",
    "neg_l1_scores",
    "orthonormal_rows",
    "orthonormalising_map",
    "shared_concept_directions",
]

logger = logging.getLogger(__name__)

STOP_RULES = ("residual", "validation")


def orthonormalising_map(phi_star_t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Eq. 15's r x r map: ``Φ*Φ*ᵀ = QΛQᵀ`` and ``T = Q Λ^{-1/2}``, so ``Φᵀ = Φ*ᵀ T``.

    Parameters
    ----------
    phi_star_t : ndarray of shape (p, r)
        float32 or float64; the Gram is formed in float64 either way.

    Returns
    -------
    t : ndarray of shape (r, r), float64 (columns for Λ <= 0 are zero)
    lam : ndarray of shape (r,), descending (may contain values <= 0 if Φ* is singular)
    q : ndarray of shape (r, r)
    """
    return map_from_gram(tall_t_matmul(phi_star_t, phi_star_t, dtype=np.float64))


def orthonormal_rows(
    phi_star_t: np.ndarray, *, in_place: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Eq. 15: ``Φ*Φ*ᵀ = QΛQᵀ``, ``Φᵀ = Φ*ᵀ Q Λ^{-1/2}``.

    Parameters
    ----------
    phi_star_t : ndarray of shape (p, r)
        float32 or float64; the Gram is formed in float64 either way, Φᵀ comes in
        ``phi_star_t``'s dtype (float32 images need no p x r float64 copies).
    in_place : bool
        Write Φᵀ over ``phi_star_t`` (row step by row step: a row of Φᵀ needs only its row
        of Φ*ᵀ), so the step holds one p x r array, not two (at 28 languages the two were
        the driver's largest term).

    Returns
    -------
    phi_t : ndarray of shape (p, r), orthonormal columns, ordered by decreasing Λ
    lam : ndarray of shape (r,), descending (may contain values <= 0 if Φ* is singular)
    q : ndarray of shape (r, r)
    """
    t, lam, q = orthonormalising_map(phi_star_t)
    out = phi_star_t if in_place else None
    return tall_matmul(phi_star_t, t.astype(phi_star_t.dtype), out=out), lam, q


def neg_l1_scores(q: np.ndarray, c: np.ndarray, max_elements: int = 1 << 22) -> np.ndarray:
    """``-‖q_i − c_j‖₁`` for every pair: ndarray of shape (n_q, n_c) (queries in chunks of
    at most ``max_elements`` difference entries)."""
    out = np.empty((q.shape[0], c.shape[0]))
    step = max(1, max_elements // max(1, c.shape[0] * max(1, c.shape[1])))
    for lo in range(0, q.shape[0], step):
        out[lo : lo + step] = -np.abs(q[lo : lo + step, None, :] - c[None, :, :]).sum(axis=2)
    return out


#: (query language, target language, query rows, their targets' rows) of one direction
Direction = tuple[str, str, np.ndarray, np.ndarray]


def shared_concept_directions(concepts: Mapping[str, np.ndarray]) -> list[Direction]:
    """Every ordered pair of languages with a concept in common, and the rows of the shared
    concepts on each side (``concepts[l]``: the concept of each row of language l)."""
    out = []
    langs = sorted(concepts)
    for l1 in langs:
        for l2 in langs:
            if l1 == l2:
                continue
            c1, c2 = np.asarray(concepts[l1]), np.asarray(concepts[l2])
            shared, i1, i2 = np.intersect1d(c1, c2, return_indices=True)
            if shared.size:
                out.append((l1, l2, i1, i2))
    return out


def distractor_rows(n_rows: int, count: int, seed: int = 0) -> np.ndarray:
    """A seeded sorted sample of ``min(count, n_rows)`` row indices out of ``n_rows``: the
    same rows every epoch, so the scores of two epochs compare."""
    k = min(count, n_rows)
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    return np.sort(np.random.default_rng(seed).choice(n_rows, size=k, replace=False))


def _for_scoring(e: np.ndarray, similarity: str) -> np.ndarray:
    e = np.asarray(e, dtype=np.float64)
    if similarity == "cosine":
        norms = np.linalg.norm(e, axis=1, keepdims=True)
        e = e / np.where(norms > 0, norms, 1.0)
    return e


def directions_p_at_1(
    directions: list[Direction],
    embeddings: Mapping[str, np.ndarray],
    similarity: str = "cosine",
    distractors: Mapping[str, np.ndarray] | None = None,
) -> tuple[float, dict[str, float]]:
    """Mean P@1 over ``directions`` (:func:`shared_concept_directions`), and per direction.

    ``embeddings[l]`` (m_l, r): the validation rows of language l; ``distractors[l]``
    (k_l, r): further candidates of every direction into l (rows of other concepts, e.g.
    training documents: the evaluation ranks among those too). ``similarity``:
    ``"cosine"``, or ``"l1"`` (score = minus the L1 distance, for topic distributions). Ties
    count against the target (:mod:`pipeline.ranking`).
    """
    if not directions:
        raise ValueError("the validation set has no pair of languages sharing a concept")
    if similarity not in ("cosine", "l1"):
        raise ValueError(f"similarity must be 'cosine' or 'l1'; got {similarity!r}")
    emb = {lang: _for_scoring(e, similarity) for lang, e in embeddings.items()}
    for lang, extra in (distractors or {}).items():
        if len(extra) and lang in emb:
            emb[lang] = np.vstack([emb[lang], _for_scoring(extra, similarity)])
    per = {}
    for l1, l2, i1, i2 in directions:
        if similarity == "cosine":
            scores = emb[l1][i1] @ emb[l2].T
        else:
            scores = neg_l1_scores(emb[l1][i1], emb[l2])
        # the project's ranking rule: a candidate tying with the target counts against it
        ranks = pessimistic_ranks(scores, i2)
        per[f"{l1}->{l2}"] = float(np.mean(ranks == 1))
    return float(np.mean(list(per.values()))), per


@dataclass
class ValidationSet:
    """Documents of held-out concepts, scored at every eigensolver iteration.

    Attributes
    ----------
    rows : dict of str to csr_matrix of shape (m_l, p_l)
        TF-IDF rows (the training vocabulary and IDF, L2-normalised) per language.
    concepts : dict of str to ndarray of shape (m_l,)
        The concept of each row (any comparable ids; a concept at most once per language).
    distractors : dict of str to csr_matrix of shape (k_l, p_l), optional
        Rows of other concepts (training documents), further candidates of every direction
        into language l, as the evaluation's pool holds every document.
    """

    rows: Mapping[str, sp.csr_matrix]
    concepts: Mapping[str, np.ndarray]
    distractors: Mapping[str, sp.csr_matrix] | None = None
    _directions: list[Direction] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        if set(self.rows) != set(self.concepts):
            raise ValueError(
                f"validation rows and concepts name different languages: {sorted(self.rows)} "
                f"vs {sorted(self.concepts)}"
            )
        for lang, x in self.rows.items():
            c = np.asarray(self.concepts[lang])
            if x.shape[0] != c.shape[0]:
                raise ValueError(
                    f"validation language {lang!r}: {x.shape[0]} rows but {c.shape[0]} concepts"
                )
            if np.unique(c).size != c.size:
                raise ValueError(f"validation language {lang!r}: a concept appears twice")
        for lang, x in (self.distractors or {}).items():
            if lang not in self.rows or x.shape[1] != self.rows[lang].shape[1]:
                raise ValueError(
                    f"distractor rows of {lang!r} do not match a validation language's terms"
                )
        self._directions.extend(shared_concept_directions(self.concepts))

    @property
    def directions(self) -> list[str]:
        """``"l1->l2"`` for every ordered pair with at least one shared concept."""
        return [f"{l1}->{l2}" for l1, l2, _, _ in self._directions]

    def p_at_1(
        self,
        phi_t: Mapping[str, np.ndarray],
        transform: np.ndarray | None = None,
        distractor_rows: Mapping[str, sp.spmatrix] | None = None,
    ) -> tuple[float, dict[str, float]]:
        """Mean P@1 (cosine) over the directions, and per direction.

        ``phi_t[l]`` (p_l, r'): the map of language l (``Φ_lᵀ``), or with ``transform``
        (r', r) the map ``phi_t[l] @ transform``, applied to the r'-dimensional embeddings of
        the validation rows instead of to the p_l x r' map (the monitor passes Φ*ᵀ and
        Eq. 15's r x r map: no p x r product per iteration). The candidates of a direction
        l1->l2 are all validation documents of l2, and ``distractor_rows[l2]`` (k, p_l2)
        when given (rows of other concepts, e.g. training documents; default: the set's own
        ``distractors``), embedded alike.
        """
        if not self._directions:
            raise ValueError("the validation set has no pair of languages sharing a concept")

        def embed(lang: str, x: sp.spmatrix) -> np.ndarray:
            # in float64 (a float32 map is cast per language, p_l x r', not the p x r Φᵀ):
            # float32 embeddings could move near-ties, and with them a validation stop
            e = np.asarray(x @ np.asarray(phi_t[lang], dtype=np.float64))
            return e if transform is None else e @ transform

        emb = {lang: embed(lang, x) for lang, x in self.rows.items()}
        extra = {
            lang: embed(lang, x)
            for lang, x in (
                (self.distractors or {}) if distractor_rows is None else distractor_rows
            ).items()
            if lang in emb and x.shape[0]
        }
        return self.p_at_1_of(emb, distractors=extra or None)

    def scored_rows(self) -> dict[str, sp.csr_matrix]:
        """Per language, the validation rows with the distractor rows below them: what the
        monitor projects (:meth:`split_scored` parts the embeddings again)."""
        extra = self.distractors or {}
        return {
            lang: sp.vstack([x, extra[lang]], format="csr") if lang in extra else x
            for lang, x in self.rows.items()
        }

    def split_scored(
        self, embeddings: Mapping[str, np.ndarray]
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray] | None]:
        """Embeddings of :meth:`scored_rows` parted into the validation rows' and the
        distractors' (None without distractors)."""
        val = {lang: e[: self.rows[lang].shape[0]] for lang, e in embeddings.items()}
        if not self.distractors:
            return val, None
        return val, {
            lang: e[self.rows[lang].shape[0] :]
            for lang, e in embeddings.items()
            if lang in self.distractors
        }

    def p_at_1_of(
        self,
        embeddings: Mapping[str, np.ndarray],
        similarity: str = "cosine",
        distractors: Mapping[str, np.ndarray] | None = None,
    ) -> tuple[float, dict[str, float]]:
        """Mean P@1 over the directions, and per direction, of given embeddings
        (:func:`directions_p_at_1`): ``embeddings[l]`` (m_l, r), the validation rows of
        language l embedded by any method; ``distractors[l]``, further candidates."""
        return directions_p_at_1(self._directions, embeddings, similarity, distractors)


@dataclass
class _Best:
    """The best iteration so far; ``images`` (its Φ*ᵀ) may wait in ``pending`` (a function
    that makes it) until :meth:`IterationMonitor.materialise`."""

    iteration: int
    score: float
    eigenvalues: np.ndarray
    images: np.ndarray | None
    pending: Callable[[], np.ndarray] | None = None


class IterationMonitor:
    """Records the objective, σ and (with a validation set) P@1 of each iteration; decides
    whether a validation stop rule ends the eigensolver.

    Parameters
    ----------
    y_norm_sq : float
        ``‖Ŷ‖²_F = n (1 − ‖ν‖²)``.
    split : callable
        Splits a stacked (p, r) array into per-language blocks (``TermLayout.split``).
    r : int
    validation : ValidationSet, optional
    stop_rule : {"residual", "validation"}
    patience : int
        Iterations without improvement before a validation stop.
    min_delta : float
        An improvement must exceed this (in P@1) to count.
    """

    def __init__(
        self,
        *,
        y_norm_sq: float,
        split: Callable[[np.ndarray], Mapping[str, np.ndarray]],
        r: int,
        validation: ValidationSet | None = None,
        stop_rule: str = "residual",
        patience: int = 1,
        min_delta: float = 0.0,
    ) -> None:
        if stop_rule not in STOP_RULES:
            raise SolverArgumentError(
                "stop_rule", f"stop_rule must be one of {STOP_RULES}; got {stop_rule!r}"
            )
        if stop_rule == "validation" and validation is None:
            raise SolverArgumentError(
                "stop_rule",
                "stop_rule='validation' needs validation documents (a ValidationSet); "
                "give them, or use stop_rule='residual'",
            )
        if patience < 1:  # the solver's stop_patience
            raise SolverArgumentError("stop_patience", f"patience must be >= 1; got {patience}")
        self.y_norm_sq = float(y_norm_sq)
        self.split = split
        self.r = int(r)
        self.validation = validation
        self.stop_rule = stop_rule
        self.patience = int(patience)
        self.min_delta = float(min_delta)
        self.records: list[dict[str, Any]] = []
        self.best: _Best | None = None
        self.stopped_by: str | None = None
        self._projections: ImageProjections | None = None

    def observe(
        self,
        iteration: int,
        theta: np.ndarray,
        images: Callable[[], np.ndarray] | None,
        *,
        projected: tuple[Sequence[np.ndarray], np.ndarray] | None = None,
    ) -> bool:
        """Record iteration ``iteration`` (top Ritz values ``theta``, descending); return True
        when the validation rule says stop.

        ``projected = (blocks, coef)``: Φ*ᵀ of the current Ritz vectors is
        ``hstack(blocks) @ coef`` (the eigensolver's kept images and Ritz coefficients). With
        a validation set, the iteration is scored from the blocks' projections
        (:mod:`~pipeline.linalg.image_projections`), without forming Φ*ᵀ; ``images()``
        makes Φ*ᵀ (p, r) as a new array, and under the validation rule a new best iteration
        keeps it to call later (:meth:`materialise`, before the blocks change)."""
        t0 = time.perf_counter()
        theta = np.asarray(theta, dtype=np.float64)[: self.r]
        if theta.size < self.r or not np.all(np.isfinite(theta)):
            return False  # the basis is still narrower than r: no r-dimensional solution yet
        rec: dict[str, Any] = {"iteration": int(iteration)}
        objective = self.y_norm_sq - float(theta.sum())
        rec["objective"] = objective
        rec["relative_objective"] = objective / self.y_norm_sq if self.y_norm_sq else None
        sigma = np.sqrt(np.maximum(theta, 0.0))
        rec["sigma_1"], rec["sigma_r"] = float(sigma[0]), float(sigma[-1])
        if self.validation is not None and projected is not None:
            blocks, coef = projected
            if self._projections is None:
                self._projections = ImageProjections(self.validation.scored_rows(), self.split)
            self._projections.update(blocks)
            transform = map_from_gram(self._projections.gram(coef))[0]
            emb, extra = self.validation.split_scored(self._projections.embeddings(coef, transform))
            score, per = self.validation.p_at_1_of(emb, distractors=extra)
            rec["validation_p_at_1"] = score
            rec["validation_per_direction"] = per
            if self.best is None or score > self.best.score + self.min_delta:
                # only the validation rule returns the best iteration's model: under the
                # residual rule its Φ*ᵀ (p x r) would be made at restarts and at the end
                # for nothing, the driver's largest transient at scale
                keep = images if self.stop_rule == "validation" else None
                self.best = _Best(int(iteration), score, theta.copy(), None, keep)

        rec["seconds"] = round(time.perf_counter() - t0, 4)
        self.records.append(rec)
        if "validation_p_at_1" in rec:
            logger.info(
                "cr5 monitor it=%d objective=%.6g sigma_r=%.4g validation P@1=%.4f (best %.4f "
                "at it=%d)",
                iteration,
                rec["objective"],
                rec["sigma_r"],
                rec["validation_p_at_1"],
                self.best.score,
                self.best.iteration,
            )
        if self.stop_rule != "validation" or self.best is None:
            return False
        if iteration - self.best.iteration >= self.patience:
            self.stopped_by = "validation"
            return True
        return False

    def materialise(self) -> None:
        """Make the best iteration's Φ*ᵀ if it is still pending (the eigensolver calls this
        before a thick restart replaces the images it was made from, and at its end)."""
        best = self.best
        if best is not None and best.images is None and best.pending is not None:
            best.images, best.pending = best.pending(), None

    def settle(self, last_iteration: int) -> None:
        """At the eigensolver's end: make the best iteration's Φ*ᵀ if the run went past it,
        else drop its pending maker (the result's images are that iteration's Φ*ᵀ), which
        would otherwise keep the image blocks alive through Φ's step."""
        best = self.best
        if best is None:
            return
        if best.iteration != last_iteration:
            self.materialise()
        else:
            best.pending = None

    def to_history(self, eigensolver_stopped_by: str) -> dict:
        """``history["stopping"]``: the rule asked for, the rule that stopped (``validation``,
        ``residual`` or ``maxiter``), per-iteration records, and (with a validation set) the
        best iteration."""
        stopped_by = "validation" if eigensolver_stopped_by == "monitor" else eigensolver_stopped_by
        out: dict[str, Any] = {
            "rule": self.stop_rule,
            "stopped_by": stopped_by,
            "patience": self.patience if self.stop_rule == "validation" else None,
            "iterations": self.records,
        }
        if self.best is not None:
            out["best_iteration"] = self.best.iteration
            out["best_validation_p_at_1"] = self.best.score
        if self.validation is not None:
            out["validation_documents"] = {
                lang: int(x.shape[0]) for lang, x in sorted(self.validation.rows.items())
            }
            out["validation_directions"] = self.validation.directions
            out["validation_distractors"] = {
                lang: int(x.shape[0])
                for lang, x in sorted((self.validation.distractors or {}).items())
            }
        return out
