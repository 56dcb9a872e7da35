#!/usr/bin/env bash
# A fresh GPU machine as the CUDA image sees it: compile the image's kernel set from an empty JIT
# cache (timed, with its size), then start the server with FLASHINFER_DISABLE_JIT=1 (a kernel
# missing from the set fails instead of compiling) and time start to first streamed token.
#
#   bash benchmark/device/cold_start.sh MODEL [PREBUILD FLAGS...]     # from the repository root
#   bash benchmark/device/cold_start.sh .bench-models/qwen3-0.6b --archs 9.0a
#
# MODEL is served with --dummy-weight (and the flags in SERVER_ARGS, e.g. "--tp 2"). SKIP_PREBUILD=1
# times the server start alone. Logs go to $OUT (the device tool's output folder) or /tmp.
# cold_start_pod.sh runs it as a new pod would start, twice (empty, then warm Triton cache).
set -euo pipefail
model=${1:?usage: cold_start.sh MODEL [PREBUILD FLAGS...]}
shift
out=${OUT:-/tmp}
port=${PORT:-19190}
export FLASHINFER_WORKSPACE_BASE=${FLASHINFER_WORKSPACE_BASE:-$(mktemp -d)}  # empty: nothing cached

if [ "${SKIP_PREBUILD:-0}" != 1 ]; then
    echo "== prebuild (FLASHINFER_WORKSPACE_BASE=$FLASHINFER_WORKSPACE_BASE)"
    python -m minisgl.prebuild --force "$@" 2>&1 | tee "$out/prebuild.log"
fi

# ALLOW_JIT=1 lets FlashInfer build what its cache lacks (FlashInfer reads any value of
# FLASHINFER_DISABLE_JIT as "disabled", "0" too: it must be unset).
if [ "${ALLOW_JIT:-0}" = 1 ]; then unset FLASHINFER_DISABLE_JIT; else export FLASHINFER_DISABLE_JIT=1; fi
echo "== server, FLASHINFER_DISABLE_JIT=${FLASHINFER_DISABLE_JIT:-unset}"
started=$(date +%s.%N)
read -r -a server_args <<< "${SERVER_ARGS:-}"
python -m minisgl --model "$model" --dummy-weight --port "$port" "${server_args[@]}" \
    > "$out/server.log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true' EXIT
python - "$port" "$started" "$server" <<'PY'
import sys, time, urllib.request

import openai

port, started, server = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])


def alive(pid: int) -> bool:  # an exited child stays a zombie (state Z) until the shell reaps it
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


while True:
    if not alive(server):  # a failed start ends at once, not at the timeout
        sys.exit("the server exited before it was ready")
    try:
        if urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=2).status == 200:
            break
    except OSError:
        pass
    if time.time() - started > 600:
        sys.exit("not ready after 600 s")
    time.sleep(0.2)
ready = time.time()
client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused")
model = client.models.list().data[0].id
stream = client.completions.create(model=model, prompt="Hello", max_tokens=16, stream=True)
first = next(iter(stream))
now = time.time()
print(f"ready {ready - started:.1f} s after start; first token {now - started:.1f} s after start "
      f"({now - ready:.2f} s after ready): {first.choices[0].text!r}")
PY
if grep -q "Building JIT module\|MissingJITCacheError" "$out/server.log"; then
    echo "the server compiled or missed a kernel:"; grep "Building JIT module\|MissingJITCacheError" "$out/server.log"
    exit 1
fi
echo "no kernel compiled at run time ($out/server.log)"
