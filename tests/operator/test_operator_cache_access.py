"""A model cache the server's user can write, whatever the storage: the kubelet applies fsGroup to
ReadWriteOnce volumes only (kube_volumes.py), so a shared (ReadWriteMany) cache is made the server
user's by an init container, and a pre-filled ReadOnlyMany claim is read without writing into it."""

from __future__ import annotations

import pytest

from minisgl_operator import constants, handlers

RWX_CLAIM = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "models", "namespace": "llm"},
             "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "500Gi"}}}}  # fmt: skip


pytestmark = pytest.mark.usefixtures("operator_on_a_gpu_node")


def settle(fake, name: str = "chat", rounds: int = 3) -> dict:
    """Reconcile and run the controllers (Job, Deployment, scheduler, kubelet) until the status settles."""
    for _ in range(rounds):
        handlers._get_reconciler().reconcile(fake.inferenceservice(name))
        fake.run_controllers()
    handlers._get_reconciler().reconcile(fake.inferenceservice(name))
    return fake.inferenceservice(name)


def claim(modes: list[str]) -> dict:
    return {**RWX_CLAIM, "spec": {**RWX_CLAIM["spec"], "accessModes": modes}}


def test_a_created_read_write_many_cache_is_filled_by_the_loader_and_served(fake):
    spec = {"model": "Qwen/Qwen3-8B", "replicas": 2, "modelCache": {"size": "100Gi", "accessModes": ["ReadWriteMany"]}}
    fake.create_inferenceservice("chat", spec)
    isvc = settle(fake)
    job = fake.objects[("Job", "llm", f"chat{constants.LOADER_SUFFIX}")]
    assert job["status"].get("succeeded") == 1, job["status"]
    assert isvc["status"]["phase"] == constants.PHASE_READY, isvc["status"]["conditions"]
    assert fake.volume_owner[("llm", "chat-model-cache")] == (constants.RUN_AS_USER, constants.RUN_AS_USER)


def test_an_existing_read_write_many_claim_owned_by_root_is_given_to_the_server_user(fake):
    fake.add_foreign(RWX_CLAIM)
    fake.create_inferenceservice("chat", {"model": "Qwen/Qwen3-8B", "replicas": 2, "modelCache": {"claimName": "models"}})
    isvc = settle(fake)
    assert isvc["status"]["phase"] == constants.PHASE_READY, isvc["status"]["conditions"]
    init = fake.objects[("Deployment", "llm", "chat")]["spec"]["template"]["spec"]["initContainers"][0]
    assert init["name"] == constants.CACHE_OWNER_CONTAINER
    assert init["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN"]}


def test_without_the_owner_step_the_storage_must_give_the_volume_to_the_server_user(fake):
    """setOwner: false (Pod Security 'restricted' forbids a root init container) works where the storage
    gives UID 10001 the volume (an EFS access point), and fails with the kernel's own words elsewhere."""
    fake.add_foreign(RWX_CLAIM)
    fake.create_inferenceservice("chat", {"model": "Qwen/Qwen3-8B", "modelCache": {"claimName": "models", "setOwner": False}})
    isvc = settle(fake)
    assert "initContainers" not in fake.objects[("Deployment", "llm", "chat")]["spec"]["template"]["spec"]
    degraded = next(c for c in isvc["status"]["conditions"] if c["type"] == constants.CONDITION_DEGRADED)
    assert degraded["status"] == "True" and degraded["reason"] == "CrashLoopBackOff"
    fake.volume_owner[("llm", "models")] = (constants.RUN_AS_USER, constants.RUN_AS_USER)
    for pod in fake.pods("chat"):
        fake._remove_pod(pod)  # the kubelet's next restart finds the volume writable
    assert settle(fake)["status"]["phase"] == constants.PHASE_READY


def test_a_read_write_once_cache_needs_no_owner_step_since_fsgroup_covers_it(fake):
    fake.create_inferenceservice("chat", {"model": "Qwen/Qwen3-8B", "modelCache": {"size": "100Gi"}})
    isvc = settle(fake)
    assert isvc["status"]["phase"] == constants.PHASE_READY, isvc["status"]["conditions"]
    assert "initContainers" not in fake.objects[("Deployment", "llm", "chat")]["spec"]["template"]["spec"]


def test_a_pre_filled_read_only_many_claim_is_served_read_only(fake):
    fake.add_foreign(claim(["ReadOnlyMany"]))
    fake.create_inferenceservice("chat", {"model": "Qwen/Qwen3-8B", "replicas": 2, "modelCache": {"claimName": "models"}})
    isvc = settle(fake)
    degraded = next(c for c in isvc["status"]["conditions"] if c["type"] == constants.CONDITION_DEGRADED)
    assert degraded["reason"] == "CacheReadOnly" and "readOnly: true" in degraded["message"]
    fake.update_spec("chat", lambda spec: spec["modelCache"].update(readOnly=True))
    isvc = settle(fake)
    assert isvc["status"]["phase"] == constants.PHASE_READY, isvc["status"]["conditions"]
    pod_spec = fake.objects[("Deployment", "llm", "chat")]["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in pod_spec["containers"][0]["env"]}
    assert env["TRITON_CACHE_DIR"].startswith(constants.TMP_MOUNT) and env["HF_HUB_OFFLINE"] == "1"
    assert "initContainers" not in pod_spec
