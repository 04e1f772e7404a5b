"""One shard of a language's index: building it, searching it, merging shards. No Spark.

A shard is a faiss index over L2-normalised float32 vectors with the inner-product metric,
so a score is a cosine:

- ``flat``: ``IndexFlatIP``, exact (every query scans every vector);
- ``ivf``: ``IndexIVFFlat``, the vectors bucketed by their nearest of ``lists`` k-means
  centroids; a query scans the ``nprobe`` buckets whose centroids it is closest to;
- ``hnsw``: ``IndexHNSWFlat`` (Malkov & Yashunin's graph), which visits a few hundred
  vectors per query.

Both approximate kinds store the full vectors, so the candidates they return are scored
exactly (the approximation is only in which candidates they visit). IVF is the default for
large languages: document embeddings cluster by topic, and a graph over clustered points
connects the clusters poorly, so HNSW misses neighbours for queries that come from another
language, while IVF's buckets follow the clusters (bench/README.md, "Search").

A language's shards hold disjoint documents; :func:`search_shards` searches each for its
top-k and merges them with the project's one ranking rule (:func:`pipeline.ranking.merge_topk`:
score descending, ties to the lower global index), so with flat shards the result is exactly
that of one flat index over all of them (``tests/test_search.py`` checks it).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from pipeline.errors import ConfigError
from pipeline.ranking import merge_topk

__all__ = [
    "INDEX_KINDS",
    "build_shard",
    "deserialize",
    "faiss_module",
    "ivf_lists",
    "normalize_rows",
    "search_shard",
    "search_shards",
    "serialize",
    "shard_vectors",
]

log = logging.getLogger(__name__)

#: The kinds of shard index (``search.index_type`` but ``auto``).
INDEX_KINDS = ("flat", "ivf", "hnsw")

#: k-means training points per IVF list (faiss warns below 39) and the seed of their draw
#: and of the k-means, so that a rebuild writes the same index.
IVF_TRAIN_PER_LIST = 64
IVF_SEED = 1234

#: Index of a missing result (faiss returns -1 when a shard has fewer than k vectors).
_MISSING = -1


def faiss_module() -> Any:
    """The ``faiss`` module; a ConfigError saying how to install it when it is missing."""
    try:
        import faiss
    except ImportError as exc:
        raise ConfigError(
            "the search index needs faiss, which is not installed. Fix: pip install "
            "'cr5-on-spark[search]' (or pip install faiss-cpu) in the project's environment."
        ) from exc
    return faiss


def normalize_rows(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """L2-normalised float32 copy of ``vectors`` and the mask of its non-zero rows.

    Parameters
    ----------
    vectors : ndarray of shape (n, r)

    Returns
    -------
    normalized : ndarray of float32, shape (n, r); zero rows stay zero
    nonzero : ndarray of bool, shape (n,)
    """
    v = np.array(vectors, dtype=np.float32, copy=True, order="C")
    norms = np.sqrt(np.einsum("ij,ij->i", v, v, dtype=np.float64))
    nonzero = norms > 0
    v[nonzero] /= norms[nonzero, None].astype(np.float32)
    return v, nonzero


def ivf_lists(rows: int, lists: int | None) -> int:
    """IVF lists of a shard of ``rows`` vectors: ``lists``, or by default 4 √rows (faiss's
    usual range is 4–16 √n), and never more than rows / 39 (k-means needs 39 points a
    centroid)."""
    wanted = int(lists) if lists else round(4 * math.sqrt(max(rows, 1)))
    return max(1, min(wanted, rows // 39))


def build_shard(
    vectors: np.ndarray,
    kind: str,
    *,
    hnsw_m: int,
    ef_construction: int,
    threads: int = 1,
    lists: int | None = None,
) -> Any:
    """A faiss index over ``vectors`` (already L2-normalised), row i = id i.

    Parameters
    ----------
    vectors : ndarray of float32, shape (n, r)
    kind : {"flat", "ivf", "hnsw"}
    hnsw_m, ef_construction : int
        HNSW's graph degree and build-time candidate list (``search.hnsw_m``,
        ``search.hnsw_ef_construction``).
    threads : int
        faiss (OpenMP) threads; with 1 the HNSW graph is the same on every run.
    lists : int, optional
        IVF lists (``search.ivf_lists``; None: :func:`ivf_lists`'s default).

    Returns
    -------
    faiss.Index
    """
    faiss = faiss_module()
    if kind not in INDEX_KINDS:
        raise ConfigError(f"index kind must be one of {INDEX_KINDS}; got {kind!r}")
    x = np.ascontiguousarray(vectors, dtype=np.float32)
    d = x.shape[1]
    if kind == "flat":
        index = faiss.IndexFlatIP(d)
    elif kind == "ivf":
        index = faiss.IndexIVFFlat(
            faiss.IndexFlatIP(d), d, ivf_lists(len(x), lists), faiss.METRIC_INNER_PRODUCT
        )
        index.cp.seed = IVF_SEED
        index.cp.min_points_per_centroid = 1  # tiny shards: one list, no faiss warning
    else:
        index = faiss.IndexHNSWFlat(d, int(hnsw_m), faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = int(ef_construction)
    previous = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(int(threads))
    try:
        if kind == "ivf":
            n_train = min(len(x), IVF_TRAIN_PER_LIST * index.nlist)
            rng = np.random.default_rng(IVF_SEED)
            index.train(x[np.sort(rng.choice(len(x), n_train, replace=False))])
            index.add(x)
            index.make_direct_map()  # rows by id (shard_vectors, SearchIndex.vectors)
        else:
            index.add(x)
    finally:
        faiss.omp_set_num_threads(previous)
    return index


def serialize(index: Any) -> bytes:
    """The bytes of ``index`` as ``faiss.write_index`` would write them."""
    return faiss_module().serialize_index(index).tobytes()


def deserialize(data: bytes) -> Any:
    """The faiss index of :func:`serialize`'s bytes."""
    return faiss_module().deserialize_index(np.frombuffer(data, dtype=np.uint8))


def shard_vectors(index: Any) -> np.ndarray:
    """The stored (normalised) vectors of a shard: float32, shape (n, r)."""
    n = index.ntotal
    if n == 0:
        return np.zeros((0, index.d), dtype=np.float32)
    return np.asarray(index.reconstruct_n(0, n), dtype=np.float32)


def search_shard(
    index: Any, queries: np.ndarray, k: int, *, ef_search: int, nprobe: int = 32
) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` of one shard: (scores float32, ids int64), each (n_q, k).

    Missing results (a shard smaller than k, or an approximate search that found fewer)
    have score ``-inf`` and id ``-1``. ``ef_search`` applies to HNSW shards (at least
    ``k``), ``nprobe`` (lists scanned) to IVF shards.
    """
    faiss = faiss_module()
    q = np.ascontiguousarray(queries, dtype=np.float32)
    params = None
    if isinstance(index, faiss.IndexHNSW):
        params = faiss.SearchParametersHNSW(efSearch=max(int(ef_search), int(k)))
    elif isinstance(index, faiss.IndexIVF):
        params = faiss.SearchParametersIVF(nprobe=min(max(1, int(nprobe)), index.nlist))
    scores, ids = index.search(q, int(k), params=params)
    scores = scores.astype(np.float32, copy=False)
    missing = ids < 0
    if missing.any():
        scores = np.where(missing, np.float32(-np.inf), scores)
        ids = np.where(missing, _MISSING, ids)
    return scores, ids.astype(np.int64, copy=False)


def search_shards(
    shards: Sequence[Any],
    offsets: Sequence[int],
    queries: np.ndarray,
    k: int,
    *,
    ef_search: int,
    nprobe: int = 32,
) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` over a language's shards, merged: (scores, global ids), each (n_q, k).

    Shard ``s`` holds global ids ``offsets[s] .. offsets[s] + ntotal - 1``. The merge is the
    project's ranking rule (score descending, ties to the lower global id); missing results
    come last with id ``-1``.

    Parameters
    ----------
    shards : sequence of faiss.Index
    offsets : sequence of int
        Global id of each shard's first row.
    queries : ndarray of float32, shape (n_q, r)
        L2-normalised.
    k : int
    ef_search : int
        HNSW candidate list.
    nprobe : int
        IVF lists scanned.
    """
    partials = []
    for index, offset in zip(shards, offsets, strict=True):
        kk = min(int(k), max(index.ntotal, 1))
        scores, ids = search_shard(index, queries, kk, ef_search=ef_search, nprobe=nprobe)
        # Missing entries sort after every real one whatever their id; keep -1 for them.
        glob = np.where(ids >= 0, ids + np.int64(offset), np.iinfo(np.int64).max)
        partials.append((scores, glob))
    scores, ids = merge_topk(partials, int(k))
    ids = np.where(np.isfinite(scores), ids, _MISSING)
    return scores, ids
