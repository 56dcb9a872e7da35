#!/usr/bin/env bash
# Installs the non-Python tools the test suite checks against (linters, promtool, prometheus ...).
# Each area keeps its own script in tests/tools/; this runs them all.
set -euo pipefail
cd "$(dirname "$0")/tools"
for script in *.sh; do
    [ -e "$script" ] || continue
    echo "== tests/tools/$script"
    bash "$script"
done
