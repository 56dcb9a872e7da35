"""Compile FlashInfer's kernels that minisgl uses, as the image's build does, on a device machine:
a thin entry to minisgl.prebuild, which holds the one list of them. Same flags:

    python benchmark/device/prebuild_flashinfer.py                          # this machine's GPUs, all variants
    python benchmark/device/prebuild_flashinfer.py --dtypes bfloat16 --head-dims 128   # Qwen3 shapes only
    python benchmark/device/prebuild_flashinfer.py --list

The modules land in the installed flashinfer package as its ahead-of-time modules; start the server
afterwards with FLASHINFER_DISABLE_JIT=1 to prove that nothing compiles at run time.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from minisgl.prebuild import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
