"""Run job stages and die (SIGKILL, no cleanup) in the middle of publishing a directory.

Used by the cluster test: ``python tests/killed_publish.py TARGET [job arguments]`` runs
``pipeline.runner.main(job arguments)`` with the Hadoop store's upload of ``TARGET``
(``model`` or ``index``) replaced by one that kills this process after half of the
directory's files reached the store's temporary directory. Only this harness patches
anything; the job code runs unchanged up to that point.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from pipeline.io.hadoop import HadoopFS


def main() -> int:
    target, *job = sys.argv[1:]
    staged = f"/.{target}.tmp-"
    put = HadoopFS.put

    def killing_put(self: HadoopFS, local: str, p: str) -> None:
        if staged in p:
            files = sorted(f for f in Path(local).rglob("*") if f.is_file())
            for f in files[: max(1, len(files) // 2)]:
                put(self, str(f), f"{p}/{f.relative_to(local).as_posix()}")
            os.kill(os.getpid(), signal.SIGKILL)
        put(self, local, p)

    HadoopFS.put = killing_put  # type: ignore[method-assign]
    from pipeline.runner import main as run

    return run(argv=job)


if __name__ == "__main__":
    sys.exit(main())
