#!/usr/bin/env bash
# Real clients' traffic on one lent GPU, beside the previous commit, in one call (sections skippable):
#   SERVE:    the serving workload (chat, 256 requests <= 1024 in / <= 256 out, rate inf twice: the first
#             burst after /ready, then the second) on this tree and on BASE's, for each model of SERVE_MODELS;
#   OFFLINE:  the field's offline workload (benchmark/offline/bench.py, second run) on this tree and BASE's;
#   NATURAL:  requests without max_tokens whose lengths end naturally, against the same requests with
#             max_tokens (benchmark/online/real_clients.py, Llama-3.1-8B shapes);
#   PRIORITY: two priority classes at saturation, TTFT p90 of each (the same script).
# SERVER_EXTRA: more flags for both servers (e.g. --log-level warning). BASE (default .base) holds the previous commit's minisgl (git archive REV minisgl | tar x -C .base).
# Run after the kit preamble (../shared/device/kit.sh) with .device-kit, .bench-models and .base carried.
set -uo pipefail
. benchmark/device/lib.sh
start_results
BASE=${BASE:-.base}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$RES/device.txt"
base_cmd() {  # $1 the model dir, $2 the port: BASE's server, with a Triton cache of its own, empty as a new pod's
    echo "bash -c 'cd $PWD/$BASE && TRITON_CACHE_DIR=\$(mktemp -d) PYTHONPATH=$PWD/$BASE:/tmp/site exec python -m minisgl --model $PWD/$1 --dummy-weight --port $2 ${SERVER_EXTRA:-}'"
}

for model in ${SERVE_MODELS:-qwen3-0.6b}; do
    [ -n "${SKIP_SERVE:-}" ] && break
    step "serving workload, first and second burst: $model, this tree then BASE"
    # A new pod's Triton cache is empty (the image prebuilds FlashInfer's kernels, not Triton's).
    TRITON_CACHE_DIR=$(mktemp -d) timeout "${SERVE_TIMEOUT:-400}" python benchmark/online/bench.py --launch --api chat --rates inf,inf --num-requests 256 \
        --max-input-len 1024 --max-output-len 256 --client-processes 4 --ready-timeout 300 --no-progress \
        --out "$RES/serve-$model.json" --compare-base-url http://127.0.0.1:1920 --compare-name base \
        --compare-launch "$(base_cmd .bench-models/$model 1920)" -- --model .bench-models/$model --dummy-weight ${SERVER_EXTRA:-} \
        > "$RES/serve-$model.log" 2>&1
    echo "exit $?"; tail -14 "$RES/serve-$model.log"
    grep -h "warmed up\|minisgl ready" "$RES"/serve-$model-server.log 2>/dev/null | cut -c1-160
done

if [ -z "${SKIP_OFFLINE:-}" ]; then
    for tree in new base; do
        step "field offline workload, qwen3-0.6b, $tree"
        dir=$PWD; [ $tree = base ] && dir=$PWD/$BASE
        (cd "$dir" && PYTHONPATH=$dir:/tmp/site timeout 240 python "$OLDPWD/benchmark/offline/bench.py" \
            --model "$OLDPWD/.bench-models/qwen3-0.6b" --dummy-weight --out "$RES/offline-$tree.json") \
            > "$RES/offline-$tree.log" 2>&1
        grep -vE "it/s\]|s/it\]" "$RES/offline-$tree.log" | tail -3
    done
fi

M=.bench-models/${NATURAL_MODEL:-llama-3.1-8b}
if [ -z "${SKIP_NATURAL:-}" ]; then
    step "requests without max_tokens against the same with max_tokens: $M"
    timeout "${NATURAL_TIMEOUT:-300}" python benchmark/online/real_clients.py --phases natural --out "$RES/natural.json" \
        -- --model $M --dummy-weight > "$RES/natural.log" 2>&1
    echo "exit $?"; grep -v "^\[" "$RES/natural.log" | tail -8
fi
if [ -z "${SKIP_PRIORITY:-}" ]; then
    step "two priority classes at saturation: $M"
    timeout "${PRIORITY_TIMEOUT:-300}" python benchmark/online/real_clients.py --phases priority \
        --priority-rate "${PRIORITY_RATE:-inf}" --out "$RES/priority.json" \
        -- --model $M --dummy-weight --scheduling-policy priority > "$RES/priority.log" 2>&1
    echo "exit $?"; grep -v "^\[" "$RES/priority.log" | tail -5
fi
