#!/usr/bin/env bash
# Tensor parallelism and the Qwen3-MoE GPU paths on lent GPUs, one mode per call (each < 9 min):
#
#   bash benchmark/device/tp.sh compact  # nvidia-h200-x2: bf16 TP runs; Qwen3-8B and 30B-A3B TP=2 (custom
#                                        # and NCCL all-reduce) vs TP=1, all-reduce per step, TPOT, start-up.
#                                        # Over 10 min for both: MODELS=qwen3-30b-a3b and TESTS_K="bf16 and Llama"
#                                        # pick a part (the 8B part ran on 2026-11-23, benchmark/NOTES.md)
#   bash benchmark/device/tp.sh quick  # nvidia-h200-x2, ~6 min: the essentials of the modes below (tests,
#                                      # all-reduce NCCL vs custom, MoE layer fused vs grouped)
#   bash benchmark/device/tp.sh test   # nvidia-h200-x2 (or -x4): TP vs TP=1 greedy-equal, every
#                                      # architecture, float32; bf16 TP runs; fused MoE kernels vs the loop;
#                                      # the custom all-reduce vs NCCL and the all-reduce + RMSNorm fusion
#                                      # vs NCCL then the norm, eager and in CUDA graphs
#   bash benchmark/device/tp.sh 8b     # nvidia-h200-x2: Qwen3-8B shapes, TP=2 vs TP=1
#   bash benchmark/device/tp.sh 30b    # nvidia-h200-x2: Qwen3-30B-A3B shapes, TP=2 vs TP=1
#   bash benchmark/device/tp.sh moe    # one H200 (GPU 0 of any kind): Qwen3-30B-A3B against its floors,
#                                      # fused Triton vs grouped GEMM MoE per batch size
#
# 8b / 30b: all-reduce per decode step (NCCL vs the custom one-/two-shot all-reduce, in CUDA
# graphs), offline throughput and start-up (TP=2 with the custom all-reduce, TP=2 NCCL only,
# TP=1), batch-1 TPOT (same three). TP sizes of `test` come from the GPU count (MINISGL_TEST_TP
# overrides, e.g. 4 alone on nvidia-h200-x4 to stay within one call).
#
#   bash benchmark/device/tp.sh scale-8b    # nvidia-h200-x4: TP=1, 2 and 4 (those the GPUs allow) in one
#   bash benchmark/device/tp.sh scale-30b   # call: all-reduce per step, offline tok/s, start-up, batch-1 TPOT
#   bash benchmark/device/tp.sh profile     # nvidia-h100-x4: Qwen3-30B-A3B batch-1 TPOT and its step's
#                                           # kernels and host time at TP=2 and 4; Qwen3-8B offline at TP=1 and 4
#                                           # and its batch-256 decode and prefill steps profiled at TP=4
#
# Run after the kit preamble (../shared/device/kit.sh) with carry [".device-kit", ".bench-models"],
# the model configs staged by
#   python benchmark/prepare_model.py ../shared/models/qwen3-8b .bench-models/qwen3-8b
#   python benchmark/prepare_model.py ../shared/models/qwen3-30b-a3b .bench-models/qwen3-30b-a3b
# NVLink multicast stays off (KINDS.md): NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1.
# Results: $OUT/results.tgz (JSON, PNG, logs); the FlashInfer + Triton JIT cache as $OUT/fiws.tgz.part-*
# (carry them back as .device-kit/fiws.tgz.part-* to skip compiling next time; benchmark/device/lib.sh).
set -uo pipefail
mode=${1:?usage: tp.sh quick|test|8b|30b|moe|scale-8b|scale-30b}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
RES=${RES:-/tmp/results}
mkdir -p "$RES"
. benchmark/device/lib.sh  # step, restore_jit_cache / save_jit_cache (FlashInfer and Triton), AOT kernels
restore_jit_cache
restore_aot_kernels
finish() {
    tar czf "${OUT:-/tmp}/results.tgz" -C "$RES" .
    save_jit_cache  # with the MoE Triton kernels: carry back as .device-kit/fiws.tgz.part-*
}
trap finish EXIT
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__, "GPUs", torch.cuda.device_count(),
"peer access 0<->1", torch.cuda.device_count() > 1 and torch.cuda.can_device_access_peer(0, 1))'
SIZE=(--num-requests "${NREQ:-256}" --max-input-len 1024 --max-output-len "${NOUT:-256}")
pack() { tar czf "${OUT:-/tmp}/results.tgz" -C "$RES" .; }  # after every model: a call cut short still returns
summary() { grep -hE "start-up|minisgl:|floor|TPOT|Error|error:|Traceback" "$@" | grep -v Warn; }

bench_pair() {  # $1 name, $2 model dir, $3 "lean" to skip the NCCL-only throughput run: TP=2 custom, TP=2 NCCL,
               # then TP=1 throughput (GPU 0, with the floor) beside TP=1 batch-1 TPOT (GPU 1)
    local name=$1 model=$2 lean=${3:-}
    step "$name: all-reduce per decode step, NCCL vs custom (TP=2)"
    timeout 90 python benchmark/offline/allreduce.py --config "$model" --tp 2 --out "$RES/allreduce-$name-tp2.json" \
        2>&1 | grep -vE "Warn|warn" | tail -8
    for variant in custom nccl; do
        local flag=(); [ "$variant" = nccl ] && flag=(--disable-custom-all-reduce)
        if [ "$variant" = custom ] || [ -z "$lean" ]; then
            step "$name: offline throughput + start-up, TP=2 ($variant all-reduce)"
            timeout 150 python benchmark/offline/bench.py --model "$model" --dummy-weight --tp 2 --dtype bfloat16 \
                "${flag[@]}" "${SIZE[@]}" --out "$RES/offline-$name-tp2-$variant.json" > "$RES/offline-$name-tp2-$variant.log" 2>&1
            summary "$RES/offline-$name-tp2-$variant.log"
        fi
        step "$name: batch-1 TPOT, TP=2 ($variant all-reduce)"
        timeout 90 python benchmark/offline/latency.py --model "$model" --dummy-weight --tp 2 "${flag[@]}" \
            --out "$RES/latency-$name-tp2-$variant.json" > "$RES/latency-$name-tp2-$variant.log" 2>&1
        summary "$RES/latency-$name-tp2-$variant.log"
    done
    step "$name: TP=1 throughput on GPU 0 beside TP=1 batch-1 TPOT on GPU 1"
    (CUDA_VISIBLE_DEVICES=0 timeout 150 python benchmark/offline/bench.py --model "$model" --dummy-weight --tp 1 \
        --dtype bfloat16 "${SIZE[@]}" --floor --out "$RES/offline-$name-tp1.json" > "$RES/offline-$name-tp1.log" 2>&1) &
    (CUDA_VISIBLE_DEVICES=1 timeout 120 python benchmark/offline/latency.py --model "$model" --dummy-weight --tp 1 \
        --out "$RES/latency-$name-tp1.json" > "$RES/latency-$name-tp1.log" 2>&1) &
    wait
    summary "$RES/offline-$name-tp1.log" "$RES/latency-$name-tp1.log"
    pack
}

scale() {  # $1 name, $2 model dir: TP = 1, 2, 4 (as many as there are GPUs), custom all-reduce; for nvidia-h200-x4
    local name=$1 model=$2 gpus
    gpus=$(python -c 'import torch; print(torch.cuda.device_count())')
    for tp in 1 2 4; do
        [ "$tp" -le "$gpus" ] || continue
        if [ "$tp" -gt 1 ]; then
            step "$name: all-reduce per decode step at TP=$tp"
            timeout 90 python benchmark/offline/allreduce.py --config "$model" --tp "$tp" --batches 1,8,64,256 \
                --out "$RES/allreduce-$name-tp$tp.json" 2>&1 | grep -vE "Warn|warn" | tail -5
        fi
        step "$name: offline throughput + start-up, then batch-1 TPOT, TP=$tp"
        timeout 170 python benchmark/offline/bench.py --model "$model" --dummy-weight --tp "$tp" --dtype bfloat16 \
            "${SIZE[@]}" --out "$RES/offline-$name-tp$tp.json" > "$RES/offline-$name-tp$tp.log" 2>&1
        timeout 120 python benchmark/offline/latency.py --model "$model" --dummy-weight --tp "$tp" \
            --out "$RES/latency-$name-tp$tp.json" > "$RES/latency-$name-tp$tp.log" 2>&1
        summary "$RES/offline-$name-tp$tp.log" "$RES/latency-$name-tp$tp.log"
    done
}

profile_tp() {  # $1 name, $2 model dir, $3 tp, $4 requests, $5 prompt length, $6 prefill tokens: rank 0's kernels
    step "$1: the step profiled at TP=$3, batch $4"
    profile_step "$1-tp$3-b$4" --model "$2" --tp "$3" --requests "$4" --prompt-len "$5" --prefill-tokens "$6"
}

case "$mode" in
profile)
    m30=.bench-models/qwen3-30b-a3b m8=.bench-models/qwen3-8b
    step "all-reduce per decode step at TP=4, Qwen3-30B-A3B shapes"
    timeout 90 python benchmark/offline/allreduce.py --config "$m30" --tp 4 --batches 1,8,256 \
        --out "$RES/allreduce-qwen3-30b-a3b-tp4.json" 2>&1 | grep -vE "Warn|warn" | tail -5
    for tp in 2 4; do
        step "qwen3-30b-a3b: batch-1 TPOT at TP=$tp"
        timeout 150 python benchmark/offline/latency.py --model "$m30" --dummy-weight --tp "$tp" \
            --out "$RES/latency-qwen3-30b-a3b-tp$tp.json" > "$RES/latency-qwen3-30b-a3b-tp$tp.log" 2>&1
        summary "$RES/latency-qwen3-30b-a3b-tp$tp.log"; pack
    done
    for tp in 2 4; do profile_tp qwen3-30b-a3b "$m30" "$tp" 1 128 128; pack; done
    for tp in 1 4; do
        step "qwen3-8b: offline throughput at TP=$tp"
        timeout 170 python benchmark/offline/bench.py --model "$m8" --dummy-weight --tp "$tp" --dtype bfloat16 \
            "${SIZE[@]}" --out "$RES/offline-qwen3-8b-tp$tp.json" > "$RES/offline-qwen3-8b-tp$tp.log" 2>&1
        summary "$RES/offline-qwen3-8b-tp$tp.log"; pack
    done
    profile_tp qwen3-8b "$m8" 4 256 512 16384
    ;;
compact)  # nvidia-h200-x2, ~9.5 min: the bf16 TP runs, then both models' TP=2 vs TP=1 in one call
    step "bf16 TP=2 runs complete (graphs; grouped-GEMM MoE inside them)"
    timeout "${TESTS_TIMEOUT:-200}" python -m pytest -q -rA --tb=short -p no:cacheprovider \
        tests/distributed/test_tensor_parallel_cuda.py -k "${TESTS_K:-bf16}" > "$RES/tp_bf16_test.log" 2>&1
    echo "exit $?"; grep -E "^(PASSED|FAILED|ERROR)|passed|failed" "$RES/tp_bf16_test.log" | tail -8; pack
    for name in ${MODELS:-qwen3-8b qwen3-30b-a3b}; do
        bench_pair "$name" ".bench-models/$name" lean
    done
    ;;
quick)  # the essentials in one ~6 min call on nvidia-h200-x2, for a short device budget
    step "fused MoE kernels on the GPU vs the per-expert loop"
    timeout 100 python -m pytest -q -rA --tb=short -p no:cacheprovider tests/layers/test_moe.py > "$RES/moe_test.log" 2>&1
    tail -3 "$RES/moe_test.log"
    step "custom all-reduce vs NCCL; TP=2 vs TP=1 greedy-equal, every architecture, float32"
    timeout 300 python -m pytest -q -rA --tb=short -p no:cacheprovider tests/distributed/test_custom_allreduce_cuda.py \
        tests/distributed/test_tensor_parallel_cuda.py -k "custom or float32 or nccl or grouped" > "$RES/tp_cuda_test.log" 2>&1
    echo "exit $?"; grep -E "^(PASSED|FAILED|ERROR)|passed|failed" "$RES/tp_cuda_test.log" | tail -20
    step "all-reduce per decode step, Qwen3-8B shapes: NCCL vs one-/two-shot"
    timeout 90 python benchmark/offline/allreduce.py --config .bench-models/qwen3-8b --tp 2 \
        --out "$RES/allreduce-qwen3-8b-tp2.json" 2>&1 | grep -vE "Warn|warn" | tail -10
    step "MoE layer, Qwen3-30B-A3B shapes: fused vs grouped vs loop (GPU 0)"
    CUDA_VISIBLE_DEVICES=0 timeout 100 python benchmark/offline/moe_layer.py --config .bench-models/qwen3-30b-a3b \
        --tokens 1,4,16,64,256,1024,4096 --out "$RES/moe_layer-tp1.json" 2>&1 | grep -E "tokens:|fused|Error"
    ;;
test)
    step "fused MoE kernels on the GPU vs the per-expert loop"
    timeout 120 python -m pytest -q -rA --tb=short -p no:cacheprovider tests/layers/test_moe.py > "$RES/moe_test.log" 2>&1
    tail -4 "$RES/moe_test.log"
    step "TP vs TP=1 greedy-equal, every architecture (each case in its own process session)"
    timeout 450 python -m pytest -q -rA --tb=short -p no:cacheprovider tests/distributed/test_custom_allreduce_cuda.py \
        tests/distributed/test_fused_norm_cuda.py tests/distributed/test_tensor_parallel_cuda.py \
        > "$RES/tp_cuda_test.log" 2>&1
    echo "exit $?"; grep -E "^(PASSED|FAILED|ERROR|SKIPPED)|passed|failed" "$RES/tp_cuda_test.log" | tail -40
    grep -E "custom all-reduce" "$RES/tp_cuda_test.log" | sort | uniq -c | head -5
    ;;
8b) bench_pair qwen3-8b .bench-models/qwen3-8b ;;
30b) bench_pair qwen3-30b-a3b .bench-models/qwen3-30b-a3b ;;
scale-8b) scale qwen3-8b .bench-models/qwen3-8b ;;
scale-30b) scale qwen3-30b-a3b .bench-models/qwen3-30b-a3b ;;
moe)
    export CUDA_VISIBLE_DEVICES=0
    step "MoE layer per token count: fused Triton vs grouped GEMM vs loop (Qwen3-30B-A3B, TP=1 and one TP=2 share)"
    timeout 150 python benchmark/offline/moe_layer.py --config .bench-models/qwen3-30b-a3b \
        --out "$RES/moe_layer-tp1.json" 2>&1 | grep -E "tokens:|fused|Error"
    timeout 100 python benchmark/offline/moe_layer.py --config .bench-models/qwen3-30b-a3b --tp 2 \
        --out "$RES/moe_layer-tp2share.json" 2>&1 | grep -E "tokens:|fused|Error"
    step "Qwen3-30B-A3B offline workload with CUDA graphs, against the decode floor"
    timeout 220 python benchmark/offline/bench.py --model .bench-models/qwen3-30b-a3b --dummy-weight --dtype bfloat16 \
        "${SIZE[@]}" --floor --out "$RES/offline-qwen3-30b-a3b-tp1.json" > "$RES/offline-moe.log" 2>&1
    summary "$RES/offline-moe.log"
    step "batch-1 TPOT against the weight-read floor (active experts)"
    timeout 150 python benchmark/offline/latency.py --model .bench-models/qwen3-30b-a3b --dummy-weight \
        --out "$RES/latency-qwen3-30b-a3b-tp1.json" > "$RES/latency-moe.log" 2>&1
    summary "$RES/latency-moe.log"
    ;;
*) echo "unknown mode $mode"; exit 2 ;;
esac
