"""The training loop's progress lines within an epoch (pipeline.neural.loop.EpochProgress)."""

from __future__ import annotations

import logging

import pytest

from pipeline.neural.loop import EpochProgress


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_line_every_interval_with_the_mean_loss_rate_and_eta(caplog):
    clock = FakeClock()
    progress = EpochProgress(2, 3, n_steps=100, interval=10.0, clock=clock)
    caplog.set_level(logging.INFO, logger="pipeline.neural.loop")
    loss_sum = 0.0
    for step in range(1, 101):
        clock.now = 0.5 * step  # two steps a second
        loss_sum += 3.0
        progress.step(step, loss_sum)
    lines = [r.getMessage() for r in caplog.records]
    # at 10 s, 20 s, ..., 45 s: step 20, 40, 60, 80 (the last step logs nothing: the epoch
    # line follows)
    assert len(lines) == 4, lines
    assert lines[0].startswith("neural epoch 2/3: step 20/100 (20%), loss 3.00000, 2 steps/s")
    assert lines[0].endswith("epoch ETA 40.0s")  # 80 steps left at 2 steps/s
    assert "step 80/100 (80%)" in lines[-1] and lines[-1].endswith("epoch ETA 10.0s")


@pytest.mark.parametrize("interval", [0.0, -1.0])
def test_no_line_when_off(caplog, interval):
    clock = FakeClock()
    progress = EpochProgress(1, 1, n_steps=10, interval=interval, clock=clock)
    caplog.set_level(logging.INFO, logger="pipeline.neural.loop")
    for step in range(1, 11):
        clock.now = 100.0 * step
        progress.step(step, float(step))
    assert caplog.records == []
