"""The eigensolver's buffers in files (``spill_dir``): same results, pages out as used."""

from __future__ import annotations

import os

import numpy as np
import pytest

from pipeline.linalg.block_lanczos import LanczosState, block_lanczos
from pipeline.linalg.dense import tall_matmul, tall_t_matmul
from pipeline.linalg.operator import BlockOperator
from pipeline.linalg.spill import copy_rows, mapping_of, release, release_rows, spilled_empty

pytestmark = pytest.mark.skipif(
    not os.path.exists("/proc/self/smaps"), reason="reads a mapping's resident pages from smaps"
)


def resident_bytes(a: np.ndarray) -> int:
    """Resident bytes of the mapping behind ``a``, from /proc/self/smaps (Linux)."""
    mm = mapping_of(a)
    assert mm is not None
    start = np.frombuffer(mm, dtype=np.uint8).ctypes.data
    found = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                found = int(head.split("-")[0], 16) == start
            elif found and head == "Rss:":
                return int(line.split()[1]) * 1024
    raise AssertionError("mapping not in smaps")


class _LowRank(BlockOperator):
    """A = Qᵀ Pᵀ S P Q (n x n; P: n_img x k, Q: k x n, S diagonal positive), symmetric PSD
    like Cr5's M = Cᵀ Â⁻¹ C; ``matmat_with_image`` also returns the image F V = S P Q V
    (n_img rows, as Cr5's p x b images), all in products of the factors."""

    def __init__(self, n: int, n_img: int, k: int = 30, seed: int = 0) -> None:
        super().__init__((n, n), np.float64)
        rng = np.random.default_rng(seed)
        self.p = rng.standard_normal((n_img, k)) / np.sqrt(n_img)
        self.q = rng.standard_normal((k, n)) * (0.85 ** np.arange(k))[:, None] / np.sqrt(n)
        self.s = 1.0 + rng.random(n_img)

    def matmat_with_image(self, v):
        image = self.s[:, None] * (self.p @ (self.q @ v))
        return self.q.T @ (self.p.T @ image), image

    def _matmat(self, v):
        return self.matmat_with_image(v)[0]

    _rmatmat = _matmat


def _operator(n: int, seed: int = 0) -> _LowRank:
    return _LowRank(n, n_img=n + 10_000, seed=seed)


def test_a_spilled_array_keeps_its_data_when_its_pages_are_dropped(tmp_path):
    a = spilled_empty((50_000, 64), np.float32, directory=str(tmp_path))
    assert os.listdir(tmp_path) == []  # unlinked at once: nothing is left behind
    assert np.count_nonzero(a) == 0
    ref = np.random.default_rng(0).standard_normal(a.shape).astype(np.float32)
    copy_rows(a, ref)
    assert resident_bytes(a) < a.nbytes // 10  # copied row step by row step, paged out
    a[:] = ref
    assert resident_bytes(a) >= a.nbytes * 9 // 10
    release_rows(a[:, 10:40], slice(0, 25_000))  # a view: its rows' whole pages go
    assert resident_bytes(a) < a.nbytes * 6 // 10
    release(a)
    assert resident_bytes(a) < a.nbytes // 100
    np.testing.assert_array_equal(a, ref)  # read back from the page cache / file
    f = spilled_empty((50_000, 64), np.float32, directory=str(tmp_path), order="F")
    f[:] = ref
    release_rows(f[:, 5:60], slice(1_000, 49_000))  # column-major: each column's segment
    assert resident_bytes(f) < f.nbytes * 2 // 10
    np.testing.assert_array_equal(f, ref)
    in_memory = np.ones((10, 3))
    release_rows(in_memory, slice(0, 5))  # nothing to do for an in-memory array
    release(in_memory)
    assert mapping_of(in_memory) is None and in_memory.sum() == 30


def test_products_on_spilled_operands_page_them_out_and_match(tmp_path):
    rng = np.random.default_rng(1)
    ref = rng.standard_normal((60_000, 48)).astype(np.float32)
    a = spilled_empty(ref.shape, np.float32, directory=str(tmp_path))
    copy_rows(a, ref)
    w = rng.standard_normal((60_000, 5))
    np.testing.assert_array_equal(tall_t_matmul(a, w), tall_t_matmul(ref, w))
    assert resident_bytes(a) < a.nbytes // 10
    coef = rng.standard_normal((48, 20)).astype(np.float32)
    want = tall_matmul(ref, coef)
    tall_matmul(a, coef, out=a[:, :20])  # in place, as a thick restart does
    np.testing.assert_array_equal(a[:, :20], want)
    release(a)
    tall_matmul(a, np.eye(48, dtype=np.float32)[:, :3])
    assert resident_bytes(a) < a.nbytes // 10


@pytest.mark.parametrize("max_basis", [None, 40])
def test_a_spilled_eigensolver_gives_the_same_result_and_holds_chunks(tmp_path, max_basis):
    op = _operator(30_000)
    kw = {
        "block_size": 8, "rtol": 1e-8, "maxiter": 200, "seed": 0, "max_basis": max_basis,
        "track_images": True, "basis_dtype": np.float32,
    }  # fmt: skip
    seen = []

    def check(st: LanczosState) -> None:
        # between iterations the buffers are file-backed and mostly out of the process
        assert mapping_of(st.basis) is not None and mapping_of(st.images[0]) is not None
        for a in (st.basis, st.images[0]):
            seen.append(resident_bytes(a) / len(mapping_of(a)))
        assert os.listdir(tmp_path) == []

    want = block_lanczos(op, 6, **kw)
    got = block_lanczos(op, 6, spill_dir=str(tmp_path), checkpoint=check, **kw)
    assert want.converged and got.converged and got.n_iter == want.n_iter
    if max_basis is not None:
        assert got.n_restarts == want.n_restarts > 0
    np.testing.assert_array_equal(got.eigenvalues, want.eigenvalues)
    np.testing.assert_array_equal(got.eigenvectors, want.eigenvectors)
    np.testing.assert_array_equal(got.images, want.images)
    assert seen and max(seen) < 0.05  # the appended block and the products paged out


def test_a_spilled_state_checkpoints_and_resumes(tmp_path):
    op = _operator(20_000, seed=3)
    kw = {"block_size": 6, "rtol": 1e-8, "seed": 3, "track_images": True, "max_basis": 30}
    full = block_lanczos(op, 4, **kw)
    saved = []

    def keep(st: LanczosState) -> None:
        arrays = {k: v.copy() for k, v in st.arrays().items()}
        saved.append(LanczosState.from_parts(arrays, dict(st.meta())))

    with pytest.warns(Warning):
        block_lanczos(op, 4, maxiter=3, checkpoint=keep, spill_dir=str(tmp_path), **kw)
    assert isinstance(saved[-1].basis, np.ndarray) and mapping_of(saved[-1].basis) is None
    resumed = block_lanczos(op, 4, state=saved[-1], spill_dir=str(tmp_path), **kw)
    np.testing.assert_allclose(resumed.eigenvalues, full.eigenvalues, rtol=1e-10)


def test_an_unusable_spill_dir_is_named(tmp_path):
    missing = tmp_path / "no" / "such"
    with pytest.raises(OSError, match="train.spill_dir.*no/such"):
        spilled_empty((10, 2), np.float32, directory=str(missing))


def test_a_spilled_cr5_fit_equals_the_in_memory_one_and_checkpoints(tmp_path):
    from pipeline.backends.local import LocalCorpusBackend
    from pipeline.io.checkpoints import CheckpointDirectory
    from pipeline.linalg.cr5 import solve_cr5
    from tests.problems import PROBLEMS

    problem = PROBLEMS["steep_zipf"]
    params = {"lam": 0.3, "r": 4, "oversampling": 2, "max_basis": 30, "eig_rtol": 1e-3}

    def backend():
        return LocalCorpusBackend(problem.corpus(), problem.n_concepts, dtype="float32")

    spill = tmp_path / "spill"
    spill.mkdir()
    want = solve_cr5(backend(), **params)
    ck = CheckpointDirectory(tmp_path / "ck")
    got = solve_cr5(backend(), spill_dir=str(spill), checkpoint=ck, **params)
    assert got.history["eigensolver"]["n_restarts"] > 0
    assert got.history["eigensolver"]["n_iter"] == want.history["eigensolver"]["n_iter"]
    np.testing.assert_array_equal(got.eigenvalues, want.eigenvalues)
    for lang, phi in want.components.items():
        np.testing.assert_array_equal(got.components[lang], phi)
    assert list(spill.iterdir()) == []
    # its final checkpoint (the basis streamed from the file) is reused as any other
    again = solve_cr5(backend(), checkpoint=CheckpointDirectory(tmp_path / "ck"), **params)
    assert all(not s["stage"].startswith("cr5/eig") for s in again.history["solves"])
    np.testing.assert_array_equal(again.eigenvalues, want.eigenvalues)


def test_the_solver_refuses_a_spill_dir_that_is_not_a_writable_directory(tmp_path):
    from pipeline.backends.local import LocalCorpusBackend
    from pipeline.linalg.cr5 import Cr5Solver
    from pipeline.linalg.errors import SolverArgumentError
    from tests.problems import PROBLEMS

    problem = PROBLEMS["steep_zipf"]
    backend = LocalCorpusBackend(problem.corpus(), problem.n_concepts)
    with pytest.raises(SolverArgumentError, match="spill_dir.*no-such-dir") as err:
        Cr5Solver(r=4, spill_dir=str(tmp_path / "no-such-dir")).fit(backend)
    assert err.value.argument == "spill_dir"


def test_a_spilled_wide_start_matches_the_in_memory_one(tmp_path):
    """A λ path's wide start (residual directions waiting in the basis, rotated and cut at
    each restart) runs the same on file-backed buffers."""
    from pipeline.linalg.block_lanczos import initial_state

    op = _operator(25_000, seed=4)
    start = np.linalg.qr(np.random.default_rng(4).standard_normal((25_000, 18)))[0]
    kw = {"block_size": 6, "rtol": 1e-6, "seed": 0, "max_basis": 48, "track_images": True}
    runs = [
        block_lanczos(op, 8, state=initial_state(25_000, 18, seed=0, start=start), **kw, **extra)
        for extra in ({}, {"spill_dir": str(tmp_path)})
    ]
    assert runs[0].n_restarts > 0 and runs[0].n_iter == runs[1].n_iter
    np.testing.assert_array_equal(runs[1].eigenvalues, runs[0].eigenvalues)
    np.testing.assert_array_equal(runs[1].images, runs[0].images)
