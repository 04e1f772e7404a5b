"""Memory before Spark starts: the session's heap and the stages' plans, from what is on disk.

The runner asks :func:`driver_memory` for ``spark.driver.memory`` (for
``spark.driver_memory: auto``, :func:`session_heap`: the heap that leaves the largest Python
need among the run's stages whose inputs exist already), and the preflight checks the train,
evaluate and embed stages' plans (:func:`preflight_train`, :func:`preflight_evaluate`,
:func:`preflight_embed`) so that a stage that cannot fit stops with exit 2 before any Spark
work. The sizes come from the tfidf manifest and the model's ``model.json``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Sequence

from pipeline.config import Config
from pipeline.memory.machine import Machine
from pipeline.memory.messages import gb
from pipeline.memory.plan import (
    EmbedPlan,
    TrainPlan,
    TrainSizes,
    classic_driver_need,
    driver_formula,
    embed_worker_need,
    plan_embed,
    plan_methods,
    plan_train,
    train_jvm_need,
    train_python_need,
)
from pipeline.memory.settings import (
    SparkMemory,
    format_size,
    local_heap,
    local_slots,
    spark_memory,
)
from pipeline.methods.driver_memory import DRIVER_PYTHON_BASE

__all__ = [
    "driver_memory",
    "known_embed_need",
    "known_train_sizes",
    "preflight_embed",
    "preflight_evaluate",
    "preflight_train",
    "session_heap",
]

log = logging.getLogger(__name__)


def known_embed_need(cfg: Config, stages: Sequence[str]) -> tuple[dict, list[str]] | None:
    """The model's ``model.json`` and the languages the embed stage among ``stages`` will
    embed, when the model exists before the run (no train stage of the run rewrites it) and
    is a local directory; else None (the stage is then not planned)."""
    if "embed" not in stages or "train" in stages[: list(stages).index("embed")]:
        return None
    try:  # model.json read as plain JSON: the embed stage checks the model itself
        with open(os.path.join(cfg.paths.dataset("model"), "model.json"), encoding="utf-8") as f:
            meta = json.load(f)
    except (OSError, ValueError):  # missing, remote or damaged: the stage reports it
        return None
    if not isinstance(meta, dict):
        return None
    langs = [str(lang) for lang in meta.get("languages") or []]
    if cfg.embed.languages:
        from pipeline.text.languages import canonical_lang

        chosen = {canonical_lang(str(lang)) for lang in cfg.embed.languages}
        langs = [lang for lang in langs if lang in chosen]
    return meta, langs


def session_heap(cfg: Config, stages: Sequence[str], machine: Machine) -> int:
    """The driver heap of ``spark.driver_memory: auto`` for running ``stages`` in one JVM:
    :func:`local_heap` of the largest Python need among the train stage's, the embed stage's
    and the evaluate stage's classic comparison methods' whose data exists already (a stage
    after a tfidf of the same run is planned when it starts, within the heap the session
    has). In local mode that JVM also runs the executors; with a cluster master only the
    driver's needs count."""
    sizes = known_train_sizes(cfg, stages)
    embed = known_embed_need(cfg, stages)
    classic = _evaluate_classic_need(cfg, stages)
    if sizes is None and embed is None and classic is None:
        return local_heap(machine)
    # On a cluster master (a client-mode driver started here) the executors, their cached X
    # and their Python workers are the cluster's: this machine holds the driver's JVM and
    # Python only.
    local = cfg.spark.master.startswith("local")
    slots = local_slots(cfg.spark.master, machine.cores) if local else 0
    needs = [DRIVER_PYTHON_BASE]
    jvm = None
    if sizes is not None:
        needs.append(train_python_need(sizes, cfg.train, slots))
        jvm = train_jvm_need(sizes, cfg.train) if local else None
    if classic is not None:
        needs.append(classic)
    if embed is not None and local:
        worker = embed_worker_need(embed[0], embed[1], cfg.embed.batch_rows)
        needs.append(DRIVER_PYTHON_BASE + slots * sum(worker.values()))
    return local_heap(machine, max(needs), jvm)


def _evaluate_classic_need(cfg: Config, stages: Sequence[str]) -> int | None:
    """The largest driver need of the evaluate stage's classic comparison methods among
    ``stages`` (bytes), when its training rows exist before the run; else None."""
    methods = [m for m in cfg.evaluate.methods if driver_formula(m) == "state"]
    if "evaluate" not in stages or not methods:
        return None
    sizes = _tfidf_sizes(cfg, stages, "evaluate")
    if sizes is None:
        return None
    return max(
        sum(classic_driver_need(sizes, dataclasses.replace(cfg.train, method=m)).values())
        for m in methods
    )


def known_train_sizes(cfg: Config, stages: Sequence[str]) -> TrainSizes | None:
    """The sizes of the train stage among ``stages``, from the tfidf manifest, when the data
    exists before the run (no earlier stage of the run rewrites it) and is local."""

    if "train" not in stages or driver_formula(cfg.train.method) == "base":
        return None
    return _tfidf_sizes(cfg, stages, "train")


def _tfidf_sizes(cfg: Config, stages: Sequence[str], stage: str) -> TrainSizes | None:
    """The training rows' sizes for ``stage`` from the tfidf manifest, when the data exists
    before the run (no earlier stage of the run rewrites it) and is local."""
    from pipeline.io.local_manifest import dataset_manifest

    before = stages[: list(stages).index(stage)]
    if any(s in ("ingest", "ingest_wikipedia", "vocabulary", "tfidf") for s in before):
        return None
    manifest = dataset_manifest(cfg.paths.dataset("tfidf"))
    if manifest is None or cfg.train.setup != "joint":
        return None
    sizes = TrainSizes.from_manifest(manifest, cfg.train.languages)
    return sizes if sizes.nnz else None


def driver_memory(cfg: Config, stages: Sequence[str]) -> str:
    """``spark.driver.memory`` for a local session: the profile's value, or for ``auto`` the
    planned heap (:func:`session_heap`)."""
    if cfg.spark.driver_memory != "auto":
        return cfg.spark.driver_memory
    machine = Machine.detect()
    heap = session_heap(cfg, stages, machine)
    log.info(
        "memory: %s usable of %s on this machine; JVM heap %s (spark.driver_memory: auto)",
        gb(machine.usable),
        gb(machine.memory),
        format_size(heap),
    )
    return format_size(heap)


def preflight_train(cfg: Config, stages: Sequence[str]) -> TrainPlan | None:
    """Plan the train stage among ``stages`` before Spark starts (plain ``python`` runs,
    whose session memory this process decides): :class:`MemoryPlanError` if it cannot fit.
    None when its data does not exist yet (the stage plans again when it starts)."""
    sizes = known_train_sizes(cfg, stages)
    if sizes is None:
        return None
    return plan_train(sizes, cfg.train, _session_memory(cfg, stages))


def preflight_evaluate(cfg: Config, stages: Sequence[str]) -> dict[str, TrainPlan] | None:
    """Plan the evaluate stage's classic comparison methods among ``stages`` before Spark
    starts; None when none is listed or the training rows do not exist yet (the stage
    checks again before it fits them)."""
    if "evaluate" not in stages or not any(
        driver_formula(m) == "state" for m in cfg.evaluate.methods
    ):
        return None
    sizes = _tfidf_sizes(cfg, stages, "evaluate")
    if sizes is None:
        return None
    return plan_methods(sizes, cfg.train, cfg.evaluate.methods, _session_memory(cfg, stages))


def preflight_embed(cfg: Config, stages: Sequence[str]) -> EmbedPlan | None:
    """Check the embed stage among ``stages`` before Spark starts: :class:`MemoryPlanError`
    if its Python workers cannot hold the model's languages and a batch. None when the
    model does not exist yet, or on a cluster without ``spark.executor.pyspark.memory``
    (Spark then puts no bound of its own on the workers' Python)."""
    known = known_embed_need(cfg, stages)
    local = cfg.spark.master.startswith("local")
    if known is None or (not local and "spark.executor.pyspark.memory" not in cfg.spark.conf):
        return None
    plan = plan_embed(known[0], known[1], cfg, _session_memory(cfg, stages))
    log.info("embed memory plan: %s", plan.describe())
    return plan


def _session_memory(cfg: Config, stages: Sequence[str]) -> SparkMemory:
    """What the session that will run ``stages`` gives each process (:func:`spark_memory`
    with the heap ``spark.driver_memory: auto`` would choose)."""
    machine = Machine.detect()
    memory = cfg.spark.driver_memory
    if memory == "auto":
        memory = format_size(session_heap(cfg, stages, machine))
    conf = {**cfg.spark.conf, "spark.master": cfg.spark.master, "spark.driver.memory": memory}
    master = cfg.spark.master
    slots = local_slots(master, machine.cores) if master.startswith("local") else 1
    return spark_memory(conf, slots, machine)
