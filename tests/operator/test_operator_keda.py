"""spec.autoscaling.keda: a KEDA ScaledObject (valid for the published CRD) on the chosen
Prometheus query instead of the HPA, with the model's load time in its windows, and scale to zero
only where the router's endpoint picker holds the requests meanwhile."""

from __future__ import annotations

import json

import operator_crds
import pytest

from minisgl_operator import constants, render
from minisgl_operator.spec import SpecError, parse

PROMETHEUS = "http://prometheus-operated.monitoring:9090"


def spec(metric: str = "waitingRequests", target: str = "4", min_replicas: int = 1, **extra) -> dict:
    keda = {"prometheusAddress": PROMETHEUS, "metric": metric, "target": target}
    return {"model": "m", "startupTimeoutSeconds": 1200,
            "autoscaling": {"minReplicas": min_replicas, "maxReplicas": 5, "keda": keda}, **extra}  # fmt: skip


def isvc(spec_: dict) -> dict:
    return {"apiVersion": constants.API_VERSION, "kind": constants.KIND, "metadata": {"name": "chat", "namespace": "llm", "uid": "u1"},
            "spec": spec_}  # fmt: skip


def by_kind(spec_: dict) -> dict[str, dict]:
    return {o["kind"]: o for o in render.render(isvc(spec_)) if not o["metadata"]["name"].endswith(constants.EPP_SUFFIX)}


@pytest.mark.parametrize("metric, series, metric_type", [
    ("waitingRequests", "sum(minisgl_num_requests_waiting{", "AverageValue"),  # per replica
    ("kvCacheUtilization", "avg(minisgl_kv_cache_usage_ratio{", "Value"),
    ("ttftP90", "histogram_quantile(0.9, sum by (le) (rate(minisgl_time_to_first_token_seconds_bucket{", "Value"),
])  # fmt: skip
def test_keda_replaces_the_hpa_with_a_scaled_object_on_the_chosen_query(metric, series, metric_type):
    objs = by_kind(spec(metric, target="0.8"))
    assert "HorizontalPodAutoscaler" not in objs
    scaled = objs["ScaledObject"]
    operator_crds.validate(scaled)
    assert scaled["spec"]["scaleTargetRef"] == {"apiVersion": constants.API_VERSION, "kind": constants.KIND, "name": "chat"}
    assert (scaled["spec"]["minReplicaCount"], scaled["spec"]["maxReplicaCount"]) == (1, 5)
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "prometheus" and trigger["metricType"] == metric_type
    query = trigger["metadata"]["query"]
    assert query.startswith(series)
    # Only this InferenceService's series: the PodMonitor's label and the namespace.
    assert f'{constants.PROMETHEUS_ISVC_LABEL}="chat"' in query and 'namespace="llm"' in query
    assert trigger["metadata"]["serverAddress"] == PROMETHEUS and trigger["metadata"]["threshold"] == "0.8"


def test_the_windows_account_for_the_models_load_time():
    scaled = by_kind(spec())["ScaledObject"]["spec"]
    behavior = scaled["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    # Never give a pod back sooner than one takes to load; no scale decision before the first could load.
    assert behavior["scaleDown"]["stabilizationWindowSeconds"] >= 1200
    assert scaled["initialCooldownPeriod"] >= 1200 and scaled["cooldownPeriod"] >= 1200
    assert behavior["scaleDown"]["policies"] == [{"type": "Pods", "value": 1, "periodSeconds": constants.SCALE_DOWN_PERIOD_SECONDS}]
    # A rise must last a while to count, and then at most doubles per period while new pods load.
    assert behavior["scaleUp"]["stabilizationWindowSeconds"] > 0


def test_scale_to_zero_without_the_router_is_refused_naming_what_holds_requests():
    with pytest.raises(SpecError, match="minReplicas: 0 needs autoscaling.keda and router"):
        parse(isvc(spec(min_replicas=0)))
    hpa_to_zero = {"model": "m", "autoscaling": {"minReplicas": 0, "maxReplicas": 2}, "router": {}}
    with pytest.raises(SpecError, match="only KEDA scales up from zero"):
        parse(isvc(hpa_to_zero))


def test_scale_to_zero_behind_the_router_activates_on_the_requests_the_picker_holds():
    objs = {(o["kind"], o["metadata"]["name"]): o for o in render.render(isvc(spec(min_replicas=0, router={})))}
    scaled = objs[("ScaledObject", "chat")]
    operator_crds.validate(scaled)
    assert scaled["spec"]["minReplicaCount"] == 0
    _, held = scaled["spec"]["triggers"]
    assert constants.EPP_QUEUE_METRIC in held["metadata"]["query"] and f'{constants.EPP_POOL_LABEL}="chat"' in held["metadata"]["query"]
    assert held["metadata"]["activationThreshold"] == "0"  # one held request wakes the first pod
    # ... and the picker holds them: flow control on, for minutes while a pod starts, and less
    # than the 1000 s a gateway waits for the picker's answer (test_operator_router.py).
    config = json.loads(objs[("ConfigMap", "chat-epp")]["data"][constants.EPP_CONFIG_FILE])
    assert config["featureGates"] == ["flowControl"]
    assert 600 < int(config["flowControl"]["defaultRequestTTL"].removesuffix("s")) < 1000


def test_the_fake_api_server_refuses_a_scaled_object_its_crd_refuses(fake):
    from minisgl_operator.kube import ApiError

    scaled = by_kind(spec())["ScaledObject"]
    scaled["spec"]["minReplicaCount"] = -1
    with pytest.raises(ApiError, match="minReplicaCount"):
        fake.apply(scaled)
