"""Corpus backends (engines): where X lives and how a pass over it runs.

The solvers of :mod:`pipeline.linalg` see only the :class:`~pipeline.linalg.backend.CorpusBackend`
contract; its implementations live here, as siblings behind one factory, :func:`make_backend`:

- :mod:`~pipeline.backends.local`: X as scipy CSR in this process (laptops, tests, the default);
- :mod:`~pipeline.backends.spark`: X cached on the executors as CSR blocks; its parts are
  :mod:`~pipeline.backends.spark_blocks` (building and checking the cached blocks),
  :mod:`~pipeline.backends.spark_passes` (one pass as one Spark job) and
  :mod:`~pipeline.backends.spark_solve` (a whole CG solve as one Spark job);
- :mod:`~pipeline.backends.loader`: reading the ``tfidf`` dataset into either.

The concept-grouped corpus of JPLSA, CPLSA and S2Net
(:class:`~pipeline.linalg.groups.GroupedCorpus`) has the same two engines,
:mod:`~pipeline.backends.local_groups` and :mod:`~pipeline.backends.spark_groups`, built by
:func:`make_grouped_corpus`.

Importing this package imports neither Spark nor a backend module; :func:`make_backend`
imports the one it builds.

Both backends are built from the same ``tfidf`` dataset with the same defaults
(:data:`DEFAULTS`); options that only one backend understands are rejected for the other
rather than silently ignored.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from pipeline.backends.params import BACKEND_DEFAULTS as _D
from pipeline.errors import ConfigError
from pipeline.linalg.params import PASS_DTYPES

if TYPE_CHECKING:
    from pipeline.linalg.backend import CorpusBackend

__all__ = ["BACKEND_KINDS", "DEFAULTS", "make_backend", "make_grouped_corpus"]

#: Allowed values of ``kind``.
BACKEND_KINDS = ("local", "spark")

#: Shared defaults of every backend option (``None``: the backend's own rule, documented on
#: :func:`make_backend`).
DEFAULTS: dict[str, Any] = {
    "dtype": _D.dtype,
    "languages": None,
    "transpose": "implicit",
    "partitions_per_language": None,
    "solve_in_task_max_nnz": _D.solve_in_task_max_nnz,
    "solve_in_task_memory_mb": _D.solve_in_task_memory_mb,
    "solve_tasks": _D.solve_tasks,
    "resident_memory_mb": _D.resident_memory_mb,
}

#: Options each kind accepts beyond ``dtype`` and ``languages``.
_SPECIFIC = {
    "local": ("transpose",),
    "spark": (
        "partitions_per_language",
        "solve_in_task_max_nnz",
        "solve_in_task_memory_mb",
        "solve_tasks",
        "resident_memory_mb",
    ),
}


def make_backend(
    kind: Literal["local", "spark"],
    spark: Any,
    tfidf_path: str,
    *,
    dtype: str = DEFAULTS["dtype"],
    languages: Sequence[str] | None = DEFAULTS["languages"],
    **options: Any,
) -> CorpusBackend:
    """Build the corpus backend ``kind`` over the tfidf dataset at ``tfidf_path``.

    Parameters
    ----------
    kind : {"local", "spark"}
        ``"local"``: X collected to the driver as scipy CSR
        (:func:`~pipeline.backends.loader.local_backend_from_tfidf`); ``"spark"``: X cached
        on the executors (:meth:`~pipeline.backends.spark.SparkCorpusBackend.from_tfidf`).
    spark : SparkSession
    tfidf_path : str
    dtype : {"float32", "float64"}
        Arithmetic of the passes over X.
    languages : sequence of str, optional
        Default: every language with training documents, sorted.
    **options
        ``transpose`` ({"implicit", "csr"}, local only, default ``"implicit"``);
        ``partitions_per_language``, ``solve_in_task_max_nnz``, ``solve_in_task_memory_mb``,
        ``solve_tasks``, ``resident_memory_mb`` (spark only): the ``train.*`` keys of the same names
        (docs/configuration.md), whose defaults these are.

    Raises
    ------
    ConfigError
        Unknown ``kind`` or ``dtype``, or an option the chosen backend does not take.
    """
    if kind not in BACKEND_KINDS:
        raise ConfigError(f"backend kind must be one of {BACKEND_KINDS}; got {kind!r}")
    if dtype not in PASS_DTYPES:
        raise ConfigError(f"backend dtype must be one of {PASS_DTYPES}; got {dtype!r}")
    unknown = sorted(set(options) - set(_SPECIFIC[kind]))
    if unknown:
        raise ConfigError(
            f"backend {kind!r} does not take option(s) {unknown}; it takes "
            f"{['dtype', 'languages', *_SPECIFIC[kind]]}"
        )
    opts = {name: options.get(name, DEFAULTS[name]) for name in _SPECIFIC[kind]}
    if kind == "local":
        from pipeline.backends.loader import local_backend_from_tfidf

        return local_backend_from_tfidf(spark, tfidf_path, dtype=dtype, languages=languages, **opts)
    from pipeline.backends.spark import SparkCorpusBackend

    return SparkCorpusBackend.from_tfidf(
        spark, tfidf_path, dtype=dtype, languages=languages, **opts
    )


def make_grouped_corpus(
    kind: Literal["local", "spark"],
    frame: Any,
    *,
    layout: Any,
    n_docs: dict[str, int],
    n_concepts: int,
    n_blocks: int,
    weighting: str,
) -> Any:
    """Build the concept-grouped corpus of ``frame`` on engine ``kind``.

    Parameters
    ----------
    kind : {"local", "spark"}
        ``"local"``: collected to the driver
        (:class:`~pipeline.backends.local_groups.LocalGroupedCorpus`); ``"spark"``: cached on
        the executors (:class:`~pipeline.backends.spark_groups.SparkGroupedCorpus`).
    frame : DataFrame
        One row per training document: ``lang_index, row, concept_index, indices, values``.
    layout : TermLayout
    n_docs : dict of str to int
    n_concepts : int
    n_blocks : int
    weighting : {"counts", "tfidf"}

    Returns
    -------
    GroupedCorpus
    """
    if kind not in BACKEND_KINDS:
        raise ConfigError(f"backend kind must be one of {BACKEND_KINDS}; got {kind!r}")
    opts = {"n_blocks": n_blocks, "weighting": weighting}
    if kind == "local":
        from pipeline.backends.local_groups import LocalGroupedCorpus

        return LocalGroupedCorpus.from_frame(frame, layout, n_docs, n_concepts, **opts)
    from pipeline.backends.spark_groups import SparkGroupedCorpus

    return SparkGroupedCorpus.from_frame(frame, layout, n_docs, n_concepts, **opts)
