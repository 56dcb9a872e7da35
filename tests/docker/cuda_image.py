"""The CUDA image, built here from ./Dockerfile and looked into: `python -m tests.docker.cuda_image`.

No nvidia/cuda image or PyTorch index is reachable here, so the build arguments take what is: the
Debian 12 base tests/docker/podman.py makes with debootstrap, torch from PyPI (its CUDA 12.8
build, which carries the CUDA runtime libraries) and CUDA's compiler and headers from NVIDIA's
PyPI packages of the same CUDA (the Dockerfile's CUDA_PIP). FlashInfer's kernels compile for the
architectures and the kernel set named below, a subset of the image's defaults: its compile is
most of the build. Then it reports the image's size and contents (torch and CUDA, the FlashInfer
modules with the GPU architectures of their code, whether sgl-kernel's libraries resolve), runs
`--help` and serves the demo model on the CPU (no GPU here) for one chat completion.

Not part of the test run: a cold build downloads about 4 GB and compiles for a quarter of an hour
on 2 cores (benchmark/NOTES.md, "The CUDA image built here"). Reruns reuse podman's
layer cache. Run it niced, beside other work: `nice -n 15 python -m tests.docker.cuda_image`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import openai

from minisgl.server import args as server_args
from tests.docker import podman as pm
from tests.docker.dockerfiles import GPU_DOCKERFILE, parse

TAG = "localhost/minisgl-cuda:local"
# torch 2.9.1 (the Dockerfile's pin, sgl-kernel 0.3.21's) on PyPI is its CUDA 12.8 build. CUDA 12's
# PyPI packages have no nvcc (nvidia-cuda-nvcc-cu12 is ptxas and libNVVM): the compiler is CUDA
# 13.0's, the oldest whole one on PyPI; the modules link torch's 12.8 runtime (the Dockerfile).
# cuRAND and cuBLAS for their headers: FA3's sources include CUTLASS's utilities (curand_kernel.h),
# the norm module TensorRT-LLM's CUDA utilities (cublasLt.h).
CUDA_PIP = ("nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-runtime==13.0.96 "
            "nvidia-cuda-cccl==13.0.85 nvidia-curand==10.4.0.35 nvidia-cublas==13.0.0.19")
KERNEL_ARCHS = "9.0a"
# bf16 at head size 128 (Qwen3, Llama 3), no FP8 KV: the compile is most of the build.
PREBUILD_FLAGS = "--dtypes bfloat16 --head-dims 128 --fp8-kv-dtypes ''"

# Runs in the image (its python, no GPU): what it holds, as JSON.
REPORT = r'''
import ctypes.util, glob, importlib.metadata as md, json, os, struct, subprocess, sys
import torch, flashinfer
from flashinfer.jit import env as jit_env

def fatbin_archs(path):
    """(kind, sm) of each code object in the library's fat binaries: kind 1 is PTX, 2 a cubin."""
    data, found, at = open(path, "rb").read(), set(), 0
    while (at := data.find(struct.pack("<I", 0xBA55ED50), at)) >= 0:
        header_size, fat_size = struct.unpack_from("<HQ", data, at + 6)[0], struct.unpack_from("<Q", data, at + 8)[0]
        entry, end = at + header_size, at + header_size + fat_size
        while entry + 32 <= min(end, len(data)):
            kind, _, entry_header, payload = struct.unpack_from("<HHIQ", data, entry)
            found.add(({1: "ptx", 2: "cubin"}.get(kind, str(kind)), struct.unpack_from("<I", data, entry + 28)[0]))
            if entry_header == 0:
                break
            entry += entry_header + payload
        at += 4
    return sorted(f"{k} sm_{a}" for k, a in found)

site = os.path.dirname(os.path.dirname(torch.__file__))
libdirs = [os.path.join(site, "torch", "lib")] + glob.glob(os.path.join(site, "nvidia", "*", "lib"))
env = dict(os.environ, LD_LIBRARY_PATH=":".join(libdirs))
unresolved = {}
for so in sorted(glob.glob(os.path.join(site, "sgl_kernel", "**", "*.so"), recursive=True)):
    out = subprocess.run(["ldd", so], capture_output=True, text=True, env=env).stdout
    unresolved[os.path.relpath(so, site)] = sorted({line.split()[0] for line in out.splitlines() if "not found" in line})
try:
    import sgl_kernel  # noqa: F401
    sgl_import = "ok"
except Exception as err:
    sgl_import = f"{type(err).__name__}: {err}"
modules = {}
for so in sorted(glob.glob(str(jit_env.FLASHINFER_AOT_DIR / "*" / "*.so"))):
    modules[os.path.basename(so)] = {"MiB": round(os.path.getsize(so) / 2**20, 1), "code": fatbin_archs(so)}
print(json.dumps({
    "python": sys.version.split()[0], "torch": torch.__version__, "torch_cuda": torch.version.cuda,
    "cuda_runtime": md.version("nvidia-cuda-runtime-cu12"), "triton": md.version("triton"),
    "flashinfer": md.version("flashinfer-python"), "sgl_kernel": md.version("sgl-kernel"),
    "cuda_available": torch.cuda.is_available(), "libcuda": ctypes.util.find_library("cuda"),
    "sgl_kernel_import": sgl_import, "sgl_kernel_unresolved_libs": unresolved, "flashinfer_aot": modules,
}, indent=1))
'''


def build_args(base: str) -> dict[str, str]:
    return {"BASE_IMAGE": base, "RUNTIME_IMAGE": base, "TORCH_INDEX_URL": "", "CUDA_PIP": CUDA_PIP,
            "KERNEL_ARCHS": KERNEL_ARCHS, "PREBUILD_FLAGS": PREBUILD_FLAGS,
            "TORCH_VERSION": parse(GPU_DOCKERFILE)[0].args()["TORCH_VERSION"]}


def layer_sizes(tag: str) -> list[str]:
    rows = pm.podman("history", "--format", "{{.Size}}\t{{.CreatedBy}}", tag).stdout.splitlines()
    return [row[:160] for row in rows if not row.startswith("0B")]


def demo_chat(tag: str) -> str:
    """The image with no flags on this GPU-less machine: the demo model on the CPU, one answer."""
    from tests.docker.test_container import Server  # the container tests' runner of a server

    volume = f"minisgl-cuda-hf-{int(time.time())}"
    srv = Server(tag, "--volume", f"{volume}:/cache/hf")
    try:
        started = time.monotonic()
        srv.wait_ready()
        pm.log(f"demo server ready in {time.monotonic() - started:.0f} s")
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", timeout=300, max_retries=0)
        model = client.models.list().data[0].id
        reply = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Say something."}],
                                               max_tokens=16, temperature=0)
        return f"{model}: {reply.choices[0].message.content!r} ({reply.usage.completion_tokens} tokens)"
    finally:
        srv.remove()
        pm.podman("volume", "rm", "--force", volume, check=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.docker.cuda_image", description=__doc__.split("\n")[0])
    parser.add_argument("--no-build", action="store_true", help="Report on the image already built.")
    args = parser.parse_args(argv)
    problem = pm.podman_problem()
    if problem:
        print(f"cannot build here: {problem}", file=sys.stderr)
        return 1
    if not args.no_build:
        seconds = pm.build(TAG, GPU_DOCKERFILE, build_args(pm.debian_base()), timeout=3 * 3600)
        print(f"build: {seconds:.0f} s")
    size = pm.image_size(TAG)
    print(f"size: {size / 1e9:.2f} GB ({size} bytes)")
    print("layers:\n  " + "\n  ".join(layer_sizes(TAG)))
    report = pm.podman("run", "--rm", "--entrypoint", "python", TAG, "-c", REPORT, timeout=600).stdout
    print(report)
    contents = json.loads(report)
    assert contents["torch_cuda"], "torch in the image is a CUDA build"
    assert contents["flashinfer_aot"], "FlashInfer's modules are in the image"
    helped = pm.podman("run", "--rm", TAG, "--help").stdout
    missing = [f for a in server_args.build_parser()._actions for f in a.option_strings if f not in helped]
    assert not missing, f"--help in the image does not show {missing}"
    print(f"--help: ok, {len(helped.splitlines())} lines")
    print(f"demo chat: {demo_chat(TAG)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
