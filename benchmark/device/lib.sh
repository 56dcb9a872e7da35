# Sourced by the device scripts (benchmark/device/*.sh): the FlashInfer/Triton JIT cache carried
# between calls as .device-kit/fiws.tgz.part-* (pieces under the 16 MiB a returned file may have).

# Unpack the carried cache to /tmp/fiws. ninja rebuilds an object older than its sources, and pip
# just gave FlashInfer's headers fresh times: date the installed packages back instead, FlashInfer
# and TVM FFI, whose headers every module includes (with FlashInfer's alone dated back, every
# module was rebuilt on each fresh machine). (Dating the workspace ahead, as before, dated its
# generated sources ahead too, so every process rebuilt every kernel it used: 20-90 s each.)
restore_jit_cache() {
    if ls .device-kit/fiws.tgz.part-* > /dev/null 2>&1; then cat .device-kit/fiws.tgz.part-* | tar xzf - -C /; fi
    mkdir -p /tmp/fiws
    find "$(_package_dir flashinfer)" "$(_package_dir tvm_ffi)" -exec touch -h -d 2001-01-01 {} +
    export FLASHINFER_WORKSPACE_BASE=/tmp/fiws TRITON_CACHE_DIR=/tmp/fiws/triton
}

_package_dir() {  # $1 an importable package
    python -c "import importlib.util as u, os; print(os.path.dirname(u.find_spec('$1').origin))"
}

# Pack /tmp/fiws into $OUT, to be carried back as .device-kit/fiws.tgz.part-*.
save_jit_cache() {
    rm -f "${OUT:-.}"/fiws.tgz.part-*
    (cd / && tar czf - tmp/fiws) | split -b 15M - "${OUT:-.}/fiws.tgz.part-"
}

step() { echo; echo "=== $* ($(date +%T))"; }

# FlashInfer's kernels as ahead-of-time modules (python -m minisgl.prebuild), carried as
# .device-kit/aot.tgz.part-*: loaded without ninja or nvcc. (The JIT workspace above did not spare
# a fresh machine its compiles: each process rebuilt decode and prefill, 20-90 s.)
restore_aot_kernels() {
    local data
    data=$(_package_dir flashinfer)/data
    if ls .device-kit/aot.tgz.part-* > /dev/null 2>&1; then cat .device-kit/aot.tgz.part-* | tar xzf - -C "$data"; fi
    ls "$data/aot" 2>/dev/null | sed 's/^/aot module: /'
}

# Pack the installed AOT modules into $OUT, to be carried back as .device-kit/aot.tgz.part-*.
save_aot_kernels() {
    local data
    data=$(_package_dir flashinfer)/data
    rm -f "${OUT:-.}"/aot.tgz.part-*
    (cd "$data" && tar czf - aot) | split -b 15M - "${OUT:-.}/aot.tgz.part-"
}

# A measuring script's start: results collected in $RES (default /tmp/results) and packed into
# $OUT/results.tgz on exit, whatever the exit; the carried kernel caches restored first.
start_results() {
    RES=${RES:-/tmp/results}
    mkdir -p "$RES"
    restore_jit_cache
    restore_aot_kernels
    trap 'tar czf "${OUT:-/tmp}/results.tgz" -C "$RES" .' EXIT
}

# One step shape profiled (benchmark/offline/profile_steps.py, with its host profile) into
# $RES/profile-$1.json and .log, its tables printed: $1 a name, then profile_steps.py's flags.
profile_step() {
    local name=$1; shift
    timeout 200 python benchmark/offline/profile_steps.py "$@" --dummy-weight --steps 20 --cprofile \
        --out "$RES/profile-$name.json" > "$RES/profile-$name.log" 2>&1
    grep -vE "Warn|warn|INFO|Loading|Capturing" "$RES/profile-$name.log" | head -75
}
