# Sourced by the device scripts (benchmark/device/*.sh): the FlashInfer/Triton JIT cache carried
# between calls as .device-kit/fiws.tgz.part-* (pieces under the 16 MiB a returned file may have).

# Unpack the carried cache to /tmp/fiws, dated ahead: ninja rebuilds an object older than its
# sources, and pip just gave FlashInfer's sources fresh times.
restore_jit_cache() {
    if ls .device-kit/fiws.tgz.part-* > /dev/null 2>&1; then cat .device-kit/fiws.tgz.part-* | tar xzf - -C /; fi
    mkdir -p /tmp/fiws
    find /tmp/fiws -exec touch -h -d "@$(( $(date +%s) + 3600 ))" {} +
    export FLASHINFER_WORKSPACE_BASE=/tmp/fiws TRITON_CACHE_DIR=/tmp/fiws/triton
}

# Pack /tmp/fiws into $OUT, to be carried back as .device-kit/fiws.tgz.part-*.
save_jit_cache() {
    rm -f "${OUT:-.}"/fiws.tgz.part-*
    (cd / && tar czf - tmp/fiws) | split -b 15M - "${OUT:-.}/fiws.tgz.part-"
}

step() { echo; echo "=== $* ($(date +%T))"; }
