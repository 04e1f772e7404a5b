"""The eigensolver monitor: objective and validation P@1 against independent computations,
and the validation stopping rule."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from pipeline.backends.local import LocalCorpusBackend
from pipeline.errors import ConfigError
from pipeline.linalg.block_lanczos import block_lanczos
from pipeline.linalg.cr5 import Cr5Solver, solve_cr5
from pipeline.linalg.errors import SolverArgumentError
from pipeline.linalg.monitor import IterationMonitor, ValidationSet
from pipeline.linalg.operator import DenseOperator
from tests.problems import PROBLEMS, dense_centred, planted_corpus
from tests.test_linalg_cr5 import TIGHT


def _validation(heldout) -> ValidationSet:
    return ValidationSet(heldout, {lang: np.arange(x.shape[0]) for lang, x in heldout.items()})


def _p_at_1_by_hand(components, heldout, distractors=None) -> float:
    """Mean P@1 over ordered language pairs, one query at a time (no shared code); a hit
    needs the target strictly above every other candidate (ties count against it), the
    candidates being the held-out rows of the target language and its ``distractors``."""
    scores = []
    langs = sorted(heldout)
    for l1 in langs:
        for l2 in langs:
            if l1 == l2:
                continue
            q = heldout[l1].toarray() @ components[l1].astype(np.float64)
            c = heldout[l2].toarray() @ components[l2].astype(np.float64)
            if distractors is not None:
                extra = distractors[l2].toarray() @ components[l2].astype(np.float64)
                c = np.vstack([c, extra])
            hits = 0
            for i in range(q.shape[0]):
                sims = [
                    float(q[i] @ c[j]) / (np.linalg.norm(q[i]) * np.linalg.norm(c[j]) or 1.0)
                    for j in range(c.shape[0])
                ]
                hits += int(all(s < sims[i] for j, s in enumerate(sims) if j != i))
            scores.append(hits / q.shape[0])
    return float(np.mean(scores))


def test_objective_equals_the_dense_ridge_objective():
    problem = PROBLEMS["three_uneven"]
    corpus, k, lam, r = problem.corpus(), problem.n_concepts, 0.3, 5
    res = solve_cr5(LocalCorpusBackend(corpus, k, dtype="float64"), lam=lam, r=r, **TIGHT)
    # ‖Ŷ − X̂W‖² + λ‖W‖² of W = Â⁻¹Ĉ P Pᵀ, P the dense top-r eigenvectors, formed explicitly
    xh, yh = dense_centred(corpus, k)
    a_hat = xh.T @ xh + lam * np.eye(xh.shape[1])
    c = xh.T @ yh
    _, vecs = np.linalg.eigh(c.T @ np.linalg.solve(a_hat, c))
    p = vecs[:, ::-1][:, :r]
    w = np.linalg.solve(a_hat, c @ p) @ p.T
    want = np.sum((yh - xh @ w) ** 2) + lam * np.sum(w**2)
    records = res.history["stopping"]["iterations"]
    assert records and res.history["stopping"]["stopped_by"] == "residual"
    np.testing.assert_allclose(records[-1]["objective"], want, rtol=1e-9)
    np.testing.assert_allclose(records[-1]["sigma_1"], np.sqrt(res.eigenvalues[0]), rtol=1e-12)
    # Ritz values only grow between restarts, so the objective never rises
    objectives = [rec["objective"] for rec in records]
    assert all(b <= a * (1 + 1e-12) for a, b in itertools.pairwise(objectives))


def test_validation_score_matches_an_independent_computation():
    corpus, heldout, k = planted_corpus(seed=1)
    be = LocalCorpusBackend(corpus, k, dtype="float64")
    res = solve_cr5(be, lam=1.0, r=8, **TIGHT, validation=_validation(heldout))
    stopping = res.history["stopping"]
    last = stopping["iterations"][-1]
    assert last["iteration"] == res.history["eigensolver"]["n_iter"]
    assert last["validation_p_at_1"] == pytest.approx(
        _p_at_1_by_hand(res.components, heldout), abs=1e-12
    )
    assert set(last["validation_per_direction"]) == {
        f"{a}->{b}" for a in heldout for b in heldout if a != b
    }
    assert last["validation_p_at_1"] > 5 / 40  # planted structure: far above chance (1/40)
    assert stopping["validation_documents"] == {lang: 40 for lang in sorted(heldout)}


def test_validation_distractors_join_the_candidates():
    """Training rows given as distractors are ranked with the validation rows: the monitor's
    projected score equals the hand computation over the larger pool, and is lower."""
    corpus, heldout, k = planted_corpus(seed=1)
    distractors = {lang: x[::7] for lang, (x, _) in corpus.items()}
    validation = ValidationSet(
        heldout, {lang: np.arange(x.shape[0]) for lang, x in heldout.items()}, distractors
    )
    be = LocalCorpusBackend(corpus, k, dtype="float64")
    res = solve_cr5(be, lam=1.0, r=8, **TIGHT, validation=validation)
    stopping = res.history["stopping"]
    score = stopping["iterations"][-1]["validation_p_at_1"]
    assert score == pytest.approx(_p_at_1_by_hand(res.components, heldout, distractors), abs=1e-12)
    assert score < _p_at_1_by_hand(res.components, heldout)
    assert stopping["validation_distractors"] == {
        lang: int(x.shape[0]) for lang, x in sorted(distractors.items())
    }
    with pytest.raises(ValueError, match="do not match"):
        ValidationSet(heldout, validation.concepts, {"xx": distractors[sorted(corpus)[0]]})


def test_validation_rule_stops_early_and_returns_the_best_iteration():
    corpus, heldout, k = planted_corpus(seed=0)
    be = LocalCorpusBackend(corpus, k, dtype="float64")
    common = dict(lam=1.0, r=10, oversampling=4, block_size=4, start_steps=0, seed=0)
    tight = {**TIGHT, "eig_rtol": 1e-10, "eig_maxiter": 60}
    res = solve_cr5(be, **common, **tight, stop_rule="validation", stop_patience=2,
                    validation=_validation(heldout))  # fmt: skip
    stopping = res.history["stopping"]
    records = {rec["iteration"]: rec for rec in stopping["iterations"]}
    n_iter = res.history["eigensolver"]["n_iter"]
    assert stopping["rule"] == "validation" and stopping["stopped_by"] == "validation"
    best = stopping["best_iteration"]
    assert stopping["returned_iteration"] == best == n_iter - 2  # patience 2
    scores = [records[i]["validation_p_at_1"] for i in sorted(records)]
    assert records[best]["validation_p_at_1"] == max(scores)
    assert scores[-1] <= max(scores) and scores[-2] <= max(scores)
    # the returned model is the best iteration's, not the last one's
    assert _p_at_1_by_hand(res.components, heldout) == pytest.approx(max(scores), abs=1e-12)
    assert n_iter < 60
    # Φ is that of the dense Cr5 restricted to the best iteration's Ritz vectors: its columns
    # are orthonormal as always
    phi_t = np.vstack([res.components[lang] for lang in sorted(corpus)]).astype(np.float64)
    np.testing.assert_allclose(phi_t.T @ phi_t, np.eye(10), atol=1e-5)


def test_residual_rule_records_validation_without_stopping_on_it():
    corpus, heldout, k = planted_corpus(seed=0)
    be = LocalCorpusBackend(corpus, k, dtype="float64")
    common = dict(lam=1.0, r=10, oversampling=4, block_size=4, start_steps=0, seed=0)
    with pytest.warns(Warning, match="did not reach"):
        res = solve_cr5(be, **common, **{**TIGHT, "eig_rtol": 1e-10, "eig_maxiter": 12},
                        validation=_validation(heldout))  # fmt: skip
    stopping = res.history["stopping"]
    assert stopping["stopped_by"] == "maxiter" and res.history["eigensolver"]["n_iter"] == 12
    assert stopping["returned_iteration"] == 12
    assert all("validation_p_at_1" in rec for rec in stopping["iterations"])


def test_monitor_patience_and_min_delta():
    scores = iter([0.2, 0.3, 0.3, 0.31, 0.29, 0.1])

    class FakeValidation(ValidationSet):
        def p_at_1_of(self, embeddings, similarity="cosine", distractors=None):
            return next(scores), {}

    x = {"en": np.eye(2)[:1], "de": np.eye(2)[:1]}
    val = FakeValidation(x, {"en": np.array([0]), "de": np.array([0])})
    mon = IterationMonitor(
        y_norm_sq=10.0,
        split=lambda a: {"en": a[:2], "de": a[2:]},
        r=1,
        validation=val,
        stop_rule="validation",
        patience=2,
        min_delta=0.015,
    )
    images = lambda: np.ones((4, 1))  # noqa: E731
    blocks, coef = [np.ones((4, 1))], np.ones((1, 1))
    stops = [mon.observe(i, np.array([1.0]), images, projected=(blocks, coef)) for i in range(1, 7)]
    # best 0.3 at it 2; 0.3 and 0.31 do not beat it by more than 0.015; stop at it 4
    assert stops[:4] == [False, False, False, True]
    assert mon.best.iteration == 2 and mon.stopped_by == "validation"
    assert mon.records[0]["objective"] == pytest.approx(9.0)


def test_residual_rule_scores_but_never_makes_the_best_iterations_model():
    """Under the residual rule the validation score is recorded (and the best iteration
    named) but no Φ*ᵀ is made: not at a restart (materialise) nor at the end (settle).
    Under the validation rule the same calls make the best iteration's."""
    made = []

    def images():
        made.append(1)
        return np.ones((4, 1))

    class FakeValidation(ValidationSet):
        def p_at_1_of(self, embeddings, similarity="cosine", distractors=None):
            return 0.5, {}

    x = {"en": np.eye(2)[:1], "de": np.eye(2)[:1]}
    val = FakeValidation(x, {"en": np.array([0]), "de": np.array([0])})
    blocks, coef = [np.ones((4, 1))], np.ones((1, 1))
    for rule, want in (("residual", 0), ("validation", 1)):
        made.clear()
        mon = IterationMonitor(
            y_norm_sq=10.0,
            split=lambda a: {"en": a[:2], "de": a[2:]},
            r=1,
            validation=val,
            stop_rule=rule,
            patience=5,
        )
        for i in (1, 2):
            mon.observe(i, np.array([1.0]), images, projected=(blocks, coef))
            mon.materialise()
        mon.settle(3)  # the run went past the best iteration (1)
        assert mon.best.iteration == 1
        assert mon.to_history("residual")["best_validation_p_at_1"] == 0.5
        assert len(made) == want, rule
        assert (mon.best.images is None) == (want == 0)


def test_block_lanczos_monitor_can_stop():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((60, 60))
    op = DenseOperator(a @ a.T)
    seen = []

    def monitor(state, theta, s):
        seen.append(state.n_iter)
        return state.n_iter == 2

    res = block_lanczos(op, 4, block_size=4, rtol=1e-14, maxiter=50, monitor=monitor)
    assert res.n_iter == 2 and res.stopped_by == "monitor" and seen == [1, 2]
    assert res.to_history()["stopped_by"] == "monitor"


def test_validation_rule_needs_documents_and_reused_solves():
    problem = PROBLEMS["three_uneven"]
    be = LocalCorpusBackend(problem.corpus(), problem.n_concepts)
    with pytest.raises(SolverArgumentError, match="needs validation documents"):
        Cr5Solver(lam=1.0, r=3, stop_rule="validation").fit(be)
    corpus, heldout, k = planted_corpus()
    with pytest.raises(SolverArgumentError, match="reuse_solves"):
        solve_cr5(
            LocalCorpusBackend(corpus, k),
            lam=1.0,
            r=3,
            reuse_solves=False,
            validation=_validation(heldout),
        )
    with pytest.raises(SolverArgumentError, match="'stop_rule' must be one of") as info:
        Cr5Solver(lam=1.0, r=3, stop_rule="sometimes").fit(be)
    assert info.value.argument == "stop_rule"
    # the stage boundary names the configuration key, as a configuration file's check does
    from pipeline.training.fit import configuration_error

    translated = configuration_error(info.value)
    assert isinstance(translated, ConfigError)
    assert str(translated).endswith("(configuration key train.stop_rule)")


def test_validation_set_rejects_inconsistent_input():
    x = {"en": np.eye(3), "de": np.eye(3)}
    with pytest.raises(ValueError, match="2 concepts"):
        ValidationSet(x, {"en": np.arange(3), "de": np.arange(2)})
    with pytest.raises(ValueError, match="appears twice"):
        ValidationSet(x, {"en": np.array([0, 0, 1]), "de": np.arange(3)})
    with pytest.raises(ValueError, match="different languages"):
        ValidationSet(x, {"en": np.arange(3)})


def test_p_at_1_with_a_transform_equals_p_at_1_of_the_transformed_map():
    """The monitor embeds validation rows by Φ*ᵀ and then Eq. 15's r x r map instead of
    forming Φᵀ = Φ*ᵀ T (p x r) every iteration: the same scores."""
    from pipeline.linalg.monitor import orthonormal_rows, orthonormalising_map

    _, heldout, _ = planted_corpus(seed=2)
    val = _validation(heldout)
    rng = np.random.default_rng(0)
    sizes = {lang: x.shape[1] for lang, x in sorted(heldout.items())}
    phi_star_t = rng.standard_normal((sum(sizes.values()), 6))
    phi_star_t[:, 0] *= 50.0  # unequal Λ: the map is not a multiple of an orthogonal one

    def split(a):
        out, start = {}, 0
        for lang, p in sizes.items():
            out[lang], start = a[start : start + p], start + p
        return out

    t, lam, _ = orthonormalising_map(phi_star_t)
    phi_t, lam2, _ = orthonormal_rows(phi_star_t)
    np.testing.assert_allclose(phi_t.T @ phi_t, np.eye(6), atol=1e-10)
    np.testing.assert_allclose(lam, lam2)
    np.testing.assert_allclose(phi_star_t @ t, phi_t, atol=1e-12)
    direct, per_direct = val.p_at_1(split(phi_t))
    mapped, per_mapped = val.p_at_1(split(phi_star_t), t)
    assert mapped == direct and per_mapped == per_direct
    # without the map the scores are those of Φ* itself, which differ here
    assert val.p_at_1(split(phi_star_t))[1] != per_direct


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_orthonormal_rows_in_place_equals_the_copy(dtype):
    """Φᵀ written over Φ*ᵀ (the fit's Φ step, one p x r array) equals the copying form,
    for a Φ*ᵀ taller than the row chunks of pipeline/linalg/dense.py."""
    from pipeline.linalg.monitor import orthonormal_rows

    rng = np.random.default_rng(3)
    phi_star_t = (rng.standard_normal((20_000, 7)) * np.arange(1, 8)).astype(dtype)
    want, lam, q = orthonormal_rows(phi_star_t.copy())
    buf = phi_star_t.copy()
    got, lam2, q2 = orthonormal_rows(buf, in_place=True)
    assert got is buf
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(lam2, lam)
    np.testing.assert_array_equal(q2, q)


def test_image_projections_follow_appends_and_restarts():
    """The validation rows' projections and the Gram, kept block by block, equal those of
    the stacked images after appends and after a restart (a new list of blocks), and hold no
    block the eigensolver has dropped."""
    import gc
    import weakref

    import scipy.sparse as sp

    from pipeline.linalg.image_projections import ImageProjections, map_from_gram

    rng = np.random.default_rng(4)
    sizes = {"en": 30, "de": 20}
    rows = {lang: sp.random(5, p, density=0.3, random_state=1, format="csr") for lang, p in
            sizes.items()}  # fmt: skip

    def split(a):
        return {"en": a[:30], "de": a[30:]}

    proj = ImageProjections(rows, split)
    blocks = [rng.standard_normal((50, 3)).astype(np.float32) for _ in range(3)]

    def check(blocks):
        stacked = np.hstack(blocks).astype(np.float64)
        coef = rng.standard_normal((stacked.shape[1], 2))
        np.testing.assert_allclose(proj.gram(coef), (stacked @ coef).T @ (stacked @ coef),
                                   rtol=1e-10)  # fmt: skip
        t = map_from_gram(proj.gram(coef))[0]
        emb = proj.embeddings(coef, t)
        for lang, x in rows.items():
            np.testing.assert_allclose(emb[lang], x @ split(stacked)[lang] @ coef @ t,
                                       rtol=1e-9, atol=1e-12)  # fmt: skip

    proj.update(blocks[:2])
    check(blocks[:2])
    proj.update(blocks)  # one block appended
    assert proj.n_columns == 9
    check(blocks)
    restarted = [rng.standard_normal((50, 4)).astype(np.float32)]
    old = weakref.ref(blocks[0])
    del blocks
    proj.update(restarted)  # a restart: a new list
    gc.collect()
    assert old() is None  # the projections do not keep the dropped blocks alive
    assert proj.n_columns == 4
    check(restarted)


def test_validation_rule_with_restarts_returns_the_best_iteration():
    """With a basis small enough to restart often, the best iteration's Φ*ᵀ is made before
    the restart that would replace its images: the returned model scores the best P@1."""
    corpus, heldout, k = planted_corpus(seed=0)
    be = LocalCorpusBackend(corpus, k, dtype="float64")
    common = dict(lam=1.0, r=10, oversampling=4, block_size=4, start_steps=0, seed=0)
    tight = {**TIGHT, "eig_rtol": 1e-10, "eig_maxiter": 60}
    res = solve_cr5(be, **common, **tight, max_basis=18, stop_rule="validation",
                    stop_patience=3, validation=_validation(heldout))  # fmt: skip
    stopping = res.history["stopping"]
    assert res.history["eigensolver"]["n_restarts"] >= 2
    scores = [rec["validation_p_at_1"] for rec in stopping["iterations"]]
    assert stopping["returned_iteration"] == stopping["best_iteration"]
    assert _p_at_1_by_hand(res.components, heldout) == pytest.approx(max(scores), abs=1e-12)
