"""Shared setup for the operator tests: import paths, a recording fake of the Kubernetes API.

No Kubernetes API server can run on the machines these tests run on, so the handlers are
exercised against ``FakeKube`` (operator_fake_kube.py), which records every call.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
for path in (REPO / "operator", HERE):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
if str(REPO) not in sys.path:  # for minisgl.server.args when pytest runs from elsewhere
    sys.path.append(str(REPO))

from operator_fake_kube import FakeKube  # noqa: E402


@pytest.fixture
def fake() -> FakeKube:
    return FakeKube()


@pytest.fixture
def operator_on_a_gpu_node(fake):
    """The operator's handlers wired to `fake`, which has one 8-GPU node; unwired after the test."""
    from minisgl_operator import handlers

    fake.add_node("gpu-0", gpus=8)
    handlers.configure(fake, default_image="registry.example/minisgl:1")
    yield
    handlers._reconciler = None


@pytest.fixture
def reconciler(fake):
    """The handlers' reconciler, writing to `fake`; unwired after the test."""
    from minisgl_operator import handlers

    handlers.configure(fake, default_image="registry.example/minisgl:1")
    yield handlers._get_reconciler()
    handlers._reconciler = None
