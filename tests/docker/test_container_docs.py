"""docs/container.md shows commands that match the images."""

from __future__ import annotations

import re
import shlex

from minisgl.server import args as server_args
from tests.docker.dockerfiles import GPU_DOCKERFILE, REPO, final_stage, global_args, parse

CONTAINER_DOC = (REPO / "docs" / "container.md").read_text()
RUNTIME = final_stage(GPU_DOCKERFILE)


def container_section() -> str:
    match = re.search(r"^# Container\n(.*)", CONTAINER_DOC, re.S | re.M)
    assert match, 'docs/container.md has no "# Container" title'
    return match.group(1)


def shell_commands(text: str) -> list[list[str]]:
    """The commands of the section's ```bash blocks, split as the shell splits them."""
    blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    return [shlex.split(line.replace("\\\n", " ")) for block in blocks for line in block.replace("\\\n", " ").splitlines() if line.strip()]


def docker_runs() -> list[list[str]]:
    return [cmd for cmd in shell_commands(container_section()) if cmd[:2] == ["docker", "run"]]


def cpu_build_args() -> dict[str, str]:
    """The --build-arg values of docs/container.md's CPU image build (test_container.py builds it)."""
    build = next(cmd for cmd in shell_commands(container_section()) if cmd[:4] == ["docker", "build", "-t", "minisgl-cpu"])
    assert build[-1] == ".", "built from the repository root"
    return dict(build[i + 1].split("=", 1) for i, arg in enumerate(build) if arg == "--build-arg")


def test_cpu_image_is_the_same_dockerfile_with_other_build_arguments():
    args = cpu_build_args()
    declared = set(global_args(GPU_DOCKERFILE)) | {name for stage in parse(GPU_DOCKERFILE) for name in stage.args()}
    assert set(args) <= declared, f"not build arguments of ./Dockerfile: {set(args) - declared}"
    assert args["KERNEL_ARCHS"] == "" and args["EXTRAS"] == "", "no GPU kernels, no cuda extra"
    assert args["TORCH_INDEX_URL"].endswith("/whl/cpu"), "PyTorch's CPU wheels: no CUDA libraries"
    assert args["BASE_IMAGE"] == args["RUNTIME_IMAGE"], "one Debian for the venv and for running it"


def test_builds_both_images_from_the_repository_root():
    commands = shell_commands(container_section())
    assert ["docker", "build", "-t", "minisgl", "."] in commands
    assert ["docker", "build", "-f", "operator/Dockerfile", "-t", "minisgl-operator", "."] in commands


def test_serving_example_publishes_the_default_port_and_mounts_the_model_cache():
    port = server_args.DEFAULT_PORT
    serve = next(cmd for cmd in docker_runs() if "--model" in cmd and "--shell" not in cmd)
    assert "--gpus" in serve and f"{port}:{port}" in serve
    assert f"hf:{RUNTIME.env()['HF_HOME']}" in serve
    assert any(arg.startswith("HF_TOKEN=") for arg in serve)
    image_at = serve.index("minisgl")
    assert serve[image_at + 1 :] == ["--model", "Qwen/Qwen3-8B", "--tp", "2"]
    assert "--ipc=host" in serve, "TP ranks need shared memory beyond Docker's 64 MB /dev/shm"


def test_shell_mode_example_is_interactive():
    shell = next(cmd for cmd in docker_runs() if "--shell" in cmd)
    assert "-it" in shell and shell.index("-it") < shell.index("minisgl")


def test_documents_where_the_caches_live_and_the_shm_need():
    section = container_section()
    env = RUNTIME.env()
    for variable in ("HF_HOME", "FLASHINFER_WORKSPACE_BASE", "TRITON_CACHE_DIR"):
        assert f"`{env[variable]}` | `{variable}`" in section, variable
    assert "--ipc=host" in section and "--shm-size" in section
    assert f"127.0.0.1:{server_args.DEFAULT_PORT}{server_args.LIVENESS_PATH}" in section
