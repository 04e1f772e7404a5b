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

# shellcheck source=scripts/venv_lib.sh
. scripts/venv_lib.sh
ensure_venv "$venv" setup_airflow 13   # Airflow 3.3 supports Python 3.10-3.13

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
