"""Directories on the driver's local file system replaced atomically (no Spark).

For what the driver writes with plain file I/O (model directories, word vectors): the
content goes into a hidden temporary directory beside the target, which then takes the
target's place in one rename; a reader sees the old version or the new one, never a mix.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["staged_directory"]


@contextmanager
def staged_directory(final: Path) -> Iterator[Path]:
    """Yield a new empty ``.<name>.tmp-<token>`` directory beside ``final``.

    When the block ends normally, the previous ``final`` (if any) is renamed aside, the
    temporary directory renamed to ``final`` and the previous version removed. When it
    raises, the temporary directory is removed and ``final`` is untouched.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    token = uuid.uuid4().hex[:12]
    tmp = final.parent / f".{final.name}.tmp-{token}"
    tmp.mkdir()
    try:
        yield tmp
        old = final.parent / f".{final.name}.old-{token}"
        if final.exists():
            os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
