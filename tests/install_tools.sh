#!/usr/bin/env bash
# Installs the non-Python tools the test suite checks against (linters, promtool, prometheus ...).
# Each area keeps its own script in tests/tools/; this runs them all.
# The scripts that fill a virtual environment of their own (they source tool_venv.bash: checkov,
# instructor, LiteLLM) run side by side, beside the others: each is one pip process, single-threaded,
# and a fresh machine spends over a minute on them. The others (apt, pip into the project's own
# environment) run one after another, as apt and pip each take one lock. Each script's output is
# printed whole once it ends.
set -euo pipefail
cd "$(dirname "$0")/tools"
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

run() {  # run SCRIPT: its output into the log folder, its exit status as the last line
    local status=0
    bash "$1" > "$logs/$1.log" 2>&1 || status=$?
    echo "exit $status" >> "$logs/$1.log"
}

pids=()
shared=()
for script in *.sh; do
    [ -e "$script" ] || continue
    if grep -q "tool_venv.bash" "$script"; then
        run "$script" & pids+=($!)
    else
        shared+=("$script")
    fi
done
for script in "${shared[@]}"; do
    run "$script"
done
wait "${pids[@]}"

failed=0
for script in *.sh; do
    [ -e "$logs/$script.log" ] || continue
    echo "== tests/tools/$script"
    sed '$d' "$logs/$script.log"
    [ "$(tail -n 1 "$logs/$script.log")" = "exit 0" ] || { echo "tests/tools/$script failed" >&2; failed=1; }
done
exit "$failed"
