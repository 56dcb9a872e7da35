#!/usr/bin/env bash
# Qwen3-30B-A3B decode at TP=1 on one GPU, this tree against a baseline tree in
# the same call: the MoE kernels' GPU tests, the MoE layer at decode's token counts (GEMV path vs
# block-aligned, with a tile sweep), then per tree batch-1 and batch-8 TPOT (latency.py) and a
# kernel profile of the decode step (profile_steps.py).
#
#   bash benchmark/device/moe_decode.sh            # nvidia-h100-x1, ~8 min
#   STEPS="tests layer4 tp2 tp4 dense1" bash benchmark/device/moe_decode.sh   # nvidia-h100-x4 / h200-x4
#
# Parts: tests; fused (the all-reduce + RMSNorm fusion's GPU tests on 2 and 4 GPUs); layer (the MoE
# layer, TP=1 shapes) or layerN (one rank's share at TP=N); bN (batch-N
# TPOT and profile at TP=1); tpN (batch-1 TPOT at TP=N, base then new); step8bN (Qwen3-8B's batch-256
# decode step profiled at TP=N, base then new); arN (all-reduce microbenchmark at TP=N, Qwen3-8B shapes);
# off8bN (Qwen3-8B offline throughput at TP=N, this tree); denseN (Qwen3-8B batch-N
# TPOT at TP=1, base then new); profN / prof8b (profile_steps.py of this tree: Qwen3-30B-A3B's batch-1
# step at TP=N, Qwen3-8B's batch-256 step at TP=1). A part that would start after DEADLINE seconds (default 540) is
# skipped, so the call returns what it has within the device's 10 minutes.
#
# The baseline: a copy of minisgl/ with the files under test as in an earlier commit, in an ignored
# folder carried with the call, e.g.
#   rm -rf .base && mkdir .base && cp -r minisgl .base/ && git show REV:minisgl/layers/moe.py > .base/minisgl/layers/moe.py ...
# Run after the kit preamble (../shared/device/kit.sh) with carry [".device-kit", ".bench-models", ".base"],
# the model staged by `python benchmark/prepare_model.py ../shared/models/qwen3-30b-a3b .bench-models/qwen3-30b-a3b`.
# STEPS picks parts (default: tests layer b1 b8). Results: $OUT/results.tgz.
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
. benchmark/device/lib.sh
start_results
MODEL=.bench-models/qwen3-30b-a3b
BASE=${BASE:-.base}
NEW=$PYTHONPATH
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
summary() { grep -hE "TPOT|== decode|moe |gemm|attention|rmsnorm|kernels per|Error|error:|Traceback" "$@" | grep -v Warn; }

begin=$SECONDS
tree_path() {  # $1 tree (base|new): its PYTHONPATH (the base tree's minisgl/ ahead of this one's)
    if [ "$1" = base ]; then echo "$BASE:$NEW"; else echo "$NEW"; fi
}
tpot() {  # $1 tree (base|new), $2 model dir, $3 tp, $4 batch, $5 result name: TPOT of that tree
    step "$5, $1: batch-$4 TPOT at TP=$3"
    PYTHONPATH=$(tree_path "$1") timeout 150 python benchmark/offline/latency.py --model "$2" --dummy-weight --tp "$3" \
        --batch "$4" --out "$RES/latency-$5-$1.json" > "$RES/latency-$5-$1.log" 2>&1
    summary "$RES/latency-$5-$1.log"
}
for part in ${STEPS:-tests layer b1 b8}; do
    if [ $((SECONDS - begin)) -gt "${DEADLINE:-540}" ]; then echo "skipped $part: past the deadline"; continue; fi
    case "$part" in
    tests)
        step "MoE kernels and layer on the GPU against the per-expert loop"
        timeout "${TESTS_TIMEOUT:-300}" python -m pytest -q -x -p no:cacheprovider tests/kernels/test_moe_decode.py \
            tests/kernels/test_fused_moe.py tests/layers/test_moe.py tests/layers/test_linear.py \
            tests/layers/test_embedding.py > "$RES/tests.log" 2>&1
        tail -3 "$RES/tests.log" ;;
    layer*)
        tp=${part#layer}; tp=${tp:-1}
        step "MoE layer at decode's token counts (TP=$tp share): GEMV path vs block-aligned, tile sweep"
        timeout 200 python benchmark/offline/moe_decode.py --config "$MODEL" --tp "$tp" --tokens "${TOKENS:-1,2,3,4,6,8,16}" \
            --sweep --out "$RES/moe_decode-tp$tp.json" 2>&1 | grep -vi warn ;;
    fused)
        step "all-reduce + add + RMSNorm fused, against NCCL then the norm; bf16 TP runs through it"
        timeout 420 python -m pytest -q -x -p no:cacheprovider tests/distributed/test_fused_norm_cuda.py \
            tests/distributed/test_tensor_parallel_cuda.py -k "fused or bf16" > "$RES/fused.log" 2>&1
        grep -E "passed|failed|Error" "$RES/fused.log" | tail -5 ;;
    tp*) for tree in base new; do tpot "$tree" "$MODEL" "${part#tp}" 1 "tp${part#tp}-b1"; done ;;
    ar*)  # the all-reduce microbenchmark at TP=N on Qwen3-8B's shapes, with the fused all-reduce + RMSNorm
        step "all-reduce per call at TP=${part#ar}: NCCL, custom one/two-shot, fused with add + RMSNorm"
        timeout 120 python benchmark/offline/allreduce.py --config .bench-models/qwen3-8b --tp "${part#ar}" \
            --batches 1,8,32,64,128,256 --out "$RES/allreduce-8b-tp${part#ar}.json" 2>&1 | grep -E "^batch|^fused" ;;
    off8b*)  # Qwen3-8B offline at TP=N (the scaling workload), this tree
        step "Qwen3-8B offline, 256 requests <= 1024 in / <= 256 out, TP=${part#off8b}"
        timeout 200 python benchmark/offline/bench.py --model .bench-models/qwen3-8b --dummy-weight --tp "${part#off8b}" \
            --dtype bfloat16 --num-requests 256 --max-input-len 1024 --max-output-len 256 \
            --out "$RES/offline-8b-tp${part#off8b}.json" > "$RES/offline-8b-tp${part#off8b}.log" 2>&1
        grep -E "tok/s|Error|error:" "$RES/offline-8b-tp${part#off8b}.log" | grep -v Warn | tail -4 ;;
    step8b*)  # Qwen3-8B's batch-256 decode step at TP=N, base then new
        for tree in base new; do
            step "step8b, $tree: Qwen3-8B batch-256 decode at TP=${part#step8b}"
            PYTHONPATH=$(tree_path "$tree") profile_step "8b-tp${part#step8b}-$tree" --model .bench-models/qwen3-8b \
                --tp "${part#step8b}" --requests 256 --prompt-len 512 --prefill-tokens 2048 | sed -n '/== decode/,/== prefill/p' | head -24
        done ;;
    prof*)  # profN: this tree's batch-1 step at TP=N; prof8b: Qwen3-8B's batch-256 decode and 16k-token prefill at TP=1
        args=(--model "$MODEL" --tp "${part#prof}" --requests 1 --prompt-len 128 --prefill-tokens 128)
        [ "$part" = prof8b ] && args=(--model .bench-models/qwen3-8b --tp 1 --requests 256 --prompt-len 512 --prefill-tokens 16384)
        step "$part: the step's kernels and host time"
        profile_step "$part" "${args[@]}" ;;
    dense*) for tree in base new; do tpot "$tree" .bench-models/qwen3-8b 1 "${part#dense}" "8b-b${part#dense}"; done ;;
    b*)
        batch=${part#b}
        for tree in base new; do
            tpot "$tree" "$MODEL" 1 "$batch" "b$batch"
            step "batch $batch, $tree: the decode step's kernels"
            PYTHONPATH=$(tree_path "$tree") profile_step "b$batch-$tree" --model "$MODEL" --requests "$batch" \
                --prompt-len 128 --prefill-tokens 128 | sed -n '/== decode/,/== prefill/p' | head -32
        done ;;
    esac
    tar czf "${OUT:-/tmp}/results.tgz" -C "$RES" .
done
