"""The pods fit the GPU nodes people have: defaults sized from the model, placed by the fake
scheduler's resource fit on realistic node shapes (kube_nodes.py), and the status says what was chosen."""

from __future__ import annotations

import re
import textwrap
from decimal import Decimal
from pathlib import Path

import kube_nodes
import pytest
import yaml

from minisgl_operator import constants, handlers, sizing
from minisgl_operator.spec import parse

NOTES = Path(__file__).resolve().parents[2] / "charts" / "minisgl-operator" / "templates" / "NOTES.txt"


def quick_start() -> dict:
    """The InferenceService the chart's NOTES print after `helm install`."""
    block = re.search(r"<<'YAML'\n(.*?)\n\s*YAML\n", NOTES.read_text(), flags=re.DOTALL)
    assert block, "NOTES.txt prints an InferenceService between <<'YAML' and YAML"
    return yaml.safe_load(textwrap.dedent(block.group(1)))


def serve(fake, name: str, spec: dict, nodes: dict[str, str]) -> dict:
    """Reconcile ``spec`` on a cluster of ``nodes`` (name -> shape); the InferenceService after it settles."""
    for node, shape in nodes.items():
        fake.add_node(node, shape=shape)
    handlers.configure(fake, default_image="registry.example/minisgl:1")
    try:
        reconciler = handlers._get_reconciler()
        reconciler.reconcile(fake.create_inferenceservice(name, spec))
        fake.run_controllers()
        reconciler.reconcile(fake.inferenceservice(name))
        return fake.inferenceservice(name)
    finally:
        handlers._reconciler = None


def test_the_fakes_node_reservations_match_the_providers_published_example():
    """GKE's node-sizing page shows a 4-vCPU node with a 98831908Ki boot disk offering 3920m CPU and
    47060071478 bytes of ephemeral storage to pods: the fake's formulas give the same, within rounding."""
    shape = kube_nodes.Shape(cpus=4, memory_gi=16, gpus=1, disk_gi=98831908 / 2**20)
    offered = kube_nodes.allocatable(shape)
    assert offered["cpu"] + kube_nodes.DAEMON_REQUESTS["cpu"] == Decimal("3.92")
    assert abs(offered[constants.EPHEMERAL_STORAGE] / Decimal(47060071478) - 1) < Decimal("0.06")


EXAMPLE = Path(__file__).resolve().parents[2] / "operator" / "examples" / "inferenceservice.yaml"


@pytest.mark.parametrize("isvc", [quick_start(), yaml.safe_load(EXAMPLE.read_text())], ids=["chart-notes", "docs-example"])
def test_the_quick_start_schedules_on_a_4_vcpu_16_gib_single_gpu_node_with_a_100_gib_disk(fake, isvc):
    status = serve(fake, isvc["metadata"]["name"], isvc["spec"], {"g5-xlarge": "4vcpu-16gi-1gpu"})["status"]
    assert status["phase"] == constants.PHASE_READY, status["conditions"]
    (pod,) = fake.pods()
    assert pod["spec"]["nodeName"] == "g5-xlarge"
    # The status says what each pod asks and why.
    chosen = status["podResources"]
    assert chosen["gpus"] == 1 and "0.6B parameters" in chosen["basis"]
    assert chosen["cpu"] == str((isvc["spec"].get("resources") or {}).get("requests", {}).get("cpu", chosen["cpu"]))
    assert {"cpu", "memory", "ephemeralStorage"} <= set(chosen)


@pytest.mark.parametrize("shape, model, tp, pods", [
    ("4vcpu-16gi-1gpu", "meta-llama/Llama-3.1-8B-Instruct", 1, 1),
    ("8vcpu-32gi-1gpu", "meta-llama/Llama-3.1-8B-Instruct", 1, 1),
    ("48vcpu-192gi-4gpu", "Qwen/Qwen3-8B", 1, 4),  # four single-GPU replicas share the node
    ("48vcpu-192gi-4gpu", "meta-llama/Llama-3.1-70B-Instruct", 4, 1),
    ("96vcpu-1152gi-8gpu", "meta-llama/Llama-3.1-70B-Instruct", 8, 1),
    ("96vcpu-1152gi-8gpu", "Qwen/Qwen3-32B", 2, 4),
])  # fmt: skip
def test_a_model_whose_weights_fit_the_nodes_gpus_fits_the_node_by_default(fake, shape, model, tp, pods):
    status = serve(fake, "chat", {"model": model, "tp": tp, "replicas": pods}, {"node-0": shape})["status"]
    assert status["phase"] == constants.PHASE_READY, status["conditions"]
    assert status["readyReplicas"] == pods
    assert {pod["spec"]["nodeName"] for pod in fake.pods()} == {"node-0"}


def test_a_pod_that_does_not_fit_names_the_resource_the_node_lacks(fake):
    spec = {"model": "Qwen/Qwen3-0.6B", "resources": {"requests": {"memory": "64Gi"}}}
    status = serve(fake, "chat", spec, {"g5-xlarge": "4vcpu-16gi-1gpu"})["status"]
    degraded = next(c for c in status["conditions"] if c["type"] == constants.CONDITION_DEGRADED)
    assert "Insufficient memory" in degraded["message"]
    assert status["podResources"]["memory"] == "64Gi"


def test_the_defaults_follow_the_parameter_count_the_model_id_names():
    def chosen(model: str, **spec) -> sizing.Defaults:
        meta = {"name": "chat", "namespace": "llm"}
        return sizing.defaults(parse({"apiVersion": constants.API_VERSION, "kind": constants.KIND, "metadata": meta,
                                      "spec": {"model": model, **spec}}))  # fmt: skip

    small, large = chosen("Qwen/Qwen3-0.6B"), chosen("meta-llama/Llama-3.1-70B-Instruct", tp=8)
    assert Decimal(small.memory.removesuffix("Gi")) < Decimal(large.memory.removesuffix("Gi"))
    assert Decimal(small.cache_size_limit.removesuffix("Gi")) < 10 < 140 < Decimal(large.cache_size_limit.removesuffix("Gi"))
    assert sizing.model_parameters("mistralai/Mixtral-8x7B-v0.1") == 56
    assert sizing.model_parameters("Qwen/Qwen3-30B-A3B") == 30  # all parameters, not the active ones
    unknown = chosen("/models/private-model")
    assert unknown.cache_size_limit == constants.EMPTYDIR_CACHE_SIZE_LIMIT and "names no parameter count" in unknown.basis


def test_a_pod_waiting_for_a_node_autoscaler_is_progressing_not_degraded_until_the_wait_runs_out(fake):
    """A cluster autoscaler or Karpenter boots a GPU node in minutes: meanwhile the pod is
    Unschedulable, which is a scale-up, not a failure: no Degraded, no Warning, until it lasts."""
    from minisgl_operator import handlers as h

    fake.add_node("cpu-only", gpus=0)
    h.configure(fake, default_image="registry.example/minisgl:1", clock=lambda: "2026-01-01T00:05:00Z")
    try:
        reconciler = h._get_reconciler()
        reconciler.reconcile(fake.create_inferenceservice("chat", {"model": "Qwen/Qwen3-0.6B"}))
        fake.run_controllers()  # Unschedulable since 00:00
        reconciler.reconcile(fake.inferenceservice("chat"))
        status = fake.inferenceservice("chat")["status"]
        conditions = {c["type"]: c for c in status["conditions"]}
        assert conditions[constants.CONDITION_DEGRADED]["status"] == "False"
        assert conditions[constants.CONDITION_PROGRESSING]["reason"] == "WaitingForCapacity"
        assert f"Insufficient {constants.GPU_RESOURCE}" in conditions[constants.CONDITION_PROGRESSING]["message"]
        assert not [e for e in fake.events if e["type"] == "Warning"]
        # The node never came: after the wait it is a problem someone must see.
        h.configure(fake, default_image="registry.example/minisgl:1", clock=lambda: "2026-01-01T00:20:00Z")
        h._get_reconciler().reconcile(fake.inferenceservice("chat"))
        status = fake.inferenceservice("chat")["status"]
        degraded = next(c for c in status["conditions"] if c["type"] == constants.CONDITION_DEGRADED)
        assert (degraded["status"], degraded["reason"]) == ("True", "Unschedulable")
    finally:
        h._reconciler = None
