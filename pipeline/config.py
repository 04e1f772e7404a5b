"""Typed configuration: YAML profiles plus ``--set key.path=value`` overrides.

The schema is declared once, as frozen dataclasses below whose fields are
:func:`~pipeline.params.param` declarations (type, default, range, help text); their
defaults are the paper's defaults. A profile (``conf/*.yaml``) only states what it changes.
Several profiles may be layered (later wins), then ``--set`` overrides are applied, then
the merged mapping is checked against the schema: an unknown key or a value of the wrong
type or range is a :class:`~pipeline.errors.ConfigError` naming the key, where it came from
and what is allowed. All of that happens before any SparkSession starts.

This module is the bottom of the package's import graph: it imports only
:mod:`pipeline.errors`, :mod:`pipeline.params` and the (equally leaf)
:mod:`pipeline.wikipedia.config`. Solvers take their keyword defaults from the
``*_DEFAULTS`` instances below, so a default is written exactly once.
"""

from __future__ import annotations

import codecs
import dataclasses
import difflib
import hashlib
import itertools
import json
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from pipeline.errors import ConfigError
from pipeline.params import (
    ParamInfo,
    check_range,
    check_section,
    coerce,
    describe_section,
    param,
    section_params,
)
from pipeline.wikipedia.config import WikipediaConfig


@dataclass(frozen=True)
class SparkConfig:
    """How the SparkSession is built (see :mod:`pipeline.spark`).

    Under ``spark-submit`` the master and driver memory come from the command line
    and ``master``/``driver_memory`` here are ignored.
    """

    master: str = param("local[2]", doc="Spark master URL for plain `python` runs.")
    app_name: str = param("cr5", doc="Spark application name.")
    driver_memory: str = param("4g", doc="Driver JVM heap for plain `python` runs.")
    shuffle_partitions: int = param(8, lo=1, doc="spark.sql.shuffle.partitions.")
    ui: bool = param(False, doc="Start the Spark web UI.")
    conf: dict[str, str] = param(
        default_factory=dict,
        doc='Extra Spark properties, e.g. {"spark.executor.memory": "8g"}.',
    )
    driver_malloc_tuning: bool = param(
        True,
        doc="Python driver process (glibc): keep freed blocks up to 64 MB in the heap and trim "
        "it only above 256 MB (pipeline/allocator.py), instead of returning pages to the OS "
        "and faulting them back in: the first Cr5 fit in a process ran 14 % faster on DDTP "
        "(r = 100). Up to 256 MB of freed memory stays with each malloc arena, and the "
        "arenas are capped at 2 (glibc: 8 per core): the driver peak of the 100k wikishape "
        "train fell by 0.45 GB (22-26 %) at the same fit time.",
    )


@dataclass(frozen=True)
class PathsConfig:
    """Where datasets live. Each dataset defaults to ``<root>/<name>``."""

    root: str = param("./out", doc="Directory (or URI) under which every dataset lives.")
    format: Literal["parquet", "delta"] = param(
        "parquet",
        doc="How every stage writes its datasets. parquet: a directory with a _manifest.json, "
        "replaced atomically by rename. delta: a Delta Lake table, one commit (a new table "
        "version, history kept) per write, the manifest in the commit's userMetadata; Spark's "
        "own Delta writer when Delta's jars are on the classpath, else delta-rs commits the "
        "Parquet files Spark wrote (pip install 'cr5-on-spark[delta]'). Readers read any path "
        "holding a _delta_log/ as Delta. See deploy/README.md, 'Delta Lake output'.",
    )
    write_lock_wait_seconds: float = param(
        600.0,
        lo=0.0,
        doc="A second run writing the same dataset waits this long for the first to finish, "
        "then fails (exit 2) naming it; 0: fail at once (pipeline/io/publish.py).",
    )
    stale_write_seconds: float = param(
        300.0,
        lo=1.0,
        doc="A writer's lock and temporary directory count as abandoned when its heartbeat "
        "(every min(30 s, this / 4)) is older than this (on the writer's own host a dead pid "
        "is recognised at once); only then are they removed by another run.",
    )
    documents: str | None = param(
        None, doc="Path of the documents dataset (default <root>/documents)."
    )
    vocabulary: str | None = param(None, doc="Path of the vocabulary dataset.")
    tfidf: str | None = param(None, doc="Path of the tfidf dataset.")
    concepts: str | None = param(None, doc="Path of the concepts dataset.")
    splits: str | None = param(None, doc="Path of the splits dataset.")
    model: str | None = param(None, doc="Path of the model directory.")
    embeddings: str | None = param(None, doc="Path of the embeddings dataset.")
    evaluation: str | None = param(None, doc="Path of the evaluation dataset.")
    word_vectors: str | None = param(
        None, doc="Directory of the monolingual word vectors (stage word_vectors)."
    )

    def dataset(self, name: str) -> str:
        """Return the path of dataset ``name`` (explicit setting, else ``<root>/<name>``)."""
        explicit = getattr(self, name)
        if explicit:
            return str(explicit)
        return self.root.rstrip("/") + "/" + name


@dataclass(frozen=True)
class IngestConfig:
    """Reading an aligned corpus (``doc_id, concept_id, lang, title, text``)."""

    input: str = param(
        "data/sample/ddtp_en_de_fr_es.parquet",
        doc="Aligned corpus: Parquet, JSON Lines or TSV with concept_id, lang, text "
        "(+ optional doc_id, title).",
    )
    format: Literal["auto", "parquet", "jsonl", "tsv"] = param(
        "auto", doc="Input format; auto: from the file extension."
    )
    encoding: str = param("utf-8", doc="Text encoding of JSON Lines / TSV input.")
    languages: list[str] = param(
        default_factory=list, doc="Keep only these languages (empty: all found in the input)."
    )
    on_duplicate: Literal["keep_first", "error"] = param(
        "keep_first",
        doc="Several documents for one (concept, language): keep the smallest doc_id "
        "(counted and reported) or fail.",
    )
    on_empty_text: Literal["drop", "error"] = param(
        "drop", doc="Documents with an empty text: drop them (counted) or fail."
    )
    max_examples: int = param(5, lo=1, doc="Offending records quoted in an error or report.")


@dataclass(frozen=True)
class TextConfig:
    """The one tokeniser used for training and inference (:mod:`pipeline.text.tokenizer`)."""

    normalization: Literal["NFKC", "NFC", "none"] = param(
        "NFKC", doc="Unicode normalisation applied before tokenising."
    )
    lowercase: bool = param(True, doc="Lower-case tokens (Greek final sigma folded).")
    split_cjk: bool = param(True, doc="Emit each Han ideograph / kana character as its own token.")
    min_token_length: int = param(1, lo=1, doc="Shorter tokens are dropped.")


@dataclass(frozen=True)
class FeaturesConfig:
    """Vocabulary, IDF and the training-document filter (paper defaults)."""

    max_vocabulary: int = param(200_000, lo=1, doc="Most frequent words kept per language.")
    min_df: int = param(3, lo=1, doc="Words in fewer training documents are dropped.")
    min_unique_words: int = param(
        50, lo=0, doc="Training documents need at least this many distinct words."
    )
    max_unique_words: int = param(
        1000, lo=1, doc="Training documents may have at most this many distinct words."
    )
    on_dropped_language: Literal["warn", "error"] = param(
        "warn",
        doc="A language left with no vocabulary by the filters (too few or too short "
        "documents, or every concept held out) disappears from tfidf and model: warn (a "
        "WARNING in the stage summary and the vocabulary manifest) or error.",
    )
    heldout_concepts: str | None = param(
        None,
        doc="Parquet dataset with a concept_id column, or the word `splits` for this run's "
        "splits dataset: these concepts' documents are excluded from vocabulary, IDF and the "
        "training matrix.",
    )


@dataclass(frozen=True)
class TrainConfig:
    """Stage ``train``: which rows train, the backend, and the Cr5 solver's parameters.

    The solver parameters here are the single source of the defaults and ranges of
    :class:`pipeline.linalg.cr5.Cr5Solver`, the Woodbury/CG solvers and the baselines.
    """

    method: Literal["cr5", "untranslated", "cl_lsi", "cca", "opca"] = param(
        "cr5",
        doc="cr5, or a baseline of pipeline/baselines trained on the same rows and saved in "
        "the same model format (untranslated: a sparse selection model, r = |union "
        "vocabulary|; the λ and solver settings do not apply to it).",
    )
    gamma: float = param(
        1e-3,
        lo=0.0,
        lo_open=True,
        doc="Regularisation of the CCA and OPCA baselines (per-sample covariances).",
    )
    setup: Literal["joint", "pairwise", "transitive"] = param(
        "joint",
        doc="joint: every language; pairwise: only train.pair; transitive: the two languages "
        "of train.pair share no training concept and connect only through the others.",
    )
    pair: list[str] = param(
        default_factory=list, doc="The two languages of a pairwise or transitive setup."
    )
    languages: list[str] = param(
        default_factory=list,
        doc="Restrict training to these languages (empty: all languages of the tfidf dataset).",
    )
    backend: Literal["local", "spark"] = param(
        "local",
        doc="local: X collected to the driver as scipy CSR; spark: X cached on the executors "
        "as CSR blocks.",
    )
    on_single_language: Literal["warn", "error"] = param(
        "warn",
        doc="Training rows of a single language give a model that is not crosslingual: warn "
        "(recorded in model.json and the stage summary) or error.",
    )
    partitions_per_language: int | None = param(
        None,
        lo=1,
        doc="spark backend: row partitions per language of X (each cached as one CSR block, "
        "~8 bytes per nonzero). None: one block up to 2M nonzeros, else "
        "max(defaultParallelism, ceil(nnz_l / 2M)).",
    )
    solve_in_task_max_nnz: int | None = param(
        None,
        lo=0,
        doc="spark backend: a language with at most this many nonzeros runs each CG solve as "
        "ONE fused Spark job: every solving task gathers all the language's cached blocks "
        "(~24 bytes per nonzero of Python memory per task at peak) and solves its share of "
        "the right-hand sides, instead of one job per CG iteration; 0: never. None: in local "
        "mode, what a quarter of the machine's memory holds for solve_tasks tasks; on a "
        "cluster 64M (~1.5 GB per task, inside spark.executor.memoryOverhead).",
    )
    solve_in_task_memory_mb: int = param(
        512,
        lo=1,
        doc="spark backend: working memory of one solving task's CG vectors (~9 arrays per "
        "term and right-hand side in train.cg_dtype: 36 bytes in float32, 72 in float64; "
        "columns run in chunks that fit). With the gathered blocks "
        "this is Python memory on the executor: on YARN/Kubernetes it counts against "
        "spark.executor.memoryOverhead (or spark.executor.pyspark.memory).",
    )
    solve_tasks: int | None = param(
        None,
        lo=1,
        doc="spark backend: tasks of one fused solve, each solving a share of the right-hand "
        "sides with its own copy of X_l; None: Spark's default parallelism.",
    )
    dtype: Literal["float32", "float64"] = param("float32", doc="Arithmetic of the passes over X.")
    lam: float = param(1.0, lo=0.0, lo_open=True, doc="Ridge parameter λ.")
    r: int = param(300, lo=1, doc="Embedding dimension (< number of concepts, <= terms).")
    oversampling: int = param(
        20, lo=0, doc="Extra eigensolver columns beyond r (caps the block width at r + this)."
    )
    cg_rtol: float = param(
        0.03,
        lo=0.0,
        hi=1.0,
        lo_open=True,
        hi_open=True,
        doc="Per-language block CG relative residual tolerance (the paper's ε is 0.01: "
        "~1.4x the CG work for the same held-out P@1 within ±0.5 point on the DDTP and "
        'synthetic benchmarks, bench/README.md "Knobs").',
    )
    cg_maxiter: int = param(500, lo=1, doc="Per-language block CG iteration cap (paper's T).")
    cg_dtype: Literal["float32", "float64"] | None = param(
        None,
        doc="Working precision of the eigensolver's CG vectors (iterates, residuals, "
        "directions); None: train.dtype. float32 halves the CG's dense memory traffic: "
        "against float64 on the float32 backend, the same iterations, column-passes and "
        "held-out P@1, fits 0.93x the time on DDTP r = 100, 0.85x at r = 300 and on the "
        'synthetic 200k corpus (medians of 3, bench/README.md "Solver knobs"). The w = '
        "B⁻¹μ solve (train.w_rtol) is float64 always.",
    )
    precond_rank: int = param(
        32,
        lo=0,
        doc="Eigen-directions of each language's Jacobi-scaled X_lᵀX_l + λI deflated in the "
        "CG preconditioner, found once per λ by randomized subspace iteration (4 passes of "
        "precond_rank + 8 columns per language); 0: plain Jacobi. DDTP, λ = 1: 9-12 CG "
        "iterations per solve instead of 11-18 (pipeline/linalg/preconditioner.py).",
    )
    w_rtol: float = param(
        1e-6,
        lo=0.0,
        hi=1.0,
        lo_open=True,
        hi_open=True,
        doc="Tolerance of the solve w = B⁻¹μ (the Woodbury constant amplifies its error).",
    )
    eig_rtol: float = param(
        0.1,
        lo=0.0,
        hi=1.0,
        lo_open=True,
        hi_open=True,
        doc="Eigensolver tolerance: relative Ritz residual (paper: 0.1).",
    )
    eig_maxiter: int = param(250, lo=1, doc="Eigensolver iteration cap (paper: 250).")
    seed: int = param(0, lo=0, doc="Seeds the eigensolver's start block.")
    max_basis: int | None = param(
        None,
        lo=3,
        doc="Eigensolver thick-restart size: the driver keeps a K x max_basis float64 basis and "
        "p x max_basis float32 images, whatever the iteration count. None: max(r, b) + 4b "
        "(b the block width).",
    )
    block_size: int | None = param(
        None,
        lo=1,
        doc="Eigensolver block width; None: min(r + oversampling, max(24, r // 12)) with the "
        "warm start, min(r + oversampling, max(32, r // 6)) from a random block (capped at K).",
    )
    start_steps: int = param(
        2,
        lo=0,
        doc="Subspace-iteration steps on the cheap surrogate CᵀD⁻¹C that warm the "
        "eigensolver's start block; 0: random start block.",
    )
    path_factors: list[float] = param(
        default_factory=list,
        lo=1.0,
        lo_open=True,
        doc="Fit Cr5 first at λ times each factor (largest first), each fit starting the next "
        "from its Ritz vectors and solves, then at train.lam from the last (a regularisation "
        "path, as evaluate.lambda_warm_start fits a grid); the model is the last fit. [10] "
        "against none (held-out P@1, fit time): DDTP r = 100 +1.9 points (worst direction "
        "+4.8) in 1.46x; r = 300 +1.2 in 1.8x; synthetic 200k +2.3 in 0.86x; the bundled "
        "sample -0.1 in 1.26x. In a λ path grid it applies to the first (largest) λ only.",
    )
    reuse_solves: bool = param(
        True,
        doc="Form Φ*ᵀ from the eigensolver's own solves Â⁻¹CV (p x basis float32 of memory) "
        "instead of r further right-hand sides at the end.",
    )
    stop_rule: Literal["residual", "validation"] = param(
        "residual",
        doc="What ends the eigensolver: residual (every Ritz pair within eig_rtol) or "
        "validation (P@1 of train.validation_concepts held-out concepts, scored after every "
        "iteration, has not improved for stop_patience iterations; the best iteration is "
        "returned, and the residual rule still ends the run if met first; the driver keeps "
        "that iteration's p x r float64 Φ*ᵀ). validation needs the split stage's concepts "
        "(features.heldout_concepts: splits).",
    )
    stop_patience: int = param(
        2, lo=1, doc="stop_rule=validation: iterations without improvement before stopping."
    )
    validation_concepts: int = param(
        500,
        lo=1,
        doc="stop_rule=validation: validation concepts (lowest split priority) whose documents "
        "are embedded and retrieved among each other after every eigensolver iteration.",
    )
    max_workers: int | None = param(
        None, lo=1, doc="Concurrent language passes / solves (None: one per language)."
    )
    checkpoint_dir: str | None = param(
        None,
        doc="Resumable checkpoints (default <paths.root>/checkpoints/train-<config hash>); "
        '"" disables them.',
    )
    checkpoint_every: int = param(1, lo=1, doc="Eigensolver iterations between checkpoints.")
    checkpoint_seconds: float = param(
        60.0,
        lo=0.0,
        doc="Least wall time between two eigensolver checkpoints (each writes the Lanczos "
        "basis and the kept images; written after every iteration they took 8-13 % of the "
        "Spark fit of the 100k-document wikishape corpus). A failure then loses at most "
        "this much work plus one iteration; 0: every train.checkpoint_every iterations. "
        "The state after the last iteration is always written.",
    )

    def backend_options(self) -> dict[str, Any]:
        """Keyword options of :func:`pipeline.backends.make_backend`."""
        if self.backend != "spark":
            return {}
        opts: dict[str, Any] = {
            "solve_in_task_max_nnz": self.solve_in_task_max_nnz,
            "solve_in_task_memory_mb": self.solve_in_task_memory_mb,
            "solve_tasks": self.solve_tasks,
        }
        if self.partitions_per_language is not None:
            opts["partitions_per_language"] = self.partitions_per_language
        return opts

    def solver_params(self) -> dict[str, Any]:
        """The keyword arguments of :class:`~pipeline.linalg.cr5.Cr5Solver` (but
        ``checkpoint_dir``, which the train stage resolves)."""
        return {k: getattr(self, k) for k in SOLVER_KEYS}


#: ``train.*`` keys that are :class:`~pipeline.linalg.cr5.Cr5Solver` parameters.
SOLVER_KEYS: tuple[str, ...] = (
    "lam",
    "r",
    "oversampling",
    "cg_rtol",
    "cg_maxiter",
    "cg_dtype",
    "precond_rank",
    "w_rtol",
    "eig_rtol",
    "eig_maxiter",
    "seed",
    "max_basis",
    "block_size",
    "start_steps",
    "reuse_solves",
    "stop_rule",
    "stop_patience",
    "max_workers",
    "checkpoint_every",
    "checkpoint_seconds",
)


@dataclass(frozen=True)
class EmbedConfig:
    """Stage ``embed``: documents to the ``embeddings`` dataset with a trained model."""

    input: str | None = param(
        None,
        doc="Parquet or JSON Lines with doc_id, lang, text (concept_id optional); default: "
        "the documents dataset.",
    )
    format: Literal["auto", "parquet", "jsonl"] = param("auto", doc="Format of embed.input.")
    languages: list[str] = param(
        default_factory=list,
        doc="Embed only these languages (empty: every language of the model found in the input).",
    )
    on_unknown_language: Literal["warn", "error"] = param(
        "warn",
        doc="Input documents in a language the model lacks: skipped with a WARNING in the "
        "report, or refused.",
    )
    batch_rows: int = param(
        4096, lo=1, doc="Documents per Arrow batch on the executors: bounds their memory."
    )
    normalize: bool = param(False, doc="L2-normalise the vectors (cosine does not need it).")
    direct_write: bool = param(
        True,
        doc="With paths.format parquet and a local (or locally mounted) output path, the "
        "Python workers write the Parquet files straight from Arrow (the vectors never cross "
        "into the JVM, ~4x faster); false, or any other store: Spark's writer.",
    )
    direct_read: bool = param(
        True,
        doc="With direct_write and a Parquet input (the documents dataset or embed.input, not "
        "Delta) on a local or locally mounted path, the Python workers read its row groups "
        "with pyarrow (the texts never pass through the JVM); false, JSON Lines, Delta or "
        "other stores: Spark's reader.",
    )


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
    Language pairs are written ``"l1-l2"`` (e.g. ``en-de``); a pair is unordered here.
    """

    pairs: list[str] = param(
        default_factory=list, doc='Pairs "l1-l2"; empty: every pair of split.languages.'
    )
    languages: list[str] = param(
        default_factory=list,
        doc="Languages whose pairs are split when split.pairs is empty (empty: all found).",
    )
    n_test: int = param(1000, lo=1, doc="Test concepts per pair.")
    n_validation: int = param(1000, lo=0, doc="Validation concepts per pair (for λ, γ).")
    seed: int = param(0, lo=0, doc="Seed of the concept priorities and roles.")
    max_heldout_fraction: float = param(
        0.5,
        lo=0.01,
        hi=0.99,
        doc="At most this fraction of a pair's shared concepts is held out for test + "
        "validation, so the rest can train.",
    )
    on_small_intersection: Literal["shrink", "error"] = param(
        "shrink",
        doc="A pair whose intersection is too small for n_test + n_validation within "
        "max_heldout_fraction: shrink both to that fraction (in the ratio n_test : "
        "n_validation, with a WARNING in the stage summary and the manifest) or stop.",
    )


@dataclass(frozen=True)
class EvaluateConfig:
    """Stage ``evaluate``: crosslingual retrieval on the held-out concepts.

    Queries are the test (or validation) documents of language l1 of a pair; the
    candidates are up to ``max_candidates`` documents of l2 (seeded sample) plus the
    true targets. Both directions of every pair, with each of ``measures``.
    """

    pairs: list[str] = param(
        default_factory=list,
        doc='Pairs to evaluate ("l1-l2"); empty: every pair of the splits dataset that the '
        "model covers (pairwise / transitive models: the trained pair).",
    )
    measures: list[Literal["cosine", "csls"]] = param(
        default_factory=lambda: ["cosine", "csls"], doc="Similarities evaluated."
    )
    precision_at: list[int] = param(
        default_factory=lambda: [1, 5, 10], lo=1, doc="Cut-offs reported as P@k (with MRR)."
    )
    curve_max_k: int = param(
        10, lo=1, doc="The precision-at-k curve (rows and plot) goes from k = 1 to this."
    )
    csls_k: int = param(10, lo=1, doc="CSLS neighbourhood size.")
    csls_source: Literal["queries", "collection"] = param(
        "queries",
        doc="Where the candidates' r_S neighbourhood is taken: the queries (the paper's code) "
        "or the source-language pool.",
    )
    max_candidates: int = param(
        200_000, lo=1, doc="Candidate documents per target language (seeded sample) + targets."
    )
    seed: int = param(0, lo=0, doc="Seed of the candidate sample.")
    engine: Literal["auto", "local", "spark"] = param(
        "auto",
        doc="local: numpy on the driver; spark: candidates partitioned over executors, queries "
        "broadcast, partial top-k merged; auto: spark above evaluate.local_max_candidates.",
    )
    local_max_candidates: int = param(
        50_000, lo=1, doc="engine=auto switches to spark above this many candidates."
    )
    partition_rows: int = param(50_000, lo=1, doc="Candidate rows per Spark partition.")
    block_q: int = param(1024, lo=1, doc="Query rows per scoring block (bounds memory).")
    block_c: int = param(4096, lo=1, doc="Candidate rows per scoring block (bounds memory).")
    lambda_grid: list[float] = param(
        default_factory=list,
        lo=0.0,
        lo_open=True,
        doc="λ selection on the validation concepts: with two or more values one model per λ "
        "is trained (train.* settings, one corpus backend for all) and the best by "
        "evaluate.selection_metric is evaluated on test; with fewer, the model at "
        "paths.model is evaluated as it is.",
    )
    selection_metric: Literal["P@1", "P@5", "P@10", "MRR"] = param(
        "P@1", doc="Metric (mean over pairs and directions) that chooses λ and γ."
    )
    selection_measure: Literal["cosine", "csls"] = param(
        "cosine", doc="Similarity of the selection metric."
    )
    lambda_models_dir: str | None = param(
        None,
        doc="Where the per-λ models go (default <paths.root>/lambda_models). A λ path also "
        "keeps its resume checkpoint there (.path-<hash>: the finished models and the last "
        "fit's start, K x (r + oversampling) float64 and p x (r + oversampling) float32), so "
        "a rerun after a failure fits only the λ values the path had not finished, and a "
        "rerun of a finished path none.",
    )
    lambda_warm_start: bool = param(
        True,
        doc="Fit the λ grid as a regularisation path: from the largest λ down, each fit "
        "started from the previous fit's r + oversampling leading Ritz vectors, with their "
        "solves as initial CG guesses (C does not depend on λ), and run to the same "
        "residual rule as any fit. Grid 0.3/1/3/10 against one fit (column-passes, median "
        "wall): synthetic 200k 1.25x, 1.5x; bundled sample 2.24x, 2.6x; DDTP r = 100 2.23x, "
        "2.5x; DDTP r = 300 2.65x, 3.3x; independent fits 4x. Its models at the smaller λ "
        "retrieve as well or better (DDTP r = 100, held-out P@1 at λ = 1: 0.970 against 0.948), so "
        "the chosen λ can differ from independent fits'. With a tight train.eig_rtol it "
        "saves little (0.01: 49 iterations at λ = 0.3 against 51). false: independent fits "
        "from the surrogate start (the train stage's model is then reused for its λ).",
    )
    report_dir: str | None = param(
        None, doc="Markdown/JSON report and PNG plot (default <paths.root>/reports)."
    )
    plot: bool = param(True, doc="Draw the precision-at-k plot.")
    methods: list[
        Literal[
            "cr5",
            "untranslated",
            "cl_lsi",
            "cca",
            "opca",
            "avg_procrustes",
            "avg_procrustes_refined",
            "avg_rcsls",
        ]
    ] = param(
        default_factory=list,
        doc="More methods evaluated beside the model on the same splits and candidates, each "
        "trained on the same rows with the model's r (saved under "
        "evaluate.baseline_models_dir/<method>); avg_<map>: the word-mapping document "
        "baselines the translate_words stage saved (words.document_models_dir), evaluated on "
        "the directions of their language pair.",
    )
    baseline_models_dir: str | None = param(
        None, doc="Where evaluate.methods' models go (default <paths.root>/baseline_models)."
    )
    gamma_grid: list[float] = param(
        default_factory=list,
        lo=0.0,
        lo_open=True,
        doc="γ of CCA and OPCA chosen on the validation concepts when two or more values are "
        "given; else train.gamma. (On the bundled sample: CCA 1e-3, OPCA 1e-4; a larger γ "
        "turns both into per-language PCA.)",
    )
    sparse_dense_limit_mb: int = param(
        2048,
        lo=1,
        doc="untranslated: retrieval densifies the terms a direction's two sides share "
        "(exact) up to this size, on the local engine.",
    )


@dataclass(frozen=True)
class WordsConfig:
    """Stages ``word_vectors`` and ``translate_words``: monolingual word2vec per language and
    word translation (Cr5's Φ rows, orthogonal Procrustes, RCSLS) on a bilingual lexicon."""

    languages: list[str] = param(
        default_factory=list,
        doc="Languages to train word vectors for; empty: the two of words.pair.",
    )
    dim: int = param(300, lo=1, doc="word2vec vector size.")
    window: int = param(5, lo=1, doc="word2vec context window.")
    min_count: int = param(5, lo=1, doc="word2vec: rarer words get no vector.")
    max_iter: int = param(5, lo=1, doc="word2vec epochs over the language's documents.")
    step_size: float = param(0.025, lo=0.0, lo_open=True, doc="word2vec learning rate.")
    partitions: int = param(
        1, lo=1, doc="word2vec numPartitions (more is faster, slightly less accurate)."
    )
    seed: int = param(0, lo=0, doc="Seed of word2vec and of the lexicon split.")
    lexicon: str | None = param(
        None,
        doc="Bilingual lexicon TSV (source_word<TAB>target_word), source = first language of "
        "words.pair; build one with scripts/build_lexicon.py.",
    )
    pair: list[str] = param(
        default_factory=lambda: ["en", "de"], doc="Source and target language of the lexicon."
    )
    n_test: int = param(1500, lo=1, doc="Test source words of the lexicon (paper: 1,500).")
    n_validation: int = param(500, lo=0, doc="Validation source words (RCSLS lr and epochs).")
    max_candidates: int = param(
        200_000, lo=1, doc="Target words ranked (most frequent first); also RCSLS negatives."
    )
    methods: list[Literal["cr5", "cr5_phi_star", "procrustes", "rcsls"]] = param(
        default_factory=lambda: ["cr5", "procrustes", "rcsls"],
        doc="cr5: rows of the model's Φ (paths.model); cr5_phi_star: rows of its Φ*ᵀ = "
        "ΦᵀΛ^½Qᵀ before orthonormalisation (models saved with Λ, Q); procrustes / rcsls: "
        "maps of the word_vectors fitted on the lexicon's training part.",
    )
    rcsls_k: int = param(10, lo=1, doc="RCSLS neighbourhood size (paper: 10).")
    rcsls_constraint: Literal["unit_ball", "orthogonal"] = param(
        "unit_ball", doc="Projection after each RCSLS step (the paper's spectral unit ball)."
    )
    rcsls_learning_rates: list[float] = param(
        default_factory=lambda: [1.0, 10.0],
        lo=0.0,
        lo_open=True,
        doc="RCSLS learning rates tried; the best on validation P@1 (CSLS) is kept.",
    )
    rcsls_epochs: list[int] = param(
        default_factory=lambda: [5, 10, 25],
        lo=0,
        doc="Full-batch RCSLS steps compared on validation (one run per rate, snapshots).",
    )
    refine_iterations: int = param(
        0,
        lo=0,
        doc="Procrustes refinement: re-induce a dictionary from mutual CSLS nearest "
        "neighbours among the words.refine_vocabulary most frequent words and refit, this "
        "many times (adds method procrustes_refined).",
    )
    refine_vocabulary: int = param(15_000, lo=1, doc="Words considered by the refinement.")
    csls_k: int = param(10, lo=1, doc="CSLS neighbourhood size in word translation.")
    report_dir: str | None = param(
        None, doc="Where words.json / words.md go (default <paths.root>/reports)."
    )
    document_models_dir: str | None = param(
        None,
        doc="With cr5 or cr5_phi_star among words.methods: where the document baselines "
        "(TF-IDF-weighted average of mapped word vectors, one model per map, over the Cr5 "
        "model's vocabulary) are saved as avg_<method>/ for evaluate (paths.model=...); default "
        "<paths.root>/wordmap_models.",
    )


@dataclass(frozen=True)
class Config:
    """The whole configuration of a pipeline run."""

    spark: SparkConfig = field(default_factory=SparkConfig)
    paths: PathsConfig = field(default_factory=PathsConfig)
    ingest: IngestConfig = field(default_factory=IngestConfig)
    text: TextConfig = field(default_factory=TextConfig)
    features: FeaturesConfig = field(default_factory=FeaturesConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    embed: EmbedConfig = field(default_factory=EmbedConfig)
    split: SplitConfig = field(default_factory=SplitConfig)
    evaluate: EvaluateConfig = field(default_factory=EvaluateConfig)
    wikipedia: WikipediaConfig = field(default_factory=WikipediaConfig)
    words: WordsConfig = field(default_factory=WordsConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def heldout_path(self) -> str | None:
        """``features.heldout_concepts`` resolved: the word ``splits`` names the splits
        dataset of this run (``paths.dataset("splits")``), so profiles need not repeat
        ``paths.root``."""
        value = self.features.heldout_concepts
        return self.paths.dataset("splits") if value == "splits" else value

    def fingerprint(self, *sections: str) -> str:
        """A short stable hash of the named sections (all when none), for provenance."""
        data = self.to_dict()
        if sections:
            data = {s: data[s] for s in sections}
        blob = json.dumps(data, sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


#: Defaults of each section, for keyword defaults elsewhere (one source of every value).
TRAIN_DEFAULTS = TrainConfig()
TEXT_DEFAULTS = TextConfig()
EVALUATE_DEFAULTS = EvaluateConfig()


# --------------------------------------------------------------------------- loading


def load_config(
    profiles: Iterable[str | Path] = (),
    overrides: Iterable[str] = (),
) -> Config:
    """Load and validate a configuration.

    Parameters
    ----------
    profiles : iterable of path
        YAML files, merged in order (later values win, mappings merge recursively).
    overrides : iterable of str
        ``key.path=value`` strings; ``value`` is parsed as YAML (``3`` is an int,
        ``[en, de]`` a list, ``null`` None).

    Raises
    ------
    ConfigError
        For an unreadable file, an unknown key, a wrong type or an out-of-range value;
        the message names the key and its source.
    """
    merged: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for profile in profiles:
        data = _read_yaml(Path(profile))
        _deep_merge(merged, data, sources, source=str(profile))
    for item in overrides:
        key, value = _parse_override(item)
        nested: dict[str, Any] = {}
        cursor = nested
        parts = key.split(".")
        for part in parts[:-1]:
            cursor = cursor.setdefault(part, {})
        cursor[parts[-1]] = value
        _deep_merge(merged, nested, sources, source=f"--set {item}")
    return validate(_build(Config, merged, prefix="", sources=sources))


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read configuration file {path}: {exc.strerror}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"configuration file {path} is not valid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"configuration file {path} must hold a mapping of sections, got {type(data).__name__}"
        )
    return data


def _parse_override(item: str) -> tuple[str, Any]:
    key, sep, raw = item.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise ConfigError(
            f"override {item!r} must look like section.key=value (e.g. features.min_df=2)"
        )
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise ConfigError(f"override {item!r}: value is not valid YAML: {exc}") from exc
    return key, value


def _deep_merge(
    into: dict[str, Any],
    new: Mapping[str, Any],
    sources: dict[str, str],
    *,
    source: str,
    prefix: str = "",
) -> None:
    for key, value in new.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and isinstance(into.get(key), dict):
            _deep_merge(into[key], value, sources, source=source, prefix=path + ".")
        else:
            into[key] = dict(value) if isinstance(value, Mapping) else value
            sources[path] = source
            # Children of a replaced mapping come from the same source.
            if isinstance(value, Mapping):
                for sub in value:
                    sources[f"{path}.{sub}"] = source


def _where(key: str, sources: Mapping[str, str]) -> str:
    src = sources.get(key)
    if src is None:
        # A child inherits the source of the nearest parent that was set as a whole.
        parts = key.split(".")
        for i in range(len(parts) - 1, 0, -1):
            src = sources.get(".".join(parts[:i]))
            if src:
                break
    return f" (from {src})" if src else ""


def _build(cls: type, data: Any, *, prefix: str, sources: Mapping[str, str]) -> Any:
    if not isinstance(data, Mapping):
        name = prefix.rstrip(".")
        raise ConfigError(
            f"configuration key {name!r}{_where(name, sources)} must be a mapping, "
            f"got {type(data).__name__} {data!r}"
        )
    infos = {info.name: info for info in section_params(cls)}
    for key in data:
        if key not in infos:
            full = prefix + str(key)
            near = difflib.get_close_matches(str(key), infos, n=1)
            hint = f"; did you mean {prefix + near[0]!r}?" if near else ""
            raise ConfigError(
                f"unknown configuration key {full!r}{_where(full, sources)}"
                f"{hint} (allowed in {prefix.rstrip('.') or 'the top level'}: "
                f"{', '.join(sorted(infos))})"
            )
    kwargs = {}
    for name, info in infos.items():
        if name not in data:
            continue
        key = prefix + name
        where = _where(key, sources)
        if dataclasses.is_dataclass(info.type):
            value = data[name] if data[name] is not None else {}
            kwargs[name] = _build(info.type, value, prefix=key + ".", sources=sources)
            continue
        kwargs[name] = coerce(info.type, data[name], key=key, where=where)
        check_range(info, kwargs[name], key=key, where=where)
    return cls(**kwargs)


# --------------------------------------------------------------------------- checks


def validate(cfg: Config) -> Config:
    """Cross-field checks that a single field's type and range cannot express."""
    f = cfg.features
    if f.min_unique_words > f.max_unique_words:
        raise ConfigError(
            f"features.min_unique_words ({f.min_unique_words}) must not exceed "
            f"features.max_unique_words ({f.max_unique_words})"
        )
    check_evaluate(cfg.evaluate)
    for i, p in enumerate(cfg.split.pairs):
        parse_pair(p, key=f"split.pairs[{i}]")
    t = cfg.train
    if t.setup != "joint" and (len(t.pair) != 2 or t.pair[0] == t.pair[1]):
        raise ConfigError(
            f"train.setup={t.setup!r} needs train.pair to name two different languages, "
            f"e.g. --set 'train.pair=[en, de]' (got {t.pair!r})"
        )
    w = cfg.words
    if len(w.pair) != 2 or w.pair[0] == w.pair[1]:
        raise ConfigError(
            f"words.pair must name two different languages, source first, e.g. "
            f"--set 'words.pair=[en, de]' (got {w.pair!r})"
        )
    try:
        codecs.lookup(cfg.ingest.encoding)
    except LookupError as exc:
        raise ConfigError(
            f"ingest.encoding {cfg.ingest.encoding!r} is not a known text encoding "
            "(try utf-8, latin-1, cp1252, utf-16)"
        ) from exc
    return cfg


def check_evaluate(e: EvaluateConfig) -> None:
    """Every check of the evaluate section, also for one built in Python (raise ConfigError)."""
    check_section(e, prefix="evaluate.")
    if not e.measures:
        raise ConfigError("evaluate.measures must name at least one of cosine, csls")
    if not e.precision_at:
        raise ConfigError("evaluate.precision_at must name at least one cut-off, e.g. [1, 5, 10]")
    for i, p in enumerate(e.pairs):
        parse_pair(p, key=f"evaluate.pairs[{i}]")
    if len(set(e.methods)) != len(e.methods):
        raise ConfigError(f"evaluate.methods repeats a method: {e.methods}")
    if "untranslated" in e.methods and e.engine == "spark":
        raise ConfigError(
            "evaluate.methods has untranslated, whose sparse vectors need the local engine; "
            "set evaluate.engine=local (or auto) or drop untranslated"
        )


# --------------------------------------------------------------------------- language pairs


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


# --------------------------------------------------------------------------- reference


def param_info(key: str) -> ParamInfo:
    """The declaration of ``section.key`` (type, default, range, doc)."""
    section, _, name = key.partition(".")
    hints = typing.get_type_hints(Config)
    if section not in hints:
        raise ConfigError(f"unknown configuration section {section!r}; sections: {list(hints)}")
    for info in section_params(hints[section]):
        if info.name == name:
            return info
    raise ConfigError(f"unknown configuration key {key!r}")


def reference_markdown(sections: Sequence[str] | None = None) -> str:
    """The configuration reference (every key, allowed values, default, meaning) as Markdown,
    generated from the declarations above (``python -m pipeline config-reference``)."""
    hints = typing.get_type_hints(Config)
    names = sections or [f.name for f in dataclasses.fields(Config)]
    lines: list[str] = []
    if not sections:
        lines += [
            "# Configuration reference",
            "",
            "Every key of every section: its allowed values, default and meaning, generated from",
            "the declarations in `pipeline/config.py` (`python -m pipeline config-reference >",
            "docs/configuration.md`; a test keeps this file current). `jobs/<stage>.py",
            "--help-config [SECTION]` prints the same. Set keys in a YAML profile (`--conf`) or",
            "with `--set section.key=value` (the value is YAML).",
            "",
        ]
    for name in names:
        if name not in hints:
            raise ConfigError(f"unknown configuration section {name!r}; sections: {list(hints)}")
        lines.extend(describe_section(name, hints[name]))
    return "\n".join(lines)
