#!/usr/bin/env bash
# Server start, this tree against another (BASE, default .base: git archive REV minisgl | tar x -C .base),
# alternating, as a pod whose cache volume is warm starts: per model, one start first fills the Triton
# cache (not counted), then ROUNDS rounds of (BASE, this tree), each a fresh process timed from start
# to the first streamed token by cold_start.sh (FlashInfer's modules from the carried JIT cache).
#
#   BASE=.base ROUNDS=2 bash benchmark/device/start_ab.sh .bench-models/qwen3-0.6b .bench-models/qwen3-8b
#
# Run after the kit preamble (../shared/device/kit.sh) with .device-kit, .bench-models and BASE carried.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
restore_jit_cache
export TRITON_CACHE_DIR=$(mktemp -d) ALLOW_JIT=1 SKIP_PREBUILD=1
BASE=$(cd "${BASE:-.base}" && pwd)
start() {  # $1 the tree, $2 the model
    (cd "$1" && PYTHONPATH="$1:${PYTHONPATH:-}" HOME=$(mktemp -d) bash "$here/cold_start.sh" "$OLDPWD/$2" 2>&1 \
        | grep -E "^ready|compiled or missed|exited before" || echo "FAILED")
}
for model in "$@"; do
    echo "$(basename "$model") warm-up start: $(start "$PWD" "$model")"
    for round in $(seq "${ROUNDS:-2}"); do
        echo "$(basename "$model") round $round BASE: $(start "$BASE" "$model")"
        echo "$(basename "$model") round $round this: $(start "$PWD" "$model")"
    done
done
