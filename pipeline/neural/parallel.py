"""A parallel corpus's documents as training pairs for the encoder methods (T-LASER,
cT-LASER: ``train.<method>.parallel_corpus``), from an Arrow table of the document contract.

Spark-free, so the train stage (which reads the corpus through its session) and
``bench/bench_ctlaser.py`` (which reads a Parquet file, also on a machine without Spark)
select the same documents.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["parallel_documents"]


def parallel_documents(
    table: pa.Table, langs: list[str], max_concepts: int, seed: int
) -> dict[str, tuple[list[str], np.ndarray]]:
    """Per language of ``langs``, the texts and 0-based concept indices of ``table``'s
    documents (columns concept_id, lang, doc_id, text).

    One document per concept and language (the first by doc_id); only concepts with
    documents in two or more of ``langs`` (a pair needs two); a seeded sample of
    ``max_concepts`` of them when that is positive and smaller. Concept indices follow the
    sorted concept ids; every language is present in the result, possibly empty.
    """
    table = table.select(["concept_id", "lang", "doc_id", "text"])
    table = table.filter(pc.is_in(table.column("lang"), value_set=pa.array(langs)))
    table = table.sort_by([(c, "ascending") for c in ("concept_id", "lang", "doc_id")])
    key = pc.binary_join_element_wise(table.column("concept_id"), table.column("lang"), "\0")
    key = key.to_numpy(zero_copy_only=False)
    first = np.ones(len(key), dtype=bool)
    first[1:] = key[1:] != key[:-1]
    table = table.filter(pa.array(first))
    ids, counts = np.unique(table.column("concept_id").to_numpy(zero_copy_only=False),
                            return_counts=True)  # fmt: skip
    keep = ids[counts >= 2]
    if 0 < max_concepts < keep.size:
        keep = np.sort(np.random.default_rng(seed).choice(keep, max_concepts, replace=False))
    table = table.filter(pc.is_in(table.column("concept_id"), value_set=pa.array(keep)))
    index = np.searchsorted(keep, table.column("concept_id").to_numpy(zero_copy_only=False))
    out = {}
    for lang in langs:
        mask = pc.equal(table.column("lang"), lang).to_numpy(zero_copy_only=False)
        out[lang] = (table.column("text").filter(mask).to_pylist(), index[mask].astype(np.int64))
    return out
