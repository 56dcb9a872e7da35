#!/usr/bin/env bash
# Tools for tests/server/test_metrics.py: promtool (checks the /metrics exposition and the alert
# rules) and a real Prometheus server (scrapes a test server), both from Debian's `prometheus`
# package. CI runs this as root on a fresh Debian/Ubuntu machine.
# Idempotent: when both binaries are already on PATH it only prints their versions.
set -euo pipefail

if ! command -v promtool >/dev/null || ! command -v prometheus >/dev/null; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -q
    # Recommends would pull node-exporter and friends; the package's own service is not needed
    # (and no init system runs in CI): the tests start Prometheus themselves.
    $SUDO apt-get install -y -q --no-install-recommends prometheus
fi

# Fail here, not later in the tests, if a tool does not run.
promtool --version 2>&1 | head -n 1
prometheus --version 2>&1 | head -n 1
