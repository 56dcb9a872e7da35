"""Shared fixtures: tiny random models of every supported architecture, built once per session."""

from __future__ import annotations

import os

import pytest
import torch

# Tests write only under temp or project folders: the demo model that servers started without
# --model use (minisgl.demo.model, default ~/.cache/minisgl) goes to .test-cache/ in the checkout
# (git ignores it), which every server the tests start inherits. It outlives the session: the demo
# trains (about a minute of CPU) once a checkout and recipe, not in every session, and its lock
# makes sessions that start together train it once.
os.environ["MINISGL_CACHE"] = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".test-cache")

if not torch.cuda.is_available():
    # Without a GPU, Triton kernels run under Triton's interpreter on CPU tensors, so the CPU suite
    # checks them too (tests/layers/test_moe.py). Triton reads this when a kernel is decorated,
    # i.e. at import, and the imports below already load triton: it must be set first.
    os.environ.setdefault("TRITON_INTERPRET", "1")

from minisgl.demo.model import demo_model_dir
from minisgl.models.tiny import ARCH_CONFIGS, build_tiny_model

pytest_plugins = ["tests.reaper", "tests.lora.fixtures"]  # no process a test starts outlives the session; the LoRA fixtures

ARCHITECTURES = list(ARCH_CONFIGS)

# One CPU thread per process: the test process and the servers it starts (schedulers, tokenizers)
# share a small machine, where a second OpenMP thread in each waits spinning for a core and a tiny
# model's step takes several times as long (benchmark/NOTES.md). The servers inherit the setting.
os.environ["OMP_NUM_THREADS"] = "1"
torch.set_num_threads(1)


def pytest_configure(config) -> None:
    if not hasattr(config, "workerinput"):  # the session's main process (xdist's controller, or the only one)
        from tests import background

        background.open_session()


def pytest_unconfigure(config) -> None:
    if not hasattr(config, "workerinput"):
        from tests import background

        background.close_session()


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups (it names each test by its group then)
def pytest_collection_modifyitems(items) -> None:
    """The GPU tests live in files named *_cuda.py (skipped without a GPU): marked `cuda`, and `slow`
    as the fast loop is a CPU one, here once rather than in each file. The modules that share a
    server (tests/server/serving.py) are run one after another, and by one pytest-xdist worker (its
    `--dist loadgroup` sends a group to one worker: each module is a group, the modules sharing a server
    one, and the container tests one). The container tests run last: their images build in the
    background meanwhile (pytest_collection_finish)."""
    for item in items:
        if item.path.stem.endswith("_cuda"):
            item.add_marker(pytest.mark.cuda)
            item.add_marker(pytest.mark.slow)
    from tests.server.serving import run_sharing_modules_together, shared_server_group

    run_sharing_modules_together(items)
    items.sort(key=lambda item: item.get_closest_marker("container") is not None)  # stable: the rest keep their order
    for item in items:
        group = "container" if item.get_closest_marker("container") else shared_server_group(item)
        item.add_marker(pytest.mark.xdist_group(group or item.nodeid.split("::")[0]))


TYPE_CHECK_TEST = "tests/test_types.py::test_the_package_type_checks"
CONTAINER_TESTS = "tests/docker/test_container.py::"


def start_background(test_ids: list[str], collect_only: bool) -> None:
    """The type check (tests/test_types.py) and the container tests' images (tests/docker/images.py),
    started by the session's main process when their tests are selected (tests/background.py)."""
    if collect_only:
        return
    from tests import background

    test_ids = [test_id.partition("@")[0] for test_id in test_ids]  # xdist names a test "<id>@<its group>"
    if TYPE_CHECK_TEST in test_ids:
        from tests.test_types import MYPY

        background.start_command("mypy", MYPY)
    if any(test_id.startswith(CONTAINER_TESTS) for test_id in test_ids):
        from tests.docker import images
        from tests.docker.test_container import PROBLEM

        if PROBLEM is None:
            images.build_in_background()
            print("\n[container test] building the container tests' images in the background (they run last)",
                  flush=True)


def pytest_collection_finish(session) -> None:
    """Modules passing tiny_qwen3_server the same arguments share one server (tests/server/serving.py):
    counted here, once the tests are selected, so the last module to use it stops it. Without workers,
    the background work starts here; with them, when the first worker has collected (below)."""
    from tests.server.serving import count_shared_server_users

    count_shared_server_users(session.items)
    if not hasattr(session.config, "workerinput"):
        start_background([item.nodeid for item in session.items], session.config.option.collectonly)


_background_started = False


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids) -> None:
    """In xdist's controller: every worker collects the same tests; the first to finish says which."""
    global _background_started
    if not _background_started:
        _background_started = True
        start_background(list(ids), node.config.option.collectonly)


def pytest_runtest_logreport(report) -> None:
    """The background builds' progress, as the tests report (in the process that runs them: xdist's
    controller, or the only one)."""
    import sys

    if "tests.docker.podman" in sys.modules:
        sys.modules["tests.docker.podman"].show_background_progress()


def pytest_sessionfinish(session) -> None:
    from tests.server.serving import stop_shared_servers

    stop_shared_servers()


@pytest.fixture(scope="session", autouse=True)
def demo_model() -> str:
    """The demo model, before a process's first test: trained if the cache lacks it (a minute of one
    core), so no server's first start waits on the training. Not at import: xdist's workers collect
    meanwhile, and the background builds they start take the core the training leaves; the second
    worker waits on the training's lock."""
    return demo_model_dir()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """tiny_model_dir(arch, **overrides) -> path of a saved random model (cached per arguments)."""
    cache: dict[tuple, str] = {}

    def build(architecture: str = "Qwen3ForCausalLM", **overrides) -> str:
        key = (architecture, tuple(sorted(overrides.items())))
        if key not in cache:
            path = tmp_path_factory.mktemp(architecture)
            cache[key] = build_tiny_model(str(path), architecture, **overrides)
        return cache[key]

    return build
