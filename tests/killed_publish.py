"""Run job stages and die (SIGKILL, no cleanup) in the middle of publishing a directory.

Used by the cluster test: ``python tests/killed_publish.py TARGET POINT [job arguments]``
runs ``pipeline.runner.main(job arguments)`` with the Hadoop store's upload or rename of
``TARGET`` (``model`` or ``index``) replaced by one that kills this process:

- ``upload``: after half of the directory's files reached the store's temporary directory;
- ``rename``: after the previous version was renamed aside, before the new one is renamed
  into place (the moment no version is at the target's name).

Only the test harness patches anything; the job code runs unchanged up to that point.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from pipeline.io.hadoop import HadoopFS


def main() -> int:
    target, point, *job = sys.argv[1:]
    staged = f"/.{target}.tmp-"
    put, rename = HadoopFS.put, HadoopFS.rename

    def killing_put(self: HadoopFS, local: str, p: str) -> None:
        if point == "upload" and staged in p:
            files = sorted(f for f in Path(local).rglob("*") if f.is_file())
            for f in files[: max(1, len(files) // 2)]:
                put(self, str(f), f"{p}/{f.relative_to(local).as_posix()}")
            os.kill(os.getpid(), signal.SIGKILL)
        put(self, local, p)

    def killing_rename(self: HadoopFS, src: str, dst: str) -> None:
        if point == "rename" and staged in src:
            os.kill(os.getpid(), signal.SIGKILL)
        rename(self, src, dst)

    HadoopFS.put = killing_put  # type: ignore[method-assign]
    HadoopFS.rename = killing_rename  # type: ignore[method-assign]
    from pipeline.runner import main as run

    return run(argv=job)


if __name__ == "__main__":
    sys.exit(main())
