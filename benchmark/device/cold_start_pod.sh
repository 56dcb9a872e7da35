#!/usr/bin/env bash
# Cold start as a new pod of the CUDA image sees it, per model: FlashInfer's kernels
# prebuilt (the image ships them), then the server started twice, each a fresh process with a
# fresh HOME and FlashInfer workspace, timed from start to the first streamed token:
#   pod 1: an empty Triton cache (TRITON_CACHE_DIR, the cache volume the operator mounts with the
#          model cache): minisgl's Triton kernels compile during CUDA-graph capture and warm-up;
#   pod 2: the same cache volume, as pod 1 left it: nothing should compile.
# Triton logs no compile, so what compiled is counted in its cache: the kernels (.cubin) each start
# added. FlashInfer compiles are caught by cold_start.sh (JIT off: a missing module fails).
#
# From the repository root, after the kit preamble (../shared/device/kit.sh), carrying .device-kit
# and .bench-models (made here first: python benchmark/prepare_model.py ../shared/models/qwen3-8b
# .bench-models/qwen3-8b, and likewise qwen3-0.6b, qwen3-30b-a3b):
#   bash benchmark/device/cold_start_pod.sh .bench-models/qwen3-0.6b .bench-models/qwen3-8b
# MODEL:TP serves with --tp TP (.bench-models/qwen3-30b-a3b:2 on a 2-GPU kind). Results go to
# $OUT/cold_start_pod.txt (with each start's server log under $OUT/<model>-pod<N>/).
set -euo pipefail
out=${OUT:-/tmp}
summary="$out/cold_start_pod.txt"
: > "$summary"
here=$(cd "$(dirname "$0")" && pwd)

. "$here/lib.sh"  # restore_aot_kernels
echo "== FlashInfer modules as the image has them (not timed: the image ships them)" | tee -a "$summary"
restore_aot_kernels || true  # .device-kit/aot.tgz.part-* when carried: prebuild then skips those
python -m minisgl.prebuild --archs "${ARCHS:-9.0a}" --dtypes bfloat16 --head-dims 128 --fp8-kv-dtypes '' 2>&1 \
    | tail -n 3 | tee -a "$summary"

cubins() { find "$1" -name '*.cubin' | wc -l; }

for spec in "$@"; do
    model=${spec%%:*}
    tp=1
    [ "$spec" != "$model" ] && tp=${spec##*:}
    name=$(basename "$model")-tp$tp
    cache=$(mktemp -d)/triton  # the cache volume, empty as a new model's is
    mkdir -p "$cache"  # (find fails on a missing folder, and set -e would end the script there)
    for pod in 1 2; do
        dir="$out/$name-pod$pod"
        mkdir -p "$dir"
        before=$(cubins "$cache")
        line=$(HOME=$(mktemp -d) FLASHINFER_WORKSPACE_BASE=$(mktemp -d) TRITON_CACHE_DIR=$cache OUT=$dir \
               SKIP_PREBUILD=1 SERVER_ARGS="--tp $tp" bash "$here/cold_start.sh" "$model" 2>&1 | tee "$dir/run.log" \
               | grep -E "^ready|compiled or missed" || true)
        after=$(cubins "$cache")
        capture=$(grep -o "captured [0-9]* CUDA graphs.* in [0-9.]* s" "$dir/server.log" | sed 's/ for decode batch sizes.* in / in /' || true)
        echo "$name pod $pod: ${line:-FAILED (see $dir/run.log)}; ${capture:-no capture line}; Triton kernels compiled: $((after - before))" \
            | tee -a "$summary"
    done
done
