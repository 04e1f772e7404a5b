"""Elapsed time and ETA for iterative solvers (for one log line per iteration)."""

from __future__ import annotations

import math
import time

__all__ = ["ProgressClock", "format_seconds"]


def format_seconds(seconds: float | None) -> str:
    """``"1h02m"``, ``"3m05s"``, ``"4.2s"`` or ``"?"``."""
    if seconds is None or not math.isfinite(seconds):
        return "?"
    if seconds < 60:
        return f"{seconds:.1f}s"
    m, s = divmod(round(seconds), 60)
    if m < 60:
        return f"{m}m{s:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m"


class ProgressClock:
    """Time per iteration and an ETA extrapolated from the residual's geometric decay.

    The remaining iterations are ``ceil(log(res / tol) / rate)`` where ``rate`` is the mean
    decrease of ``log(res)`` per iteration so far (capped by the iterations left before
    ``maxiter``); without a decrease yet, the cap itself.
    """

    def __init__(self, maxiter: int, tol: float, *, start_iteration: int = 0) -> None:
        self.maxiter, self.tol = maxiter, tol
        self.t0 = time.perf_counter()
        self.start = start_iteration
        self.first_res: float | None = None

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def eta(self, iteration: int, residual: float) -> float | None:
        done = iteration - self.start
        if done <= 0:
            return None
        per_iter = self.elapsed() / done
        left = self.maxiter - iteration
        if self.first_res is None:
            self.first_res = residual
        elif 0 < residual < self.first_res and residual > self.tol and done > 1:
            rate = (math.log(self.first_res) - math.log(residual)) / (done - 1)
            left = min(left, math.ceil(math.log(residual / self.tol) / rate))
        elif residual <= self.tol:
            left = 0
        return max(left, 0) * per_iter
