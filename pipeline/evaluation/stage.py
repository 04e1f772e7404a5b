"""Stage ``evaluate``: crosslingual retrieval on the held-out concepts (design.md §4).

For every evaluated pair (l1, l2) and both directions, the queries are the l1 documents
of the pair's test concepts (``splits`` dataset) and the candidates are a seeded sample of
up to ``evaluate.max_candidates`` l2 documents plus the true targets (other candidates
may be training documents, as in the paper). Retrieval with cosine and CSLS, exact
(:mod:`.retrieval`), locally on the driver or over Spark (:mod:`.spark_retrieval`);
P@k and MRR per direction × measure.

Flow: check that no split concept is in the training rows (on the data) → build the pool
of documents once (candidate samples + held-out documents) → [λ selection on the
validation concepts, :mod:`.lambda_selection`] → embed the pool with the chosen model
through the public embedding path → retrieve → the ``evaluation`` dataset, a Markdown and
JSON report and the precision-at-k plot (:mod:`.report`).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import scipy.sparse as sp
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pipeline.config import Config
from pipeline.errors import ConfigError, InputDataError
from pipeline.evaluation import retrieval_metrics, retrieve
from pipeline.evaluation.config import (
    EvaluateConfig,
    canonical,
    check_evaluate,
    evaluate_config,
    parse_pair,
)
from pipeline.evaluation.report import evaluation_rows, write_reports
from pipeline.evaluation.shared_space import densify_cross_sides
from pipeline.evaluation.spark_retrieval import retrieve_spark
from pipeline.features.indexing import dense_index
from pipeline.io.datasets import read_dataset, read_manifest, write_dataset, write_options
from pipeline.io.schemas import DOCUMENTS, EVALUATION, SPLITS, TFIDF
from pipeline.model.cr5_model import Cr5Model
from pipeline.model.format import read_model_json
from pipeline.model.shipping import resolve_model_location, ship_model

log = logging.getLogger(__name__)

__all__ = ["Direction", "run", "run_evaluation"]


@dataclass(frozen=True)
class Direction:
    """One retrieval direction of a pair: queries in ``query_lang``, targets in ``target_lang``."""

    pair: str
    query_lang: str
    target_lang: str

    @property
    def name(self) -> str:
        return f"{self.query_lang}->{self.target_lang}"


# --------------------------------------------------------------------------- the pool


def _pool_frame(
    spark: SparkSession, cfg: Config, e: EvaluateConfig, langs: list[str], heldout: DataFrame
) -> tuple[DataFrame, dict[str, dict[str, int]]]:
    """Documents to embed: per language the candidate sample plus the held-out documents.

    Columns doc_id, concept_id, lang, text, in_sample (bool: in the language's seeded
    sample of up to ``max_candidates`` documents, by ``xxhash64(seed, doc_id)``).
    """
    docs = (
        read_dataset(spark, DOCUMENTS, cfg.paths.dataset("documents"))
        .filter(F.col("lang").isin(langs))
        .select("doc_id", "concept_id", "lang", "text")
        .withColumn("_h", F.xxhash64(F.lit(e.seed).cast("long"), F.col("doc_id")))
    )
    counts = {r["lang"]: r["count"] for r in docs.groupBy("lang").count().collect()}
    in_sample = F.lit(False)
    sizes: dict[str, dict[str, int]] = {}
    for lang in langs:
        n = counts.get(lang, 0)
        sizes[lang] = {"documents": n, "sample": min(n, e.max_candidates)}
        if n <= e.max_candidates:
            cond = F.col("lang") == lang
        else:
            last = (
                docs.filter(F.col("lang") == lang)
                .select("_h", "doc_id")
                .orderBy("_h", "doc_id")
                .limit(e.max_candidates)
                .agg(F.max(F.struct("_h", "doc_id")).alias("m"))
                .first()["m"]
            )
            cond = (F.col("lang") == lang) & (
                (F.col("_h") < last["_h"])
                | ((F.col("_h") == last["_h"]) & (F.col("doc_id") <= last["doc_id"]))
            )
        in_sample = in_sample | cond
    held = F.broadcast(heldout.select("concept_id").distinct().withColumn("_held", F.lit(True)))
    pool = (
        docs.withColumn("in_sample", in_sample)
        .join(held, "concept_id", "left")
        .filter(F.col("in_sample") | F.col("_held").isNotNull())
        .select("doc_id", "concept_id", "lang", "text", "in_sample")
    )
    return pool, sizes


# --------------------------------------------------------------------------- embedding

_WORKER_MODELS: dict[str, Cr5Model] = {}


def _pool_embed_fn(location: str, key: str):
    """``mapInArrow``: the embed job's :func:`embed_batch` (the public path) + pool columns."""
    from pipeline.embedding.job import embed_batch

    def fn(batches):
        if key not in _WORKER_MODELS:
            where = resolve_model_location(location)
            _WORKER_MODELS[key] = Cr5Model.load(where, verify=False, lazy=True)
        model = _WORKER_MODELS[key]
        for batch in batches:
            out = embed_batch(
                model, batch.select(["doc_id", "lang", "concept_id", "text"]), normalize=False
            )
            yield pa.RecordBatch.from_arrays(
                [*out.columns, batch.column("in_sample"), batch.column("pos")],
                names=[*out.schema.names, "in_sample", "pos"],
            )

    return fn


_EMBEDDED_SCHEMA = (
    "doc_id string, lang string, concept_id string, n_terms int, vector array<float>, "
    "in_sample boolean, pos long"
)


@dataclass
class _LocalLanguage:
    doc_id: np.ndarray
    concept_id: np.ndarray
    in_sample: np.ndarray
    texts: pa.Array
    vectors: np.ndarray | None = None
    n_terms: np.ndarray | None = None


class _LocalEngine:
    """The pool on the driver; retrieval with the numpy engine."""

    name = "local"

    def __init__(self, pool: DataFrame, langs: list[str]) -> None:
        table = pool.orderBy("lang", "doc_id").toArrow()
        self.langs: dict[str, _LocalLanguage] = {}
        for lang in langs:
            sub = table.filter(pc.equal(table.column("lang"), lang))
            self.langs[lang] = _LocalLanguage(
                doc_id=np.asarray(sub.column("doc_id").to_pylist(), dtype=object),
                concept_id=np.asarray(sub.column("concept_id").to_pylist(), dtype=object),
                in_sample=sub.column("in_sample").to_numpy(),
                texts=sub.column("text").combine_chunks(),
            )

    def use_model(self, path: str) -> None:
        """Embed every pool document with the model at ``path`` (Cr5Model.embed)."""
        model = Cr5Model.load(path)
        for lang, data in self.langs.items():
            data.vectors, data.n_terms = model.embed_with_counts(data.texts, lang)

    def run(
        self, d: Direction, concepts: np.ndarray, measures: list[str], e: EvaluateConfig
    ) -> tuple[dict[str, Any], dict[str, int]]:
        src, tgt = self.langs[d.query_lang], self.langs[d.target_lang]
        q_sel = np.flatnonzero(np.isin(src.concept_id, concepts))
        q_sel = q_sel[np.argsort(src.concept_id[q_sel], kind="stable")]
        t_mask = np.isin(tgt.concept_id, concepts)
        cand = np.flatnonzero(tgt.in_sample | t_mask)
        where = {c: i for i, c in enumerate(tgt.concept_id[cand]) if t_mask[cand[i]]}
        targets = np.array([where.get(c, -1) for c in src.concept_id[q_sel]], dtype=np.int64)
        queries, candidates = src.vectors[q_sel], tgt.vectors[cand]
        source = None
        if "csls" in measures and e.csls_source == "collection":
            collection = src.in_sample.copy()
            collection[q_sel] = True
            source = src.vectors[collection]
        if sp.issparse(queries):
            queries, candidates, source = densify_cross_sides(
                queries, candidates, source, max_bytes=e.sparse_dense_limit_mb * 2**20
            )
        results = {}
        for m in measures:
            kw: dict[str, Any] = {"block_q": e.block_q, "block_c": e.block_c}
            if m == "csls":
                kw.update(csls_k=e.csls_k, source=e.csls_source)
                if source is not None:
                    kw["source_embeddings"] = source
            results[m] = retrieve(m, queries, candidates, targets, **kw)
        sizes = {
            "n_queries": int(q_sel.size),
            "n_candidates": int(cand.size),
            "zero_queries": int(np.count_nonzero(src.n_terms[q_sel] == 0)),
            "zero_candidates": int(np.count_nonzero(tgt.n_terms[cand] == 0)),
        }
        return results, sizes


class _SparkEngine:
    """The pool embedded on the executors; retrieval with candidates partitioned."""

    name = "spark"

    def __init__(self, pool: DataFrame, e: EvaluateConfig) -> None:
        self.spark = pool.sparkSession
        self.pool = dense_index(pool, ["lang", "doc_id"], "pos").persist(
            StorageLevel.MEMORY_AND_DISK
        )
        self.embedded: DataFrame | None = None
        self.e = e

    def use_model(self, path: str) -> None:
        sc = self.spark.sparkContext
        meta = read_model_json(path)
        if meta.get("phi_format", "dense") == "selection":
            raise ConfigError(
                f"model {path} embeds into sparse vectors ({meta.get('method')}), which the "
                "spark evaluation engine does not handle; set evaluate.engine=local"
            )
        location = ship_model(sc, path)
        key = f"{location}@{meta.get('created_utc')}"
        if self.embedded is not None:
            self.embedded.unpersist()
        self.embedded = self.pool.mapInArrow(
            _pool_embed_fn(location, key), _EMBEDDED_SCHEMA
        ).persist(StorageLevel.MEMORY_AND_DISK)

    def run(
        self, d: Direction, concepts: np.ndarray, measures: list[str], e: EvaluateConfig
    ) -> tuple[dict[str, Any], dict[str, int]]:
        emb = self.embedded
        conc = F.broadcast(
            self.spark.createDataFrame(
                [(str(c),) for c in concepts], "concept_id string"
            ).withColumn("_sel", F.lit(True))
        )
        q = (
            emb.filter(F.col("lang") == d.query_lang)
            .join(conc, "concept_id")
            .select("concept_id", "doc_id", "n_terms", "vector")
            .orderBy("concept_id")
            .toArrow()
        )
        r = int(q.column("vector").combine_chunks().value_lengths()[0].as_py()) if q.num_rows else 0
        queries = (
            q.column("vector").combine_chunks().flatten().to_numpy().reshape(q.num_rows, r)
        ).astype(np.float32)
        tgt = emb.filter(F.col("lang") == d.target_lang).join(conc, "concept_id", "left")
        t_rows = tgt.filter(F.col("_sel").isNotNull()).select("concept_id", "pos").collect()
        where = {row["concept_id"]: row["pos"] for row in t_rows}
        targets = np.array(
            [where.get(c, -1) for c in q.column("concept_id").to_pylist()], dtype=np.int64
        )
        cand = tgt.filter(F.col("in_sample") | F.col("_sel").isNotNull())
        stats = cand.agg(
            F.count(F.lit(1)).alias("n"),
            F.sum(F.when(F.col("n_terms") == 0, 1).otherwise(0)).alias("zeros"),
        ).first()
        n_c = int(stats["n"])
        parts = max(self.spark.sparkContext.defaultParallelism, math.ceil(n_c / e.partition_rows))
        cand = (
            cand.select(F.col("pos").alias("index"), "vector")
            .repartition(parts)
            .persist(StorageLevel.MEMORY_AND_DISK)
        )
        source = None
        if "csls" in measures and e.csls_source == "collection":
            s = (
                emb.filter(F.col("lang") == d.query_lang)
                .join(conc, "concept_id", "left")
                .filter(F.col("in_sample") | F.col("_sel").isNotNull())
                .select("vector")
                .toArrow()
            )
            source = s.column("vector").combine_chunks().flatten().to_numpy().reshape(-1, r)
        results = {}
        try:
            for m in measures:
                kw: dict[str, Any] = {"block_q": e.block_q, "block_c": e.block_c}
                if m == "csls":
                    kw.update(csls_k=e.csls_k, source=e.csls_source, source_embeddings=source)
                results[m] = retrieve_spark(
                    m, queries, cand, targets, description=f"evaluate {d.name}", **kw
                )
        finally:
            cand.unpersist()
        sizes = {
            "n_queries": int(q.num_rows),
            "n_candidates": n_c,
            "zero_queries": int(np.count_nonzero(q.column("n_terms").to_numpy() == 0)),
            "zero_candidates": int(stats["zeros"] or 0),
        }
        return results, sizes

    def close(self) -> None:
        if self.embedded is not None:
            self.embedded.unpersist()
        self.pool.unpersist()


# --------------------------------------------------------------------------- the stage


def _plan(
    spark: SparkSession, cfg: Config, e: EvaluateConfig, splits: DataFrame, selecting: bool
) -> tuple[str, list[str], list[str]]:
    """(setup, model languages, evaluated pairs)."""
    split_pairs = sorted(r["pair"] for r in splits.select("pair").distinct().collect())
    if selecting:
        t = cfg.train
        setup, pair = t.setup, list(t.pair)
        tf = read_manifest(spark, TFIDF, cfg.paths.dataset("tfidf"))["report"]["languages"]
        langs = list(pair) if setup == "pairwise" else (list(t.languages) or list(tf))
    else:
        meta = read_model_json(cfg.paths.dataset("model"))
        sel = meta.get("training", {}).get("selection", {})
        setup, pair = sel.get("setup", "joint"), list(sel.get("pair", []))
        langs = list(meta["languages"])
    if e.pairs:
        wanted = [
            canonical(parse_pair(p, key=f"evaluate.pairs[{i}]")) for i, p in enumerate(e.pairs)
        ]
        missing = [p for p in wanted if p not in split_pairs]
        if missing:
            raise ConfigError(
                f"evaluate.pairs {missing} are not in the splits dataset (it has {split_pairs}); "
                "add them to split.pairs and rerun split, vocabulary, tfidf and train"
            )
    else:
        wanted = split_pairs
    pairs = [p for p in wanted if all(lang in langs for lang in p.split("-"))]
    if setup != "joint":
        pairs = [p for p in pairs if p == canonical(pair)]
    if not pairs:
        raise ConfigError(
            f"no pair to evaluate: splits pairs {split_pairs}, requested {wanted}, model "
            f"languages {langs}, setup {setup!r} (pair {pair}); a pairwise/transitive model "
            "is evaluated on its train.pair, which must be in the splits"
        )
    return setup, langs, pairs


def _leak_check(spark: SparkSession, cfg: Config, heldout: DataFrame) -> int:
    """Rows of the tfidf (training) dataset whose concept is a test/validation concept."""
    tf = read_dataset(spark, TFIDF, cfg.paths.dataset("tfidf")).select("concept_id")
    return tf.join(F.broadcast(heldout.select("concept_id").distinct()), "concept_id").count()


def _role_concepts(splits_rows: list, pair: str, role: str) -> np.ndarray:
    return np.array(
        sorted(r["concept_id"] for r in splits_rows if r["pair"] == pair and r["role"] == role),
        dtype=object,
    )


def _evaluate_role(
    engine: Any,
    directions: list[Direction],
    splits_rows: list,
    role: str,
    measures: list[str],
    e: EvaluateConfig,
) -> list[dict[str, Any]]:
    out = []
    ks = sorted(set(e.precision_at) | set(range(1, e.curve_max_k + 1)))
    for d in directions:
        concepts = _role_concepts(splits_rows, d.pair, role)
        if concepts.size == 0:
            continue
        results, sizes = engine.run(d, concepts, measures, e)
        for m, res in results.items():
            met = retrieval_metrics(res.ranks, ks)
            out.append(
                {
                    "pair": d.pair,
                    "query_lang": d.query_lang,
                    "target_lang": d.target_lang,
                    "measure": m,
                    "csls_source": res.csls_source,
                    "precision_at": {int(k): v for k, v in met.precision_at.items()},
                    "mrr": met.mrr,
                    "missing_targets": met.n_missing_targets,
                    **sizes,
                }
            )
    return out


def _method_params(method: str, lam: float, gamma: float) -> dict[str, float]:
    """The regularisation that applies to ``method`` (for the report)."""
    if method == "cr5":
        return {"λ": lam}
    if method in ("cca", "opca"):
        return {"γ": gamma}
    return {}


def _validation_score(
    engine: Any, directions: list[Direction], splits_rows: list, e: EvaluateConfig
) -> tuple[float, list[dict[str, Any]]]:
    """Mean ``selection_metric`` (``selection_measure``) over all directions, and the rows."""
    res = _evaluate_role(engine, directions, splits_rows, "validation", [e.selection_measure], e)
    if not res:
        raise InputDataError(
            "selection needs validation concepts; the splits have none for the evaluated "
            "pairs (split.n_validation=0?)"
        )
    key = e.selection_metric
    vals = [row["mrr"] if key == "MRR" else row["precision_at"][int(key[2:])] for row in res]
    for row, v in zip(res, vals):
        row["score"] = v
    return float(np.mean(vals)), res


def _train_and_evaluate(
    spark: SparkSession,
    cfg: Config,
    e: EvaluateConfig,
    engine: Any,
    directions: list[Direction],
    splits_rows: list,
    meta: dict[str, Any],
    method: str,
    data: Any,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Train ``method`` on the model's training rows and evaluate it on the test concepts.

    Same training rows (train.* selection), same r as the evaluated model (its λ for cr5),
    same splits, candidates and engine: only the method differs. CCA and OPCA take γ from
    ``evaluate.gamma_grid`` when it has two or more values, chosen on the validation
    concepts like λ (otherwise ``train.gamma``). ``data`` is the loaded training rows
    (:func:`pipeline.training.load_training_data`), shared by every fit.
    """
    from pipeline import training

    base = e.baseline_models_dir or (cfg.paths.root.rstrip("/") + "/baseline_models")
    r = cfg.train.r if meta.get("phi_format") == "selection" else int(meta["r"])
    lam = float(meta["lam"])
    gammas = [cfg.train.gamma]
    if method in ("cca", "opca") and len(e.gamma_grid) >= 2:
        gammas = list(e.gamma_grid)
    curve: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    for gamma in gammas:
        path = f"{base.rstrip('/')}/{method}"
        if len(gammas) > 1:
            path += f"/gamma={gamma:g}"
        sub = dataclasses.replace(
            cfg,
            train=dataclasses.replace(cfg.train, method=method, r=r, lam=lam, gamma=gamma),
            paths=dataclasses.replace(cfg.paths, model=path),
        )
        log.info("evaluate: training %s (r=%d, γ=%g) into %s", method, r, gamma, path)
        trained = training.run(spark, sub, data)
        point = {"gamma": gamma, "model": path, "fit_seconds": trained["fit_seconds"]}
        if len(gammas) > 1:
            engine.use_model(path)
            point["score"], _ = _validation_score(engine, directions, splits_rows, e)
            log.info(
                "evaluate: %s γ=%g validation %s %.4f",
                method,
                gamma,
                e.selection_metric,
                point["score"],
            )
        curve.append(point)
    train_wall = time.perf_counter() - t0
    # The highest validation score; ties (and a single γ, unscored) keep the first.
    best = max(curve, key=lambda c: c.get("score", 0.0))
    path = best["model"]
    t0 = time.perf_counter()
    engine.use_model(path)
    rows = _evaluate_role(engine, directions, splits_rows, "test", list(e.measures), e)
    test_seconds = time.perf_counter() - t0
    for row in rows:
        row["lam"] = lam
        row["method"] = method
    return rows, {
        "model": path,
        "r": int(read_model_json(path)["r"]),
        "lam": lam,
        "params": _method_params(method, lam, best["gamma"]),
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


def run_evaluation(
    spark: SparkSession, cfg: Config, e: EvaluateConfig | None = None
) -> dict[str, Any]:
    """Run the evaluation; write the ``evaluation`` dataset and the reports; return a report."""
    from pipeline import training
    from pipeline.evaluation.lambda_selection import select_lambda

    e = e or evaluate_config(cfg)
    check_evaluate(e)
    t_start = time.perf_counter()
    splits_path = cfg.paths.dataset("splits")
    splits = read_dataset(spark, SPLITS, splits_path)
    split_manifest = read_manifest(spark, SPLITS, splits_path)
    # A grid of λ only means something for Cr5; baselines are evaluated as trained.
    selecting = len(e.lambda_grid) >= 2 and cfg.train.method == "cr5"
    setup, _langs, pairs = _plan(spark, cfg, e, splits, selecting)
    splits_rows = splits.filter(F.col("pair").isin(pairs)).collect()
    heldout = splits.filter(F.col("pair").isin(pairs)).select("concept_id")

    leaked = _leak_check(spark, cfg, splits.select("concept_id"))
    if leaked:
        raise InputDataError(
            f"{leaked} training (tfidf) rows belong to test/validation concepts of {splits_path}: "
            f"the evaluation would be contaminated. Fix: set features.heldout_concepts="
            f"{splits_path} and rerun the vocabulary, tfidf and train stages"
        )
    directions = []
    for p in pairs:
        a, b = p.split("-")
        directions += [Direction(p, a, b), Direction(p, b, a)]
    eval_langs = sorted({lang for p in pairs for lang in p.split("-")})
    pool, pool_sizes = _pool_frame(spark, cfg, e, eval_langs, heldout)
    largest = max(v["sample"] for v in pool_sizes.values())
    engine_name = e.engine
    if engine_name == "auto":
        engine_name = "spark" if largest > e.local_max_candidates else "local"
        if engine_name == "spark" and "untranslated" in e.methods:
            log.warning(
                "evaluate: local engine for all methods (untranslated's sparse vectors need it), "
                "although %d candidates exceed evaluate.local_max_candidates=%d",
                largest,
                e.local_max_candidates,
            )
            engine_name = "local"
    engine = _LocalEngine(pool, eval_langs) if engine_name == "local" else _SparkEngine(pool, e)
    log.info("evaluate: %s engine, pairs %s, setup %s", engine_name, pairs, setup)

    selection = None
    validation: list[dict[str, Any]] = []
    if selecting:

        def score_fn(model_path: str, lam: float) -> tuple[float, dict[str, Any]]:
            engine.use_model(model_path)
            score, res = _validation_score(engine, directions, splits_rows, e)
            for row in res:
                row["lam"] = lam
            validation.extend(res)
            details = {f"{row['query_lang']}->{row['target_lang']}": row["score"] for row in res}
            return score, details

        selection = select_lambda(
            spark, cfg, list(e.lambda_grid), models_dir=e.lambda_models_dir, score_fn=score_fn
        )
        model_path = selection["chosen_model"]
    else:
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
    meta = read_model_json(model_path)
    main_method = str(meta.get("method", "cr5"))
    t_eval = time.perf_counter()
    engine.use_model(model_path)
    test = _evaluate_role(engine, directions, splits_rows, "test", list(e.measures), e)
    eval_seconds = time.perf_counter() - t_eval
    lam = float(meta["lam"])
    for row in test:
        row["lam"] = lam
        row["method"] = main_method
    methods = {
        main_method: {
            "model": str(model_path),
            "r": int(meta["r"]),
            "lam": lam,
            "params": _method_params(main_method, lam, cfg.train.gamma),
            "fit_seconds": meta.get("training", {}).get("fit_seconds"),
            "test_seconds": round(eval_seconds, 2),
        }
    }
    data = None
    try:
        for method in [m for m in e.methods if m != main_method]:
            if data is None:  # loaded once for every method and γ
                data = training.load_training_data(spark, cfg)
            rows_m, methods[method] = _train_and_evaluate(
                spark, cfg, e, engine, directions, splits_rows, meta, method, data
            )
            test += rows_m
    finally:
        if data is not None:
            data.close()
        if hasattr(engine, "close"):
            engine.close()

    for row in validation:
        row["method"] = main_method
    rows = evaluation_rows(setup, test, "test") + evaluation_rows(setup, validation, "validation")
    df = spark.createDataFrame(
        rows,
        "setup string, method string, split string, lam double, query_lang string, "
        "target_lang string, measure string, csls_source string, k int, metric string, "
        "value float, n_queries long, n_candidates long",
    )
    path = cfg.paths.dataset("evaluation")
    training = meta.get("training", {})
    report: dict[str, Any] = {
        "setup": setup,
        "model": str(model_path),
        "lam": lam,
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
        "training_documents": training.get("documents", {}),
        "training_concepts": training.get("concepts"),
        "leak_check_rows": leaked,
        "lambda_selection": None
        if selection is None
        else {
            "grid": list(e.lambda_grid),
            "metric": e.selection_metric,
            "measure": e.selection_measure,
            "chosen": selection["chosen_lam"],
            "curve": [{k: v for k, v in c.items()} for c in selection["curve"]],
            "backend_load_seconds": selection["backend_load_seconds"],
        },
        "method": main_method,
        "methods": methods,
        "results": test,
        "test_seconds": round(eval_seconds, 2),
    }
    write_dataset(
        spark, df, EVALUATION, path, manifest={"report": report}, **write_options(cfg.paths)
    )
    report["path"] = path
    report["total_seconds"] = round(time.perf_counter() - t_start, 2)
    files = write_reports(cfg, e, report)
    report.update(files)
    return report


def run(spark: SparkSession, cfg: Config) -> dict[str, Any]:
    """The registered stage: ``run_evaluation`` with ``cfg.evaluate``."""
    return run_evaluation(spark, cfg, evaluate_config(cfg))
