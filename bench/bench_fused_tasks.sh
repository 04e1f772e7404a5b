#!/usr/bin/env bash
# Tasks per fused language on the Spark backend, against the local backend, one session:
# the train stage on a Wikipedia-shaped corpus (bench/wikishape.py, generated once) with
#   local        train.backend=local
#   spark_split  train.backend=spark, train.solve_tasks=<cores> (each fused job split over
#                every task slot: the default before fused_tasks)
#   spark        train.backend=spark, defaults (fused_tasks: cores // languages per job)
# and prints each fit's seconds (model.json training.fit_seconds) and its ratio to local.
#
#   OPENBLAS_NUM_THREADS=1 bash bench/bench_fused_tasks.sh [DOCS] [WORKDIR] > bench/results/fused_tasks_200k.txt
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DOCS="${1:-200000}"
WORK="${2:-/tmp/cr5_fused_tasks_$DOCS}"
PY="${PYTHON:-$REPO/.venv/bin/python}"
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}" PYTHONPATH="$REPO"
ROOT="$WORK/out"
CONF=(--conf "$REPO/conf/local.yaml" --conf "$REPO/bench/wikishape.yaml" --set "paths.root=$ROOT" --set train.r=100)
CORES="$(nproc)"
echo "bench_fused_tasks: $DOCS documents, $CORES cores, OPENBLAS_NUM_THREADS=$OPENBLAS_NUM_THREADS," \
    "commit $(git -C "$REPO" rev-parse --short HEAD), $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
if [ ! -d "$ROOT/tfidf" ]; then
    "$PY" "$REPO/bench/wikishape.py" "${CONF[@]}" --docs "$DOCS" --seed 0 --report "$WORK/generate.json" \
        > "$WORK.generate.log" 2>&1
fi
fit() {  # name, extra --set arguments...
    local name="$1"; shift
    local model="$ROOT/model_$name"
    "$PY" "$REPO/jobs/train.py" "${CONF[@]}" --set "paths.model=$model" "$@" > "$WORK.$name.log" 2>&1
    "$PY" -c "import json,sys; t=json.load(open(sys.argv[1]))['training']; print(t['fit_seconds'], t.get('passes_over_x', {}).get('passes', {}).get('gram', ''))" \
        "$model/model.json"
}
read -r local_s local_gram < <(fit local --set train.backend=local)
read -r split_s split_gram < <(fit spark_split --set train.backend=spark --set "train.solve_tasks=$CORES")
read -r spark_s spark_gram < <(fit spark --set train.backend=spark)
"$PY" - "$local_s" "$split_s" "$spark_s" "$local_gram" "$split_gram" "$spark_gram" <<'PYEOF'
import sys
local, split, spark = map(float, sys.argv[1:4])
grams = sys.argv[4:7]
print(f"{'configuration':<44}{'fit s':>9}{'/ local':>9}{'gram passes':>13}")
for name, s, g in (("local backend", local, grams[0]),
                   ("spark, every fused job over all slots", split, grams[1]),
                   ("spark, defaults (fused_tasks)", spark, grams[2])):
    print(f"{name:<44}{s:>9.1f}{s / local:>9.2f}{g:>13}")
PYEOF
