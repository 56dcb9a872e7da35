#!/usr/bin/env bash
# A driver with the machine's CPU accounted and the step probe on: `bash accounted.sh quads` (quads.py:
# engine, server, server with its scheduler thread alone on a core, engine likewise) or
# `bash accounted.sh spin` (spin.py: the engine beside 0, 3 or 12 busy processes). After the kit
# preamble, T0 exported.
set -uo pipefail
DRIVER=${1:?quads or spin}
R=/tmp/r; rm -rf "$R"; mkdir -p "$R/probe"
DMON=""; VMS=""
cleanup() {
    [ -f "$R/worker.pid" ] && kill "$(cat "$R/worker.pid")" 2>/dev/null
    [ -f "$R/server.pid" ] && kill -- -"$(cat "$R/server.pid")" 2>/dev/null
    [ -n "$DMON" ] && kill "$DMON" 2>/dev/null
    [ -n "$VMS" ] && kill "$VMS" 2>/dev/null
    cat /proc/stat > "$R/proc-stat-end.txt"
    echo "packed at $(python3 -c "import time;print(round(time.time()-$T0,1))") s" >> "$R/driver.log"
    tar czf "$OUT/r.tgz" -C /tmp r
}
trap cleanup EXIT
echo "preamble done at $(python3 -c "import time;print(round(time.time()-$T0,1))") s" | tee "$R/driver.log"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader | tee "$R/gpu.txt"
lscpu > "$R/lscpu.txt"; lscpu -e > "$R/lscpu-e.txt" 2>&1
grep -H . /sys/devices/system/cpu/cpu*/topology/thread_siblings_list > "$R/siblings.txt" 2>&1
cat /proc/stat > "$R/proc-stat-start.txt"; cat /proc/cpuinfo > "$R/cpuinfo.txt"; uname -a > "$R/uname.txt"
ls /sys/devices/system/cpu/cpu0/cpufreq > "$R/cpufreq.txt" 2>&1
head -3 "$R/lscpu-e.txt"; cat "$R/siblings.txt" | head -4
git log --oneline -1 > "$R/tree.txt"; git status --short >> "$R/tree.txt"
nvidia-smi dmon -s pucm -d 1 -o T > "$R/dmon.txt" 2>&1 & DMON=$!
vmstat -w 1 > "$R/vmstat.txt" 2>&1 & VMS=$!
export PYTHONPATH=$PWD/benchmark/device/step_probe:$PYTHONPATH PROBE_DIR=$R/probe
MODEL=$PWD/.bench-models/qwen3-0.6b R=$R PAGES=${PAGES:-32768} ROUNDS=${ROUNDS:-16} DEADLINE=${DEADLINE:-540} \
    python "benchmark/device/server_vs_engine/$DRIVER.py" 2>&1 | tee -a "$R/driver.log"
echo "driver exit ${PIPESTATUS[0]}"
grep -hE "memory:|pages" "$R"/server.log "$R/offline-worker.log" 2>/dev/null | cut -c1-300 | head -6
[ -f "$R/server.log" ] && tail -3 "$R/server.log"
