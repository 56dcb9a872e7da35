"""The image's Dockerfile (./Dockerfile, CUDA by default), read with Docker's own parser, against
what the server expects.

The port, probe path and flags come from minisgl.server.args, the single source of truth, so the
image cannot drift from the CLI. These tests read the Dockerfile with its default (CUDA) build
arguments, which cannot be built here (no CUDA base image is reachable); test_container.py builds
and runs the same Dockerfile with the CPU arguments.
"""

from __future__ import annotations

import http.server
import re
import shlex
import subprocess
import sys
import threading

import pytest
import tomllib
from docker.utils.build import exclude_paths

from minisgl import prebuild
from minisgl.server import args as server_args
from tests.docker import cuda_image
from tests.docker.dockerfiles import (
    GPU_DOCKERFILE,
    OPERATOR_DOCKERFILE,
    REPO,
    dockerignore_patterns,
    exec_form,
    final_stage,
    global_args,
    healthcheck_argv,
    parse,
    resolve,
)

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
STAGES = parse(GPU_DOCKERFILE)
GLOBAL_ARGS = global_args(GPU_DOCKERFILE)
BUILDER, RUNTIME = STAGES[0], STAGES[-1]
ENTRYPOINT = exec_form(RUNTIME.last("ENTRYPOINT"))
# `python -m minisgl` plus the flags the image itself passes.
BASE_COMMAND = ["python", "-m", "minisgl"]


def server_flags(*user_args: str) -> server_args.ServerArgs:
    """What the server parses when a user runs `docker run IMAGE *user_args`."""
    cmd = exec_form(RUNTIME.last("CMD")) if RUNTIME.all("CMD") else []
    argv = ENTRYPOINT[len(BASE_COMMAND):] + list(user_args or cmd)
    return server_args.parse_args(argv)


# --- base images and build --------------------------------------------------------------------


def test_builds_on_the_cuda_devel_image_and_runs_on_the_matching_runtime_image():
    """Two stages from build arguments: nvcc where kernels compile, CUDA's smaller runtime image after."""
    assert [stage.base for stage in STAGES] == ["${BASE_IMAGE}", "${RUNTIME_IMAGE}"]
    builder, runtime = (resolve(stage.base, GLOBAL_ARGS) for stage in STAGES)
    # Official NVIDIA images, exact tag (x.y.z), never latest; one CUDA and one Ubuntu for both.
    pattern = r"nvidia/cuda:(\d+\.\d+\.\d+)-(?:cudnn-)?{}-(ubuntu\d+\.\d+)(@sha256:[0-9a-f]{{64}})?"
    devel = re.fullmatch(pattern.format("devel"), builder)
    run = re.fullmatch(pattern.format("runtime"), runtime)
    assert devel and run, (builder, runtime)
    assert devel.groups()[:2] == run.groups()[:2], "the venv's python and CUDA must match across stages"
    runtime_copies = [c for c in RUNTIME.all("COPY") if any(f.startswith("--from=") for f in c.flags)]
    assert runtime_copies, "the runtime stage takes its venv from the builder"


def test_torch_comes_from_the_pytorch_index_of_the_base_images_cuda():
    major, minor = re.search(r"nvidia/cuda:(\d+)\.(\d+)\.", GLOBAL_ARGS["BASE_IMAGE"]).groups()
    args = BUILDER.args()
    assert args["TORCH_INDEX_URL"] == f"https://download.pytorch.org/whl/cu{major}{minor}"
    assert re.fullmatch(r"\d+\.\d+\.\d+", args["TORCH_VERSION"] or ""), "torch is pinned"
    runs = BUILDER.run_text()
    assert 'export PIP_INDEX_URL="$TORCH_INDEX_URL"' in runs
    assert 'pip install --no-cache-dir "torch==${TORCH_VERSION}"' in runs
    # ... and the dependency install keeps that build: the same pin is a constraint there.
    assert "torch==%s" in runs and '"$TORCH_VERSION"' in runs and "-c /tmp/constraints.txt" in runs


def test_python_venv_with_the_projects_dependencies_then_its_code():
    assert "cuda" in PYPROJECT["project"]["optional-dependencies"]
    assert BUILDER.args()["EXTRAS"] == "cuda", "the CUDA image installs `.[cuda]`'s dependencies"
    runs = BUILDER.run_text()
    assert re.search(r"python3 -m venv \S*", runs)
    venv = BUILDER.env()["VIRTUAL_ENV"]
    for stage in (BUILDER, RUNTIME):
        assert stage.env()["PATH"].startswith(f"{venv}/bin:"), "python and pip resolve to the venv"
    # The dependencies come from pyproject.toml (read in the build), the code after them.
    assert 'tomllib.load(open("pyproject.toml", "rb"))' in runs and '"optional-dependencies"' in runs
    assert "pip wheel --no-cache-dir --no-deps --wheel-dir /wheels ." in runs
    copies = [src for c in BUILDER.all("COPY") for src in c.value[:-1]]
    assert copies.index("pyproject.toml") < copies.index("minisgl"), "dependencies are a layer of their own"
    assert {"pyproject.toml", "README.md", "minisgl"} <= set(copies), "everything `pip wheel .` reads"
    # The runtime stage copies the venv (the dependencies only: the same layer after a code
    # change), then installs the project's wheel into it.
    runtime_copies = [c.value[0] for c in RUNTIME.all("COPY")]
    assert runtime_copies.index(venv) < runtime_copies.index("/wheels"), "the venv, then the code"
    assert f"{venv}/bin/pip install --no-cache-dir --no-deps --disable-pip-version-check /tmp/wheels/*.whl" \
        in RUNTIME.run_text()


def test_kernels_compile_at_build_time_for_the_named_architectures():
    """minisgl/prebuild.py holds the list; the image runs it for the archs it names."""
    assert BUILDER.args()["KERNEL_ARCHS"] == " ".join(prebuild.DEFAULT_ARCHS)
    assert {"8.0", "9.0a", "10.0a"} <= set(prebuild.DEFAULT_ARCHS), "A100, H100 and B200 class GPUs"
    runs = BUILDER.run_text()
    assert 'python /tmp/prebuild.py --archs "$KERNEL_ARCHS"' in runs
    assert any(list(c.value) == ["minisgl/prebuild.py", "/tmp/prebuild.py"] for c in BUILDER.all("COPY"))
    # The script is copied alone, before the code: a code change does not recompile the kernels.
    commands = [c.original for c in BUILDER.commands]
    prebuild_at = next(i for i, c in enumerate(commands) if "prebuild.py --archs" in c)
    code_at = next(i for i, c in enumerate(commands) if c.startswith("COPY minisgl ./minisgl"))
    assert prebuild_at < code_at
    # nvcc's host compiler only where kernels compile; the build tree does not stay in a layer.
    assert "${KERNEL_ARCHS:+g++ python3-dev}" in runs and "rm -rf /tmp/flashinfer-build" in runs


def test_the_cuda_toolkit_comes_from_the_base_image_or_from_nvidias_pypi_packages():
    """By default the devel base's /usr/local/cuda; with CUDA_PIP (tests/docker/cuda_image.py) the
    same tree, assembled from NVIDIA's wheels, before the kernels compile and in the builder only."""
    assert BUILDER.args()["CUDA_PIP"] == "" and BUILDER.args()["CUDA_HOME"] == "/usr/local/cuda"
    assert "CUDA_PIP" not in RUNTIME.args() and "CUDA_HOME" not in RUNTIME.run_text()
    commands = [c.original for c in BUILDER.commands]
    toolkit_at = next(i for i, c in enumerate(commands) if "--target /tmp/cuda-pip" in c)
    prebuild_at = next(i for i, c in enumerate(commands) if "prebuild.py --archs" in c)
    assert toolkit_at < prebuild_at
    # FlashInfer's link line: -L$CUDA_HOME/lib64 -L$CUDA_HOME/lib64/stubs -lcudart -lcuda.
    toolkit = commands[toolkit_at]
    assert '"$CUDA_HOME/lib64/libcudart.so"' in toolkit and '"$CUDA_HOME/lib64/stubs/libcuda.so"' in toolkit
    assert "import torch" in toolkit, "the modules link the CUDA runtime torch loads, one runtime in the process"


@pytest.mark.parametrize("flags", [cuda_image.PREBUILD_FLAGS, ""])
def test_prebuild_flags_are_flags_the_prebuild_script_takes(flags):
    """PREBUILD_FLAGS reaches prebuild.py word by word; what the local build passes must parse."""
    assert BUILDER.args()["PREBUILD_FLAGS"] == ""
    assert 'echo "$PREBUILD_FLAGS" |' in BUILDER.run_text() and 'xargs python /tmp/prebuild.py' in BUILDER.run_text()
    listed = subprocess.run([sys.executable, "-m", "minisgl.prebuild", "--list", "--archs", cuda_image.KERNEL_ARCHS,
                             *shlex.split(flags)], capture_output=True, text=True, cwd=REPO, timeout=60, check=True)
    assert listed.stdout.strip(), "a non-empty kernel set"


def test_the_local_cuda_build_uses_declared_arguments_only():
    declared = set(GLOBAL_ARGS) | {name for stage in STAGES for name in stage.args()}
    args = cuda_image.build_args("localhost/base")
    assert set(args) <= declared, set(args) - declared
    assert args["TORCH_VERSION"] == BUILDER.args()["TORCH_VERSION"], "the torch sgl-kernel is built for"


def test_the_prebuild_script_runs_alone_on_the_standard_library():
    """The Dockerfile runs it as a lone file: importing it must not need minisgl, torch or flashinfer."""
    code = f"import runpy, sys; runpy.run_path({str(REPO / 'minisgl' / 'prebuild.py')!r}); " \
           "print(sorted(m for m in ('minisgl', 'torch', 'flashinfer') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/", timeout=60, check=True)
    assert out.stdout.strip().endswith("[]")


def test_runtime_needs_no_kernel_compiler_and_refuses_to_jit():
    runs = RUNTIME.run_text()
    assert "g++" not in runs and "nvcc" not in runs
    # Triton (minisgl's Triton kernels) builds its launcher with a C compiler on first use.
    assert "${KERNEL_ARCHS:+gcc libc6-dev python3-dev libnuma1}" in runs, "sgl-kernel's libraries link libnuma"
    assert RUNTIME.env()["FLASHINFER_DISABLE_JIT"] == "1", "a kernel missing from the list fails loudly"


# --- how the container runs --------------------------------------------------------------------


def test_entrypoint_runs_the_server_on_all_interfaces():
    assert ENTRYPOINT[: len(BASE_COMMAND)] == BASE_COMMAND
    flags = server_flags()
    assert flags.host == "0.0.0.0"
    assert flags.port == server_args.DEFAULT_PORT


def test_user_arguments_keep_all_interfaces_and_can_override_them():
    # `docker run IMAGE --model X --tp 2` replaces CMD, not the ENTRYPOINT's --host.
    flags = server_flags("--model", "Qwen/Qwen3-8B", "--tp", "2")
    assert (flags.host, flags.model, flags.tp) == ("0.0.0.0", "Qwen/Qwen3-8B", 2)
    # argparse keeps the last --host, so a user can still narrow it.
    assert server_flags("--host", "127.0.0.1").host == "127.0.0.1"


def test_python_m_minisgl_is_the_projects_console_script():
    assert PYPROJECT["project"]["scripts"]["minisgl"] == "minisgl.__main__:main"


def test_runs_as_a_numeric_non_root_user_the_image_creates():
    user = RUNTIME.last("USER").value[0]
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) != 0, f"USER {user!r}: numeric, so runAsNonRoot can verify it"
    assert not gid or (gid.isdigit() and int(gid) != 0)
    assert f"useradd --system --uid {uid} " in RUNTIME.run_text(), "the user exists in /etc/passwd"


def test_exposes_the_servers_default_port():
    exposed = {p.split("/")[0] for c in RUNTIME.all("EXPOSE") for p in c.value}
    assert exposed == {str(server_args.DEFAULT_PORT)}


def test_healthcheck_probes_the_liveness_path_on_the_default_port():
    check = RUNTIME.last("HEALTHCHECK")
    argv = healthcheck_argv(check)
    assert argv[0] == "python", "the venv's python: the image has no curl"
    urls = re.findall(r"http://[^'\"\s]+", " ".join(argv))
    assert urls == [f"http://127.0.0.1:{server_args.DEFAULT_PORT}{server_args.LIVENESS_PATH}"]
    flags = dict(f.removeprefix("--").split("=", 1) for f in check.flags)
    assert {"interval", "timeout", "start-period", "retries"} <= set(flags), flags


class _Probe(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self):  # noqa: N802 (http.server's naming)
        self.send_response(self.status if self.path == server_args.LIVENESS_PATH else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("status, healthy", [(200, True), (503, False), (None, False)])
def test_healthcheck_command_tells_healthy_from_unhealthy(status, healthy):
    """Runs the HEALTHCHECK's own command against a stand-in server on a free port."""
    argv = healthcheck_argv(RUNTIME.last("HEALTHCHECK"))
    server = http.server.HTTPServer(("127.0.0.1", 0), type("Probe", (_Probe,), {"status": status}))
    port = server.server_address[1]
    if status is None:  # nothing listening
        server.server_close()
    else:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        cmd = [sys.executable] + [a.replace(f":{server_args.DEFAULT_PORT}/", f":{port}/") for a in argv[1:]]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    finally:
        if status is not None:
            server.shutdown()
            server.server_close()
    assert (proc.returncode == 0) is healthy, proc.stderr


def test_model_and_jit_caches_are_volumes_the_user_can_write():
    env = RUNTIME.env()
    caches = [env["HF_HOME"], env["FLASHINFER_WORKSPACE_BASE"], env["TRITON_CACHE_DIR"]]
    volumes = {v for c in RUNTIME.all("VOLUME") for v in c.value}
    assert set(caches) <= volumes, (caches, volumes)
    runs = RUNTIME.run_text()
    for cache in caches:
        assert cache in runs.split("mkdir -p", 1)[1], f"{cache} is created in the image"
    # created before the USER switch and handed to that user, so a fresh named volume is writable
    assert re.search(r"chown -R \S+ /cache\b", runs) and all(c.startswith("/cache/") for c in caches)


def test_oci_labels_describe_the_image():
    labels = RUNTIME.labels()
    prefix = "org.opencontainers.image."
    for key in ("title", "description", "version", "revision", "licenses", "base.name"):
        assert labels.get(prefix + key), f"missing label {prefix + key}"
    assert RUNTIME.args()["VERSION"] == PYPROJECT["project"]["version"]
    assert labels[prefix + "licenses"] == PYPROJECT["project"]["license"]["text"]
    assert resolve(labels[prefix + "base.name"], GLOBAL_ARGS) == GLOBAL_ARGS["RUNTIME_IMAGE"]


# --- build context -----------------------------------------------------------------------------


def test_dockerignore_sends_what_the_builds_copy_and_nothing_else():
    """.dockerignore, applied as the Docker SDK applies it to the real repository."""
    context = exclude_paths(str(REPO), dockerignore_patterns())
    for path in (GPU_DOCKERFILE, OPERATOR_DOCKERFILE):
        for stage in parse(path):
            for copy in stage.all("COPY"):
                if any(f.startswith("--from=") for f in copy.flags):
                    continue
                for src in copy.value[:-1]:
                    assert (REPO / src).exists(), f"{path.name} copies {src}, which does not exist"
                    assert src in context, f"{path.name} copies {src}, which .dockerignore leaves out"
    assert "minisgl/server/args.py" in context
    for kept_out in (".git", "tests", "benchmark", ".ci"):
        assert not any(p == kept_out or p.startswith(kept_out + "/") for p in context), kept_out
    assert not [p for p in context if "__pycache__" in p or p.endswith(".pyc")]


def test_importing_the_cli_flags_stays_light():
    """This test, the operator and its image read minisgl.server.args: no torch behind it."""
    code = "import sys, minisgl.server.args; print(sorted(m for m in ('torch', 'transformers', 'numpy') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


def test_the_image_is_the_runtime_stage():
    """`docker build` tags the last stage: it must be the one with the user, port and probe."""
    assert final_stage(GPU_DOCKERFILE).name == "runtime"
    assert [c.cmd for c in RUNTIME.commands].count("ENTRYPOINT") == 1
