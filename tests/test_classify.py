"""The crosslingual classification protocol (MLDoc) against hand-computed accuracies."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.evaluation.classify import (
    LabelledSet,
    classifier_split,
    majority_transfer,
    summarise,
    transfer_accuracy,
)


def _set(train, train_y, test, test_y) -> LabelledSet:
    return LabelledSet(
        np.array(train, dtype=float), np.array(train_y), np.array(test, dtype=float),
        np.array(test_y),
    )  # fmt: skip


@pytest.fixture
def sets():
    # Two classes on two axes. en: a clean training and test set. de: a clean training set,
    # but its first test document is labelled "a" while it lies on b's axis, so any
    # classifier that separates the axes gets de's test set half right.
    en = _set([[1, 0], [0.9, 0.1], [0, 1], [0.1, 0.9]], ["a", "a", "b", "b"],
              [[1, 0.2], [0.2, 1]], ["a", "b"])  # fmt: skip
    de = _set([[1, 0.05], [0.05, 1]], ["a", "b"], [[0.1, 1], [0, 1]], ["a", "b"])
    return {"en": en, "de": de}


def test_transfer_matrix_and_its_summary_match_a_hand_computation(sets):
    matrix = transfer_accuracy(sets, c=100.0)
    # every classifier separates the axes: en test 2/2 right, de test 1/2 right
    assert matrix == {"de": {"de": 0.5, "en": 1.0}, "en": {"de": 0.5, "en": 1.0}}
    s = summarise(matrix)
    assert s == {"same": pytest.approx(0.75), "cross": pytest.approx(0.75), "all": 0.75}


def test_within_language_only_has_no_cross_cells(sets):
    matrix = transfer_accuracy(sets, c=100.0, within_language_only=True)
    assert matrix == {"de": {"de": 0.5}, "en": {"en": 1.0}}
    assert summarise(matrix)["cross"] is None


def test_majority_reference_counts_the_training_majority(sets):
    sets = dict(sets)
    sets["fr"] = _set([[1, 0]] * 3 + [[0, 1]], ["b", "b", "b", "a"], [[0, 1]] * 4,
                      ["b", "a", "a", "a"])  # fmt: skip
    m = majority_transfer(sets)
    assert m["fr"] == {"de": 0.5, "en": 0.5, "fr": 0.25}  # predicts "b" everywhere
    assert m["en"]["fr"] == 0.75  # a tie a:2, b:2 goes to the smallest label, "a"


def test_a_language_with_one_label_trains_no_classifier(sets):
    sets = dict(sets)
    sets["es"] = _set([[1, 0]], ["a"], [[1, 0]], ["a"])
    matrix = transfer_accuracy(sets, c=100.0)
    assert "es" not in matrix and matrix["en"]["es"] == 1.0


def test_classifier_split_depends_on_seed_and_concept_only():
    concepts = np.array([f"c{i}" for i in range(2000)], dtype=object)
    mask = classifier_split(concepts, 0.5, seed=3)
    assert 0.45 < mask.mean() < 0.55
    # a concept's side does not depend on which other concepts are present
    np.testing.assert_array_equal(classifier_split(concepts[::7], 0.5, seed=3), mask[::7])
    assert (classifier_split(concepts, 0.5, seed=4) != mask).any()
