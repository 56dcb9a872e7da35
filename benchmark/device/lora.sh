#!/usr/bin/env bash
# Multi-LoRA on one GPU (issue 40): the LoRA GPU tests (mixed adapters in decode CUDA graphs equal
# the CPU; the gathered kernels equal the torch apply), then the offline workload on Qwen3-8B shapes
# with dummy weights, base model and then its requests spread over 8 random adapters of rank 16, in
# one process: throughput ratio and the decode steps replayed from CUDA graphs
# (benchmark/offline/lora.py).
#
#   bash benchmark/device/lora.sh            # nvidia-h100-x1
#
# Run after the kit preamble (../shared/device/kit.sh) with carry [".device-kit", ".bench-models"], the
# model staged by `python benchmark/prepare_model.py ../shared/models/qwen3-8b .bench-models/qwen3-8b`.
# STEPS picks parts (default: tests bench); NREQ, NOUT size the workload. Results: $OUT/results.tgz.
set -uo pipefail
export PYTHONUNBUFFERED=1
RES=${RES:-/tmp/results}
mkdir -p "$RES"
. benchmark/device/lib.sh
restore_jit_cache
restore_aot_kernels
trap 'tar czf "${OUT:-/tmp}/results.tgz" -C "$RES" .' EXIT
MODEL=.bench-models/qwen3-8b
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader

for part in ${STEPS:-tests bench}; do
    case "$part" in
    tests)
        step "LoRA GPU tests"
        timeout 300 python -m pytest tests/llm/test_lora_cuda.py tests/kernels/test_lora.py -q -p no:cacheprovider 2>&1 | tail -5 ;;
    bench)
        step "offline workload: base, then 8 adapters of rank 16"
        timeout 480 python benchmark/offline/lora.py --model "$MODEL" --dummy-weight --num-adapters 8 --lora-rank 16 \
            --num-requests "${NREQ:-256}" --max-input-len 1024 --max-output-len "${NOUT:-256}" \
            --out "$RES/lora.json" > "$RES/lora.log" 2>&1
        echo "exit $?"
        grep -vE "it/s\]|s/it\]" "$RES/lora.log" | tail -8 ;;
    esac
done
