#!/usr/bin/env bash
# T-LASER and cT-LASER (β 0.25 / 0.5 / 1, the paper's grid) trained on a GPU on the Debian
# parallel corpus, in one window of the device machine, then scored again here on the CPU.
#
#   bash bench/neural_gpu.sh prepare    # here: the parallel corpus into data/parallel/
#   # on the device machine (its python3 has torch, sentencepiece, pyarrow, pandas; no Spark
#   # needed), carry: ["data/parallel"], timeout_s 600:
#   bash bench/neural_gpu.sh train      # writes $OUT/gpu.json, $OUT/<variant>.tar
#   bash bench/neural_gpu.sh rescore DIR  # here: untar DIR/*.tar, validation P@1 on the CPU
#
# "train" fits the window: EPOCHS (12) epochs of each variant, the four variants as four
# processes on the one GPU, PARALLEL_CONCEPTS (0: all 110k) concepts, the sample's training
# documents as negatives and validation distractors (bench/bench_ctlaser.py --parallel-only).
# Every model directory is the pipeline's encoder format (load_model reads it).
set -euo pipefail
cd "$(dirname "$0")/.."
CORPUS=data/parallel/debian_l10n_en_de_fr_es.parquet
EPOCHS=${EPOCHS:-12}
PARALLEL_CONCEPTS=${PARALLEL_CONCEPTS:-0}
PY=${PYTHON:-python3}
DEVICE=${DEVICE:-cuda}  # cpu: a smoke test of the same steps
SAMPLE=${SAMPLE:-data/sample/ddtp_en_de_fr_es.parquet}

case "${1:-}" in
prepare)
    [ -f "$CORPUS" ] || .venv/bin/python scripts/build_parallel_corpus.py --langs en,de,fr,es \
        --out "$CORPUS" --cache "${CACHE:-/tmp/debian-l10n-debs}"
    ls -la "$CORPUS"
    ;;
train)
    : "${OUT:?set OUT to the folder whose files come back}"
    nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
    export PYTHONUNBUFFERED=1 OPENBLAS_NUM_THREADS=1
    "$PY" bench/bench_ctlaser.py --device "$DEVICE" --corpus "$SAMPLE" --epochs "$EPOCHS" \
        --variants 0 0.25:1:0:0 0.5:1:0:0 1:1:0:0 --parallel "$CORPUS" \
        --parallel-concepts "$PARALLEL_CONCEPTS" --parallel-only \
        --save /tmp/gpu-models --out "$OUT/gpu.json" 2>&1 | tee "$OUT/train.log"
    for d in /tmp/gpu-models/*/; do
        tar -C /tmp/gpu-models -cf "$OUT/$(basename "$d").tar" "$(basename "$d")"
    done
    ;;
rescore)
    dir="${2:?name the folder the files of the device run came back to}"
    mkdir -p /tmp/gpu-models
    for t in "$dir"/*.tar; do tar -C /tmp/gpu-models -xf "$t"; done
    OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/bench_ctlaser.py --corpus "$SAMPLE" \
        --rescore /tmp/gpu-models/*/
    ;;
*)
    echo "usage: $0 prepare | train | rescore DIR" >&2
    exit 2
    ;;
esac
