"""Configuration of the ``split`` and ``evaluate`` stages (design.md §4).

Two frozen dataclasses with typed defaults (the paper's protocol); they become the
``split:`` and ``evaluate:`` sections of :class:`pipeline.config.Config` once registered.
Until then :func:`split_config` / :func:`evaluate_config` return the section of a
:class:`~pipeline.config.Config` when it has one, else the defaults.

Language pairs are written ``"l1-l2"`` (e.g. ``en-de``); a pair is unordered for the
split (``de-en`` is the same pair) and evaluated in both directions.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pipeline.errors import ConfigError
from pipeline.evaluation.retrieval import DEFAULT_BLOCK_C, DEFAULT_BLOCK_Q

__all__ = [
    "EvaluateConfig",
    "SplitConfig",
    "all_pairs",
    "evaluate_config",
    "parse_pair",
    "split_config",
]


def _bounded(default: Any, *, lo: float | None = None, hi: float | None = None) -> Any:
    """A field with an inclusive range, checked by :func:`pipeline.config.load_config`.

    (The same metadata as ``pipeline.config._bounded``; not imported from there so that
    ``pipeline.config`` can import this module.)
    """
    return field(default=default, metadata={"lo": lo, "hi": hi})


@dataclass(frozen=True)
class SplitConfig:
    """Stage ``split``: test and validation concepts per language pair (seeded).

    For each pair, ``n_test`` test and ``n_validation`` validation concepts are drawn
    from the concepts that have a document in both languages. Every concept gets one
    seeded priority and one seeded role (test or validation, in proportion
    ``n_test : n_validation``) shared by all pairs, and each pair takes its concepts of
    each role in priority order: pairs overlap as much as the data allows (fewer
    concepts are lost to training) and a concept never plays two roles.
    The union of all pairs' concepts is removed from vocabulary, IDF and training in
    every language (``features.heldout_concepts`` = the ``splits`` dataset).
    """

    # Pairs "l1-l2"; empty: every pair of ``languages``.
    pairs: list[str] = field(default_factory=list)
    # Languages whose pairs are split when ``pairs`` is empty (empty: all found).
    languages: list[str] = field(default_factory=list)
    n_test: int = _bounded(1000, lo=1)
    n_validation: int = _bounded(1000, lo=0)
    seed: int = _bounded(0, lo=0)
    # At most this fraction of a pair's shared concepts (its intersection) is held out
    # for test + validation, so the rest can train.
    max_heldout_fraction: float = _bounded(0.5, lo=0.01, hi=0.99)
    # A pair whose intersection is too small for n_test + n_validation within
    # max_heldout_fraction: "shrink" both to that fraction (in the ratio n_test :
    # n_validation, with a WARNING in the stage summary and the manifest) or stop ("error").
    on_small_intersection: Literal["shrink", "error"] = "shrink"


@dataclass(frozen=True)
class EvaluateConfig:
    """Stage ``evaluate``: crosslingual retrieval on the held-out concepts.

    Queries are the test (or validation) documents of language l1 of a pair; the
    candidates are up to ``max_candidates`` documents of l2 (seeded sample) plus the
    true targets. Both directions of every pair, with each of ``measures``.
    """

    # Pairs to evaluate ("l1-l2"); empty: every pair of the splits dataset that the
    # model covers (for pairwise / transitive models: the trained pair).
    pairs: list[str] = field(default_factory=list)
    measures: list[Literal["cosine", "csls"]] = field(default_factory=lambda: ["cosine", "csls"])
    # Cut-offs reported as P@k (the table shows these and MRR).
    precision_at: list[int] = field(default_factory=lambda: [1, 5, 10])
    # The precision-at-k curve (dataset rows and plot) goes from k = 1 to this.
    curve_max_k: int = _bounded(10, lo=1)
    # CSLS neighbourhood size and where the candidates' r_S neighbourhood is taken:
    # "queries" (the paper's code) or "collection" (the source-language pool).
    csls_k: int = _bounded(10, lo=1)
    csls_source: Literal["queries", "collection"] = "queries"
    # Candidate documents per target language (seeded sample), plus the true targets.
    max_candidates: int = _bounded(200_000, lo=1)
    seed: int = _bounded(0, lo=0)
    # local: numpy on the driver; spark: candidates partitioned over executors, queries
    # broadcast, partial top-k merged; auto: spark above local_max_candidates.
    engine: Literal["auto", "local", "spark"] = "auto"
    local_max_candidates: int = _bounded(50_000, lo=1)
    # Candidate rows per Spark partition (spark engine).
    partition_rows: int = _bounded(50_000, lo=1)
    block_q: int = _bounded(DEFAULT_BLOCK_Q, lo=1)
    block_c: int = _bounded(DEFAULT_BLOCK_C, lo=1)
    # λ selection on the validation concepts: with two or more values, one model per λ
    # is trained (train.* settings, one corpus backend for all) and the best by
    # selection_metric (mean over pairs and directions) is evaluated on test. With
    # fewer, the model at paths.model is evaluated as it is.
    lambda_grid: list[float] = field(default_factory=list)
    selection_metric: Literal["P@1", "P@5", "P@10", "MRR"] = "P@1"
    selection_measure: Literal["cosine", "csls"] = "cosine"
    # Where the per-λ models go (default <paths.root>/lambda_models).
    lambda_models_dir: str | None = None
    # Markdown/JSON report and PNG plot (default <paths.root>/reports).
    report_dir: str | None = None
    plot: bool = True
    # More methods evaluated beside the model, on the same splits and candidates: each is
    # trained on the same training rows with the model's r (train.method=<m>, saved under
    # baseline_models_dir/<m>, default <paths.root>/baseline_models) and gets its own rows
    # in the report and the evaluation dataset. The model's own method is not repeated.
    methods: list[Literal["cr5", "untranslated", "cl_lsi", "cca", "opca"]] = field(
        default_factory=list
    )
    baseline_models_dir: str | None = None
    # γ of CCA and OPCA, chosen on the validation concepts (selection_metric/measure) when
    # two or more values are given; else train.gamma. Their best γ differs by data size
    # and method (on the bundled sample: CCA 1e-3, OPCA 1e-4; a larger γ turns both
    # into per-language PCA, which cannot retrieve across languages).
    gamma_grid: list[float] = field(default_factory=list)
    # untranslated embeds into sparse vectors over the union vocabulary; retrieval densifies
    # the terms a direction's two sides share (exact, pipeline/evaluation/shared_space.py)
    # up to this size, on the local engine.
    sparse_dense_limit_mb: int = _bounded(2048, lo=1)


def _section(cfg: Any, name: str, cls: type) -> Any:
    value = getattr(cfg, name, None)
    return value if isinstance(value, cls) else cls()


def split_config(cfg: Any) -> SplitConfig:
    """``cfg.split`` when the Config has that section, else the defaults."""
    return _section(cfg, "split", SplitConfig)


def evaluate_config(cfg: Any) -> EvaluateConfig:
    """``cfg.evaluate`` when the Config has that section, else the defaults."""
    return _section(cfg, "evaluate", EvaluateConfig)


def parse_pair(text: str, *, key: str) -> tuple[str, str]:
    """``"en-de"`` -> ``("en", "de")``; a ConfigError naming ``key`` otherwise."""
    parts = [p.strip() for p in str(text).split("-")]
    if len(parts) != 2 or not all(parts) or parts[0] == parts[1]:
        raise ConfigError(
            f"{key}: {text!r} is not a language pair; write two different languages "
            "joined by '-', e.g. en-de"
        )
    return parts[0], parts[1]


def canonical(pair: Sequence[str]) -> str:
    """The unordered pair's name: the two languages sorted, joined by '-'."""
    a, b = sorted(pair)
    return f"{a}-{b}"


def all_pairs(languages: Iterable[str]) -> list[tuple[str, str]]:
    """Every unordered pair of ``languages`` (sorted)."""
    return list(itertools.combinations(sorted(set(languages)), 2))


def check_evaluate(e: EvaluateConfig) -> None:
    """Cross-field checks of the evaluate section (raise ConfigError)."""
    if not e.measures:
        raise ConfigError("evaluate.measures must name at least one of cosine, csls")
    if not e.precision_at or any(k < 1 for k in e.precision_at):
        raise ConfigError(f"evaluate.precision_at must be positive integers; got {e.precision_at}")
    if any(not lam > 0 for lam in e.lambda_grid):
        raise ConfigError(f"evaluate.lambda_grid values must be > 0; got {e.lambda_grid}")
    for i, p in enumerate(e.pairs):
        parse_pair(p, key=f"evaluate.pairs[{i}]")
    if any(not g > 0 for g in e.gamma_grid):
        raise ConfigError(f"evaluate.gamma_grid values must be > 0; got {e.gamma_grid}")
    if len(set(e.methods)) != len(e.methods):
        raise ConfigError(f"evaluate.methods repeats a method: {e.methods}")
    if "untranslated" in e.methods and e.engine == "spark":
        raise ConfigError(
            "evaluate.methods has untranslated, whose sparse vectors need the local engine; "
            "set evaluate.engine=local (or auto) or drop untranslated"
        )
