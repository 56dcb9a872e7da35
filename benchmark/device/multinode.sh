#!/usr/bin/env bash
# Multi-node serving over NCCL, on a lent 2-GPU machine (nvidia-h200-x2): two `python -m minisgl`
# launches play two nodes (--tp 2 --nnodes 2, one GPU each through CUDA_VISIBLE_DEVICES, the ranks
# meeting over TCP on loopback as between two hosts); node 0's API must give TP=1's greedy tokens
# (tiny random Qwen3, float32), and node 1 must exit once node 0 stops. The CPU (gloo) variant of
# the same test runs in CI. Run after the kit preamble (../shared/device/kit.sh) with .device-kit
# carried. About 2 minutes. Results: $OUT/multinode.log.
set -uo pipefail
OUT=${OUT:-/tmp}
echo "=== $(date +%T) GPUs: $(nvidia-smi --query-gpu=name --format=csv,noheader | paste -sd,)"
timeout 540 python -m pytest -q -rA --tb=short -p no:cacheprovider tests/distributed/test_multi_node.py \
    > "$OUT/multinode.log" 2>&1
echo "exit $?"
tail -25 "$OUT/multinode.log"
