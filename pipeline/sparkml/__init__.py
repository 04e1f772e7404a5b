"""Cr5 as pyspark.ml stages: the :class:`Cr5` estimator and its model, :class:`Cr5Embedding`.

They sit in a user's ``pyspark.ml.Pipeline`` beside any other stage and persist with
``Pipeline.save`` / ``PipelineModel.load``. The parameters are the configuration's keys
(:mod:`pipeline.sparkml.derived`), fitting runs the vocabulary, tfidf and training library
code of the stages (:mod:`pipeline.sparkml.estimator`), and embedding the public embedding
path in Arrow batches (:mod:`pipeline.sparkml.embedding`). Guide: ``docs/spark-ml.md``.
"""

from pipeline.sparkml.embedding import Cr5Embedding
from pipeline.sparkml.estimator import Cr5

__all__ = ["Cr5", "Cr5Embedding"]
