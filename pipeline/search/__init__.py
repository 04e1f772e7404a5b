"""Crosslingual search over an embedded collection: the index format, building it on Spark,
and querying it (Python API, ``python -m pipeline search``, the HTTP service).

- :mod:`~pipeline.search.format`: the index directory and the checks a reader makes (the
  model's fingerprint);
- :mod:`~pipeline.search.shard`: one shard's faiss index, searching and merging shards (no
  Spark);
- :mod:`~pipeline.search.build`: the two Spark jobs of the ``index`` stage (shards, CSLS
  terms);
- :mod:`~pipeline.search.index`: :class:`SearchIndex` (open, query), no Spark;
- :mod:`~pipeline.search.server`: the HTTP service and its search page.

Importing this package loads none of them; the names below load on first use
(:mod:`pipeline.lazy`), so ``python -m pipeline search`` starts without Spark.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.lazy import lazy_exports

if TYPE_CHECKING:
    from pipeline.search.format import StaleIndexError, read_index_manifest
    from pipeline.search.index import SearchHit, SearchIndex
    from pipeline.search.server import make_server, serve

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "SearchHit": "index",
        "SearchIndex": "index",
        "StaleIndexError": "format",
        "read_index_manifest": "format",
        "make_server": "server",
        "serve": "server",
    },
)

__all__ = [
    "SearchHit",
    "SearchIndex",
    "StaleIndexError",
    "make_server",
    "read_index_manifest",
    "serve",
]
