r"""Exact dense stand-ins for sparse embeddings compared across two sides.

The untranslated baseline embeds documents as sparse TF-IDF rows over the union vocabulary
U (|U| up to 10⁶), which the dense retrieval engine cannot hold. Retrieval only ever
compares a *query-side* row (queries, and for CSLS the source collection) with a
*candidate-side* row, never two rows of one side, so only the columns S that hold a nonzero
on both sides can contribute to a score. Keep those, and add two slack columns that restore
each row's norm:

.. math::  \tilde x = [\,x_S,\ \sqrt{\|x\|^2 - \|x_S\|^2},\ 0\,] \text{ (query side)},\qquad
           \tilde y = [\,y_S,\ 0,\ \sqrt{\|y\|^2 - \|y_S\|^2}\,] \text{ (candidate side)}.

Then :math:`\tilde x^\top \tilde y = x^\top y` and :math:`\|\tilde x\| = \|x\|`, so every
cosine between the two sides — hence cosine retrieval and CSLS, whose neighbourhood terms
are cross-side cosines too — is exactly that of the sparse rows (up to float32 rounding).
A zero row stays zero. The width is ``|S| + 2`` with ``|S| ≤ min(nnz columns of either
side)``, usually far below |U|.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from pipeline.errors import InputDataError

__all__ = ["densify_cross_sides"]


def _dense_with_slack(x: sp.csr_matrix, keep: np.ndarray, slot: int) -> np.ndarray:
    """``x[:, keep]`` densified, plus the norm-restoring slack value in column ``|keep| + slot``."""
    sub = x[:, keep]
    out = np.zeros((x.shape[0], keep.size + 2), dtype=np.float32)
    out[:, : keep.size] = sub.toarray()
    total = np.asarray(x.multiply(x).sum(axis=1), dtype=np.float64).ravel()
    kept = np.asarray(sub.multiply(sub).sum(axis=1), dtype=np.float64).ravel()
    out[:, keep.size + slot] = np.sqrt(np.maximum(total - kept, 0.0))
    return out


def densify_cross_sides(
    queries: sp.spmatrix,
    candidates: sp.spmatrix,
    source: sp.spmatrix | None = None,
    *,
    max_bytes: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Dense float32 rows whose cross-side dot products and norms equal the sparse ones.

    Parameters
    ----------
    queries : sparse matrix of shape (n_q, |U|)
    candidates : sparse matrix of shape (n_c, |U|)
    source : sparse matrix of shape (n_s, |U|) or None
        More query-side rows (CSLS over the source collection).
    max_bytes : int
        Refuse (InputDataError) when the dense result would exceed this many bytes.

    Returns
    -------
    queries, candidates : ndarray of float32, shapes (n_q, w), (n_c, w)
    source : ndarray of float32, shape (n_s, w), or None
        ``w = |S| + 2`` (module docstring).
    """
    q = sp.csr_matrix(queries)
    c = sp.csr_matrix(candidates)
    s = None if source is None else sp.csr_matrix(source)
    if q.shape[1] != c.shape[1] or (s is not None and s.shape[1] != q.shape[1]):
        raise InputDataError(
            f"query, candidate and source rows must have the same width; got {q.shape[1]}, "
            f"{c.shape[1]}" + ("" if s is None else f", {s.shape[1]}")
        )
    query_cols = np.unique(q.indices if s is None else np.concatenate([q.indices, s.indices]))
    keep = np.intersect1d(query_cols, np.unique(c.indices), assume_unique=True)
    rows = q.shape[0] + c.shape[0] + (0 if s is None else s.shape[0])
    need = rows * (keep.size + 2) * 4
    if need > max_bytes:
        raise InputDataError(
            f"the sparse (untranslated) embeddings share {keep.size} terms across "
            f"{rows} rows: {need / 2**20:.0f} MiB dense, above evaluate.sparse_dense_limit_mb "
            f"({max_bytes / 2**20:.0f} MiB). Fix: lower evaluate.max_candidates or raise the limit"
        )
    return (
        _dense_with_slack(q, keep, 0),
        _dense_with_slack(c, keep, 1),
        None if s is None else _dense_with_slack(s, keep, 0),
    )
