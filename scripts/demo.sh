#!/usr/bin/env bash
# The main job end to end on the bundled real sample (Debian package descriptions
# in en, de, fr, es): sets up ./.venv if needed, then runs the demo chain of
# stages in one local Spark session, writing datasets under ./out/.
# Extra arguments go to the job, e.g. --set paths.root=/tmp/cr5.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python jobs/chain.py --stages demo \
  --conf conf/local.yaml --conf conf/short-docs.yaml --conf conf/sample.yaml "$@"
