"""Querying a search index: :class:`SearchIndex`. No Spark.

::

    from pipeline.search import SearchIndex

    index = SearchIndex.open("out/index")              # the model it was built with
    hits = index.query("a free web browser", "en", ["de", "fr"], k=5, csls=True)
    for h in hits:
        print(h.language, h.score, h.title, h.snippet)

A query text is embedded with the index's model (:meth:`pipeline.model.Cr5Model.embed`, the
path every stage uses), L2-normalised and searched in every shard of each target language;
the shards' top-k are merged (:func:`pipeline.search.shard.search_shards`).

**Cosine** scores are inner products of normalised vectors. **CSLS** (``csls=True``) uses
the project's definition (:mod:`pipeline.retrieval.csls`) with the whole indexed collection
of the query's language as the source set::

    csls(q, c) = 2 cos(q, c) - r_T(q) - r_S(c)

where ``r_S(c)``, the mean cosine of document ``c`` with its ``csls_k`` nearest documents of
the query's language, was precomputed by the index stage, and ``r_T(q)``, the mean cosine of
the query with its ``csls_k`` nearest documents of the target language, comes from the same
search. The top ``csls_rerank`` cosine candidates are re-ranked by CSLS. A document outside
them can still belong in the exact CSLS top only if its r_S is lower than a kept document's by
more than twice their cosine gap, which the r_S spread makes rare; docs/search.md has the
measured P@1 against exact CSLS.

Every bad input is a :class:`~pipeline.errors.InputDataError` (unknown language, empty text,
a text without a word of the model's vocabulary, k out of range, CSLS terms the index lacks);
an index built with another model is a :class:`~pipeline.search.format.StaleIndexError`.
Both derive from :class:`~pipeline.errors.PipelineError`: the CLI exits 2 and the HTTP
service answers 400, with the message.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.config import SEARCH_DEFAULTS
from pipeline.errors import InputDataError
from pipeline.model.cr5_model import Cr5Model
from pipeline.search.format import (
    csls_file,
    docs_file,
    index_directory,
    read_index_manifest,
    resolve_model,
    shard_file,
)
from pipeline.search.shard import faiss_module, normalize_rows, search_shards
from pipeline.text.languages import canonical_lang

__all__ = ["SearchHit", "SearchIndex"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SearchHit:
    """One result of a query.

    Attributes
    ----------
    doc_id : str
    title : str or None
    language : str
    score : float
        Cosine, or CSLS with ``csls=True``.
    snippet : str or None
        The first ``search.snippet_chars`` characters of the document's text.
    concept_id : str or None
    rank : int
        1-based position in the query's ranked list.
    """

    doc_id: str
    title: str | None
    language: str
    score: float
    snippet: str | None
    concept_id: str | None
    rank: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Language:
    """One indexed language in memory: its shards, documents and CSLS terms."""

    def __init__(self, directory: Path, lang: str, info: dict[str, Any], sources: list[str]):
        faiss = faiss_module()
        self.lang = lang
        self.kind = info["kind"]
        self.shards = []
        self.offsets = []
        tables = []
        csls = []
        offset = 0
        for i, shard in enumerate(info["shards"]):
            index = faiss.read_index(str(directory / shard_file(lang, i)))
            if index.ntotal != shard["rows"]:
                raise InputDataError(
                    f"search index {directory}: {shard_file(lang, i)} holds {index.ntotal} "
                    f"vectors, the manifest says {shard['rows']}; rebuild the index"
                )
            self.shards.append(index)
            self.offsets.append(offset)
            offset += index.ntotal
            tables.append(pq.read_table(directory / docs_file(lang, i)))
            if sources:
                csls.append(np.load(directory / csls_file(lang, i), allow_pickle=False))
        self.rows = offset
        # Arrow columns, not Python lists: a million titles and snippets stay compact.
        self.docs = pa.concat_tables(tables).combine_chunks()
        self.sources = list(sources)
        self.r_source = (
            np.concatenate(csls).astype(np.float32)
            if csls
            else np.zeros((self.rows, 0), np.float32)
        )


class SearchIndex:
    """A built search index and the model that embeds its queries. Use :meth:`open`.

    Thread-safe: the HTTP service queries one instance from many threads (languages load
    once, under a lock; faiss searches are read-only).
    """

    def __init__(
        self,
        path: Path,
        manifest: dict[str, Any],
        model: Cr5Model,
        *,
        ef_search: int,
        csls_rerank: int,
        max_k: int,
        nprobe: int = SEARCH_DEFAULTS.nprobe,
    ) -> None:
        self.path = path
        self.manifest = manifest
        self.model = model
        self.ef_search = int(ef_search)
        self.nprobe = int(nprobe)
        self.csls_rerank = int(csls_rerank)
        self.max_k = int(max_k)
        self._languages: dict[str, _Language] = {}
        self._lock = threading.Lock()

    @classmethod
    def open(
        cls,
        path: str | os.PathLike,
        *,
        model: str | os.PathLike | None = None,
        ef_search: int | None = None,
        csls_rerank: int | None = None,
        max_k: int | None = None,
        preload: bool = False,
        nprobe: int | None = None,
    ) -> SearchIndex:
        """Open the index at ``path``.

        Parameters
        ----------
        path : path
            The index directory (``paths.index``).
        model : path, optional
            The model to embed queries with; default: the one recorded in the index. Either
            way it must be the model the index was built with (else StaleIndexError).
        ef_search, nprobe, csls_rerank, max_k : int, optional
            Query settings (default: the index's build settings, ``search.max_k``).
        preload : bool
            Load every language now (a server) rather than on first use (a one-off query).
        """
        manifest = read_index_manifest(path)
        model_path, _ = resolve_model(path, manifest, model)
        cr5 = Cr5Model.load(model_path, lazy=True)
        built = manifest.get("search", {})
        out = cls(
            index_directory(path),
            manifest,
            cr5,
            ef_search=_positive(ef_search, "ef_search", built.get("ef_search")),
            csls_rerank=_positive(csls_rerank, "csls_rerank", built.get("csls_rerank")),
            max_k=_positive(max_k, "max_k", SEARCH_DEFAULTS.max_k),
            nprobe=_positive(nprobe, "nprobe", built.get("nprobe", SEARCH_DEFAULTS.nprobe)),
        )
        if preload:
            for lang in out.languages:
                out._language(lang)
        return out

    # -- what the index holds

    @property
    def languages(self) -> list[str]:
        """The indexed (target) languages."""
        return sorted(self.manifest["languages"])

    @property
    def query_languages(self) -> list[str]:
        """Languages a query may be written in: the model's."""
        return list(self.model.languages)

    @property
    def csls_k(self) -> int | None:
        """Neighbourhood size of the precomputed CSLS terms (None: no CSLS terms)."""
        csls = self.manifest.get("csls")
        return int(csls["k"]) if csls else None

    def csls_sources(self, target: str) -> list[str]:
        """Query languages whose CSLS terms the index holds for target language ``target``."""
        csls = self.manifest.get("csls") or {}
        return list((csls.get("sources") or {}).get(target, []))

    def describe(self) -> dict[str, Any]:
        """What a client needs to build a query (the HTTP service's ``/api/info``)."""
        return {
            "languages": self.languages,
            "query_languages": self.query_languages,
            "documents": {
                lang: info["rows"] for lang, info in sorted(self.manifest["languages"].items())
            },
            "csls": {lang: self.csls_sources(lang) for lang in self.languages},
            "default_k": min(SEARCH_DEFAULTS.default_k, self.max_k),
            "max_k": self.max_k,
            "model": self.manifest["model"]["fingerprint"],
        }

    def _language(self, lang: str) -> _Language:
        with self._lock:
            if lang not in self._languages:
                t0 = time.perf_counter()
                info = self.manifest["languages"][lang]
                self._languages[lang] = _Language(self.path, lang, info, self.csls_sources(lang))
                log.info(
                    "search: loaded %s (%d documents, %d shard(s)) in %.1f s",
                    lang,
                    info["rows"],
                    len(info["shards"]),
                    time.perf_counter() - t0,
                )
            return self._languages[lang]

    # -- checks

    def _check_query_language(self, lang: object) -> str:
        if not isinstance(lang, str) or not lang.strip():
            raise InputDataError(
                f"the query language must be a code such as 'en'; got {lang!r}. Query "
                f"languages: {', '.join(self.query_languages)}"
            )
        code = canonical_lang(lang)
        if code not in self.query_languages:
            raise InputDataError(
                f"unknown query language {lang!r}: the model embeds "
                f"{', '.join(self.query_languages)}"
            )
        return code

    def _check_targets(self, targets: object, lang: str) -> list[str]:
        if targets is None:
            chosen = [t for t in self.languages if t != lang]
            if not chosen:
                raise InputDataError(
                    f"the index holds only {lang!r}, the query's own language; name it as a "
                    "target language to search it"
                )
            return chosen
        if isinstance(targets, str):
            targets = [t for t in targets.split(",") if t.strip()]
        if not isinstance(targets, Sequence) or not targets:
            raise InputDataError(
                f"target languages must be a non-empty list such as ['de', 'fr']; got "
                f"{targets!r}. Indexed: {', '.join(self.languages)}"
            )
        out: list[str] = []
        for t in targets:
            if not isinstance(t, str) or canonical_lang(t) not in self.languages:
                raise InputDataError(
                    f"unknown target language {t!r}: the index holds {', '.join(self.languages)}"
                )
            if canonical_lang(t) not in out:
                out.append(canonical_lang(t))
        return out

    def _check_k(self, k: object) -> int:
        if k is None:
            return min(SEARCH_DEFAULTS.default_k, self.max_k)
        if (
            isinstance(k, bool)
            or not isinstance(k, (int, np.integer))
            or not (1 <= k <= self.max_k)
        ):
            raise InputDataError(f"k must be an integer from 1 to {self.max_k}; got {k!r}")
        return int(k)

    def _check_csls(self, csls: object, lang: str, targets: list[str]) -> bool:
        if not isinstance(csls, (bool, np.bool_)):
            raise InputDataError(f"csls must be true or false; got {csls!r}")
        if csls:
            missing = [t for t in targets if lang not in self.csls_sources(t)]
            if missing:
                why = (
                    "the index was built without CSLS terms (search.csls=false)"
                    if self.csls_k is None
                    else f"CSLS terms exist only between two different indexed languages, "
                    f"and {lang!r} -> {', '.join(missing)} is not such a pair"
                )
                raise InputDataError(
                    f"CSLS is not available for {lang} -> {', '.join(missing)}: {why}. "
                    "Fix: query with csls off, or pick other target languages."
                )
        return bool(csls)

    def embed_queries(self, texts: Sequence[str], lang: str) -> np.ndarray:
        """Embed and L2-normalise query ``texts`` of language ``lang``: float32 (n, r).

        Raises InputDataError for an empty text or one without a known word.
        """
        for i, text in enumerate(texts):
            which = "the query text" if len(texts) == 1 else f"query text {i + 1}"
            if not isinstance(text, str):
                raise InputDataError(f"{which} must be a string; got {type(text).__name__}")
            if not text.strip():
                raise InputDataError(f"{which} is empty: type some words to search for")
        vectors, counts = self.model.embed_with_counts(list(texts), lang)
        for i, c in enumerate(counts):
            if c == 0:
                which = "the query text" if len(texts) == 1 else f"query text {i + 1}"
                raise InputDataError(
                    f"{which} has no word of the model's {lang!r} vocabulary "
                    f"({texts[i][:60]!r}), so it has no position in the embedding space. "
                    "Fix: use more or other words, or check the query language."
                )
        return normalize_rows(vectors)[0]

    # -- searching

    def search_vectors(
        self,
        vectors: np.ndarray,
        lang: str,
        target: str,
        k: int,
        *,
        csls: bool = False,
        ef_search: int | None = None,
        nprobe: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` documents of language ``target`` for L2-normalised query vectors of
        language ``lang``: (scores float32, row ids int64), each (n_q, k'), k' <= k.

        Row ids index the target language's documents (:meth:`documents`); ``-1`` marks a
        missing result. No input checks: :meth:`query` makes them.
        """
        index = self._language(target)
        ef = self.ef_search if ef_search is None else int(ef_search)
        probe = self.nprobe if nprobe is None else int(nprobe)
        if not csls:
            return search_shards(
                index.shards, index.offsets, vectors, k, ef_search=ef, nprobe=probe
            )
        csls_k = int(self.csls_k or 0)
        depth = max(k, self.csls_rerank, csls_k)
        cos, ids = search_shards(
            index.shards, index.offsets, vectors, depth, ef_search=ef, nprobe=probe
        )
        k_t = min(csls_k, index.rows)
        r_t = cos[:, :k_t].mean(axis=1, dtype=np.float64).astype(np.float32)
        r_s = self.csls_terms(target, lang)
        valid = ids >= 0
        scores = np.where(
            valid,
            np.float32(2.0) * cos - r_t[:, None] - r_s[np.where(valid, ids, 0)],
            np.float32(-np.inf),
        ).astype(np.float32)
        order = np.lexsort((np.where(valid, ids, np.iinfo(np.int64).max), -scores), axis=-1)
        order = order[:, :k]
        return np.take_along_axis(scores, order, 1), np.take_along_axis(ids, order, 1)

    def vectors(self, lang: str, rows: np.ndarray | None = None) -> np.ndarray:
        """The indexed (L2-normalised) vectors of ``lang``'s documents ``rows`` (all when
        None): float32, shape (n_rows, r)."""
        index = self._language(lang)
        ids = np.arange(index.rows) if rows is None else np.asarray(rows, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= index.rows):
            raise InputDataError(f"rows of {lang!r} must be in 0..{index.rows - 1}")
        out = np.empty((ids.size, self.model.dim), dtype=np.float32)
        shard_of = np.searchsorted(np.asarray(index.offsets), ids, side="right") - 1
        for s, shard in enumerate(index.shards):
            mask = shard_of == s
            if mask.any():
                local = (ids[mask] - index.offsets[s]).astype(np.int64)
                out[mask] = shard.reconstruct_batch(local)
        return out

    def csls_terms(self, target: str, source: str) -> np.ndarray:
        """r_S of every indexed document of ``target`` over the documents of ``source``:
        float32, shape (rows,) (row order of :meth:`documents`)."""
        if source not in self.csls_sources(target):
            raise InputDataError(f"the index has no CSLS terms for {source} -> {target}")
        index = self._language(target)
        return index.r_source[:, index.sources.index(source)]

    def documents(self, lang: str) -> dict[str, list]:
        """The indexed documents of ``lang`` by row id: doc_id, concept_id, title, snippet."""
        docs = self._language(lang).docs
        return {name: docs.column(name).to_pylist() for name in docs.column_names}

    def query(
        self,
        texts: str | Sequence[str],
        lang: str,
        target_langs: Sequence[str] | str | None = None,
        k: int | None = None,
        *,
        csls: bool = False,
    ) -> list[SearchHit] | list[list[SearchHit]]:
        """Search the documents of ``target_langs`` about ``texts`` (written in ``lang``).

        Parameters
        ----------
        texts : str or sequence of str
            One query text, or several (one ranked list each).
        lang : str
            The texts' language (one of :attr:`query_languages`).
        target_langs : sequence of str or str, optional
            Indexed languages to search (a list, or a comma-separated string); default every
            indexed language but ``lang``.
        k : int, optional
            Results per target language, 1..``max_k`` (default ``search.default_k``).
        csls : bool
            Re-rank by CSLS instead of cosine.

        Returns
        -------
        list of SearchHit (for one text) or one such list per text
            The ``k`` best documents of each target language, all in one list ranked by
            score (ties: target languages in the order given, then index order).
        """
        single = isinstance(texts, str)
        batch = [texts] if single else texts
        if not isinstance(batch, Sequence) or not batch:
            raise InputDataError("query texts must be a text or a non-empty list of texts")
        code = self._check_query_language(lang)
        targets = self._check_targets(target_langs, code)
        kk = self._check_k(k)
        use_csls = self._check_csls(csls, code, targets)
        vectors = self.embed_queries(list(batch), code)
        per_target = {t: self.search_vectors(vectors, code, t, kk, csls=use_csls) for t in targets}
        results = [self._hits(i, per_target) for i in range(len(batch))]
        return results[0] if single else results

    def _hits(self, i: int, per_target: dict[str, tuple[np.ndarray, np.ndarray]]) -> list:
        found = []
        for position, (t, (scores, ids)) in enumerate(per_target.items()):
            for j in range(ids.shape[1]):
                row = int(ids[i, j])
                if row >= 0:
                    found.append((-float(scores[i, j]), position, j, t, row))
        found.sort()
        out = []
        for rank, (neg, _, _, t, row) in enumerate(found, 1):
            doc = self._language(t).docs.slice(row, 1).to_pylist()[0]
            out.append(
                SearchHit(
                    doc_id=doc["doc_id"],
                    title=doc["title"],
                    language=t,
                    score=-neg,
                    snippet=doc["snippet"],
                    concept_id=doc["concept_id"],
                    rank=rank,
                )
            )
        return out


def _positive(value: int | None, name: str, default: Any) -> int:
    v = default if value is None else value
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
        raise InputDataError(f"{name} must be a positive integer; got {v!r}")
    return int(v)
