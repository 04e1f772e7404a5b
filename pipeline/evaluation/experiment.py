"""The evaluation experiment: it sits above training, choosing and training models to evaluate.

:func:`run_evaluation` runs the named steps of design.md §4 in order:

1. :func:`~pipeline.evaluation.protocol.plan`: the setup, languages and pairs to evaluate;
2. :func:`check_no_leak`: no test/validation concept among the training rows (on the data);
3. :func:`~pipeline.evaluation.engines.open_engine`: the pool of documents, embedded and
   retrieved on the driver or over Spark;
4. :func:`choose_model`: the model at ``paths.model``, or λ selection on the validation
   concepts (:mod:`~pipeline.evaluation.lambda_selection`) which trains one model per λ;
5. :func:`evaluate_model` on the test concepts, then :func:`compare_methods`: every method of
   ``evaluate.methods`` trained on the same rows and evaluated on the same pool (γ of CCA/OPCA
   chosen on validation);
6. :func:`build_report` and :func:`write_outputs`: the ``evaluation`` dataset, the Markdown
   and JSON reports and the precision-at-k plot (:mod:`~pipeline.evaluation.report`).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pipeline.config import Config, EvaluateConfig, check_evaluate
from pipeline.errors import InputDataError, PipelineError
from pipeline.evaluation.classification import classification_rows, run_classification
from pipeline.evaluation.engines import open_engine
from pipeline.evaluation.lambda_selection import select_lambda
from pipeline.evaluation.protocol import (
    count_leaked_rows,
    directions_of,
    evaluate_role,
    method_params,
    model_measures,
    plan,
    validation_score,
)
from pipeline.evaluation.report import evaluation_rows, write_reports
from pipeline.evaluation.tuning import Context, fit_gamma_grid, method_gamma
from pipeline.io.datasets import read_dataset, read_manifest, write_dataset, write_options
from pipeline.io.schemas import EVALUATION, SPLITS
from pipeline.methods.registry import get_method
from pipeline.model.format import read_model_json
from pipeline.training import service as training
from pipeline.training.rows import check_methods_memory

log = logging.getLogger(__name__)

__all__ = [
    "build_report",
    "check_no_leak",
    "choose_model",
    "compare_methods",
    "evaluate_model",
    "evaluate_wordmap_baseline",
    "run_evaluation",
    "train_and_evaluate",
    "write_outputs",
]

EVALUATION_SCHEMA = (
    "setup string, method string, split string, lam double, query_lang string, "
    "target_lang string, measure string, csls_source string, k int, metric string, "
    "value float, n_queries long, n_candidates long"
)


def check_no_leak(spark: SparkSession, cfg: Config, splits: DataFrame, splits_path: str) -> int:
    """Raise when a training (tfidf) row belongs to a test/validation concept; return 0."""
    leaked = count_leaked_rows(spark, cfg, splits.select("concept_id"))
    if leaked:
        raise InputDataError(
            f"{leaked} training (tfidf) rows belong to test/validation concepts of {splits_path}: "
            f"the evaluation would be contaminated. Fix: set features.heldout_concepts="
            f"{splits_path} and rerun the vocabulary, tfidf and train stages"
        )
    return leaked


def choose_model(
    ctx: Context, selecting: bool, validation: list[dict[str, Any]]
) -> tuple[str, dict[str, Any] | None]:
    """The model to evaluate and the λ selection's record (None without selection).

    With ``selecting``, one model per λ of ``evaluate.lambda_grid`` is trained and scored on the
    validation concepts (rows appended to ``validation``); else ``paths.model`` as it is.
    """
    cfg, e = ctx.cfg, ctx.e
    if selecting:

        def score_fn(model_path: str, lam: float) -> tuple[float, dict[str, Any]]:
            ctx.engine.use_model(model_path)
            score, res = validation_score(ctx.engine, ctx.directions, ctx.splits_rows, e)
            for row in res:
                row["lam"] = lam
            validation.extend(res)
            details = {f"{row['query_lang']}->{row['target_lang']}": row["score"] for row in res}
            return score, details

        selection = select_lambda(
            ctx.spark,
            cfg,
            list(e.lambda_grid),
            models_dir=e.lambda_models_dir,
            score_fn=score_fn,
            warm_start=e.lambda_warm_start,
        )
        return selection["chosen_model"], selection
    model_path = cfg.paths.dataset("model")
    if len(e.lambda_grid) == 1:
        lam_model = float(read_model_json(model_path)["lam"])
        if lam_model != float(e.lambda_grid[0]):
            log.warning(
                "evaluate.lambda_grid has one value (%g): no selection; the model at %s "
                "(lambda %g) is evaluated as it is",
                e.lambda_grid[0],
                model_path,
                lam_model,
            )
    return model_path, None


def evaluate_model(
    ctx: Context, model_path: str, meta: dict[str, Any]
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Test rows of the chosen model and its entry in the report's ``methods``."""
    method = str(meta.get("method", "cr5"))
    t0 = time.perf_counter()
    ctx.engine.use_model(model_path)
    test = evaluate_role(
        ctx.engine, ctx.directions, ctx.splits_rows, "test", model_measures(meta, ctx.e), ctx.e
    )
    seconds = time.perf_counter() - t0
    lam = float(meta["lam"])
    for row in test:
        row["lam"] = lam
        row["method"] = method
    entry = {
        "model": str(model_path),
        "r": int(meta["r"]),
        "lam": lam,
        "params": method_params(method, lam, method_gamma(ctx.cfg.train, method)),
        "similarity": str(meta.get("similarity", "cosine")),
        "fit_seconds": meta.get("training", {}).get("fit_seconds"),
        "test_seconds": round(seconds, 2),
    }
    return test, entry


def train_and_evaluate(
    ctx: Context, meta: dict[str, Any], method: str, data: training.TrainingData
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Train ``method`` on the model's training rows and evaluate it on the test concepts.

    Same training rows (train.* selection), same r as the evaluated model (its λ for cr5),
    same splits, candidates and engine: only the method differs. CCA, OPCA and S2Net (whose
    start is OPCA's map) take γ from ``evaluate.gamma_grid`` when it has two or more values,
    chosen on the validation concepts like λ (otherwise their own ``train.<method>.gamma``).
    A method with a similarity of its own (the topic models' L1) is scored with it too
    (:func:`~pipeline.evaluation.protocol.model_measures`). ``data`` is the loaded training rows
    (:func:`pipeline.training.load_training_data`), shared by every fit.
    """
    cfg, e, engine = ctx.cfg, ctx.e, ctx.engine
    directions, splits_rows = ctx.directions, ctx.splits_rows
    base = e.baseline_models_dir or (cfg.paths.root.rstrip("/") + "/baseline_models")
    r = cfg.train.r if meta.get("phi_format") == "selection" else int(meta["r"])
    lam = float(meta["lam"])
    tuned = get_method(method).tuned_by == "gamma"
    gammas: list[float | None] = [method_gamma(cfg.train, method)]
    # fitted once per γ of evaluate.gamma_grid, the best kept, for a method tuned by γ
    if tuned and len(e.gamma_grid) >= 2:
        gammas = list(e.gamma_grid)
    t0 = time.perf_counter()
    base = f"{base.rstrip('/')}/{method}"
    best, curve = fit_gamma_grid(ctx, method, data, gammas=gammas, base=base, r=r, lam=lam)
    train_wall = time.perf_counter() - t0
    path = best["model"]
    t0 = time.perf_counter()
    engine.use_model(path)
    trained_meta = read_model_json(path)
    measures = model_measures(trained_meta, e)
    rows = evaluate_role(engine, directions, splits_rows, "test", measures, e)
    test_seconds = time.perf_counter() - t0
    for row in rows:
        row["lam"] = lam
        row["method"] = method
    return rows, {
        "model": path,
        "r": int(trained_meta["r"]),
        "lam": lam,
        "params": method_params(method, lam, best["gamma"]),
        "similarity": str(trained_meta.get("similarity", "cosine")),
        "fit_seconds": best["fit_seconds"],
        "train_wall_seconds": round(train_wall, 2),
        "test_seconds": round(test_seconds, 2),
        "gamma_selection": None
        if len(gammas) < 2
        else {
            "metric": e.selection_metric,
            "measure": e.selection_measure,
            "curve": curve,
            "chosen": best["gamma"],
        },
    }


def evaluate_wordmap_baseline(
    ctx: Context, method: str
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Test rows of a word-mapping document baseline (``avg_<map>``, the TF-IDF-weighted
    average of mapped word vectors) that the ``translate_words`` stage saved under
    ``words.document_models_dir``, on the directions of the languages it covers."""
    w = ctx.cfg.words
    where = w.document_models_dir or ctx.cfg.paths.root.rstrip("/") + "/wordmap_models"
    path = f"{where.rstrip('/')}/{method}"
    try:
        meta = read_model_json(path)
    except PipelineError as exc:
        raise InputDataError(
            f"evaluate.methods has {method}, but {path} holds no model ({exc}). Fix: run the "
            "word_vectors and translate_words stages first (words.methods with cr5 saves the "
            "avg_<map> document baselines), or drop it from evaluate.methods"
        ) from None
    covered = set(meta["languages"])
    directions = [d for d in ctx.directions if {d.query_lang, d.target_lang} <= covered]
    t0 = time.perf_counter()
    ctx.engine.use_model(path)
    rows = evaluate_role(
        ctx.engine, directions, ctx.splits_rows, "test", list(ctx.e.measures), ctx.e
    )
    for row in rows:
        row["lam"] = float(meta.get("lam", 0.0))
        row["method"] = method
    entry = {
        "model": path,
        "r": int(meta["r"]),
        "lam": float(meta.get("lam", 0.0)),
        "params": {},
        "fit_seconds": None,
        "test_seconds": round(time.perf_counter() - t0, 2),
        "languages": sorted(covered),
    }
    return rows, entry


def compare_methods(
    ctx: Context, meta: dict[str, Any], main_method: str
) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """Train and test every ``evaluate.methods`` entry but the model's own method, on one
    loading of the training rows; (test rows, report entries by method)."""
    rows: list[dict[str, Any]] = []
    entries: dict[str, dict[str, Any]] = {}
    data = None
    methods = [m for m in ctx.e.methods if m != main_method]
    check_methods_memory(ctx.spark, ctx.cfg, methods)
    try:
        for method in methods:
            if method.startswith("avg_"):
                rows_m, entries[method] = evaluate_wordmap_baseline(ctx, method)
                rows += rows_m
                continue
            if data is None:  # loaded once for every method and γ
                # with the evaluated methods (a neural one loads validation documents)
                cfg = dataclasses.replace(ctx.cfg, evaluate=ctx.e)
                data = training.load_training_data(ctx.spark, cfg)
            rows_m, entries[method] = train_and_evaluate(ctx, meta, method, data)
            rows += rows_m
    finally:
        if data is not None:
            data.close()
    return rows, entries


def build_report(
    ctx: Context,
    *,
    setup: str,
    pairs: list[str],
    engine_name: str,
    model_path: str,
    meta: dict[str, Any],
    selection: dict[str, Any] | None,
    methods: dict[str, dict[str, Any]],
    test: list[dict[str, Any]],
    splits_path: str,
    split_manifest: dict[str, Any],
    pool_sizes: dict[str, dict[str, int]],
    leaked: int,
) -> dict[str, Any]:
    """The evaluation's report (the manifest of the ``evaluation`` dataset and the JSON)."""
    e = ctx.e
    trained = meta.get("training", {})
    main = methods[str(meta.get("method", "cr5"))]
    return {
        "setup": setup,
        "model": str(model_path),
        "lam": float(meta["lam"]),
        "r": int(meta["r"]),
        "pairs": pairs,
        "measures": list(e.measures),
        "csls_source": e.csls_source,
        "csls_k": e.csls_k,
        "engine": engine_name,
        "splits": {
            "path": splits_path,
            "seed": split_manifest.get("report", {}).get("seed"),
            "pairs": {p: split_manifest.get("report", {}).get("pairs", {}).get(p) for p in pairs},
        },
        "candidates": {
            "max_candidates": e.max_candidates,
            "seed": e.seed,
            "per_language": pool_sizes,
        },
        "training_documents": trained.get("documents", {}),
        "training_concepts": trained.get("concepts"),
        "leak_check_rows": leaked,
        "lambda_selection": None
        if selection is None
        else {
            "grid": list(e.lambda_grid),
            "metric": e.selection_metric,
            "measure": e.selection_measure,
            "chosen": selection["chosen_lam"],
            "curve": [dict(c) for c in selection["curve"]],
            "backend_load_seconds": selection["backend_load_seconds"],
            "path": selection["path"],
            "fit_order": selection["fit_order"],
        },
        "method": str(meta.get("method", "cr5")),
        "methods": methods,
        "results": test,
        "test_seconds": main["test_seconds"],
    }


def write_outputs(
    ctx: Context,
    report: dict[str, Any],
    setup: str,
    test: list[dict[str, Any]],
    validation: list[dict[str, Any]],
    t_start: float,
) -> dict[str, Any]:
    """The ``evaluation`` dataset (manifest = ``report``), then the report files (which also
    record the dataset's path and the run's total time); their paths."""
    rows = evaluation_rows(setup, test, "test") + evaluation_rows(setup, validation, "validation")
    if report.get("classification"):
        rows += classification_rows(setup, report["classification"])
    df = ctx.spark.createDataFrame(rows, EVALUATION_SCHEMA)
    path = ctx.cfg.paths.dataset("evaluation")
    write_dataset(
        ctx.spark, df, EVALUATION, path, manifest={"report": report}, **write_options(ctx.cfg.paths)
    )
    report["path"] = path
    report["total_seconds"] = round(time.perf_counter() - t_start, 2)
    return write_reports(ctx.cfg, ctx.e, report)


def run_evaluation(
    spark: SparkSession, cfg: Config, e: EvaluateConfig | None = None
) -> dict[str, Any]:
    """Run the evaluation (steps in the module docstring); write the ``evaluation`` dataset and
    the reports; return the report."""
    e = e or cfg.evaluate
    check_evaluate(e)
    t_start = time.perf_counter()
    splits_path = cfg.paths.dataset("splits")
    splits = read_dataset(spark, SPLITS, splits_path)
    split_manifest = read_manifest(spark, SPLITS, splits_path)
    # A grid of λ only means something for a method tuned by λ (Cr5); the others are
    # evaluated as trained.
    selecting = len(e.lambda_grid) >= 2 and get_method(cfg.train.method).tuned_by == "lam"
    setup, _langs, pairs = plan(spark, cfg, e, splits, selecting)
    in_pairs = splits.filter(F.col("pair").isin(pairs))
    leaked = check_no_leak(spark, cfg, splits, splits_path)
    eval_langs = sorted({lang for p in pairs for lang in p.split("-")})
    engine, pool_sizes = open_engine(spark, cfg, e, eval_langs, in_pairs.select("concept_id"))
    log.info("evaluate: %s engine, pairs %s, setup %s", engine.name, pairs, setup)
    ctx = Context(spark, cfg, e, engine, directions_of(pairs), in_pairs.collect())
    validation: list[dict[str, Any]] = []
    try:
        model_path, selection = choose_model(ctx, selecting, validation)
        meta = read_model_json(model_path)
        main_method = str(meta.get("method", "cr5"))
        test, main_entry = evaluate_model(ctx, model_path, meta)
        more_rows, more_entries = compare_methods(ctx, meta, main_method)
    finally:
        if hasattr(engine, "close"):
            engine.close()
    for row in validation:
        row["method"] = main_method
    report = build_report(
        ctx,
        setup=setup,
        pairs=pairs,
        engine_name=engine.name,
        model_path=model_path,
        meta=meta,
        selection=selection,
        methods={main_method: main_entry, **more_entries},
        test=test + more_rows,
        splits_path=splits_path,
        split_manifest=split_manifest,
        pool_sizes=pool_sizes,
        leaked=leaked,
    )
    methods = {main_method: main_entry, **more_entries}
    report["classification"] = (
        run_classification(ctx, methods, eval_langs) if e.classify_labels else None
    )
    report.update(write_outputs(ctx, report, setup, test + more_rows, validation, t_start))
    return report
