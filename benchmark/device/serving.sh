#!/usr/bin/env bash
# The serving path against the engine and the reference server, on one lent GPU, in one call:
#   1. the offline engine (LLM.generate) on the serving workload (minisgl/benchmark/workload.py's
#      WORKLOAD, `serving` unless set: Qwen3-0.6B shapes, dummy weights, ignore_eos; WORKLOAD=long is the
#      long-output mode; NREQ and NOUT override its request count and longest output), once unmeasured
#      and REPEATS (3) times measured, fresh prompt ids each;
#   2. minisgl's server at Poisson rates RATES (32, 128 and inf), chat API, the same workload: a
#      warm-up burst, then each rate's burst REPEATS times, its mean, min, max and spread, and at rate
#      inf the server's mean over the engine's (--offline-json); then Mini-SGLang's server (from the
#      git-ignored .ref/mini-sglang, --attn fi) with the same requests once minisgl's is stopped, so
#      each has the GPU alone: one table with both and the ratio of means. WORKLOAD=long, whose bursts
#      are long, runs rate inf alone and no reference (unless RATES and NO_COMPARE= say otherwise).
# With the reference beside, the default call runs close to a device call's 10 minutes.
# NO_COMPARE=1 drives minisgl alone; BASE=.base drives an earlier tree's server in the reference's place
# (the previous commit beside, e.g. RATES=inf SKIP_OFFLINE=1 BASE=.base); NO_SAVE_JIT=1 leaves the JIT workspace unsaved. Run after the kit preamble (../shared/device/kit.sh) with .device-kit, .bench-models
# (benchmark/prepare_model.py ../shared/models/qwen3-0.6b .bench-models/qwen3-0.6b) and .ref carried.
# Results go to $OUT/results (logs, JSON, PNG); the FlashInfer JIT workspace is saved in $OUT in pieces under 16 MiB
# (carry them back as .device-kit/fiws-*.part to skip compiling next time).
set -uo pipefail
RES=${RES:-${OUT:-/tmp}/results}
mkdir -p "$RES"
. benchmark/device/lib.sh
MODEL=$PWD/.bench-models/qwen3-0.6b
WORKLOAD=${WORKLOAD:-serving}
SIZE=(--workload "$WORKLOAD" ${NREQ:+--num-requests "$NREQ"} ${NOUT:+--max-output-len "$NOUT"} --repeats "${REPEATS:-3}")
[ "$WORKLOAD" = long ] && RATES=${RATES:-inf} && NO_COMPARE=${NO_COMPARE-1}
RATES=${RATES:-32,128,inf}
VS_OFFLINE=()
restore_jit_cache
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader

if [ -z "${SKIP_OFFLINE:-}" ]; then
    step "offline engine, the same workload"
    timeout "${OFFLINE_TIMEOUT:-300}" python benchmark/offline/bench.py --model "$MODEL" --dummy-weight "${SIZE[@]}" \
        --out "$RES/offline.json" > "$RES/offline.log" 2>&1 && [[ ",$RATES," == *,inf,* ]] \
        && VS_OFFLINE=(--offline-json "$RES/offline.json")  # the server at rate inf over the engine
    grep -vE "it/s\]|s/it\]" "$RES/offline.log" | tail -6
    save_jit_cache  # kernels compiled so far
fi
[ -n "${SKIP_ONLINE:-}" ] && exit 0

REF_CMD=(python -m minisgl --model "$MODEL" --dummy-weight --attn fi --port 1920)
if [ -n "${SIDE_BY_SIDE:-}" ]; then
    # Both servers up at once, the reference with 45% of the GPU's memory, minisgl with what is left
    # (the workload needs ~22 GB of KV):
    # the reference compiles its kernels on its first request, which then overlaps minisgl's sweep.
    step "online: Mini-SGLang started beside minisgl"
    (cd .ref/mini-sglang && PYTHONPATH=python:/tmp/site exec "${REF_CMD[@]}" --memory-ratio 0.45) \
        > "$RES/online-compare-server.log" 2>&1 &
    REF_PID=$!
    for _ in $(seq 300); do curl -sf localhost:1920/v1/models > /dev/null && break; sleep 1; done
    curl -s -m 400 localhost:1920/v1/chat/completions -H "Content-Type: application/json" -d '{"model": "'"$MODEL"'", "messages": [{"role": "user",
        "content": "hi"}], "max_tokens": 4, "stream": true}' > /dev/null &  # its first request compiles
    COMPARE=(--compare-base-url http://127.0.0.1:1920 --compare-name mini-sglang)
    SERVER_FLAGS=()  # minisgl sizes its KV cache from the memory left free
else
    step "online: minisgl, then Mini-SGLang with the same requests"
    COMPARE=(--compare-base-url http://127.0.0.1:1920 --compare-name mini-sglang
             --compare-launch "bash -c 'cd .ref/mini-sglang && PYTHONPATH=python:/tmp/site exec ${REF_CMD[*]}'")
    SERVER_FLAGS=()
fi
[ -n "${NO_COMPARE:-}" ] && COMPARE=()  # minisgl alone
if [ -n "${BASE:-}" ]; then
    # An earlier tree instead of the reference: BASE a folder holding its minisgl/ (git archive REV
    # minisgl | tar x -C .base), started from there so its package, not this one, is imported.
    BASE_CMD="cd $PWD/$BASE && PYTHONPATH=$PWD/$BASE:/tmp/site exec python -m minisgl --model $MODEL --dummy-weight --port 1920"
    COMPARE=(--compare-base-url http://127.0.0.1:1920 --compare-name "base" --compare-launch "bash -c '$BASE_CMD'")
fi
timeout "${ONLINE_TIMEOUT:-480}" python benchmark/online/bench.py --launch --api chat --rates "$RATES" \
    "${SIZE[@]}" "${VS_OFFLINE[@]}" --client-processes 4 --ready-timeout 300 --no-progress --out "$RES/online.json" "${COMPARE[@]}" \
    -- --model "$MODEL" --dummy-weight "${SERVER_FLAGS[@]}" > "$RES/online.log" 2>&1
echo "exit $?"
tail -40 "$RES/online.log"
[ -n "${REF_PID:-}" ] && kill "$REF_PID"

[ -n "${NO_SAVE_JIT:-}" ] && exit 0
step "save the JIT workspace"
du -sh ~/.cache/* 2>/dev/null | sort -h | tail -5  # other JIT caches (the reference's kernels)
save_jit_cache
ls -la "${OUT:-.}"
