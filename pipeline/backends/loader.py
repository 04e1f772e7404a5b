"""The ``tfidf`` dataset as scipy CSR matrices: Arrow list columns -> CSR, no loop over rows.

A ``tfidf`` row (``pipeline/io/schemas.py: TFIDF``) stores one document's sorted term
``indices`` (int32) and L2-normalised ``values`` (float32) as two Arrow list arrays. Their
offsets *are* a CSR ``indptr`` and their flattened children *are* ``indices`` and ``data``, so
the conversion is a few vectorised numpy operations per Arrow chunk. Used on the driver by
:func:`local_backend_from_tfidf` and on executors by the Spark backend's block builder.

Sizes come from the dataset's manifest: ``p_l`` is the vocabulary size
(``report.per_language[l].vocabulary``, not the largest index seen: trailing vocabulary terms
may occur in no training document) and ``K`` is ``report.concepts``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import scipy.sparse as sp

from pipeline.errors import ConfigError, InputDataError

__all__ = [
    "TfidfLayout",
    "arrow_to_csr",
    "check_rows",
    "csr_arrays",
    "local_backend_from_frame",
    "local_backend_from_tfidf",
    "read_tfidf_layout",
]

log = logging.getLogger(__name__)


def _chunks(column: pa.Array | pa.ChunkedArray) -> list[pa.Array]:
    return list(column.chunks) if isinstance(column, pa.ChunkedArray) else [column]


def _list_parts(arr: pa.Array, name: str) -> tuple[np.ndarray, pa.Array]:
    """Offsets (int64, starting at 0) and flat values of one list-array chunk (slice-aware)."""
    if arr.null_count:
        raise InputDataError(f"tfidf column {name!r} holds {arr.null_count} null rows")
    offsets = arr.offsets.to_numpy().astype(np.int64)
    return offsets - offsets[0], arr.flatten()


def csr_arrays(
    indices: pa.Array | pa.ChunkedArray, values: pa.Array | pa.ChunkedArray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """CSR arrays of the rows held in two Arrow list columns, in column order.

    Parameters
    ----------
    indices : pyarrow list<int> array or chunked array of length n
    values : pyarrow list<float> array or chunked array of length n

    Returns
    -------
    indptr : ndarray of int64, shape (n + 1,)
    col : ndarray of int32, shape (nnz,)
    data : ndarray of float32, shape (nnz,)

    Raises
    ------
    InputDataError
        If a row is null, a list holds nulls, or a row's ``indices`` and ``values`` differ in
        length.
    """
    ind_chunks, val_chunks = _chunks(indices), _chunks(values)
    n_rows = sum(len(c) for c in ind_chunks)
    if n_rows != sum(len(c) for c in val_chunks):
        raise InputDataError("tfidf columns 'indices' and 'values' have different row counts")
    if n_rows == 0:
        return np.zeros(1, np.int64), np.zeros(0, np.int32), np.zeros(0, np.float32)
    if [len(c) for c in ind_chunks] != [len(c) for c in val_chunks]:
        # Differently chunked columns (not produced by toArrow or mapInArrow): align them.
        ind_chunks = [pa.concat_arrays(ind_chunks)]
        val_chunks = [pa.concat_arrays(val_chunks)]
    lengths, cols, data = [], [], []
    for ind, val in zip(ind_chunks, val_chunks, strict=True):
        off_i, flat_i = _list_parts(ind, "indices")
        off_v, flat_v = _list_parts(val, "values")
        if not np.array_equal(off_i, off_v):
            bad = int(np.flatnonzero(np.diff(off_i) != np.diff(off_v))[0])
            raise InputDataError(
                f"tfidf row at position {bad} of a batch has {off_i[bad + 1] - off_i[bad]} "
                f"indices but {off_v[bad + 1] - off_v[bad]} values"
            )
        if flat_i.null_count or flat_v.null_count:
            raise InputDataError("tfidf 'indices'/'values' lists hold null elements")
        lengths.append(np.diff(off_i))
        cols.append(flat_i.to_numpy(zero_copy_only=False).astype(np.int32, copy=False))
        data.append(flat_v.to_numpy(zero_copy_only=False).astype(np.float32, copy=False))
    n = sum(len(c) for c in lengths)
    indptr = np.zeros(n + 1, dtype=np.int64)
    if n:
        np.cumsum(np.concatenate(lengths), out=indptr[1:])
    return indptr, np.concatenate(cols), np.concatenate(data)


def check_rows(rows: np.ndarray, *, lang: str) -> np.ndarray:
    """Validate that ``rows`` is a permutation of ``0..n-1``; return ``argsort(rows)``.

    Raises
    ------
    InputDataError
        Naming the first missing or repeated row number.
    """
    rows = np.asarray(rows, dtype=np.int64)
    n = rows.shape[0]
    if n and (rows.min() < 0 or rows.max() >= n):
        raise InputDataError(
            f"tfidf language {lang!r}: row numbers must be 0..{n - 1} for {n} rows; found "
            f"{rows.min()}..{rows.max()}. Fix: rerun the tfidf stage."
        )
    counts = np.bincount(rows, minlength=n)
    if n and counts.max() > 1:
        raise InputDataError(
            f"tfidf language {lang!r}: row {int(np.argmax(counts))} occurs "
            f"{int(counts.max())} times. Fix: rerun the tfidf stage."
        )
    return np.argsort(rows, kind="stable")


def arrow_to_csr(
    table: pa.Table, n_terms: int, *, lang: str = "?", n_concepts: int | None = None
) -> tuple[sp.csr_matrix, np.ndarray]:
    """One language's tfidf rows as a CSR matrix ordered by ``row``.

    Parameters
    ----------
    table : pyarrow.Table
        Columns ``row``, ``concept_index``, ``indices``, ``values`` of one language (any row
        order, any chunking).
    n_terms : int
        p_l, the language's vocabulary size.
    lang : str
        Used in error messages.
    n_concepts : int, optional
        K; when given, ``concept_index`` must lie in ``[0, K)``.

    Returns
    -------
    x : scipy.sparse.csr_matrix of shape (n_l, p_l), float32
        Row ``i`` is the document with ``row == i``.
    concept_index : ndarray of int64, shape (n_l,)

    Raises
    ------
    InputDataError
        Rows not a permutation of ``0..n_l-1``, term indices outside ``[0, p_l)``, concept
        indices outside ``[0, K)``, ragged or null lists, non-finite values.
    """
    missing = [
        c for c in ("row", "concept_index", "indices", "values") if c not in table.schema.names
    ]
    if missing:
        raise InputDataError(f"tfidf table for {lang!r} lacks columns {missing}")
    order = check_rows(table.column("row").to_numpy(), lang=lang)
    concepts = table.column("concept_index").to_numpy().astype(np.int64)
    if (
        n_concepts is not None
        and concepts.size
        and (concepts.min() < 0 or concepts.max() >= n_concepts)
    ):
        raise InputDataError(
            f"tfidf language {lang!r}: concept_index {concepts.min()}..{concepts.max()} outside "
            f"[0, {n_concepts}) (the manifest's concept count). Fix: rerun the tfidf stage."
        )
    indptr, cols, data = csr_arrays(table.column("indices"), table.column("values"))
    if cols.size and (cols.min() < 0 or cols.max() >= n_terms):
        raise InputDataError(
            f"tfidf language {lang!r}: term index {int(cols.min())}..{int(cols.max())} outside "
            f"[0, {n_terms}) (the vocabulary size). Fix: rerun the vocabulary and tfidf stages."
        )
    if not np.all(np.isfinite(data)):
        raise InputDataError(f"tfidf language {lang!r}: values hold NaN or Inf")
    x = sp.csr_matrix((data, cols, indptr), shape=(len(order), int(n_terms)))
    if not np.array_equal(order, np.arange(len(order))):
        x = x[order]
        concepts = concepts[order]
    return x, concepts


class TfidfLayout:
    """Sizes of a tfidf dataset read from its manifest.

    Attributes
    ----------
    languages : tuple of str
        The selected languages, in a fixed (sorted) order unless given explicitly.
    n_concepts : int
        K.
    n_terms, n_docs, nnz : dict of str to int
        Per selected language.
    """

    def __init__(
        self, report: dict[str, Any], languages: list[str] | tuple[str, ...] | None, path: str
    ):
        per = report.get("per_language", {})
        if "concepts" not in report or not per:
            raise InputDataError(
                f"the tfidf manifest at {path} has no report.concepts / report.per_language. "
                "Fix: rerun the tfidf stage."
            )
        have = sorted(lang for lang, s in per.items() if s.get("documents", 0) > 0)
        if languages is None:
            languages = have
        unknown = [lang for lang in languages if lang not in have]
        if unknown:
            raise InputDataError(
                f"languages {unknown} have no training documents in the tfidf dataset at {path}; "
                f"available: {have}"
            )
        if not languages:
            raise InputDataError(f"the tfidf dataset at {path} has no training documents")
        self.languages = tuple(languages)
        self.n_concepts = int(report["concepts"])
        self.n_terms = {lang: int(per[lang]["vocabulary"]) for lang in self.languages}
        self.n_docs = {lang: int(per[lang]["documents"]) for lang in self.languages}
        self.nnz = {lang: int(per[lang].get("nnz", 0)) for lang in self.languages}


def read_tfidf_layout(spark: Any, tfidf_path: str, languages=None) -> TfidfLayout:
    """The :class:`TfidfLayout` of the tfidf dataset at ``tfidf_path`` (reads the manifest)."""
    from pipeline.io.datasets import read_manifest
    from pipeline.io.schemas import TFIDF

    report = read_manifest(spark, TFIDF, tfidf_path).get("report", {})
    return TfidfLayout(report, languages, tfidf_path)


def local_backend_from_tfidf(
    spark: Any,
    tfidf_path: str,
    *,
    dtype: str = "float32",
    transpose: str = "implicit",
    languages: list[str] | tuple[str, ...] | None = None,
):
    """A :class:`~pipeline.backends.local.LocalCorpusBackend` holding the tfidf dataset.

    Each language is read on the driver (:func:`_language_tables`) and converted by
    :func:`arrow_to_csr`.

    Parameters
    ----------
    spark : SparkSession
    tfidf_path : str
    dtype : {"float32", "float64"}
    transpose : {"implicit", "csr"}
    languages : sequence of str, optional
        Default: every language with training documents, sorted.

    Raises
    ------
    InputDataError
        Bad rows (see :func:`arrow_to_csr`) or a document count differing from the manifest.
    """
    layout = read_tfidf_layout(spark, tfidf_path, languages)
    tables = _language_tables(spark, tfidf_path, layout.languages)
    return _local_backend(layout, tables, dtype=dtype, transpose=transpose)


def local_backend_from_frame(
    tfidf: Any,
    layout: TfidfLayout,
    *,
    dtype: str = "float32",
    transpose: str = "implicit",
):
    """A :class:`~pipeline.backends.local.LocalCorpusBackend` holding the rows of a DataFrame.

    Parameters
    ----------
    tfidf : DataFrame
        Rows with the ``tfidf`` dataset's columns (at least ``lang, row, concept_index,
        indices, values``), numbered 0..n_l-1 per language; collected to the driver one
        language at a time (``toArrow``, which Spark Connect sessions have too).
    layout : TfidfLayout
        The sizes the rows must have (languages, p_l, n_l, K).
    dtype, transpose
        As for :func:`local_backend_from_tfidf`.

    Raises
    ------
    InputDataError
        Bad rows (see :func:`arrow_to_csr`) or a document count differing from ``layout``.
    """
    tables = (
        (lang, _collect_language(tfidf, lang, "the fitted DataFrame")) for lang in layout.languages
    )
    return _local_backend(layout, tables, dtype=dtype, transpose=transpose)


def _local_backend(
    layout: TfidfLayout,
    tables: Iterator[tuple[str, pa.Table]],
    *,
    dtype: str,
    transpose: str,
):
    """Each language's table converted by :func:`arrow_to_csr` and checked against ``layout``."""
    from pipeline.backends.local import LocalCorpusBackend

    data = {}
    for lang, table in tables:
        x, concepts = arrow_to_csr(
            table, layout.n_terms[lang], lang=lang, n_concepts=layout.n_concepts
        )
        if x.shape[0] != layout.n_docs[lang]:
            raise InputDataError(
                f"tfidf language {lang!r}: {x.shape[0]} rows but the manifest reports "
                f"{layout.n_docs[lang]}. Fix: rerun the tfidf stage."
            )
        log.info("tfidf %s: %d x %d, nnz %d", lang, x.shape[0], x.shape[1], x.nnz)
        data[lang] = (x, concepts)
    return LocalCorpusBackend(data, layout.n_concepts, dtype=dtype, transpose=transpose)


_TFIDF_COLUMNS = ["row", "concept_index", "indices", "values"]


def _language_tables(
    spark: Any, tfidf_path: str, languages: Sequence[str]
) -> Iterator[tuple[str, pa.Table]]:
    """Each language's tfidf rows as one Arrow table, one language at a time.

    A local (or locally mounted) Parquet dataset is read with pyarrow directly: no Spark job,
    and no ``spark.driver.maxResultSize`` limit (the largest language of a Wikipedia-size
    corpus exceeds Spark's default limit). Delta tables and other stores are collected through
    Spark (``toArrow()``); there the limit applies and the error says so.
    """

    from pipeline.io import delta
    from pipeline.io.arrow_scan import arrow_dataset
    from pipeline.io.datasets import HadoopFS, read_dataset
    from pipeline.io.schemas import TFIDF

    fs = HadoopFS(spark, tfidf_path)
    if fs.is_local() and not delta.is_delta_table(fs, tfidf_path):
        dataset = arrow_dataset(tfidf_path)
        for lang in languages:
            yield lang, dataset.to_table(columns=_TFIDF_COLUMNS, filter=pc.field("lang") == lang)
        return
    df = read_dataset(spark, TFIDF, tfidf_path)
    for lang in languages:
        yield lang, _collect_language(df, lang, tfidf_path)


def _collect_language(df: Any, lang: str, where: str) -> pa.Table:
    """One language's rows of the tfidf frame ``df`` collected to the driver as Arrow;
    ConfigError naming the fix when they exceed ``spark.driver.maxResultSize``."""
    from pyspark.sql import functions as F

    try:
        return df.filter(F.col("lang") == lang).select(*_TFIDF_COLUMNS).toArrow()
    except Exception as exc:
        if "maxResultSize" not in str(exc):
            raise
        raise ConfigError(
            f"train.backend=local collects language {lang!r} of {where} to the driver "
            f"and it exceeds spark.driver.maxResultSize ({_first_line(exc)}). Fix: raise "
            "it (spark.conf: {spark.driver.maxResultSize: 8g} as in conf/cluster.yaml; 0 "
            "= unlimited), or train with train.backend=spark."
        ) from None


def _first_line(exc: BaseException) -> str:
    text = str(exc)
    at = text.find("Total size of serialized results")
    return text[at:].splitlines()[0] if at >= 0 else text.splitlines()[0]
