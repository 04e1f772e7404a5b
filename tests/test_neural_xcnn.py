"""XCNN and the neural training loop on tiny data: the loss, overfitting, the exported map,
resume after a kill, and a TorchDistributor run equal to a single-process one."""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import scipy.sparse as sp

torch = pytest.importorskip("torch")

from pipeline.neural.loop import LoopSettings, run_loop  # noqa: E402
from pipeline.neural.xcnn import XcnnTask, nce_loss, parallel_pairs  # noqa: E402
from tests.conftest import REPO  # noqa: E402


def tiny_task(n_concepts: int = 24, p: int = 30, dim: int = 8, seed: int = 0) -> XcnnTask:
    """Two languages; concept c uses terms {c, c+1} mod p in both (a translation)."""
    rng = np.random.default_rng(seed)
    rows = []
    for _lang in range(2):
        x = sp.lil_matrix((n_concepts, p), dtype=np.float32)
        for c in range(n_concepts):
            x[c, c % p] = 1.0 + rng.random()
            x[c, (c + 1) % p] = 1.0
        x = sp.csr_matrix(x)
        x = sp.diags(1 / np.sqrt(x.multiply(x).sum(axis=1).A.ravel())) @ x
        rows.append(sp.csr_matrix(x, dtype=np.float32))
    concepts = [np.arange(n_concepts), np.arange(n_concepts)[::-1].copy()]
    rows[1] = rows[1][::-1]  # language b's rows in another order
    return XcnnTask(["a", "b"], rows, concepts, dim=dim, scale=5.0)


def test_parallel_pairs_match_documents_by_concept():
    pairs = parallel_pairs(
        {"en": np.array([5, 3, 9]), "de": np.array([9, 5]), "fr": np.array([3])},
        ["en", "de", "fr"],
    )
    assert pairs.tolist() == [[0, 0, 1, 1], [0, 2, 1, 0], [0, 1, 2, 0]]


def test_nce_loss_against_a_hand_computation():
    q = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    p = torch.tensor([[1.0, 1.0], [0.0, 1.0]])
    n = torch.tensor([[-1.0, 0.0], [3.0, 0.0]])
    s = 2.0
    cos_p, cos_n = np.array([1 / np.sqrt(2), 1.0]), np.array([-1.0, 0.0])
    want = np.mean(np.log1p(np.exp(-s * cos_p)) + np.log1p(np.exp(s * cos_n)))
    assert float(nce_loss(torch, q, p, n, s)) == pytest.approx(want, rel=1e-6)


def test_negatives_are_other_concepts_and_seeded():
    task = tiny_task()
    d1 = task.draw(np.random.default_rng([3, 0]))
    d2 = task.draw(np.random.default_rng([3, 0]))
    np.testing.assert_array_equal(d1, d2)
    for i, (la, ra, lb, rb) in enumerate(task.pairs):
        assert task.concepts[lb][d1[i, 0]] != task.concepts[lb][rb]
        assert task.concepts[la][d1[i, 1]] != task.concepts[la][ra]


def test_loss_decreases_and_a_tiny_batch_is_overfit():
    task = tiny_task()
    out = run_loop(task, LoopSettings(epochs=150, batch_size=24, lr=0.05, seed=1))
    losses = [h["loss"] for h in out["history"]]
    assert losses[-1] < 0.5 * losses[0]
    # overfit: every document retrieves its translation (cosine in the exported map)
    h = out["weights"]
    ea, eb = task.rows[0] @ h["a"], task.rows[1] @ h["b"]
    ea /= np.linalg.norm(ea, axis=1, keepdims=True)
    eb /= np.linalg.norm(eb, axis=1, keepdims=True)
    nearest = np.argmax(ea @ eb.T, axis=1)
    np.testing.assert_array_equal(task.concepts[1][nearest], task.concepts[0])


def test_exported_map_embeds_as_the_network():
    task = tiny_task()
    torch.manual_seed(0)
    model = task.build()
    rows = np.array([0, 3, 5])
    with torch.no_grad():
        net = task._embed(torch, model, 1, rows).numpy()
    np.testing.assert_allclose(task.rows[1][rows] @ task.export(model)["b"], net, rtol=1e-5,
                               atol=1e-6)  # fmt: skip


def test_the_best_validation_epoch_is_kept():
    task = tiny_task()
    scores = iter([0.1, 0.5, 0.5, 0.2])
    task.score = lambda model: next(scores)
    out = run_loop(task, LoopSettings(epochs=4, batch_size=8, lr=0.01, seed=0))
    assert out["chosen_epoch"] == 2
    assert [h["validation_p_at_1"] for h in out["history"]] == [0.1, 0.5, 0.5, 0.2]


def test_validation_ranks_among_training_distractors():
    """The score with no distractors is the ValidationSet's P@1; training documents added to
    the candidates can only lower it, and do here (the tiny task's untrained map)."""
    from pipeline.linalg.monitor import ValidationSet

    base = tiny_task()
    val = ValidationSet(
        rows={"a": base.rows[0][:8], "b": base.rows[1][-8:]},
        concepts={"a": base.concepts[0][:8], "b": base.concepts[1][-8:]},
    )
    plain = dataclasses.replace(base, validation=val)
    hard = dataclasses.replace(base, validation=val, distractors=16)
    torch.manual_seed(0)
    model = plain.build()
    assert plain.score(model) == pytest.approx(val.p_at_1(plain.maps(model))[0])
    assert hard.distractor_rows[0].size == 16 and hard.score(model) < plain.score(model)


_RESUME_SCRIPT = """
import sys, time
import numpy as np
from pipeline.neural.loop import LoopSettings, run_loop
from tests.test_neural_xcnn import tiny_task
task = tiny_task()
slow = task.loss
def loss(*a):
    time.sleep(float(sys.argv[2]))
    return slow(*a)
task.loss = loss
settings = LoopSettings(epochs=6, batch_size=8, lr=0.02, seed=5, checkpoint_dir=sys.argv[1])
out = run_loop(task, settings)
np.savez(sys.argv[1] + "/../result.npz", **out["weights"])
"""


@pytest.mark.slow
def test_resume_after_a_kill_ends_with_the_uninterrupted_weights(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    run = tmp_path / "killed" / "ckpt"
    run.parent.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", _RESUME_SCRIPT, str(run), "0.02"], env=env)
    deadline = time.time() + 120
    while not (run.exists() and any(p.name.startswith("epoch-0002") for p in run.iterdir())):
        assert proc.poll() is None and time.time() < deadline, "no checkpoint of epoch 2"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (run.parent / "result.npz").exists()  # killed before the end
    subprocess.run([sys.executable, "-c", _RESUME_SCRIPT, str(run), "0"], env=env, check=True)
    whole = tmp_path / "whole" / "ckpt"
    whole.parent.mkdir()
    subprocess.run([sys.executable, "-c", _RESUME_SCRIPT, str(whole), "0"], env=env, check=True)
    a, b = np.load(run.parent / "result.npz"), np.load(whole.parent / "result.npz")
    for k in ("a", "b"):
        np.testing.assert_array_equal(a[k], b[k])
    assert sorted(p.name for p in run.iterdir()) == ["epoch-0006.pt"]


def three_language_task() -> XcnnTask:
    """tiny_task plus a language c with documents of concepts 0..2 only: most slices of a
    batch have no pair of c, some batches none at all (its parameters then get no gradient
    in some or all processes)."""
    base = tiny_task()
    return XcnnTask(
        ["a", "b", "c"],
        [*base.rows, base.rows[0][:3]],
        [*base.concepts, np.arange(3)],
        dim=base.dim,
        scale=base.scale,
    )


@pytest.mark.slow
def test_torch_distributor_run_equals_a_single_process_run(spark):
    from pipeline.methods.neural import train_task

    task = three_language_task()
    settings = LoopSettings(epochs=3, batch_size=8, lr=0.02, seed=7)
    # the loop's batches (run_loop: epoch e's permutation seeded by (seed, e)): one process's
    # slice has a pair of c while the other's has none
    has_c = (task.pairs[:, 0] == 2) | (task.pairs[:, 2] == 2)
    steps = task.n_items // 8
    slices = [
        np.random.default_rng([7, e]).permutation(task.n_items)[: steps * 8].reshape(-1, 2, 4)
        for e in range(3)
    ]
    assert any(has_c[b[0]].any() != has_c[b[1]].any() for s in slices for b in s)
    single = run_loop(task, settings)
    distributed = train_task(task, settings, processes=2)
    assert distributed["world_size"] == 2 and single["world_size"] == 1
    for lang in ("a", "b", "c"):
        # the same steps; the gradients differ by the all-reduce's rounding only
        np.testing.assert_allclose(distributed["weights"][lang], single["weights"][lang],
                                   rtol=0, atol=2e-5)  # fmt: skip
    for h1, h2 in zip(single["history"], distributed["history"]):
        assert h1["loss"] == pytest.approx(h2["loss"], rel=1e-5)
    # and the run differs from one with another seed (the comparison can fail)
    other = run_loop(task, dataclasses.replace(settings, seed=8))
    assert np.abs(other["weights"]["a"] - single["weights"]["a"]).max() > 1e-2


def test_term_dropout_applies_in_training_only_and_is_seeded():
    """Dropped weights are zero and kept ones scaled by 1/(1-p); eval embeds every term."""
    task = dataclasses.replace(tiny_task(), term_dropout=0.5)
    torch.manual_seed(0)
    model = task.build()
    rows = np.arange(12)
    model.eval()
    with torch.no_grad():
        full = task._embed(torch, model, 0, rows)
        np.testing.assert_allclose(
            full.numpy(), task.rows[0][rows] @ tiny_task().maps(model)["a"], rtol=1e-5, atol=1e-6
        )
    model.train()
    with torch.no_grad():
        torch.manual_seed(7)
        a = task._embed(torch, model, 0, rows)
        torch.manual_seed(7)
        b = task._embed(torch, model, 0, rows)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert not torch.allclose(a, full)
    # each row is Σ over its kept terms of 2·x_t·h_t: check against the mask torch drew
    torch.manual_seed(7)
    x = task.rows[0][rows]
    keep = (torch.rand(x.data.shape) >= 0.5).numpy()
    h = tiny_task().maps(model)["a"]
    dropped = sp.csr_matrix((x.data * keep * 2.0, x.indices, x.indptr), shape=x.shape)
    np.testing.assert_allclose(a.numpy(), dropped @ h, rtol=1e-5, atol=1e-6)


def test_the_loop_device_is_resolved_and_a_missing_gpu_is_a_clear_error(monkeypatch):
    """auto runs on the GPU when PyTorch sees one (its local rank's), else on the CPU; cuda
    without a GPU is refused, naming the key; the trained weights come back as numpy."""
    from pipeline.errors import ConfigError
    from pipeline.neural.loop import resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device(torch, "auto").type == resolve_device(torch, "cpu").type == "cpu"
    with pytest.raises(ConfigError, match="device=cuda"):
        resolve_device(torch, "cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert resolve_device(torch, "auto") == torch.device("cuda", 1)
    assert resolve_device(torch, "cpu").type == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    settings = LoopSettings(epochs=1, batch_size=8, lr=0.01, seed=0, device="auto")
    out = run_loop(tiny_task(), settings)
    assert all(isinstance(v, np.ndarray) for v in out["weights"].values())


def test_weight_decay_shrinks_unused_weights_by_lr_times_decay_per_step():
    """AdamW's decoupled decay: a term no training row contains gets a zero gradient, so
    after k steps its weights are the initial ones times (1 - lr·decay)^k exactly; decay 0
    is Adam (those weights do not move)."""
    task = tiny_task(n_concepts=10, p=30)  # terms 11..29 appear in no row
    task.export = lambda model: {
        k: v.detach().numpy().copy() for k, v in model.state_dict().items()
    }
    lr, decay, epochs = 0.01, 0.5, 3
    steps = epochs * (task.n_items // 4)
    torch.manual_seed(1)
    start = task.build().w[0].detach().numpy()
    for wd in (0.0, decay):
        settings = LoopSettings(epochs=epochs, batch_size=4, lr=lr, seed=1, weight_decay=wd)
        w = run_loop(task, settings)["weights"]["w.0"]
        np.testing.assert_allclose(w[11:], start[11:] * (1 - lr * wd) ** steps, rtol=1e-5)
        assert not np.allclose(w[:11], start[:11])  # the used terms trained


def test_centred_validation_ranks_on_embeddings_less_the_mean_training_embedding():
    """The offsets are the mean of x @ H over the rows with a term (a dense computation);
    with center the per-epoch score is the P@1 of the embeddings less that mean, validation
    rows and distractors alike."""
    from pipeline.linalg.monitor import ValidationSet
    from pipeline.neural.validation import validation_p_at_1

    base = tiny_task()
    val = ValidationSet(
        rows={"a": base.rows[0][:8], "b": base.rows[1][-8:]},
        concepts={"a": base.concepts[0][:8], "b": base.concepts[1][-8:]},
    )
    task = dataclasses.replace(base, validation=val, distractors=6, center=True)
    torch.manual_seed(0)
    model = task.build()
    maps = {k: v.astype(np.float64) for k, v in task.maps(model).items()}
    rows = dict(zip(task.langs, task.rows))
    shift = task.offsets(maps)
    for lang, x in rows.items():
        dense = x.toarray() @ maps[lang]
        np.testing.assert_allclose(shift[lang], dense.mean(axis=0), rtol=1e-5)  # float32 rows
    emb = {lang: x.toarray() @ maps[lang] - shift[lang] for lang, x in val.rows.items()}
    extra = {
        lang: task.rows[i][task.distractor_rows[i]].toarray() @ maps[lang] - shift[lang]
        for i, lang in enumerate(task.langs)
    }
    assert task.score(model) == pytest.approx(validation_p_at_1(emb, val.concepts, extra))


def test_the_loop_reports_progress_within_an_epoch(caplog):
    """The first process logs step lines within each epoch at ``progress_seconds``; 0 is
    off (the epoch lines stay)."""
    caplog.set_level(logging.INFO, logger="pipeline.neural.loop")
    settings = LoopSettings(epochs=2, batch_size=4, lr=0.05, seed=1, progress_seconds=1e-9)
    run_loop(tiny_task(), settings)
    steps = [r.getMessage() for r in caplog.records if ": step " in r.getMessage()]
    # 24 pairs: 6 steps of 4 an epoch, a line after steps 1..5 (the epoch line follows 6)
    assert len(steps) == 2 * 5
    assert steps[0].startswith("neural epoch 1/2: step 1/6 (17%), loss ")
    assert steps[-1].startswith("neural epoch 2/2: step 5/6 (83%)")
    caplog.clear()
    run_loop(tiny_task(), dataclasses.replace(settings, progress_seconds=0.0))
    messages = [r.getMessage() for r in caplog.records]
    assert not any(": step " in m for m in messages)
    assert sum(m.startswith("neural epoch ") for m in messages) == 2
