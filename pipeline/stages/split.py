"""Stage ``split``: seeded test and validation concepts per language pair (design.md §4).

Runs after ``ingest`` and before ``vocabulary``: the ``splits`` dataset it writes is the
``features.heldout_concepts`` of the later stages, so every split concept is removed
from vocabulary, IDF and training in **every** language.

The draw is one Spark job, reproducible from the seed alone:

- every concept gets a priority ``xxhash64(seed, concept_id)`` and a role, test with
  probability ``n_test / (n_test + n_validation)`` from a second hash;
- a pair's candidates are the concepts with a document in both languages; it takes the
  ``n_test`` test-role and ``n_validation`` validation-role concepts of lowest priority.

Because priority and role are shared by all pairs, the pairs' draws overlap as much as
their intersections allow (fewer concepts are lost to training than with independent
draws), and a concept has the same role in every pair it belongs to, so a test query of
one pair is never a validation query of another.
"""

from __future__ import annotations

import logging
import math
import warnings
from typing import Any

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from pipeline.config import Config, SplitConfig, all_pairs, canonical, parse_pair
from pipeline.errors import ConfigError, InputDataError
from pipeline.io.datasets import read_dataset, write_dataset, write_options
from pipeline.io.schemas import DOCUMENTS, SPLITS

log = logging.getLogger(__name__)

ROLES = ("test", "validation")
_ROLE_BUCKETS = 1 << 20


def resolve_pairs(s: SplitConfig, available: list[str]) -> list[tuple[str, str]]:
    """The pairs to split (canonical order), checked against the available languages."""
    if s.pairs:
        pairs = [
            tuple(sorted(parse_pair(p, key=f"split.pairs[{i}]"))) for i, p in enumerate(s.pairs)
        ]
    else:
        langs = list(s.languages) or available
        pairs = all_pairs(langs)
    missing = sorted({lang for p in pairs for lang in p} - set(available))
    if missing:
        raise ConfigError(
            f"split languages {missing} have no documents (the documents dataset has "
            f"{available}); fix split.pairs / split.languages"
        )
    if not pairs:
        raise ConfigError(
            f"no language pair to split: the documents have languages {available}; "
            "set split.pairs (e.g. [en-de]) or split.languages"
        )
    return list(dict.fromkeys(pairs))  # type: ignore[arg-type]


def _test_share(s: SplitConfig) -> float:
    return s.n_test / (s.n_test + s.n_validation)


def quotas(intersection: int, s: SplitConfig) -> tuple[int, int]:
    """How many test and validation concepts a pair with ``intersection`` shared concepts gets.

    ``n_test`` and ``n_validation`` when they fit in ``max_heldout_fraction`` of the
    intersection; otherwise both shrink to ``floor(max_heldout_fraction * intersection)``
    in total, split in the ratio ``n_test : n_validation`` (at least one test concept).
    """
    cap = math.floor(s.max_heldout_fraction * intersection)
    if s.n_test + s.n_validation <= cap:
        return s.n_test, s.n_validation
    n_test = min(cap, max(1, round(cap * _test_share(s))))
    return n_test, max(0, cap - n_test)


def draw_splits(
    docs: DataFrame, pairs: list[tuple[str, str]], s: SplitConfig
) -> tuple[DataFrame, dict[str, dict[str, int]]]:
    """The splits rows and, per pair, the intersection size.

    Parameters
    ----------
    docs : DataFrame with columns concept_id, lang
    pairs : list of (l1, l2), canonical order
    s : SplitConfig

    Returns
    -------
    splits : DataFrame with the columns of :data:`~pipeline.io.schemas.SPLITS`
    intersections : dict pair name -> {"intersection": n, "test_pool": n, "validation_pool": n}
    """
    langs = sorted({lang for p in pairs for lang in p})
    per_concept = (
        docs.filter(F.col("lang").isin(langs))
        .groupBy("concept_id")
        .agg(F.collect_set("lang").alias("langs"))
    )
    pair_cols = [
        F.when(F.array_contains("langs", a) & F.array_contains("langs", b), F.lit(f"{a}-{b}"))
        for a, b in pairs
    ]
    seed = F.lit(s.seed).cast("long")
    role_u = F.pmod(F.xxhash64(seed, F.lit("role"), F.col("concept_id")), F.lit(_ROLE_BUCKETS))
    threshold = round(_test_share(s) * _ROLE_BUCKETS)
    candidates = per_concept.select(
        "concept_id",
        F.explode(F.filter(F.array(*pair_cols), lambda c: c.isNotNull())).alias("pair"),
        F.xxhash64(seed, F.col("concept_id")).alias("hash"),
        F.when(role_u < threshold, F.lit("test")).otherwise(F.lit("validation")).alias("role"),
    ).persist()
    pools: dict[str, dict[str, int]] = {f"{a}-{b}": {"intersection": 0} for a, b in pairs}
    for r in candidates.groupBy("pair", "role").count().collect():
        pools[r["pair"]][f"{r['role']}_pool"] = r["count"]
    for v in pools.values():
        v["intersection"] = v.get("test_pool", 0) + v.get("validation_pool", 0)
    for v in pools.values():
        v["quota_test"], v["quota_validation"] = quotas(v["intersection"], s)
    window = Window.partitionBy("pair", "role").orderBy("hash", "concept_id")
    quota = F.create_map(
        *[
            F.lit(x)
            for name, v in pools.items()
            for role in ROLES
            for x in (f"{name}|{role}", v[f"quota_{role}"])
        ]
    )
    wanted = quota[F.concat_ws("|", "pair", "role")]
    out = (
        candidates.withColumn("priority", F.row_number().over(window).cast("long") - 1)
        .filter(F.col("priority") < wanted)
        .withColumn("seed", seed)
    )
    return out, pools


def run(spark: SparkSession, cfg: Config, split_cfg: SplitConfig | None = None) -> dict[str, Any]:
    """Draw the splits from the documents dataset and write the ``splits`` dataset."""
    s = split_cfg or cfg.split
    docs = read_dataset(spark, DOCUMENTS, cfg.paths.dataset("documents")).select(
        "concept_id", "lang"
    )
    available = sorted(r["lang"] for r in docs.select("lang").distinct().collect())
    pairs = resolve_pairs(s, available)
    splits, pools = draw_splits(docs, pairs, s)
    splits = splits.persist()
    counts: dict[str, dict[str, int]] = {
        name: {"test": 0, "validation": 0, **pools[name]} for name in pools
    }
    for r in splits.groupBy("pair", "role").count().collect():
        counts[r["pair"]][r["role"]] = r["count"]
    short = {
        name: c
        for name, c in counts.items()
        if c["quota_test"] < s.n_test or c["quota_validation"] < s.n_validation
    }
    warnings_: list[str] = []
    if short:
        msg = (
            f"split: some pairs share too few concepts for n_test={s.n_test} + "
            f"n_validation={s.n_validation} within split.max_heldout_fraction="
            f"{s.max_heldout_fraction:g} of their intersection (the rest must train): "
            + "; ".join(
                f"{n}: intersection {c['intersection']}, so at most "
                f"{c['quota_test'] + c['quota_validation']} held out"
                for n, c in short.items()
            )
        )
        if s.on_small_intersection == "error":
            raise InputDataError(
                msg + ". Fix: lower split.n_test / split.n_validation, raise "
                "split.max_heldout_fraction, or set split.on_small_intersection=shrink"
            )
        msg += (
            ". Shrunk to "
            + "; ".join(
                f"{n}: {c['test']} test + {c['validation']} validation" for n, c in short.items()
            )
            + " (lower split.n_test / split.n_validation to silence this)"
        )
        warnings.warn(msg, UserWarning, stacklevel=2)
        log.warning("%s", msg)
        warnings_.append(msg)
    empty = [n for n, c in counts.items() if c["test"] == 0]
    if empty:
        raise InputDataError(
            f"split: pairs {empty} have no test concept (no concept has documents in both "
            "languages); remove them from split.pairs"
        )
    n_concepts = splits.select("concept_id").distinct().count()
    report = {
        "pairs": counts,
        "heldout_concepts": n_concepts,
        "seed": s.seed,
        "n_test": s.n_test,
        "n_validation": s.n_validation,
        "max_heldout_fraction": s.max_heldout_fraction,
        "warnings": warnings_,
    }
    path = cfg.paths.dataset("splits")
    write_dataset(
        spark,
        splits,
        SPLITS,
        path,
        manifest={"report": report, "settings": vars(s)},
        **write_options(cfg.paths),
    )
    splits.unpersist()
    if cfg.heldout_path() != path:
        log.warning(
            "split: features.heldout_concepts is %r, not this splits dataset (%s): the split "
            "concepts will NOT be removed from training. Set features.heldout_concepts=%s "
            "(conf/sample.yaml does)",
            cfg.features.heldout_concepts,
            path,
            path,
        )
    report["path"] = path
    report["concepts"] = n_concepts
    return report


def read_splits(spark: SparkSession, cfg: Config) -> tuple[DataFrame, dict[str, Any]]:
    """The splits dataset and its manifest."""
    from pipeline.io.datasets import read_manifest

    path = cfg.paths.dataset("splits")
    return read_dataset(spark, SPLITS, path), read_manifest(spark, SPLITS, path)


__all__ = ["ROLES", "canonical", "draw_splits", "read_splits", "resolve_pairs", "run"]
