#!/usr/bin/env bash
# Create or reuse ./.venv-airflow: Apache Airflow 3 with the Apache Spark provider, in a
# virtual environment of its own (Airflow pins many packages the project's .venv must
# not share). Idempotent: a second run with the same pins installs nothing.
#
#   bash scripts/setup_airflow.sh
#
# On Python 3.11 the install is constrained to deploy/airflow/constraints-py3.11.txt
# (the versions the tests pass with); other Pythons (3.10-3.13) resolve freely.
# The provider brings pyspark-client (Spark Connect), not spark-submit: the DAG's tasks
# run the project's own spark-submit (./.venv/bin, from bash scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

venv=.venv-airflow
pins=("apache-airflow==3.3.2" "apache-airflow-providers-apache-spark==6.3.4")

pick_python() {
  for cand in "${PYTHON:-}" python3.11 python3.12 python3.10 python3.13 python3; do
    [ -n "$cand" ] || continue
    if command -v "$cand" >/dev/null 2>&1 &&
       "$cand" -c 'import sys; sys.exit(0 if (3, 10) <= sys.version_info < (3, 14) else 1)' 2>/dev/null; then
      echo "$cand"; return 0
    fi
  done
  echo "setup_airflow: no Python 3.10-3.13 found (set PYTHON=/path/to/python3.11)" >&2
  return 1
}

# A venv whose pip does not work (e.g. left by a failed 'python -m venv' on Debian
# without python3-venv) is rebuilt.
if [ -e "$venv" ] && ! "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
  echo "setup_airflow: $venv is incomplete; recreating it"
  rm -rf "$venv"
fi
if [ ! -x "$venv/bin/python" ]; then
  py=$(pick_python)
  echo "setup_airflow: creating $venv with $($py --version)"
  err=$(mktemp)
  if ! "$py" -m venv "$venv" 2>"$err"; then
    # Debian's python3 ships venv's ensurepip in a separate package (as scripts/setup.sh).
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
      ver=$("$py" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
      echo "setup_airflow: installing python${ver}-venv with apt-get"
      apt-get update -qq && (apt-get install -y -qq "python${ver}-venv" || apt-get install -y -qq python3-venv)
      rm -rf "$venv"; "$py" -m venv "$venv"
    else
      cat "$err" >&2; rm -f "$err"; rm -rf "$venv"
      echo "setup_airflow: '$py -m venv' failed; install your distribution's venv package (Debian: sudo apt-get install python3-venv)" >&2
      exit 1
    fi
  fi
  rm -f "$err"
fi

pyver=$("$venv/bin/python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
constraints="deploy/airflow/constraints-py${pyver}.txt"
cargs=()
[ -f "$constraints" ] && cargs=(-c "$constraints")

want="$({ printf '%s\n' "${pins[@]}"; if [ -f "$constraints" ]; then cat "$constraints"; fi; } | sha256sum | cut -c1-16)"
stamp="$venv/.cr5-airflow-installed"
if [ ! -f "$stamp" ] || ! grep -qx -- "$want" "$stamp"; then
  echo "setup_airflow: installing ${pins[*]} into $venv (about 1.5 min, ~660 MB)${cargs[*]:+ with $constraints}"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
  "$venv/bin/python" -m pip install -q --disable-pip-version-check ${cargs[@]+"${cargs[@]}"} "${pins[@]}"
  echo "$want" > "$stamp"
fi
# Versions without importing airflow (which would create ~/airflow on first import).
"$venv/bin/python" - <<'PY'
from importlib.metadata import version
print("setup_airflow: apache-airflow", version("apache-airflow"),
      "+ apache-airflow-providers-apache-spark", version("apache-airflow-providers-apache-spark"))
PY
