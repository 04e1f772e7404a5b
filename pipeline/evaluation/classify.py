"""Crosslingual document classification transfer (the MLDoc protocol) for every method.

A linear classifier is trained on the document embeddings of one language and tested on the
embeddings of every language: accuracy per (train language, test language). ``same`` is the
mean of the diagonal (train and test language equal), ``cross`` the mean off the diagonal
(the classifier never saw a label in the test language), ``all`` the mean of every cell.

Documents are those of held-out concepts (never seen by any method's training) that carry a
label; the concepts are split once, by a seeded hash, into classifier-training and
classifier-test concepts, so no test concept is a training concept in any language (a
translation of a training document never counts as a test document). Two references are
computed on the same documents:

- ``majority``: the most frequent label of the training language's training documents, for
  every test document (an accuracy any classifier should beat);
- ``tfidf``: the same linear classifier on the TF-IDF rows, within one language only (a
  TF-IDF space is not shared across languages, so it has no cross cells).

The classifier is scikit-learn's multinomial ``LogisticRegression`` (L2, ``lbfgs``) on
L2-normalised vectors; a zero vector (no known word) stays zero.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipeline.errors import ConfigError

log = logging.getLogger(__name__)

__all__ = [
    "LabelledSet",
    "classifier_split",
    "majority_transfer",
    "summarise",
    "transfer_accuracy",
]


@dataclass(frozen=True)
class LabelledSet:
    """The labelled documents of one language, split for the classifier.

    Attributes
    ----------
    train_x : ndarray or csr_matrix of shape (n_train, d)
    train_y : ndarray of str, shape (n_train,)
    test_x : ndarray or csr_matrix of shape (n_test, d)
    test_y : ndarray of str, shape (n_test,)
    """

    train_x: Any
    train_y: np.ndarray
    test_x: Any
    test_y: np.ndarray


def classifier_split(concepts: np.ndarray, train_fraction: float, seed: int) -> np.ndarray:
    """Boolean mask of shape (n,): True for the concepts whose documents train the classifier.

    A concept's side is a function of (seed, concept id) alone (SHA-256), so it is the same in
    every language and every run, whatever other concepts are present.
    """
    cut = int(train_fraction * 2**32)
    out = np.empty(len(concepts), dtype=bool)
    for i, c in enumerate(concepts):
        h = hashlib.sha256(f"{seed}:{c}".encode()).digest()
        out[i] = int.from_bytes(h[:4], "big") < cut
    return out


def unit_rows(x: Any) -> Any:
    """Rows scaled to unit L2 norm (zero rows stay zero); a sparse matrix stays sparse."""
    import scipy.sparse as sp

    if sp.issparse(x):
        norms = np.sqrt(np.asarray(x.multiply(x).sum(axis=1))).ravel()
        scale = np.divide(1.0, norms, out=np.zeros_like(norms), where=norms > 0)
        return sp.diags(scale) @ x
    x = np.asarray(x, dtype=np.float64)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)


def _classifier(c: float, seed: int) -> Any:
    try:
        from sklearn.linear_model import LogisticRegression
    except ImportError:
        raise ConfigError(
            "evaluate.classify_labels is set, but the classification evaluation needs "
            "scikit-learn, which is not installed. Fix: pip install 'cr5-on-spark[classify]' "
            "(or bash scripts/setup.sh dev), or unset evaluate.classify_labels"
        ) from None
    return LogisticRegression(C=c, max_iter=2000, random_state=seed)


def transfer_accuracy(
    sets: Mapping[str, LabelledSet],
    *,
    c: float = 1.0,
    seed: int = 0,
    within_language_only: bool = False,
) -> dict[str, dict[str, float]]:
    """Accuracy of a classifier trained on each language, tested on each language.

    Parameters
    ----------
    sets : mapping of language to LabelledSet
        Every language's vectors must share one space (same d) unless
        ``within_language_only``.
    c : float
        Inverse L2 regularisation strength of the logistic regression.
    within_language_only : bool
        Test each classifier on its own language only (the TF-IDF reference).

    Returns
    -------
    dict of train language to dict of test language to accuracy
        A training language with fewer than two labels has no classifier and is left out.
    """
    out: dict[str, dict[str, float]] = {}
    for src, s in sorted(sets.items()):
        if s.train_y.size == 0 or np.unique(s.train_y).size < 2:
            log.warning(
                "classify: %s has %d training documents with %d labels: no classifier",
                src,
                s.train_y.size,
                np.unique(s.train_y).size,
            )
            continue
        clf = _classifier(c, seed).fit(unit_rows(s.train_x), s.train_y)
        row = {}
        for tgt, t in sorted(sets.items()):
            if (within_language_only and tgt != src) or t.test_y.size == 0:
                continue
            row[tgt] = float(np.mean(clf.predict(unit_rows(t.test_x)) == t.test_y))
        out[src] = row
    return out


def majority_transfer(sets: Mapping[str, LabelledSet]) -> dict[str, dict[str, float]]:
    """Accuracy of predicting the training language's most frequent label (ties: the
    smallest label) for every test document of every language."""
    out: dict[str, dict[str, float]] = {}
    for src, s in sorted(sets.items()):
        if s.train_y.size == 0:
            continue
        labels, counts = np.unique(s.train_y, return_counts=True)
        top = labels[np.argmax(counts)]  # np.unique sorts, argmax takes the first maximum
        out[src] = {
            tgt: float(np.mean(t.test_y == top)) for tgt, t in sorted(sets.items()) if t.test_y.size
        }
    return out


def summarise(matrix: Mapping[str, Mapping[str, float]]) -> dict[str, float | None]:
    """``same`` (mean of the diagonal), ``cross`` (mean off it) and ``all`` (every cell);
    None where there is no such cell."""
    same = [v for src, row in matrix.items() for tgt, v in row.items() if src == tgt]
    cross = [v for src, row in matrix.items() for tgt, v in row.items() if src != tgt]

    def mean(xs: list[float]) -> float | None:
        return float(np.mean(xs)) if xs else None

    return {"same": mean(same), "cross": mean(cross), "all": mean(same + cross)}
