"""Stages split and evaluate on a subset of the bundled sample.

The chain ingest -> split -> vocabulary -> tfidf -> train runs once per module on 900
concepts of the DDTP sample in en, de, es (r = 16); the tests then check on the data that
no split concept reaches training, that the local and Spark engines produce the same
evaluation, the reports, and λ selection.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from pipeline.config import EvaluateConfig, SplitConfig, load_config
from pipeline.errors import ConfigError, InputDataError
from pipeline.evaluation.classify import classifier_split
from pipeline.features.validation_rows import distractor_documents
from pipeline.io.datasets import read_dataset, read_manifest, write_dataset
from pipeline.io.schemas import DOCUMENTS, EVALUATION, SPLITS, TFIDF, VOCABULARY
from pipeline.model import Cr5Model
from pipeline.model.format import model_fingerprint, read_model_json
from pipeline.stages import get_stage
from pipeline.stages import split as split_stage
from pipeline.stages.evaluate import run_evaluation
from tests.conftest import REPO, SAMPLE

PROFILES = [REPO / "conf" / "local.yaml", REPO / "conf" / "short-docs.yaml"]
SPLIT = SplitConfig(n_test=50, n_validation=40, seed=7)

# Every test uses the module's chain fixture (five stages, training included, on the sample).
pytestmark = pytest.mark.slow


def cfg_for(root: Path, *overrides: str):
    return load_config(
        PROFILES,
        [
            f"paths.root={root}",
            f"features.heldout_concepts={root}/splits",
            "spark.shuffle_partitions=2",
            "train.r=16",
            "train.checkpoint_dir=",
            *overrides,
        ],
    )


@pytest.fixture(scope="module")
def chain(spark, tmp_path_factory):
    """ingest -> split -> vocabulary -> tfidf -> train on a 900-concept subset (en, de, es)."""
    base = tmp_path_factory.mktemp("evalchain")
    table = pq.read_table(SAMPLE)
    table = table.filter(pc.is_in(table.column("lang"), pa.array(["en", "de", "es"])))
    concepts = sorted(set(table.column("concept_id").to_pylist()))[::4][:900]
    table = table.filter(pc.is_in(table.column("concept_id"), pa.array(concepts)))
    corpus = base / "corpus.parquet"
    pq.write_table(table, corpus)
    root = base / "out"
    cfg = cfg_for(root, f"ingest.input={corpus}")
    reports = {"ingest": get_stage("ingest")(spark, cfg)}
    reports["split"] = split_stage.run(spark, cfg, SPLIT)
    for stage in ("vocabulary", "tfidf", "train"):
        reports[stage] = get_stage(stage)(spark, cfg)
    return root, cfg, reports


def _rows(spark, spec, path):
    return read_dataset(spark, spec, str(path)).toArrow().to_pylist()


def test_splits_are_seeded_and_never_leak_into_training(spark, chain, tmp_path):
    root, _cfg, reports = chain
    rows = _rows(spark, SPLITS, root / "splits")
    pairs = {"de-en", "de-es", "en-es"}
    assert {r["pair"] for r in rows} == pairs
    for pair in pairs:
        for role, n in (("test", SPLIT.n_test), ("validation", SPLIT.n_validation)):
            got = [r for r in rows if r["pair"] == pair and r["role"] == role]
            assert len(got) == n and len({r["concept_id"] for r in got}) == n
    # A concept has one role in every pair, and the pair's languages both have it.
    roles: dict[str, set] = {}
    for r in rows:
        roles.setdefault(r["concept_id"], set()).add(r["role"])
    assert all(len(v) == 1 for v in roles.values())
    docs = _rows(spark, DOCUMENTS, root / "documents")
    langs_of: dict[str, set] = {}
    for d in docs:
        langs_of.setdefault(d["concept_id"], set()).add(d["lang"])
    assert all(set(r["pair"].split("-")) <= langs_of[r["concept_id"]] for r in rows)

    # Reproducible from the seed; another seed draws other concepts.
    again = cfg_for(tmp_path / "again", f"paths.documents={root}/documents")
    split_stage.run(spark, again, SPLIT)
    key = lambda r: (r["pair"], r["role"], r["priority"], r["concept_id"])  # noqa: E731
    assert sorted(map(key, _rows(spark, SPLITS, tmp_path / "again" / "splits"))) == sorted(
        map(key, rows)
    )
    other = cfg_for(tmp_path / "other", f"paths.documents={root}/documents")
    split_stage.run(spark, other, SplitConfig(n_test=50, n_validation=40, seed=8))
    assert {r["concept_id"] for r in _rows(spark, SPLITS, tmp_path / "other" / "splits")} != {
        r["concept_id"] for r in rows
    }

    # On the data: no split concept in any language's training rows, vocabulary or IDF.
    held = {r["concept_id"] for r in rows}
    tfidf = _rows(spark, TFIDF, root / "tfidf")
    assert tfidf and not {r["concept_id"] for r in tfidf} & held
    for lang in ("de", "en", "es"):
        held_docs = sum(1 for d in docs if d["lang"] == lang and d["concept_id"] in held)
        assert reports["vocabulary"]["heldout_documents"][lang] == held_docs
    vocab_manifest = read_manifest(spark, VOCABULARY, str(root / "vocabulary"))
    # Named relative to paths.root (= root), so the run root can move.
    assert vocab_manifest["report"]["settings"]["heldout_concepts"] == "<paths.root>/splits"
    n_train = {lang: sum(1 for r in tfidf if r["lang"] == lang) for lang in ("de", "en", "es")}
    model = Cr5Model.load(root / "model")
    assert model.meta["training"]["documents"] == n_train
    assert reports["vocabulary"]["training_documents"] == n_train
    # IDF is over training documents only: N_l = training documents of l.
    vocab = _rows(spark, VOCABULARY, root / "vocabulary")
    en = [v for v in vocab if v["lang"] == "en"]
    top = max(en, key=lambda v: v["df"])
    assert top["idf"] == pytest.approx(np.log(n_train["en"] / top["df"]), rel=1e-5)


def test_local_and_spark_engines_write_the_same_evaluation(spark, chain):
    root, cfg, _ = chain
    results = {}
    for engine in ("local", "spark"):
        e = EvaluateConfig(engine=engine, report_dir=str(root / f"reports-{engine}"), plot=False)
        report = run_evaluation(spark, cfg, e)
        got = _rows(spark, EVALUATION, report["path"])
        results[engine] = sorted(
            (r["query_lang"], r["target_lang"], r["measure"], r["metric"], r["k"] or 0, r["value"])
            for r in got
        )
        assert report["engine"] == engine
    assert results["local"] == results["spark"]

    # Every direction of every pair, both measures, P@1/5/10 and MRR, with sizes.
    assert len({(r[0], r[1]) for r in results["local"]}) == 6
    js = json.loads((root / "reports-spark" / "evaluation.json").read_text())
    assert js["csls_source"] == "queries" and js["setup"] == "joint" and js["leak_check_rows"] == 0
    for r in js["results"]:
        assert r["n_queries"] == SPLIT.n_test
        n_target = js["candidates"]["per_language"][r["target_lang"]]["documents"]
        assert r["n_candidates"] == n_target  # all documents (< max_candidates) incl. targets
    assert set(js["training_documents"]) == {"de", "en", "es"}
    assert "P@10" in js["table"] and "csls" in js["table"]
    assert (root / "reports-spark" / "evaluation.md").read_text().count("| de-en |") == 4


def test_candidate_sample_and_collection_source(spark, chain):
    root, cfg, _ = chain
    e = EvaluateConfig(
        engine="local",
        max_candidates=100,
        csls_source="collection",
        pairs=["en-es"],
        report_dir=str(root / "reports-small"),
    )
    report = run_evaluation(spark, cfg, e)
    for r in report["results"]:
        # 100 sampled documents plus the 50 true targets, minus those sampled already.
        assert 100 < r["n_candidates"] <= 150
        if r["measure"] == "csls":
            assert r["csls_source"] == "collection"
    assert Path(report["plot"]).stat().st_size > 0
    spark_report = run_evaluation(
        spark, cfg, EvaluateConfig(**{**vars(e), "engine": "spark", "plot": False})
    )
    key = lambda r: (r["query_lang"], r["measure"], r["mrr"], r["n_candidates"])  # noqa: E731
    assert sorted(map(key, spark_report["results"])) == sorted(map(key, report["results"]))


def test_lambda_selection_records_the_curve(spark, chain):
    root, cfg, _ = chain
    e = EvaluateConfig(
        engine="local",
        measures=["cosine"],
        lambda_grid=[0.05, 1.0, 20.0],
        lambda_warm_start=False,  # independent fits: the train stage's model is reused
        selection_metric="MRR",
        report_dir=str(root / "reports-lambda"),
        plot=False,
    )
    report = run_evaluation(spark, cfg, e)
    sel = report["lambda_selection"]
    scores = {c["lam"]: c["score"] for c in sel["curve"]}
    assert list(scores) == [0.05, 1.0, 20.0]
    assert sel["chosen"] == max(scores, key=scores.get) == report["lam"]
    # λ = 1 is the train stage's model (same settings): reused, not refitted.
    assert [c["reused_train_model"] for c in sel["curve"]] == [False, True, False]
    rows = _rows(spark, EVALUATION, report["path"])
    val = [r for r in rows if r["split"] == "validation" and r["metric"] == "mrr"]
    assert {r["lam"] for r in val} == {0.05, 1.0, 20.0}
    for lam, score in scores.items():
        mean = np.mean([r["value"] for r in val if r["lam"] == lam])
        assert mean == pytest.approx(score, abs=1e-6)
        assert all(r["n_queries"] == SPLIT.n_validation for r in val if r["lam"] == lam)
    assert Cr5Model.load(report["model"]).meta["lam"] == report["lam"]


def test_lambda_warm_start_chooses_as_independent_fits(spark, chain):
    """evaluate.lambda_warm_start (the default): the grid is fitted as a path from the
    largest λ down, each fit started from the previous one's Ritz vectors and solves; on this
    subset the chosen λ is that of independent fits, for fewer passes over X."""
    root, cfg, _ = chain
    runs = {}
    for warm in (True, False):
        e = EvaluateConfig(
            engine="local",
            measures=["cosine"],
            lambda_grid=[0.1, 0.3, 3.0, 10.0],
            lambda_warm_start=warm,
            lambda_models_dir=str(root / f"lambda-models-{warm}"),
            report_dir=str(root / f"reports-lambda-{warm}"),
            plot=False,
        )
        runs[warm] = run_evaluation(spark, cfg, e)["lambda_selection"]
    assert runs[True]["chosen"] == runs[False]["chosen"]
    passes = {}
    for warm, sel in runs.items():
        starts, total = [], 0
        for c in sel["curve"]:
            training = Cr5Model.load(c["model"]).meta["training"]
            starts.append(training["eigensolver_start"])
            total += sum(training["passes_over_x"]["column_passes"].values())
        passes[warm] = total
        # the path runs from the largest λ down; the curve stays in grid order
        want = ["previous_fit"] * 3 + ["surrogate"] if warm else ["surrogate"] * 4
        assert starts == want
    assert runs[True]["fit_order"] == [10.0, 3.0, 0.3, 0.1]
    assert [c["lam"] for c in runs[True]["curve"]] == [c["lam"] for c in runs[False]["curve"]]
    # The scores are not bit-equal: each fit stops at eig_rtol = 0.1 from another start
    # (measured on this subset: |Δ| <= 0.055 MRR, 120 validation queries per direction).
    assert passes[True] < passes[False], passes


def test_interrupted_lambda_path_resumes_where_it_stopped(spark, chain, tmp_path, monkeypatch):
    """A λ path that fails after two of its three fits resumes on the rerun: the finished
    models are reused, the last λ starts from the checkpointed start of its predecessor
    and gives the model an uninterrupted path gives; a rerun of a finished path fits
    nothing."""
    from pipeline.training import service as training

    _, cfg, _ = chain
    real_run = training.train_model

    def grid(name):
        return EvaluateConfig(
            engine="local",
            measures=["cosine"],
            lambda_grid=[0.3, 3.0, 10.0],
            lambda_models_dir=str(tmp_path / name),
            report_dir=str(tmp_path / f"reports-{name}"),
            plot=False,
        )

    whole = run_evaluation(spark, cfg, grid("whole"))["lambda_selection"]
    calls = []

    def failing_run(spark_, cfg_, data=None):
        calls.append(cfg_.train.lam)
        if len(calls) == 3:
            raise RuntimeError("simulated driver failure")
        return real_run(spark_, cfg_, data)

    monkeypatch.setattr(training, "train_model", failing_run)
    with pytest.raises(RuntimeError, match="simulated"):
        run_evaluation(spark, cfg, grid("resumed"))
    assert calls == [10.0, 3.0, 0.3]
    calls.clear()
    resumed = run_evaluation(spark, cfg, grid("resumed"))["lambda_selection"]
    assert calls == [0.3]  # only the λ the failure interrupted is fitted again
    assert [c["resumed"] for c in resumed["curve"]] == [False, True, True]
    for a, b in zip(whole["curve"], resumed["curve"], strict=True):
        ma, mb = Cr5Model.load(a["model"]), Cr5Model.load(b["model"])
        assert mb.meta["training"]["eigensolver_start"] == ma.meta["training"]["eigensolver_start"]
        np.testing.assert_allclose(mb.meta["eigenvalues"], ma.meta["eigenvalues"], rtol=1e-12)
        assert b["score"] == pytest.approx(a["score"], abs=1e-12)
    assert resumed["chosen"] == whole["chosen"]

    calls.clear()
    again = run_evaluation(spark, cfg, grid("resumed"))["lambda_selection"]
    assert calls == [] and all(c["resumed"] for c in again["curve"])
    assert [c["score"] for c in again["curve"]] == [c["score"] for c in resumed["curve"]]


def test_validation_stop_rule_scores_the_split_validation_concepts(spark, chain, tmp_path):
    """train.stop_rule=validation: the eigensolver is scored on the split stage's validation
    concepts after every iteration; the model holds the best iteration, and its recorded
    score is what the public embedding path gives those documents."""
    root, _, _ = chain
    cfg = cfg_for(
        root,
        f"paths.model={tmp_path / 'model'}",
        "train.stop_rule=validation",
        "train.stop_patience=1",
        "train.eig_rtol=1e-6",
        "train.eig_maxiter=30",
        "train.validation_concepts=25",
    )
    report = get_stage("train")(spark, cfg)
    model = Cr5Model.load(report["path"])
    stopping = model.meta["training"]["stopping"]
    history = model.meta["solver"]["history"]["stopping"]
    assert stopping["rule"] == "validation" and report["stopping"] == stopping
    assert stopping["stopped_by"] in ("validation", "residual")
    assert stopping["returned_iteration"] == stopping["best_iteration"]
    # the 25 validation concepts of lowest priority, in every language that has them
    splits = [r for r in _rows(spark, SPLITS, root / "splits") if r["role"] == "validation"]
    first: dict[str, int] = {}
    for r in splits:
        first[r["concept_id"]] = min(first.get(r["concept_id"], 1 << 62), r["priority"])
    chosen = sorted(first, key=lambda c: (first[c], c))[:25]
    docs = read_dataset(spark, DOCUMENTS, cfg.paths.dataset("documents")).toArrow().to_pylist()
    texts: dict[str, dict[str, str]] = {}
    for d in sorted(docs, key=lambda d: d["doc_id"]):
        if d["concept_id"] in chosen:
            texts.setdefault(d["lang"], {}).setdefault(d["concept_id"], d["text"])
    assert history["validation_documents"] == {lang: len(t) for lang, t in sorted(texts.items())}
    # P@1 of the returned model, by hand through Cr5Model.embed
    per = {}
    for l1 in sorted(texts):
        for l2 in sorted(texts):
            if l1 == l2:
                continue
            shared = sorted(set(texts[l1]) & set(texts[l2]))
            cands = sorted(texts[l2])
            q = model.embed([texts[l1][c] for c in shared], l1).astype(np.float64)
            c = model.embed([texts[l2][c] for c in cands], l2).astype(np.float64)
            q /= np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-30)
            c /= np.maximum(np.linalg.norm(c, axis=1, keepdims=True), 1e-30)
            best = np.argmax(q @ c.T, axis=1)
            per[f"{l1}->{l2}"] = np.mean([cands[j] == shared[i] for i, j in enumerate(best)])
    # equal here; 0.02 allows two near-ties to flip between the solver's float64 Φ and the
    # model's float32 copy (one query of a direction is 1/6 x 1/18 of the mean)
    assert stopping["best_validation_p_at_1"] == pytest.approx(
        np.mean(list(per.values())), abs=0.02
    )
    assert stopping["best_validation_p_at_1"] > 0.3  # chance is 1/25


def test_validation_stop_rule_needs_the_split_stage(spark, chain, tmp_path):
    root, _, _ = chain
    cfg = cfg_for(root, "features.heldout_concepts=", "train.stop_rule=validation")
    with pytest.raises(ConfigError, match="features.heldout_concepts is not set"):
        get_stage("train")(spark, cfg)


def test_validation_distractors_are_training_documents(spark, chain, tmp_path):
    """train.validation_distractors: a seeded sample of documents of no split concept per
    language joins the candidates of the per-iteration validation P@1."""
    root, _, _ = chain
    cfg = cfg_for(
        root,
        f"paths.model={tmp_path / 'model'}",
        "train.stop_rule=validation",
        "train.eig_maxiter=6",
        "train.validation_concepts=25",
        "train.validation_distractors=20",
    )
    report = get_stage("train")(spark, cfg)
    history = Cr5Model.load(report["path"]).meta["solver"]["history"]["stopping"]
    assert history["validation_distractors"] == {"de": 20, "en": 20, "es": 20}
    sample = distractor_documents(
        spark, ["de", "en"], heldout=str(root / "splits"), documents=str(root / "documents"),
        count=20,
    )  # fmt: skip
    again = distractor_documents(
        spark, ["de", "en"], heldout=str(root / "splits"), documents=str(root / "documents"),
        count=20,
    )  # fmt: skip
    assert sample.equals(again) and sample.column("lang").to_pylist() == ["de"] * 20 + ["en"] * 20
    held = {r["concept_id"] for r in _rows(spark, SPLITS, root / "splits")}
    concept_of = {d["doc_id"]: d["concept_id"] for d in _rows(spark, DOCUMENTS, root / "documents")}
    assert not {concept_of[d] for d in sample.column("doc_id").to_pylist()} & held


def test_evaluation_refuses_split_concepts_in_training(spark, chain, tmp_path):
    root, _cfg, _ = chain
    train_concept = _rows(spark, TFIDF, root / "tfidf")[0]["concept_id"]
    bad = spark.createDataFrame(
        [(train_concept, "de-en", "test", 0, 0)],
        "concept_id string, pair string, role string, priority long, seed long",
    )
    write_dataset(spark, bad, SPLITS, str(tmp_path / "splits"))
    cfg_bad = cfg_for(root, f"paths.splits={tmp_path / 'splits'}")
    with pytest.raises(InputDataError, match="training"):
        run_evaluation(spark, cfg_bad, EvaluateConfig(engine="local", plot=False))


def _brute_force_untranslated(spark, root, model, query_lang, target_lang, test_concepts):
    """Cosine over identical term strings, computed from dicts of term -> TF-IDF weight."""
    docs = read_dataset(spark, DOCUMENTS, str(root / "documents")).toArrow().to_pylist()
    by_lang = {
        lang: sorted((d for d in docs if d["lang"] == lang), key=lambda d: d["doc_id"])
        for lang in (query_lang, target_lang)
    }
    queries = sorted(
        (d for d in by_lang[query_lang] if d["concept_id"] in test_concepts),
        key=lambda d: d["concept_id"],
    )
    cands = by_lang[target_lang]

    def weights(rows, lang):
        x = model.tfidf([d["text"] for d in rows], lang)
        terms = model.word_vectors(lang)[0]
        return [
            {terms[j]: float(v) for j, v in zip(x[i].indices, x[i].data)} for i in range(len(rows))
        ]

    wq, wc = weights(queries, query_lang), weights(cands, target_lang)
    ranks = []
    for q, wq_i in zip(queries, wq):
        scores = np.array([sum(v * w.get(t, 0.0) for t, v in wq_i.items()) for w in wc])
        t = next(i for i, c in enumerate(cands) if c["concept_id"] == q["concept_id"])
        others = np.delete(scores, t)
        ranks.append(1 + int(np.count_nonzero(others >= scores[t] - 1e-6)))
    ranks = np.array(ranks)
    return float(np.mean(ranks == 1)), float(np.mean(1.0 / ranks))


def test_methods_are_evaluated_side_by_side_on_the_same_queries(spark, chain):
    root, cfg, _ = chain
    e = EvaluateConfig(
        engine="local",
        pairs=["de-en"],
        methods=["untranslated", "cl_lsi"],
        report_dir=str(root / "reports-methods"),
    )
    report = run_evaluation(spark, cfg, e)
    assert list(report["methods"]) == ["cr5", "untranslated", "cl_lsi"]
    assert report["methods"]["cl_lsi"]["r"] == 16
    untranslated = Cr5Model.load(report["methods"]["untranslated"]["model"])
    assert untranslated.is_sparse and untranslated.meta["method"] == "untranslated"
    rows = _rows(spark, EVALUATION, report["path"])
    assert {r["method"] for r in rows} == {"cr5", "untranslated", "cl_lsi"}
    for method in ("cr5", "untranslated", "cl_lsi"):
        sizes = {
            (r["query_lang"], r["n_queries"], r["n_candidates"])
            for r in rows
            if r["method"] == method
        }
        assert sizes == {(r["query_lang"], r["n_queries"], r["n_candidates"]) for r in rows}

    # untranslated's numbers equal a brute-force cosine over identical strings.
    test_concepts = {
        r["concept_id"]
        for r in _rows(spark, SPLITS, root / "splits")
        if r["pair"] == "de-en" and r["role"] == "test"
    }
    p1, mrr = _brute_force_untranslated(spark, root, untranslated, "de", "en", test_concepts)
    [got] = [
        r
        for r in report["results"]
        if r["method"] == "untranslated" and r["query_lang"] == "de" and r["measure"] == "cosine"
    ]
    assert got["precision_at"][1] == pytest.approx(p1, abs=1e-9)
    assert got["mrr"] == pytest.approx(mrr, abs=1e-6)

    md = Path(report["report_md"]).read_text()
    assert "## Methods" in md and "| untranslated |" in md
    assert "untranslated" in report["table"] and "cl_lsi" in report["table"]


def test_gamma_of_opca_is_chosen_on_validation(spark, chain):
    root, cfg, _ = chain
    e = EvaluateConfig(
        engine="local",
        measures=["cosine"],
        pairs=["de-en"],
        methods=["opca"],
        gamma_grid=[1e-4, 1.0],
        report_dir=str(root / "reports-gamma"),
        plot=False,
    )
    report = run_evaluation(spark, cfg, e)
    info = report["methods"]["opca"]
    sel = info["gamma_selection"]
    scores = {c["gamma"]: c["score"] for c in sel["curve"]}
    assert list(scores) == [1e-4, 1.0]
    assert sel["chosen"] == max(scores, key=scores.get)
    assert info["model"].endswith(f"gamma={sel['chosen']:g}")
    assert info["params"] == {"γ": sel["chosen"]}
    # γ = 1 turns OPCA into per-language PCA: no crosslingual signal on validation.
    assert scores[1.0] < scores[1e-4]
    assert "γ chosen on the validation concepts" in Path(report["report_md"]).read_text()

    # The train stage, asked for OPCA with the same grid, rows, pool and scoring, makes the
    # same choice and writes the same arrays as the evaluation's OPCA row.
    train_cfg = dataclasses.replace(
        cfg,
        evaluate=e,
        train=dataclasses.replace(cfg.train, method="opca"),
        paths=dataclasses.replace(cfg.paths, model=str(root / "model-opca-tuned")),
    )
    summary = get_stage("train")(spark, train_cfg)
    tuned = read_model_json(root / "model-opca-tuned")
    evaluated = read_model_json(info["model"])
    assert summary["tuning"]["chosen"] == tuned["tuning"]["chosen"] == sel["chosen"]
    assert tuned["tuning"]["key"] == "train.opca.gamma"
    assert {c["gamma"]: c["score"] for c in tuned["tuning"]["curve"]} == scores
    assert model_fingerprint(tuned) == model_fingerprint(evaluated)
    assert not (root / "tuning" / "opca").exists()  # candidates go once one is published


def test_word_mapping_baseline_is_evaluated_on_its_pair(spark, chain):
    """An avg_<map> document baseline (the translate_words stage's output format) is
    evaluated beside the model on the directions of the languages it covers. Built here from
    the Cr5 model's own Φ rows as the "mapped word vectors" of de and en, it is Cr5 restricted
    to de and en: its numbers must equal Cr5's on de-en, and es directions are skipped."""
    from pipeline.model.format import load_model_files, save_model
    from pipeline.wordmap.documents import averaged_word_vector_map

    root, cfg, _ = chain
    meta, maps = load_model_files(cfg.paths.dataset("model"), languages=["de", "en"])
    avg = {}
    for lang, lm in maps.items():
        avg[lang], covered = averaged_word_vector_map(lm, lm.terms.to_pylist(), lm.phi)
        assert covered == lm.phi.shape[0]
    save_model(
        root / "wordmap_models" / "avg_procrustes",
        avg,
        {"r": int(meta["r"]), "lam": 0.0, "method": "avg_procrustes"},
    )
    e = EvaluateConfig(
        engine="local",
        measures=["cosine"],
        methods=["avg_procrustes"],
        report_dir=str(root / "reports-avg"),
        plot=False,
    )
    report = run_evaluation(spark, cfg, e)
    assert report["methods"]["avg_procrustes"]["languages"] == ["de", "en"]
    by = {(r["method"], r["query_lang"], r["target_lang"]): r for r in report["results"]}
    assert {k[1:] for k in by if k[0] == "avg_procrustes"} == {("de", "en"), ("en", "de")}
    assert {k[1:] for k in by if k[0] == "cr5"} >= {("de", "es"), ("es", "en")}
    for q, t in (("de", "en"), ("en", "de")):
        mine, cr5 = by["avg_procrustes", q, t], by["cr5", q, t]
        assert mine["precision_at"] == cr5["precision_at"] and mine["mrr"] == cr5["mrr"]
    bad = EvaluateConfig(engine="local", methods=["avg_rcsls"], plot=False)
    with pytest.raises(InputDataError, match="run the word_vectors and translate_words"):
        run_evaluation(spark, cfg, bad)


def test_classification_transfer_is_scored_for_every_method(spark, chain):
    root, cfg, _ = chain
    labels = REPO / "data" / "sample" / "ddtp_sections.parquet"
    e = EvaluateConfig(
        engine="local",
        pairs=["de-en"],
        methods=["cl_lsi"],
        report_dir=str(root / "reports-classify"),
        classify_labels=str(labels),
        plot=False,
    )
    report = run_evaluation(spark, cfg, e)
    section = report["classification"]
    assert set(section["methods"]) == {"cr5", "cl_lsi"}
    assert set(section["references"]) == {"majority", "tfidf"}
    for info in section["methods"].values():
        assert set(info["accuracy"]) == {"de", "en"}
        assert all(0.0 <= v <= 1.0 for row in info["accuracy"].values() for v in row.values())
    # the majority reference recomputed by hand from the labels, splits and documents
    label_of = {r["concept_id"]: r["label"] for r in pq.read_table(labels).to_pylist()}
    held = {r["concept_id"] for r in _rows(spark, SPLITS, root / "splits") if r["pair"] == "de-en"}
    docs = [
        d
        for d in _rows(spark, DOCUMENTS, root / "documents")
        if d["lang"] in ("de", "en") and d["concept_id"] in held and d["concept_id"] in label_of
    ]
    side = {
        d["concept_id"]: bool(classifier_split(np.array([d["concept_id"]], object), 0.5, 0)[0])
        for d in docs
    }
    for src in ("de", "en"):
        train = [
            label_of[d["concept_id"]] for d in docs if d["lang"] == src and side[d["concept_id"]]
        ]
        top = sorted(set(train), key=lambda x: (-train.count(x), x))[0]
        assert section["documents"][src]["train"] == len(train)
        for tgt in ("de", "en"):
            test = [
                label_of[d["concept_id"]]
                for d in docs
                if d["lang"] == tgt and not side[d["concept_id"]]
            ]
            want = sum(t == top for t in test) / len(test)
            assert section["references"]["majority"]["accuracy"][src][tgt] == pytest.approx(want)
    rows = [r for r in _rows(spark, EVALUATION, report["path"]) if r["measure"] == "classify"]
    assert {r["method"] for r in rows} == {"cr5", "cl_lsi", "majority", "tfidf"}
    # embeddings carry the labels' information across languages: cr5 beats the majority
    assert section["methods"]["cr5"]["cross"] > section["references"]["majority"]["cross"]
    md = Path(report["report_md"]).read_text()
    assert "## Crosslingual classification" in md and "| cl_lsi |" in md


def test_xcnn_is_trained_through_the_distributor_and_evaluated_beside_cr5(spark, chain):
    pytest.importorskip("torch")
    import dataclasses

    root, cfg, _ = chain
    cfg = dataclasses.replace(
        cfg,
        train=cfg.train.with_params(
            "xcnn", epochs=4, processes=2, dim=16, batch_size=32, lr=0.05, center=True
        ),
    )
    e = EvaluateConfig(
        engine="local", pairs=["de-en"], methods=["xcnn"], report_dir=str(root / "reports-xcnn")
    )
    report = run_evaluation(spark, cfg, e)
    entry = report["methods"]["xcnn"]
    model = Cr5Model.load(entry["model"])
    history = model.meta["solver"]["history"]
    assert history["processes"] == 2 and len(history["epochs"]) == 4
    assert history["selection"] == "validation P@1"
    scores = [h["validation_p_at_1"] for h in history["epochs"]]
    assert history["chosen_epoch"] == 1 + int(np.argmax(scores))
    assert model.dim == 16
    # centred: each language's mean training embedding is stored and subtracted
    assert all(model._map(lang).offset.shape == (16,) for lang in model.languages)
    rows = [r for r in report["results"] if r["method"] == "xcnn" and r["measure"] == "cosine"]
    assert len(rows) == 2
    cr5 = {r["query_lang"]: r for r in report["results"] if r["method"] == "cr5"}
    for r in rows:
        # the same queries and candidates as cr5; far better than a random ranking, whose
        # expected MRR is H_N / N over N candidates
        assert (r["n_queries"], r["n_candidates"]) == (
            cr5[r["query_lang"]]["n_queries"],
            cr5[r["query_lang"]]["n_candidates"],
        )
        n = r["n_candidates"]
        assert r["mrr"] > 3 * sum(1 / k for k in range(1, n + 1)) / n, r["mrr"]


def test_ctlaser_is_trained_embedded_by_the_embed_stage_and_evaluated(spark, chain, tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("sentencepiece")
    import dataclasses

    from pipeline.io.schemas import EMBEDDINGS
    from pipeline.model.loading import load_model

    root, cfg, _ = chain
    cfg = dataclasses.replace(
        cfg,
        train=cfg.train.with_params(
            "ctlaser",
            epochs=1,
            processes=1,
            dim=16,
            heads=2,
            ff=32,
            vocab_size=500,
            max_tokens=24,
            batch_size=64,
        ),
    )
    e = EvaluateConfig(
        engine="local", pairs=["de-en"], methods=["ctlaser"], report_dir=str(tmp_path / "rep"),
        plot=False,
    )  # fmt: skip
    report = run_evaluation(spark, cfg, e)
    path = report["methods"]["ctlaser"]["model"]
    model = load_model(path)
    assert model.meta["phi_format"] == "encoder" and model.dim == 16
    assert model.meta["solver"]["history"]["selection"] == "validation P@1"
    rows = [r for r in report["results"] if r["method"] == "ctlaser"]
    assert {r["query_lang"] for r in rows} == {"de", "en"}
    # the embed stage (Python workers, batched) gives the Python API's vectors
    emb_cfg = dataclasses.replace(
        cfg, paths=dataclasses.replace(cfg.paths, model=path, embeddings=str(tmp_path / "emb"))
    )
    get_stage("embed")(spark, emb_cfg)
    got = read_dataset(spark, EMBEDDINGS, str(tmp_path / "emb")).filter("lang = 'de'").toArrow()
    docs = read_dataset(spark, DOCUMENTS, str(root / "documents")).filter("lang = 'de'")
    texts = {d["doc_id"]: d["text"] for d in docs.select("doc_id", "text").toArrow().to_pylist()}
    ids = got.column("doc_id").to_pylist()[:40]
    want = model.embed([texts[i] for i in ids], "de")
    vec = np.array(got.column("vector").to_pylist()[:40], dtype=np.float32)
    np.testing.assert_allclose(vec, want, rtol=1e-4, atol=1e-5)


def test_a_method_added_by_one_registry_entry_is_trained_embedded_and_evaluated(
    spark, chain, tmp_path
):
    """The toy method of tests/test_methods.py, registered through its one entry, goes
    through the train, embed and evaluate stages like a built-in method."""
    from pipeline.io.schemas import EMBEDDINGS
    from pipeline.methods import registered
    from tests.test_methods import TOY

    root, _, _ = chain
    with registered(TOY):
        cfg = cfg_for(
            root,
            f"train.method={TOY.name}",
            f"paths.model={tmp_path / 'model'}",
            f"paths.embeddings={tmp_path / 'embeddings'}",
            f"paths.evaluation={tmp_path / 'evaluation'}",
            f"evaluate.report_dir={tmp_path / 'reports'}",
            "evaluate.lambda_grid=[1.0]",
            "evaluate.pairs=[de-en]",
            "evaluate.engine=local",
            "evaluate.plot=false",
        )
        trained = get_stage("train")(spark, cfg)
        get_stage("embed")(spark, cfg)
        report = get_stage("evaluate")(spark, cfg)

    assert trained["method"] == TOY.name and trained["r"] == 16
    model = Cr5Model.load(tmp_path / "model")
    assert model.meta["method"] == TOY.name and model.dim == 16 and not model.is_sparse
    assert model.meta["similarity"] == "cosine"
    assert model.meta["solver"]["history"] == {"method": "concept_codes", "seed": cfg.train.seed}
    # the embed stage wrote the model's vectors: those of the Python API
    got = read_dataset(spark, EMBEDDINGS, str(tmp_path / "embeddings")).filter("lang = 'de'")
    got = got.toArrow()
    docs = read_dataset(spark, DOCUMENTS, str(root / "documents")).filter("lang = 'de'")
    texts = {d["doc_id"]: d["text"] for d in docs.select("doc_id", "text").toArrow().to_pylist()}
    ids = got.column("doc_id").to_pylist()[:40]
    want = model.embed([texts[i] for i in ids], "de")
    vec = np.array(got.column("vector").to_pylist()[:40], dtype=np.float32)
    np.testing.assert_allclose(vec, want, rtol=1e-4, atol=1e-5)
    # evaluated on the test concepts, tuned by nothing, far above chance (the shared concept
    # codes make it crosslingual)
    rows = [r for r in report["results"] if r["measure"] == "cosine"]
    assert {(r["method"], r["query_lang"]) for r in rows} == {(TOY.name, "de"), (TOY.name, "en")}
    assert report["methods"][TOY.name]["params"] == {}
    for r in rows:
        assert r["precision_at"][1] > 10 / r["n_candidates"], r
