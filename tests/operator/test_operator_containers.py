"""What each container the operator runs gets from the node: GPUs only where it asks for them, and an
image pull policy that follows the image reference as Kubernetes' own default does."""

from __future__ import annotations

import kube_nodes
import pytest

from minisgl_operator import constants, render

CUDA_IMAGE_ENV = {"NVIDIA_VISIBLE_DEVICES": "all"}  # what nvidia/cuda base images set


def objects(spec: dict) -> list[dict]:
    meta = {"name": "chat", "namespace": "llm", "uid": "u1"}
    return render.render({"apiVersion": constants.API_VERSION, "kind": constants.KIND, "metadata": meta, "spec": spec})


def pod_specs(spec: dict) -> list[dict]:
    found = []
    for obj in objects(spec):
        template = (obj.get("spec") or {}).get("template")
        if template:
            found.append(template["spec"])
    return found


def test_only_the_server_sees_gpus_on_a_gpu_node():
    spec = {"model": "Qwen/Qwen3-8B", "tp": 2, "modelCache": {"size": "100Gi", "accessModes": ["ReadWriteMany"]},
            "adapters": [{"name": "sql", "source": "org/sql-lora"}]}  # fmt: skip
    seen = {}
    for pod in pod_specs(spec):
        for container in [*pod.get("initContainers", []), *pod["containers"]]:
            seen[container["name"]] = kube_nodes.visible_gpus(container, CUDA_IMAGE_ENV, node_gpus=8)
    assert seen.pop(constants.CONTAINER_NAME) == 2
    assert {constants.LOADER_CONTAINER, constants.ADAPTER_CONTAINER, constants.CACHE_OWNER_CONTAINER} <= set(seen)
    assert set(seen.values()) == {0}, seen


@pytest.mark.parametrize("image, policy", [
    ("registry.example/minisgl:0.1.0", "IfNotPresent"),
    ("registry.example:5000/minisgl@sha256:" + "a" * 64, "IfNotPresent"),
    ("registry.example/minisgl:latest", "Always"),
    ("registry.example:5000/minisgl", "Always"),  # no tag is :latest
])  # fmt: skip
def test_a_moving_image_reference_is_pulled_every_time_a_pinned_one_once(image, policy):
    spec = {"model": "m", "image": image, "modelCache": {"size": "100Gi", "accessModes": ["ReadWriteMany"]}}
    for pod in pod_specs({**spec, "model": "org/m"}):
        for container in [*pod.get("initContainers", []), *pod["containers"]]:
            if container["image"] == image:
                assert container["imagePullPolicy"] == policy, container["name"]
