"""Cr5's Φ* word vectors: Λ and Q of Φ*Φ*ᵀ = QΛQᵀ kept by the solver, saved in the model,
and Φ_l*ᵀ = Φ_lᵀ Λ^{1/2} Qᵀ checked against an independent dense Φ*ᵀ = Â⁻¹ C P (no Spark)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from pipeline.backends.local import LocalCorpusBackend
from pipeline.errors import ModelError
from pipeline.linalg.cr5 import Cr5Solver
from pipeline.model import Cr5Model, LanguageMap, load_model_files, save_model
from pipeline.model.format import GRAM_EIGENVALUES, GRAM_EIGENVECTORS, load_shared_arrays
from tests.problems import PROBLEMS
from tests.test_linalg_cr5 import TIGHT, dense_cr5

PROBLEM = PROBLEMS["three_uneven"]
LAM, R = 0.3, 5


def _maps(components: dict[str, np.ndarray]) -> dict[str, LanguageMap]:
    return {
        lang: LanguageMap(
            terms=pa.array([f"{lang}{i}" for i in range(phi.shape[0])]),
            idf=np.ones(phi.shape[0], np.float32),
            df=np.ones(phi.shape[0], np.int64),
            phi=phi,
        )
        for lang, phi in components.items()
    }


@pytest.fixture(scope="module")
def fitted() -> Cr5Solver:
    corpus = PROBLEM.corpus()
    backend = LocalCorpusBackend(corpus, PROBLEM.n_concepts, dtype="float64")
    return Cr5Solver(lam=LAM, r=R, oversampling=4, seed=0, **TIGHT).fit(backend)


def _save_as_train_does(path, solver: Cr5Solver, **meta) -> None:
    shared = {
        GRAM_EIGENVALUES: solver.gram_eigenvalues_,
        GRAM_EIGENVECTORS: solver.gram_eigenvectors_,
    }
    save_model(path, _maps(solver.components_), {"r": R, "method": "cr5", **meta}, shared=shared)


def test_saved_model_rebuilds_the_dense_phi_star(tmp_path, fitted):
    _save_as_train_does(tmp_path / "m", fitted)
    model = Cr5Model.load(tmp_path / "m")
    assert model.meta["shared_arrays"] == [GRAM_EIGENVALUES, GRAM_EIGENVECTORS]
    shared = load_shared_arrays(tmp_path / "m")
    np.testing.assert_array_equal(shared[GRAM_EIGENVALUES], fitted.gram_eigenvalues_)
    np.testing.assert_array_equal(shared[GRAM_EIGENVECTORS], fitted.gram_eigenvectors_)
    assert shared[GRAM_EIGENVECTORS].dtype == np.float64

    _, want = dense_cr5(PROBLEM.corpus(), PROBLEM.n_concepts, LAM, R)  # (p, r), all languages
    langs = list(PROBLEM.sizes)
    got = {lang: model.word_vectors(lang, "phi_star") for lang in langs}
    stacked = np.vstack([got[lang][1] for lang in langs]).astype(np.float64)
    assert all(got[lang][1].dtype == np.float32 for lang in langs)
    assert got["en"][0] == [f"en{i}" for i in range(PROBLEM.sizes["en"][1])]
    # one sign per column of P, shared by every language
    signs = np.sign(np.sum(stacked * want, axis=0))
    np.testing.assert_allclose(stacked * signs, want, atol=1e-5 * np.abs(want).max())
    # the Φ variant is unchanged and the two differ by more than a scaling
    _, phi = model.word_vectors("de")
    np.testing.assert_array_equal(phi, fitted.components_["de"])
    scaled = phi * np.sqrt(fitted.gram_eigenvalues_)
    assert not np.allclose(scaled, got["de"][1], atol=1e-3)


def test_model_without_gram_arrays_loads_and_refuses_phi_star(tmp_path, fitted):
    # a model written before Λ and Q were kept: no shared/ directory, no shared_arrays key
    save_model(tmp_path / "old", _maps(fitted.components_), {"r": R, "method": "cr5"})
    meta = json.loads((tmp_path / "old" / "model.json").read_text())
    assert "shared_arrays" not in meta and not (tmp_path / "old" / "shared").exists()
    model = Cr5Model.load(tmp_path / "old")
    np.testing.assert_array_equal(model.word_vectors("en")[1], fitted.components_["en"])
    assert load_shared_arrays(tmp_path / "old") == {}
    with pytest.raises(ModelError, match=r"saved without Λ and Q.*retrain"):
        model.word_vectors("en", "phi_star")
    with pytest.raises(ModelError, match="'phi' or 'phi_star'"):
        model.word_vectors("en", "phistar")


def test_phi_star_is_refused_for_other_methods(tmp_path, fitted):
    _save_as_train_does(tmp_path / "cca", fitted, method="cca")
    with pytest.raises(ModelError, match="only for Cr5 models.*'cca'"):
        Cr5Model.load(tmp_path / "cca").word_vectors("en", "phi_star")


def test_gram_arrays_are_checked_on_save_and_load(tmp_path, fitted):
    maps = _maps(fitted.components_)
    lam, q = fitted.gram_eigenvalues_, fitted.gram_eigenvectors_
    with pytest.raises(ModelError, match="go together"):
        save_model(tmp_path / "a", maps, {"r": R}, shared={GRAM_EIGENVALUES: lam})
    with pytest.raises(ModelError, match=r"expected \(5,\) and \(5, 5\)"):
        save_model(
            tmp_path / "b",
            maps,
            {"r": R},
            shared={GRAM_EIGENVALUES: lam[:4], GRAM_EIGENVECTORS: q},
        )
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    _save_as_train_does(tmp_path / "m", fitted)
    f = tmp_path / "m" / "shared" / f"{GRAM_EIGENVECTORS}.npy"
    data = bytearray(f.read_bytes())
    data[-1] ^= 0xFF
    f.write_bytes(bytes(data))
    with pytest.raises(ModelError, match=f"{GRAM_EIGENVECTORS}.npy fails its SHA-256"):
        load_model_files(tmp_path / "m")
    f.write_bytes(bytes(data[:-8]))
    with pytest.raises(ModelError, match="truncated"):
        Cr5Model.load(tmp_path / "m", lazy=True, verify=False).word_vectors("en", "phi_star")
