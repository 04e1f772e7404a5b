"""The evaluation protocol (design.md §4): which pairs, directions and concepts are scored, how.

For every evaluated pair (l1, l2) and both directions, the queries are the l1 documents of the
pair's test (or validation) concepts and the candidates are the engine's pool of l2 documents
(a seeded sample plus the true targets). Each direction gives P@k and MRR per measure.
These functions are engine-agnostic: an engine (:mod:`pipeline.evaluation.engines`) only has
to answer ``run(direction, concepts, measures, e) -> (results, sizes)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pipeline.config import Config, EvaluateConfig, canonical, parse_pair
from pipeline.errors import ConfigError, InputDataError
from pipeline.io.datasets import read_dataset, read_manifest
from pipeline.io.schemas import TFIDF
from pipeline.methods.registry import find_method
from pipeline.model.format import read_model_json
from pipeline.retrieval import retrieval_metrics

__all__ = [
    "Direction",
    "count_leaked_rows",
    "directions_of",
    "evaluate_role",
    "method_params",
    "model_measures",
    "plan",
    "role_concepts",
    "validation_score",
]


@dataclass(frozen=True)
class Direction:
    """One retrieval direction of a pair: queries in ``query_lang``, targets in ``target_lang``."""

    pair: str
    query_lang: str
    target_lang: str

    @property
    def name(self) -> str:
        return f"{self.query_lang}->{self.target_lang}"


def plan(
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


def count_leaked_rows(spark: SparkSession, cfg: Config, heldout: DataFrame) -> int:
    """Rows of the tfidf (training) dataset whose concept is a test/validation concept."""
    tf = read_dataset(spark, TFIDF, cfg.paths.dataset("tfidf")).select("concept_id")
    return tf.join(F.broadcast(heldout.select("concept_id").distinct()), "concept_id").count()


def role_concepts(splits_rows: list, pair: str, role: str) -> np.ndarray:
    return np.array(
        sorted(r["concept_id"] for r in splits_rows if r["pair"] == pair and r["role"] == role),
        dtype=object,
    )


def evaluate_role(
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
        concepts = role_concepts(splits_rows, d.pair, role)
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


def method_params(method: str, lam: float, gamma: float | None) -> dict[str, float]:
    """The regularisation that tunes ``method`` (its spec's ``tuned_by``), for the report:
    λ, or its own γ (``train.<method>.gamma``; S2Net: that of the OPCA it starts from); empty
    for a method tuned by neither, or a name no
    registered method has (a model trained by a method registered in another process)."""
    spec = find_method(method)
    tuned_by = spec.tuned_by if spec is not None else None
    if tuned_by == "lam":
        return {"λ": lam}
    if tuned_by == "gamma" and gamma is not None:
        return {"γ": gamma}
    return {}


def model_measures(meta: dict[str, Any], e: EvaluateConfig) -> list[str]:
    """The measures a model is scored with: ``evaluate.measures``, and the similarity its
    method defines (``model.json``'s ``similarity``, e.g. ``"l1"`` for a topic model) when
    that is not among them."""
    measures = list(e.measures)
    own = str(meta.get("similarity", "cosine"))
    if own != "cosine" and own not in measures:
        measures.append(own)
    return measures


def validation_score(
    engine: Any, directions: list[Direction], splits_rows: list, e: EvaluateConfig
) -> tuple[float, list[dict[str, Any]]]:
    """Mean ``selection_metric`` (``selection_measure``) over all directions, and the rows."""
    res = evaluate_role(engine, directions, splits_rows, "validation", [e.selection_measure], e)
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


def directions_of(pairs: list[str]) -> list[Direction]:
    """Both directions of every pair ``"a-b"``: a->b, then b->a."""
    out = []
    for p in pairs:
        a, b = p.split("-")
        out += [Direction(p, a, b), Direction(p, b, a)]
    return out
