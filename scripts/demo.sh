#!/usr/bin/env bash
# The main job end to end on the bundled real sample (Debian package descriptions
# in en, de, fr, es): sets up ./.venv if needed, then runs the demo chain of
# stages in one local Spark session, writing datasets under ./out/.
# Extra arguments go to the job, e.g. --set paths.root=/tmp/cr5.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# One OpenBLAS thread: the same numbers on every run (with threads, the baselines' first CG
# solve differs in the last bits from run to run, and OPCA's loose eigensolver tolerance can
# carry that to the third decimal of its P@1).
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}"
exec .venv/bin/python jobs/chain.py --stages demo \
  --conf conf/local.yaml --conf conf/short-docs.yaml --conf conf/sample.yaml "$@"
