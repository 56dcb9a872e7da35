#!/usr/bin/env bash
# codec_ab.py: the base tree's server (.base first on PYTHONPATH) against this tree's, bursts B H H B ...
# After the kit preamble, T0 exported. Everything into /tmp/r, packed into $OUT/r.tgz on exit.
set -uo pipefail
R=/tmp/r; rm -rf "$R"; mkdir -p "$R/probe-driver"
DMON=""
el() { python3 -c "import time;print(round(time.time()-$T0,1))"; }
cleanup() {
    for a in B H; do [ -f "$R/server-$a.pid" ] && kill -- -"$(cat "$R/server-$a.pid")" 2>/dev/null; done
    [ -n "$DMON" ] && kill "$DMON" 2>/dev/null
    nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader > "$R/gpu-apps-at-exit.txt" 2>&1
    echo "packed at $(el) s" >> "$R/driver.log"
    tar czf "$OUT/r.tgz" -C /tmp r
}
trap cleanup EXIT
echo "preamble done at $(el) s" | tee "$R/driver.log"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader | tee "$R/gpu.txt"
lscpu | grep -E "Model name|^CPU\(s\)|Thread" > "$R/lscpu.txt"; nproc >> "$R/lscpu.txt"
git log --oneline -1 > "$R/tree.txt"; git status --short >> "$R/tree.txt"
md5sum minisgl/message/base.py .base/minisgl/message/base.py | tee -a "$R/tree.txt"
nvidia-smi dmon -s pucm -d 1 -o T > "$R/dmon.txt" 2>&1 & DMON=$!
export PYTHONPATH=$PWD/benchmark/device/server_vs_engine/codec_probe:$PYTHONPATH PROBE_DIR=$R/probe-driver
MODEL=$PWD/.bench-models/qwen3-0.6b R=$R PAGES=${PAGES:-16384} DEADLINE=${DEADLINE:-500} BASE_PATH=$PWD/.base \
    python benchmark/device/server_vs_engine/codec_ab.py 2>&1 | tee -a "$R/driver.log"
echo "driver exit ${PIPESTATUS[0]}"
grep -hE "memory:|warmed up|minisgl ready" "$R"/server-*.log | cut -c1-300
tail -n 2 "$R/message_codec.log" 2>/dev/null; cat "$R/message_codec.json" 2>/dev/null | head -c 1500
