"""The training rows grouped by concept, for JPLSA, CPLSA and S2Net
(:class:`~pipeline.linalg.groups.GroupedCorpus`, built by
:func:`pipeline.backends.make_grouped_corpus` on the ``train.backend`` engine).

What the rows hold:

* ``"tfidf"`` (S2Net): the training rows as the ``tfidf`` dataset stores them;
* ``"counts"`` (the topic models): raw in-vocabulary term counts. The ``tfidf`` dataset keeps
  only L2-normalised weights, from which counts cannot be recovered exactly, so they are
  counted again from the ``documents`` dataset: each training row is joined with its
  document by ``doc_id`` and tokenised on the executors with the model's tokeniser and the
  training vocabulary (:func:`~pipeline.features.weighting.count_rows`, the function that
  folding-in uses at inference), so training and embedding count alike. Every vocabulary
  term counts, also one with idf 0. A training row whose document is gone (the documents
  were re-ingested after the tfidf stage) is an error that says which stages to rerun.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pipeline.backends import make_grouped_corpus
from pipeline.backends.loader import read_tfidf_layout
from pipeline.config import TextConfig
from pipeline.errors import InputDataError
from pipeline.features.vectorize import language_vocabularies, vectorize_by_language
from pipeline.features.weighting import count_rows
from pipeline.io.datasets import read_dataset
from pipeline.io.schemas import DOCUMENTS, TFIDF
from pipeline.linalg.backend import TermLayout
from pipeline.linalg.groups import GroupedCorpus, default_blocks
from pipeline.text.tokenizer import Tokenizer

__all__ = ["WEIGHTINGS", "count_fn", "grouped_rows", "load_grouped_corpus"]

log = logging.getLogger(__name__)

#: What a grouped corpus' rows can hold.
WEIGHTINGS = ("counts", "tfidf")

_ROWS_SCHEMA = (
    "lang_index int, row long, concept_index long, indices array<int>, values array<float>"
)


def count_fn(
    tokenizer: Tokenizer, vocabularies: Any, languages: list[str]
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A ``mapInArrow`` function: (lang, row, concept_index, text) -> term-count rows.

    ``vocabularies`` is a Spark broadcast of ``{lang: (terms, idf)}``.
    """
    vocab_of = language_vocabularies(vocabularies)

    def fn(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for rows in vectorize_by_language(batches, tokenizer, vocab_of, count_rows):
            n = rows.part.num_rows
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array(np.full(n, languages.index(rows.lang), dtype=np.int32)),
                    rows.part.column("row"),
                    rows.part.column("concept_index"),
                    rows.indices,
                    rows.values,
                ],
                names=["lang_index", "row", "concept_index", "indices", "values"],
            )

    return fn


def grouped_rows(
    spark: SparkSession,
    rows_path: str,
    languages: list[str],
    vocabulary: dict[str, dict],
    weighting: str,
    *,
    text: TextConfig,
    documents: str,
) -> DataFrame:
    """The training rows at ``rows_path`` as ``lang_index, row, concept_index, indices,
    values``: TF-IDF weights or term counts (module docstring), counted with the tokeniser
    of ``text`` from the documents dataset at ``documents``."""
    if weighting not in WEIGHTINGS:
        raise ValueError(f"weighting must be one of {WEIGHTINGS}; got {weighting!r}")
    rows = read_dataset(spark, TFIDF, rows_path).filter(F.col("lang").isin(languages))
    index = F.array_position(F.array(*[F.lit(lg) for lg in languages]), F.col("lang")) - 1
    if weighting == "tfidf":
        return rows.select(
            index.cast("int").alias("lang_index"), "row", "concept_index", "indices", "values"
        )
    docs = read_dataset(spark, DOCUMENTS, documents).select("doc_id", "lang", "text")
    joined = rows.select("lang", "row", "concept_index", "doc_id").join(docs, ["doc_id", "lang"])
    vocab = {lg: (vocabulary[lg]["terms"], vocabulary[lg]["idf"]) for lg in languages}
    bc = spark.sparkContext.broadcast(vocab)
    tokenizer = Tokenizer.from_config(text)
    return joined.select("lang", "row", "concept_index", "text").mapInArrow(
        count_fn(tokenizer, bc, languages), _ROWS_SCHEMA
    )


def load_grouped_corpus(
    spark: SparkSession,
    rows_path: str,
    languages: list[str],
    vocabulary: dict[str, dict],
    weighting: str,
    *,
    engine: str,
    text: TextConfig,
    documents: str,
    partitions: int | None = None,
) -> GroupedCorpus:
    """The training rows at ``rows_path`` grouped by concept on the ``engine``
    (``train.backend``) engine, in ``partitions`` blocks (a method's
    ``train.<method>.pair_partitions``; None: :func:`~pipeline.linalg.groups.default_blocks`);
    term counts are counted with the tokeniser of ``text`` from the documents dataset at
    ``documents`` (:func:`grouped_rows`).

    Raises
    ------
    InputDataError
        When training rows lack their document (counts) or the row count differs from the
        dataset's manifest.
    """
    layout_info = read_tfidf_layout(spark, rows_path, languages)
    layout = TermLayout(languages, [layout_info.n_terms[lg] for lg in languages])
    n_docs = {lg: layout_info.n_docs[lg] for lg in languages}
    nnz = sum(layout_info.nnz.values())
    n_blocks = default_blocks(nnz, partitions, layout_info.n_concepts)
    frame = grouped_rows(
        spark, rows_path, languages, vocabulary, weighting, text=text, documents=documents
    )
    corpus = make_grouped_corpus(
        engine,
        frame,
        layout=layout,
        n_docs=n_docs,
        n_concepts=layout_info.n_concepts,
        n_blocks=n_blocks,
        weighting=weighting,
    )
    have = corpus.document_count()
    if have != sum(n_docs.values()):
        corpus.close()
        hint = (
            "training rows whose document is not in the documents dataset: rerun the "
            "vocabulary and tfidf stages on the current documents"
            if weighting == "counts"
            else "rerun the tfidf stage"
        )
        raise InputDataError(
            f"the grouped training corpus has {have} documents but {rows_path} lists "
            f"{sum(n_docs.values())}: {hint}"
        )
    log.info(
        "grouped corpus (%s, %s backend): %d documents of %d concepts in %d blocks, nnz %d",
        weighting,
        engine,
        have,
        layout_info.n_concepts,
        n_blocks,
        corpus.nnz,
    )
    return corpus
