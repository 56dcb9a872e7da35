"""Build FlashInfer's JIT modules that minisgl uses besides attention (RMSNorm, SiLU-and-mul,
rotary, sampling), in parallel, into $FLASHINFER_WORKSPACE_BASE. Run once on a machine whose
cache lacks them; tar the cache afterwards to carry it to the next machine.

    python benchmark/device/prebuild_flashinfer.py
"""

from __future__ import annotations

import time
from concurrent.futures import ProcessPoolExecutor


def build(name: str) -> tuple[str, float]:
    from flashinfer.jit import activation, norm, rope, sampling

    spec = {"norm": norm.gen_norm_module, "rope": rope.gen_rope_module, "sampling": sampling.gen_sampling_module,
            "silu_and_mul": lambda: activation.gen_act_and_mul_module("silu")}[name]()
    start = time.perf_counter()
    spec.build_and_load()
    return name, time.perf_counter() - start


if __name__ == "__main__":
    start = time.perf_counter()
    with ProcessPoolExecutor(4) as pool:
        for name, seconds in pool.map(build, ["rope", "sampling", "norm", "silu_and_mul"]):
            print(f"flashinfer {name}: {seconds:.1f} s")
    print(f"all built in {time.perf_counter() - start:.1f} s")
