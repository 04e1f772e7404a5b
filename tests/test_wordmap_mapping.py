"""Procrustes and RCSLS against direct numpy computations."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.wordmap.mapping import (
    fit_rcsls,
    mutual_nn_dictionary,
    normalize_embeddings,
    procrustes,
    project,
    rcsls_loss,
    topk_dot,
)


def _rotation(d: int, seed: int) -> np.ndarray:
    q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((d, d)))
    return q


def test_procrustes_recovers_a_known_rotation():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((200, 12))
    r = _rotation(12, 1)
    w = procrustes(x, x @ r + 1e-6 * rng.standard_normal((200, 12)))
    np.testing.assert_allclose(w, r, atol=1e-5)
    np.testing.assert_allclose(w.T @ w, np.eye(12), atol=1e-10)


def _direct_loss(w, x, y, zs, zt, k):
    """Loop over pairs, full score vectors sorted (no blocking, no argpartition)."""
    total = 0.0
    for i in range(x.shape[0]):
        xw = x[i] @ w
        top_t = np.argsort(-(zt @ xw))[:k]
        top_s = np.argsort(-((zs @ w) @ y[i]))[:k]
        total += -2 * xw @ y[i] + np.mean(zt[top_t] @ xw) + np.mean((zs[top_s] @ w) @ y[i])
    return total / x.shape[0]


def _problem(seed=0, n=30, d=6, m_s=50, m_t=60):
    rng = np.random.default_rng(seed)
    unit = lambda a: a / np.linalg.norm(a, axis=1, keepdims=True)  # noqa: E731
    zs, zt = unit(rng.standard_normal((m_s, d))), unit(rng.standard_normal((m_t, d)))
    x, y = zs[:n], zt[:n]
    w = _rotation(d, seed + 1) * 0.9 + 0.05 * rng.standard_normal((d, d))
    return w, x, y, zs, zt


def test_rcsls_loss_equals_direct_computation():
    w, x, y, zs, zt = _problem()
    loss, _ = rcsls_loss(w, x, y, zs, zt, k=10, block=7)
    assert loss == pytest.approx(_direct_loss(w, x, y, zs, zt, 10), rel=1e-12, abs=1e-12)


def test_rcsls_gradient_matches_finite_differences():
    w, x, y, zs, zt = _problem(seed=3)
    _, grad = rcsls_loss(w, x, y, zs, zt, k=10)
    eps = 1e-6
    num = np.zeros_like(w)
    for a in range(w.shape[0]):
        for b in range(w.shape[1]):
            e = np.zeros_like(w)
            e[a, b] = eps
            num[a, b] = (
                rcsls_loss(w + e, x, y, zs, zt, k=10)[0] - rcsls_loss(w - e, x, y, zs, zt, k=10)[0]
            ) / (2 * eps)
    np.testing.assert_allclose(grad, num, atol=1e-7)


def test_topk_dot_blocked_equals_sort():
    rng = np.random.default_rng(5)
    q, c = rng.standard_normal((9, 4)), rng.standard_normal((37, 4))
    got = np.sort(topk_dot(q, c, 5, block=6), axis=1)
    ref = np.sort(np.argsort(-(q @ c.T), axis=1)[:, :5], axis=1)
    np.testing.assert_array_equal(got, ref)


def test_projections():
    w = np.diag([3.0, 0.5, 1.2]) @ _rotation(3, 2)
    np.testing.assert_allclose(np.linalg.svd(project(w, "orthogonal"))[1], 1.0)
    np.testing.assert_allclose(np.linalg.svd(project(w, "unit_ball"))[1], [1.0, 1.0, 0.5])


@pytest.mark.parametrize("constraint", ["orthogonal", "unit_ball"])
def test_fit_rcsls_lowers_the_loss_and_respects_the_constraint(constraint):
    rng = np.random.default_rng(7)
    d, m = 10, 300
    zt = normalize_embeddings(rng.standard_normal((m, d)))
    zs = normalize_embeddings(zt @ _rotation(d, 8).T + 0.3 * rng.standard_normal((m, d)))
    x, y = zs[:100], zt[:100]
    fit = fit_rcsls(x, y, zs, zt, lr=1.0, epochs=15, constraint=constraint, snapshot_at=(5, 15))
    assert fit.losses[-1] < fit.losses[0]
    assert all(b <= a for a, b in zip(fit.losses, fit.losses[1:], strict=False))
    assert set(fit.snapshots) == {5, 15}
    s = np.linalg.svd(fit.w)[1]
    assert s.max() <= 1 + 1e-5 and (constraint == "unit_ball" or s.min() >= 1 - 1e-5)


def test_mutual_nn_dictionary_finds_the_planted_pairs():
    rng = np.random.default_rng(9)
    yt = normalize_embeddings(rng.standard_normal((40, 8)))
    perm = rng.permutation(40)
    xs = normalize_embeddings(yt[perm] + 0.05 * rng.standard_normal((40, 8)))
    pairs = mutual_nn_dictionary(xs, yt, k=5)
    assert len(pairs) == 40 and np.array_equal(pairs[:, 1], perm[pairs[:, 0]])
