"""Checks that run before the SparkSession starts (:func:`run_preflight`).

A user error found here costs a second instead of a Spark start-up, a data load and a
Java stack trace: every check raises :class:`~pipeline.errors.ConfigError` (exit 2)
with one paragraph naming the key and the fix.

- :func:`check_spark_master`: ``spark.master`` is a master URL Spark accepts;
- :func:`check_output_paths`: every local output root is a writable directory (one
  probe file per root; roots on other stores, ``hdfs://``, ``s3a://``, ``viewfs://``, are
  probed the same way through the session's Hadoop FileSystem as soon as it starts:
  :func:`check_remote_output_paths`);
- :func:`check_rank`: ``train.r`` against the data, from the manifests of datasets an
  earlier run wrote (the ``concepts`` and ``vocabulary`` manifests have the counts);
  the train stage calls it again with the loaded data, before solving;
- :func:`pipeline.memory.preflight_train`: the train stage's memory plan, when its data
  exists (``MemoryPlanError`` names the settings that would fit);
- :func:`pipeline.memory.preflight_evaluate`: the evaluate stage's classic comparison
  methods (``evaluate.methods``) against the driver's memory, when the training rows exist;
- :func:`pipeline.memory.preflight_embed`: the embed stage's Python workers against the
  model's size, when the model exists.
- :func:`check_evaluation_engine`: a topic model's L1 similarity needs the local evaluation
  engine.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

from pipeline.config import Config
from pipeline.errors import ConfigError
from pipeline.io.local_manifest import dataset_manifest, local_fs_path
from pipeline.linalg.errors import RankError
from pipeline.linalg.errors import check_rank as linalg_check_rank
from pipeline.linalg.params import max_rank
from pipeline.methods.registry import get_method

log = logging.getLogger(__name__)

# The master URLs of Spark's SparkContext / spark-submit (local, standalone, YARN,
# Kubernetes, Mesos, and the test-only local-cluster).
_MASTER_FORMS = (
    ("local", r"local"),
    ("local[N]", r"local\[[1-9]\d*\]"),
    ("local[*]", r"local\[\*\]"),
    ("local[N,F] or local[*,F]", r"local\[(?:[1-9]\d*|\*),\s*[1-9]\d*\]"),
    ("local-cluster[N,C,M]", r"local-cluster\[\s*\d+\s*,\s*\d+\s*,\s*\d+\s*\]"),
    ("spark://HOST:PORT[,HOST:PORT...]", r"spark://[^\s:/,]+:\d+(?:,[^\s:/,]+:\d+)*"),
    ("yarn", r"yarn"),
    ("k8s://[https://]HOST[:PORT]", r"k8s://(?:https?://)?[^\s/:]+(?::\d+)?/?"),
    ("mesos://HOST:PORT or mesos://zk://...", r"mesos://\S+"),
)


def check_spark_master(master: str, *, key: str = "spark.master") -> None:
    """Raise :class:`ConfigError` unless ``master`` is a Spark master URL."""
    text = str(master).strip()
    if any(re.fullmatch(pattern, text) for _, pattern in _MASTER_FORMS):
        return
    forms = ", ".join(name for name, _ in _MASTER_FORMS)
    raise ConfigError(
        f"{key} = {master!r} is not a Spark master URL (allowed forms: {forms}). "
        f"Fix: --set {key}=local[2] for this machine, or the URL of your cluster."
    )


def output_locations(cfg: Config) -> dict[str, str]:
    """Every directory the run writes under, each with the key that sets it.

    ``paths.root``, plus the parent of every explicitly set dataset path, of
    ``paths.logs`` and of ``train.checkpoint_dir`` that lies outside it. Local directories
    are absolute paths; directories on other stores are their URIs.
    """
    locations: dict[str, str] = {}

    def add(path: str, key: str, *, parent: bool = False) -> None:
        local = local_fs_path(path)
        if local is not None:
            where, sep = os.path.abspath(local), os.sep
            where = os.path.dirname(where) if parent else where
        else:
            where, sep = path.rstrip("/"), "/"
            where = where.rpartition("/")[0] if parent else where
        if not any(where == r or where.startswith(r + sep) for r in locations):
            locations.setdefault(where, key)

    add(cfg.paths.root, "paths.root")
    explicit = {
        f"paths.{name}": getattr(cfg.paths, name)
        for name in (
            "documents",
            "vocabulary",
            "tfidf",
            "concepts",
            "splits",
            "model",
            "embeddings",
            "evaluation",
            "index",
            "word_vectors",
        )
    }
    if cfg.paths.logs:
        explicit["paths.logs"] = cfg.paths.logs.rstrip("/") + "/x"
    if cfg.train.checkpoint_dir:
        explicit["train.checkpoint_dir"] = cfg.train.checkpoint_dir.rstrip("/") + "/x"
    for key, value in explicit.items():
        if value:
            add(value, key, parent=True)
    return locations


def output_roots(cfg: Config) -> dict[str, str]:
    """The local directories among :func:`output_locations` (probed before Spark starts)."""
    return {p: k for p, k in output_locations(cfg).items() if local_fs_path(p) is not None}


def remote_output_roots(cfg: Config) -> dict[str, str]:
    """The directories of :func:`output_locations` on other stores (probed through the
    session's Hadoop FileSystem once it runs: :func:`check_remote_output_paths`)."""
    return {p: k for p, k in output_locations(cfg).items() if local_fs_path(p) is None}


def check_remote_output_paths(spark: Any, cfg: Config) -> list[str]:
    """Create every remote output root and write (then remove) one probe file in it, through
    the session's storage (:mod:`pipeline.io.storage`), so that a store the driver cannot
    write fails in a second, before any stage, naming the key; returns those probed."""
    from pipeline.io.storage import join, storage_for

    roots = remote_output_roots(cfg)
    for directory, key in roots.items():
        probe = join(directory, f".cr5-probe-{os.getpid()}")
        try:
            store = storage_for(directory, spark)
            store.mkdirs(directory)
            store.replace_bytes(probe, b"")
            store.delete(probe)
        except Exception as exc:  # py4j wraps the store's IOException
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ConfigError(
                f"the output directory {directory} ({key}) cannot be written through the "
                f"session's Hadoop FileSystem: {reason[:300]}. Nothing was run. Fix: check "
                f"the URI, the cluster's credentials for that store (spark.hadoop.* "
                f"settings) and permissions, or set {key} to another location."
            ) from None
    return sorted(roots)


def check_writable(directory: str, key: str) -> None:
    """Create ``directory`` if needed and write (then remove) one probe file in it."""
    try:
        os.makedirs(directory, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".cr5-probe-", dir=directory)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise ConfigError(
            f"the output directory {directory} ({key}) is not writable: {reason}. Nothing "
            f"was run. Fix: set {key} to a directory you can write to (e.g. --set "
            f"{key}=./out), or fix its permissions."
        ) from exc


def check_output_paths(cfg: Config) -> list[str]:
    """Probe every local output root (:func:`output_roots`); return those probed."""
    roots = output_roots(cfg)
    for directory, key in roots.items():
        check_writable(directory, key)
    return sorted(roots)


def check_rank(
    r: int,
    n_concepts: int,
    n_terms: int,
    *,
    where: str,
    exact: bool = True,
    key: str = "train.r",
    bound: Callable[[int, int], int] = max_rank,
) -> None:
    """Raise :class:`ConfigError` when ``r`` exceeds ``bound(n_concepts, n_terms)``, the
    method's rank bound (:attr:`~pipeline.methods.spec.MethodSpec.rank_bound`): the one
    check, :func:`pipeline.linalg.errors.check_rank`, worded for the configuration.

    The default, :func:`~pipeline.linalg.params.max_rank`: the Cr5 eigenproblem is K x K
    with rank at most K - 1 after centering, and the map has one column per term, so at most
    ``min(K - 1, p)`` dimensions exist. ``exact`` False: the counts are upper bounds (only
    part of the data trains).
    """
    try:
        linalg_check_rank(r, n_concepts, n_terms, bound=bound)
    except RankError as exc:
        limit = exc.limit
    else:
        return
    upper = "" if exact else "at most "
    formula = "min(K - 1, p) = " if bound is max_rank else ""
    raise ConfigError(
        f"{key} = {r} is larger than this corpus allows: {where} has {upper}{n_concepts} "
        f"training concepts and {upper}{n_terms} terms, so at most {formula}{limit} "
        f"dimensions exist. Fix: --set {key}={max(1, min(limit, 100))} (or any value up to "
        f"{limit}), or train on more concepts."
    )


def check_rank_against_data(cfg: Config, stages: Sequence[str]) -> None:
    """``train.r`` against the ``concepts``/``vocabulary`` manifests, when knowable.

    Only when a stage that solves with r runs and no earlier stage of the same run
    rewrites those datasets.
    """
    t = cfg.train
    rank_bound = get_method(t.method).rank_bound
    if rank_bound is None:
        return
    solves = [s for s in stages if s == "train"]
    if "evaluate" in stages and (len(cfg.evaluate.lambda_grid) >= 2 or cfg.evaluate.methods):
        solves.append("evaluate")
    if not solves:
        return
    first = stages.index(solves[0])
    if any(s in ("ingest", "ingest_wikipedia", "vocabulary", "tfidf") for s in stages[:first]):
        return  # the counts come from this run
    concepts = dataset_manifest(cfg.paths.dataset("concepts"))
    vocab = dataset_manifest(cfg.paths.dataset("vocabulary"))
    if not concepts or not vocab:
        return
    k = (concepts.get("report") or {}).get("concepts")
    sizes = (vocab.get("report") or {}).get("vocabulary_size") or {}
    if not isinstance(k, int) or not sizes:
        return
    langs = list(t.languages) or list(t.pair if t.setup != "joint" else sizes)
    p = sum(int(sizes.get(lang, 0)) for lang in langs) or sum(int(v) for v in sizes.values())
    exact = t.setup == "joint" and not t.languages
    where = f"the tfidf data ({cfg.paths.dataset('concepts')} manifest)"
    check_rank(t.r, k, p, where=where, exact=exact, bound=rank_bound)


def check_evaluation_engine(cfg: Config, stages: Sequence[str]) -> None:
    """A method with a similarity of its own (the topic models' L1) evaluated by the
    ``evaluate`` stage needs the local evaluation engine, which computes it."""
    similarity = get_method(cfg.train.method).similarity
    own = similarity != "cosine"
    if "evaluate" in stages and own and cfg.evaluate.engine == "spark":
        raise ConfigError(
            f"train.method={cfg.train.method} is evaluated with its {similarity.upper()} "
            "similarity, which the spark evaluation engine does not compute. Fix: --set "
            "evaluate.engine=local (or auto)"
        )


def run_preflight(cfg: Config, stages: Sequence[str], *, submitted: bool) -> None:
    """Every check that needs no Spark; raises :class:`ConfigError` on the first problem.

    ``submitted``: launched by spark-submit, whose command line sets the master.
    """
    if not submitted:
        check_spark_master(cfg.spark.master)
    probed = check_output_paths(cfg)
    check_rank_against_data(cfg, stages)
    if not submitted:
        from pipeline.memory import preflight_embed, preflight_evaluate, preflight_train

        preflight_train(cfg, stages)
        preflight_embed(cfg, stages)
        preflight_evaluate(cfg, stages)
    check_evaluation_engine(cfg, stages)
    log.debug("preflight: ok (probed %s)", probed)
