"""Memory planning: what a stage needs, what Spark gives each process, and settings that fit.

One idea per module:

- :mod:`~pipeline.memory.machine`: the machine's memory (physical or a cgroup limit), cores
  and what is available now (:class:`Machine`);
- :mod:`~pipeline.memory.settings`: Spark's memory settings, what a session gives each
  process (:class:`SparkMemory`) and the local heap rule (:func:`local_heap`);
- :mod:`~pipeline.memory.plan`: what the train and embed stages need in the driver's Python,
  the JVM and the Python workers, and the settings that fit (:func:`plan_train`,
  :func:`plan_embed`); the driver's need of each method is its spec's formula
  (:mod:`pipeline.methods.driver_memory`);
- :mod:`~pipeline.memory.session`: before Spark starts, the session's heap for
  ``spark.driver_memory: auto`` and the stages' plans from what is on disk
  (:func:`driver_memory`, the ``preflight_*`` checks);
- :mod:`~pipeline.memory.messages`: what the user reads, :class:`MemoryPlanError` (exit 2)
  with one paragraph naming the need, the memory available and the settings that would fit.

The formulas are those of docs/performance.md, "Memory". The names below are the package's
interface; callers import them from ``pipeline.memory``.
"""

from __future__ import annotations

from pipeline.memory.machine import USABLE_FRACTION, GiB, Machine, MiB
from pipeline.memory.messages import MemoryPlanError, gb
from pipeline.memory.plan import (
    CG_ARRAYS,
    DRIVER_PYTHON_BASE,
    EMBED_BYTES_PER_ROW,
    JVM_TRAIN_BASE,
    JVM_X_FACTOR,
    SOLVE_ARRAYS,
    WORKER_PYTHON_BASE,
    EmbedPlan,
    TrainPlan,
    TrainSizes,
    classic_driver_need,
    default_basis,
    driver_formula,
    embed_worker_need,
    fit_driver_need,
    plan_embed,
    plan_methods,
    plan_train,
    train_driver_need,
    train_jvm_need,
    train_python_need,
    train_worker_need,
)
from pipeline.memory.session import (
    driver_memory,
    known_embed_need,
    known_train_sizes,
    preflight_embed,
    preflight_evaluate,
    preflight_train,
    session_heap,
)
from pipeline.memory.settings import (
    HEAP_MAX,
    HEAP_MIN,
    JVM_HEAP_FACTOR,
    JVM_NONHEAP,
    LOCAL_HEAP_SHARE,
    OVERHEAD_MIN,
    SparkMemory,
    format_size,
    jvm_resident,
    local_heap,
    local_slots,
    parse_size,
    spark_memory,
)

__all__ = [
    "CG_ARRAYS",
    "DRIVER_PYTHON_BASE",
    "EMBED_BYTES_PER_ROW",
    "HEAP_MAX",
    "HEAP_MIN",
    "JVM_HEAP_FACTOR",
    "JVM_NONHEAP",
    "JVM_TRAIN_BASE",
    "JVM_X_FACTOR",
    "LOCAL_HEAP_SHARE",
    "OVERHEAD_MIN",
    "SOLVE_ARRAYS",
    "USABLE_FRACTION",
    "WORKER_PYTHON_BASE",
    "EmbedPlan",
    "GiB",
    "Machine",
    "MemoryPlanError",
    "MiB",
    "SparkMemory",
    "TrainPlan",
    "TrainSizes",
    "classic_driver_need",
    "default_basis",
    "driver_formula",
    "driver_memory",
    "embed_worker_need",
    "fit_driver_need",
    "format_size",
    "gb",
    "jvm_resident",
    "known_embed_need",
    "known_train_sizes",
    "local_heap",
    "local_slots",
    "parse_size",
    "plan_embed",
    "plan_methods",
    "plan_train",
    "preflight_embed",
    "preflight_evaluate",
    "preflight_train",
    "session_heap",
    "spark_memory",
    "train_driver_need",
    "train_jvm_need",
    "train_python_need",
    "train_worker_need",
]
