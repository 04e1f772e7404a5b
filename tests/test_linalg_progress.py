"""The eigensolver's ETA: none until it can be estimated, then trend x recent cost."""

from __future__ import annotations

import math

import pytest

from pipeline.linalg.progress import ProgressClock, format_seconds


class FakeTime:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def run(clock: ProgressClock, fake: FakeTime, residuals, seconds_per_iteration, start=0):
    out = []
    for i, res in enumerate(residuals, start + 1):
        fake.t += seconds_per_iteration
        out.append(clock.eta(i, res))
    return out


def test_no_eta_until_estimable_then_exact_for_a_geometric_decay():
    fake = FakeTime()
    clock = ProgressClock(250, 0.11, clock=fake)
    # the residual halves every iteration from 12.8
    res = [12.8 / 2**k for k in range(6)]
    etas = run(clock, fake, res, 0.5)
    assert etas[:2] == [None, None]
    for it, (r, eta) in enumerate(zip(res, etas), 1):
        if it >= 3:
            left = math.ceil(math.log2(r / 0.11))
            assert eta == pytest.approx(left * 0.5)
    assert clock.eta(7, 0.1) == 0.0


def test_infinite_and_flat_residuals_give_no_eta_not_zero():
    """The old clock said 0.0s after a first infinite residual (log(inf) rate)."""
    fake = FakeTime()
    clock = ProgressClock(250, 0.1, clock=fake)
    assert run(clock, fake, [math.inf, math.inf, 5.0, 5.0, 5.1, 5.0], 1.0) == [None] * 6


def test_cap_and_recent_cost():
    fake = FakeTime()
    clock = ProgressClock(10, 1e-9, clock=fake)
    etas = run(clock, fake, [1.0, 0.9, 0.81, 0.729], 2.0)
    assert etas[-1] == pytest.approx((10 - 4) * 2.0)  # the trend needs > 6 more: capped
    fake2 = FakeTime()
    slow = ProgressClock(100, 0.1, clock=fake2)
    run(slow, fake2, [8.0, 4.0, 2.0], 1.0)
    fake2.t += 3.0  # iterations got dearer
    eta = slow.eta(4, 1.0)
    assert eta == pytest.approx(4 * (1 + 1 + 1 + 3) / 4)


def test_resumed_iterations_do_not_count():
    fake = FakeTime()
    clock = ProgressClock(250, 0.1, start_iteration=40, clock=fake)
    assert run(clock, fake, [8.0, 4.0], 1.0, start=40) == [None, None]
    assert format_seconds(None) == "?" and format_seconds(75) == "1m15s"
