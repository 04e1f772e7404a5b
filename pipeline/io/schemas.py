"""The data contracts between jobs (docs/design.md, data contracts), declared once.

Each dataset is a Spark schema plus the column it is partitioned by. Readers
check a dataset against its schema; writers select exactly these columns in
this order, so a stage can never publish an unexpected shape.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.types import (
    ArrayType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    schema: StructType
    partition_by: tuple[str, ...] = ()
    # Which stage writes it (named in "run stage X first" errors).
    producer: str = ""

    @property
    def columns(self) -> list[str]:
        return [f.name for f in self.schema.fields]


def _s(*fields: tuple[str, object, bool]) -> StructType:
    return StructType([StructField(n, t, nullable) for n, t, nullable in fields])  # type: ignore[arg-type]


DOCUMENTS = DatasetSpec(
    "documents",
    _s(
        ("doc_id", StringType(), False),
        ("concept_id", StringType(), False),
        ("lang", StringType(), False),
        ("title", StringType(), True),
        ("text", StringType(), False),
    ),
    partition_by=("lang",),
    producer="ingest",
)

VOCABULARY = DatasetSpec(
    "vocabulary",
    _s(
        ("lang", StringType(), False),
        ("term", StringType(), False),
        ("term_index", IntegerType(), False),
        ("df", LongType(), False),
        ("idf", FloatType(), False),
    ),
    partition_by=("lang",),
    producer="vocabulary",
)

# ``concept_index`` is a column beside the contract's: it saves every consumer a join with
# ``concepts`` (the solver needs the integer concept of each row).
TFIDF = DatasetSpec(
    "tfidf",
    _s(
        ("lang", StringType(), False),
        ("row", LongType(), False),
        ("doc_id", StringType(), False),
        ("concept_id", StringType(), False),
        ("concept_index", LongType(), False),
        ("indices", ArrayType(IntegerType(), False), False),
        ("values", ArrayType(FloatType(), False), False),
    ),
    partition_by=("lang",),
    producer="tfidf",
)

CONCEPTS = DatasetSpec(
    "concepts",
    _s(
        ("concept_id", StringType(), False),
        ("concept_index", LongType(), False),
        ("n_docs", LongType(), False),
        ("langs", ArrayType(StringType(), False), False),
    ),
    producer="tfidf",
)

EMBEDDINGS = DatasetSpec(
    "embeddings",
    _s(
        ("doc_id", StringType(), False),
        ("lang", StringType(), False),
        ("concept_id", StringType(), True),
        # Distinct in-vocabulary terms of the document; 0 means the vector is all zeros.
        ("n_terms", IntegerType(), False),
        ("vector", ArrayType(FloatType(), False), False),
    ),
    partition_by=("lang",),
    producer="embed",
)

# Test and validation concepts per language pair (stage ``split``); their union is
# what ``features.heldout_concepts`` removes from vocabulary, IDF and training.
SPLITS = DatasetSpec(
    "splits",
    _s(
        ("concept_id", StringType(), False),
        ("pair", StringType(), False),  # "l1-l2", languages sorted
        ("role", StringType(), False),  # "test" | "validation"
        ("priority", LongType(), False),  # seeded draw order within the pair and role
        ("seed", LongType(), False),
    ),
    producer="split",
)

# ``measure`` is the similarity (cosine | csls), ``metric`` precision | mrr (k null for
# mrr). ``split`` is test | validation (validation rows: the λ curve, one ``lam`` each);
# ``csls_source`` (queries | collection) is null for cosine.
EVALUATION = DatasetSpec(
    "evaluation",
    _s(
        ("setup", StringType(), False),
        ("method", StringType(), False),
        ("split", StringType(), False),
        ("lam", DoubleType(), False),
        ("query_lang", StringType(), False),
        ("target_lang", StringType(), False),
        ("measure", StringType(), False),
        ("csls_source", StringType(), True),
        ("k", IntegerType(), True),
        ("metric", StringType(), False),
        ("value", FloatType(), False),
        ("n_queries", LongType(), False),
        ("n_candidates", LongType(), False),
    ),
    producer="evaluate",
)

DATASETS: dict[str, DatasetSpec] = {
    s.name: s for s in (DOCUMENTS, VOCABULARY, TFIDF, CONCEPTS, SPLITS, EMBEDDINGS, EVALUATION)
}

#: Stages that write another stage's datasets: ``ingest_wikipedia`` is the alternative first
#: stage, writing ``documents`` as ``ingest`` does (each spec names one ``producer``, the one
#: "run stage X first" errors suggest).
WRITES_AS: dict[str, str] = {"ingest_wikipedia": "ingest"}


def written_by(stage: str) -> dict[str, DatasetSpec]:
    """The datasets ``stage`` writes, by name (``ingest_wikipedia``: those of ``ingest``)."""
    producer = WRITES_AS.get(stage, stage)
    return {name: spec for name, spec in DATASETS.items() if spec.producer == producer}
