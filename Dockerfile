# syntax=docker/dockerfile:1
#
# minisgl's image. The defaults build the CUDA image:
#   docker build -t minisgl .
#   docker run --gpus all --ipc=host -p 1919:1919 -v hf:/cache/hf minisgl --model Qwen/Qwen3-8B
# The same steps build a CPU image from other build arguments (docs/container.md):
#   docker build -t minisgl-cpu --build-arg BASE_IMAGE=debian:12.12-slim \
#     --build-arg RUNTIME_IMAGE=debian:12.12-slim --build-arg TORCH_VERSION=2.13.0 \
#     --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu \
#     --build-arg EXTRAS= --build-arg KERNEL_ARCHS= .
#
# Versions of the CUDA image, chosen together; change them together:
#   - CUDA 12.9.1: sgl-kernel's wheel on PyPI (0.3.21) is built for CUDA 12.9, and PyTorch publishes
#     matching cu129 wheels. The host driver must support CUDA 12.9 (R575 or newer).
#   - torch 2.9.1+cu129 from the PyTorch CUDA index: sgl-kernel 0.3.21 is compiled against the
#     torch 2.9 ABI, and a torch from PyPI could be a build for another CUDA (or a newer torch with
#     another ABI). tests/ run on the CPU build of a newer torch; minisgl asks only for torch>=2.5.
#
# Two stages. The builder (CUDA's *devel* image: nvcc) makes the venv and compiles FlashInfer's
# kernels into it (minisgl/prebuild.py lists them); the runtime stage (CUDA's smaller *runtime*
# image, no nvcc) gets the venv. Both stages must be the same distribution release: the venv's
# python is the distribution's python3 (3.12 on Ubuntu 24.04, 3.11 on Debian 12).
# To pin the bases by digest as well, append @sha256:<digest> to BASE_IMAGE and RUNTIME_IMAGE.
#
# Where no nvidia/cuda image or PyTorch index can be reached, the CUDA image builds from a plain
# Debian 12 base with torch from PyPI (its CUDA 12.8 build, which carries the CUDA runtime
# libraries) and the compiler from NVIDIA's PyPI packages; tests/docker/cuda_image.py builds it so:
#   docker build -t minisgl --build-arg BASE_IMAGE=debian:12.12-slim \
#     --build-arg RUNTIME_IMAGE=debian:12.12-slim --build-arg TORCH_INDEX_URL= \
#     --build-arg CUDA_PIP="nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88 \
#       nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85 nvidia-curand==10.4.0.35 \
#       nvidia-cublas==13.0.0.19" .
# CUDA 12's PyPI packages hold no nvcc (nvidia-cuda-nvcc-cu12 is ptxas and libNVVM only), so the
# kernels compile with CUDA 13.0's and link torch's CUDA 12.8 runtime: the host needs a driver for
# CUDA 13.0 (R580 or newer). sgl-kernel 0.3.21, built with CUDA 12.9, runs on torch's 12.8 runtime
# by CUDA's minor-version compatibility.
# PREBUILD_FLAGS narrows FlashInfer's kernel set (minisgl/prebuild.py's flags), for a quick build:
#   --build-arg KERNEL_ARCHS=9.0a --build-arg PREBUILD_FLAGS="--dtypes bfloat16 --head-dims 128"
#
# Triton compiles minisgl's own kernels (CUDA-graph capture, sampling, FP8, MoE) the first time a
# server runs them on a GPU: it cannot be done here without recording each kernel's exact
# specialization on a GPU first. Its cache (TRITON_CACHE_DIR) is in a volume instead, /cache/triton;
# the operator puts it on the model cache volume, so only the first pod of a model compiles.

# checkov:skip=CKV_DOCKER_7:FROM takes a build argument, which checkov cannot resolve; tests/docker checks that its default is an exact tag
ARG BASE_IMAGE=nvidia/cuda:12.9.1-devel-ubuntu24.04
ARG RUNTIME_IMAGE=nvidia/cuda:12.9.1-runtime-ubuntu24.04

FROM ${BASE_IMAGE} AS builder

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# GPU architectures FlashInfer's kernels are compiled for (FLASHINFER_CUDA_ARCH_LIST's format):
# A100/A10/L4/L40 run the 8.0 code, H100/H200 9.0a, B200/GB200 10.0a (CUDA 12.8 and newer).
# Empty for the CPU image: no kernels, no compiler.
ARG KERNEL_ARCHS="8.0 9.0a 10.0a"

# nvcc's host compiler and the Python headers only where kernels get compiled.
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        ca-certificates python3 python3-venv ${KERNEL_ARCHS:+g++ python3-dev} \
    && rm -rf /var/lib/apt/lists/*

ENV VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python3 -m venv "$VIRTUAL_ENV"

# torch first, from the index of the base image's CUDA (or the CPU index), so that the
# dependency install below keeps it: torch==2.9.1 is satisfied by 2.9.1+cu129, and the same pin
# is a constraint there, so pip never swaps in a build for another CUDA. An empty
# TORCH_INDEX_URL takes torch from pip's configured indexes.
ARG TORCH_VERSION=2.9.1
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cu129
RUN if [ -n "$TORCH_INDEX_URL" ]; then export PIP_INDEX_URL="$TORCH_INDEX_URL"; fi \
    && pip install --no-cache-dir "torch==${TORCH_VERSION}"

# CUDA's compiler and headers, for FlashInfer's kernels below. The nvidia/cuda devel base has them in
# CUDA_HOME already. CUDA_PIP instead names NVIDIA's PyPI packages of a toolkit (nvcc, crt, nvvm,
# the runtime's headers, CCCL; cuRAND and cuBLAS, whose headers FA3 and norm include): their
# folders are merged into one CUDA_HOME tree laid out as the toolkit's, in the builder only.
# FlashInfer links its modules with -L$CUDA_HOME/lib64 -lcudart -lcuda: lib64 gets the CUDA
# runtime torch loads (one runtime in the process, the one the runtime stage has in the venv), and
# a stub of the driver's libcuda.so.1 (the driver's resolves it).
ARG CUDA_PIP=""
ARG CUDA_HOME=/usr/local/cuda
RUN if [ -n "$CUDA_PIP" ]; then \
        echo "$CUDA_PIP" | tr -s ' ' '\n' > /tmp/cuda-pip.txt \
        && pip install --no-cache-dir --no-deps --target /tmp/cuda-pip -r /tmp/cuda-pip.txt \
        && mkdir -p "$CUDA_HOME/lib64/stubs" \
        && for part in /tmp/cuda-pip/nvidia/*/; do cp -a "$part". "$CUDA_HOME"/; done \
        && rm -rf /tmp/cuda-pip /tmp/cuda-pip.txt "$CUDA_HOME/__init__.py" "$CUDA_HOME/__pycache__" \
        && python -c 'import torch; print(next(line.split()[-1] for line in open("/proc/self/maps") if "/libcudart.so" in line))' \
            | xargs -I{} ln -sf {} "$CUDA_HOME/lib64/libcudart.so" \
        && gcc -shared -x c /dev/null -Wl,-soname,libcuda.so.1 -o "$CUDA_HOME/lib64/stubs/libcuda.so" \
        && "$CUDA_HOME/bin/nvcc" --version; \
    fi

# The project's dependencies (with the extras named here: `cuda` is FlashInfer and sgl-kernel)
# before its code, in a layer of their own: a code change does not reinstall them. The kernel
# packages are pinned to versions known to work with the torch and CUDA above.
ARG EXTRAS=cuda
ARG SGL_KERNEL_VERSION=0.3.21
ARG FLASHINFER_VERSION=0.7.2.post1
WORKDIR /src
COPY pyproject.toml ./
RUN printf 'torch==%s\nsgl-kernel==%s\nflashinfer-python==%s\n' \
        "$TORCH_VERSION" "$SGL_KERNEL_VERSION" "$FLASHINFER_VERSION" > /tmp/constraints.txt \
    && python -c 'import sys, tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; extras = [e for e in sys.argv[1].split(",") if e]; print("\n".join(p["dependencies"] + [d for e in extras for d in p["optional-dependencies"][e]]))' \
        "$EXTRAS" > /tmp/requirements.txt \
    && pip install --no-cache-dir -r /tmp/requirements.txt -c /tmp/constraints.txt \
    && rm /tmp/requirements.txt /tmp/constraints.txt

# FlashInfer's kernels, compiled now into the venv's flashinfer package as its ahead-of-time
# modules: the runtime loads them without nvcc or ninja. No GPU is needed to compile. The script
# is copied alone so that this long layer survives code changes; the device runs use it too
# (`python -m minisgl.prebuild`).
# PREBUILD_FLAGS: more of prebuild.py's flags (a narrower set: --dtypes, --head-dims, ...), split
# into words by xargs (which runs the command once, with none, when it is empty).
ARG PREBUILD_FLAGS=""
COPY minisgl/prebuild.py /tmp/prebuild.py
RUN if [ -n "$KERNEL_ARCHS" ]; then \
        echo "$PREBUILD_FLAGS" | CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}" FLASHINFER_WORKSPACE_BASE=/tmp/flashinfer-build \
            xargs python /tmp/prebuild.py --archs "$KERNEL_ARCHS" \
        && rm -rf /tmp/flashinfer-build; \
    fi \
    && rm /tmp/prebuild.py

# README.md is the package's long description: copied with the code, so that editing it does
# not reinstall the dependencies. The code becomes a wheel beside the venv, not in it: the venv the
# runtime stage copies (torch and every other dependency) is then the same after a code change,
# and so is its layer.
# (PYTHONDONTWRITEBYTECODE: pip's own run writes nothing into the venv either.)
COPY README.md ./
COPY minisgl ./minisgl
RUN PYTHONDONTWRITEBYTECODE=1 pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .


FROM ${RUNTIME_IMAGE} AS runtime

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# The interpreter (the venv comes from the builder). In the CUDA image also a C compiler and the
# Python headers: Triton, which runs minisgl's Triton kernels, builds its small launcher module
# with them on first use. nvcc is not needed: FlashInfer's kernels are in the venv. libnuma:
# sgl-kernel's libraries link it (neither base image has it).
ARG KERNEL_ARCHS="8.0 9.0a 10.0a"
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        ca-certificates python3 ${KERNEL_ARCHS:+gcc libc6-dev python3-dev libnuma1} \
    && rm -rf /var/lib/apt/lists/*

# A fixed, numeric non-root user, so that Kubernetes' runAsNonRoot can verify it. The caches are
# created here, owned by that user: a named volume mounted on them starts with this ownership.
RUN groupadd --system --gid 10001 minisgl \
    && useradd --system --uid 10001 --gid minisgl --create-home --home-dir /home/minisgl \
        --shell /usr/sbin/nologin minisgl \
    && mkdir -p /cache/hf /cache/flashinfer /cache/triton \
    && chown -R minisgl:minisgl /cache

# The venv stays owned by root: the server cannot modify its own code. The venv (the
# dependencies) and the project's wheel come in layers of their own: a code change rebuilds the
# small one.
COPY --from=builder /opt/venv /opt/venv
COPY --from=builder /wheels /tmp/wheels
RUN /opt/venv/bin/pip install --no-cache-dir --no-deps --disable-pip-version-check /tmp/wheels/*.whl \
    && rm -rf /tmp/wheels \
    && /opt/venv/bin/python -c "import minisgl.server.args"
# The built-in demo model, trained here on the CPU (about a minute, on one thread as the tests train
# it) so that a bare `docker run minisgl` serves in seconds, not after training it in every new
# container; read-only, found through MINISGL_PREBUILT_CACHE before MINISGL_CACHE.
RUN MINISGL_CACHE=/opt/minisgl-demo OMP_NUM_THREADS=1 /opt/venv/bin/python -c \
        "from minisgl.demo.model import demo_model_dir; print(demo_model_dir())" \
    && rm -f /opt/minisgl-demo/*.lock && chmod -R a+rX /opt/minisgl-demo

# HF_HOME: downloaded models (the hub cache is $HF_HOME/hub); MINISGL_CACHE: where a demo model
# of another recipe than the image's would be trained, in the same volume. Triton and torch keep their caches under
# HOME: with a read-only root filesystem, point HOME at a writable /tmp (the operator's pods do).
# FLASHINFER_WORKSPACE_BASE: FlashInfer's own cache ($FLASHINFER_WORKSPACE_BASE/.cache/flashinfer).
# TRITON_CACHE_DIR: minisgl's Triton kernels as the first start on a GPU compiles them (see the
# header: not at build time); a volume, so that the next container of the same GPU starts warm.
# FLASHINFER_DISABLE_JIT: a FlashInfer kernel missing from the prebuilt set is an error that names
# it, not an attempt to run an nvcc this image does not have.
ENV VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/home/minisgl \
    HF_HOME=/cache/hf \
    MINISGL_CACHE=/cache/hf/minisgl \
    MINISGL_PREBUILT_CACHE=/opt/minisgl-demo \
    FLASHINFER_WORKSPACE_BASE=/cache/flashinfer \
    TRITON_CACHE_DIR=/cache/triton \
    FLASHINFER_DISABLE_JIT=1
VOLUME ["/cache/hf", "/cache/flashinfer", "/cache/triton"]

ARG VERSION=0.1.0
ARG REVISION=unknown
ARG RUNTIME_IMAGE
LABEL org.opencontainers.image.title="minisgl" \
      org.opencontainers.image.description="A compact, fast LLM inference server with an OpenAI-compatible API." \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="${RUNTIME_IMAGE}"

USER 10001:10001
WORKDIR /home/minisgl

EXPOSE 1919

# Liveness only (/health): the process serves HTTP. A first start downloads and loads the model,
# hence the long start period. It probes the default port: with `--port N`, override it
# (`docker run --health-cmd ...`). In `--shell` mode nothing serves HTTP and the container reads
# as unhealthy, which is harmless for an interactive session.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20m --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:1919/health', timeout=4)"]

# --host 0.0.0.0 sits in the ENTRYPOINT, not in CMD: arguments after the image name replace CMD,
# and `docker run minisgl --model X` must still listen on all interfaces. A later --host wins.
ENTRYPOINT ["python", "-m", "minisgl", "--host", "0.0.0.0"]
# No default flags: a bare `docker run minisgl` serves the built-in demo model.
CMD []
