"""What every benchmark records about the machine it ran on (cores, memory, load, threads,
library versions), so a figure can be read against its conditions."""

from __future__ import annotations

import importlib
import os
import platform
from pathlib import Path
from typing import Any

__all__ = ["machine_info", "process_tree"]


def process_tree(root: int) -> dict[int, list[str]]:
    """``{pid: /proc/<pid>/stat fields after the command name}`` of ``root`` and all its
    descendants (field 1 is the parent pid, 11 and 12 utime and stime in ticks)."""
    children: dict[int, list[int]] = {}
    stats: dict[int, list[str]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        children.setdefault(int(fields[1]), []).append(int(d))
        stats[int(d)] = fields
    out: dict[int, list[str]] = {}
    todo = [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            out[pid] = stats[pid]
        todo.extend(children.get(pid, []))
    return out


def machine_info(*libraries: str) -> dict[str, Any]:
    """Machine facts plus the versions of numpy, scipy and ``libraries`` (e.g. "pyspark")."""
    model = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    try:
        mem_gb = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024**3, 1)
    except (ValueError, OSError):
        mem_gb = None
    info: dict[str, Any] = {
        "cores": os.cpu_count(),
        "cpu_model": model,
        "memory_gb": mem_gb,
        "load_average_at_start": load,
        "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS"),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
        "python": platform.python_version(),
    }
    for name in ("numpy", "scipy", *libraries):
        info[name] = importlib.import_module(name).__version__
    return info
