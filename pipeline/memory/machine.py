"""The machine this process runs on: its memory (physical, or a container's cgroup limit),
its cores, and what the kernel reports available now.

:attr:`Machine.usable` is the memory a run may take: :data:`USABLE_FRACTION` of the memory,
or what is available now if that is less.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

__all__ = ["USABLE_FRACTION", "GiB", "Machine", "MiB"]

MiB = 2**20
GiB = 2**30

#: Share of the machine's memory the run may use; the rest is the OS's, its page cache's and
#: other processes'.
USABLE_FRACTION = 0.85


@dataclass(frozen=True)
class Machine:
    """Memory and cores of the machine this process runs on.

    ``memory`` is the physical memory, or the cgroup limit where one is lower (a container);
    ``available`` what the kernel reports free for new work now (``MemAvailable``), when known.
    """

    memory: int
    cores: int
    available: int | None = None

    @classmethod
    def detect(cls) -> Machine:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
            try:
                with open(path, encoding="ascii") as f:
                    limit = f.read().strip()
            except OSError:
                continue
            if limit.isdigit() and 0 < int(limit) < memory:
                memory = int(limit)
        return cls(memory=memory, cores=len(os.sched_getaffinity(0)), available=_first_available())

    @property
    def usable(self) -> int:
        """:data:`USABLE_FRACTION` of the memory, or what is available now if that is less
        (other programs' memory is not the run's to take)."""
        share = int(USABLE_FRACTION * self.memory)
        return share if self.available is None else min(share, self.available)


@functools.cache
def _first_available() -> int | None:
    """``MemAvailable`` as this process first read it. Read once: the session's heap is planned
    from it, and the driver's own JVM growing into that heap lowers later readings, which
    would count the heap twice and refuse a fit that the session was sized for."""
    return _mem_available()


def _mem_available() -> int | None:
    """``MemAvailable`` of /proc/meminfo in bytes (None where there is none)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
