"""The corpus backends' options, declared once: the arithmetic of a pass over X and how the
Spark backend partitions X and runs its solves (:func:`pipeline.backends.make_backend`).

Each field is a :func:`~pipeline.params.param` declaration; the configuration's ``train``
section embeds :class:`BackendParams` (:class:`pipeline.config.TrainConfig` subclasses it),
so ``train.dtype`` *is* :attr:`BackendParams.dtype`, and :func:`backend_options` turns a
section into the factory's keyword options.

This module imports nothing but :mod:`pipeline.params` and the standard library: the
configuration, which the Airflow DAG imports without numpy, embeds it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pipeline.params import param

__all__ = ["BACKEND_DEFAULTS", "BackendParams", "backend_options"]


@dataclass(frozen=True)
class BackendParams:
    """Options of a corpus backend (:class:`~pipeline.linalg.backend.CorpusBackend`): the
    arithmetic of its passes over X, and how the Spark backend partitions X and runs its
    solves (:func:`pipeline.backends.make_backend`); the keys ``train.<name>``."""

    dtype: Literal["float32", "float64"] = param("float32", doc="Arithmetic of the passes over X.")
    partitions_per_language: int | None = param(
        None,
        lo=1,
        doc="spark backend: row partitions per language of X (each cached as one CSR block, "
        "~8 bytes per nonzero). None: one block up to 2M nonzeros, else "
        "max(defaultParallelism, ceil(nnz_l / 2M)).",
    )
    solve_in_task_max_nnz: int | None = param(
        None,
        lo=0,
        doc="spark backend: a language with at most this many nonzeros is fused: each CG "
        "solve and each pass over it is ONE Spark job whose tasks work on the whole X_l, "
        "resident in their Python worker (~8 bytes per nonzero kept, ~17 at peak while a "
        "worker reads it from the cached blocks), instead of one job per CG iteration; "
        "0: never. None: chosen by the memory plan from the memory given to the Python "
        'workers (docs/performance.md, "Memory").',
    )
    resident_memory_mb: int | None = param(
        None,
        lo=0,
        doc="spark backend: Python memory per worker for the fused languages' X_l kept "
        "between jobs (least recently used out first); a language that does not fit is read "
        "from the cached blocks by every job instead. 0: keep none. None: chosen by the "
        "memory plan.",
    )
    solve_in_task_memory_mb: int = param(
        512,
        lo=1,
        doc="spark backend: working memory of one solving task's CG vectors (~9 arrays per "
        "term and right-hand side in train.cg_dtype: 36 bytes in float32, 72 in float64; "
        "columns run in chunks that fit). With the resident X_l "
        "this is Python memory on the executor: on YARN/Kubernetes it counts against "
        "spark.executor.memoryOverhead (or spark.executor.pyspark.memory).",
    )
    solve_tasks: int | None = param(
        None,
        lo=1,
        doc="spark backend: tasks of one fused solve, each solving a share of the right-hand "
        "sides with its own copy of X_l; None: Spark's default parallelism divided by the "
        "languages (they solve at once), at least 1.",
    )


#: The declared defaults, for keyword defaults of the backends.
BACKEND_DEFAULTS = BackendParams()


def backend_options(t: Any) -> dict[str, Any]:
    """Keyword options of :func:`pipeline.backends.make_backend` for the backend ``t.backend``
    (``"local"`` or ``"spark"``) with the :class:`BackendParams` fields of ``t`` (the
    configuration's ``train`` section): none for the local backend, the Spark backend's
    partitioning and fused-solve options for ``"spark"``."""
    if t.backend != "spark":
        return {}
    opts: dict[str, Any] = {
        "solve_in_task_max_nnz": t.solve_in_task_max_nnz,
        "solve_in_task_memory_mb": t.solve_in_task_memory_mb,
        "solve_tasks": t.solve_tasks,
        "resident_memory_mb": t.resident_memory_mb,
    }
    if t.partitions_per_language is not None:
        opts["partitions_per_language"] = t.partitions_per_language
    return opts
