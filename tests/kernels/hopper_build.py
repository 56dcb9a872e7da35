"""Building minisgl's Triton kernels for Hopper on a machine without a GPU: each kernel test file has
a script (HOPPER_BUILD) that compiles its kernels for sm_90a, checks their PTX and prints "built"."""

from __future__ import annotations

import os
import subprocess
import sys


def assert_builds_for_hopper(script: str) -> None:
    """Run `script` in a fresh interpreter without TRITON_INTERPRET (set for the CPU suite), so
    Triton compiles for real; a kernel or tile that cannot build or fit fails here, not at a GPU
    server's start."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and "built" in proc.stdout, proc.stderr[-4000:]
