"""The two images the container tests run (the CPU image and the operator image), each built once a
session: from the session's start, by its main process at the lowest CPU priority, when the container
tests are selected (tests/conftest.py and tests/background.py), or when a test first asks for it.

A cold build waits on dpkg, pip and image layers for several minutes; in the background it takes what
CPU the rest of the suite leaves, and the container tests, run last, find the images ready.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
from collections.abc import Callable

from tests import background
from tests.docker import podman as pm
from tests.docker.dockerfiles import GPU_DOCKERFILE, OPERATOR_DOCKERFILE, REPO
from tests.docker.test_container_docs import cpu_build_args

# One tag per checkout: test runs of two checkouts on one machine do not swap each other's images.
CHECKOUT = hashlib.sha256(str(REPO).encode()).hexdigest()[:8]
CPU_TAG = f"localhost/minisgl-cpu:test-{CHECKOUT}"
OPERATOR_TAG = f"localhost/minisgl-operator:test-{CHECKOUT}"


def cpu_image_args(base: str) -> dict[str, str]:
    """docs/container.md's CPU build, from this machine's sources: the Debian base made here and the CPU
    torch this test suite runs on (from the local wheel folder pip is configured with)."""
    args = cpu_build_args()
    args.update(BASE_IMAGE=base, RUNTIME_IMAGE=base, TORCH_INDEX_URL="",
                TORCH_VERSION=importlib.metadata.version("torch"))
    return args


def _build_cpu(nice: bool) -> str:
    # The operator image's base (Debian with Python) serves both: one debootstrap a session, not two (each
    # one to two minutes of the CPU the tests share). The Dockerfile's apt line still runs, finding Python.
    pm.build(CPU_TAG, GPU_DOCKERFILE, cpu_image_args(pm.debian_base(pm.PYTHON_PACKAGES, nice=nice)), nice=nice)
    return CPU_TAG


def _build_operator(nice: bool) -> str:
    pm.build(OPERATOR_TAG, OPERATOR_DOCKERFILE, {"BASE_IMAGE": pm.debian_base(pm.PYTHON_PACKAGES, nice=nice)},
             nice=nice)
    return OPERATOR_TAG


BUILDS: dict[str, Callable[[bool], str]] = {"cpu": _build_cpu, "operator": _build_operator}


def build_in_background() -> None:
    """Start building every image, one after another, in a thread of the session's main process
    (tests/background.py), each at the lowest CPU priority."""
    background.start_calls({f"image-{name}": functools.partial(build, True) for name, build in BUILDS.items()})


def image(name: str) -> str:
    """The image's tag once it is built: the session's background build's (its progress shown
    meanwhile), else built here."""
    tag = background.wait_call(f"image-{name}", pm.show_background_progress)
    return tag if tag is not None else BUILDS[name](False)
