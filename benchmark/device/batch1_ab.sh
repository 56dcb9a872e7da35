#!/usr/bin/env bash
# The issue's batch-1 rows, this tree against another on one machine: TPOT against the weight-read floor
# (benchmark/offline/latency.py, dummy weights) for Llama-3.1-8B with FP8 weights, Llama-3.1-8B in bf16
# and Qwen3-30B-A3B at TP=1, each arm ROUNDS times in the order A B B A (a machine that warms up or
# slows down weighs on both arms alike). Arm A is BASE with FLAGS_A, arm B this tree with FLAGS_B.
#
#   rm -rf .base && mkdir .base && git archive REV minisgl | tar x -C .base    # before the call
#   BASE=.base bash benchmark/device/batch1_ab.sh                              # the previous commit's rows
#   BASE=. FLAGS_B="--piecewise-cuda-graph-max-tokens 8192" bash benchmark/device/batch1_ab.sh   # a flag
#
# ROWS picks rows (default "llama-fp8 llama-bf16 moe"). Run after the kit preamble with .device-kit,
# .bench-models/llama-3.1-8b, .bench-models/qwen3-30b-a3b (benchmark/prepare_model.py) and BASE carried.
# Each run's JSON and log, and a summary (batch1_ab.json, .png), go to $RES, packed into $OUT/results.tgz.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"  # start_results, step
start_results
BASE=$(cd "${BASE:-.base}" && pwd)
BENCH_MODELS=$PWD/.bench-models
tpot() {  # arm row round
    local tree=$PWD flags=${FLAGS_B:-} model=llama-3.1-8b extra=() name="$1-$2-$3"
    [ "$1" = A ] && tree=$BASE flags=${FLAGS_A:-}
    [ "$2" = llama-fp8 ] && extra=(--quantization fp8)
    [ "$2" = moe ] && model=qwen3-30b-a3b
    # shellcheck disable=SC2086  # the flags split into words
    PYTHONPATH="$tree:${PYTHONPATH:-}" timeout "${LATENCY_TIMEOUT:-200}" python "$here/../offline/latency.py" \
        --model "$BENCH_MODELS/$model" --dummy-weight "${extra[@]}" $flags --out "$RES/$name.json" > "$RES/$name.log" 2>&1
    echo "$name: exit $? $(grep -E "TPOT" "$RES/$name.log" | tail -1)"
}
for row in ${ROWS:-llama-fp8 llama-bf16 moe}; do
    step "$row: A = $BASE ${FLAGS_A:-}, B = this tree ${FLAGS_B:-}"
    for round in $(seq "${ROUNDS:-2}"); do
        if [ $((round % 2)) = 1 ]; then tpot A "$row" "$round"; tpot B "$row" "$round"
        else tpot B "$row" "$round"; tpot A "$row" "$round"; fi
    done
done
python - "$RES" <<'PY'
import glob, json, os, statistics, sys
from minisgl.benchmark.report import bar_plot
res = sys.argv[1]
runs = {}
for path in sorted(glob.glob(os.path.join(res, "[AB]-*.json"))):
    arm, row = os.path.basename(path).split("-", 1)[0], os.path.basename(path).split("-", 1)[1].rsplit("-", 1)[0]
    r = json.load(open(path))["runs"][0]
    runs.setdefault(row, {}).setdefault(arm, []).append({"tpot_ms": r["tpot_s"] * 1e3, "over_floor": r["tpot_over_floor"]})
summary, labels, values = {}, [], []
print("| row | A TPOT ms | B TPOT ms | B / A |\n| --- | --- | --- | --- |")
for row, arms in runs.items():
    a, b = (statistics.mean(x["tpot_ms"] for x in arms.get(k, [])) if arms.get(k) else float("nan") for k in "AB")
    summary[row] = {"A_tpot_ms": a, "B_tpot_ms": b, "B_over_A": b / a, "runs": arms}
    print(f"| {row} | {a:.3f} | {b:.3f} | {b / a:.3f} |")
    labels.append(row)
    values.append(b / a)
json.dump(summary, open(os.path.join(res, "batch1_ab.json"), "w"), indent=2)
if values:
    bar_plot(os.path.join(res, "batch1_ab.png"), "batch-1 TPOT, this tree over BASE", labels, values, "B / A", "%.3f")
PY
