#!/usr/bin/env bash
# FP8 KV cache and FP8 weights on one lent H100, in one call:
#   0. the CUDA tests: tests/quantization/test_fp8_cuda.py (FP8-KV FlashInfer prefill/decode/graphs
#      against a float32 reference, the fused FP8 store, the FP8 GEMM, an FP8 engine) and the bf16
#      FlashInfer tests the shared helpers touch;
#   1. the field's offline workload (benchmark/offline/bench.py: Qwen3-0.6B shapes, dummy weights,
#      256 requests, prompts <= 1024, outputs <= 1024, ignore_eos), bf16 KV then FP8 (e4m3) KV,
#      then Mini-SGLang's offline LLM (bf16, --attn fi, from the git-ignored .ref/mini-sglang) on the
#      very same requests; one table with the ratios;
#   1b. the same workload step by step (benchmark/offline/timeline.py): decode time by batch size
#      against its floor, prefill's share, bf16 and FP8 KV;
#   2. Llama-3.1-8B shapes, batch 1, `--quantization fp8` (dummy weights): TPOT against the FP8
#      weight-read floor (benchmark/offline/latency.py), with minisgl's Triton kernels launched
#      without programmatic dependent launch (MINISGL_DISABLE_PDL=1: FlashInfer's add + RMSNorm
#      then, which keeps its own PDL), then with it (the default);
#   3. the FP8 GEMV behind it: per-linear us, GB/s and % of copy bandwidth at 1-16 rows against the
#      old split-K, _scaled_mm and bf16, its tile sweep, a decode step's GEMMs in one graph against
#      the weight-read floor (benchmark/offline/fp8_gemv.py); the batch-1 kernel breakdown
#      (benchmark/offline/profile_steps.py --quantization fp8);
#   4. KL divergence of next-token distributions, FP8 (KV, weights, both) against bf16, on
#      random-weight models of both shapes (benchmark/offline/fp8_accuracy.py).
# Batch-1 work alone (~6 min): SKIP_OFFLINE=1 SKIP_REF=1 SKIP_KL=1 bash benchmark/device/fp8.sh
# This GPU's GEMV tile table (minisgl/kernels/gemv_tuned.py; commit the file it writes to $OUT into
# minisgl/kernels/gemv_tuned/): MICRO_ARGS="--sweep-rows 1,2,4,8,16 --write-table $OUT" MICRO_TIMEOUT=540
# Run after the kit preamble (../shared/device/kit.sh), carrying .device-kit, .bench-models and .ref:
#   python benchmark/prepare_model.py ../shared/models/qwen3-0.6b .bench-models/qwen3-0.6b
#   python benchmark/prepare_model.py ../shared/models/llama-3.1-8b .bench-models/llama-3.1-8b
# New kernels: FlashInfer decode and FA2 prefill for bf16 queries over e4m3 pages, head_dim 128
# (the first FP8 step compiles them unless the carried workspace has them). Sections can be
# skipped with SKIP_TESTS, SKIP_OFFLINE, SKIP_REF, SKIP_LATENCY, SKIP_MICRO, SKIP_ATTN, SKIP_PROFILE, SKIP_KL, SKIP_TIMELINE
# (e.g. to split the call).
# Results (logs, JSON, PNG) go to /tmp/fp8-results, packed after every section into
# $OUT/fp8-results.tgz (one file: a call returns at most 8); the FlashInfer JIT workspace is saved
# in $OUT in pieces under 16 MiB (carry them back as .device-kit/fiws.tgz.part-*).
set -uo pipefail
RES=/tmp/fp8-results
mkdir -p "$RES"
pack() { tar czf "${OUT:-/tmp}/fp8-results.tgz" -C /tmp fp8-results; }
. benchmark/device/lib.sh  # step, restore_jit_cache, save_jit_cache
QWEN=$PWD/.bench-models/qwen3-0.6b
LLAMA=$PWD/.bench-models/llama-3.1-8b
SIZE=(--num-requests "${NREQ:-256}" --max-input-len 1024 --max-output-len "${NOUT:-1024}")
REPEATS=(--repeats "${REPEATS:-1}")  # measured runs of section 1, after its unmeasured first
restore_jit_cache
restore_aot_kernels  # .device-kit/aot.tgz.part-* when carried
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
quiet() { grep -vE "it/s\]|s/it\]|tensor/s\]|Loading weights|Writing model"; }

if [ -z "${SKIP_TESTS:-}" ]; then
    step "CUDA tests (the first FP8 attention call compiles its kernels)"
    timeout "${TESTS_TIMEOUT:-300}" python -m pytest tests/quantization/test_fp8_cuda.py tests/kernels/test_gemv.py \
        tests/quantization/test_gemm.py tests/attention/test_flashinfer_cuda.py tests/kernels/test_decode_attention.py \
        tests/kernels/test_rmsnorm.py tests/kernels/test_sampling.py tests/kernels/test_decode_inputs.py tests/engine/test_cuda.py \
        -q -rs -p no:cacheprovider > "$RES/tests.log" 2>&1
    echo "pytest exit $?"; tail -15 "$RES/tests.log"
    save_jit_cache  # the FP8 kernels, compiled once
    pack
fi

if [ -z "${SKIP_OFFLINE:-}" ]; then
    for kv in auto fp8_e4m3; do
        step "offline workload, minisgl, KV cache $kv"
        timeout "${OFFLINE_TIMEOUT:-200}" python benchmark/offline/bench.py --model "$QWEN" --dummy-weight "${SIZE[@]}" "${REPEATS[@]}" \
            --kv-cache-dtype "$kv" --dump-workload "$RES/workload.json" --out "$RES/offline-$kv.json" \
            > "$RES/offline-$kv.log" 2>&1
        echo "exit $?"; quiet < "$RES/offline-$kv.log" | grep -E "engine:|memory:|KV cache|minisgl:|start-up|Error|error" | tail -6
    done
fi

if [ -z "${SKIP_REF:-}" ] && [ -f "$RES/workload.json" ]; then
    step "offline workload, Mini-SGLang (bf16, --attn fi), the same requests"
    (cd .ref/mini-sglang && PYTHONPATH=python:/tmp/site timeout "${REF_TIMEOUT:-240}" python \
        ../../benchmark/offline/reference_offline.py --model "$QWEN" --workload "$RES/workload.json" \
        --out "$RES/offline-mini-sglang.json") > "$RES/offline-mini-sglang.log" 2>&1
    echo "exit $?"; tail -3 "$RES/offline-mini-sglang.log"
fi
python - "$RES" <<'PY'
import json, os, sys
res = sys.argv[1]
rows = {}
for name, label in (("offline-auto", "minisgl, bf16 KV"), ("offline-fp8_e4m3", "minisgl, FP8 (e4m3) KV"),
                    ("offline-mini-sglang", "Mini-SGLang (bf16)")):
    path = os.path.join(res, name + ".json")
    if os.path.exists(path):
        rows[label] = json.load(open(path))
if rows:
    ref = rows.get("Mini-SGLang (bf16)", {}).get("tokens_per_s")
    print("| engine | out tok/s (second run) | KV tokens | vs Mini-SGLang |")
    print("| --- | --- | --- | --- |")
    for label, r in rows.items():
        kv = (r.get("memory") or {}).get("kv_tokens", "")
        ratio = f"{r['tokens_per_s'] / ref:.2f}x" if ref else ""
        print(f"| {label} | {r['tokens_per_s']:,.0f} | {kv} | {ratio} |")
    json.dump({k: v["tokens_per_s"] for k, v in rows.items()}, open(os.path.join(res, "offline-summary.json"), "w"), indent=2)
PY
pack

if [ -z "${SKIP_TIMELINE:-}" ]; then
    for kv in auto fp8_e4m3; do
        step "the same workload step by step (benchmark/offline/timeline.py), KV cache $kv"
        timeout "${TIMELINE_TIMEOUT:-200}" python benchmark/offline/timeline.py --model "$QWEN" --dummy-weight \
            "${SIZE[@]}" --kv-cache-dtype "$kv" --out "$RES/timeline-$kv.json" > "$RES/timeline-$kv.log" 2>&1
        echo "exit $?"; quiet < "$RES/timeline-$kv.log" | grep -vE "INFO|Warn|warn" | tail -14
    done
    pack
fi

if [ -z "${SKIP_LATENCY:-}" ]; then
    for pdl_off in 1 0; do  # minisgl's Triton kernels without, then with, programmatic dependent launch
        step "Llama-3.1-8B shapes, batch 1, FP8 weights (--quantization fp8), MINISGL_DISABLE_PDL=$pdl_off"
        MINISGL_DISABLE_PDL=$pdl_off timeout "${LATENCY_TIMEOUT:-240}" python benchmark/offline/latency.py \
            --model "$LLAMA" --dummy-weight --quantization fp8 --out "$RES/latency-llama-fp8-nopdl$pdl_off.json" \
            > "$RES/latency-llama-fp8-nopdl$pdl_off.log" 2>&1
        echo "exit $?"; quiet < "$RES/latency-llama-fp8-nopdl$pdl_off.log" | grep -E "weights:|TPOT|Error|error" | tail -4
    done
    pack
fi

if [ -z "${SKIP_MICRO:-}" ]; then
    step "microbenchmark: the FP8 GEMV at Llama-3.1-8B shapes (per linear, tile sweep, a decode step's GEMMs)"
    timeout "${MICRO_TIMEOUT:-240}" python benchmark/offline/fp8_gemv.py --config "$LLAMA" ${MICRO_ARGS:-} \
        --out "$RES/fp8_gemv.json" > "$RES/fp8_gemv.log" 2>&1
    echo "exit $?"; tail -40 "$RES/fp8_gemv.log"
    pack
fi

if [ -z "${SKIP_ATTN:-}" ]; then
    step "decode attention alone in CUDA graphs: FlashInfer against minisgl's Triton decode"
    timeout "${ATTN_TIMEOUT:-200}" python benchmark/offline/decode_attention.py --out "$RES/decode_attention.json" \
        > "$RES/decode_attention.log" 2>&1
    echo "exit $?"; tail -8 "$RES/decode_attention.log"
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

if [ -z "${SKIP_KL:-}" ]; then
    for model in "$QWEN" "$LLAMA"; do
        name=$(basename "$model")
        step "KL(bf16 || FP8), random weights of $name's shapes"
        timeout "${KL_TIMEOUT:-240}" python benchmark/offline/fp8_accuracy.py --model "$model" --attn flashinfer \
            --prompts "${KL_PROMPTS:-64}" --prompt-len 512 --out "$RES/kl-$name.json" > "$RES/kl-$name.log" 2>&1
        echo "exit $?"; quiet < "$RES/kl-$name.log" | grep -vE "INFO|prompts of" | tail -10
        pack
    done
fi

step "save the JIT workspace"
save_jit_cache
pack
ls -la "${OUT:-.}" "$RES"
