"""S2Net: the loss gradient against finite differences, the triples it samples, a fit that
improves a deliberately poor start, validation among training-document distractors,
checkpoint/resume and parameter checks."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from pipeline.backends.local_groups import LocalGroupedCorpus
from pipeline.baselines.s2net import batch_loss, batch_pairs, fit_s2net, triplet_loss
from pipeline.errors import ConfigError
from pipeline.io.checkpoints import CheckpointDirectory
from pipeline.linalg.monitor import ValidationSet, distractor_rows


def test_triplet_gradient_matches_finite_differences():
    rng = np.random.default_rng(0)
    u = [rng.standard_normal((4, 5)) for _ in range(3)]
    gamma = 3.0
    _, *grads = triplet_loss(*u, gamma)
    h = 1e-6
    for which in range(3):
        num = np.zeros_like(u[which])
        for idx in np.ndindex(*u[which].shape):
            plus = [a.copy() for a in u]
            minus = [a.copy() for a in u]
            plus[which][idx] += h
            minus[which][idx] -= h
            num[idx] = (
                triplet_loss(*plus, gamma)[0].sum() - triplet_loss(*minus, gamma)[0].sum()
            ) / (2 * h)
        np.testing.assert_allclose(grads[which], num, rtol=1e-6, atol=1e-9)


def test_zero_vectors_have_cosine_zero_and_no_gradient():
    u = np.array([[0.0, 0.0], [1.0, 2.0]])
    v = np.array([[1.0, 0.0], [2.0, 1.0]])
    loss, g_a, g_b, g_n = triplet_loss(u, v, v, 10.0)
    assert np.isclose(loss[0], np.log(2.0)) and np.all(np.isfinite(loss))
    assert np.all(g_a[0] == 0) and np.all(g_b[0] == 0) and np.all(g_n[0] == 0)


def corpus(seed=0, n_concepts=40, n_blocks=3, p=(12, 10)):
    """Two languages; a concept's documents share their (random) topic words."""
    rng = np.random.default_rng(seed)
    data = {}
    centres = rng.random((n_concepts, 4))
    for lang, p_l in zip(("en", "de"), p, strict=True):
        words = rng.random((4, p_l))
        x = centres @ words + 0.3 * rng.random((n_concepts, p_l))
        x[x < np.median(x, axis=1, keepdims=True)] = 0  # half the terms of every document
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        data[lang] = (sp.csr_matrix(x), np.arange(n_concepts))
    return data, LocalGroupedCorpus.from_matrices(
        data, n_concepts, n_blocks=n_blocks, weighting="tfidf"
    )


def test_block_gradient_matches_finite_differences_of_the_block_loss():
    _, c = corpus()
    block = c.blocks[0]
    rng = np.random.default_rng(1)
    w = rng.standard_normal((c.n_terms, 3))
    shared = {
        "w": w,
        "batch_of": np.arange(c.n_concepts) % 2,
        "batch": 1,
        "epoch": 3,
        "seed": 0,
        "gamma": 5.0,
        "negatives": 2,
    }
    _, k, ids, grad = batch_loss(block, shared)
    assert k > 0
    h = 1e-6
    for i, term in enumerate(ids[:6]):
        for j in range(3):
            plus, minus = w.copy(), w.copy()
            plus[term, j] += h
            minus[term, j] -= h
            num = (
                batch_loss(block, {**shared, "w": plus})[0]
                - batch_loss(block, {**shared, "w": minus})[0]
            ) / (2 * h)
            assert abs(grad[i, j] - num) <= 1e-6 * max(1.0, abs(num)), (term, j)
    # terms no batch document uses have no gradient row
    assert set(ids) <= set(block.cols)


def test_triples_pair_a_concepts_documents_with_other_concepts_documents():
    doc_group = np.array([0, 0, 1, 1, 1, 2, 3])
    doc_lang = np.array([0, 1, 0, 1, 2, 0, 1])
    a, b, n = batch_pairs(doc_group, doc_lang, 3, np.random.default_rng(0))
    pairs = {(int(i), int(j)) for i, j in zip(a, b, strict=True)}
    # every ordered pair of a concept's documents but those whose second document (document
    # 4) is the only one of its language, so that no negative exists: (2, 4) and (3, 4)
    assert pairs == {(0, 1), (1, 0), (2, 3), (3, 2), (4, 2), (4, 3)}
    assert np.all(doc_group[a] == doc_group[b]) and np.all(doc_lang[a] != doc_lang[b])
    assert np.all(doc_lang[n] == doc_lang[b]) and np.all(doc_group[n] != doc_group[b])
    # language 2 has one document: its pairs (as b) have no negative and are dropped
    assert not np.any(doc_lang[b] == 2)
    assert a.size == 3 * len(pairs)


def poor_start_problem(validation_seed: int) -> tuple:
    """corpus(), a random start of r = 3 and 20 validation documents per language of
    corpus(seed=validation_seed)."""
    data, c = corpus()
    rng = np.random.default_rng(5)
    init = {lang: rng.standard_normal((x.shape[1], 3)) for lang, (x, _) in data.items()}
    val_data, _ = corpus(seed=validation_seed)
    validation = ValidationSet(
        {lang: x[:20] for lang, (x, _) in val_data.items()},
        {lang: np.arange(20) for lang in val_data},
    )
    return data, c, init, validation


def test_fit_improves_a_poor_start_and_keeps_the_best_epoch():
    _, c, init, validation = poor_start_problem(validation_seed=0)
    res = fit_s2net(
        c,
        init,
        r=3,
        learning_rates=[0.5, 5.0],
        epochs=[0, 5, 20],
        batch_concepts=10,
        validation=validation,
    )
    runs = res.history["epochs_run"]
    start = next(r["validation_p_at_1"] for r in runs if r["epoch"] == 0)
    chosen = res.history["chosen"]
    assert chosen["validation_p_at_1"] == max(
        r["validation_p_at_1"] for r in runs if r["validation_p_at_1"] is not None
    )
    assert chosen["validation_p_at_1"] > start
    got = validation.p_at_1(res.components)[0]
    assert got == pytest.approx(chosen["validation_p_at_1"], abs=1e-9)
    losses = [r["loss"] for r in runs if r["rate"] == chosen["learning_rate"] and r["loss"]]
    assert losses[-1] < losses[0]


def test_sampled_rows_are_the_corpus_rows_of_the_seeded_sample():
    data, c = corpus(n_concepts=30, n_blocks=4)
    got = c.sample_rows(7)
    for i, (lang, (x, _)) in enumerate(data.items()):
        want = x[distractor_rows(x.shape[0], 7, seed=i)]
        assert got[lang].shape == (7, x.shape[1])
        np.testing.assert_array_equal(got[lang].toarray(), want.toarray())
    assert all(v.shape[0] == 30 for v in c.sample_rows(100).values())  # all rows, capped


def test_validation_ranks_among_training_document_distractors():
    """The epoch is scored with training documents among the candidates: the recorded
    scores are P@1 with the sampled rows embedded as extra candidates, computed here from
    the matrices, and lower than among validation documents alone."""
    data, c, init, validation = poor_start_problem(validation_seed=1)
    kw = {"r": 3, "learning_rates": [0.5, 5.0], "epochs": [0, 5], "batch_concepts": 10}
    plain = fit_s2net(c, init, validation=validation, **kw)
    hard = fit_s2net(c, init, validation=validation, distractors=15, **kw)
    assert hard.history["validation_distractors"] == {"en": 15, "de": 15}
    extra = {
        lang: x[distractor_rows(x.shape[0], 15, seed=i)]
        for i, (lang, (x, _)) in enumerate(data.items())
    }
    want = validation.p_at_1_of(
        {lang: validation.rows[lang] @ hard.components[lang] for lang in data},
        distractors={lang: extra[lang] @ hard.components[lang] for lang in data},
    )[0]
    assert hard.history["chosen"]["validation_p_at_1"] == pytest.approx(want, abs=1e-9)
    scores = [r["validation_p_at_1"] for r in hard.history["epochs_run"]]
    easy = [r["validation_p_at_1"] for r in plain.history["epochs_run"]]
    assert all(h <= e for h, e in zip(scores, easy, strict=True) if h is not None)
    assert sum(scores[i] < easy[i] for i in range(len(scores)) if scores[i] is not None) > 0


def test_resume_continues_at_the_next_epoch(tmp_path):
    data, c = corpus()
    rng = np.random.default_rng(5)
    init = {lang: rng.standard_normal((x.shape[1], 3)) for lang, (x, _) in data.items()}
    kw = {"r": 3, "learning_rates": [2.0], "batch_concepts": 10}
    full = fit_s2net(c, init, epochs=[6], **kw)
    store = tmp_path / "ck"
    fit_s2net(c, init, epochs=[2], checkpoint=CheckpointDirectory(store), **kw)
    # same problem: a longer run resumes after epoch 2 from the saved map
    resumed = fit_s2net(c, init, epochs=[6], checkpoint=CheckpointDirectory(tmp_path / "ck2"), **kw)
    np.testing.assert_array_equal(resumed.components["en"], full.components["en"])
    part = fit_s2net(c, init, epochs=[6], checkpoint=CheckpointDirectory(store), **kw)
    epochs = [r["epoch"] for r in part.history["epochs_run"]]
    assert epochs == [0, 1, 2, 3, 4, 5, 6]  # 1, 2 from the saved run, 3..6 after the resume
    for lang in data:
        np.testing.assert_allclose(part.components[lang], full.components[lang], rtol=1e-6)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"learning_rates": [0.0]}, "train.s2net.learning_rates"),
        ({"epochs": [-1]}, "train.s2net.epochs"),
        ({"batch_concepts": 0}, "train.s2net.batch_concepts"),
        ({"gamma": 0.0}, "train.s2net.scale"),
        ({"negatives": 0}, "train.s2net.negatives"),
        ({"learning_rates": []}, "at least one value"),
        ({"learning_rates": [1.0, 2.0]}, "needs validation documents"),
        ({"distractors": -1}, "distractors must be >= 0"),
    ],
)
def test_bad_parameters_are_rejected_before_any_work(kwargs, needle):
    data, c = corpus()
    init = {lang: np.zeros((x.shape[1], 3)) for lang, (x, _) in data.items()}
    steps = c.steps
    with pytest.raises(ConfigError, match=needle):
        fit_s2net(c, init, r=3, **{"epochs": [1], **kwargs})
    assert c.steps == steps
