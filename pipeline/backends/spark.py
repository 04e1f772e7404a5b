"""Spark corpus backend: X_l row-partitioned and cached on the executors as CSR blocks.

:class:`SparkCorpusBackend` implements :class:`~pipeline.linalg.backend.CorpusBackend` by
composing three modules, one concern each:

- :mod:`~pipeline.backends.spark_blocks`: the tfidf dataset read into cached CSR row blocks,
  one job per language, whose load summary gives the column statistics and is checked against
  the manifest;
- :mod:`~pipeline.backends.spark_passes`: one pass over X_l as one Spark job (broadcast the
  dense block, map the cached blocks, sum the compact partials on the driver or by row range
  on the executors);
- :mod:`~pipeline.backends.spark_resident`: a fused language (up to
  ``train.solve_in_task_max_nnz`` nonzeros) kept whole in the Python workers between jobs,
  where its passes run as tasks that each take a share of the columns;
- :mod:`~pipeline.backends.spark_solve`: the fused CG solve, a whole solve of a fused language
  in one job (:meth:`SparkCorpusBackend.solve_gram`).

Passes are thread-safe: the solver runs one language per Python thread, i.e. concurrent jobs,
and PySpark's pinned threads make :meth:`SparkCorpusBackend.describe` a per-thread job
description.

Pickling
    Only sizes and the driver-side statistics are pickled; the SparkContext and the cached RDDs
    stay behind (an unpickled backend answers size and column-statistics queries and raises
    :class:`DetachedBackendError` on a pass). Task closures are ``functools.partial`` objects
    of module-level functions holding only broadcasts and plain values.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
import warnings
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from pipeline.backends.loader import TfidfLayout, read_tfidf_layout
from pipeline.backends.params import BACKEND_DEFAULTS as _D
from pipeline.backends.spark_blocks import NNZ_PER_PARTITION, load_blocks
from pipeline.backends.spark_passes import (
    PassFunction,
    gram_partition,
    run_pass,
    touch_partition,
    x_scatter_partition,
    xt_gather_partition,
)
from pipeline.backends.spark_resident import (
    auto_resident_memory_mb,
    gram_columns,
    kept_languages,
    run_resident,
    x_scatter_columns,
    xt_gather_columns,
)
from pipeline.backends.spark_solve import (
    CLUSTER_SOLVE_IN_TASK_MAX_NNZ,
    SOLVE_IN_TASK_BYTES_PER_NNZ,
    auto_solve_in_task_max_nnz,
    fused_solve,
    fused_tasks,
    in_task_chunk,
)
from pipeline.errors import ConvergenceWarning, PipelineError
from pipeline.linalg.backend import PASS_DTYPES, CorpusBackend
from pipeline.linalg.block_cg import BlockCGResult
from pipeline.linalg.operator import BlockOperator

__all__ = [
    "CLUSTER_SOLVE_IN_TASK_MAX_NNZ",
    "DRIVER_PARTIALS_MAX_BYTES",
    "NNZ_PER_PARTITION",
    "SOLVE_IN_TASK_BYTES_PER_NNZ",
    "SOLVE_IN_TASK_MAX_NNZ",
    "SOLVE_IN_TASK_MEMORY_MB",
    "TREE_REDUCE_ABOVE",
    "DetachedBackendError",
    "SparkCorpusBackend",
    "auto_solve_in_task_max_nnz",
    "in_task_chunk",
    "job_description",
]

log = logging.getLogger(__name__)

#: ``train.solve_in_task_max_nnz``: a language with at most this many nonzeros runs each CG
#: solve as one fused job whose tasks gather all its blocks (see
#: :meth:`SparkCorpusBackend.solve_gram`). None: :func:`auto_solve_in_task_max_nnz`.
SOLVE_IN_TASK_MAX_NNZ = _D.solve_in_task_max_nnz

#: ``train.solve_in_task_memory_mb``: working memory of the CG vectors of one in-task solve;
#: its columns run in chunks that fit it (:func:`in_task_chunk`).
SOLVE_IN_TASK_MEMORY_MB = _D.solve_in_task_memory_mb


#: Passes over more partitions than this merge their partials on the executors (the
#: ``"row_ranges"`` route of :mod:`~pipeline.backends.spark_passes`); up to it the driver adds
#: them into the result directly (``"driver"``).
TREE_REDUCE_ABOVE = 8

#: ... and so do passes whose partials would together exceed this many bytes on the driver:
#: merged on the executors by row range, the driver receives each row of the result once, so
#: its memory is bounded by the result, not by partitions x result.
DRIVER_PARTIALS_MAX_BYTES = 256 * 2**20


class DetachedBackendError(PipelineError, RuntimeError):
    """A pass was requested from an unpickled (or closed) Spark backend."""


def job_description(stage: str, iteration: int | None = None) -> str:
    """Spark job description of a solver stage: ``"cr5/eig3/cg[en]", 7`` ->
    ``"cr5 train: eig 3 / cg[en] / it 7"``."""
    parts = [p for p in stage.split("/") if p]
    if parts and parts[0] == "cr5":
        parts = parts[1:]
    parts = [re.sub(r"^eig(\d+)$", r"eig \1", p) for p in parts]
    if iteration is not None:
        parts.append(f"it {iteration}")
    return "cr5 train: " + " / ".join(parts)


def _check_load_options(partitions_per_language: Any, dtype: str) -> None:
    """Raise ValueError for a ``partitions_per_language`` that is not a positive int or None,
    or a ``dtype`` outside :data:`~pipeline.linalg.backend.PASS_DTYPES`."""
    if partitions_per_language is not None and (
        isinstance(partitions_per_language, bool)
        or not isinstance(partitions_per_language, int)
        or partitions_per_language < 1
    ):
        raise ValueError(
            f"partitions_per_language must be a positive int or None; "
            f"got {partitions_per_language!r}"
        )
    if dtype not in PASS_DTYPES:
        raise ValueError(f"dtype must be one of {PASS_DTYPES}; got {dtype!r}")


class SparkCorpusBackend(CorpusBackend):
    """Spark implementation of :class:`~pipeline.linalg.backend.CorpusBackend`.

    Build it with :meth:`from_tfidf`; the constructor takes already-cached blocks.

    Parameters
    ----------
    spark_context : pyspark.SparkContext
    blocks : dict of str to pyspark.RDD
        Per language, the persisted RDD of
        :class:`~pipeline.backends.spark_blocks.CsrBlock` (one per partition).
    layout : TfidfLayout
        Sizes (languages in order, K, p_l, n_l).
    column_stats : dict of str to ndarray of shape (p_l, 2)
        Column sums and column sums of squares, float64.
    concept_counts : dict of str to ndarray of shape (K,)
    dtype : {"float32", "float64"}
        Arithmetic of the passes (the blocks are stored in it).
    solve_in_task_max_nnz : int or None
        Languages with at most this many nonzeros solve in fused jobs (:meth:`solve_gram`)
        and run their passes in tasks that gather their blocks; None:
        :func:`auto_solve_in_task_max_nnz`.
    solve_in_task_memory_mb : int
        Bound on the CG vectors of one solving task (:meth:`solve_gram`).
    solve_tasks : int or None
        Tasks (column groups) of one fused solve; None: :func:`fused_tasks`.
    resident_memory_mb : int or None
        Python memory per worker for fused languages kept between jobs
        (:mod:`~pipeline.backends.spark_resident`); 0: none; None:
        :func:`auto_resident_memory_mb`.
    """

    def __init__(
        self,
        spark_context: Any,
        blocks: dict[str, Any],
        *,
        layout: TfidfLayout,
        column_stats: dict[str, np.ndarray],
        concept_counts: dict[str, np.ndarray],
        dtype: str = "float32",
        solve_in_task_max_nnz: int | None = SOLVE_IN_TASK_MAX_NNZ,
        solve_in_task_memory_mb: int = SOLVE_IN_TASK_MEMORY_MB,
        solve_tasks: int | None = None,
        resident_memory_mb: int | None = None,
    ) -> None:
        super().__init__(dtype=dtype)
        master, tasks = str(spark_context.master), solve_tasks or spark_context.defaultParallelism
        if solve_in_task_max_nnz is None:
            solve_in_task_max_nnz = auto_solve_in_task_max_nnz(master, int(tasks))
        if resident_memory_mb is None:
            resident_memory_mb = auto_resident_memory_mb(master, int(tasks))
        self._solve_max_nnz = int(solve_in_task_max_nnz)
        self._solve_memory_mb = int(solve_in_task_memory_mb)
        self._solve_tasks = solve_tasks
        self._sc = spark_context
        self._blocks = dict(blocks)
        self._layout = layout
        # identities of the cached RDDs across the session: a worker keeps resident
        # languages of these tokens only
        app = spark_context.applicationId
        self._tokens = {lang: f"{app}/{rdd.id()}" for lang, rdd in self._blocks.items()}
        fused_sizes = {
            lang: (layout.nnz[lang], layout.n_docs[lang]) for lang in blocks if self._fuses(lang)
        }
        self._kept = kept_languages(
            fused_sizes, int(resident_memory_mb) * 2**20, np.dtype(dtype).itemsize
        )
        #: Column shares of fused jobs that ran on a resident X_l, and that read the blocks.
        self.resident_counts: Counter[str] = Counter()
        self._resident_lock = threading.Lock()
        fused = [lang for lang in blocks if self._fuses(lang)]
        log.info(
            "fused languages (one job per solve) up to %d nonzeros: %s, resident in the "
            "Python workers: %s; one job per CG iteration: %s",
            self._solve_max_nnz,
            ", ".join(fused) or "none",
            ", ".join(sorted(self._kept)) or "none",
            ", ".join(lang for lang in blocks if lang not in fused) or "none",
        )
        self._resident_memory_mb = int(resident_memory_mb)
        self._column_stats = column_stats
        self._concept_count = concept_counts
        # sorted ids of the concepts with a document in each language (xt_gather's rows of P)
        self._language_concepts = {
            lang: np.flatnonzero(counts > 0).astype(np.int64)
            for lang, counts in concept_counts.items()
        }

    # --- construction -------------------------------------------------------------------------
    @classmethod
    def from_tfidf(
        cls,
        spark: Any,
        tfidf_path: str,
        *,
        dtype: str = "float32",
        partitions_per_language: int | None = None,
        solve_in_task_max_nnz: int | None = SOLVE_IN_TASK_MAX_NNZ,
        solve_in_task_memory_mb: int = SOLVE_IN_TASK_MEMORY_MB,
        solve_tasks: int | None = None,
        resident_memory_mb: int | None = None,
        languages: Sequence[str] | None = None,
    ) -> SparkCorpusBackend:
        """Load, validate and cache the tfidf dataset at ``tfidf_path``: one job per language
        (run concurrently, :func:`~pipeline.backends.spark_blocks.load_blocks`).

        Parameters
        ----------
        spark : SparkSession
        tfidf_path : str
        dtype : {"float32", "float64"}
        partitions_per_language : int, optional
            Row partitions (cached blocks) per language. Default:
            :func:`~pipeline.backends.spark_blocks.default_partitions`.
        solve_in_task_max_nnz : int, optional
            Languages with at most this many nonzeros run each CG solve as one fused job
            (:meth:`solve_gram`); 0: never (one job per CG iteration). Default:
            :func:`auto_solve_in_task_max_nnz`.
        solve_in_task_memory_mb : int
            Bound on the CG vectors of one solving task (columns run in chunks within it).
        solve_tasks : int, optional
            Tasks of one fused solve, each solving a share of the columns with its own copy
            of X_l. Default: the default parallelism.
        resident_memory_mb : int, optional
            Python memory per worker for the fused languages kept between jobs. Default:
            :func:`auto_resident_memory_mb`.
        languages : sequence of str, optional
            Default: every language with training documents, sorted.

        Raises
        ------
        InputDataError
            Rows not numbered 0..n_l-1, term indices outside the vocabulary, concept indices
            outside ``[0, K)``, ragged lists, NaN/Inf, or counts disagreeing with the manifest.
        """
        _check_load_options(partitions_per_language, dtype)
        layout = read_tfidf_layout(spark, tfidf_path, languages)
        cached = load_blocks(
            spark,
            tfidf_path,
            layout,
            dtype=dtype,
            partitions_per_language=partitions_per_language,
        )
        return cls(
            spark.sparkContext,
            cached.rdds,
            layout=layout,
            column_stats=cached.column_stats,
            concept_counts=cached.concept_counts,
            dtype=dtype,
            solve_in_task_max_nnz=solve_in_task_max_nnz,
            solve_in_task_memory_mb=solve_in_task_memory_mb,
            solve_tasks=solve_tasks,
            resident_memory_mb=resident_memory_mb,
        )

    def close(self) -> None:
        """Unpersist the cached blocks; passes raise :class:`DetachedBackendError` afterwards."""
        for rdd in self._blocks.values():
            rdd.unpersist()
        self._blocks = {}

    # --- pickling: no SparkContext, no RDDs ---------------------------------------------------
    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state["_sc"] = None
        state["_blocks"] = {}
        state["_resident_lock"] = None
        return state

    # --- sizes --------------------------------------------------------------------------------
    @property
    def languages(self) -> tuple[str, ...]:
        return self._layout.languages

    @property
    def n_concepts(self) -> int:
        return self._layout.n_concepts

    @property
    def placement(self) -> dict[str, Any]:
        """Where each language's work ran (model.json's ``training.placement``): the fused
        limit and languages (one job per solve), those resident in the Python workers, and
        the residency budget. Settings the memory plan chose are recorded nowhere else, and
        the cost model (bench/cost_model.py) needs them to replay a run."""
        return {
            "solve_in_task_max_nnz": self._solve_max_nnz,
            "fused": [lang for lang in self._blocks if self._fuses(lang)],
            "resident": sorted(self._kept),
            "resident_memory_mb": self._resident_memory_mb,
        }

    def n_docs(self, lang: str) -> int:
        return self._layout.n_docs[lang]

    def n_terms(self, lang: str) -> int:
        return self._layout.n_terms[lang]

    def n_partitions(self, lang: str) -> int:
        """Number of cached row blocks of ``lang``."""
        return self._rdd(lang).getNumPartitions()

    def _describe(self, stage: str, iteration: int | None) -> None:
        """Set the Spark job description of the calling thread (see :func:`job_description`)."""
        if self._sc is not None:
            self._sc.setJobDescription(job_description(stage, iteration))

    # --- hooks --------------------------------------------------------------------------------
    def _rdd(self, lang: str) -> Any:
        try:
            return self._blocks[lang]
        except KeyError:
            if lang in self._layout.n_terms:
                raise DetachedBackendError(
                    "this SparkCorpusBackend holds no cached blocks (it was unpickled or "
                    "closed); build it with SparkCorpusBackend.from_tfidf on the driver"
                ) from None
            raise

    def _fuses(self, lang: str) -> bool:
        """Whether ``lang`` is small enough for tasks that gather all its blocks."""
        return self._layout.nnz[lang] <= self._solve_max_nnz

    def _gather_tasks(self) -> int:
        """Tasks of a job whose tasks each gather a language's blocks (fused solves and
        passes): :func:`~pipeline.backends.spark_solve.fused_tasks`."""
        return fused_tasks(
            int(self._sc.defaultParallelism), len(self._layout.n_terms), self._solve_tasks
        )

    def _run(
        self,
        lang: str,
        fn: PassFunction,
        block: np.ndarray,
        n_rows: int,
        *,
        index: np.ndarray | None = None,
        compact: bool = False,
    ) -> np.ndarray:
        """One pass over ``lang``'s blocks (:func:`~pipeline.backends.spark_passes.run_pass`)
        by the route of :meth:`_pass_route`."""
        rdd = self._rdd(lang)
        route = self._pass_route(rdd.getNumPartitions(), n_rows * block.shape[1])
        return run_pass(
            self._sc,
            rdd,
            fn,
            block,
            n_rows,
            dtype=self.dtype,
            route=route,
            index=index,
            compact=compact,
        )

    def _pass_route(self, n_parts: int, result_size: int) -> str:
        """How a pass over an unfused language's ``n_parts`` blocks sums partials of
        ``result_size`` values each: ``"row_ranges"`` above :data:`TREE_REDUCE_ABOVE` blocks
        or :data:`DRIVER_PARTIALS_MAX_BYTES` of partials, else ``"driver"``."""
        partial_bytes = result_size * np.dtype(self.dtype).itemsize
        if n_parts > TREE_REDUCE_ABOVE or n_parts * partial_bytes > DRIVER_PARTIALS_MAX_BYTES:
            return "row_ranges"
        return "driver"

    def _resident(self, lang: str, compute: Any, b: int) -> list[tuple[int, int, Any]]:
        """Run ``compute`` on shares of ``b`` columns of a fused language, on its resident
        X_l (:func:`~pipeline.backends.spark_resident.run_resident`)."""
        parts, filled = run_resident(
            self._sc, self._rdd(lang), compute, b, **self._resident_options(lang)
        )
        with self._resident_lock:
            self.resident_counts["resident"] += len(parts) - filled
            self.resident_counts["filled"] += filled
        return parts

    def _resident_options(self, lang: str) -> dict[str, Any]:
        return {
            "token": self._tokens[lang],
            "live": tuple(self._tokens.values()),
            "n_terms": self.n_terms(lang),
            "tasks": self._gather_tasks(),
            "keep": lang in self._kept,
            "workers": int(self._sc.defaultParallelism),
        }

    def _resident_pass(
        self, lang: str, compute: Any, block: np.ndarray, index: np.ndarray | None = None
    ) -> list[tuple[int, int, Any]]:
        """A pass over a fused language: broadcast ``block`` (with ``index``, the pair); each
        task computes a share of the columns on the resident X_l. Returns the tasks'
        ``(lo, hi, result)``, in column order."""
        value = np.ascontiguousarray(block, dtype=self.dtype)
        bc = self._sc.broadcast(value if index is None else (value, index))
        try:
            return self._resident(lang, functools.partial(compute, bc), block.shape[1])
        finally:
            bc.destroy()

    def _columns(self, parts: list[tuple[int, int, np.ndarray]], n_rows: int) -> np.ndarray:
        """The tasks' column shares side by side, shape (n_rows, b), in the pass dtype."""
        out = np.empty((n_rows, parts[-1][1] if parts else 0), dtype=self.dtype)
        for lo, hi, part in parts:
            out[:, lo:hi] = part
        return out

    def solve_gram(
        self,
        lang: str,
        rhs: np.ndarray,
        *,
        lam: float,
        precond: np.ndarray | BlockOperator,
        rtol: float,
        maxiter: int,
        name: str = "cg",
        x0: np.ndarray | None = None,
        dtype: np.dtype | type = np.float64,
    ) -> BlockCGResult | None:
        """A fused solve: the whole CG solve of a language in one Spark job
        (:func:`~pipeline.backends.spark_solve.fused_solve`).

        For a language with at most ``solve_in_task_max_nnz`` nonzeros (however many row
        blocks it is cached in), every solving task gathers all the language's cached blocks
        and runs the CG on its share of the right-hand-side columns: one job of
        ``solve_tasks`` tasks instead of one job per CG iteration. Bigger languages return
        None (the caller drives :meth:`gram` passes). Every task's iterations count as gram
        passes (a task traverses X_l once per iteration for its columns).
        """
        if not self._fuses(lang):
            return None
        self._rdd(lang)  # a detached backend raises here, before any work
        self.describe(f"{name}/in-task", None)
        result, n_passes = fused_solve(
            self._sc,
            functools.partial(self._resident, lang),
            rhs,
            lam=lam,
            precond=precond,
            rtol=rtol,
            maxiter=maxiter,
            name=name,
            x0=x0,
            dtype=np.dtype(dtype),
            memory_bytes=self._solve_memory_mb * 2**20,
        )
        self._count("gram", result.n_column_passes, n_passes=n_passes)
        if not result.converged.all():
            left = int(np.sum(~result.converged))
            warnings.warn(
                f"{name}: {left} of {rhs.shape[1]} columns did not reach rtol={rtol} in "
                f"maxiter={maxiter} iterations (in-task solve)",
                ConvergenceWarning,
                stacklevel=2,
            )
        return result

    def _column_sums(self, lang: str) -> np.ndarray:
        return self._column_stats[lang][:, 0].copy()

    def _column_sq_sums(self, lang: str) -> np.ndarray:
        return self._column_stats[lang][:, 1].copy()

    def _concept_counts(self, lang: str) -> np.ndarray:
        return self._concept_count[lang].copy()

    def _gram(self, lang: str, v: np.ndarray) -> np.ndarray:
        if self._fuses(lang):
            return self._columns(self._resident_pass(lang, gram_columns, v), self.n_terms(lang))
        return self._run(lang, gram_partition, v, self.n_terms(lang))

    def _xt_gather(self, lang: str, p: np.ndarray) -> np.ndarray:
        # Only the language's concepts' rows of P travel: K x b would be broadcast to every
        # language (Wikipedia: millions of concepts), n_l' x b scales with the language.
        concepts = self._language_concepts[lang]
        if self._fuses(lang):
            parts = self._resident_pass(lang, xt_gather_columns, p[concepts], index=concepts)
            return self._columns(parts, self.n_terms(lang))
        return self._run(lang, xt_gather_partition, p[concepts], self.n_terms(lang), index=concepts)

    def _x_scatter(self, lang: str, v: np.ndarray) -> np.ndarray:
        if self._fuses(lang):
            rows, values = self._x_scatter_rows(lang, v)
            out = np.zeros((self.n_concepts, v.shape[1]), dtype=values.dtype)
            out[rows] = values
            return out
        return self._run(lang, x_scatter_partition, v, self.n_concepts)

    def _x_scatter_rows(self, lang: str, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # Tasks and the driver hold K_l x b, not K x b (the concepts of the language).
        rows = self._language_concepts[lang]
        if self._fuses(lang):
            parts = self._resident_pass(lang, x_scatter_columns, v)
            # every share has the language's concepts as rows, in sorted order
            shares = [(lo, hi, values) for lo, hi, (_, values) in parts]
            return rows, self._columns(shares, rows.size)
        out = self._run(lang, x_scatter_partition, v, self.n_concepts, index=rows, compact=True)
        return rows, out

    def _touch(self, lang: str) -> int:
        """One job that deserialises every cached block of ``lang`` and computes nothing."""
        return sum(self._rdd(lang).mapPartitions(touch_partition).collect())
