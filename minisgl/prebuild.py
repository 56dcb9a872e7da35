"""FlashInfer's kernels that minisgl runs, compiled ahead of time: the one list of them.

FlashInfer compiles each kernel the first time it is used: on a fresh GPU machine minutes before
the first token (130 s for norm/rope/sampling/SiLU and 92 s for one attention variant, measured
on an H100). `python -m minisgl.prebuild` compiles the list below for named GPU architectures (no
GPU needed) and installs each result as one of FlashInfer's ahead-of-time modules, in its package
(`flashinfer/data/aot/<name>/<name>.so`), which FlashInfer then loads without nvcc or ninja. The
Dockerfile runs it at build time; on a machine, run it once after installing flashinfer.

What minisgl's defaults run (`--attn auto`, minisgl/attention/):
  - attention for each dtype the FlashInfer backend accepts (the model's) and each head size it
    accepts, over a KV cache of the model's dtype:
      decode       the paged decode kernel (CUDA cores; GQA groups under 4),
      prefill-fa2  FA2 paged prefill, also decode with tensor cores (GQA groups of 4 and more),
      prefill-fa3  FA3 paged prefill, Hopper's default prefill (only for 9.x architectures);
    and over an FP8 KV cache (--kv-cache-dtype fp8_e4m3 / fp8_e5m2) decode and prefill-fa2 (FA3's
    templates take no bf16 queries over FP8 pages, so FP8 KV prefills with FA2 on Hopper too);
    the page size, the batch and the sequence lengths are run-time arguments of these kernels,
    so every --page-size uses the same ones;
  - RMSNorm and add+RMSNorm, SiLU-and-mul, rotary embedding (minisgl/kernels/dispatch.py);
  - sampling from logits, top-k/top-p (minisgl/engine/sample.py);
  - under tensor parallelism, the all-reduce fused with the residual add and RMSNorm
    (TensorRT-LLM's kernels, `trtllm_comm`; minisgl/distributed/fused_norm.py), built by FlashInfer
    for 9.x and 10.x only (150 s on an H100 machine's host).
minisgl passes no sliding window, logits soft-cap or position encoding to FlashInfer, and its K
and V pages have equal strides, so those variants are not built.

This module imports only the standard library at load time: the Dockerfile runs it as a lone
file before the rest of the code is copied, so that the long compile layer survives code
changes. torch and flashinfer are imported when building.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

# Read by minisgl/attention/flashinfer.py: the backend serves exactly what is prebuilt.
ATTENTION_DTYPES = ("bfloat16", "float16")
ATTENTION_HEAD_DIMS = (64, 128, 256)
# FP8 KV caches the backend reads (torch dtype names; --kv-cache-dtype fp8_e4m3 and fp8_e5m2).
ATTENTION_FP8_KV_DTYPES = ("float8_e4m3fn", "float8_e5m2")
# FLASHINFER_CUDA_ARCH_LIST's format. 8.0 code runs on every 8.x GPU (A100, A10, L4, L40);
# 9.0a is H100/H200 and 10.0a B200/GB200, each only there ("a": architecture-specific).
DEFAULT_ARCHS = ("8.0", "9.0a", "10.0a")
OTHER_KERNELS = ("norm", "silu_and_mul", "rope", "sampling")
# The fused all-reduce + RMSNorm (minisgl/distributed/fused_norm.py): FlashInfer builds it for these
# major architectures only, and minisgl uses it there only.
ALLREDUCE_FUSION_MAJORS = (9, 10)
_BUILD_ORDER = ("prefill-fa3", "allreduce-fusion", "prefill-fa2", "sampling", "decode", "rope", "norm",
                "silu_and_mul")  # longest first


@dataclass(frozen=True)
class Kernel:
    """One compiled module: an attention kind at a dtype, KV dtype and head size, or one of
    OTHER_KERNELS."""

    kind: str
    dtype: str | None = None
    head_dim: int | None = None
    kv_dtype: str | None = None  # None: the same as dtype

    def __str__(self) -> str:
        if self.dtype is None:
            return self.kind
        kv = f" kv={self.kv_dtype}" if self.kv_dtype else ""
        return f"{self.kind} {self.dtype}{kv} head_dim={self.head_dim}"


def kernels(archs=DEFAULT_ARCHS, dtypes=ATTENTION_DTYPES, head_dims=ATTENTION_HEAD_DIMS,
            fp8_kv_dtypes=ATTENTION_FP8_KV_DTYPES) -> list[Kernel]:
    """The modules minisgl needs on GPUs of `archs` for models of these dtypes and head sizes."""
    hopper = any(arch.startswith("9.") for arch in archs)
    out = [Kernel(kind) for kind in OTHER_KERNELS]
    if any(int(arch.split(".")[0]) in ALLREDUCE_FUSION_MAJORS for arch in archs):
        out.append(Kernel("allreduce-fusion"))
    for dtype in dtypes:
        for head_dim in head_dims:
            out += [Kernel("decode", dtype, head_dim), Kernel("prefill-fa2", dtype, head_dim)]
            if hopper:
                out.append(Kernel("prefill-fa3", dtype, head_dim))
            for kv_dtype in fp8_kv_dtypes:
                out += [Kernel("decode", dtype, head_dim, kv_dtype), Kernel("prefill-fa2", dtype, head_dim, kv_dtype)]
    return out


def jit_spec(kernel: Kernel):
    """FlashInfer's build spec of a kernel, made by the same functions its wrappers call."""
    import torch
    from flashinfer.jit import activation, comm, norm, rope, sampling
    from flashinfer.jit.attention import modules

    others = {"norm": norm.gen_norm_module, "rope": rope.gen_rope_module, "sampling": sampling.gen_sampling_module,
              "silu_and_mul": lambda: activation.gen_act_and_mul_module("silu"),
              "allreduce-fusion": comm.gen_trtllm_comm_module}
    if kernel.kind in others:
        return others[kernel.kind]()
    dtype = getattr(torch, kernel.dtype)
    kv_dtype = getattr(torch, kernel.kv_dtype or kernel.dtype)
    # dtype q, kv, out; int32 page indices; head dims qk, vo; no position encoding, no sliding
    # window, no soft-cap (and for prefill, no fp16 q@k reduction): what BatchDecode/Prefill
    # wrappers ask for with minisgl's plan() arguments.
    args = (dtype, kv_dtype, dtype, torch.int32, kernel.head_dim, kernel.head_dim, 0, False, False)
    if kernel.kind == "decode":
        return modules.gen_batch_decode_module(*args)
    if kernel.kind == "prefill-fa2":
        # FlashInfer 0.7's FA2 wrapper loads a "primary" module (K and V pages with equal
        # strides); 0.6 (the GPU machines' version) the full one.
        primary = getattr(modules, "_gen_batch_prefill_primary_module", None)
        return (primary or modules.gen_batch_prefill_module)("fa2", *args, False)
    if kernel.kind == "prefill-fa3":
        return modules.gen_batch_prefill_module("fa3", *args, False)
    raise ValueError(f"unknown kernel kind {kernel.kind!r}")


def _install(spec) -> Path:
    """Copy a built module to FlashInfer's AOT location, atomically (a reader never sees half)."""
    from flashinfer.jit import env as jit_env

    target = jit_env.FLASHINFER_AOT_DIR / spec.name / f"{spec.name}.so"
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".so.partial")
    shutil.copyfile(spec.jit_library_path, partial)
    os.replace(partial, target)
    return target


def _detected_archs() -> tuple[str, ...]:
    import torch

    if not torch.cuda.is_available():
        return ()
    caps = {torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())}
    return tuple(f"{major}.{minor}{'a' if major >= 9 else ''}" for major, minor in sorted(caps))


def prebuild(archs, dtypes=ATTENTION_DTYPES, head_dims=ATTENTION_HEAD_DIMS, jobs: int | None = None,
             force: bool = False, fp8_kv_dtypes=ATTENTION_FP8_KV_DTYPES) -> list[Path]:
    """Compile and install the modules; prints a line per module and a heartbeat while it waits."""
    # FlashInfer reads the target architectures once, when it is imported.
    os.environ["FLASHINFER_CUDA_ARCH_LIST"] = " ".join(archs)
    from flashinfer.jit import env as jit_env

    todo = [(k, jit_spec(k)) for k in kernels(archs, dtypes, head_dims, fp8_kv_dtypes)]
    done = [(k, s) for k, s in todo if not force and (jit_env.FLASHINFER_AOT_DIR / s.name / f"{s.name}.so").exists()]
    todo = [item for item in todo if item not in done]
    for kernel, spec in done:
        print(f"already installed: {kernel} ({spec.name})", flush=True)
    cpus = os.cpu_count() or 1
    workers = max(1, min(jobs or cpus, len(todo) or 1))
    # Modules build side by side and each one's ninja may use every core: most modules are one to
    # three files, while an FA3 prefill module is many and alone takes most of the time (with a
    # share of the cores each, 16 cores for 10 modules, FA3 took over 6 minutes on an H100's host).
    # The biggest start first. MAX_JOBS set by the caller wins (a build machine short of memory).
    os.environ.setdefault("MAX_JOBS", str(cpus))
    todo.sort(key=lambda item: _BUILD_ORDER.index(item[0].kind))
    print(f"compiling {len(todo)} FlashInfer modules for {' '.join(archs)} ({workers} at a time, "
          f"{os.environ['MAX_JOBS']} compiler jobs each) into {jit_env.FLASHINFER_AOT_DIR}", flush=True)
    start = time.perf_counter()
    installed = [jit_env.FLASHINFER_AOT_DIR / s.name / f"{s.name}.so" for _, s in done]

    def build(kernel, spec) -> float:
        began = time.perf_counter()
        spec.build(verbose=False, need_lock=True)  # the lock: another prebuild may run beside this one
        installed.append(_install(spec))
        return time.perf_counter() - began

    with ThreadPoolExecutor(workers) as pool:
        running = {pool.submit(build, k, s): (k, s) for k, s in todo}
        finished = 0
        while running:
            ready, _ = wait(running, timeout=60, return_when=FIRST_COMPLETED)
            if not ready:
                names = ", ".join(str(k) for k, _ in list(running.values())[:workers])
                print(f"  ... {time.perf_counter() - start:.0f} s, {finished}/{len(todo)} done; compiling {names}", flush=True)
            for future in ready:
                kernel, spec = running.pop(future)
                if future.exception() is not None:  # a failed compile stops the build, with its log
                    for pending in running:
                        pending.cancel()
                    raise RuntimeError(f"compiling {kernel} ({spec.name}) failed") from future.exception()
                seconds = future.result()
                finished += 1
                print(f"[{finished:>2}/{len(todo)}] {seconds:6.1f} s  {kernel}  ({spec.name})", flush=True)
    size = sum(p.stat().st_size for p in installed)
    print(f"built {len(todo)} modules in {time.perf_counter() - start:.1f} s; {len(installed)} installed, "
          f"{size / 2**20:.1f} MiB", flush=True)
    return installed


def _csv(kind):
    return lambda text: tuple(kind(x) for x in text.replace(",", " ").split())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m minisgl.prebuild",
        description="Compile FlashInfer's kernels that minisgl uses and install them as FlashInfer's "
                    "ahead-of-time modules, so that no kernel compiles at run time.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--prebuild", action="store_true", help="Compile (the default action; kept for scripts).")
    parser.add_argument("--archs", type=_csv(str), default=None,
                        help=f"GPU architectures, e.g. '{' '.join(DEFAULT_ARCHS)}' (the image's); "
                             "default: this machine's GPUs.")
    parser.add_argument("--dtypes", type=_csv(str), default=ATTENTION_DTYPES, help="Attention dtypes.")
    parser.add_argument("--head-dims", type=_csv(int), default=ATTENTION_HEAD_DIMS, help="Attention head sizes.")
    parser.add_argument("--fp8-kv-dtypes", type=_csv(str), default=ATTENTION_FP8_KV_DTYPES,
                        help="FP8 KV-cache dtypes ('' for none).")
    parser.add_argument("--jobs", type=int, default=None, help="Modules compiled at once (default: one per core).")
    parser.add_argument("--force", action="store_true", help="Rebuild modules that are already installed.")
    parser.add_argument("--list", action="store_true", help="Print the modules and exit; compile nothing.")
    args = parser.parse_args(argv)
    unknown = (set(args.dtypes) - set(ATTENTION_DTYPES) or set(args.head_dims) - set(ATTENTION_HEAD_DIMS)
               or set(args.fp8_kv_dtypes) - set(ATTENTION_FP8_KV_DTYPES))
    if unknown:
        parser.error(f"minisgl's FlashInfer backend never runs {sorted(unknown)}")
    archs = args.archs if args.archs is not None else (DEFAULT_ARCHS if args.list else _detected_archs())
    if not archs:
        parser.error("no CUDA GPU here: name the architectures with --archs")
    if args.list:
        for kernel in kernels(archs, args.dtypes, args.head_dims, args.fp8_kv_dtypes):
            print(kernel)
        return 0
    prebuild(archs, args.dtypes, args.head_dims, jobs=args.jobs, force=args.force, fp8_kv_dtypes=args.fp8_kv_dtypes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
