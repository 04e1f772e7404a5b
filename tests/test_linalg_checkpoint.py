"""Checkpoint store and resumable Cr5 solves."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.linalg as sla

from pipeline.backends.local import LocalCorpusBackend
from pipeline.io.checkpoints import CheckpointDirectory
from pipeline.linalg.checkpoint import CheckpointMismatchError
from pipeline.linalg.cr5 import solve_cr5
from tests.problems import PROBLEMS

PARAMS = {
    "lam": 0.3,
    "r": 4,
    "oversampling": 2,
    "max_basis": 30,
    "eig_rtol": 1e-8,
    "cg_rtol": 1e-10,
    "w_rtol": 1e-12,
    "cg_maxiter": 3000,
    "seed": 3,
}


class Interrupt(RuntimeError):
    pass


def _backend(name="steep_zipf"):
    problem = PROBLEMS[name]
    return LocalCorpusBackend(problem.corpus(), problem.n_concepts, dtype="float64")


def _stack(res):
    return np.vstack(list(res.components.values())).astype(np.float64)


def test_store_round_trip_and_atomic_layout(tmp_path):
    store = CheckpointDirectory(tmp_path / "ck", {"a": 1, "lam": 0.5})
    assert store.load("state") is None
    store.save("state", {"x": np.arange(6.0).reshape(2, 3)}, {"it": 1, "rng": {"s": 2**100}})
    store.save("state", {"x": np.ones((2, 2))}, {"it": 2, "rng": {"s": 2**100}})
    arrays, meta = store.load("state")
    np.testing.assert_array_equal(arrays["x"], np.ones((2, 2)))
    assert meta == {"it": 2, "rng": {"s": 2**100}}
    dirs = sorted(p.name for p in (tmp_path / "ck").iterdir() if p.is_dir())
    assert dirs == ["state-000001"]  # old state removed, no temp dirs left
    # reopening with the same fingerprint works; another problem is refused
    CheckpointDirectory(tmp_path / "ck", {"lam": 0.5, "a": 1})
    with pytest.raises(CheckpointMismatchError, match=r"lam: 0\.5 -> 0\.7"):
        CheckpointDirectory(tmp_path / "ck", {"a": 1, "lam": 0.7})
    with pytest.raises(ValueError, match=r"[Oo]bject arrays"):
        store.save("bad", {"o": np.array([{}], dtype=object)}, {})
    assert store.load("bad") is None


def test_store_made_without_a_problem_is_bound_by_the_solver(tmp_path):
    """The caller makes the store; it touches nothing until bound to a problem (which the
    solver does with its fingerprint), and then refuses another problem."""
    ck = tmp_path / "ck"
    store = CheckpointDirectory(ck)
    assert not ck.exists()
    with pytest.raises(RuntimeError, match="not bound"):
        store.load("lanczos")
    solve_cr5(_backend(), checkpoint=store, **PARAMS)
    assert store.load("lanczos") is not None and (ck / "manifest.json").exists()
    with pytest.raises(CheckpointMismatchError, match="differs in .*seed"):
        CheckpointDirectory(ck).bind({**store.fingerprint, "seed": 4})


def test_interrupted_solve_resumes_to_same_phi(tmp_path):
    ref = solve_cr5(_backend(), **PARAMS)
    n_ref = ref.history["eigensolver"]["n_iter"]
    assert n_ref >= 4 and ref.history["eigensolver"]["n_restarts"] > 0

    def stop_at(k):
        def cb(stage, it, info):
            if stage == "eigensolver" and it == k:
                raise Interrupt(f"stopped at {k}")

        return cb

    ck = tmp_path / "ck"
    with pytest.raises(Interrupt):
        solve_cr5(
            _backend(), checkpoint=CheckpointDirectory(ck), checkpoint_every=1,
            checkpoint_seconds=0, callback=stop_at(3), **PARAMS,
        )  # fmt: skip
    assert json.loads((ck / "lanczos.json").read_text())["meta"]["n_iter"] == 3
    be = _backend()
    resumed = solve_cr5(be, checkpoint=CheckpointDirectory(ck), **PARAMS)
    h = resumed.history
    assert h["eigensolver"]["resumed_from_iteration"] == 3
    assert h["eigensolver"]["n_iter"] == n_ref
    assert h["solves"][0]["stage"].startswith("cr5/eig4")  # w came from the checkpoint
    np.testing.assert_allclose(resumed.eigenvalues, ref.eigenvalues, rtol=1e-10)
    assert np.rad2deg(sla.subspace_angles(_stack(resumed), _stack(ref)).max()) < 1e-3
    np.testing.assert_allclose(
        np.array(h["eigensolver"]["ritz_values"]),
        np.array(ref.history["eigensolver"]["ritz_values"]),
        rtol=1e-10,
    )
    # a finished checkpoint is reused without eigensolver iterations over X
    again = solve_cr5(_backend(), checkpoint=CheckpointDirectory(ck), **PARAMS)
    assert all(not s["stage"].startswith("cr5/eig") for s in again.history["solves"])
    np.testing.assert_allclose(again.eigenvalues, ref.eigenvalues, rtol=1e-12)


def test_checkpoint_every_n(tmp_path):
    ck = tmp_path / "ck"
    saved = []

    def cb(stage, it, info):
        pointer = ck / "lanczos.json"
        if pointer.exists():
            saved.append(json.loads(pointer.read_text())["meta"]["n_iter"])
        if it == 5:
            raise Interrupt

    with pytest.raises(Interrupt):
        solve_cr5(
            _backend(), checkpoint=CheckpointDirectory(ck), checkpoint_every=2,
            checkpoint_seconds=0, callback=cb, **PARAMS,
        )  # fmt: skip
    assert saved[-1] == 4 and 2 in saved


@pytest.mark.parametrize(
    ("change", "key"),
    [({"lam": 0.31}, "lam"), ({"seed": 4}, "seed"), ({"r": 3}, "r")],
)
def test_mismatched_checkpoint_is_refused(tmp_path, change, key):
    ck = tmp_path / "ck"
    solve_cr5(_backend(), checkpoint=CheckpointDirectory(ck), **{**PARAMS, "eig_maxiter": 50})
    with pytest.raises(CheckpointMismatchError, match=f"differs in .*{key}"):
        solve_cr5(_backend(), checkpoint=CheckpointDirectory(ck), **{**PARAMS, **change})


def test_checkpoint_of_other_data_is_refused(tmp_path):
    ck = tmp_path / "ck"
    solve_cr5(_backend("steep_zipf"), checkpoint=CheckpointDirectory(ck), **PARAMS)
    with pytest.raises(CheckpointMismatchError, match="different problem"):
        solve_cr5(_backend("three_uneven"), checkpoint=CheckpointDirectory(ck), **PARAMS)


def test_checkpoint_seconds_spaces_the_checkpoints_but_keeps_the_last_state(tmp_path):
    """With train.checkpoint_seconds far above the solve's length no iteration is written
    until the eigensolver ends; its final state is written, and a rerun reuses it."""
    ck = tmp_path / "ck"
    seen = []

    def cb(stage, it, info):
        seen.append((ck / "lanczos.json").exists())

    res = solve_cr5(
        _backend(),
        checkpoint=CheckpointDirectory(ck),
        checkpoint_seconds=1e9,
        callback=cb,
        **PARAMS,
    )
    n_iter = res.history["eigensolver"]["n_iter"]
    assert len(seen) == n_iter >= 4 and not any(seen)
    assert json.loads((ck / "lanczos.json").read_text())["meta"]["n_iter"] == n_iter
    again = solve_cr5(_backend(), checkpoint=CheckpointDirectory(ck), **PARAMS)
    assert again.history["eigensolver"]["resumed_from_iteration"] == n_iter
    np.testing.assert_allclose(again.eigenvalues, res.eigenvalues, rtol=1e-12)


def test_checkpoint_gap_bounds_the_share_of_time_spent_writing():
    from pipeline.linalg.checkpoint import checkpoint_gap

    assert checkpoint_gap(60.0, 1.0, 0.05) == 60.0  # a fast write: the least gap rules
    assert checkpoint_gap(60.0, 8.6, 0.05) == pytest.approx(8.6 * 19)  # writing <= 5 %
    assert checkpoint_gap(60.0, 8.6, 1.0) == 60.0  # share 1: no bound
    assert checkpoint_gap(0.0, 8.6, 0.05) == 0.0  # 0: every checkpoint_every iterations


class SlowStore(CheckpointDirectory):
    """A checkpoint directory on slow storage: every save takes at least ``delay`` s."""

    def __init__(self, path, delay):
        super().__init__(path)
        self.delay, self.lanczos_saves = delay, 0

    def save(self, name, arrays, meta):
        import time

        time.sleep(self.delay)
        self.lanczos_saves += name == "lanczos"
        super().save(name, arrays, meta)


def test_slow_checkpoints_are_spaced_out_by_their_share_of_the_time(tmp_path):
    """A 0.2 s write with checkpoint_max_share 0.05 puts the next checkpoint >= 3.8 s later:
    a solve of fast iterations writes its first state and its last, where share 1 (no
    bound) writes after every iteration; the iterates and the resumable end state are the
    same."""
    kw = {**PARAMS, "checkpoint_seconds": 1e-9}
    bounded = SlowStore(tmp_path / "a", 0.2)
    res = solve_cr5(_backend(), checkpoint=bounded, checkpoint_max_share=0.05, **kw)
    every = SlowStore(tmp_path / "b", 0.2)
    ref = solve_cr5(_backend(), checkpoint=every, checkpoint_max_share=1.0, **kw)
    n_iter = ref.history["eigensolver"]["n_iter"]
    assert n_iter >= 4
    assert bounded.lanczos_saves == 2
    assert every.lanczos_saves >= n_iter
    np.testing.assert_allclose(_stack(res), _stack(ref), rtol=1e-12, atol=1e-14)
    again = solve_cr5(_backend(), checkpoint=CheckpointDirectory(tmp_path / "a"), **PARAMS)
    assert again.history["eigensolver"]["resumed_from_iteration"] == n_iter


def test_column_blocks_are_written_as_the_stacked_array(tmp_path, monkeypatch):
    """The tracked images are streamed into one .npy, row step by row step (steps of 7
    rows here, the last one short): it loads as np.hstack of the blocks."""
    from pipeline.linalg import checkpoint

    monkeypatch.setattr(checkpoint, "WRITE_STEP_ROWS", 7)
    rng = np.random.default_rng(0)
    blocks = [rng.standard_normal((30, w)).astype(np.float32) for w in (3, 5, 1)]
    store = CheckpointDirectory(tmp_path / "ck", {"problem": 1})
    store.save("state", {"images": checkpoint.ColumnBlocks(blocks), "h": np.eye(2)}, {"n": 1})
    arrays, meta = store.load("state")
    assert meta == {"n": 1} and arrays["images"].dtype == np.float32
    np.testing.assert_array_equal(arrays["images"], np.hstack(blocks))
    np.testing.assert_array_equal(np.asarray(checkpoint.ColumnBlocks(blocks)), np.hstack(blocks))
    with pytest.raises(ValueError, match="same rows"):
        checkpoint.ColumnBlocks([np.zeros((3, 2)), np.zeros((4, 2))])


def test_directory_lists_and_deletes_states_and_reads_the_layout_as_written(tmp_path):
    """The file-backed store lists and deletes states, and reads a directory laid out by hand
    as the format documents it (manifest, pointer, <name>-<seq>/<array>.npy): checkpoints
    written before the store moved out of linalg resume."""
    from pipeline.linalg.checkpoint import fingerprint_hash

    ck = tmp_path / "old"
    (ck / "lanczos-000003").mkdir(parents=True)
    problem = {"lam": 0.5, "n": 3}
    digest = fingerprint_hash(problem)
    (ck / "manifest.json").write_text(
        json.dumps({"version": 1, "hash": digest, "fingerprint": problem})
    )
    np.save(ck / "lanczos-000003" / "basis.npy", np.eye(3), allow_pickle=False)
    (ck / "lanczos.json").write_text(
        json.dumps(
            {
                "seq": 3,
                "dir": "lanczos-000003",
                "arrays": ["basis"],
                "meta": {"it": 7},
                "hash": digest,
            }
        )
    )
    store = CheckpointDirectory(ck, {"n": 3, "lam": 0.5})
    arrays, meta = store.load("lanczos")
    np.testing.assert_array_equal(arrays["basis"], np.eye(3))
    assert meta == {"it": 7} and store.names() == ["lanczos"]
    store.save("lanczos", {"basis": np.zeros(2)}, {"it": 8})
    assert sorted(p.name for p in ck.iterdir() if p.is_dir()) == ["lanczos-000004"]
    store.save("woodbury", {"w": np.ones(2)}, {})
    assert store.names() == ["lanczos", "woodbury"]
    store.delete("lanczos")
    assert store.names() == ["woodbury"] and store.load("lanczos") is None
    assert sorted(p.name for p in ck.iterdir() if p.is_dir()) == ["woodbury-000000"]
    store.delete("absent")


class MemoryStore:
    """A checkpoint store in memory: the solvers need nothing but the protocol."""

    def __init__(self) -> None:
        self.directory = "memory"
        self.states: dict[str, tuple[dict, dict]] = {}
        self.fingerprint = None

    def bind(self, fingerprint):
        if self.fingerprint not in (None, fingerprint):
            raise CheckpointMismatchError("another problem")
        self.fingerprint = fingerprint
        return self

    def save(self, name, arrays, meta):
        self.states[name] = (
            {k: np.array(v) for k, v in arrays.items()},
            json.loads(json.dumps(meta)),
        )

    def load(self, name):
        return self.states.get(name)

    def names(self):
        return sorted(self.states)

    def delete(self, name):
        self.states.pop(name, None)


def test_a_solve_resumes_from_any_store_of_the_protocol():
    from pipeline.linalg.checkpoint import CheckpointStore

    store = MemoryStore()
    assert isinstance(store, CheckpointStore)
    full = solve_cr5(
        _backend(), checkpoint=store, checkpoint_every=1, checkpoint_seconds=0, **PARAMS
    )
    assert store.names() == ["lanczos", "woodbury"]
    again = solve_cr5(_backend(), checkpoint=store, **PARAMS)
    assert all(not s["stage"].startswith("cr5/eig") for s in again.history["solves"])
    np.testing.assert_allclose(again.eigenvalues, full.eigenvalues, rtol=1e-12)
