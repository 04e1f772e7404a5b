"""The corpus backend: the only object that touches the TF-IDF data X.

Per language ``l`` a backend holds

* ``X_l`` — sparse TF-IDF rows, shape ``(n_l, p_l)``, float32 (the language's column block of
  the block-diagonal X);
* ``concept_index_l`` — int array of shape ``(n_l,)`` with values in ``[0, K)``: the one-hot
  label matrix ``Y_l`` (``n_l x K``) kept implicit.

Every product method is **one pass over X_l carrying a whole block**; on Spark it is one job:
broadcast the (float32) block, each cached row partition computes its contribution, results are
tree-aggregated. Methods must be thread-safe: the solver drives different languages from
different threads at the same time (on Spark: concurrent jobs).

The public methods validate shapes once and count passes (``pass_counts``), in total and by the
phase that :meth:`CorpusBackend.describe` last named on the calling thread (where a fit's passes
go: preconditioner, w solve, warm start, eigensolver products and CG); subclasses implement
the underscore hooks. Results are always float64 (the solvers' small dense algebra is float64);
the dtype *inside* a pass is the backend's ``dtype`` option.
"""

from __future__ import annotations

import re
import threading
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from pipeline.linalg.dtypes import PASS_DTYPES, working_dtype
from pipeline.linalg.operator import BlockOperator, as_block

if TYPE_CHECKING:
    from pipeline.linalg.block_cg import BlockCGResult

__all__ = [
    "PASS_DTYPES",
    "CorpusBackend",
    "TermLayout",
    "map_languages",
    "pass_delta",
    "passes_by_phase",
    "phase_of",
    "working_dtype",
]

#: a stage label's language ("[en]")
_LANGUAGE = re.compile(r"\[[^\]]*\]")
#: an iteration number ending a label segment ("eig12", "start1")
_ITERATION = re.compile(r"(?<=[A-Za-z])\d+$")


def phase_of(stage: str) -> str:
    """The phase of a :meth:`CorpusBackend.describe` stage label: the label without its
    language, the iteration numbers of its segments after the first and the Spark
    backend's ``/in-task`` (a fused solve is the same CG) (``"cr5/eig12/cg[en]/in-task"``
    -> ``"cr5/eig/cg"``), so the passes of every iteration and language of one kind of
    work add up under one key."""
    head, *rest = _LANGUAGE.sub("", stage).removesuffix("/in-task").split("/")
    return "/".join([head, *(_ITERATION.sub("", seg) for seg in rest)])


class CorpusBackend(ABC):
    """Abstract per-language access to X and the concept labels.

    Parameters
    ----------
    dtype : {"float32", "float64"}
        Arithmetic of the passes over X. ``"float32"`` halves memory traffic and broadcast size
        (enough for the paper's CG tolerance 1e-2); ``"float64"`` is exact to rounding and is
        what the exactness tests use.
    """

    def __init__(self, *, dtype: str = "float32") -> None:
        if dtype not in PASS_DTYPES:
            raise ValueError(f"dtype must be one of {PASS_DTYPES}; got {dtype!r}")
        self.dtype = dtype
        self._lock = threading.Lock()
        self._passes: Counter[str] = Counter()
        self._column_passes: Counter[str] = Counter()
        self._phase_passes: Counter[str] = Counter()
        self._phase_column_passes: Counter[str] = Counter()
        self._thread = threading.local()

    # --- pickling: locks and thread-local labels are process-local ---------------------------
    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state.pop("_lock", None)
        state.pop("_thread", None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._thread = threading.local()

    # --- sizes ---------------------------------------------------------------------------------
    @property
    @abstractmethod
    def languages(self) -> tuple[str, ...]:
        """Language codes, in a fixed order (defines the column layout of X)."""

    @property
    @abstractmethod
    def n_concepts(self) -> int:
        """K, the number of concepts (columns of Y)."""

    @abstractmethod
    def n_docs(self, lang: str) -> int:
        """n_l, the number of training documents of ``lang``."""

    @abstractmethod
    def n_terms(self, lang: str) -> int:
        """p_l, the vocabulary size of ``lang``."""

    def n_total_docs(self) -> int:
        """n = sum of n_l over languages."""
        return sum(self.n_docs(lang) for lang in self.languages)

    def fingerprint(self) -> dict:
        """Sizes identifying the problem (used to validate checkpoints)."""
        return {
            "languages": list(self.languages),
            "n_docs": [self.n_docs(lang) for lang in self.languages],
            "n_terms": [self.n_terms(lang) for lang in self.languages],
            "n_concepts": self.n_concepts,
            "dtype": self.dtype,
        }

    # --- passes over X_l -----------------------------------------------------------------------
    def column_sums(self, lang: str) -> np.ndarray:
        """Return ``X_l^T 1``: ndarray of shape (p_l,), float64 (accumulated in float64)."""
        self._count("column_sums", 0)
        return np.asarray(self._column_sums(lang), dtype=np.float64)

    def column_sq_sums(self, lang: str) -> np.ndarray:
        """Return ``diag(X_l^T X_l)``: ndarray of shape (p_l,), float64."""
        self._count("column_sq_sums", 0)
        return np.asarray(self._column_sq_sums(lang), dtype=np.float64)

    def concept_counts(self, lang: str) -> np.ndarray:
        """Return ``Y_l^T 1``, documents per concept: ndarray of shape (K,), float64."""
        self._count("concept_counts", 0)
        return np.asarray(self._concept_counts(lang), dtype=np.float64)

    def gram(self, lang: str, v: np.ndarray, *, dtype: np.dtype | type = np.float64) -> np.ndarray:
        """Return ``X_l^T (X_l V)``.

        Parameters
        ----------
        lang : str
        v : ndarray of shape (p_l, b)
        dtype : numpy dtype
            Of the result (float32 for a float32 CG: no float64 copy of a float32 pass).

        Returns
        -------
        ndarray of shape (p_l, b)
        """
        v = as_block(v, self.n_terms(lang))
        self._count("gram", v.shape[1])
        return np.asarray(self._gram(lang, v), dtype=dtype)

    def xt_gather(self, lang: str, p: np.ndarray) -> np.ndarray:
        """Return ``X_l^T (Y_l P) = X_l^T P[concept_index_l]`` (sparse part of ``C P``).

        Parameters
        ----------
        lang : str
        p : ndarray of shape (K, b)

        Returns
        -------
        ndarray of shape (p_l, b), float64
        """
        p = as_block(p, self.n_concepts, name="P")
        self._count("xt_gather", p.shape[1])
        return np.asarray(self._xt_gather(lang, p), dtype=np.float64)

    def x_scatter(self, lang: str, v: np.ndarray) -> np.ndarray:
        """Return ``Y_l^T (X_l V)``: per-concept sums of the rows of ``X_l V``.

        Parameters
        ----------
        lang : str
        v : ndarray of shape (p_l, b)

        Returns
        -------
        ndarray of shape (K, b), float64
        """
        v = as_block(v, self.n_terms(lang))
        self._count("x_scatter", v.shape[1])
        return np.asarray(self._x_scatter(lang, v), dtype=np.float64)

    def x_scatter_rows(self, lang: str, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`x_scatter` on the rows that can be nonzero: the concepts with a document in
        ``lang``. What the Cᵀ product adds up over languages: K_l x b per language instead of
        K x b, a small fraction of it when a language covers few of the concepts.

        Returns
        -------
        ids : ndarray of shape (K_l,), int64
            Sorted concept ids.
        values : ndarray of shape (K_l, b), the pass dtype
            The rows ``ids`` of ``Y_l^T (X_l V)``; every other row is zero. In the dtype
            the pass computed them in (float32 on a float32 backend's local or fused
            passes, float64 partial sums otherwise): the Cᵀ product adds
            them into its float64 sum, which casts each exactly, so a float64 copy here
            would only double what the driver holds while the languages' results wait to
            be summed in order.
        """
        v = as_block(v, self.n_terms(lang))
        self._count("x_scatter", v.shape[1])
        ids, values = self._x_scatter_rows(lang, v)
        return ids, np.asarray(values)

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
        """Solve ``(X_lᵀX_l + λI) Z = rhs`` where X_l lives, or return None.

        Optional capability: a backend that can run a whole preconditioned
        :func:`~pipeline.linalg.block_cg.block_cg` next to X_l (the Spark backend, for a
        language cached as a single block: one job per solve instead of one per CG
        iteration) returns its :class:`~pipeline.linalg.block_cg.BlockCGResult` (``rhs`` of
        shape (p_l, b); ``precond``: block_cg's ``m``, a (p_l,) diagonal or a picklable
        operator such as :class:`~pipeline.linalg.preconditioner.SpectralJacobi`; ``x0``: the
        initial guess, shape of ``rhs``; ``dtype``: block_cg's working precision) and counts
        its iterations as gram passes. Default:
        None, and the caller drives block CG with :meth:`gram` passes.
        """
        return None

    def describe(self, stage: str, iteration: int | None = None) -> None:
        """Label the work that follows, from the thread that will run its passes: they are
        counted under :func:`phase_of` ``stage`` (:attr:`pass_counts`), and the Spark backend
        also makes the label its job description (:meth:`_describe`)."""
        self._thread.phase = phase_of(stage)
        self._describe(stage, iteration)

    def _describe(self, stage: str, iteration: int | None) -> None:  # noqa: B027
        """Hook of :meth:`describe` (default: nothing more than the phase)."""

    # --- accounting ------------------------------------------------------------------------------
    def _count(self, method: str, n_columns: int, n_passes: int = 1) -> None:
        phase = getattr(self._thread, "phase", "unlabelled")
        with self._lock:
            self._passes[method] += n_passes
            self._column_passes[method] += n_columns
            self._phase_passes[phase] += n_passes
            self._phase_column_passes[phase] += n_columns

    @property
    def pass_counts(self) -> dict[str, dict[str, int]]:
        """Passes over X and column-passes (sum of block widths) per method (``passes``,
        ``column_passes``) and per phase (``phase_passes``, ``phase_column_passes``: the
        :func:`phase_of` the stage that :meth:`describe` last named on the counting thread,
        ``"unlabelled"`` before any)."""
        with self._lock:
            return {
                "passes": dict(self._passes),
                "column_passes": dict(self._column_passes),
                "phase_passes": dict(self._phase_passes),
                "phase_column_passes": dict(self._phase_column_passes),
            }

    def reset_counts(self) -> None:
        """Zero the pass counters."""
        with self._lock:
            for counter in (
                self._passes,
                self._column_passes,
                self._phase_passes,
                self._phase_column_passes,
            ):
                counter.clear()

    # --- hooks -----------------------------------------------------------------------------------
    @abstractmethod
    def _column_sums(self, lang: str) -> np.ndarray: ...

    @abstractmethod
    def _column_sq_sums(self, lang: str) -> np.ndarray: ...

    @abstractmethod
    def _concept_counts(self, lang: str) -> np.ndarray: ...

    @abstractmethod
    def _gram(self, lang: str, v: np.ndarray) -> np.ndarray: ...

    @abstractmethod
    def _xt_gather(self, lang: str, p: np.ndarray) -> np.ndarray: ...

    @abstractmethod
    def _x_scatter(self, lang: str, v: np.ndarray) -> np.ndarray: ...

    def _x_scatter_rows(self, lang: str, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Default: the dense product's rows of the language's concepts."""
        ids = np.flatnonzero(np.asarray(self._concept_counts(lang)) > 0).astype(np.int64)
        return ids, np.asarray(self._x_scatter(lang, v))[ids]


class TermLayout:
    """Row layout of p-space blocks: language l owns rows ``offsets[l]:offsets[l] + p_l``.

    Parameters
    ----------
    languages : sequence of str
    sizes : sequence of int
        p_l per language, same order.
    """

    def __init__(self, languages: tuple[str, ...] | list[str], sizes: list[int]) -> None:
        self.languages = tuple(languages)
        self.sizes = tuple(int(s) for s in sizes)
        bounds = np.concatenate([[0], np.cumsum(self.sizes, dtype=np.int64)])
        self.slices = {
            lang: slice(int(bounds[i]), int(bounds[i + 1])) for i, lang in enumerate(self.languages)
        }
        self.n_terms = int(bounds[-1])

    @classmethod
    def of(cls, backend: CorpusBackend) -> TermLayout:
        """The layout of ``backend``'s languages."""
        return cls(backend.languages, [backend.n_terms(lang) for lang in backend.languages])

    def split(self, v: np.ndarray) -> dict[str, np.ndarray]:
        """Views of the per-language row blocks of ``v`` (shape (p, ...))."""
        return {lang: v[s] for lang, s in self.slices.items()}

    def join(self, parts: dict[str, np.ndarray]) -> np.ndarray:
        """Stack per-language blocks (shape (p_l, b)) into one (p, b) block."""
        return np.concatenate([parts[lang] for lang in self.languages], axis=0)


def pass_delta(before: dict, after: dict) -> dict:
    """Difference of two :attr:`CorpusBackend.pass_counts` snapshots (``after - before``);
    a phase with no pass in between is left out."""
    out = {}
    for kind, counts in after.items():
        old = before.get(kind, {})
        delta = {m: n - old.get(m, 0) for m, n in counts.items()}
        out[kind] = (
            delta if kind in ("passes", "column_passes") else {m: n for m, n in delta.items() if n}
        )
    return out


_T = TypeVar("_T")


def map_languages(
    languages: Sequence[str],
    fn: Callable[[str], _T],
    max_workers: int | None = None,
    *,
    thread_name: str = "lang",
) -> dict[str, _T]:
    """``{lang: fn(lang)}`` in language order, languages run concurrently in threads.

    Languages are independent (X is block-diagonal), and each ``fn`` spends its time in BLAS or
    in a Spark job, both of which release the GIL. ``max_workers``: None, one per language;
    1 runs in the calling thread. Every call waits for all languages; an error is raised
    after that (the first in language order).
    """
    workers = min(len(languages), max_workers or len(languages))
    if workers <= 1:
        return {lang: fn(lang) for lang in languages}
    pool = _language_pool(workers, thread_name)
    futures = [pool.submit(fn, lang) for lang in languages]
    wait(futures)
    return {lang: future.result() for lang, future in zip(languages, futures, strict=True)}


_pools = threading.local()


def _language_pool(workers: int, thread_name: str) -> ThreadPoolExecutor:
    """The calling thread's pool of ``workers`` threads for ``thread_name``, kept between
    calls, so that a C-product, solve or Cᵀ-product does not start and join threads of its
    own each time (a noticeable share of the driver's time in a fit of many short passes).
    Per calling thread, so a task that maps languages itself, or a solve in the background
    (w = B⁻¹μ), never waits for a worker another caller holds; a finished thread's pools go
    with it."""
    pools = getattr(_pools, "pools", None)
    if pools is None:
        pools = _pools.pools = {}
    pool = pools.get((thread_name, workers))
    if pool is None:
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=thread_name)
        pools[thread_name, workers] = pool
    return pool


def passes_by_phase(counts: dict) -> dict[str, dict[str, int]]:
    """``{phase: {"passes": n, "column_passes": c}}`` of a :attr:`CorpusBackend.pass_counts`
    snapshot or :func:`pass_delta`, most column-passes first (where a fit's work went)."""
    passes = counts.get("phase_passes", {})
    columns = counts.get("phase_column_passes", {})
    phases = sorted(passes, key=lambda ph: (-columns.get(ph, 0), -passes[ph], ph))
    return {ph: {"passes": passes[ph], "column_passes": columns.get(ph, 0)} for ph in phases}
