#!/usr/bin/env bash
# Set up ./.venv with the test tools if needed, then run the whole test suite
# (Spark in local mode, one session for the run). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev
# Airflow for tests/test_airflow.py, in ./.venv-airflow (idempotent; CR5_SKIP_AIRFLOW=1 skips
# both the install and those tests).
if [ "${CR5_SKIP_AIRFLOW:-0}" != 1 ]; then bash scripts/setup_airflow.sh; fi
# Debian's headless Chromium and its driver for the search page's browser test (apt-get,
# idempotent; CR5_SKIP_BROWSER=1 skips both the install and that test).
if [ "${CR5_SKIP_BROWSER:-0}" != 1 ]; then bash scripts/setup_browser.sh; fi
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}"
exec .venv/bin/python -m pytest "$@"
