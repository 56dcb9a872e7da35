#!/usr/bin/env bash
# What the sampling controls (penalties, logit_bias, min_tokens, grammar masks) cost on one GPU,
# in one call: the field's offline workload (Qwen3-0.6B shapes, dummy weights)
#   1. through a build from before they existed (git archive of 3fcd180 in the git-ignored
#      .ref/minisgl-pre14: `git archive 3fcd180 minisgl benchmark | tar x -C .ref/minisgl-pre14`),
#   2. through this build with none in use (the same bench.py command),
#   3. with each one on, for every request or one in ten (benchmark/offline/sampling_cost.py).
# Carry .device-kit (with xgrammar's wheel), .bench-models and .ref. Results in $OUT/results.
# SKIP_BASELINE=1 skips 1 and 2; VARIANTS picks some of 3, e.g. the grammars alone:
#   SKIP_BASELINE=1 VARIANTS="none,regex grammar (1 in 10),regex grammar (all)" bash benchmark/device/sampling_cost.sh
set -uo pipefail
. benchmark/device/lib.sh
RES=${RES:-${OUT:-/tmp}/results}
mkdir -p "$RES"
restore_jit_cache
restore_aot_kernels  # .device-kit/aot.tgz.part-* when carried: no FlashInfer JIT in the measured runs
MODEL=$PWD/.bench-models/qwen3-0.6b
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader

if [ -z "${SKIP_BASELINE:-}" ]; then
step "offline, build 3fcd180, parent of the API-fields merge (before the sampling controls)"
(cd .ref/minisgl-pre14 && PYTHONPATH=$PWD:/tmp/site timeout 240 python benchmark/offline/bench.py --model "$MODEL" \
    --dummy-weight --out "$RES/offline-pre14.json") > "$RES/offline-pre14.log" 2>&1
grep -E "start-up|tok/s" "$RES/offline-pre14.log" | grep -v "it/s\]"

step "offline, this build, no control in use"
timeout 240 python benchmark/offline/bench.py --model "$MODEL" --dummy-weight --out "$RES/offline.json" \
    > "$RES/offline.log" 2>&1
grep -E "start-up|tok/s" "$RES/offline.log" | grep -v "it/s\]"

fi

step "offline, each control on"
timeout 300 python benchmark/offline/sampling_cost.py --model "$MODEL" --dummy-weight ${SC_FLAGS:-} \
    ${VARIANTS:+--variants "$VARIANTS"} \
    --out "$RES/sampling_cost.json" > "$RES/sampling_cost.log" 2>&1
grep -v "it/s\]" "$RES/sampling_cost.log" | tail -12
