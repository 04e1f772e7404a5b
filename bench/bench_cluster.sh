#!/usr/bin/env bash
# The whole chain (the README's stage commands on the generated text) in local[2] and on a
# Spark standalone cluster of two one-core workers on this machine (deploy/standalone.py:
# separate executor JVMs and Python workers, the driver apart), back to back on the same
# corpus, then bench/compare_chains.py: the datasets row for row, the model to rounding,
# and per stage wall, CPU, peaks per process, bytes shuffled and broadcast.
#
#   OPENBLAS_NUM_THREADS=1 bash bench/bench_cluster.sh [DOCS] [WORKDIR] [OUT_PREFIX]
#
# writes <OUT_PREFIX>_local2.json|txt, <OUT_PREFIX>_standalone2.json|txt and
# <OUT_PREFIX>_standalone_vs_local.json|txt (default bench/results/chain_1M for 1,000,000).
# Executors: spark.executor.memory 4g and spark.executor.memoryOverhead 4g each (the memory
# plan gives each Python worker the overhead beyond 384 MB); a cluster's own settings, not
# the pipeline's.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DOCS="${1:-1000000}"
WORK="${2:-/tmp/cr5_cluster_$DOCS}"
if (( DOCS % 1000000 == 0 )); then SIZE="$((DOCS / 1000000))M"; else SIZE="$((DOCS / 1000))k"; fi
OUT="${3:-$REPO/bench/results/chain_$SIZE}"
PY="${PYTHON:-$REPO/.venv/bin/python}"
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}"
CHAIN=("$PY" "$REPO/bench/bench_chain.py" --docs "$DOCS" --text-stages)
echo "bench_cluster: $DOCS documents, commit $(git -C "$REPO" rev-parse --short HEAD), $(date -u +%FT%TZ)"
"${CHAIN[@]}" --workdir "$WORK/local" --label local2 --out "${OUT}_local2.json" > "${OUT}_local2.txt" 2>&1
# the cluster's run reads the corpus generated above
mkdir -p "$WORK/standalone/records"
ln -sfn "$WORK/local/out" "$WORK/standalone/out"
cp "$WORK/local/records/generate.json" "$WORK/standalone/records/"
"${CHAIN[@]}" --workdir "$WORK/standalone" --skip-generate --standalone 2 --worker-cores 1 \
    --worker-memory 8g --executor-memory 4g --executor-overhead 4g --label standalone2 \
    --out "${OUT}_standalone2.json" > "${OUT}_standalone2.txt" 2>&1
"$PY" "$REPO/bench/compare_chains.py" "${OUT}_local2.json" "${OUT}_standalone2.json" \
    --out "${OUT}_standalone_vs_local.json" | tee "${OUT}_standalone_vs_local.txt"
