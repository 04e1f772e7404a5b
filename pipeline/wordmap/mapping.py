"""Linear maps between monolingual word embeddings: orthogonal Procrustes and RCSLS.

Row-vector convention: a source vector ``x`` (row) maps to ``x @ W``; ``W`` has shape
``(d_s, d_t)`` (square for the orthogonal constraint).

* :func:`procrustes`: ``W = argmin ||X W − Y||_F`` over orthogonal ``W``, i.e. ``W = U Vᵀ``
  with ``U Σ Vᵀ = svd(Xᵀ Y)`` (Schönemann 1966).
* :func:`rcsls_loss`: the relaxed CSLS loss of Joulin et al. (EMNLP 2018) over the training
  pairs ``(x_i, y_i)`` and negatives ``Z_s`` (source vocabulary) and ``Z_t`` (target
  vocabulary), with unit-norm rows::

      L(W) = 1/n Σ_i [ −2 x_iᵀ W y_i
                       + 1/k Σ_{z ∈ N_k(x_i W; Z_t)} x_iᵀ W z
                       + 1/k Σ_{z ∈ N_k(y_i; Z_s W)} zᵀ W y_i ]

  ``N_k(q; C)``: the ``k`` rows of ``C`` with the largest dot product with ``q``. The
  (sub)gradient holds the neighbourhoods fixed::

      ∇L = 1/n [ −2 Xᵀ Y + 1/k Xᵀ S_t + 1/k S_sᵀ Y ]

  where row ``i`` of ``S_t`` (``S_s``) is the sum of the ``k`` neighbours of ``x_i W`` in
  ``Z_t`` (of ``y_i`` in ``Z_s W``, taken as rows of ``Z_s``).
* :func:`fit_rcsls`: full-batch gradient steps from the Procrustes solution, each followed by
  the projection on the constraint set (``"orthogonal"``: the polar factor ``U Vᵀ``;
  ``"unit_ball"``: singular values clipped to 1, the paper's spectral constraint); a step that
  raises the loss is undone and the learning rate halved (as the authors' code does).
* :func:`mutual_nn_dictionary`: a dictionary induced from mutual nearest neighbours under CSLS
  (MUSE's refinement), to refit a map on.

Everything is numpy; neighbour searches are blocked over the negatives so memory is
``O(n × block + n × k)``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from pipeline.errors import InputDataError
from pipeline.ranking import merge_topk, top1_indices, topk_of_scores
from pipeline.retrieval import mean_topk_similarity

__all__ = [
    "RCSLSFit",
    "fit_rcsls",
    "mutual_nn_dictionary",
    "normalize_embeddings",
    "procrustes",
    "project",
    "rcsls_loss",
    "topk_dot",
]

logger = logging.getLogger(__name__)

Constraint = Literal["orthogonal", "unit_ball"]


def normalize_embeddings(x: np.ndarray) -> np.ndarray:
    """Unit rows, mean-centred, unit rows again (MUSE's ``renorm,center,renorm``).

    Zero rows stay zero. Returns float32 of the same shape.
    """
    x = np.asarray(x, dtype=np.float32)

    def unit(a: np.ndarray) -> np.ndarray:
        n = np.linalg.norm(a, axis=1, keepdims=True)
        return np.divide(a, n, out=np.zeros_like(a), where=n > 0)

    x = unit(x)
    return unit(x - x.mean(axis=0, keepdims=True))


def procrustes(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Orthogonal ``W`` minimising ``||X W − Y||_F``.

    Parameters
    ----------
    x : ndarray of shape (n, d)
    y : ndarray of shape (n, d)

    Returns
    -------
    ndarray of shape (d, d), float64
    """
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    if x.ndim != 2 or x.shape != y.shape:
        raise InputDataError(
            f"procrustes needs two (n, d) arrays of one shape; got {x.shape} and {y.shape}"
        )
    u, _, vt = np.linalg.svd(x.T @ y)
    return u @ vt


def project(w: np.ndarray, constraint: Constraint) -> np.ndarray:
    """Projection of ``w`` on the orthogonal matrices or on the spectral-norm unit ball."""
    u, s, vt = np.linalg.svd(w, full_matrices=False)
    if constraint == "orthogonal":
        return u @ vt
    if constraint == "unit_ball":
        return (u * np.minimum(s, 1.0)) @ vt
    raise InputDataError(f"constraint must be 'orthogonal' or 'unit_ball'; got {constraint!r}")


def topk_dot(q: np.ndarray, c: np.ndarray, k: int, *, block: int = 8192) -> np.ndarray:
    """Indices of the ``k`` rows of ``c`` with the largest dot product with each row of ``q``.

    Blocked over ``c``; the project's top-k order (:mod:`pipeline.ranking`: score descending,
    ties by lower index), so a tie at the k-th place always keeps the lower index.

    Parameters
    ----------
    q : ndarray of shape (n_q, d)
    c : ndarray of shape (n_c, d)
    k : int
    block : int
        Rows of ``c`` per block; working memory ``O(n_q × (block + k))``.

    Returns
    -------
    ndarray of shape (n_q, min(k, n_c)), int64
    """
    best: tuple[np.ndarray, np.ndarray] | None = None
    for start in range(0, c.shape[0], block):
        part = topk_of_scores(q @ c[start : start + block].T, k, start)
        best = part if best is None else merge_topk([best, part], k)
    if best is None:
        return np.zeros((q.shape[0], 0), dtype=np.int64)
    return best[1]


def rcsls_loss(
    w: np.ndarray,
    x: np.ndarray,
    y: np.ndarray,
    z_s: np.ndarray,
    z_t: np.ndarray,
    *,
    k: int = 10,
    block: int = 8192,
) -> tuple[float, np.ndarray]:
    """RCSLS loss and its gradient at ``w`` (see module docstring).

    Parameters
    ----------
    w : ndarray of shape (d_s, d_t)
    x : ndarray of shape (n, d_s)
        Source vectors of the training pairs (unit rows).
    y : ndarray of shape (n, d_t)
        Their translations' vectors (unit rows).
    z_s : ndarray of shape (m_s, d_s)
        Source negatives (the source vocabulary, unit rows).
    z_t : ndarray of shape (m_t, d_t)
        Target negatives.
    k : int
        Neighbourhood size (the paper's 10).

    Returns
    -------
    loss : float
    grad : ndarray of shape (d_s, d_t)
    """
    n = x.shape[0]
    xw = x @ w
    zw = z_s @ w
    nn_t = topk_dot(xw, z_t, k, block=block)  # (n, k) rows of z_t
    nn_s = topk_dot(y, zw, k, block=block)  # (n, k) rows of z_s
    k_t, k_s = nn_t.shape[1], nn_s.shape[1]
    s_t = z_t[nn_t].sum(axis=1)  # (n, d_t)
    s_s = z_s[nn_s].sum(axis=1)  # (n, d_s)
    loss = (
        -2.0 * np.sum(xw * y) + np.sum(xw * s_t) / k_t + np.sum(zw[nn_s].sum(axis=1) * y) / k_s
    ) / n
    grad = (-2.0 * (x.T @ y) + (x.T @ s_t) / k_t + (s_s.T @ y) / k_s) / n
    return float(loss), grad


@dataclass
class RCSLSFit:
    """Result of :func:`fit_rcsls`.

    Attributes
    ----------
    w : ndarray of shape (d_s, d_t)
        The map after ``n_iter`` accepted or rejected steps.
    losses : list of float
        Training loss before each step (index 0: the Procrustes start).
    snapshots : dict of int to ndarray
        The map after the iterations listed in ``snapshot_at`` (for choosing epochs).
    final_lr : float
    """

    w: np.ndarray
    losses: list[float] = field(default_factory=list)
    snapshots: dict[int, np.ndarray] = field(default_factory=dict)
    final_lr: float = 0.0


def fit_rcsls(
    x: np.ndarray,
    y: np.ndarray,
    z_s: np.ndarray,
    z_t: np.ndarray,
    *,
    lr: float,
    epochs: int,
    k: int = 10,
    constraint: Constraint = "unit_ball",
    w0: np.ndarray | None = None,
    snapshot_at: tuple[int, ...] = (),
    block: int = 8192,
) -> RCSLSFit:
    """Minimise :func:`rcsls_loss` by full-batch projected gradient steps.

    Starts from ``w0`` (default: :func:`procrustes` of ``x``, ``y``). A step that raises the
    loss is undone and ``lr`` halved; training stops early when ``lr`` falls below
    ``1e-4 ×`` its start value.
    """
    if lr <= 0 or epochs < 0:
        raise InputDataError(f"RCSLS needs lr > 0 and epochs >= 0; got lr={lr}, epochs={epochs}")
    x, y = np.asarray(x, np.float32), np.asarray(y, np.float32)
    z_s, z_t = np.asarray(z_s, np.float32), np.asarray(z_t, np.float32)
    w = (procrustes(x, y) if w0 is None else np.asarray(w0, np.float64)).astype(np.float32)
    fit = RCSLSFit(w=w, final_lr=lr)
    loss, grad = rcsls_loss(w, x, y, z_s, z_t, k=k, block=block)
    fit.losses.append(loss)
    step = lr
    for it in range(1, epochs + 1):
        if step < 1e-4 * lr:
            logger.info("RCSLS: learning rate fell below %.2g; stopping at step %d", 1e-4 * lr, it)
            for s in snapshot_at:
                if s >= it:
                    fit.snapshots[s] = w.copy()
            break
        cand = project(w - step * grad, constraint).astype(np.float32)
        c_loss, c_grad = rcsls_loss(cand, x, y, z_s, z_t, k=k, block=block)
        if c_loss > loss:
            step /= 2.0
        else:
            w, loss, grad = cand, c_loss, c_grad
        fit.losses.append(loss)
        if it in snapshot_at:
            fit.snapshots[it] = w.copy()
        logger.debug("RCSLS step %d: loss %.5f, lr %.3g", it, loss, step)
    fit.w, fit.final_lr = w, step
    return fit


def mutual_nn_dictionary(
    xs: np.ndarray, yt: np.ndarray, *, k: int = 10, block: int = 8192
) -> np.ndarray:
    """Pairs ``(i, j)`` that are each other's nearest neighbour under CSLS.

    Parameters
    ----------
    xs : ndarray of shape (n_s, d)
        Mapped source vectors (unit rows).
    yt : ndarray of shape (n_t, d)
        Target vectors (unit rows).

    Returns
    -------
    ndarray of shape (n_pairs, 2), int64
    """
    xs, yt = np.asarray(xs, np.float32), np.asarray(yt, np.float32)
    r_s = mean_topk_similarity(xs, yt, min(k, yt.shape[0]))  # source words' neighbourhoods
    r_t = mean_topk_similarity(yt, xs, min(k, xs.shape[0]))
    # nearest neighbours under the project's top-k order (ties: lower index)
    fwd = np.empty(xs.shape[0], np.int64)
    for start in range(0, xs.shape[0], block):
        fwd[start : start + block] = top1_indices(
            2 * xs[start : start + block] @ yt.T - r_t[None, :]
        )
    bwd = np.empty(yt.shape[0], np.int64)
    for start in range(0, yt.shape[0], block):
        bwd[start : start + block] = top1_indices(
            2 * yt[start : start + block] @ xs.T - r_s[None, :]
        )
    i = np.flatnonzero(bwd[fwd] == np.arange(xs.shape[0]))
    return np.stack([i, fwd[i]], axis=1).astype(np.int64)
