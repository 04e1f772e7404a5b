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
