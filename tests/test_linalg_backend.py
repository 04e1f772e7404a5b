"""Contract tests of the operator base class and of the corpus backends (dense references)."""

from __future__ import annotations

import pickle
import threading
import time

import numpy as np
import pytest
import scipy.sparse as sp

from pipeline.backends.local import LocalCorpusBackend
from pipeline.linalg.backend import (
    TermLayout,
    map_languages,
    pass_delta,
    passes_by_phase,
    phase_of,
)
from pipeline.linalg.operator import CallableOperator, DenseOperator
from tests.problems import PROBLEMS

BACKENDS = {
    "local-csr": lambda corpus, k: LocalCorpusBackend(corpus, k, dtype="float64", transpose="csr"),
    "local-f64": lambda corpus, k: LocalCorpusBackend(corpus, k, dtype="float64"),
    "local-f32": lambda corpus, k: LocalCorpusBackend(corpus, k, dtype="float32"),
}
TOL = {"local-f64": 1e-12, "local-f32": 1e-5, "local-csr": 1e-12}


@pytest.fixture(params=sorted(PROBLEMS))
def problem(request):
    return PROBLEMS[request.param]


@pytest.mark.parametrize("kind", sorted(BACKENDS))
def test_backend_products_match_dense(problem, kind):
    corpus = problem.corpus()
    k = problem.n_concepts
    be = BACKENDS[kind](corpus, k)
    rng = np.random.default_rng(0)
    tol = TOL[kind]
    assert be.languages == tuple(problem.sizes)
    assert be.n_concepts == k
    for lang, (x, concepts) in corpus.items():
        xd = x.astype(np.float64).toarray()
        y = np.zeros((x.shape[0], k))
        y[np.arange(x.shape[0]), concepts] = 1
        assert be.n_docs(lang) == x.shape[0] and be.n_terms(lang) == x.shape[1]
        np.testing.assert_allclose(be.column_sums(lang), xd.sum(0), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(be.column_sq_sums(lang), (xd**2).sum(0), rtol=1e-12)
        np.testing.assert_array_equal(be.concept_counts(lang), y.sum(0))
        v = rng.standard_normal((x.shape[1], 5))
        pk = rng.standard_normal((k, 5))

        def close(got, want):
            assert got.dtype == np.float64
            assert np.linalg.norm(got - want) <= tol * np.linalg.norm(want)

        close(be.gram(lang, v), xd.T @ (xd @ v))
        close(be.xt_gather(lang, pk), xd.T @ (y @ pk))
        close(be.x_scatter(lang, v), y.T @ (xd @ v))
    counts = be.pass_counts
    assert counts["passes"]["gram"] == len(corpus)
    assert counts["column_passes"]["gram"] == 5 * len(corpus)


def test_backend_validates_blocks():
    problem = PROBLEMS["tiny_language"]
    be = LocalCorpusBackend(problem.corpus(), problem.n_concepts)
    with pytest.raises(ValueError, match="rows"):
        be.gram("en", np.zeros((3, 2)))
    with pytest.raises(ValueError, match="2-D"):
        be.gram("en", np.zeros(70))
    bad = np.zeros((70, 1))
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        be.gram("en", bad)
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        LocalCorpusBackend({"en": (sp.eye(2, format="csr"), np.array([0, 5]))}, 3)
    with pytest.raises(ValueError, match="dtype"):
        LocalCorpusBackend({"en": (sp.eye(2, format="csr"), np.array([0, 1]))}, 3, dtype="f16")


def test_backend_pickle_round_trip():
    problem = PROBLEMS["three_uneven"]
    be = LocalCorpusBackend(problem.corpus(), problem.n_concepts, dtype="float64")
    be.gram("de", np.ones((55, 2)))
    clone = pickle.loads(pickle.dumps(be))
    v = np.random.default_rng(1).standard_normal((55, 3))
    np.testing.assert_array_equal(clone.gram("de", v), be.gram("de", v))
    assert clone.pass_counts["passes"]["gram"] == 2  # counters survive, lock recreated


def test_operator_contract():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((6, 4))
    b = rng.standard_normal((4, 3))
    op_a, op_b = DenseOperator(a), DenseOperator(b)
    v = rng.standard_normal((3, 2))
    np.testing.assert_allclose((op_a @ op_b).matmat(v), a @ b @ v)
    np.testing.assert_allclose((op_a @ op_b).H.matmat(rng.standard_normal((6, 2))).shape, (3, 2))
    np.testing.assert_allclose(op_a.H.matmat(np.eye(6)), a.T)
    np.testing.assert_allclose(op_a.matvec(np.ones(4)), a.sum(1))
    np.testing.assert_allclose(op_a @ np.ones(4), a.sum(1))
    with pytest.raises(ValueError, match="4 rows"):
        op_a.matmat(np.ones((3, 1)))
    with pytest.raises(ValueError, match="compose"):
        op_b @ op_a
    bad = CallableOperator((2, 2), lambda v: np.zeros((3, v.shape[1])))
    with pytest.raises(RuntimeError, match="expected"):
        bad.matmat(np.ones((2, 1)))
    with pytest.raises(NotImplementedError):
        bad.H.matmat(np.ones((2, 1)))


def test_term_layout_round_trip():
    layout = TermLayout(["a", "b", "c"], [2, 0, 3])
    v = np.arange(10.0).reshape(5, 2)
    parts = layout.split(v)
    assert parts["b"].shape == (0, 2)
    np.testing.assert_array_equal(layout.join(parts), v)


def test_map_languages_keeps_order_pools_and_waits_for_every_language():
    """Results in language order from the calling thread's kept pool (the same worker
    threads on the next call); a task may map languages itself; an error surfaces after
    every language has finished, the first in language order."""
    langs = ["en", "de", "fr"]
    workers: list[set[threading.Thread]] = []  # the Thread objects: idents get reused
    for _ in range(2):
        seen: set[threading.Thread] = set()

        def fn(lang: str, seen: set[threading.Thread] = seen) -> str:
            seen.add(threading.current_thread())
            time.sleep(0.02)  # busy: the first call starts all three workers
            return lang.upper()

        assert list(map_languages(langs, fn).items()) == [("en", "EN"), ("de", "DE"), ("fr", "FR")]
        workers.append(seen)
    assert threading.current_thread() not in workers[0] and workers[1] <= workers[0]
    nested = map_languages(langs, lambda a: map_languages(langs, lambda b: a + b)[a])
    assert nested == {"en": "enen", "de": "dede", "fr": "frfr"}

    done: list[str] = []

    def failing(lang: str) -> str:
        if lang != "en":
            time.sleep(0.05)
            done.append(lang)
            raise ValueError(f"bad {lang}")
        return lang

    with pytest.raises(ValueError, match="bad de"):
        map_languages(langs, failing)
    assert sorted(done) == ["de", "fr"]
    assert map_languages(langs, str.upper, max_workers=1) == {"en": "EN", "de": "DE", "fr": "FR"}


def test_phase_of_drops_language_and_iteration_numbers():
    assert phase_of("cr5/eig12/cg[en]") == "cr5/eig/cg"
    assert phase_of("cr5/start1/Ct[da]") == "cr5/start/Ct"
    assert phase_of("cr5/precond[vi]") == "cr5/precond"
    assert phase_of("cr5/mean") == "cr5/mean"  # the method's own digit stays
    assert phase_of("cr5/eig3/cg[en]/in-task") == "cr5/eig/cg"  # a fused solve: the same CG


def test_passes_are_counted_by_the_phase_each_thread_described():
    """Two threads label their passes differently at the same time: each pass goes to its own
    thread's phase, and the phases add up to the totals."""
    problem = PROBLEMS[sorted(PROBLEMS)[0]]
    be = LocalCorpusBackend(problem.corpus(), problem.n_concepts, dtype="float64")
    lang = be.languages[0]
    v = np.ones((be.n_terms(lang), 3))
    barrier = threading.Barrier(2)

    def run(stage: str, n: int) -> None:
        be.describe(stage)
        barrier.wait()
        for it in range(n):
            be.describe(stage, it)
            be.gram(lang, v)

    threads = [
        threading.Thread(target=run, args=("cr5/eig4/cg[a]", 5)),
        threading.Thread(target=run, args=("cr5/w/cg[b]", 2)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    be.gram(lang, v)  # the main thread has described nothing
    counts = be.pass_counts
    assert counts["phase_passes"] == {"cr5/eig/cg": 5, "cr5/w/cg": 2, "unlabelled": 1}
    assert counts["phase_column_passes"] == {"cr5/eig/cg": 15, "cr5/w/cg": 6, "unlabelled": 3}
    assert sum(counts["phase_passes"].values()) == counts["passes"]["gram"] == 8
    delta = pass_delta(counts, be.pass_counts | {})
    assert delta["phase_passes"] == {}  # no pass in between: no phase
    assert list(passes_by_phase(counts)) == ["cr5/eig/cg", "cr5/w/cg", "unlabelled"]
    clone = pickle.loads(pickle.dumps(be))  # the thread-local label is not pickled
    clone.gram(lang, v)
    assert clone.pass_counts["phase_passes"]["unlabelled"] == 2
