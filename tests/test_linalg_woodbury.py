"""Woodbury Â⁻¹ against the dense inverse of X̂ᵀX̂ + λI."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from pipeline.backends.local import LocalCorpusBackend
from pipeline.errors import BreakdownError
from pipeline.linalg.woodbury import WoodburyInverse, global_mean
from tests.problems import PROBLEMS, dense_centred


@pytest.mark.parametrize("background", [False, True])
@pytest.mark.parametrize("name", sorted(PROBLEMS))
@pytest.mark.parametrize("lam", [0.05, 1.0])
def test_woodbury_equals_dense_inverse(name, lam, background):
    problem = PROBLEMS[name]
    corpus = problem.corpus()
    be = LocalCorpusBackend(corpus, problem.n_concepts, dtype="float64")
    xh, _ = dense_centred(corpus, problem.n_concepts)
    a_hat = xh.T @ xh + lam * np.eye(xh.shape[1])
    op = WoodburyInverse(be, lam, rtol=1e-13, w_rtol=1e-13, maxiter=5000)
    # a background w solve is awaited by the first product, after that product's own solve
    op.prepare(background=background)
    u = np.random.default_rng(0).standard_normal((xh.shape[1], 4))
    got = op.matmat(u)
    want = np.linalg.solve(a_hat, u)
    assert np.linalg.norm(got - want) <= 1e-8 * np.linalg.norm(want)
    assert op.c > 0
    assert len(op.records) == 2  # w solve + one block solve, all languages per record
    assert {rec.n_rhs for rec in op.records} == {1, 4}
    assert all(set(rec.n_iter) == set(problem.sizes) for rec in op.records)


def test_w_tolerance_follows_the_block_tolerance_unless_given():
    """train.w_rtol unset: w is solved to rtol / 30, so tightening the block solves tightens
    w with them and the operator stays exact; a given w_rtol is kept as it is."""
    problem = PROBLEMS["three_uneven"]
    corpus = problem.corpus()
    be = LocalCorpusBackend(corpus, problem.n_concepts, dtype="float64")
    xh, _ = dense_centred(corpus, problem.n_concepts)
    a_hat = xh.T @ xh + np.eye(xh.shape[1])
    op = WoodburyInverse(be, 1.0, rtol=1e-11, maxiter=5000)
    assert op.w_rtol == pytest.approx(1e-11 / 30)
    u = np.random.default_rng(1).standard_normal((xh.shape[1], 3))
    want = np.linalg.solve(a_hat, u)
    assert np.linalg.norm(op.matmat(u) - want) <= 1e-8 * np.linalg.norm(want)
    assert WoodburyInverse(be, 1.0, rtol=1e-11, w_rtol=1e-4).w_rtol == 1e-4


def test_background_w_solve_error_reaches_the_caller():
    problem = PROBLEMS["tiny_language"]

    class Failing(LocalCorpusBackend):
        def _gram(self, lang, v):
            if v.shape[1] == 1:  # only the single-column w solve fails
                raise RuntimeError("executor lost")
            return super()._gram(lang, v)

    be = Failing(problem.corpus(), problem.n_concepts, dtype="float64")
    op = WoodburyInverse(be, 0.5).prepare(background=True)
    with pytest.raises(RuntimeError, match="executor lost"):
        op.matmat(np.ones((op.shape[0], 2)))


def test_global_mean_is_over_all_documents():
    problem = PROBLEMS["three_uneven"]
    corpus = problem.corpus()
    be = LocalCorpusBackend(corpus, problem.n_concepts, dtype="float64")
    xh_plus_mean, _ = dense_centred(corpus, problem.n_concepts)
    n = sum(x.shape[0] for x, _ in corpus.values())
    dense_sum = np.concatenate([np.asarray(x.sum(0)).ravel() for x, _ in corpus.values()])
    np.testing.assert_allclose(global_mean(be), dense_sum / n, rtol=1e-6)
    assert abs(xh_plus_mean.mean(0)).max() < 1e-12


def test_languages_are_solved_concurrently():
    import threading

    problem = PROBLEMS["three_uneven"]
    barrier = threading.Barrier(3, timeout=10)  # breaks unless 3 languages run at once
    first = set()

    class Spy(LocalCorpusBackend):
        def _gram(self, lang, v):
            if lang not in first:
                first.add(lang)
                barrier.wait()
            return super()._gram(lang, v)

    be = Spy(problem.corpus(), problem.n_concepts, dtype="float64")
    # precond_rank=0: the first gram passes are the w solve's (a deflated preconditioner's
    # build would make them, and skips vocabularies too small to deflate)
    WoodburyInverse(be, 0.1, precond_rank=0).prepare()
    assert first == {"en", "de", "fr"}


def test_woodbury_breakdown_is_named():
    problem = PROBLEMS["single_language"]
    be = LocalCorpusBackend(problem.corpus(), problem.n_concepts, dtype="float64")
    op = WoodburyInverse(be, 0.1, mu=None)
    op.prepare()
    bad = WoodburyInverse(be, 0.1, mu=op.mu, w=op.w * 1e6)
    with pytest.raises(BreakdownError, match="positive definite"):
        bad.prepare()


def test_woodbury_pickles_without_history():
    problem = PROBLEMS["tiny_language"]
    be = LocalCorpusBackend(problem.corpus(), problem.n_concepts, dtype="float64")
    op = WoodburyInverse(be, 0.5).prepare()
    clone = pickle.loads(pickle.dumps(op))
    assert clone.records == [] and clone.c == op.c
    u = np.ones((op.shape[0], 1))
    np.testing.assert_array_equal(clone.matmat(u), op.matmat(u))


def test_float32_cg_for_the_solves_and_float64_for_w(monkeypatch):
    """With a float32 backend the block solves run their CG in float32 (train.cg_dtype
    None) and still meet their tolerance against the dense inverse; the w = B⁻¹μ solve,
    whose 1e-6 tolerance float32 cannot reach, stays float64; cg_dtype="float64" gives
    the float64 CG back."""
    problem = PROBLEMS["tiny_language"]
    corpus = problem.corpus()
    be = LocalCorpusBackend(corpus, problem.n_concepts, dtype="float32")
    xh, _ = dense_centred(corpus, problem.n_concepts)
    lam = 0.5
    a_hat = xh.T @ xh + lam * np.eye(xh.shape[1])
    u = np.random.default_rng(0).standard_normal((xh.shape[1], 3))
    want = np.linalg.solve(a_hat, u)
    import pipeline.linalg.woodbury as woodbury

    calls = []
    real = woodbury.block_cg

    def recording(a, b, **kw):
        calls.append((b.shape[1], np.dtype(kw["dtype"])))
        return real(a, b, **kw)

    monkeypatch.setattr(woodbury, "block_cg", recording)
    for cg_dtype, dtype in ((None, np.float32), ("float64", np.float64)):
        calls.clear()
        op = WoodburyInverse(be, lam, rtol=1e-4, w_rtol=1e-6, maxiter=5000, cg_dtype=cg_dtype)
        assert op.cg_dtype == dtype
        got = op.matmat(u)
        assert got.dtype == np.float64
        # per language: the w solve (1 column) in float64, the block (3) in the CG dtype
        assert set(calls) == {(1, np.dtype(np.float64)), (3, np.dtype(dtype))}
        # rtol 1e-4 per language block, amplified by at most cond(Â) / cond(B) ~ 1
        assert np.linalg.norm(got - want) <= 1e-3 * np.linalg.norm(want)
        b_mat = a_hat + xh.shape[0] * np.outer(op.mu, op.mu)  # B = Â + n μ μᵀ
        w_rel = np.linalg.norm(b_mat @ op.w - op.mu) / np.linalg.norm(op.mu)
        assert w_rel <= 2e-6  # float32 could not get there: float64 w solve
    with pytest.raises(ValueError, match="cg_dtype"):
        WoodburyInverse(be, lam, cg_dtype="float16")
