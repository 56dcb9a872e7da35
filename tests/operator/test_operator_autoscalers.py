"""Moving between autoscalers with the other controllers in the loop: the HPA controller
(kube_hpa.py), KEDA's operator and its admission webhook (kube_webhooks.py) as the fake API plays them."""

from __future__ import annotations

import logging

import pytest

from minisgl_operator import constants, handlers

LOG = logging.getLogger("test-operator")
KEDA = {"prometheusAddress": "http://prometheus.monitoring:9090", "target": "4"}
SCALE_TO_ZERO = {"model": "Qwen/Qwen3-0.6B", "router": {},
                 "autoscaling": {"minReplicas": 0, "maxReplicas": 4, "keda": KEDA}}  # fmt: skip


pytestmark = pytest.mark.usefixtures("operator_on_a_gpu_node")


def reconcile(fake, name: str = "chat") -> dict:
    handlers._get_reconciler().reconcile(fake.inferenceservice(name))
    return fake.inferenceservice(name)


def scaled_to_zero_by_keda(fake) -> None:
    """An InferenceService that KEDA scaled to zero overnight (the KEDA operator writes the scale subresource)."""
    fake.create_inferenceservice("chat", SCALE_TO_ZERO)
    reconcile(fake)
    fake.run_controllers()
    fake.objects[(constants.KIND, "llm", "chat")]["spec"]["replicas"] = 0
    reconcile(fake)
    fake.run_controllers()
    assert fake.pods("chat") == []


@pytest.mark.parametrize("autoscaling, serving", [
    ({"minReplicas": 2, "maxReplicas": 4}, 2),  # the HPA: it never scales a target at zero replicas
    (None, 1),  # no autoscaler at all: nothing else would ever raise them
])  # fmt: skip
def test_leaving_keda_at_zero_replicas_serves_again(fake, autoscaling, serving):
    scaled_to_zero_by_keda(fake)

    def leave_keda(spec: dict) -> None:
        spec.pop("autoscaling")
        if autoscaling is not None:
            spec["autoscaling"] = autoscaling

    fake.update_spec("chat", leave_keda)
    reconcile(fake)
    fake.run_hpa()
    fake.run_controllers()
    isvc = reconcile(fake)
    assert isvc["spec"]["replicas"] == serving
    assert len(fake.pods("chat")) == serving
    assert isvc["status"]["phase"] == constants.PHASE_READY
    if autoscaling is not None:
        hpa = fake.objects[("HorizontalPodAutoscaler", "llm", "chat")]
        active = next(c for c in hpa["status"]["conditions"] if c["type"] == "ScalingActive")
        assert active["status"] == "True", active


def test_the_hpa_controller_disables_itself_for_a_target_at_zero(fake):
    """The fake's HPA controller as Kubernetes': a target someone scaled to zero stays there."""
    fake.create_inferenceservice("chat", {"model": "m", "autoscaling": {"minReplicas": 1, "maxReplicas": 3}})
    reconcile(fake)
    fake.objects[(constants.KIND, "llm", "chat")]["spec"]["replicas"] = 0
    fake.run_hpa(wanted_by_metrics={"chat": 3})
    hpa = fake.objects[("HorizontalPodAutoscaler", "llm", "chat")]
    assert fake.inferenceservice("chat")["spec"]["replicas"] == 0
    assert {"type": "ScalingActive", "status": "False", "reason": "ScalingDisabled"}.items() <= hpa["status"]["conditions"][1].items()
    fake.objects[(constants.KIND, "llm", "chat")]["spec"]["replicas"] = 1
    fake.run_hpa(wanted_by_metrics={"chat": 3})
    assert fake.inferenceservice("chat")["spec"]["replicas"] == 3


def test_keda_refusing_the_scaled_object_for_the_hpa_just_deleted_is_retried_soon_not_degraded(fake):
    """KEDA's webhook lists HPAs from its informer cache: for a moment after the operator deletes the
    HPA it still sees it and answers 403. That is a retry in seconds, not a Degraded InferenceService
    left without an autoscaler until the next resync."""
    import kopf

    fake.create_inferenceservice("chat", {"model": "Qwen/Qwen3-0.6B", "autoscaling": {"minReplicas": 1, "maxReplicas": 4}})
    reconcile(fake)
    fake.keda_cache_delay = 1
    body = fake.update_spec("chat", lambda spec: spec["autoscaling"].update(keda=KEDA))
    with pytest.raises(kopf.TemporaryError) as info:
        handlers.on_update(body=body, logger=LOG)
    assert info.value.delay is not None and info.value.delay <= 5
    degraded = next(c for c in fake.inferenceservice("chat").get("status", {}).get("conditions", [])
                    if c["type"] == constants.CONDITION_DEGRADED)  # fmt: skip
    assert degraded["status"] == "False"
    handlers.on_update(body=fake.inferenceservice("chat"), logger=LOG)  # kopf's retry: the cache caught up
    assert ("ScaledObject", "chat") in fake.children() and ("HorizontalPodAutoscaler", "chat") not in fake.children()
