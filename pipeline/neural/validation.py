"""Validation P@1 of the neural methods, ranked among training documents as well.

The evaluation ranks a test document's translation among every document of the target
language up to ``evaluate.max_candidates`` (training documents included); ranking a
validation document's translation among the validation documents alone is an easier task,
on which a model that memorises its training pairs looks far better than it is
(docs/neural.md, "The candidate pool"). So the epoch is chosen with a seeded sample of each
language's training documents added to the candidates
(``train.<method>.validation_distractors``).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from pipeline.linalg.monitor import (
    directions_p_at_1,
    distractor_rows,
    shared_concept_directions,
)

__all__ = ["distractor_rows", "validation_p_at_1"]


def validation_p_at_1(
    embeddings: Mapping[str, np.ndarray],
    concepts: Mapping[str, np.ndarray],
    distractors: Mapping[str, np.ndarray] | None = None,
) -> float | None:
    """Mean P@1 (cosine) over the ordered pairs of languages sharing a validation concept
    (:func:`pipeline.linalg.monitor.directions_p_at_1`, the Cr5 monitor's ranking).

    ``embeddings[l]`` (m_l, d) and ``concepts[l]`` (m_l,): the validation documents of
    language l; ``distractors[l]`` (k_l, d): embeddings of training documents of l (whose
    concepts are not validation concepts), added to the candidates of every direction into
    l. None when no pair shares a concept.
    """
    directions = shared_concept_directions(concepts)
    if not directions:
        return None
    return directions_p_at_1(directions, embeddings, "cosine", distractors)[0]
