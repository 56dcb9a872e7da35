#!/usr/bin/env bash
# Tensor parallelism, fused MoE and the online benchmark on a lent 2-GPU machine (nvidia-h200-x2).
# Run after the kit preamble (../shared/device/kit.sh), with the model configs staged in
# .bench-models/ (benchmark/prepare_model.py). Writes everything under $OUT (default results/).
set -uo pipefail
OUT=${OUT:-results}
mkdir -p "$OUT"
step() { echo; echo "=== $* ($(date +%T))"; }

step "TP=2 over NCCL equals TP=1 (tiny models, float32)"
python -m pytest -q -p no:cacheprovider tests/distributed/test_tensor_parallel_cuda.py 2>&1 | tail -3

step "NCCL all-reduce per decode step, Qwen3-8B shapes"
python benchmark/offline/allreduce.py --config .bench-models/qwen3-8b --tp 2 --out "$OUT/allreduce.json"

step "MoE layer: grouped GEMM vs per-expert loop, Qwen3-30B-A3B shapes"
python benchmark/offline/moe_layer.py --config .bench-models/qwen3-30b-a3b --out "$OUT/moe_layer.json"

for tp in 1 2; do
    step "offline throughput, Qwen3-8B shapes, dummy weights, TP=$tp"
    python benchmark/offline/bench.py --model .bench-models/qwen3-8b --dummy-weight --tp $tp --dtype bfloat16 \
        --num-requests 256 --max-input-len 1024 --max-output-len 256 --out "$OUT/offline-qwen3-8b-tp$tp.json" 2>&1 \
        | grep -E "start-up|minisgl:|wrote|Error|error"
done

step "online benchmark, Qwen3-0.6B shapes, dummy weights, three rates"
CUDA_VISIBLE_DEVICES=0 python benchmark/online/bench.py --launch --rates 4,16,64 --num-requests 256 \
    --max-input-len 1024 --max-output-len 256 --ready-timeout 300 --out "$OUT/online-qwen3-0.6b.json" \
    -- --model .bench-models/qwen3-0.6b --dummy-weight 2>&1 | grep -v "it/s\]" | tail -12
