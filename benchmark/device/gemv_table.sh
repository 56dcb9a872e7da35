#!/usr/bin/env bash
# This GPU's GEMV tile table and what it does to batch-1 FP8 decode, in one call:
#   1. Llama-3.1-8B shapes, batch 1, FP8 weights (dummy): TPOT against the weight-read floor with
#      the tiles the tree has (benchmark/offline/latency.py);
#   2. the FP8 GEMV's tile sweep at SWEEP_ROWS (default 1; e.g. 2,4 then 8,16 in later calls),
#      written into minisgl/kernels/gemv_tuned/ (merged: a sweep replaces only the shapes it swept)
#      and copied to $OUT (benchmark/offline/fp8_gemv.py --write-table);
#   3. the same TPOT with the new table, in the same process tree's machine.
# Commit $OUT/<gpu model>.json into minisgl/kernels/gemv_tuned/ (carry it there for the next rows).
# Run after the kit preamble (../shared/device/kit.sh), carrying .device-kit and .bench-models:
#   python benchmark/prepare_model.py ../shared/models/llama-3.1-8b .bench-models/llama-3.1-8b
set -uo pipefail
. benchmark/device/lib.sh  # start_results, step
start_results
LLAMA=$PWD/.bench-models/llama-3.1-8b
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
quiet() { grep -vE "it/s\]|s/it\]|tensor/s\]|Loading weights|Writing model"; }
tpot() {  # $1: a name for the run
    step "Llama-3.1-8B shapes, batch 1, FP8 weights: $1"
    timeout "${LATENCY_TIMEOUT:-200}" python benchmark/offline/latency.py --model "$LLAMA" --dummy-weight \
        --quantization fp8 --out "$RES/latency-fp8-$1.json" > "$RES/latency-fp8-$1.log" 2>&1
    echo "exit $?"; quiet < "$RES/latency-fp8-$1.log" | grep -E "weights:|TPOT|floor|Error|error" | tail -4
}
[ -z "${SKIP_BEFORE:-}" ] && tpot before
step "FP8 GEMV tile sweep at rows ${SWEEP_ROWS:-1}"
timeout "${SWEEP_TIMEOUT:-300}" python benchmark/offline/fp8_gemv.py --config "$LLAMA" --rows "${SWEEP_ROWS:-1}" \
    --sweep-rows "${SWEEP_ROWS:-1}" --write-table minisgl/kernels/gemv_tuned --out "$RES/fp8_gemv.json" \
    > "$RES/fp8_gemv.log" 2>&1
echo "exit $?"; grep -vE "config \{" "$RES/fp8_gemv.log" | tail -25
cp minisgl/kernels/gemv_tuned/*.json "${OUT:-/tmp}/" 2>/dev/null
tpot after
