"""A pod that crashes says why in the InferenceService's status: the server writes no termination
message file, so its containers use FallbackToLogsOnError and the kubelet (as the fake plays it)
keeps the tail of the log, which the Degraded condition quotes."""

from __future__ import annotations

import pytest

from minisgl_operator import constants, handlers

HUB_404 = """Traceback (most recent call last):
  File "/usr/local/lib/python3.11/site-packages/huggingface_hub/utils/_http.py", line 409, in hf_raise_for_status
huggingface_hub.errors.RepositoryNotFoundError: 404 Client Error. Repository Not Found for url: https://huggingface.co/api/models/Qwen/Qwen3-0.6b/revision/main."""


pytestmark = pytest.mark.usefixtures("operator_on_a_gpu_node")


def test_a_wrong_model_id_shows_the_hubs_404_not_only_crashloopbackoff(fake):
    fake.image_faults["registry.example/minisgl:1"] = "CrashLoopBackOff"
    fake.crash_logs["registry.example/minisgl:1"] = HUB_404
    fake.create_inferenceservice("chat", {"model": "Qwen/Qwen3-0.6b"})
    handlers._get_reconciler().reconcile(fake.inferenceservice("chat"))
    fake.run_controllers()
    handlers._get_reconciler().reconcile(fake.inferenceservice("chat"))
    status = fake.inferenceservice("chat")["status"]
    degraded = next(c for c in status["conditions"] if c["type"] == constants.CONDITION_DEGRADED)
    assert degraded["reason"] == "CrashLoopBackOff"
    assert "RepositoryNotFoundError: 404" in degraded["message"] and "Qwen/Qwen3-0.6b" in degraded["message"]
    # The Warning Event carries it too.
    assert any("RepositoryNotFoundError" in e["message"] for e in fake.events if e["type"] == "Warning")


def test_every_container_the_operator_runs_keeps_its_logs_tail_as_its_message(fake):
    spec = {"model": "Qwen/Qwen3-8B", "modelCache": {"size": "100Gi", "accessModes": ["ReadWriteMany"]},
            "adapters": [{"name": "sql", "source": "org/sql-lora"}]}  # fmt: skip
    fake.create_inferenceservice("chat", spec)
    handlers._get_reconciler().reconcile(fake.inferenceservice("chat"))
    job = fake.objects[("Job", "llm", f"chat{constants.LOADER_SUFFIX}")]["spec"]["template"]["spec"]
    fake.run_jobs()
    handlers._get_reconciler().reconcile(fake.inferenceservice("chat"))
    pod = fake.objects[("Deployment", "llm", "chat")]["spec"]["template"]["spec"]
    containers = [*job.get("initContainers", []), *job["containers"], *pod.get("initContainers", []), *pod["containers"]]
    assert len(containers) >= 4
    assert {c["terminationMessagePolicy"] for c in containers} == {"FallbackToLogsOnError"}
