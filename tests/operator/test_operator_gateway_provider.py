"""spec.router.gatewayProvider: the objects of the gateway's own kinds that make it reach the endpoint
picker, as llm-d router's llm-d-router-gateway chart renders them per provider.name (Istio: a
DestinationRule; GKE: a HealthCheckPolicy and a GCPBackendPolicy). Checked against Istio's and GKE's
published CRDs (crds/), against the objects they point at, and through the reconciler on a fake API
server that has those CRDs, or lacks them."""

from __future__ import annotations

import copy

import operator_crds
import pytest

from minisgl_operator import constants, render
from minisgl_operator.kube import ApiError

GATEWAY_KINDS = {"DestinationRule", "HealthCheckPolicy", "GCPBackendPolicy"}
KEDA = {"prometheusAddress": "http://prom:9090", "target": "4"}


def spec(provider: str | None, **router) -> dict:
    router = {"gateway": {"name": "gw"}, **router}
    if provider is not None:
        router["gatewayProvider"] = provider
    return {"model": "Qwen/Qwen3-8B", "router": router}


def body(spec: dict) -> dict:
    return {"apiVersion": constants.API_VERSION, "kind": constants.KIND, "metadata": {"name": "chat", "namespace": "llm", "uid": "u1"},
            "spec": spec}  # fmt: skip


def rendered(spec: dict) -> dict[tuple[str, str], dict]:
    return {(o["kind"], o["metadata"]["name"]): o for o in render.render(body(spec))}


def gateway_objects(objs) -> set[tuple[str, str]]:
    return {key for key in objs if key[0] in GATEWAY_KINDS}


def _seconds(duration: str) -> int:
    import re

    units = {"h": 3600, "m": 60, "s": 1}
    return sum(int(n) * units[u] for n, u in re.findall(r"([0-9]+)(h|m|s)", duration))


# --- what each provider gets ------------------------------------------------------------------------


def test_istio_gets_a_destination_rule_that_speaks_tls_to_the_pickers_service_and_accepts_its_certificate():
    objs = rendered(spec("Istio"))
    assert gateway_objects(objs) == {("DestinationRule", "chat-epp")}
    rule = objs[("DestinationRule", "chat-epp")]
    picker = objs[("Service", "chat-epp")]
    assert rule["spec"]["host"] == f"{picker['metadata']['name']}.{picker['metadata']['namespace']}.svc.cluster.local"
    assert rule["spec"]["trafficPolicy"] == {"tls": {"mode": "SIMPLE", "insecureSkipVerify": True}}
    assert rule["metadata"]["ownerReferences"][0]["uid"] == "u1"  # goes with the InferenceService
    operator_crds.validate(rule)
    assert rule["apiVersion"] == "networking.istio.io/v1"


def test_gke_checks_the_pools_pods_where_they_say_ready_and_holds_a_request_as_long_as_the_route_allows():
    objs = rendered(spec("GKE"))
    assert gateway_objects(objs) == {("HealthCheckPolicy", "chat"), ("GCPBackendPolicy", "chat")}
    pool = objs[("InferencePool", "chat")]
    target = {"group": pool["apiVersion"].split("/")[0], "kind": "InferencePool", "name": pool["metadata"]["name"]}
    check = objs[("HealthCheckPolicy", "chat")]["spec"]
    assert check["targetRef"] == target
    http = check["default"]["config"]["httpHealthCheck"]
    assert http["port"] == pool["spec"]["targetPorts"][0]["number"]
    ready = objs[("Deployment", "chat")]["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]
    assert http["requestPath"] == ready["path"]  # /ready: the server's /health answers during the download too
    backend = objs[("GCPBackendPolicy", "chat")]["spec"]
    assert backend["targetRef"] == target
    assert backend["default"]["timeoutSec"] == constants.DEFAULT_ROUTE_TIMEOUT_SECONDS
    # GKE's gateway times the request by the policy: the route carries no timeouts (as upstream's chart).
    (rule,) = objs[("HTTPRoute", "chat")]["spec"]["rules"]
    assert "timeouts" not in rule
    for key in gateway_objects(objs) | {("HTTPRoute", "chat")}:
        operator_crds.validate(objs[key])


def test_on_gke_a_request_held_while_no_pod_runs_fits_in_the_backend_timeout_too():
    objs = rendered({**spec("GKE", requestTimeoutSeconds=600), "autoscaling": {"minReplicas": 0, "maxReplicas": 3, "keda": KEDA}})
    on_envoy = rendered({**spec(None, requestTimeoutSeconds=600), "autoscaling": {"minReplicas": 0, "maxReplicas": 3, "keda": KEDA}})
    (rule,) = on_envoy[("HTTPRoute", "chat")]["spec"]["rules"]
    assert objs[("GCPBackendPolicy", "chat")]["spec"]["default"]["timeoutSec"] == _seconds(rule["timeouts"]["request"]) > 600


def test_without_a_provider_no_gateway_kind_is_rendered_and_the_route_carries_its_timeouts():
    objs = rendered(spec(None))
    assert gateway_objects(objs) == set()
    (rule,) = objs[("HTTPRoute", "chat")]["spec"]["rules"]
    assert set(rule["timeouts"]) == {"request", "backendRequest"}
    assert gateway_objects(rendered({"model": "m"})) == set()


def test_a_canary_target_without_a_gateway_gets_its_providers_objects_too():
    # Its pool and picker serve the other InferenceService's route on the same gateway.
    objs = rendered({"model": "m", "router": {"gatewayProvider": "Istio"}})
    assert gateway_objects(objs) == {("DestinationRule", "chat-epp")}


def test_the_crd_refuses_a_provider_it_does_not_know(fake):
    with pytest.raises(ApiError, match="gatewayProvider"):
        fake.submit_inferenceservice("chat", spec("nginx"))
    fake.submit_inferenceservice("chat", spec("GKE"))


# --- the fake API server refuses what GKE's and Istio's CRDs refuse --------------------------------


def test_gkes_crd_refuses_a_health_check_port_without_its_port_specification(fake):
    """Upstream's chart sets httpHealthCheck.port and leaves portSpecification unset, which GKE's
    current CRD refuses (USE_SERVING_PORT, the default, takes no port): the rendered one fixes it."""
    check = rendered(spec("GKE"))[("HealthCheckPolicy", "chat")]
    upstream = copy.deepcopy(check)
    del upstream["spec"]["default"]["config"]["httpHealthCheck"]["portSpecification"]
    with pytest.raises(ApiError, match="Invalid"):
        fake.apply(upstream)
    too_slow = copy.deepcopy(check)
    too_slow["spec"]["default"]["timeoutSec"] = check["spec"]["default"]["checkIntervalSec"] + 1
    with pytest.raises(ApiError, match="timeOutSec cannot exceed checkIntervalSec"):
        fake.apply(too_slow)
    fake.apply(check)


def test_istios_crd_refuses_a_tls_mode_or_field_it_does_not_have(fake):
    rule = rendered(spec("Istio"))[("DestinationRule", "chat-epp")]
    bad = copy.deepcopy(rule)
    bad["spec"]["trafficPolicy"]["tls"]["mode"] = "TLS"
    with pytest.raises(ApiError, match="is not one of"):
        fake.apply(bad)
    bad = copy.deepcopy(rule)
    bad["spec"]["trafficPolicy"]["tls"]["skipVerify"] = True
    with pytest.raises(ApiError, match="skipVerify"):
        fake.apply(bad)
    fake.apply(rule)


# --- through the reconciler ------------------------------------------------------------------------


def test_the_providers_objects_follow_the_spec_and_go_when_it_changes_or_drops_the_provider(fake, reconciler):
    def reconcile():
        outcome = reconciler.reconcile(fake.inferenceservice("chat"))
        assert outcome.problem is None, outcome.problem
        return gateway_objects(fake.children())

    fake.create_inferenceservice("chat", spec("Istio"))
    assert reconcile() == {("DestinationRule", "chat-epp")}
    fake.update_spec("chat", lambda s: s["router"].update(gatewayProvider="GKE"))
    assert reconcile() == {("HealthCheckPolicy", "chat"), ("GCPBackendPolicy", "chat")}
    fake.update_spec("chat", lambda s: s["router"].pop("gatewayProvider"))
    assert reconcile() == set()
    fake.update_spec("chat", lambda s: s["router"].update(gatewayProvider="Istio"))
    assert reconcile() == {("DestinationRule", "chat-epp")}
    fake.update_spec("chat", lambda s: s.pop("router"))
    assert reconcile() == set()


def test_a_foreign_destination_rule_of_the_same_name_is_left_alone(fake, reconciler):
    fake.add_foreign({"apiVersion": "networking.istio.io/v1", "kind": "DestinationRule",
                      "metadata": {"name": "chat-epp", "namespace": "llm"}, "spec": {"host": "elsewhere"}})  # fmt: skip
    fake.create_inferenceservice("chat", spec("Istio"))
    outcome = reconciler.reconcile(fake.inferenceservice("chat"))
    assert outcome.problem is not None and outcome.problem.reason == "NameConflict"
    assert fake.objects[("DestinationRule", "llm", "chat-epp")]["spec"] == {"host": "elsewhere"}


def test_a_cluster_without_the_gateways_crds_serves_on_and_says_which_crd_is_missing(fake, reconciler):
    """Neither Istio's nor GKE's CRDs are installed. Without a provider nothing reads or writes them
    to any effect; with one, its objects are refused (404) and the status says so, while everything
    else (the server, the pool, the picker, the route) is applied all the same."""
    fake.uninstalled |= GATEWAY_KINDS
    fake.create_inferenceservice("chat", spec(None))
    outcome = reconciler.reconcile(fake.inferenceservice("chat"))
    assert outcome.problem is None, outcome.problem
    fake.update_spec("chat", lambda s: s["router"].update(gatewayProvider="Istio"))
    outcome = reconciler.reconcile(fake.inferenceservice("chat"))
    assert outcome.problem is not None and outcome.problem.reason == "ApplyRejected"
    assert "DestinationRule" in outcome.problem.message and "networking.istio.io/v1" in outcome.problem.message
    assert "CRD" in outcome.problem.message
    assert {("Deployment", "chat"), ("InferencePool", "chat"), ("HTTPRoute", "chat"), ("Deployment", "chat-epp")} <= set(fake.children())
    # The spec's other changes still reach the cluster.
    fake.update_spec("chat", lambda s: s.update(replicas=2))
    reconciler.reconcile(fake.inferenceservice("chat"))
    assert fake.objects[("Deployment", "llm", "chat")]["spec"]["replicas"] == 2
    # Dropping the provider clears the problem.
    fake.update_spec("chat", lambda s: s["router"].pop("gatewayProvider"))
    assert reconciler.reconcile(fake.inferenceservice("chat")).problem is None
