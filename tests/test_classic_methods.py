"""JPLSA, CPLSA and S2Net through the pipeline: the grouped corpus on both engines (term
counts taken from the documents), the Spark engine's EM and gradient steps against the local
engine's, a training job killed mid-EM that resumes to the same model, the evaluation with the
topic models' L1 similarity beside cosine and CSLS, and bad settings refused before Spark."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.baselines import fit_cplsa, fit_jplsa, fit_s2net
from pipeline.config import load_config
from pipeline.io.datasets import read_dataset
from pipeline.io.schemas import EMBEDDINGS
from pipeline.linalg.monitor import distractor_rows
from pipeline.model import Cr5Model
from pipeline.stages import get_stage
from pipeline.training import checkpoint_dir, load_training_data
from pipeline.training.rows import RowSource
from tests.conftest import REPO

LANGS = ("en", "de", "fr")


def synthetic_corpus(path: Path, n_concepts: int = 240, seed: int = 0) -> None:
    """An aligned corpus of made-up words: 6 topics with their own words in each language,
    each concept a mixture of two topics, documents of 25-45 tokens; en and de for every
    concept, fr for two thirds."""
    rng = np.random.default_rng(seed)
    rows = []
    for k in range(n_concepts):
        topics = rng.choice(6, size=2, replace=False)
        weights = rng.dirichlet([1.0, 1.0])
        for lang in LANGS:
            if lang == "fr" and k % 3 == 2:
                continue
            n = int(rng.integers(25, 46))
            z = rng.choice(topics, size=n, p=weights)
            w = rng.zipf(1.6, size=n) % 30
            words = [f"{lang}{t}w{i}" for t, i in zip(z, w, strict=True)]
            words += [f"{lang}common{int(i)}" for i in rng.integers(0, 5, size=5)]
            rows.append((f"Q{k:05d}", lang, " ".join(words)))
    table = pa.table(
        {
            "concept_id": [r[0] for r in rows],
            "lang": [r[1] for r in rows],
            "text": [r[2] for r in rows],
        }
    )
    pq.write_table(table, path)


SETTINGS = [
    "features.min_unique_words=5",
    "features.min_df=2",
    "features.heldout_concepts=splits",
    "split.n_test=20",
    "split.n_validation=20",
    "spark.shuffle_partitions=2",
    "train.r=6",
    "train.jplsa.pair_partitions=3",
    "train.cplsa.pair_partitions=3",
    "train.s2net.pair_partitions=3",
    "train.validation_concepts=20",
]


def cfg_for(root: Path, *overrides: str):
    return load_config(
        [REPO / "conf" / "local.yaml"], [f"paths.root={root}", *SETTINGS, *overrides]
    )


def _checkpoint_dir(cfg, planned=None):
    """The training service's checkpoint directory for ``cfg``'s sections."""
    return checkpoint_dir(cfg.train, cfg.paths, cfg.text, cfg.features, planned)


@pytest.fixture(scope="module")
def corpus_root(spark, tmp_path_factory):
    """ingest -> split -> vocabulary -> tfidf on the synthetic corpus, once per module."""
    base = tmp_path_factory.mktemp("classic")
    synthetic_corpus(base / "corpus.parquet")
    root = base / "out"
    cfg = cfg_for(root, f"ingest.input={base / 'corpus.parquet'}")
    for stage in ("ingest", "split", "vocabulary", "tfidf"):
        get_stage(stage)(spark, cfg)
    return root


@pytest.mark.slow
def test_spark_and_local_engines_fit_the_same_models(spark, corpus_root):
    """The same blocks on both engines: the counts match the documents, and the EM
    trajectories, S2Net's steps and the fitted maps agree to rounding (driver-side sums in
    block order; more blocks than DRIVER_MAX_BLOCKS also go through the term-range sums)."""
    cfg = {kind: cfg_for(corpus_root, f"train.backend={kind}") for kind in ("local", "spark")}
    data = load_training_data(spark, cfg["local"])
    langs = list(data.backend.languages)
    try:
        counts = {
            kind: RowSource.of(spark, c, data.rows_path).grouped(
                langs, data.vocabulary, "counts", partitions=3
            )
            for kind, c in cfg.items()
        }
        # the counts are the documents' in-vocabulary tokens
        block = counts["local"].blocks[0]
        vocab = {
            lang: {t: i for i, t in enumerate(data.vocabulary[lang]["terms"].to_pylist())}
            for lang in langs
        }
        texts = {
            (r["lang"], r["concept_index"]): r["text"]
            for r in spark.read.parquet(str(corpus_root / "tfidf"))
            .join(spark.read.parquet(str(corpus_root / "documents")), ["doc_id", "lang"])
            .select("lang", "concept_index", "text")
            .collect()
        }
        offsets = {lang: counts["local"].layout.slices[lang].start for lang in langs}
        for i in range(min(5, block.n_docs)):
            lang = langs[int(block.doc_lang[i])]
            text = texts[(lang, int(block.concepts[block.doc_group[i]]))]
            want = Counter(w for w in text.split() if w in vocab[lang])
            row = block.x.getrow(i)
            got = {
                int(block.cols[j]) - offsets[lang]: v
                for j, v in zip(row.indices, row.data, strict=True)
            }
            assert got == {vocab[lang][w]: float(c) for w, c in want.items()}
        fits = {}
        for kind, corpus in counts.items():
            fits[kind] = [
                fit_jplsa(corpus, r=4, maxiter=3, tol=0.0),
                fit_cplsa(corpus, r=4, maxiter=2, tol=0.0, pr_maxiter=5),
            ]
        for a, b in zip(fits["local"], fits["spark"], strict=True):
            la = [r["log_posterior"] for r in a.history["iterations"]]
            lb = [r["log_posterior"] for r in b.history["iterations"]]
            np.testing.assert_allclose(la, lb, rtol=1e-12)
            for lang in langs:
                np.testing.assert_allclose(a.components[lang], b.components[lang], atol=1e-7)
        # S2Net's gradient steps, from the same (random) start
        tfidf = {
            kind: RowSource.of(spark, c, data.rows_path).grouped(
                langs, data.vocabulary, "tfidf", partitions=3
            )
            for kind, c in cfg.items()
        }
        rng = np.random.default_rng(0)
        init = {lang: rng.standard_normal((data.backend.n_terms(lang), 4)) for lang in langs}
        kw = {"r": 4, "learning_rates": [5.0], "epochs": [2], "batch_concepts": 64}
        s_local = fit_s2net(tfidf["local"], init, **kw)
        s_spark = fit_s2net(tfidf["spark"], init, **kw)
        for lang in langs:
            np.testing.assert_allclose(
                s_local.components[lang], s_spark.components[lang], atol=1e-5
            )
        # S2Net's validation distractors: the same seeded training rows from both engines
        sampled = {kind: corpus.sample_rows(6) for kind, corpus in tfidf.items()}
        for i, lang in enumerate(langs):
            x = data.backend.matrix(lang).tocsr()
            want = x[distractor_rows(x.shape[0], 6, seed=i)].toarray()
            for kind in sampled:
                np.testing.assert_allclose(sampled[kind][lang].toarray(), want, rtol=1e-12)
        # more blocks than the driver adds: partials summed by term range on the executors
        many = cfg_for(corpus_root, "train.backend=spark")
        ranged = RowSource.of(spark, many, data.rows_path).grouped(
            langs, data.vocabulary, "counts", partitions=11
        )
        local11 = RowSource.of(spark, cfg_for(corpus_root), data.rows_path).grouped(
            langs, data.vocabulary, "counts", partitions=11
        )
        a = fit_jplsa(local11, r=4, maxiter=2, tol=0.0)
        b = fit_jplsa(ranged, r=4, maxiter=2, tol=0.0)
        np.testing.assert_allclose(
            [r["log_posterior"] for r in a.history["iterations"]],
            [r["log_posterior"] for r in b.history["iterations"]],
            rtol=1e-10,
        )
        for corpus in [*counts.values(), *tfidf.values(), ranged, local11]:
            corpus.close()
    finally:
        data.close()


@pytest.mark.slow
def test_training_killed_mid_em_resumes_to_the_same_model(spark, corpus_root, tmp_path):
    common = [
        "train.method=cplsa",
        "train.r=12",
        "train.cplsa.maxiter=25",
        "train.cplsa.tol=0",
        "train.checkpoint_seconds=0",
    ]
    ref_cfg = cfg_for(
        corpus_root, *common, f"paths.model={tmp_path}/ref", f"train.checkpoint_dir={tmp_path}/c0"
    )
    get_stage("train")(spark, ref_cfg)
    ref = Cr5Model.load(tmp_path / "ref")

    args = [*common, f"paths.model={tmp_path}/resumed", f"train.checkpoint_dir={tmp_path}/ck"]
    cmd = [sys.executable, str(REPO / "jobs" / "train.py"), "--conf", str(REPO / "conf/local.yaml")]
    for a in [f"paths.root={corpus_root}", *SETTINGS, *args]:
        cmd += ["--set", a]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OPENBLAS_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    cfg = cfg_for(corpus_root, *args)
    pointer = Path(_checkpoint_dir(cfg)) / "em.json"
    deadline = time.time() + 300
    try:
        while time.time() < deadline and proc.poll() is None:
            if pointer.exists():
                info = json.loads(pointer.read_text())
                if info.get("meta", {}).get("iteration", 0) >= 2:
                    break
            time.sleep(0.02)
        else:
            pytest.fail(f"training never checkpointed 2 EM iterations (exit {proc.poll()})")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert not (tmp_path / "resumed").exists()
    killed_at = json.loads(pointer.read_text())["meta"]["iteration"]
    assert killed_at < 25

    report = get_stage("train")(spark, cfg)
    resumed = Cr5Model.load(report["path"])
    history = resumed.meta["solver"]["history"]
    assert history["resumed_from_iteration"] >= 2
    want = [r["log_posterior"] for r in ref.meta["solver"]["history"]["iterations"]]
    got = [r["log_posterior"] for r in history["iterations"]]
    np.testing.assert_allclose(got, want, rtol=1e-12)
    for lang in ref.languages:
        np.testing.assert_allclose(resumed.word_vectors(lang)[1], ref.word_vectors(lang)[1])
    assert not Path(_checkpoint_dir(cfg)).exists()  # the model is the durable result


@pytest.mark.slow
def test_evaluation_scores_the_classic_methods_beside_cr5(spark, corpus_root, tmp_path):
    cfg = cfg_for(
        corpus_root,
        f"paths.model={tmp_path}/cr5",
        f"paths.evaluation={tmp_path}/evaluation",
        f"evaluate.report_dir={tmp_path}/reports",
        f"evaluate.baseline_models_dir={tmp_path}/baselines",
        "evaluate.methods=[opca, jplsa, cplsa, s2net]",
        "evaluate.gamma_grid=[0.0001, 1.0]",
        "evaluate.plot=false",
        "train.jplsa.maxiter=8",
        "train.cplsa.maxiter=8",
        "train.jplsa.stop_rule=validation",
        "train.cplsa.stop_rule=validation",
        "train.s2net.epochs=[0, 2]",
        "train.s2net.learning_rates=[10.0]",
        f"train.checkpoint_dir={tmp_path}/ck",
    )
    get_stage("train")(spark, cfg)
    report = get_stage("evaluate")(spark, cfg)
    rows = report["results"]
    by = {(r["method"], r["measure"]) for r in rows}
    for m in ("cr5", "opca", "jplsa", "cplsa", "s2net"):
        assert {(m, "cosine"), (m, "csls")} <= by
    assert {("jplsa", "l1"), ("cplsa", "l1")} <= by
    assert not {(m, "l1") for m in ("cr5", "opca", "s2net")} & by
    directions = {(r["query_lang"], r["target_lang"]) for r in rows if r["method"] == "jplsa"}
    assert directions == {(a, b) for a in LANGS for b in LANGS if a != b}
    for m in ("jplsa", "cplsa"):
        l1 = [r["precision_at"][1] for r in rows if (r["method"], r["measure"]) == (m, "l1")]
        # far above chance (1 in 160-240 candidates; concepts mixing 2 of 6 topics are hard
        # to tell apart by their topics alone)
        assert np.mean(l1) > 0.1
    md = Path(report["report_md"]).read_text()
    assert "| jplsa |" in md and "l1 P@1" in md  # the summary's column of its own similarity
    # S2Net's start (OPCA's γ) is chosen on validation like OPCA's own γ: γ = 1 makes OPCA
    # per-language PCA, a start with no crosslingual signal
    s2 = report["methods"]["s2net"]
    curve = {c["gamma"]: c["score"] for c in s2["gamma_selection"]["curve"]}
    assert list(curve) == [0.0001, 1.0] and curve[1.0] < curve[0.0001]
    assert s2["params"] == {"γ": 0.0001} and s2["model"].endswith("gamma=0.0001")
    # a topic model through the embed stage: the public path, topic distributions
    model = Cr5Model.load(report["methods"]["jplsa"]["model"])
    emb_cfg = cfg_for(
        corpus_root,
        f"paths.model={report['methods']['jplsa']['model']}",
        f"paths.embeddings={tmp_path}/emb",
    )
    get_stage("embed")(spark, emb_cfg)
    table = read_dataset(spark, EMBEDDINGS, str(tmp_path / "emb")).toArrow()
    vectors = np.array(table.column("vector").to_pylist())
    nonzero = table.column("n_terms").to_numpy() > 0
    np.testing.assert_allclose(vectors[nonzero].sum(axis=1), 1, rtol=1e-5)
    first = table.slice(0, 3)
    texts = {
        r["doc_id"]: r["text"]
        for r in spark.read.parquet(str(corpus_root / "documents"))
        .filter(f"doc_id in ({', '.join(repr(d) for d in first.column('doc_id').to_pylist())})")
        .collect()
    }
    for i in range(3):
        lang, doc = first.column("lang")[i].as_py(), first.column("doc_id")[i].as_py()
        want = model.embed([texts[doc]], lang)[0]
        np.testing.assert_array_equal(np.array(first.column("vector")[i].as_py(), np.float32), want)


def run_job(capsys, *args: str, stages=("train",)) -> tuple[int, str]:
    from pipeline.runner import main

    code = main(list(stages), ["--conf", str(REPO / "conf" / "local.yaml"), *args])
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("settings", "stages", "needle"),
    [
        (["train.jplsa.topic_prior=0.5"], ("train",), "train.jplsa.topic_prior"),
        (["train.method=s2net", "train.s2net.learning_rates=[]"], ("train",), "at least one"),
        (
            ["train.method=s2net", "features.heldout_concepts=null"],
            ("train",),
            "features.heldout_concepts is not set",
        ),
        (
            ["train.method=jplsa", "train.jplsa.stop_rule=validation"],
            ("train",),
            "train.jplsa.stop_rule=validation",
        ),
        (["train.method=cplsa", "evaluate.engine=spark"], ("evaluate",), "evaluate.engine=local"),
        (["evaluate.methods=[jplsa]", "evaluate.engine=spark"], ("evaluate",), "L1 similarity"),
        (["train.method=jplsa", "train.cplsa.pr_tol=-1"], ("train",), "train.cplsa.pr_tol"),
    ],
)
def test_bad_settings_fail_before_spark(capsys, tmp_path, settings, stages, needle):
    t0 = time.perf_counter()
    extra = []
    for s in [f"paths.root={tmp_path}", *settings]:
        extra += ["--set", s]
    code, err = run_job(capsys, *extra, stages=stages)
    assert code == 2 and time.perf_counter() - t0 < 5, err  # no Spark session was started
    assert "Traceback" not in err and needle in err, err
