"""The Spark ML stages' own parameters: their columns and output type, declared once.

Every other parameter of :class:`~pipeline.sparkml.Cr5` and
:class:`~pipeline.sparkml.Cr5Embedding` is a configuration key (``train.*``, ``features.*``,
``text.*``, ``embed.*``) taken from its one declaration (:mod:`pipeline.sparkml.derived`);
these are the few that only a DataFrame stage has. Like every declaration module, this one
imports nothing but :mod:`pipeline.params`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pipeline.params import param

__all__ = ["StageParams"]


@dataclass(frozen=True)
class StageParams:
    """Columns and output of the Spark ML stages (``inputCol`` and ``outputCol`` are
    pyspark's shared parameters)."""

    lang_col: str = param(
        "lang",
        doc="Column of each document's language code (trimmed and lower-cased, as everywhere: "
        "EN is en).",
    )
    concept_col: str = param(
        "concept_id",
        doc="fit: column of the concept each document is about; documents of one concept in "
        "several languages are what Cr5 learns from.",
    )
    doc_id_col: str = param(
        "doc_id",
        doc="fit: column of unique document ids, which number the training rows as the tfidf "
        "stage does. When the DataFrame has no such column, a document's id is "
        "<lang>:<concept>, which allows one document per concept and language.",
    )
    output_type: Literal["array", "vector"] = param(
        "array",
        doc="The embedding column's type: array (array<float>, float32, as in the embeddings "
        "dataset) or vector (a pyspark.ml.linalg DenseVector of float64 values, VectorUDT, for "
        "pyspark.ml stages downstream). A document in a language the model lacks gets null "
        "under embed.on_unknown_language=warn.",
    )
    work_dir: str | None = param(
        None,
        doc="fit: where the fit keeps its temporary files (paths.root of the fit: training "
        "checkpoints unless train.checkpoint_dir says otherwise; with train.backend=spark "
        "also the vocabulary and tfidf datasets, so on a cluster a directory every executor "
        "reads, e.g. on HDFS); removed after the fit. None: a new directory in the driver's "
        "temporary directory.",
    )
