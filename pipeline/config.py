"""Typed configuration: YAML profiles plus ``--set key.path=value`` overrides.

The schema is declared once, as frozen dataclasses below; their defaults are the
paper's defaults. A profile (``conf/*.yaml``) only states what it changes. Several
profiles may be layered (later wins), then ``--set`` overrides are applied, then
the merged mapping is checked against the schema: an unknown key or a value of the
wrong type is a :class:`~pipeline.errors.ConfigError` naming the key, where it
came from and what is allowed.
"""

from __future__ import annotations

import codecs
import dataclasses
import difflib
import hashlib
import json
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from pipeline.errors import ConfigError
from pipeline.evaluation.config import EvaluateConfig, SplitConfig
from pipeline.wikipedia.config import WikipediaConfig


def _bounded(
    default: Any, *, lo: float | None = None, hi: float | None = None, doc: str = ""
) -> Any:
    """A dataclass field with an inclusive numeric range checked at load time."""
    return field(default=default, metadata={"lo": lo, "hi": hi, "doc": doc})


@dataclass(frozen=True)
class SparkConfig:
    """How the SparkSession is built (see :mod:`pipeline.spark`).

    Under ``spark-submit`` the master and driver memory come from the command line
    and ``master``/``driver_memory`` here are ignored.
    """

    master: str = "local[2]"
    app_name: str = "cr5"
    driver_memory: str = "4g"
    shuffle_partitions: int = _bounded(8, lo=1)
    ui: bool = False
    # Free-form extra Spark properties, e.g. {"spark.executor.memory": "8g"}.
    conf: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PathsConfig:
    """Where datasets live. Each dataset defaults to ``<root>/<name>``."""

    root: str = "./out"
    # How every stage writes its datasets (pipeline/io/datasets.py). "parquet": a directory
    # with a _manifest.json, replaced atomically by rename. "delta": a Delta Lake table; each
    # write is one commit, a new table version (overwrite mode, history kept), with the
    # manifest in the commit's userMetadata. With Delta's jars on the Spark classpath
    # (cluster: spark-submit --packages io.delta:delta-spark_2.13:<version matching Spark>
    # --conf spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension --conf
    # spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog) Spark's
    # own Delta writer is used; otherwise Spark writes the Parquet files and delta-rs commits
    # them (pip install 'cr5-on-spark[delta]'). Readers read any path holding a _delta_log/
    # as Delta, whatever this says. See deploy/README.md, "Delta Lake output".
    format: Literal["parquet", "delta"] = "parquet"
    # A second run writing the same dataset waits this long for the first to finish, then
    # fails (exit 2) naming it; 0: fail at once (pipeline/io/publish.py).
    write_lock_wait_seconds: float = _bounded(600.0, lo=0.0)
    # A writer's lock and temporary directory count as abandoned when its heartbeat (every
    # min(30 s, this / 4)) is older than this; on the writer's own host a dead pid is
    # recognised at once. Only then are they removed by another run.
    stale_write_seconds: float = _bounded(300.0, lo=1.0)
    documents: str | None = None
    vocabulary: str | None = None
    tfidf: str | None = None
    concepts: str | None = None
    splits: str | None = None
    model: str | None = None
    embeddings: str | None = None
    evaluation: str | None = None

    def dataset(self, name: str) -> str:
        """Return the path of dataset ``name`` (explicit setting, else ``<root>/<name>``)."""
        explicit = getattr(self, name)
        if explicit:
            return str(explicit)
        return self.root.rstrip("/") + "/" + name


@dataclass(frozen=True)
class IngestConfig:
    """Reading an aligned corpus (``doc_id, concept_id, lang, title, text``)."""

    input: str = "data/sample/ddtp_en_de_fr_es.parquet"
    format: Literal["auto", "parquet", "jsonl", "tsv"] = "auto"
    encoding: str = "utf-8"
    # Keep only these languages (empty: all languages found in the input).
    languages: list[str] = field(default_factory=list)
    on_duplicate: Literal["keep_first", "error"] = "keep_first"
    on_empty_text: Literal["drop", "error"] = "drop"
    # How many offending records to quote in an error or report.
    max_examples: int = _bounded(5, lo=1)


@dataclass(frozen=True)
class TextConfig:
    """The one tokeniser used for training and inference (:mod:`pipeline.text.tokenizer`)."""

    normalization: Literal["NFKC", "NFC", "none"] = "NFKC"
    lowercase: bool = True
    # Emit each Han ideograph / kana character as its own token (scripts without spaces).
    split_cjk: bool = True
    min_token_length: int = _bounded(1, lo=1)


@dataclass(frozen=True)
class FeaturesConfig:
    """Vocabulary, IDF and the training-document filter (paper defaults)."""

    max_vocabulary: int = _bounded(200_000, lo=1)
    min_df: int = _bounded(3, lo=1)
    min_unique_words: int = _bounded(50, lo=0)
    max_unique_words: int = _bounded(1000, lo=1)
    # A language of the documents left with no vocabulary by the filters (too few or too
    # short documents, or every concept held out) disappears from tfidf and model: "warn"
    # (a WARNING in the stage summary and the vocabulary manifest) or "error".
    on_dropped_language: Literal["warn", "error"] = "warn"
    # Parquet dataset with a ``concept_id`` column, or the word ``splits`` for this run's
    # splits dataset: these concepts' documents are excluded from vocabulary, IDF and the
    # training matrix.
    heldout_concepts: str | None = None


def _backend_default(name: str) -> Any:
    """Backend option defaults live in one place: :data:`pipeline.linalg.backends.DEFAULTS`."""
    from pipeline.linalg.backends import DEFAULTS

    return DEFAULTS[name]


def _solver_default(name: str) -> Any:
    """Solver defaults live in one place: :attr:`Cr5Solver.parameter_constraints`."""
    from pipeline.linalg.cr5 import Cr5Solver

    return Cr5Solver.parameter_constraints[name][0]


@dataclass(frozen=True)
class TrainConfig:
    """Stage ``train``: which rows train, the backend, and the Cr5 solver's parameters.

    Ranges of the solver parameters are checked by :class:`pipeline.linalg.cr5.Cr5Solver`
    (the single source of their defaults and allowed values).
    """

    # cr5, or a baseline of pipeline/baselines trained on the same rows and saved in the
    # same model format (untranslated: a sparse selection model, r = |union vocabulary|;
    # the λ and solver settings below do not apply to it).
    method: Literal["cr5", "untranslated", "cl_lsi", "cca", "opca"] = "cr5"
    # Regularisation of the CCA and OPCA baselines (covariances are per sample).
    gamma: float = _bounded(1e-3, lo=0.0)
    # joint: every language; pairwise: only ``pair``; transitive: ``pair`` share no
    # training concept and connect only through the other languages.
    setup: Literal["joint", "pairwise", "transitive"] = "joint"
    pair: list[str] = field(default_factory=list)
    # Restrict training to these languages (empty: all languages of the tfidf dataset).
    languages: list[str] = field(default_factory=list)
    backend: Literal["local", "spark"] = "local"
    # Training rows of a single language give a model that is not crosslingual: "warn"
    # (recorded in model.json and the stage summary) or "error".
    on_single_language: Literal["warn", "error"] = "warn"
    # spark backend: row partitions per language of X (each cached on an executor as one
    # CSR block, ~8 bytes per nonzero in float32). None: max(defaultParallelism,
    # ceil(nnz_l / 2M)), i.e. ~16 MB blocks.
    partitions_per_language: int | None = None
    # spark backend, when partitions_per_language is None: a language with at most this many
    # nonzeros is cached as ONE block and each of its CG solves runs inside that block's task
    # (one Spark job per solve instead of one per CG iteration; bench/README.md); bigger
    # languages are row-partitioned as above. 0: always row-partitioned.
    solve_in_task_max_nnz: int = _bounded(_backend_default("solve_in_task_max_nnz"), lo=0)
    # Working memory of one in-task solve's CG vectors (~72 bytes per term and right-hand
    # side; the columns of a solve run in chunks that fit). Python memory on the executor:
    # on YARN/Kubernetes it counts against spark.executor.memoryOverhead.
    solve_in_task_memory_mb: int = _bounded(_backend_default("solve_in_task_memory_mb"), lo=1)

    dtype: Literal["float32", "float64"] = "float32"
    lam: float = 1.0
    r: int = _solver_default("r")
    oversampling: int = _solver_default("oversampling")
    cg_rtol: float = _solver_default("cg_rtol")
    cg_maxiter: int = _solver_default("cg_maxiter")
    w_rtol: float = _solver_default("w_rtol")
    eig_rtol: float = _solver_default("eig_rtol")
    eig_maxiter: int = _solver_default("eig_maxiter")
    seed: int = _solver_default("seed")
    max_basis: int | None = _solver_default("max_basis")
    block_size: int | None = _solver_default("block_size")
    start_steps: int = _solver_default("start_steps")
    reuse_solves: bool = _solver_default("reuse_solves")
    max_workers: int | None = _solver_default("max_workers")
    # Resumable checkpoints (default: <paths.root>/checkpoints/train); "" disables them.
    checkpoint_dir: str | None = None
    checkpoint_every: int = _solver_default("checkpoint_every")

    def backend_options(self) -> dict[str, Any]:
        """Keyword options of :func:`pipeline.linalg.backends.make_backend`."""
        if self.backend != "spark":
            return {}
        opts: dict[str, Any] = {
            "solve_in_task_max_nnz": self.solve_in_task_max_nnz,
            "solve_in_task_memory_mb": self.solve_in_task_memory_mb,
        }
        if self.partitions_per_language is not None:
            opts["partitions_per_language"] = self.partitions_per_language
        return opts

    def solver_params(self) -> dict[str, Any]:
        """The keyword arguments of :class:`~pipeline.linalg.cr5.Cr5Solver`."""
        from pipeline.linalg.cr5 import Cr5Solver

        # Every solver parameter has a train.* key of the same name (checked by a test).
        keys = [k for k in Cr5Solver.parameter_constraints if k != "checkpoint_dir"]
        return {k: getattr(self, k) for k in keys}


@dataclass(frozen=True)
class EmbedConfig:
    """Stage ``embed``: documents to the ``embeddings`` dataset with a trained model."""

    # Parquet or JSON Lines with doc_id, lang, text (concept_id optional); default: the
    # documents dataset.
    input: str | None = None
    format: Literal["auto", "parquet", "jsonl"] = "auto"
    # Embed only these languages (empty: every language of the model found in the input).
    languages: list[str] = field(default_factory=list)
    # Input documents in a language the model lacks: skipped with a WARNING in the report
    # ("warn") or refused ("error").
    on_unknown_language: Literal["warn", "error"] = "warn"
    # Documents per Arrow batch on the executors: bounds their memory.
    batch_rows: int = _bounded(4096, lo=1)
    # L2-normalise the vectors (cosine retrieval does not need it).
    normalize: bool = False


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
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in data:
        if key not in fields:
            full = prefix + str(key)
            near = difflib.get_close_matches(str(key), fields, n=1)
            hint = f"; did you mean {prefix + near[0]!r}?" if near else ""
            raise ConfigError(
                f"unknown configuration key {full!r}{_where(full, sources)}"
                f"{hint} (allowed in {prefix.rstrip('.') or 'the top level'}: "
                f"{', '.join(sorted(fields))})"
            )
    kwargs = {}
    for name, f in fields.items():
        if name not in data:
            continue
        key = prefix + name
        kwargs[name] = _coerce(hints[name], data[name], key=key, sources=sources)
        _check_range(f, kwargs[name], key=key, sources=sources)
    return cls(**kwargs)


def _coerce(tp: Any, value: Any, *, key: str, sources: Mapping[str, str]) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)

    def fail(expected: str) -> ConfigError:
        return ConfigError(
            f"configuration key {key!r}{_where(key, sources)} must be {expected}, "
            f"got {type(value).__name__} {value!r}"
        )

    if dataclasses.is_dataclass(tp):
        return _build(tp, value if value is not None else {}, prefix=key + ".", sources=sources)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:
            return _coerce(inner[0], value, key=key, sources=sources)
        raise fail(" or ".join(getattr(a, "__name__", str(a)) for a in args))
    if origin is Literal:
        if value not in args:
            raise fail("one of " + ", ".join(repr(a) for a in args))
        return value
    if origin is list:
        if not isinstance(value, list):
            raise fail("a list")
        return [
            _coerce(args[0], v, key=f"{key}[{i}]", sources=sources) for i, v in enumerate(value)
        ]
    if origin is dict:
        if not isinstance(value, Mapping):
            raise fail("a mapping")
        return {
            str(k): _coerce(args[1], v, key=f"{key}.{k}", sources=sources) for k, v in value.items()
        }
    if tp is bool:
        if not isinstance(value, bool):
            raise fail("true or false")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise fail("an integer")
        return value
    if tp is float:
        if isinstance(value, str):
            # PyYAML (YAML 1.1) reads 1e-4 as a string; 1.0e-4 would be a float.
            try:
                return float(value)
            except ValueError:
                raise fail("a number") from None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise fail("a number")
        return float(value)
    if tp is str:
        # Spark properties are strings but YAML reads 8 as int: accept scalars for str.
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        if not isinstance(value, str):
            raise fail("a string")
        return value
    raise TypeError(f"unsupported configuration type {tp!r} for {key}")  # schema bug


def _check_range(f: dataclasses.Field, value: Any, *, key: str, sources: Mapping[str, str]) -> None:
    lo, hi = f.metadata.get("lo"), f.metadata.get("hi")
    if value is None or (lo is None and hi is None):
        return
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        bounds = f"[{lo if lo is not None else '-inf'}, {hi if hi is not None else 'inf'}]"
        raise ConfigError(
            f"configuration key {key!r}{_where(key, sources)} = {value!r} is out of range {bounds}"
        )


def validate(cfg: Config) -> Config:
    """Cross-field checks that a single field's type cannot express."""
    f = cfg.features
    if f.min_unique_words > f.max_unique_words:
        raise ConfigError(
            f"features.min_unique_words ({f.min_unique_words}) must not exceed "
            f"features.max_unique_words ({f.max_unique_words})"
        )
    from pipeline.evaluation.config import check_evaluate

    check_evaluate(cfg.evaluate)
    t = cfg.train
    if t.setup != "joint" and (len(t.pair) != 2 or t.pair[0] == t.pair[1]):
        raise ConfigError(
            f"train.setup={t.setup!r} needs train.pair to name two different languages, "
            f"e.g. --set 'train.pair=[en, de]' (got {t.pair!r})"
        )
    try:
        codecs.lookup(cfg.ingest.encoding)
    except LookupError as exc:
        raise ConfigError(
            f"ingest.encoding {cfg.ingest.encoding!r} is not a known text encoding "
            "(try utf-8, latin-1, cp1252, utf-16)"
        ) from exc
    return cfg
