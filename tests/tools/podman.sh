#!/usr/bin/env bash
# Tools for tests/docker/test_container.py, which builds and runs the images for real:
#   - podman (rootful) with the runc runtime: crun fails on the hybrid cgroup setup of the CI
#     machines, runc works with the cgroupfs manager (no systemd runs there to manage cgroups);
#   - debootstrap, which makes the Debian base image (no registry serves base images here).
# The settings go to /etc/containers/containers.conf; default_ulimits = [] because the default
# nofile limit podman asks for is above what these machines allow a container.
# CI runs this as root on a fresh Debian machine. Idempotent: with everything in place it only
# prints the versions.
set -euo pipefail

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

if ! command -v podman >/dev/null || ! command -v runc >/dev/null || ! command -v debootstrap >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -q
    $SUDO apt-get install -y -q --no-install-recommends podman runc debootstrap uidmap \
        containernetworking-plugins iptables slirp4netns ca-certificates
fi

CONF=/etc/containers/containers.conf
WANT='# Written by minisgl tests/tools/podman.sh (runc, cgroupfs: see that script).
[containers]
default_ulimits = []

[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
runtime = "runc"
'
if [ "$(cat "$CONF" 2>/dev/null)" != "$WANT" ]; then
    $SUDO mkdir -p /etc/containers
    printf '%s' "$WANT" | $SUDO tee "$CONF" >/dev/null
fi

# Fail here, not later in the tests, if podman cannot run.
podman --version
runc --version | sed -n 1p  # sed reads it all: no SIGPIPE under pipefail
podman info --format '{{.Host.OCIRuntime.Name}} {{.Host.CgroupManager}} {{.Store.GraphDriverName}}'
