"""glibc malloc tuning for the Python driver process (``spark.driver_malloc_tuning``).

The solver allocates and frees blocks of a few megabytes (CG blocks, products with X)
thousands of times. glibc's defaults serve those from ``mmap`` or trim its heap after each
free, so the pages are returned to the OS and faulted back in by the next allocation, until
its dynamic thresholds adapt. Setting the thresholds once (``mallopt``) keeps blocks up to
:data:`MMAP_THRESHOLD` in the heap and trims only above :data:`TRIM_THRESHOLD`, which speeds
up the first Cr5 fit of a process (later fits run after the thresholds have adapted). The cost
is up to :data:`TRIM_THRESHOLD` of freed memory kept per malloc arena.

The solver's language, CG and dense-product threads each get a malloc arena of their own
(glibc allows 8 per core), and each arena keeps its freed blocks, so the driver's resident
size grows with the number of threads. :data:`ARENA_MAX` caps them (set before any thread
starts), which lowers the driver's peak memory without slowing the fit (bench/README.md,
"Measurements behind design choices"). Nothing happens off glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys
from typing import Any

__all__ = ["ARENA_MAX", "MMAP_THRESHOLD", "TRIM_THRESHOLD", "release_free_memory", "tune_malloc"]

log = logging.getLogger(__name__)

#: glibc's mallopt parameter numbers (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
#: allocations below this come from the heap (glibc's dynamic maximum is 32 MiB)
MMAP_THRESHOLD = 64 << 20
#: free memory at the top of the heap kept before returning it to the OS
TRIM_THRESHOLD = 256 << 20
#: malloc arenas of the process (glibc's default: 8 per core)
ARENA_MAX = 2


def _glibc_function(name: str) -> Any:
    """The C library's function ``name`` on Linux, None elsewhere or where it lacks it."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return getattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), name)
    except (OSError, AttributeError):
        return None


def tune_malloc() -> bool:
    """Set glibc's mmap and trim thresholds and its arena cap for this process; True when
    applied. Call it before the process starts threads (the arena cap binds the arenas
    glibc creates afterwards).

    Idempotent. Returns False (and changes nothing) on other platforms or C libraries.
    """
    mallopt = _glibc_function("mallopt")
    if mallopt is None:
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    applied = (
        mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
        and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
        and mallopt(_M_ARENA_MAX, ARENA_MAX) == 1
    )
    log.debug("malloc tuning %s", "applied" if applied else "not available")
    return applied


def release_free_memory() -> bool:
    """Return the malloc heap's free pages to the OS (glibc's ``malloc_trim(0)``: every
    arena, whole free pages inside the heap too); True when called.

    The solver calls it between phases whose arrays are freed in bulk (the eigensolver's
    iterations before its result): blocks below :data:`MMAP_THRESHOLD` freed into the heap
    stay resident otherwise, up to :data:`TRIM_THRESHOLD` per arena and wherever they are
    not at the top of the heap, and the next phase's arrays would come on top of them.
    Nothing happens off glibc.
    """
    trim = _glibc_function("malloc_trim")
    if trim is None:
        return False
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    trim(0)
    return True
