"""Elapsed time and an honest ETA for iterative solvers (one log line per iteration)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

__all__ = ["ProgressClock", "format_seconds"]


def format_seconds(seconds: float | None) -> str:
    """``"1h02m"``, ``"3m05s"``, ``"4.2s"`` or ``"?"`` (not estimable yet)."""
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
    """Time per iteration and an ETA from the observed convergence trend.

    :meth:`eta` returns None ("?") until it can be estimated: it needs ``min_points``
    iterations of this run (resumed ones do not count) with a finite residual, and a
    residual that is falling. Then

    - the rate is the least-squares slope of ``log(residual)`` against the iteration
      over the last ``window`` finite residuals (a geometric decay is a straight line);
    - the iterations left are ``ceil((log(res) - log(tol)) / -slope)``, capped by the
      ``maxiter - iteration`` the solver may still run;
    - each costs the mean wall time of the last ``window`` iterations (a Krylov
      iteration gets dearer as the basis grows, so recent ones are the better guide).

    A residual that is flat or rising gives None rather than a made-up number; an
    infinite residual (not enough Ritz pairs yet) is not a point of the trend.
    """

    def __init__(
        self,
        maxiter: int,
        tol: float,
        *,
        start_iteration: int = 0,
        min_points: int = 3,
        window: int = 5,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.maxiter, self.tol = maxiter, tol
        self.start = start_iteration
        self.min_points, self.window = min_points, window
        self._clock = clock
        self.t0 = clock()
        self._last_t = self.t0
        self._durations: list[float] = []
        self._points: list[tuple[int, float]] = []  # (iteration, log residual)

    def elapsed(self) -> float:
        return self._clock() - self.t0

    def eta(self, iteration: int, residual: float) -> float | None:
        """Record that ``iteration`` finished with ``residual``; seconds left, or None."""
        now = self._clock()
        self._durations.append(now - self._last_t)
        self._last_t = now
        if residual <= self.tol:
            return 0.0
        if math.isfinite(residual) and residual > 0:
            self._points.append((iteration, math.log(residual)))
        pts = self._points[-self.window :]
        if iteration - self.start < self.min_points or len(pts) < self.min_points:
            return None
        xs = [float(i) for i, _ in pts]
        ys = [y for _, y in pts]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        sxx = sum((x - mx) ** 2 for x in xs)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
        if not slope < 0:
            return None
        # (a hair below an integer is that integer: log ratios of exact powers round)
        left = math.ceil((math.log(residual) - math.log(self.tol)) / -slope - 1e-9)
        left = max(0, min(left, self.maxiter - iteration))
        recent = self._durations[-self.window :]
        return left * sum(recent) / len(recent)
