#!/usr/bin/env bash
# flag_ab.py: two servers of this tree, FLAGS_A against FLAGS_B, bursts A B B A ... After the kit
# preamble, T0 exported (e.g. FLAGS_B="--piecewise-cuda-graph-max-tokens 0"). Packed into $OUT/r.tgz.
set -uo pipefail
export R=/tmp/r MODEL=${MODEL:-$PWD/.bench-models/qwen3-0.6b} PAGES=${PAGES:-16384} DEADLINE=${DEADLINE:-540}
rm -rf "$R"; mkdir -p "$R"
cleanup() {
    for a in A B; do [ -f "$R/server-$a.pid" ] && kill -- -"$(cat "$R/server-$a.pid")" 2>/dev/null; done
    tar czf "$OUT/r.tgz" -C /tmp r
}
trap cleanup EXIT
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$R/gpu.txt"
git log --oneline -1 > "$R/tree.txt"; git status --short >> "$R/tree.txt"
python benchmark/device/server_vs_engine/flag_ab.py 2>&1 | tee "$R/driver.log" | grep -vE "^\s*$" | tail -45
grep -hE "warmed up|captured|Traceback|Error" "$R"/server-*.log | cut -c1-200
