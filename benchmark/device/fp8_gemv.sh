#!/usr/bin/env bash
# The FP8 weight-streaming GEMV (issue 16: Llama-3.1-8B shapes, batch 1, --quantization fp8,
# TPOT <= 3.3 ms) on one lent H100, in one call (< 8 min):
#   0. the CUDA FP8 tests (tests/quantization/test_fp8_cuda.py: the FP8 GEMM at 1-256 rows, an FP8
#      engine in CUDA graphs) and the GEMV's own tests (tests/quantization/test_fp8_gemv.py) on the GPU;
#   1. the microbenchmark (benchmark/offline/fp8_gemv.py): per-linear us, GB/s and % of copy
#      bandwidth at 1-16 rows (GEMV, its config sweep at 1 row, the old split-K, _scaled_mm, bf16),
#      and a decode step's GEMMs (32 layers + lm_head) in one graph against the weight-read floor;
#   2. batch-1 TPOT with FP8 weights (benchmark/offline/latency.py, dummy weights);
#   3. the kernel breakdown of batch-1 FP8 decode steps (benchmark/offline/profile_steps.py).
# Run after the kit preamble (../shared/device/kit.sh), carrying .device-kit and .bench-models:
#   python benchmark/prepare_model.py ../shared/models/llama-3.1-8b .bench-models/llama-3.1-8b
# Sections can be skipped with SKIP_TESTS, SKIP_MICRO, SKIP_LATENCY, SKIP_PROFILE. Results (logs,
# JSON, PNG) go to /tmp/fp8gemv-results, packed after every section into $OUT/fp8gemv-results.tgz
# (one file).
set -uo pipefail
RES=/tmp/fp8gemv-results
mkdir -p "$RES"
pack() { tar czf "${OUT:-/tmp}/fp8gemv-results.tgz" -C /tmp fp8gemv-results; }
. benchmark/device/lib.sh  # step, restore_jit_cache, restore_aot_kernels
LLAMA=$PWD/.bench-models/llama-3.1-8b
restore_jit_cache
restore_aot_kernels
nvidia-smi --query-gpu=name,memory.total,clocks.max.memory --format=csv,noheader
quiet() { grep -vE "it/s\]|s/it\]|tensor/s\]|Loading weights|Writing model"; }

if [ -z "${SKIP_TESTS:-}" ]; then
    step "CUDA tests: FP8 GEMM/engine and the GEMV"
    timeout "${TESTS_TIMEOUT:-110}" python -m pytest tests/quantization/test_fp8_gemv.py tests/quantization/test_fp8_cuda.py \
        -q -rs -p no:cacheprovider > "$RES/tests.log" 2>&1
    echo "pytest exit $?"; tail -12 "$RES/tests.log"
    pack
fi

if [ -z "${SKIP_MICRO:-}" ]; then
    step "microbenchmark: FP8 GEMV at Llama-3.1-8B shapes"
    timeout "${MICRO_TIMEOUT:-240}" python benchmark/offline/fp8_gemv.py --config "$LLAMA" \
        --out "$RES/fp8_gemv.json" > "$RES/fp8_gemv.log" 2>&1
    echo "exit $?"; cat "$RES/fp8_gemv.log" | tail -40
    pack
fi

if [ -z "${SKIP_LATENCY:-}" ]; then
    step "Llama-3.1-8B shapes, batch 1, FP8 weights: TPOT"
    timeout "${LATENCY_TIMEOUT:-120}" python benchmark/offline/latency.py --model "$LLAMA" --dummy-weight \
        --quantization fp8 --out "$RES/latency-llama-fp8.json" > "$RES/latency-llama-fp8.log" 2>&1
    echo "exit $?"; quiet < "$RES/latency-llama-fp8.log" | grep -E "weights:|TPOT|Error|error" | tail -4
    pack
fi

if [ -z "${SKIP_PROFILE:-}" ]; then
    step "kernel breakdown of batch-1 FP8 decode steps"
    timeout "${PROFILE_TIMEOUT:-100}" python benchmark/offline/profile_steps.py --model "$LLAMA" --dummy-weight \
        --quantization fp8 --requests 1 --prompt-len 128 --prefill-tokens 128 --steps 20 \
        --out "$RES/profile-llama-fp8-bs1.json" > "$RES/profile.log" 2>&1
    echo "exit $?"; quiet < "$RES/profile.log" | grep -vE "INFO" | sed -n '/== decode/,/== prefill/p' | head -30
    pack
fi
ls -la "${OUT:-.}" "$RES"
