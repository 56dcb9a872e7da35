#!/usr/bin/env bash
# Tensor parallelism, fused MoE and the online benchmark on a lent 2-GPU machine (nvidia-h200-x2).
# Run after the kit preamble (../shared/device/kit.sh), with the model configs staged in
# .bench-models/ (benchmark/prepare_model.py). Results go to $RES, tarred into $OUT/results.tgz.
set -uo pipefail
RES=${RES:-/tmp/results}
mkdir -p "$RES"
step() { echo; echo "=== $* ($(date +%T))"; }
SIZE=(--num-requests "${NREQ:-128}" --max-input-len 1024 --max-output-len "${NOUT:-256}")

step "TP=2 over NCCL equals TP=1 (tiny models, float32)"
timeout 300 python -m pytest -q -rA --tb=short -p no:cacheprovider tests/distributed/test_tensor_parallel_cuda.py \
    > "$RES/tp_cuda_test.log" 2>&1; tail -25 "$RES/tp_cuda_test.log"

step "NCCL all-reduce per decode step, Qwen3-8B shapes"
timeout 60 python benchmark/offline/allreduce.py --config .bench-models/qwen3-8b --tp 2 --out "$RES/allreduce.json"

step "offline throughput, Qwen3-8B shapes, dummy weights, TP=2"
timeout 200 python benchmark/offline/bench.py --model .bench-models/qwen3-8b --dummy-weight --tp 2 --dtype bfloat16 \
    "${SIZE[@]}" --out "$RES/offline-qwen3-8b-tp2.json" 2>&1 | grep -E "start-up|minisgl:|Error|error" | grep -v Warn

step "in parallel: TP=1 on GPU 0; MoE layer then the online benchmark on GPU 1"
(CUDA_VISIBLE_DEVICES=0 timeout 200 python benchmark/offline/bench.py --model .bench-models/qwen3-8b --dummy-weight \
    --tp 1 --dtype bfloat16 "${SIZE[@]}" --out "$RES/offline-qwen3-8b-tp1.json" > "$RES/tp1.log" 2>&1) &
(CUDA_VISIBLE_DEVICES=1 timeout 60 python benchmark/offline/moe_layer.py --config .bench-models/qwen3-30b-a3b \
    --out "$RES/moe_layer.json" > "$RES/moe.log" 2>&1;
 CUDA_VISIBLE_DEVICES=1 timeout 200 python benchmark/online/bench.py --launch --rates 4,16,64 --num-requests 96 \
    --max-input-len 1024 --max-output-len 128 --ready-timeout 150 --out "$RES/online-qwen3-0.6b.json" \
    -- --model .bench-models/qwen3-0.6b --dummy-weight > "$RES/online.log" 2>&1) &
wait
step "TP=1"; grep -E "start-up|minisgl:|Error|error" "$RES/tp1.log" | grep -v Warn
step "MoE layer"; grep -E "tokens:|Error" "$RES/moe.log"
step "online"; grep -v "it/s\]" "$RES/online.log" | tail -12
tar czf "${OUT:-.}/results.tgz" -C "$RES" .
