#!/usr/bin/env bash
# Set up ./.venv with the test tools if needed, then run the whole test suite
# (Spark in local mode, one session per pytest worker). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
# Airflow for tests/test_airflow.py, in ./.venv-airflow (idempotent; CR5_SKIP_AIRFLOW=1 skips
# both the install and those tests), and Debian's headless Chromium and its driver for the
# search page's browser test (apt-get, idempotent; CR5_SKIP_BROWSER=1 skips both the install
# and that test) install in the background while ./.venv does: on a fresh machine the three
# are mostly downloads, and overlapping them saves minutes. Their output is shown when they end.
# The virtual environments are created first, one after the other: on a Debian without
# python3-venv that step may run apt-get, which the browser's install must not race.
# shellcheck source=scripts/venv_lib.sh
. scripts/venv_lib.sh
ensure_venv .venv setup 99
if [ "${CR5_SKIP_AIRFLOW:-0}" != 1 ]; then ensure_venv .venv-airflow setup_airflow 13; fi
logs=$(mktemp -d)
declare -A bg=()
if [ "${CR5_SKIP_AIRFLOW:-0}" != 1 ]; then
  bash scripts/setup_airflow.sh >"$logs/airflow.log" 2>&1 & bg[setup_airflow.sh]=$!
fi
if [ "${CR5_SKIP_BROWSER:-0}" != 1 ]; then
  bash scripts/setup_browser.sh >"$logs/browser.log" 2>&1 & bg[setup_browser.sh]=$!
fi
status=0
bash scripts/setup.sh dev || status=$?
for name in "${!bg[@]}"; do
  log="$logs/$([ "$name" = setup_airflow.sh ] && echo airflow || echo browser).log"
  if wait "${bg[$name]}"; then cat "$log"; else
    cat "$log" >&2; echo "test.sh: scripts/$name failed (output above)" >&2; status=1
  fi
done
rm -rf "$logs"
[ "$status" = 0 ] || exit "$status"
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}"
# Two pytest workers (pytest-xdist), each with its own Spark session, a test file at a time
# (--dist loadfile: a file's module-scoped fixtures, such as a standalone cluster, stay in
# one worker). Much of the suite waits on JVMs starting, subprocesses and clusters, so two
# files at once finish sooner even on two cores. CR5_TEST_WORKERS=0 runs in this process.
exec .venv/bin/python -m pytest -n "${CR5_TEST_WORKERS:-2}" --dist loadfile "$@"
