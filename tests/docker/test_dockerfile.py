"""The GPU image (./Dockerfile), read with Docker's own parser, against what the server expects.

The port, probe path and flags come from minisgl.server.args, the single source of truth, so the
image cannot drift from the CLI. No Docker daemon runs on the CI machines: these tests read the
Dockerfile; they do not build the image.
"""

from __future__ import annotations

import http.server
import re
import subprocess
import sys
import threading
import tomllib

import pytest
from docker.utils.build import exclude_paths

from minisgl.server import args as server_args
from tests.docker.dockerfiles import (
    GPU_DOCKERFILE,
    OPERATOR_DOCKERFILE,
    REPO,
    dockerignore_patterns,
    exec_form,
    final_stage,
    healthcheck_argv,
    parse,
)

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
STAGES = parse(GPU_DOCKERFILE)
BUILDER, RUNTIME = STAGES[0], STAGES[-1]
ENTRYPOINT = exec_form(RUNTIME.last("ENTRYPOINT"))
# `python -m minisgl` plus the flags the image itself passes.
BASE_COMMAND = ["python", "-m", "minisgl"]


def server_flags(*user_args: str) -> server_args.ServerArgs:
    """What the server parses when a user runs `docker run IMAGE *user_args`."""
    cmd = exec_form(RUNTIME.last("CMD")) if RUNTIME.all("CMD") else []
    argv = ENTRYPOINT[len(BASE_COMMAND):] + list(user_args or cmd)
    return server_args.parse_args(argv)


# --- base image and build ----------------------------------------------------------------------


def test_multi_stage_build_on_one_pinned_cuda_devel_base():
    assert len(STAGES) >= 2, "a builder stage and a runtime stage"
    bases = {stage.base for stage in STAGES}
    assert len(bases) == 1, f"builder and runtime must share the base: {bases}"
    base = bases.pop()
    # Official NVIDIA image, exact tag (x.y.z), never latest. The final stage is -devel because
    # FlashInfer JIT-compiles its kernels with nvcc at run time.
    match = re.fullmatch(r"nvidia/cuda:(\d+)\.(\d+)\.(\d+)-(?:cudnn-)?devel-ubuntu\d+\.\d+(@sha256:[0-9a-f]{64})?", base)
    assert match, f"base {base!r} is not an exactly tagged nvidia/cuda devel image"
    runtime_copies = [c for c in RUNTIME.all("COPY") if any(f.startswith("--from=") for f in c.flags)]
    assert runtime_copies, "the runtime stage takes its venv from the builder"


def test_torch_comes_from_the_pytorch_index_of_the_base_images_cuda():
    major, minor = re.search(r"nvidia/cuda:(\d+)\.(\d+)\.", BUILDER.base).groups()
    args = BUILDER.args()
    assert args["TORCH_INDEX_URL"] == f"https://download.pytorch.org/whl/cu{major}{minor}"
    assert re.fullmatch(r"\d+\.\d+\.\d+", args["TORCH_VERSION"] or ""), "torch is pinned"
    runs = BUILDER.run_text()
    assert '--index-url "$TORCH_INDEX_URL" "torch==${TORCH_VERSION}"' in runs
    # ... and the project install keeps that build instead of pulling another torch.
    assert '"torch==${TORCH_VERSION}"' in runs.split("[cuda]", 1)[1]


def test_python_312_in_a_venv_installing_the_projects_cuda_extra():
    assert "cuda" in PYPROJECT["project"]["optional-dependencies"]
    runs = BUILDER.run_text()
    assert re.search(r"python3\.12 -m venv \S*", runs)
    venv = BUILDER.env()["VIRTUAL_ENV"]
    for stage in (BUILDER, RUNTIME):
        assert stage.env()["PATH"].startswith(f"{venv}/bin:"), "python and pip resolve to the venv"
    # `./[cuda]` is `.[cuda]` (hadolint reads the ./ as a local path, not an unpinned PyPI name).
    assert re.search(r'pip install --no-cache-dir "\./\[cuda\]"', runs)
    copied = {src for c in BUILDER.all("COPY") for src in c.value[:-1]}
    assert {"pyproject.toml", "README.md", "minisgl"} <= copied, "everything `pip install .` reads"
    assert any(c.value[0] == venv for c in RUNTIME.all("COPY")), "the runtime stage gets the venv"


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
    caches = [env["HF_HOME"], env["FLASHINFER_WORKSPACE_BASE"]]
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
    assert labels[prefix + "base.name"] == f"docker.io/{RUNTIME.base}"


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
