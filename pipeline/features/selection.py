"""Which documents train: tokenisation on Spark, held-out concepts, the length filter.

The vocabulary and TF-IDF stages must agree exactly on the training documents, so
both build them here: documents of held-out concepts (test and validation
concepts chosen by the evaluation stage) are removed, and documents whose number
of distinct words falls outside ``[min_unique_words, max_unique_words]`` are
dropped (the paper keeps 50..1000; the count is over all tokens, before the
vocabulary is applied).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pipeline.config import FeaturesConfig
from pipeline.errors import InputDataError
from pipeline.io.datasets import HadoopFS, read_table
from pipeline.text.tokenizer import Tokenizer, distinct_tokens_per_doc

KEYS = ("doc_id", "concept_id", "lang")
TOKENIZED_SCHEMA = (
    "doc_id string, concept_id string, lang string, n_unique long, terms array<string>"
)


def _list_array(values: pa.Array, owner: np.ndarray, n: int) -> pa.ListArray:
    """Group ``values`` (sorted by ``owner``) into a list array of length ``n``."""
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.bincount(owner, minlength=n), out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), values)


def distinct_terms_fn(
    tokenizer: Tokenizer, extra: tuple[str, ...] = ()
) -> Callable[[Iterator[pa.RecordBatch]], Iterator]:
    """A ``mapInArrow`` function: documents -> their distinct terms and count
    (:data:`TOKENIZED_SCHEMA`), followed by the input columns ``extra`` unchanged."""

    def fn(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            n = batch.num_rows
            flat, doc_of = tokenizer.flat_tokens(batch.column("text"))
            distinct, docs, n_unique = distinct_tokens_per_doc(flat, doc_of, n)
            yield pa.RecordBatch.from_arrays(
                [batch.column(k) for k in KEYS]
                + [pa.array(n_unique, pa.int64()), _list_array(distinct, docs, n)]
                + [batch.column(k) for k in extra],
                names=[*KEYS, "n_unique", "terms", *extra],
            )

    return fn


def heldout_concepts(spark: SparkSession, path: str | None) -> DataFrame | None:
    """The held-out concept ids (one column ``concept_id``), or None."""
    if not path:
        return None
    if not HadoopFS(spark, path).exists(path):
        raise InputDataError(
            f"features.heldout_concepts {path} does not exist. Fix: run the split stage first "
            "or unset features.heldout_concepts."
        )
    df = read_table(spark, path)  # Parquet, or a Delta table's current version
    if "concept_id" not in df.columns:
        raise InputDataError(
            f"features.heldout_concepts {path} has no concept_id column (columns: {df.columns})"
        )
    return df.select(F.col("concept_id").cast("string")).distinct()


def length_reason(f: FeaturesConfig) -> F.Column:
    """Why a tokenised document is not a training document (null when it is), by the length
    filter of the ``features`` section ``f``."""
    return F.when(F.col("n_unique") < f.min_unique_words, F.lit("too_few_unique_words")).when(
        F.col("n_unique") > f.max_unique_words, F.lit("too_many_unique_words")
    )


def count_by_reason(df: DataFrame, reason: F.Column) -> dict[str, dict[str, int]]:
    """Per language: number of rows kept and dropped for each reason (one pass)."""
    rows = (
        df.select("lang", F.coalesce(reason, F.lit("kept")).alias("reason"))
        .groupBy("lang", "reason")
        .count()
        .collect()
    )
    out: dict[str, dict[str, int]] = {}
    for r in rows:
        out.setdefault(r["lang"], {})[r["reason"]] = r["count"]
    return dict(sorted(out.items()))


def flag_heldout(spark: SparkSession, docs: DataFrame, heldout: str | None) -> DataFrame:
    """``docs`` with a boolean column ``_held``: whether the document's concept is held out
    (``heldout``: ``features.heldout_concepts`` resolved,
    :meth:`~pipeline.config.Config.heldout_path`; all false without one)."""
    held = heldout_concepts(spark, heldout)
    if held is None:
        return docs.withColumn("_held", F.lit(False))
    flagged = docs.join(F.broadcast(held.withColumn("_held", F.lit(True))), "concept_id", "left")
    return flagged.withColumn("_held", F.coalesce(F.col("_held"), F.lit(False)))


def remove_heldout(
    spark: SparkSession, docs: DataFrame, heldout: str | None
) -> tuple[DataFrame, dict[str, int]]:
    """Drop documents of the held-out concepts at ``heldout`` (None: none); return (rest,
    held-out count per language)."""
    held = heldout_concepts(spark, heldout)
    if held is None:
        return docs, {}
    flagged = docs.join(F.broadcast(held.withColumn("_held", F.lit(True))), "concept_id", "left")
    counts = {
        r["lang"]: r["count"]
        for r in flagged.filter(F.col("_held")).groupBy("lang").count().collect()
    }
    return flagged.filter(F.col("_held").isNull()).drop("_held"), dict(sorted(counts.items()))
