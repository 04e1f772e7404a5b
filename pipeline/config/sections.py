"""The configuration's schema: one frozen dataclass per section, and :class:`Config`.

Every field is a :func:`~pipeline.params.param` declaration (type, default, range, help text);
the defaults are the paper's. Parameters that belong to the maths are declared by the maths and
embedded here: :class:`TrainConfig` subclasses :class:`~pipeline.linalg.params.Cr5Params` and
:class:`~pipeline.backends.params.BackendParams` and nests each registered method's own class
under its name (``train.jplsa.topic_prior``), :class:`EvaluateConfig` subclasses
:class:`~pipeline.retrieval.params.RetrievalParams`, so ``train.lam`` is the solver's own
declaration of λ. Loading and checking a configuration is :mod:`pipeline.config.loader`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pipeline.backends.params import BackendParams, backend_options
from pipeline.errors import ConfigError
from pipeline.linalg.params import Cr5Params
from pipeline.methods.registry import get_method, legacy_keys, method_names, method_sections
from pipeline.params import NESTED, Choice, check_section, param
from pipeline.retrieval.params import RetrievalParams
from pipeline.wikipedia.config import WikipediaConfig

__all__ = [
    "DOCUMENT_BASELINES",
    "EVALUATE_DEFAULTS",
    "SEARCH_DEFAULTS",
    "TEXT_DEFAULTS",
    "TRAIN_DEFAULTS",
    "Config",
    "EmbedConfig",
    "EvaluateConfig",
    "FeaturesConfig",
    "IngestConfig",
    "PathsConfig",
    "SearchConfig",
    "SparkConfig",
    "SplitConfig",
    "TextConfig",
    "TrainConfig",
    "WordsConfig",
    "evaluated_methods",
]

#: The word-mapping document baselines the translate_words stage saves (``avg_<map>``), which
#: ``evaluate.methods`` may name beside the registered methods.
DOCUMENT_BASELINES = ("avg_procrustes", "avg_procrustes_refined", "avg_rcsls")


def evaluated_methods() -> tuple[str, ...]:
    """The allowed values of ``evaluate.methods``: every registered method
    (:func:`pipeline.methods.registry.method_names`, read when a value is checked, so a
    method registered at run time counts), then :data:`DOCUMENT_BASELINES`."""
    return (*method_names(), *DOCUMENT_BASELINES)


@dataclass(frozen=True)
class SparkConfig:
    """How the SparkSession is built (see :mod:`pipeline.spark`).

    Under ``spark-submit`` the master and driver memory come from the command line
    and ``master``/``driver_memory`` here are ignored; every other property the submission
    sets (``--conf``, ``--properties-file``, spark-defaults.conf) wins over the one here.
    """

    master: str = param("local[2]", doc="Spark master URL for plain `python` runs.")
    app_name: str = param("cr5", doc="Spark application name.")
    driver_memory: str = param(
        "auto",
        doc="Driver JVM heap for plain `python` runs (local mode: the JVM of the driver and "
        "the executors), a JVM size such as 8g, or auto: what the machine's usable memory "
        "(85 % of it, or what is available if less) leaves after the stage's Python needs, "
        'at most half of it, at least 2g (docs/performance.md, "Memory").',
    )
    shuffle_partitions: int = param(8, lo=1, doc="spark.sql.shuffle.partitions.")
    ui: bool | None = param(
        None,
        doc="Start the Spark web UI. null (the default): on for a cluster master, off for a "
        "local[...] one (a laptop or CI machine never listens on a public port). Under "
        "spark-submit, --conf spark.ui.enabled wins (deploy/README.md, 'Which setting wins').",
    )
    conf: dict[str, str] = param(
        default_factory=dict,
        doc='Extra Spark properties, e.g. {"spark.executor.memory": "8g"}.',
    )
    master_wait_seconds: float = param(
        20.0,
        lo=0.0,
        doc="A spark:// master that does not accept connections is retried for this long "
        "before the run stops (exit 2) with a message naming it, instead of Spark's own "
        "minute of registration attempts; 0: one attempt (pipeline/failures.py).",
    )
    progress_seconds: float = param(
        30.0,
        lo=0.0,
        doc="While a stage's Spark jobs run, log one line this often: the stage, the jobs and "
        "their descriptions, tasks done/total, the rate and an ETA (nothing while no Spark job "
        "is active); on a terminal a one-line bar is redrawn every second too. 0: off "
        "(pipeline/progress.py).",
    )
    driver_malloc_tuning: bool = param(
        True,
        doc="Python driver process (glibc): keep freed blocks up to 64 MB in the heap and trim "
        "it only above 256 MB (pipeline/allocator.py), instead of returning pages to the OS "
        "and faulting them back in, which makes the first Cr5 fit in a process faster. Up to "
        "256 MB of freed memory stays with each malloc arena, and the arenas are capped at 2 "
        "(glibc: 8 per core), which lowers the driver's peak memory at the same fit time "
        '(bench/README.md, "The whole chain at Wikipedia shape").',
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
    checksum_max_bytes: int = param(
        1 << 30,
        lo=0,
        doc="Readers check the SHA-256 of every file of a dataset (or model) whose files total "
        "at most this many bytes, and the sizes of every file always, against the manifest "
        "its writer recorded; a damaged dataset stops the stage (exit 2) naming the file and "
        "the command that rebuilds it. 0: sizes only. `python -m pipeline verify PATH` checks "
        "any size (pipeline/io/integrity.py).",
    )
    logs: str | None = param(
        None,
        doc="Directory of the run logs: each job writes <logs>/<stages>-<UTC time>-<pid>.log "
        "with its full log, Spark's output and the trace of any failure (the console gets one "
        "paragraph). Default: <root>/logs. On another store (a URI) the file is written in the "
        "driver's scratch directory and published there before the session stops.",
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
    index: str | None = param(
        None,
        doc="Directory of the search index (stage index; default <root>/index), on any store "
        "(built in a local scratch directory, then published there like the model).",
    )
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
class TrainConfig(Cr5Params, BackendParams):
    """Stage ``train``: which rows train, the backend, the solver's and each method's
    parameters.

    The eigensolver's parameters (:class:`~pipeline.linalg.params.Cr5Params`) and the
    backend's options (:class:`~pipeline.backends.params.BackendParams`), which Cr5 and the
    corpus-level baselines share, are declared by the code that uses them and embedded as
    flat keys, beside the stage's own below. A method's own keys are a nested section under
    its name, ``train.<method>.<key>`` (``train.jplsa.topic_prior``, ``train.s2net.scale``):
    one per registered method whose spec names a ``params`` class
    (:func:`~pipeline.methods.registry.method_sections`), held in :attr:`method_params` and
    read with :meth:`params_of`. The flat keys of the release before (``train.gamma``,
    ``train.plsa_topic_prior``, ...) load with a warning naming the new ones
    (:meth:`legacy_keys`).
    """

    method: Annotated[str, Choice(method_names)] = param(
        "cr5",
        doc="cr5, or a baseline of pipeline/baselines trained on the same rows and saved in "
        "the same model format (untranslated: a sparse selection model, r = |union "
        "vocabulary|; the λ and solver settings do not apply to it; jplsa, cplsa: topic "
        "models with r topics, fitted on term counts by EM, embedding by folding-in, "
        "compared by L1 distance; s2net: a projection trained from OPCA's by gradient "
        "descent; docs/classic-methods.md), or a neural method trained with PyTorch "
        "(xcnn, tlaser, ctlaser: the train.xcnn.*, train.tlaser.*, train.ctlaser.* keys, "
        "docs/neural.md; needs the neural extra). A method's own keys are the section "
        "train.<method>.",
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
    path_factors: list[float] = param(
        default_factory=list,
        lo=1.0,
        lo_open=True,
        doc="Fit Cr5 first at λ times each factor (largest first), each fit starting the next "
        "from its Ritz vectors and solves, then at train.lam from the last (a regularisation "
        "path, as evaluate.lambda_warm_start fits a grid); the model is the last fit. It can "
        "raise held-out P@1 at some cost in fit time, depending on the corpus "
        '(bench/README.md, "A path to one λ"). In a λ path grid it applies to the first '
        "(largest) λ only.",
    )
    validation_concepts: int = param(
        500,
        lo=1,
        doc="stop_rule=validation: validation concepts (lowest split priority) whose documents "
        "are embedded and retrieved among each other after every eigensolver iteration.",
    )
    validation_distractors: int = param(
        0,
        lo=0,
        doc="stop_rule=validation: training documents per language (a seeded sample of "
        "documents of no split concept) added to the candidates of the per-iteration "
        "validation P@1, so that it ranks among a pool closer to the evaluation's; 0: "
        "among the validation documents only, where P@1 can saturate long before the "
        "evaluation's does.",
    )
    tune: Literal["auto", "always", "never"] = param(
        "auto",
        doc="Whether the train stage chooses the parameter that tunes train.method (its "
        "spec's tuned_by) on the split stage's validation concepts, as the evaluation does "
        "(one model per grid value, scored with evaluate.selection_metric and "
        "selection_measure, the best saved with a tuning section in model.json). auto: γ "
        "(CCA, OPCA, S2Net) from evaluate.gamma_grid when it has two or more values and "
        "features.heldout_concepts is the splits; λ is left to the evaluate stage. always: also "
        "Cr5's λ from evaluate.lambda_grid, and an error when the grid or the splits are "
        "missing. never: fit at the configured value (pipeline/evaluation/tuning.py).",
    )
    checkpoint_dir: str | None = param(
        None,
        doc="Resumable checkpoints (default <paths.root>/checkpoints/train-<config hash>); "
        '"" disables them.',
    )
    #: Each registered method's own parameters by method name (the sections
    #: ``train.<method>``); built by the loader, defaults for every method otherwise.
    method_params: dict[str, Any] = field(
        default_factory=lambda: {name: cls() for name, cls in method_sections().items()},
        metadata={NESTED: True},
    )

    def __post_init__(self) -> None:
        clash = sorted(set(method_sections()) & {f.name for f in dataclasses.fields(self)})
        if clash:  # a method registered under the name of one of the section's own keys
            raise ConfigError(
                f"method(s) {', '.join(clash)} would have the section(s) "
                f"{', '.join('train.' + c for c in clash)}, already key(s) of train; "
                "register the method under another name"
            )

    @staticmethod
    def nested_sections() -> dict[str, type]:
        """The nested sections, name -> parameter class, read from the method registry
        when a section is built (so a method registered at run time has one too)."""
        return method_sections()

    @staticmethod
    def legacy_keys() -> dict[str, tuple[str, ...]]:
        """Flat keys of the release before the per-method sections -> the keys (relative
        to ``train``) each now sets (:func:`~pipeline.methods.registry.legacy_keys`)."""
        return legacy_keys()

    def params_of(self, method: str | None = None) -> Any:
        """The parameters of ``method`` (default ``train.method``): its section
        ``train.<method>``, an instance of its spec's ``params`` class (the declared
        defaults for a method registered after this section was built); None for a method
        without a class of its own."""
        name = self.method if method is None else method
        if name in self.method_params:
            return self.method_params[name]
        cls = get_method(name).params
        return None if cls is None else cls()

    def with_params(self, method: str | None = None, **changes: Any) -> TrainConfig:
        """A copy whose section ``train.<method>`` (default ``train.method``) has
        ``changes`` (e.g. the evaluation's γ of one grid point), checked as the loader
        checks them."""
        name = self.method if method is None else method
        current = self.params_of(name)
        if current is None:
            raise ConfigError(f"method {name!r} has no parameters of its own (train.{name})")
        updated = dataclasses.replace(current, **changes)
        check_section(updated, prefix=f"train.{name}.")
        return dataclasses.replace(self, method_params={**self.method_params, name: updated})

    def backend_options(self) -> dict[str, Any]:
        """Keyword options of :func:`pipeline.backends.make_backend`
        (:func:`pipeline.backends.params.backend_options`)."""
        return backend_options(self)


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
        "into the JVM); false, or any other store: Spark's writer.",
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
class EvaluateConfig(RetrievalParams):
    """Stage ``evaluate``: crosslingual retrieval on the held-out concepts.

    Queries are the test (or validation) documents of language l1 of a pair; the
    candidates are up to ``max_candidates`` documents of l2 (seeded sample) plus the
    true targets. Both directions of every pair, with each of ``measures``. The retrieval
    parameters (``csls_k``, ``block_q``, ``block_c``) are declared by the retrieval maths
    (:class:`~pipeline.retrieval.params.RetrievalParams`) and embedded here.
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
        "residual rule as any fit. A grid then costs well under as many independent fits, "
        "and its models at the smaller λ retrieve as well or better, so the chosen λ can "
        'differ from independent fits\' (bench/README.md, "λ path"). With a tight '
        "train.eig_rtol it saves little. false: independent fits from the surrogate start "
        "(the train stage's model is then reused for its λ).",
    )
    report_dir: str | None = param(
        None, doc="Markdown/JSON report and PNG images (default <paths.root>/reports)."
    )
    plot: bool = param(
        True,
        doc="Draw the precision-at-k plot and the P@1 heatmaps (one per method); needs "
        "matplotlib (the report extra), else the reports come without images.",
    )
    methods: list[Annotated[str, Choice(evaluated_methods)]] = param(
        default_factory=list,
        doc="More methods evaluated beside the model on the same splits and candidates, each "
        "trained on the same rows with the model's r (saved under "
        "evaluate.baseline_models_dir/<method>); avg_<map>: the word-mapping document "
        "baselines the translate_words stage saved (words.document_models_dir), evaluated on "
        "the directions of their language pair. A method with a similarity of its own (L1 "
        "for jplsa and cplsa) is scored with it too (measure l1), beside evaluate.measures.",
    )
    baseline_models_dir: str | None = param(
        None, doc="Where evaluate.methods' models go (default <paths.root>/baseline_models)."
    )
    gamma_grid: list[float] = param(
        default_factory=list,
        lo=0.0,
        lo_open=True,
        doc="γ of CCA, OPCA and S2Net (its OPCA start) chosen on the validation concepts "
        "when two or more values are given; else their own train.<method>.gamma. A large γ turns "
        "CCA and OPCA "
        "into per-language PCA.",
    )
    classify_labels: str | None = param(
        None,
        doc="Parquet table (concept_id, label) of document classes: with it, evaluate also "
        "scores crosslingual classification transfer for every method (MLDoc protocol: a "
        "logistic regression trained on one language's embeddings of held-out concepts, "
        "tested on every language's), with majority-class and same-language TF-IDF "
        "references (docs/neural.md). scripts/build_ddtp_labels.py builds the DDTP packages' "
        "Debian sections. Needs scikit-learn (the classify extra).",
    )
    classify_train_fraction: float = param(
        0.5,
        lo=0.0,
        hi=1.0,
        lo_open=True,
        hi_open=True,
        doc="Share of the labelled held-out concepts whose documents train the classifier "
        "(a seeded hash of evaluate.seed and the concept id); the rest test it.",
    )
    classify_c: float = param(
        10.0,
        lo=0.0,
        lo_open=True,
        doc="Inverse L2 regularisation strength of the classification logistic regression "
        "(on L2-normalised vectors, whose entries are small: 1 would shrink most classifiers "
        "to the majority class on a few hundred documents).",
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
        doc="Bilingual lexicon, one pair per line: source_word<TAB>target_word, or MUSE's "
        "'source_word target_word'; source = first language of words.pair; build one with "
        "scripts/build_lexicon.py or use a MUSE dictionary (docs/word-translation.md).",
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
class SearchConfig:
    """Stage ``index`` and the search service (:mod:`pipeline.search`): one nearest-neighbour
    index per language over the ``embeddings`` dataset, searched by cosine (inner product of
    L2-normalised vectors), optionally re-ranked by CSLS.

    The ``index`` stage reads the build keys; the Python API, ``python -m pipeline search``
    and the HTTP service take their query defaults (ef_search, CSLS re-rank depth, k, port)
    from the query keys, which each of them can override per call. Why these defaults:
    docs/search.md.
    """

    index_type: Literal["auto", "flat", "ivf", "hnsw"] = param(
        "auto",
        doc="flat: exact inner product (faiss IndexFlatIP); ivf: k-means buckets, a query "
        "scans the search.nprobe nearest (faiss IndexIVFFlat); hnsw: a graph index (faiss "
        "IndexHNSWFlat); ivf and hnsw score their candidates exactly on the stored vectors. "
        "auto: flat for a language of up to search.flat_max_rows documents, ivf above.",
    )
    flat_max_rows: int = param(
        20_000,
        lo=0,
        doc="index_type auto: languages with at most this many documents get an exact flat "
        "index (a single query scans them all).",
    )
    shard_rows: int = param(
        250_000,
        lo=1,
        doc="Documents per shard: a language with n documents is cut into ceil(n / shard_rows) "
        "shards by a hash of doc_id, each built by one Spark task and written as one file; a "
        "query searches every shard of a language and merges their top-k. Bounds the memory "
        "of one build task and of the driver while it writes a shard.",
    )
    ivf_lists: int | None = param(
        None,
        lo=1,
        doc="IVF: k-means lists per shard; None: 4 sqrt(rows of the shard), at most rows / 39.",
    )
    nprobe: int = param(
        32,
        lo=1,
        doc="IVF: lists a query scans in each shard (latency against recall).",
    )
    hnsw_m: int = param(32, lo=2, doc="HNSW: neighbours per node (graph degree; memory, recall).")
    hnsw_ef_construction: int = param(
        80, lo=1, doc="HNSW: candidate list while building (build time, graph quality)."
    )
    ef_search: int = param(
        96,
        lo=1,
        doc="HNSW: candidate list while searching (latency against recall); at least the "
        "number of results asked for is used.",
    )
    build_threads: int = param(
        1,
        lo=1,
        doc="faiss threads per build task. 1 keeps an HNSW build deterministic (a rerun "
        "writes the same index); Spark runs the shards' tasks in parallel.",
    )
    csls: bool = param(
        True,
        doc="Precompute CSLS terms: for each indexed document and each other indexed language, "
        "the mean cosine of its evaluate.csls_k nearest documents of that language (the "
        "r_S of pipeline/retrieval/csls.py over the whole collection), so queries can be "
        "re-ranked by CSLS.",
    )
    csls_ef_search: int = param(
        64,
        lo=1,
        doc="HNSW candidate list of the CSLS precomputation's neighbour searches.",
    )
    csls_nprobe: int = param(
        16,
        lo=1,
        doc="IVF lists scanned by the CSLS precomputation's neighbour searches.",
    )
    csls_rerank: int = param(
        100,
        lo=1,
        doc="Query time, CSLS: the top this many cosine candidates of each target language are "
        "re-ranked by 2 cos - r_T(query) - r_S(document).",
    )
    default_k: int = param(10, lo=1, doc="Results per target language when a query names none.")
    max_k: int = param(100, lo=1, doc="Largest k a query may ask for.")
    snippet_chars: int = param(
        280, lo=0, doc="Characters of each document's text kept in the index as its snippet."
    )
    host: str = param("127.0.0.1", doc="Address the HTTP search service listens on.")
    port: int = param(8080, lo=0, hi=65535, doc="Port of the HTTP search service (0: any free).")


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
    search: SearchConfig = field(default_factory=SearchConfig)

    def to_dict(self) -> dict[str, Any]:
        """Every section as plain data, in the shape of a profile: a method's section is
        ``train.<method>`` (what :func:`~pipeline.config.loader.load_config` and
        :func:`~pipeline.config.loader.build_section` read back)."""
        data = dataclasses.asdict(self)
        data["train"].update(data["train"].pop("method_params"))
        return data

    def heldout_path(self) -> str | None:
        """``features.heldout_concepts`` resolved: the word ``splits`` names the splits
        dataset of this run (``paths.dataset("splits")``), so profiles need not repeat
        ``paths.root``."""
        value = self.features.heldout_concepts
        return self.paths.dataset("splits") if value == "splits" else value

    def fingerprint(
        self, *sections: str, leave_out: Mapping[str, Iterable[str]] | None = None
    ) -> str:
        """A short stable hash of the named sections (all when none), for provenance;
        ``leave_out`` names keys per section that do not count (``a.b``: the key ``b`` of
        the section's nested section ``a``, e.g. ``train`` → ``tlaser.progress_seconds``)."""
        data = self.to_dict()
        if sections:
            data = {s: data[s] for s in sections}
        for section, keys in (leave_out or {}).items():
            for key in keys:
                *nested, last = key.split(".")
                node = data[section]
                for name in nested:
                    node = node.get(name, {})
                node.pop(last, None)
        blob = json.dumps(data, sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


#: Section defaults, for keyword defaults outside the maths (the tokenizer, the benchmarks);
#: the maths packages use their own (e.g. :data:`pipeline.linalg.params.CR5_DEFAULTS`).
TRAIN_DEFAULTS = TrainConfig()
TEXT_DEFAULTS = TextConfig()
EVALUATE_DEFAULTS = EvaluateConfig()
SEARCH_DEFAULTS = SearchConfig()
