# syntax=docker/dockerfile:1
#
# minisgl on NVIDIA GPUs.
#   docker build -t minisgl .
#   docker run --gpus all --ipc=host -p 1919:1919 -v hf:/cache/hf minisgl --model Qwen/Qwen3-8B
# (README.md, section "Container", has the rest.)
#
# Versions, chosen together; change them together:
#   - CUDA 12.9.1: sgl-kernel's wheel on PyPI (0.3.21) is built for CUDA 12.9, and PyTorch publishes
#     matching cu129 wheels. The host driver must support CUDA 12.9 (R575 or newer).
#   - torch 2.9.1+cu129 from the PyTorch CUDA index: sgl-kernel 0.3.21 is compiled against the
#     torch 2.9 ABI, and a torch from PyPI could be a build for another CUDA (or a newer torch with
#     another ABI). tests/ run on the CPU build of a newer torch; minisgl asks only for torch>=2.5.
#
# Why the *devel* image in the final stage, not *runtime*: flashinfer-python (>= 0.6) ships no
# compiled kernels. It JIT-compiles each attention kernel variant (head dim, dtype, page size, GPU
# arch) the first time it is used, which needs nvcc, the CUDA headers and a host C++ compiler at
# run time. The precompiled alternative, flashinfer-jit-cache, is not on PyPI, must match
# flashinfer's exact version and CUDA, and still falls back to the JIT for variants it lacks. So the
# toolkit stays in the image, and the JIT output goes to $FLASHINFER_WORKSPACE_BASE, a volume-to-be:
# each kernel is then compiled once per GPU model, not at every container start.
#
# The two stages share one base, pinned by exact tag. To pin by digest as well, append
# @sha256:<digest of the tag as pulled> to both FROM lines.

FROM nvidia/cuda:12.9.1-devel-ubuntu24.04 AS builder

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# Ubuntu 24.04's own Python is 3.12; python3.12-dev for any dependency built from source.
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        ca-certificates python3.12 python3.12-dev python3.12-venv \
    && rm -rf /var/lib/apt/lists/*

ENV VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python3.12 -m venv "$VIRTUAL_ENV"

# torch first, from the PyTorch index for this CUDA; the install below keeps it (torch==2.9.1 is
# satisfied by 2.9.1+cu129), so pip never swaps in a build for another CUDA.
ARG TORCH_VERSION=2.9.1
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cu129
RUN pip install --no-cache-dir --index-url "$TORCH_INDEX_URL" "torch==${TORCH_VERSION}"

# The same install as the README's, with the GPU extra: `pip install ".[cuda]"`. The kernel
# packages are pinned to versions known to work with the torch and CUDA above.
ARG SGL_KERNEL_VERSION=0.3.21
ARG FLASHINFER_VERSION=0.7.2.post1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY minisgl ./minisgl
RUN pip install --no-cache-dir "./[cuda]" \
        "torch==${TORCH_VERSION}" \
        "sgl-kernel==${SGL_KERNEL_VERSION}" \
        "flashinfer-python==${FLASHINFER_VERSION}" \
    && python -c "import minisgl.server.args"


FROM nvidia/cuda:12.9.1-devel-ubuntu24.04 AS runtime

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# Only the interpreter: the venv comes from the builder. g++ is nvcc's host compiler and
# python3.12-dev its Python headers, both for FlashInfer's JIT (see the top of this file).
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        ca-certificates g++ python3.12 python3.12-dev \
    && rm -rf /var/lib/apt/lists/*

# A fixed, numeric non-root user (uid 1000 is Ubuntu's own "ubuntu" user), so that Kubernetes'
# runAsNonRoot can verify it. The caches are created here, owned by that user: a named volume
# mounted on them starts with this ownership.
RUN groupadd --system --gid 10001 minisgl \
    && useradd --system --uid 10001 --gid minisgl --create-home --home-dir /home/minisgl \
        --shell /usr/sbin/nologin minisgl \
    && mkdir -p /cache/hf /cache/flashinfer \
    && chown -R minisgl:minisgl /cache

# The venv stays owned by root: the server cannot modify its own code.
COPY --from=builder /opt/venv /opt/venv

# CUDA_HOME: the toolkit FlashInfer's JIT compiles with (nvcc is also on the base image's PATH).
# HF_HOME: downloaded models (the hub cache is $HF_HOME/hub).
# FLASHINFER_WORKSPACE_BASE: FlashInfer's JIT builds ($FLASHINFER_WORKSPACE_BASE/.cache/flashinfer).
ENV VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    CUDA_HOME=/usr/local/cuda \
    PYTHONUNBUFFERED=1 \
    HOME=/home/minisgl \
    HF_HOME=/cache/hf \
    FLASHINFER_WORKSPACE_BASE=/cache/flashinfer
VOLUME ["/cache/hf", "/cache/flashinfer"]

ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="minisgl" \
      org.opencontainers.image.description="A compact, fast LLM inference server with an OpenAI-compatible API (CUDA, FlashInfer)." \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="docker.io/nvidia/cuda:12.9.1-devel-ubuntu24.04"

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
