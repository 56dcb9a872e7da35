#!/usr/bin/env bash
# Multi-LoRA on one GPU: the LoRA GPU tests (mixed adapters in decode CUDA graphs equal
# the CPU; over FP8 linears the adapters add peft's deltas to the FP8 output), then the offline workload on Qwen3-8B shapes
# with dummy weights, base model and then its requests spread over 8 random adapters of rank 16, in
# one process: throughput ratio and the decode steps replayed from CUDA graphs
# (benchmark/offline/lora.py); then the serving workload (benchmark/online/bench.py, chat API) against
# the base model's server and against one serving the 8 adapters, requests spread over them in turn
# (--spread-models), one after the other in the same call, and the ratio per rate. Step "load" (not
# in the default): a batch of 32 decoding while rank-16 adapters load, off the scheduler's loop and
# then in it (benchmark/offline/lora_load.py): the longest step a running request sees with each.
#
#   bash benchmark/device/lora.sh            # nvidia-h100-x1
#
# Run after the kit preamble (../shared/device/kit.sh) with carry [".device-kit", ".bench-models"], the
# model staged by `python benchmark/prepare_model.py ../shared/models/qwen3-8b .bench-models/qwen3-8b`.
# STEPS picks parts (default: tests bench online; a call has 10 minutes: run "tests bench" and
# "online" as two calls); RATES the online rates (default 8,32,inf); NREQ, NOUT size the workload.
# Results: $OUT/results.tgz.
set -uo pipefail
export PYTHONUNBUFFERED=1
. benchmark/device/lib.sh
start_results
MODEL=.bench-models/qwen3-8b
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader

for part in ${STEPS:-tests bench online}; do
    case "$part" in
    tests)
        step "LoRA GPU tests"
        timeout 300 python -m pytest tests/llm/test_lora_cuda.py tests/lora/test_loader_cuda.py \
            -q -p no:cacheprovider \
            "tests/quantization/test_fp8_cuda.py::test_lora_over_fp8_linears_adds_the_adapters_float32_deltas_to_the_fp8_output" \
            2>&1 | tail -5 ;;
    bench)
        step "offline workload: base, then 8 adapters of rank 16"
        timeout 480 python benchmark/offline/lora.py --model "$MODEL" --dummy-weight --num-adapters 8 --lora-rank 16 \
            --num-requests "${NREQ:-256}" --max-input-len 1024 --max-output-len "${NOUT:-256}" \
            --out "$RES/lora.json" > "$RES/lora.log" 2>&1
        echo "exit $?"
        grep -vE "it/s\]|s/it\]" "$RES/lora.log" | tail -8 ;;
    load)
        step "decoding while adapters load: off the loop, then in it"
        timeout 480 python benchmark/offline/lora_load.py --model "$MODEL" --dummy-weight --loads 4 --lora-rank 16 \
            --out "$RES/lora_load.json" > "$RES/lora_load.log" 2>&1
        echo "exit $?"
        tail -5 "$RES/lora_load.log" ;;
    online)
        step "online: the base model's server, then one with 8 adapters of rank 16"
        MODS=$(python -m minisgl.benchmark.lora_adapters "$MODEL" /tmp/adapters --num 8 --rank 16)
        NAMES=$(echo "$MODS" | tr ' ' '\n' | cut -d= -f1 | paste -sd,)
        SIZE=(--num-requests "${NREQ:-256}" --max-input-len 1024 --max-output-len "${NOUT:-256}")
        for run in base lora; do
            extra=(); flags=()
            if [ "$run" = lora ]; then extra=(--spread-models "$NAMES"); flags=(--lora-modules $MODS); fi
            timeout 420 python benchmark/online/bench.py --launch --api chat --rates "${RATES:-8,32,inf}" "${SIZE[@]}" \
                --client-processes 4 --ready-timeout 300 --no-progress --out "$RES/online-$run.json" "${extra[@]}" \
                -- --model "$MODEL" --dummy-weight "${flags[@]}" > "$RES/online-$run.log" 2>&1
            echo "$run: exit $?"; tail -8 "$RES/online-$run.log"
        done
        python - "$RES" <<'PY'
import json, sys
base, lora = (json.load(open(f"{sys.argv[1]}/online-{r}.json"))["results"] for r in ("base", "lora"))
for b, l in zip(base, lora):
    print(f"rate {b['rate']}: base {b['output_throughput']:.0f} tok/s, 8 adapters {l['output_throughput']:.0f} tok/s, "
          f"ratio {l['output_throughput'] / b['output_throughput']:.3f}")
PY
        ;;
    esac
done
