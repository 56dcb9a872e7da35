"""The images, built with podman and run as a user runs them.

The CPU image is ./Dockerfile with docs/container.md's CPU build arguments; only the base image (made by
debootstrap: no registry serves one here; Debian with Python) and torch's source (the local CPU wheel)
differ. The server in it serves the built-in demo model. The operator image is operator/Dockerfile on
the same base. tests/docker/podman.py has the how, tests/docker/images.py the
builds (in the background from the session's start); tests/tools/podman.sh sets podman up. A cold
run (no cached base) makes one debootstrap and two builds that cache no layers; later runs cache the
builds' layers and reuse them (docs/container.md says how long each takes).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid

import openai
import pytest
import yaml

from minisgl.server import args as server_args
from tests.docker import images
from tests.docker import podman as pm
from tests.docker.dockerfiles import GPU_DOCKERFILE, OPERATOR_DOCKERFILE, REPO, final_stage, healthcheck_argv

PROBLEM = pm.podman_problem()
pytestmark = [
    pytest.mark.container,
    pytest.mark.slow,
    pytest.mark.skipif(PROBLEM is not None, reason=f"podman cannot run containers here: {PROBLEM}"),
    # A hang guard, not a speed limit: on a cold machine the first test builds the Debian base
    # (debootstrap) and the image (torch included) from nothing; podman.build has its own.
    pytest.mark.timeout(2700),
]

RUNTIME = final_stage(GPU_DOCKERFILE)
PORT = server_args.DEFAULT_PORT
DRAIN = server_args.defaults()["drain_timeout"]
UID = RUNTIME.last("USER").value[0].partition(":")[0]
START_TIMEOUT = 300  # the demo model loads in seconds; a cold CPU start of torch is slower
RUN_ID = uuid.uuid4().hex[:8]


@pytest.fixture(scope="module", autouse=True)
def progress_on_the_terminal(pytestconfig):
    """The long steps (debootstrap, builds) and the image sizes show while pytest captures output."""
    pm.PYTEST_CONFIG = pytestconfig
    yield
    pm.PYTEST_CONFIG = None


def report_size(name: str, tag: str) -> int:
    size = pm.image_size(tag)
    pm.log(f"{name} image size: {size / 1e9:.2f} GB ({size} bytes)")
    return size


# --- fixtures: the images and running servers --------------------------------------------------


@pytest.fixture(scope="module")
def cpu_image() -> str:
    return images.image("cpu")


@pytest.fixture(scope="module")
def operator_image() -> str:
    return images.image("operator")


class Server:
    """A detached container of the image, its port published on 127.0.0.1 (a free host port)."""

    def __init__(self, image: str, *run_args: str):
        self.name = f"minisgl-test-{RUN_ID}-{uuid.uuid4().hex[:6]}"
        pm.podman("run", "--detach", "--name", self.name, "--publish", f"127.0.0.1::{PORT}", *run_args, image)
        host_port = pm.podman("port", self.name, f"{PORT}/tcp").stdout.strip().rsplit(":", 1)[1]
        self.url = f"http://127.0.0.1:{host_port}"

    def status(self, path: str) -> int | None:
        try:
            with urllib.request.urlopen(self.url + path, timeout=5) as resp:
                return resp.status
        except urllib.error.HTTPError as err:
            return err.code
        except OSError:
            return None

    def wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.status(server_args.READINESS_PATH) == 200:
                return
            if pm.inspect(self.name)["State"]["Status"] != "running":
                break
            time.sleep(1)
        raise AssertionError(f"{self.name} never got ready:\n{self.logs()}")

    def logs(self, tail: int | None = 4000) -> str:
        proc = pm.podman("logs", self.name, check=False)
        return (proc.stdout + proc.stderr)[-tail if tail else 0:]

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url + "/v1", api_key="unused", timeout=120, max_retries=0)

    def remove(self) -> None:
        pm.podman("rm", "--force", "--volumes", "--time", "0", self.name, check=False)


@pytest.fixture(scope="module")
def server(cpu_image):
    """`docker run -p ... -v hf:/cache/hf minisgl` with no flags: the demo model."""
    srv = Server(cpu_image, "--volume", f"minisgl-test-hf-{RUN_ID}:/cache/hf")
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.remove()
        pm.podman("volume", "rm", "--force", f"minisgl-test-hf-{RUN_ID}", check=False)


def demo_model(srv: Server) -> str:
    return srv.client().models.list().data[0].id


# --- the CPU image -----------------------------------------------------------------------------


def test_cpu_image_builds_and_its_size_is_reported(cpu_image):
    size = report_size("CPU", cpu_image)
    # torch (CPU) and Triton (1 GB, a dependency of xgrammar, unused on the CPU) are most of it;
    # torch's CUDA build pulled by mistake would add several GB of CUDA libraries.
    assert size < 3.2e9, f"{size / 1e9:.2f} GB: more than the CPU image should hold"


def test_help_works_through_the_entrypoint(cpu_image):
    proc = pm.podman("run", "--rm", cpu_image, "--help")
    for action in server_args.build_parser()._actions:
        for flag in action.option_strings:
            assert flag in proc.stdout, f"`--help` in the image does not show {flag}"


def test_healthcheck_passes_once_ready(server):
    config = pm.inspect(server.name)["Config"]["Healthcheck"]
    assert config["Test"][1:] == healthcheck_argv(RUNTIME.last("HEALTHCHECK")), "the image carries the HEALTHCHECK"
    proc = pm.podman("healthcheck", "run", server.name, check=False)
    assert proc.returncode == 0, f"healthcheck failed: {proc.stdout} {proc.stderr}\n{server.logs()}"
    assert pm.inspect(server.name)["State"]["Health"]["Status"] == "healthy"


def test_ready_answers_200_on_the_published_port(server):
    assert server.status(server_args.READINESS_PATH) == 200
    assert server.status(server_args.LIVENESS_PATH) == 200


def test_openai_chat_streams_an_answer_from_the_demo_model(server):
    stream = server.client().chat.completions.create(
        model=demo_model(server), messages=[{"role": "user", "content": "Say something."}],
        max_tokens=16, temperature=0, stream=True)
    chunks = [c for c in stream if c.choices]
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert len(chunks) > 2, "streamed in several events"
    assert text.strip(), "the demo model answered nothing"
    assert [c.choices[0].finish_reason for c in chunks if c.choices[0].finish_reason] in (["length"], ["stop"])


def test_the_demo_model_comes_with_the_image_and_a_start_trains_nothing(server):
    logs = server.logs(tail=None)
    assert "serving /opt/minisgl-demo/demo-" in logs  # from the image's read-only cache
    assert "training the demo model" not in logs


def test_the_server_runs_as_the_images_non_root_user(server):
    assert pm.inspect(server.name)["Config"]["User"].partition(":")[0] == UID != "0"
    # Every process of the container but the probe itself: the ENTRYPOINT's API server (pid 1)
    # and the worker processes it started. Real user ids, as the kernel has them.
    probe = ("import os\nfor pid in filter(str.isdigit, os.listdir('/proc')):\n"
             "    if int(pid) != os.getpid():\n"
             "        status = dict(l.split(':', 1) for l in open(f'/proc/{pid}/status'))\n"
             "        print(pid, status['Uid'].split()[0], status['Name'].strip())")
    rows = [line.split() for line in pm.podman("exec", server.name, "python", "-c", probe).stdout.splitlines()]
    assert ["1", UID, "python"] in rows, rows
    assert len(rows) >= 4, f"the API server and its tokenizer, detokenizer and scheduler workers: {rows}"
    assert {uid for _, uid, _ in rows} == {UID}, rows


def test_read_only_root_filesystem_with_the_cache_volumes_still_serves(cpu_image):
    # Docker's --read-only gives no writable /tmp (podman's does, unless told not to): docs/container.md
    # tells users to add --tmpfs /tmp with HOME there, which is what runs here.
    volumes = [f"minisgl-test-{kind}-ro-{RUN_ID}" for kind in ("hf", "flashinfer")]
    srv = Server(cpu_image, "--read-only", "--read-only-tmpfs=false", "--tmpfs", "/tmp", "--env", "HOME=/tmp",
                 "--volume", f"{volumes[0]}:/cache/hf", "--volume", f"{volumes[1]}:/cache/flashinfer")
    try:
        srv.wait_ready()
        reply = srv.client().chat.completions.create(
            model=demo_model(srv), messages=[{"role": "user", "content": "Hello"}], max_tokens=8)
        assert reply.choices[0].message.content.strip()
        touched = pm.podman("exec", srv.name, "touch", "/home/minisgl/x", check=False)
        assert touched.returncode != 0, "the root filesystem is read-only"
        # The demo model came from the image's read-only cache: nothing had to be written for it.
        assert "serving /opt/minisgl-demo/demo-" in srv.logs(tail=None)
    finally:
        srv.remove()
        pm.podman("volume", "rm", "--force", *volumes, check=False)


def test_podman_stop_drains_and_exits_0_within_the_drain_time(server):
    """Last of the server's tests: SIGTERM (podman stop) ends it."""
    started = time.monotonic()
    pm.podman("stop", "--time", str(int(DRAIN) + 30), server.name)
    seconds = time.monotonic() - started
    state = pm.inspect(server.name)["State"]
    assert state["ExitCode"] == 0, f"exit code {state['ExitCode']}:\n{server.logs()}"
    assert seconds < DRAIN, f"stopping took {seconds:.1f} s, past the {DRAIN} s drain time"


# --- the operator image ------------------------------------------------------------------------


def test_operator_image_size_is_reported(operator_image):
    size = report_size("operator", operator_image)
    assert size < 5e8, "no torch, no CUDA: a small Python image"


def test_operator_renders_the_example_inferenceservice_inside_the_container(operator_image):
    example = "inferenceservice.yaml"
    in_image = pm.podman("run", "--rm", "--volume", f"{REPO / 'operator' / 'examples'}:/examples:ro",
                         "--entrypoint", "minisgl-operator", operator_image, "render", f"/examples/{example}")
    on_host = subprocess.run([sys.executable, "-m", "minisgl_operator", "render", str(REPO / "operator" / "examples" / example)],
                             capture_output=True, text=True, check=True, timeout=120,
                             env={**os.environ, "PYTHONPATH": f"{REPO / 'operator'}{os.pathsep}{REPO}"})
    objects = list(yaml.safe_load_all(in_image.stdout))
    assert {"Deployment", "Service"} <= {o["kind"] for o in objects}, [o["kind"] for o in objects]
    assert objects == list(yaml.safe_load_all(on_host.stdout)), "the image renders what the source renders"


def test_operator_runs_as_a_non_root_user(operator_image):
    uid = pm.podman("run", "--rm", "--entrypoint", "id", operator_image, "-u").stdout.strip()
    assert uid == final_stage(OPERATOR_DOCKERFILE).last("USER").value[0].partition(":")[0]
    assert uid != "0"
