"""``Cr5Embedding``: a fitted Cr5 model as a pyspark.ml ``Model`` (a Transformer).

``transform(df)`` adds the column ``outputCol`` holding each document's embedding: the text
of ``inputCol`` in the language of ``langCol`` embedded by the model exactly as the ``embed``
stage and :meth:`pipeline.model.Cr5Model.embed` embed it (:func:`pipeline.model.batches.
embed_arrays`). The work is a scalar Arrow UDF over batches of the two columns: only they
travel to the Python workers, each worker loads the model once (lazily, per language, from
the directory :func:`~pipeline.model.shipping.ship_model_to_session` made reachable) and the
function itself carries nothing but the model's location and version.

Persistence: ``save``/``load`` write pyspark.ml's parameter metadata and the model directory
under the stage's path (:mod:`pipeline.sparkml.persistence`), so ``Pipeline.save`` and
``PipelineModel.load`` round-trip it; nothing is pickled.
"""

from __future__ import annotations

import difflib
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark import keyword_only
from pyspark.ml import Model
from pyspark.ml.param.shared import HasInputCol, HasOutputCol
from pyspark.ml.util import (
    DefaultParamsReader,
    DefaultParamsWriter,
    MLReadable,
    MLReader,
    MLWritable,
    MLWriter,
)
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, FloatType

from pipeline.errors import ConfigError, InputDataError, ModelError
from pipeline.model.format import model_directory, read_model_json, verify_files
from pipeline.model.shipping import ship_model_to_session
from pipeline.sparkml.derived import EMBEDDING_PARAMS, params_mixin, set_declared_defaults
from pipeline.sparkml.persistence import get_directory, put_directory, remove_path

__all__ = ["MODEL_SUBDIR", "Cr5Embedding", "EmbeddingParams", "check_names", "embedding_udf"]

log = logging.getLogger(__name__)

#: The model directory's name under a saved stage's path.
MODEL_SUBDIR = "model"

#: Default columns: the documents dataset's ``text``, and the new column.
DEFAULT_INPUT_COL = "text"
DEFAULT_OUTPUT_COL = "embedding"

EmbeddingParams = params_mixin(
    "EmbeddingParams",
    EMBEDDING_PARAMS,
    "Parameters of the transform, shared by Cr5 and Cr5Embedding: the language column, "
    "the output type and the embed.* keys that apply.",
    __name__,
)


def check_names(stage: Any, names: dict[str, Any]) -> None:
    """ConfigError for a keyword that is no parameter of ``stage`` (with the nearest one)."""
    known = {p.name for p in stage.params}
    for name in names:
        if name not in known:
            near = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise ConfigError(
                f"{type(stage).__name__} has no parameter {name!r}{hint} (parameters: "
                f"{', '.join(sorted(known))})"
            )


def embedding_udf(
    location: str, version: str, *, normalize: bool, on_unknown: str, batch_rows: int
) -> Any:
    """The Arrow UDF ``(text, lang) -> array<float>`` of a model shipped to ``location``.

    It captures only strings, flags and a number. Per Arrow batch (sliced to
    ``batch_rows`` documents) it canonicalises the language codes and runs
    :func:`~pipeline.model.batches.embed_arrays`; a document whose language is null or
    unknown to the model gets null (``on_unknown`` ``"warn"``, logged by the worker) or fails
    the task (``"error"``, the message naming the language and the model's languages).
    """
    from pyspark.sql.functions import arrow_udf

    def embed(batches: Iterator[tuple[pa.Array, pa.Array]]) -> Iterator[pa.Array]:
        from pipeline.model.batches import embed_arrays, vector_array
        from pipeline.model.shipping import worker_model
        from pipeline.text.languages import canonical_langs

        model = worker_model(location, version)
        unknown = "error" if on_unknown == "error" else "skip"
        for texts, langs in batches:
            parts = []
            for lo in range(0, len(texts), batch_rows):
                t, lang = texts.slice(lo, batch_rows), langs.slice(lo, batch_rows)
                vectors, _, known = embed_arrays(
                    model, t, canonical_langs(lang), normalize=normalize, unknown=unknown
                )
                if not known.all():
                    log.warning(
                        "%d document(s) in languages the model lacks (or null) embedded as "
                        "null; model languages: %s",
                        int((~known).sum()),
                        ", ".join(model.languages),
                    )
                parts.append(vector_array(vectors, known))
            yield parts[0] if len(parts) == 1 else pa.concat_arrays(parts)

    return arrow_udf(embed, ArrayType(FloatType(), containsNull=False))


class Cr5Embedding(
    Model, HasInputCol, HasOutputCol, EmbeddingParams, MLReadable["Cr5Embedding"], MLWritable
):
    """A fitted Cr5 model: ``transform`` adds each document's embedding.

    Get one from :meth:`pipeline.sparkml.Cr5.fit`, from a model directory trained by the
    ``train`` stage (:meth:`from_model`), or by loading a saved one (:meth:`load`).

    Parameters (keyword only)
    -------------------------
    inputCol : str, default "text"
        Column of the documents' texts.
    outputCol : str, default "embedding"
        The new column: array<float> of length r (``outputType="vector"``: a VectorUDT).
    langCol, outputType, normalize, onUnknownLanguage, batchRows
        See :meth:`explainParams`; the last three are the ``embed.*`` keys of the same names.
    """

    @keyword_only
    def __init__(self, **kwargs: Any) -> None:
        super().__init__()
        self._setDefault(inputCol=DEFAULT_INPUT_COL, outputCol=DEFAULT_OUTPUT_COL)
        set_declared_defaults(self, EMBEDDING_PARAMS)
        self._model_dir: Path | None = None
        self._model_meta: dict[str, Any] = {}
        self.summary: dict[str, Any] | None = None
        self.setParams(**self._input_kwargs)

    @keyword_only
    def setParams(self, **kwargs: Any) -> Cr5Embedding:
        """Set parameters by keyword; ConfigError for an unknown name or a bad value."""
        check_names(self, kwargs)
        return self._set(**kwargs)

    def setInputCol(self, value: str) -> Cr5Embedding:
        return self._set(inputCol=value)

    def setOutputCol(self, value: str) -> Cr5Embedding:
        return self._set(outputCol=value)

    @classmethod
    def from_model(cls, path: str | os.PathLike, **params: Any) -> Cr5Embedding:
        """A transformer for the model directory at ``path`` (for example ``paths.model`` of
        the ``train`` stage), with ``params``; the files are checked (SHA-256) here."""
        stage = cls(**params)
        stage._attach(model_directory(path))
        return stage

    def _attach(self, path: Path) -> None:
        meta = read_model_json(path)
        if meta.get("phi_format", "dense") != "dense":
            raise ModelError(
                f"model {path} is a {meta.get('method')!r} selection model (sparse vectors over "
                "a union vocabulary); Cr5Embedding produces dense vectors. Use Cr5Model.embed"
            )
        verify_files(path, meta, list(meta["languages"]), checksums=True)
        self._model_dir = path.resolve()
        self._model_meta = meta

    @property
    def modelDirectory(self) -> str:
        """The model directory this stage embeds with (:class:`pipeline.model.Cr5Model`)."""
        return str(self._directory())

    @property
    def languages(self) -> list[str]:
        """The model's languages."""
        return list(self._model_meta.get("languages", []))

    @property
    def dim(self) -> int:
        """r, the length of every embedding."""
        return int(self._model_meta.get("r", 0))

    def _directory(self) -> Path:
        if self._model_dir is None:
            raise ModelError(
                "this Cr5Embedding has no model: fit Cr5, or use Cr5Embedding.from_model(path) "
                "or Cr5Embedding.load(path)"
            )
        return self._model_dir

    def _transform(self, dataset: DataFrame) -> DataFrame:
        path = self._directory()
        text, lang, out = self.getInputCol(), self.getLangCol(), self.getOutputCol()
        for param, col in (("inputCol", text), ("langCol", lang)):
            if col not in dataset.columns:
                raise InputDataError(
                    f"Cr5Embedding.transform: the DataFrame has no column {col!r} ({param}); "
                    f"its columns are {dataset.columns}. Fix: set{param[0].upper()}"
                    f"{param[1:]}(...)"
                )
        if out in dataset.columns:
            raise InputDataError(
                f"Cr5Embedding.transform: the DataFrame has a column {out!r} already "
                "(outputCol). Fix: setOutputCol(...) to a new name"
            )
        location = ship_model_to_session(dataset.sparkSession, str(path))
        fn = embedding_udf(
            location,
            str(self._model_meta.get("created_utc")),
            normalize=self.getNormalize(),
            on_unknown=self.getOnUnknownLanguage(),
            batch_rows=self.getBatchRows(),
        )
        column: Column = fn(F.col(text).cast("string"), F.col(lang).cast("string"))
        if self.getOutputType() == "vector":
            from pyspark.ml.functions import array_to_vector

            # (array_to_vector fails on null: languages the model lacks stay null)
            column = F.when(column.isNotNull(), array_to_vector(column))
        return dataset.withColumn(out, column)

    def write(self) -> MLWriter:
        """A writer of the parameters (pyspark.ml metadata) and the model directory."""
        return Cr5EmbeddingWriter(self)

    @classmethod
    def read(cls) -> MLReader[Cr5Embedding]:
        """A reader of what :meth:`write` saved."""
        return Cr5EmbeddingReader(cls)


class Cr5EmbeddingWriter(MLWriter):
    """``<path>/metadata``: the parameters; ``<path>/model``: the model directory."""

    def __init__(self, instance: Cr5Embedding) -> None:
        super().__init__()
        self.instance = instance

    def _handleOverwrite(self, path: str) -> None:
        remove_path(self.sparkSession, path)

    def saveImpl(self, path: str) -> None:
        source = self.instance._directory()
        meta = self.instance._model_meta
        extra = {
            "cr5": {
                "model": MODEL_SUBDIR,
                "model_created_utc": meta.get("created_utc"),
                "languages": meta.get("languages"),
                "r": meta.get("r"),
            }
        }
        DefaultParamsWriter.saveMetadata(self.instance, path, self.sparkSession, extra)
        put_directory(self.sparkSession, source, f"{path.rstrip('/')}/{MODEL_SUBDIR}")


class Cr5EmbeddingReader(MLReader["Cr5Embedding"]):
    """Reads what :class:`Cr5EmbeddingWriter` wrote; the model's files are checked."""

    def __init__(self, cls: type) -> None:
        super().__init__()
        self.cls = cls

    def load(self, path: str) -> Cr5Embedding:
        metadata = DefaultParamsReader.loadMetadata(path, self.sparkSession)
        sub = metadata.get("cr5", {}).get("model", MODEL_SUBDIR)
        directory = get_directory(self.sparkSession, f"{path.rstrip('/')}/{sub}")
        stage = self.cls()
        stage._attach(directory)
        stage._resetUid(metadata["uid"])
        DefaultParamsReader.getAndSetParams(stage, metadata)
        return stage
