"""The public embedding path over Arrow batches (Spark ``mapInArrow``, Arrow UDFs and
in-process alike).

:func:`embed_arrays` runs :meth:`pipeline.model.Cr5Model.embed_with_counts` per language of
a batch; :func:`embed_batch` (the ``embed`` stage, the evaluation's pools) and the Spark ML
transformer (:class:`pipeline.sparkml.Cr5Embedding`) call it, so they all produce exactly the
Python API's vectors.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.errors import ModelError
from pipeline.model.cr5_model import Cr5Model
from pipeline.model.encode import normalize_rows
from pipeline.text.languages import canonical_lang

__all__ = ["EMBEDDED_COLUMNS", "embed_arrays", "embed_batch", "vector_array"]

#: Columns of :func:`embed_batch`'s output, in order.
EMBEDDED_COLUMNS = ("doc_id", "lang", "concept_id", "n_terms", "vector")


def embed_arrays(
    model: Cr5Model,
    texts: pa.Array,
    langs: pa.Array,
    *,
    normalize: bool,
    unknown: str = "error",
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Embed ``texts[i]`` in language ``langs[i]``.

    Parameters
    ----------
    model : Cr5Model
        A dense model.
    texts : pyarrow string array of shape (n,)
    langs : pyarrow string array of shape (n,)
        Canonical language codes (:func:`canonical_langs`).
    normalize : bool
        L2-normalise each vector (zero vectors stay zero).
    unknown : {"error", "skip"}
        A null language or one the model lacks: ModelError, or a zero vector marked in
        ``known``.

    Returns
    -------
    vectors : ndarray of float32, shape (n, r)
    counts : ndarray of int32, shape (n,)
        Distinct in-vocabulary terms of each text (0: the zero vector).
    known : ndarray of bool, shape (n,)
        Whether the text's language is one of the model's.
    """
    n = len(texts)
    vectors = np.zeros((n, model.dim), dtype=np.float32)
    counts = np.zeros(n, dtype=np.int32)
    known = np.ones(n, dtype=bool)
    for lang in pc.unique(langs).to_pylist():
        if lang is None:
            rows = np.flatnonzero(pc.is_null(langs).to_numpy(zero_copy_only=False))
        else:
            rows = np.flatnonzero(pc.equal(langs, lang).fill_null(False).to_numpy(False))
        if lang is None or canonical_lang(lang) not in model.meta["languages"]:
            if unknown == "error":
                what = "without a language (null)" if lang is None else f"in language {lang!r}"
                raise ModelError(
                    f"{len(rows)} document(s) {what}, which the model does not have; its "
                    f"languages are: {', '.join(model.languages)}"
                )
            known[rows] = False
            continue
        v, c = model.embed_with_counts(texts.take(pa.array(rows)), lang)
        vectors[rows] = v
        counts[rows] = c
    if normalize:
        normalize_rows(vectors)
    return vectors, counts, known


def vector_array(vectors: np.ndarray, valid: np.ndarray | None = None) -> pa.ListArray:
    """Rows of ``vectors`` (ndarray of float32, shape (n, r)) as an Arrow list<float> array;
    rows where ``valid`` (bool, shape (n,)) is False are null."""
    n, r = vectors.shape
    offsets = pa.array(np.arange(0, (n + 1) * r, r, dtype=np.int32))
    mask = None if valid is None or valid.all() else pa.array(~valid)
    return pa.ListArray.from_arrays(offsets, pa.array(vectors.ravel()), mask=mask)


def embed_batch(model: Cr5Model, batch: pa.RecordBatch, *, normalize: bool) -> pa.RecordBatch:
    """Embed one Arrow batch (columns doc_id, lang, text[, concept_id]); one row per doc."""
    n = batch.num_rows
    langs = batch.column("lang")
    vectors, counts, _ = embed_arrays(model, batch.column("text"), langs, normalize=normalize)
    names = batch.schema.names
    concept = batch.column("concept_id") if "concept_id" in names else pa.nulls(n, pa.string())
    return pa.RecordBatch.from_arrays(
        [batch.column("doc_id"), langs, concept, pa.array(counts), vector_array(vectors)],
        names=list(EMBEDDED_COLUMNS),
    )
