#!/usr/bin/env bash
# The server against its offline engine, interleaved pairs, one call. Run after the kit preamble
# with T0 (epoch of the call's start) exported. Everything goes to $OUT/r.tgz.
set -uo pipefail
R=/tmp/r; rm -rf "$R"; mkdir -p "$R"
DMON=""
cleanup() {
    for f in worker.pid; do [ -f "$R/$f" ] && kill "$(cat "$R/$f")" 2>/dev/null; done
    # the server runs in its own session (ServerProcess): its group is its pid
    [ -f "$R/server.pid" ] && kill -- -"$(cat "$R/server.pid")" 2>/dev/null
    [ -n "$DMON" ] && kill "$DMON" 2>/dev/null
    nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader > "$R/gpu-apps-at-exit.txt" 2>&1
    echo "packed at $(python3 -c "import time;print(round(time.time()-$T0,1))") s" >> "$R/driver.log"
    tar czf "$OUT/r.tgz" -C /tmp r
}
trap cleanup EXIT
echo "preamble done at $(python3 -c "import time;print(round(time.time()-$T0,1))") s" | tee "$R/driver.log"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader | tee "$R/gpu.txt"
lscpu | grep -E "Model name|^CPU\(s\)|Thread" > "$R/lscpu.txt"
git log --oneline -1 > "$R/tree.txt"; git status --short >> "$R/tree.txt"
nvidia-smi dmon -s pucm -d 1 -o T > "$R/dmon.txt" 2>&1 & DMON=$!
MODEL=$PWD/.bench-models/qwen3-0.6b R=$R PAGES=${PAGES:-32768} NMAX=${NMAX:-14} DEADLINE=${DEADLINE:-360} \
    python benchmark/device/server_vs_engine/pairs.py 2>&1 | tee -a "$R/driver.log"
echo "driver exit ${PIPESTATUS[0]}"
grep -hE "memory:|pages" "$R/server.log" "$R/offline-worker.log" | cut -c1-300
tail -3 "$R/server.log"
