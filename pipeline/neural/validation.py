"""Validation P@1 of the neural methods, ranked among training documents as well.

The evaluation ranks a test document's translation among every document of the target
language up to ``evaluate.max_candidates`` (training documents included); ranking a
validation document's translation among the validation documents alone is an easier task,
on which a model that memorises its training pairs looks far better than it is
(docs/neural.md, "The candidate pool"). So the epoch is chosen with a seeded sample of each
language's training documents added to the candidates (``train.neural_validation_distractors``).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from pipeline.ranking import pessimistic_ranks

__all__ = ["distractor_rows", "validation_p_at_1"]


def distractor_rows(n_rows: int, count: int, seed: int = 0) -> np.ndarray:
    """A seeded sorted sample of ``min(count, n_rows)`` row indices out of ``n_rows``: the
    same rows every epoch, so the scores of two epochs compare."""
    k = min(count, n_rows)
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    return np.sort(np.random.default_rng(seed).choice(n_rows, size=k, replace=False))


def _unit(e: np.ndarray) -> np.ndarray:
    e = np.asarray(e, dtype=np.float64)
    n = np.linalg.norm(e, axis=1, keepdims=True)
    return e / np.where(n > 0, n, 1.0)


def validation_p_at_1(
    embeddings: Mapping[str, np.ndarray],
    concepts: Mapping[str, np.ndarray],
    distractors: Mapping[str, np.ndarray] | None = None,
) -> float | None:
    """Mean P@1 (cosine) over the ordered pairs of languages sharing a validation concept.

    ``embeddings[l]`` (m_l, d) and ``concepts[l]`` (m_l,): the validation documents of
    language l; ``distractors[l]`` (k_l, d): embeddings of training documents of l (whose
    concepts are not validation concepts), added to the candidates of every direction into
    l. Ties count against the target (:mod:`pipeline.ranking`). None when no pair shares a
    concept.
    """
    unit = {lang: _unit(e) for lang, e in embeddings.items()}
    extra = {lang: _unit(e) for lang, e in (distractors or {}).items()}
    scores = []
    for l1 in sorted(unit):
        for l2 in sorted(unit):
            if l1 == l2:
                continue
            c1, c2 = np.asarray(concepts[l1]), np.asarray(concepts[l2])
            _, i1, i2 = np.intersect1d(c1, c2, return_indices=True)
            if not i1.size:
                continue
            candidates = unit[l2]
            if l2 in extra and len(extra[l2]):
                candidates = np.vstack([candidates, extra[l2]])
            ranks = pessimistic_ranks(unit[l1][i1] @ candidates.T, i2)
            scores.append(float(np.mean(ranks == 1)))
    return float(np.mean(scores)) if scores else None
