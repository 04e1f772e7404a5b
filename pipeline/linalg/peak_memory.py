"""The process's resident-set high-water mark, read where a solver's phases end.

A fit records it after each phase (and each eigensolver iteration) in its history; the
phase after which it first reaches its largest value is the one that set the driver's peak.
(Linux reports the larger of the recorded mark and the current resident set, and updates
the recorded mark lazily, so a reading can come out lower than an earlier one after pages
are released: the peak is the largest reading, not the last.) That is what the memory
plan's and the cost model's moments are checked against (docs/scaling.md), on a real run
rather than a separate profiler's.
"""

from __future__ import annotations

__all__ = ["peak_resident_mib"]

MiB = 2**20


def peak_resident_mib() -> float | None:
    """This process's ``VmHWM`` (peak resident set) in MiB; None where ``/proc`` has none.

    Not ``resource.getrusage``'s ``ru_maxrss``: Linux carries a parent's mark over
    fork + exec, so a process started by a large one would report the parent's peak.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024 / MiB
    except (OSError, ValueError, IndexError):
        return None
    return None
