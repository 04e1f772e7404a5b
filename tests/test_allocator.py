"""glibc malloc tuning of the driver process (spark.driver_malloc_tuning)."""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

import pytest

from pipeline import runner
from pipeline.allocator import tune_malloc
from pipeline.config import load_config


def _glibc() -> bool:
    try:
        return hasattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), "mallopt")
    except OSError:
        return False


@pytest.mark.skipif(not (sys.platform.startswith("linux") and _glibc()), reason="needs glibc")
def test_tune_malloc_applies_on_glibc_and_is_idempotent():
    assert tune_malloc() is True
    assert tune_malloc() is True


def test_the_runner_tunes_malloc_unless_configured_off(monkeypatch, tmp_path):
    calls: list[int] = []
    monkeypatch.setattr("pipeline.allocator.tune_malloc", lambda: calls.append(1) or True)
    monkeypatch.setattr(runner, "run_stages", lambda names, cfg, **kwargs: None)
    monkeypatch.setattr("pipeline.preflight.run_preflight", lambda *a, **k: None)
    root = f"paths.root={tmp_path}"
    assert runner.main(["vocabulary"], ["--set", root]) == 0
    assert calls == [1]
    assert (
        runner.main(["vocabulary"], ["--set", root, "--set", "spark.driver_malloc_tuning=false"])
        == 0
    )
    assert calls == [1]
    assert load_config([], []).spark.driver_malloc_tuning is True


@pytest.mark.skipif(not (sys.platform.startswith("linux") and _glibc()), reason="needs glibc")
def test_freed_heap_blocks_go_back_to_the_os_when_released():
    """With the driver's tuning, freed blocks below the mmap threshold stay resident in the
    heap (up to the trim threshold, and wherever they are not at its top);
    release_free_memory gives their pages back. In a child process: the tuning binds a
    process."""
    import subprocess
    import textwrap

    script = textwrap.dedent(
        """
        import numpy as np
        from pipeline.allocator import release_free_memory, tune_malloc

        def anon_mb():
            for line in open("/proc/self/status"):
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) / 1024

        assert tune_malloc()
        keep, free = [], []
        for i in range(120):  # 4 MB blocks, every other one kept: a fragmented heap
            (keep if i % 2 else free).append(np.ones(2**19))
        before = anon_mb()
        del free
        freed = anon_mb()
        assert release_free_memory()
        print(before, freed, anon_mb())
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout.split()
    before, freed, released = map(float, out)
    assert freed > before - 60  # the 240 MB freed stayed resident (kept in the heap)
    assert released < freed - 180  # and went back to the OS
