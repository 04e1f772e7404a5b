"""bench/cost_model.py: the scheduling rules and the memory count, against hand computations."""

from __future__ import annotations

import dataclasses
from dataclasses import replace

import pytest

from bench import cost_model as cm


def test_processor_sharing_matches_hand_computation() -> None:
    # 4 threads on 2 cores: each runs at 1/2 until the first (work 1) ends at t = 2; then 3
    # share at 2/3: the second (work 2, 1 left) ends at 2 + 1.5 = 3.5; the last two (works
    # 4 and 6, left 2 and 4) run at full speed: 5.5 and 7.5.
    finish, wall = cm.processor_sharing([1.0, 2.0, 4.0, 6.0], 2)
    assert finish == pytest.approx([2.0, 3.5, 5.5, 7.5])
    assert wall == pytest.approx(7.5)


def test_processor_sharing_background_slows_and_advances() -> None:
    # one thread (work 2) beside a background thread (work 3) on one core: both at 1/2,
    # the thread ends at 4 and leaves the background 1 unit.
    bg = [3.0]
    finish, wall = cm.processor_sharing([2.0], 1, bg)
    assert finish == pytest.approx([4.0]) and wall == pytest.approx(4.0)
    assert bg == pytest.approx([1.0])


def test_list_schedule_fifo() -> None:
    # 2 slots, the first busy until 1: job A (2 tasks of 3 s) starts at 0 and 1, job B
    # (1 task of 1 s) takes the slot freed at 3.
    slots = [1.0, 0.0]
    finish, wall = cm.list_schedule([(2, 3.0), (1, 1.0)], slots)
    assert finish == pytest.approx([4.0, 4.0])
    assert wall == pytest.approx(4.0)
    assert sorted(slots) == pytest.approx([4.0, 4.0])


def _sizes() -> cm.Sizes:
    return cm.Sizes(
        nnz={"a": 1_000_000, "b": 3_000_000},
        terms={"a": 1000, "b": 3000},
        docs={"a": 100, "b": 300},
        concepts=5000,
        r=10,
        block=30,
        lanczos_iterations=2,
        cg_iterations=[{"a": 10, "b": 20}, {"a": 12, "b": 25}],
    )


def test_driver_memory_counts() -> None:
    s = _sizes()
    p, k, b, cap = 4000, 5000, 30, max(10, 30) + 4 * 30
    spark = cm.driver_mb(s, "spark")
    one = 4.0 * p * b + 8 * cm.SOLVE_BLOCKS * p * b
    # Cᵀ: the K x b sum and each language's rows of its concepts (n = 400 documents)
    two = 4.0 * p * 2 * b + 8.0 * p * b + 8.0 * (k + 400) * b
    want = cm.DRIVER_BASE_MB * cm.MB + 4.0 * k * cap + max(one, two)
    assert spark["total"] == pytest.approx(want / cm.MB)
    # runs recorded before ct_language_rows: every language's K x b result and the sum
    old = cm.driver_mb(dataclasses.replace(s, ct_language_rows=False), "spark")
    two_old = 4.0 * p * 2 * b + 8.0 * p * b + 8.0 * k * b * 3
    want_old = cm.DRIVER_BASE_MB * cm.MB + 4.0 * k * cap + max(one, two_old)
    assert old["total"] == pytest.approx(want_old / cm.MB)
    local = cm.driver_mb(s, "local")
    x = 8.0 * 4_000_000 + 16.0 * 400
    one = 4.0 * p * b + 8 * cm.CG_BLOCKS * p * b + 4.0 * 400 * b
    want = cm.DRIVER_BASE_MB * cm.MB + 4.0 * k * cap + x + max(one, two)
    assert local["total"] == pytest.approx(want / cm.MB)
    # runs recorded before basis_float32: the basis in float64 (8 K m)
    f64 = cm.driver_mb(dataclasses.replace(s, basis_float32=False), "spark")
    assert f64["basis"] == pytest.approx(2 * spark["basis"])
    assert f64["basis"] == pytest.approx(8.0 * k * cap / cm.MB)


def test_driver_memory_counts_the_result_and_the_old_ritz_vectors() -> None:
    """The eigensolver's result moment: the images and the p x r Ritz images, and the basis
    in runs recorded before basis_freed_result; runs recorded before images_only_result
    also held K x r float64 Ritz vectors and Φ's step (8 p r) beside them: with a wide r
    that moment is the peak."""
    s = dataclasses.replace(_sizes(), r=150, block=10, lanczos_iterations=6)
    p, k, r = 4000, 5000, 150
    cap = s.basis_cap()
    images = 4.0 * p * min(6 * s.block, cap)
    kept = cm.driver_mb(dataclasses.replace(s, basis_freed_result=False), "spark")
    assert kept["moment"] == 3.0
    want = cm.DRIVER_BASE_MB * cm.MB + 4.0 * k * cap + images + 4.0 * p * r
    assert kept["total"] == pytest.approx(want / cm.MB)
    # the basis freed first: the end holds the images and the Ritz images only, now below
    # the iterations' moments (the basis, the images and the p x b arrays)
    new = cm.driver_mb(s, "spark")
    end = cm.DRIVER_BASE_MB * cm.MB + images + 4.0 * p * r
    assert new["moment"] != 3.0 and new["total"] * cm.MB >= end
    assert new["total"] < kept["total"]
    old = cm.driver_mb(
        dataclasses.replace(s, basis_float32=False, images_only_result=False), "spark"
    )
    want_old = cm.DRIVER_BASE_MB * cm.MB + 8.0 * k * cap + images + 8.0 * p * r + 8.0 * k * r
    assert old["total"] == pytest.approx(want_old / cm.MB)


def test_spark_phase_wall_is_work_over_cores_when_tasks_fill_them() -> None:
    # the code before fused_tasks: every language fused and split over both cores: a
    # solve's wall is the sum of its languages' task times (FIFO, one language after the
    # other), plus one job latency
    s = replace(_sizes(), tasks_per_language=False)
    mc = cm.Machine(tau=0.0)
    pr = cm.predict_spark(s, mc)
    tasks = [cm._spark_solve_jobs(s, mc, lang, s.q(lang, 0), s.block)[0][0] for lang in s.nnz]
    assert all(n == 2 for n, _ in tasks)
    assert pr.solves[0] == pytest.approx(sum(t for _, t in tasks) + mc.job_s)
    # now: two languages on two cores, one task each, side by side
    s = _sizes()
    pr = cm.predict_spark(s, mc)
    tasks = [cm._spark_solve_jobs(s, mc, lang, s.q(lang, 0), s.block)[0][0] for lang in s.nnz]
    assert all(n == 1 for n, _ in tasks)
    assert pr.solves[0] == pytest.approx(max(t for _, t in tasks) + mc.job_s)
