"""Shared fixtures: tiny random models of every supported architecture, built once per session."""

from __future__ import annotations

import os

import pytest
import torch

# Tests write only under temp or project folders: the demo model that servers started without
# --model use (minisgl.models.demo, default ~/.cache/minisgl) goes to .test-cache/ in the checkout
# (git ignores it), which every server the tests start inherits. It outlives the session: the demo
# trains (about a minute of CPU) once a checkout and recipe, not in every session, and its lock
# makes sessions that start together train it once.
os.environ["MINISGL_CACHE"] = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".test-cache")

if not torch.cuda.is_available():
    # Without a GPU, Triton kernels run under Triton's interpreter on CPU tensors, so the CPU suite
    # checks them too (tests/layers/test_moe.py). Triton reads this when a kernel is decorated,
    # i.e. at import, and the imports below already load triton: it must be set first.
    os.environ.setdefault("TRITON_INTERPRET", "1")

from minisgl.models.demo import ARCH_CONFIGS, build_tiny_model, demo_model_dir

demo_model_dir()  # trained here if the cache lacks it, so no server's first start waits on the training

pytest_plugins = ["tests.reaper", "tests.lora.fixtures"]  # no process a test starts outlives the session; the LoRA fixtures

ARCHITECTURES = list(ARCH_CONFIGS)

# One CPU thread per process: the test process and the servers it starts (schedulers, tokenizers)
# share a small machine, where a second OpenMP thread in each waits spinning for a core and a tiny
# model's step takes several times as long (benchmark/NOTES.md). The servers inherit the setting.
os.environ["OMP_NUM_THREADS"] = "1"
torch.set_num_threads(1)


def pytest_collection_modifyitems(items) -> None:
    """The GPU tests live in files named *_cuda.py (skipped without a GPU): marked `cuda`, and `slow`
    as the fast loop is a CPU one, here once rather than in each file. The modules that share a
    server (tests/server/serving.py) are run one after another. The container tests run last: their
    images build in the background meanwhile (pytest_collection_finish)."""
    for item in items:
        if item.path.stem.endswith("_cuda"):
            item.add_marker(pytest.mark.cuda)
            item.add_marker(pytest.mark.slow)
    from tests.server.serving import run_sharing_modules_together

    run_sharing_modules_together(items)
    items.sort(key=lambda item: item.get_closest_marker("container") is not None)  # stable: the rest keep their order


def pytest_collection_finish(session) -> None:
    """Modules passing tiny_qwen3_server the same arguments share one server (tests/server/serving.py):
    counted here, once the tests are selected, so the last module to use it stops it. The type check
    (tests/background.py) and the container tests' images (tests/docker/images.py) start in the background."""
    from tests.server.serving import count_shared_server_users

    count_shared_server_users(session.items)
    if any(item.path.name == "test_types.py" for item in session.items) and not session.config.option.collectonly:
        from tests import background
        from tests.test_types import MYPY

        background.start(MYPY)
    container = [item for item in session.items if item.get_closest_marker("container")]
    if container and getattr(container[0].module, "PROBLEM", True) is None and not session.config.option.collectonly:
        from tests.docker import images

        images.build_in_background()
        session.config.pluginmanager.get_plugin("terminalreporter").write_line(
            "[container test] building the container tests' images in the background (they run last)")


def pytest_sessionfinish(session) -> None:
    from tests.server.serving import stop_shared_servers

    stop_shared_servers()


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
