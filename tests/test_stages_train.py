"""Stage train: model written and usable, setups, and resume after a real kill."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import scipy.linalg

from pipeline.backends.loader import local_backend_from_tfidf
from pipeline.config import load_config
from pipeline.errors import ConfigError
from pipeline.io.datasets import read_dataset
from pipeline.io.schemas import TFIDF
from pipeline.linalg.cr5 import CrossCovariance, concept_frequencies
from pipeline.linalg.woodbury import global_mean
from pipeline.model import Cr5Model
from pipeline.stages import get_stage
from pipeline.training import checkpoint_dir
from tests.conftest import REPO, SAMPLE

PROFILES = [REPO / "conf" / "local.yaml", REPO / "conf" / "short-docs.yaml"]

# Every test uses the module's sample_features fixture (three stages on the bundled sample).
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sample_features(spark, tmp_path_factory):
    """ingest -> vocabulary -> tfidf on the bundled DDTP sample, once per module."""
    root = tmp_path_factory.mktemp("sample") / "out"
    cfg = load_config(
        PROFILES, [f"paths.root={root}", f"ingest.input={SAMPLE}", "spark.shuffle_partitions=2"]
    )
    for stage in ("ingest", "vocabulary", "tfidf"):
        get_stage(stage)(spark, cfg)
    return root


def cfg_for(root, *overrides):
    return load_config(PROFILES, [f"paths.root={root}", "spark.shuffle_partitions=2", *overrides])


def _checkpoint_dir(cfg, planned=None):
    """The training service's checkpoint directory for ``cfg``'s sections."""
    return checkpoint_dir(cfg.train, cfg.paths, cfg.text, cfg.features, planned)


def phi_star_probe(model: Cr5Model, langs: list[str]) -> np.ndarray:
    """Φ*ᵀΦ* Z for a fixed random Z (p x 4): unchanged by the sign (or any rotation within a
    degenerate eigenspace) of P's columns, so two fits of one problem can be compared."""
    phi_star_t = np.vstack([model.word_vectors(lang, "phi_star")[1] for lang in langs])
    z = np.random.default_rng(0).standard_normal((phi_star_t.shape[0], 4))
    return phi_star_t.astype(np.float64) @ (phi_star_t.T.astype(np.float64) @ z)


def test_local_loader_reads_parquet_directly_and_equals_the_spark_read(
    spark, sample_features, monkeypatch
):
    """The local backend reads a local tfidf dataset with pyarrow (no Spark job, no
    spark.driver.maxResultSize); other stores go through Spark's toArrow(): same matrices.
    The Spark route's maxResultSize failure becomes a ConfigError that says what to set."""
    from pipeline.errors import ConfigError
    from pipeline.io.hadoop import HadoopFS

    path = cfg_for(sample_features).paths.dataset("tfidf")
    direct = local_backend_from_tfidf(spark, path, dtype="float64")
    monkeypatch.setattr(HadoopFS, "is_local", lambda self: False)
    via_spark = local_backend_from_tfidf(spark, path, dtype="float64")
    assert direct.languages == via_spark.languages == ("de", "en", "es", "fr")
    for lang in direct.languages:
        a, b = direct.matrix(lang), via_spark.matrix(lang)
        assert a.shape == b.shape and (a != b).nnz == 0
        np.testing.assert_array_equal(direct.concept_counts(lang), via_spark.concept_counts(lang))

    def too_big(self):
        raise RuntimeError(
            "Job aborted due to stage failure: Total size of serialized results of 9 tasks "
            "(1092.9 MiB) is bigger than spark.driver.maxResultSize (1024.0 MiB)"
        )

    monkeypatch.setattr(type(spark.range(1)), "toArrow", too_big)  # the classic DataFrame
    with pytest.raises(ConfigError, match=r"maxResultSize \(1024.0 MiB\)\). Fix: raise it"):
        local_backend_from_tfidf(spark, path, dtype="float64")


def test_train_writes_a_model_consistent_with_the_training_matrix(spark, sample_features):
    cfg = cfg_for(sample_features, "train.r=16", "train.lam=1.0")
    report = get_stage("train")(spark, cfg)
    model = Cr5Model.load(report["path"])
    assert model.languages == ["de", "en", "es", "fr"] and model.dim == 16
    meta = model.meta
    assert meta["solver"]["history"]["eigensolver"]["converged"]
    assert meta["training"]["documents"]["es"] == 1995
    assert not Path(_checkpoint_dir(cfg)).exists()  # cleaned up after success

    # The public embedding path reproduces X_l Φ_lᵀ for training documents.
    backend = local_backend_from_tfidf(spark, cfg.paths.dataset("tfidf"), dtype="float64")
    rows = read_dataset(spark, TFIDF, cfg.paths.dataset("tfidf")).filter("lang = 'es'")
    rows = rows.orderBy("row").limit(50).select("doc_id").toArrow().column(0).to_pylist()
    docs = {
        r["doc_id"]: r["text"]
        for r in spark.read.parquet(cfg.paths.dataset("documents")).filter("lang = 'es'").collect()
    }
    vecs = model.embed([docs[d] for d in rows], "es")
    x = backend.matrix("es")[:50]
    np.testing.assert_allclose(vecs, x @ model.word_vectors("es")[1], rtol=1e-4, atol=1e-5)

    # Λ and Q of Φ*Φ*ᵀ = QΛQᵀ are saved: Φ*ᵀ = Φᵀ Λ^{1/2} Qᵀ = Â⁻¹ C P, so Cᵀ Φ*ᵀ = M P = P Θ
    # has orthogonal columns of norms Θ (the eigenvalues of M); Φᵀ's image does not.
    assert meta["shared_arrays"] == ["gram_eigenvalues", "gram_eigenvectors"]
    cmat = CrossCovariance(backend, global_mean(backend), concept_frequencies(backend))
    for variant, diagonal in (("phi_star", True), ("phi", False)):
        stacked = np.vstack([model.word_vectors(lang, variant)[1] for lang in backend.languages])
        image = cmat.H.matmat(stacked.astype(np.float64))
        g = image.T @ image
        off = np.abs(g - np.diag(np.diag(g))).max() / np.diag(g).max()
        norms_match = np.allclose(np.sqrt(np.diag(g)), meta["eigenvalues"], rtol=0.01)
        assert (off < 0.005 and norms_match) == diagonal, (variant, off)

    # Crosslingual sanity on the training data: an es document's nearest fr document
    # (cosine) is its own concept's far more often than chance (1 / 1926).
    tf = read_dataset(spark, TFIDF, cfg.paths.dataset("tfidf"))
    pairs = {}
    for lang in ("es", "fr"):
        t = tf.filter(f"lang = '{lang}'").orderBy("row").select("concept_index").toArrow()
        pairs[lang] = t.column(0).to_numpy()
    ves = backend.matrix("es") @ model.word_vectors("es")[1]
    vfr = backend.matrix("fr") @ model.word_vectors("fr")[1]
    ves /= np.linalg.norm(ves, axis=1, keepdims=True) + 1e-12
    vfr /= np.linalg.norm(vfr, axis=1, keepdims=True) + 1e-12
    best = np.argmax(ves @ vfr.T, axis=1)
    shared = np.isin(pairs["es"], pairs["fr"])
    p_at_1 = float(np.mean(pairs["fr"][best[shared]] == pairs["es"][shared]))
    assert p_at_1 > 0.3, p_at_1


def test_transitive_and_pairwise_row_selection(spark, sample_features):
    cfg = cfg_for(
        sample_features,
        "train.setup=transitive",
        "train.pair=[de, fr]",
        "train.r=8",
        f"train.checkpoint_dir={sample_features}/ck-transitive",
    )
    from pipeline.training import select_training_rows

    path, report = select_training_rows(spark, cfg.train, cfg.paths, cfg.paths.dataset("tfidf"))
    rows = read_dataset(spark, TFIDF, path).toArrow().to_pylist()
    by_lang: dict[str, set] = {}
    for r in rows:
        by_lang.setdefault(r["lang"], set()).add(r["concept_id"])
    assert not by_lang["de"] & by_lang["fr"]  # the pair shares no training concept
    assert by_lang["de"] & by_lang["en"] and by_lang["fr"] & by_lang["en"]
    full = read_dataset(spark, TFIDF, cfg.paths.dataset("tfidf")).toArrow().to_pylist()
    full_by: dict[str, set] = {}
    for r in full:
        full_by.setdefault(r["lang"], set()).add(r["concept_id"])
    shared = full_by["de"] & full_by["fr"]
    assert report["shared_concepts_split"] == len(shared)
    assert len(by_lang["de"]) + len(by_lang["fr"]) == len(full_by["de"]) + len(full_by["fr"]) - len(
        shared
    )
    for lang in ("en", "es"):
        assert by_lang[lang] == full_by[lang]
    for lang, n in {lang: len(s) for lang, s in by_lang.items()}.items():
        assert sorted(r["row"] for r in rows if r["lang"] == lang) == list(range(n))

    pw = cfg_for(sample_features, "train.setup=pairwise", "train.pair=[en, es]")
    path, _ = select_training_rows(spark, pw.train, pw.paths, pw.paths.dataset("tfidf"))
    langs = {r["lang"] for r in read_dataset(spark, TFIDF, path).select("lang").collect()}
    assert langs == {"en", "es"}


def test_training_killed_midway_resumes_to_the_same_answer(spark, sample_features, tmp_path):
    common = [
        "train.r=12",
        "train.eig_rtol=1e-9",
        "train.eig_maxiter=40",
        "train.cg_rtol=1e-4",
        "train.checkpoint_every=1",
        "train.checkpoint_seconds=0",
        "train.languages=[en, es]",
    ]
    # Uninterrupted reference.
    ref_cfg = cfg_for(
        sample_features,
        *common,
        f"paths.model={tmp_path}/ref",
        f"train.checkpoint_dir={tmp_path}/ck-ref",
    )
    get_stage("train")(spark, ref_cfg)
    ref = Cr5Model.load(tmp_path / "ref")

    ck = tmp_path / "ck"
    args = [*common, f"paths.model={tmp_path}/resumed", f"train.checkpoint_dir={ck}"]
    cmd = [sys.executable, str(REPO / "jobs" / "train.py")]
    for p in PROFILES:
        cmd += ["--conf", str(p)]
    for a in [f"paths.root={sample_features}", "spark.shuffle_partitions=2", *args]:
        cmd += ["--set", a]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    cfg = cfg_for(sample_features, *args)
    pointer = Path(_checkpoint_dir(cfg)) / "lanczos.json"
    deadline = time.time() + 300
    try:
        while time.time() < deadline and proc.poll() is None:
            if (
                pointer.exists()
                and json.loads(pointer.read_text()).get("meta", {}).get("n_iter", 0) >= 2
            ):
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"training never checkpointed 2 iterations (exit {proc.poll()})")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert not (tmp_path / "resumed").exists()

    # the rerun may change when the eigensolver stops and how often it saves (a larger cap,
    # here): the same problem, the same checkpoint directory, resumed
    cfg = cfg_for(sample_features, *args, "train.eig_maxiter=60", "train.checkpoint_every=2")
    assert _checkpoint_dir(cfg) == str(pointer.parent)
    report = get_stage("train")(spark, cfg)
    resumed = Cr5Model.load(report["path"])
    history = resumed.meta["solver"]["history"]["eigensolver"]
    assert history["resumed_from_iteration"] >= 2
    np.testing.assert_allclose(resumed.meta["eigenvalues"], ref.meta["eigenvalues"], rtol=1e-4)
    a = np.vstack([ref.word_vectors(lang)[1] for lang in ref.languages])
    b = np.vstack([resumed.word_vectors(lang)[1] for lang in ref.languages])
    angles = np.degrees(scipy.linalg.subspace_angles(a.astype(np.float64), b.astype(np.float64)))
    assert angles.max() < 0.1, angles.max()
    # the resumed fit keeps Λ and Q too: the same Φ*
    ra, rb = phi_star_probe(ref, ref.languages), phi_star_probe(resumed, ref.languages)
    assert np.linalg.norm(ra - rb) < 1e-3 * np.linalg.norm(ra)


def test_spark_backend_trains_the_same_model_as_local(spark, sample_features, tmp_path):
    common = [
        "train.r=6",
        "train.languages=[en, es]",
        "train.dtype=float64",
        "train.checkpoint_dir=",
    ]
    models = {}
    for kind in ("local", "spark"):
        cfg = cfg_for(
            sample_features,
            *common,
            f"train.backend={kind}",
            f"paths.model={tmp_path}/{kind}",
            "train.partitions_per_language=3",  # ignored by the local backend
        )
        get_stage("train")(spark, cfg)
        models[kind] = Cr5Model.load(tmp_path / kind)
    # Same algorithm, same data, same seed: only the summation order of the passes
    # differs, so the eigenvalues agree far inside the solver tolerance (0.1).
    np.testing.assert_allclose(
        models["spark"].meta["eigenvalues"], models["local"].meta["eigenvalues"], rtol=1e-6
    )
    a, b = (
        np.vstack([m.word_vectors(lang)[1] for lang in ("en", "es")]).astype(np.float64)
        for m in (models["local"], models["spark"])
    )
    assert np.degrees(scipy.linalg.subspace_angles(a, b)).max() < 0.1
    pa_, pb_ = (phi_star_probe(models[kind], ["en", "es"]) for kind in ("local", "spark"))
    assert np.linalg.norm(pa_ - pb_) < 1e-4 * np.linalg.norm(pa_)
    for m in models.values():
        assert m.meta["solver"]["history"]["eigensolver"]["converged"]
        assert m.meta["training"]["backend"] in ("local", "spark")
    assert models["spark"].meta["training"]["backend"] == "spark"
    # where the Spark backend's work ran is recorded (the plan's choices are nowhere else);
    # the local backend has no placement
    placement = models["spark"].meta["training"]["placement"]
    assert placement["fused"] == [g for g in ("en", "es") if g in placement["fused"]]
    assert set(placement["resident"]) <= set(placement["fused"])
    assert placement["solve_in_task_max_nnz"] > 0
    assert "placement" not in models["local"].meta["training"]


@pytest.mark.parametrize("method", ["cl_lsi", "opca"])
def test_baseline_method_is_trained_by_the_stage_into_the_model_format(
    spark, sample_features, tmp_path, method
):
    """train.method=<baseline>: the stage saves exactly what the fit function computes."""
    from pipeline.baselines import fit_cl_lsi, fit_opca

    FIT_FUNCTIONS = {"cl_lsi": fit_cl_lsi, "opca": fit_opca}  # the baselines' own functions

    cfg = cfg_for(
        sample_features,
        f"train.method={method}",
        "train.r=8",
        "train.languages=[en, de]",
        "train.dtype=float64",
        f"paths.model={tmp_path}/model",
    )
    report = get_stage("train")(spark, cfg)
    assert report["method"] == method
    model = Cr5Model.load(tmp_path / "model")
    assert model.meta["method"] == method and model.dim == 8
    assert model.languages == ["de", "en"]

    # The same fit, called directly on the same training matrix, gives the same maps.
    backend = local_backend_from_tfidf(
        spark, cfg.paths.dataset("tfidf"), languages=["de", "en"], dtype="float64"
    )
    extra = {"gamma": cfg.train.params_of("opca").gamma} if method == "opca" else {}
    direct = FIT_FUNCTIONS[method](backend, r=8, seed=cfg.train.seed, **extra)
    a = np.vstack([model.word_vectors(lang)[1] for lang in model.languages]).astype(np.float64)
    b = np.vstack([direct.components[lang] for lang in model.languages])
    assert np.degrees(scipy.linalg.subspace_angles(a, b)).max() < 0.5
    np.testing.assert_allclose(model.meta["eigenvalues"], direct.eigenvalues, rtol=1e-3)

    # And the model embeds through the public path.
    vec = model.embed(["the package provides a library"], "en")
    assert vec.shape == (1, 8) and np.isfinite(vec).all()


def test_path_factors_fit_the_path_to_lam_and_record_it(spark, sample_features, tmp_path):
    """train.path_factors=[10, 3]: fits at 10λ, then 3λ, then λ, each started from the
    previous one; the model is the last fit, the very model of the same path run through
    solve_cr5, and model.json records the path."""
    from pipeline.linalg.cr5 import solve_cr5

    common = ["train.r=6", "train.dtype=float64", "train.lam=0.5", "train.checkpoint_dir="]
    cfg = cfg_for(
        sample_features, *common, "train.path_factors=[3, 10]", f"paths.model={tmp_path}/m"
    )
    report = get_stage("train")(spark, cfg)
    meta = Cr5Model.load(report["path"]).meta
    training = meta["training"]
    assert [f["lam"] for f in training["path_fits"]] == [5.0, 1.5]
    assert training["path_from_lam"] == 1.5 and training["eigensolver_start"] == "previous_fit"
    assert meta["lam"] == 0.5 and meta["solver"]["history"]["eigensolver"]["converged"]

    backend = local_backend_from_tfidf(spark, cfg.paths.dataset("tfidf"), dtype="float64")
    start = None
    for lam in (5.0, 1.5, 0.5):
        res = solve_cr5(backend, lam=lam, r=6, seed=0, start=start, keep_start=True)
        start = res.path_start
    model = Cr5Model.load(report["path"])
    for lang in backend.languages:
        np.testing.assert_allclose(
            np.abs(model.word_vectors(lang)[1]), np.abs(res.components[lang]), atol=1e-6
        )
    with pytest.raises(ConfigError, match="path_factors"):
        cfg_for(sample_features, "train.path_factors=[0.5]")


def test_a_neural_progress_interval_does_not_move_the_checkpoints(tmp_path):
    """How often a neural loop logs is not part of the training problem: a rerun with
    another interval resumes the same checkpoints; a setting of the steps does not."""
    base = cfg_for(tmp_path, "train.method=tlaser")
    quiet = cfg_for(tmp_path, "train.method=tlaser", "train.tlaser.progress_seconds=0")
    other = cfg_for(tmp_path, "train.method=tlaser", "train.tlaser.lr=0.01")
    assert _checkpoint_dir(quiet) == _checkpoint_dir(base)
    assert _checkpoint_dir(other) != _checkpoint_dir(base)
