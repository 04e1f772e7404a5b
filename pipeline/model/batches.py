"""The public embedding path over Arrow batches (Spark ``mapInArrow`` and in-process alike).

:func:`embed_batch` runs :meth:`pipeline.model.Cr5Model.embed_with_counts` per language of a
batch, so the ``embed`` stage and the evaluation's pools produce exactly the Python API's vectors.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.model.cr5_model import Cr5Model

__all__ = ["EMBEDDED_COLUMNS", "embed_batch"]

#: Columns of :func:`embed_batch`'s output, in order.
EMBEDDED_COLUMNS = ("doc_id", "lang", "concept_id", "n_terms", "vector")


def embed_batch(model: Cr5Model, batch: pa.RecordBatch, *, normalize: bool) -> pa.RecordBatch:
    """Embed one Arrow batch (columns doc_id, lang, text[, concept_id]); one row per doc."""
    n = batch.num_rows
    r = model.dim
    vectors = np.zeros((n, r), dtype=np.float32)
    counts = np.zeros(n, dtype=np.int32)
    langs = batch.column("lang")
    for lang in pc.unique(langs).to_pylist():
        rows = np.flatnonzero(pc.equal(langs, lang).to_numpy(zero_copy_only=False))
        texts = batch.column("text").take(pa.array(rows))
        v, c = model.embed_with_counts(texts, lang)
        vectors[rows] = v
        counts[rows] = c
    if normalize:
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        np.divide(vectors, norms, out=vectors, where=norms > 0)
    names = batch.schema.names
    concept = batch.column("concept_id") if "concept_id" in names else pa.nulls(n, pa.string())
    offsets = pa.array(np.arange(0, (n + 1) * r, r, dtype=np.int32))
    return pa.RecordBatch.from_arrays(
        [
            batch.column("doc_id"),
            langs,
            concept,
            pa.array(counts),
            pa.ListArray.from_arrays(offsets, pa.array(vectors.ravel())),
        ],
        names=["doc_id", "lang", "concept_id", "n_terms", "vector"],
    )
