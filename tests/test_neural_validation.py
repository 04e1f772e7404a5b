"""The neural methods' validation P@1 with training documents among the candidates, against
a hand-made example."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.neural.validation import distractor_rows, validation_p_at_1


def test_validation_p_at_1_by_hand():
    # two languages, two validation concepts; a's documents point along x and y, b's too
    emb = {"a": np.array([[1.0, 0.0], [0.0, 1.0]]), "b": np.array([[0.0, 2.0], [3.0, 0.1]])}
    concepts = {"a": np.array([10, 20]), "b": np.array([20, 10])}
    # without distractors every translation is the nearest: P@1 = 1 both ways
    assert validation_p_at_1(emb, concepts) == 1.0
    # a training document of b nearer to a's concept-10 document than its translation:
    # a->b loses one of two queries (0.5), b->a keeps both (1.0): mean 0.75
    extra = {"b": np.array([[1.0, 0.0]])}
    assert validation_p_at_1(emb, concepts, extra) == pytest.approx(0.75)
    # a tie with the target counts against it (the project's ranking rule)
    tie = {"b": np.array([[3.0, 0.1]])}
    assert validation_p_at_1(emb, concepts, tie) == pytest.approx(0.75)
    # no shared concept: no score
    assert validation_p_at_1(emb, {"a": np.array([1, 2]), "b": np.array([3, 4])}) is None


def test_distractor_rows_are_a_seeded_sample():
    a, b = distractor_rows(100, 10, seed=3), distractor_rows(100, 10, seed=3)
    np.testing.assert_array_equal(a, b)
    assert a.size == 10 and np.all(np.diff(a) > 0) and a.max() < 100
    assert distractor_rows(5, 10).tolist() == [0, 1, 2, 3, 4]
    assert distractor_rows(5, 0).size == 0
