#!/usr/bin/env bash
# Speculative decoding on one GPU: its GPU tests (verify steps in CUDA graphs beside decode steps in graphs give
# decoding's tokens; the off switch), then benchmark/offline/speculative.py on Llama-3.1-8B shapes with
# dummy weights: batch-1 TPOT with a drafter replaying the target's greedy continuation at 80% and 0%
# acceptance (k = 4) against no speculation, and batch 64 with speculation enabled, in one process each.
# The bar: batch 1 at most 0.45x of no speculation at 80%, no slower than 1/0.97x at 0%, batch 64 no
# worse than 0.97x. For the previous commit beside it, run the bench step of this script in a worktree
# of that commit in the same call.
#
#   bash benchmark/device/speculative.sh            # nvidia-h100-x1
#
# Run after the kit preamble (../shared/device/kit.sh) with carry [".device-kit", ".bench-models"], the
# model staged by `python benchmark/prepare_model.py ../shared/models/llama-3.1-8b .bench-models/llama-3.1-8b`.
# STEPS picks parts (default: tests bench); RATES, BATCHES, NOUT size the bench; SPEC_ARGS adds flags to it
# (e.g. --profile). Results: $OUT/results.tgz.
set -uo pipefail
export PYTHONUNBUFFERED=1
. benchmark/device/lib.sh
start_results
MODEL=.bench-models/llama-3.1-8b
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader

for part in ${STEPS:-tests bench}; do
    case "$part" in
    tests)
        step "speculative decoding GPU tests"
        timeout 120 python -m pytest tests/attention/test_flashinfer_cuda.py -k verify_graph -q -p no:cacheprovider 2>&1 | tail -3
        timeout 480 python -m pytest tests/scheduler/test_speculation_cuda.py -q -p no:cacheprovider -s 2>&1 | tail -6 ;;
    bench)
        step "TPOT with and without speculation (k=4)"
        timeout 540 python benchmark/offline/speculative.py --model "$MODEL" --dummy-weight \
            --batches "${BATCHES:-1,64}" --rates "${RATES:-0.8,0}" --decode-steps "${NOUT:-256}" \
            --speculative-num-tokens 4 ${SPEC_ARGS:-} --out "$RES/speculative.json" > "$RES/speculative.log" 2>&1
        echo "exit $?"
        grep -E "^batch|wrote" "$RES/speculative.log" ;;
    esac
done
