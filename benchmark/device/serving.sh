#!/usr/bin/env bash
# The serving path against the engine and the reference server, on one lent GPU, in one call:
#   1. the offline engine (LLM.generate) on the serving workload: Qwen3-0.6B shapes, dummy weights,
#      256 requests, prompts <= 1024 tokens, outputs <= 256, ignore_eos;
#   2. minisgl's server at Poisson rates 8, 32, 128 and inf (chat API, the same workload), then
#      Mini-SGLang's server (from the git-ignored .ref/mini-sglang, --attn fi) with the same requests
#      once minisgl's is stopped, so each has the GPU alone: one table with both and the ratio.
# Run after the kit preamble (../shared/device/kit.sh) with .device-kit, .bench-models
# (benchmark/prepare_model.py ../shared/models/qwen3-0.6b .bench-models/qwen3-0.6b) and .ref carried.
# Results go to $OUT/results (logs, JSON, PNG); the FlashInfer JIT workspace is saved in $OUT in pieces under 16 MiB
# (carry them back as .device-kit/fiws-*.part to skip compiling next time).
set -uo pipefail
RES=${RES:-${OUT:-/tmp}/results}
mkdir -p "$RES"
step() { echo; echo "=== $* ($(date +%T))"; }
MODEL=$PWD/.bench-models/qwen3-0.6b
SIZE=(--num-requests "${NREQ:-256}" --max-input-len 1024 --max-output-len "${NOUT:-256}")
if ls .device-kit/fiws.tgz.part-* > /dev/null 2>&1; then cat .device-kit/fiws.tgz.part-* | tar xzf - -C /; fi
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader

if [ -z "${SKIP_OFFLINE:-}" ]; then
    step "offline engine, the same workload"
    timeout "${OFFLINE_TIMEOUT:-200}" python benchmark/offline/bench.py --model "$MODEL" --dummy-weight "${SIZE[@]}" \
        --out "$RES/offline.json" > "$RES/offline.log" 2>&1
    grep -vE "it/s\]|s/it\]" "$RES/offline.log" | tail -6
    (cd / && tar czf - tmp/fiws) | split -b 15M - "${OUT:-.}/fiws.tgz.part-"  # kernels compiled so far
fi
[ -n "${SKIP_ONLINE:-}" ] && exit 0

step "online: minisgl, then Mini-SGLang with the same requests"
REF="bash -c 'cd .ref/mini-sglang && PYTHONPATH=python:/tmp/site exec python -m minisgl --model $MODEL \
--dummy-weight --attn fi --port 1920'"
timeout "${ONLINE_TIMEOUT:-420}" python benchmark/online/bench.py --launch --api chat --rates "${RATES:-8,32,128,inf}" \
    "${SIZE[@]}" --client-processes 4 --ready-timeout 240 --no-progress --out "$RES/online.json" \
    --compare-base-url http://127.0.0.1:1920 --compare-name mini-sglang \
    --compare-launch "$REF" -- --model "$MODEL" --dummy-weight > "$RES/online.log" 2>&1
echo "exit $?"
tail -30 "$RES/online.log"
grep -iE "error|Traceback" "$RES"/online-*server.log | head -5

step "save the JIT workspace"
rm -f "${OUT:-.}"/fiws.tgz.part-*
(cd / && tar czf - tmp/fiws) | split -b 15M - "${OUT:-.}/fiws.tgz.part-"
ls -la "${OUT:-.}"
