"""spec.router: prefix- and load-aware routing through the Gateway API Inference Extension. The
InferencePool, the endpoint picker (EPP) and the HTTPRoute, checked against the published CRDs
(crds/), against each other (names, ports, selectors, RBAC), and through the reconciler."""

from __future__ import annotations

import json
import logging

import operator_crds
import pytest

from minisgl_operator import cache, constants, handlers, kube, meta, render
from minisgl_operator.kube import ApiError
from minisgl_operator.spec import parse

EPP_IMAGE = "registry.example/epp:9"
GATEWAY = {"name": "inference-gateway", "namespace": "gateways", "sectionName": "https"}
SPEC = {"model": "Qwen/Qwen3-8B", "replicas": 3,
        "router": {"gateway": GATEWAY, "hostnames": ["llm.example.com"],
                   "canary": {"inferenceService": "chat-next", "weight": 10}}}  # fmt: skip


def isvc(spec: dict, name: str = "chat") -> dict:
    return {"apiVersion": constants.API_VERSION, "kind": constants.KIND, "metadata": {"name": name, "namespace": "llm", "uid": "u1"},
            "spec": spec}  # fmt: skip


def rendered(spec: dict = SPEC, name: str = "chat") -> dict[tuple[str, str], dict]:
    return {(o["kind"], o["metadata"]["name"]): o for o in render.render(isvc(spec, name), epp_image=EPP_IMAGE)}


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def test_the_router_adds_a_pool_a_picker_and_a_route_all_valid_for_their_published_crds():
    objs = rendered()
    assert set(objs) == {
        ("Deployment", "chat"), ("Service", "chat"), ("PodDisruptionBudget", "chat"),
        ("InferencePool", "chat"), ("HTTPRoute", "chat"), ("ConfigMap", "chat-epp"), ("ServiceAccount", "chat-epp"),
        ("Role", "chat-epp"), ("RoleBinding", "chat-epp"), ("Deployment", "chat-epp"), ("Service", "chat-epp"),
        ("PodDisruptionBudget", "chat-epp"),
    }  # fmt: skip
    for obj in objs.values():
        operator_crds.validate(obj)
    assert objs[("InferencePool", "chat")]["apiVersion"] == "inference.networking.k8s.io/v1"


def test_the_pool_selects_the_server_pods_on_their_port_and_never_the_pickers():
    objs = rendered()
    pool = objs[("InferencePool", "chat")]["spec"]
    server_pod = objs[("Deployment", "chat")]["spec"]["template"]
    picker_pod = objs[("Deployment", "chat-epp")]["spec"]["template"]
    assert matches(pool["selector"]["matchLabels"], server_pod["metadata"]["labels"])
    assert not matches(pool["selector"]["matchLabels"], picker_pod["metadata"]["labels"])
    (ctr,) = server_pod["spec"]["containers"]
    assert pool["targetPorts"] == [{"number": ctr["ports"][0]["containerPort"]}]
    # Nor does the server's Service select the picker, nor the picker's Service the servers.
    assert not matches(objs[("Service", "chat")]["spec"]["selector"], picker_pod["metadata"]["labels"])
    assert not matches(objs[("Service", "chat-epp")]["spec"]["selector"], server_pod["metadata"]["labels"])


def test_the_pool_names_the_pickers_service_and_its_ext_proc_port():
    objs = rendered()
    ref = objs[("InferencePool", "chat")]["spec"]["endpointPickerRef"]
    svc = objs[("Service", ref["name"])]["spec"]
    (grpc,) = [p for p in svc["ports"] if p["port"] == ref["port"]["number"]]
    # ext-proc is gRPC over TLS (the picker's default): HTTP/2, not h2c's cleartext, as upstream's chart says.
    assert grpc["appProtocol"] == "http2"
    picker = objs[("Deployment", "chat-epp")]["spec"]["template"]
    assert matches(svc["selector"], picker["metadata"]["labels"])
    (ctr,) = picker["spec"]["containers"]
    assert grpc["targetPort"] in {p["name"] for p in ctr["ports"]}
    assert ref["failureMode"] == "FailOpen"  # two pickers down: serve without smart routing, not refuse all


def test_the_picker_runs_the_chart_image_on_this_pool_with_the_mounted_config():
    objs = rendered()
    pod = objs[("Deployment", "chat-epp")]["spec"]["template"]["spec"]
    (ctr,) = pod["containers"]
    assert ctr["image"] == EPP_IMAGE
    args = ctr["args"]
    assert args[args.index("--pool-name") + 1] == "chat" and args[args.index("--pool-namespace") + 1] == "llm"
    assert args[args.index("--pool-group") + 1] == "inference.networking.k8s.io"
    config_path = args[args.index("--config-file") + 1]
    mount = next(m for m in ctr["volumeMounts"] if m["name"] == "config")
    volume = next(v for v in pod["volumes"] if v["name"] == "config")
    assert volume["configMap"]["name"] == "chat-epp" and config_path.startswith(mount["mountPath"] + "/")
    assert config_path.rsplit("/", 1)[1] in objs[("ConfigMap", "chat-epp")]["data"]


def test_the_pickers_account_may_read_its_pool_and_pods_and_the_operator_may_grant_that():
    objs = rendered()
    pod = objs[("Deployment", "chat-epp")]["spec"]["template"]["spec"]
    binding = objs[("RoleBinding", "chat-epp")]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": pod["serviceAccountName"], "namespace": "llm"}]
    role = objs[("Role", binding["roleRef"]["name"])]
    grants = {(g, r): set(rule["verbs"]) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
    assert {"get", "list", "watch"} <= grants[("inference.networking.k8s.io", "inferencepools")]
    assert {"get", "list", "watch"} <= grants[("", "pods")]
    # RBAC refuses a Role granting more than its creator holds (no escalate verb here).
    for key, verbs in grants.items():
        assert verbs <= set(kube.PERMISSIONS.get(key, ())), key


def test_the_operator_may_write_and_delete_every_kind_it_renders():
    resources = {kind: (group, plural) for kind, (group, _, plural) in cache.INDEXED_KINDS.items()}
    for kind, name in render.removable(parse(isvc(SPEC))):
        assert {"get", "create", "patch", "delete"} <= set(kube.PERMISSIONS[resources[kind]]), kind


def test_the_route_attaches_to_the_users_gateway_and_splits_by_weight_for_a_canary():
    route = rendered()[("HTTPRoute", "chat")]["spec"]
    assert route["parentRefs"] == [{"group": "gateway.networking.k8s.io", "kind": "Gateway", **GATEWAY}]
    assert route["hostnames"] == ["llm.example.com"]
    (rule,) = route["rules"]
    assert rule["backendRefs"] == [
        {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "chat", "weight": 90},
        {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "chat-next", "weight": 10},
    ]


def test_without_a_gateway_there_is_a_pool_and_picker_but_no_route():
    objs = rendered({"model": "m", "router": {}}, name="chat-next")
    assert ("InferencePool", "chat-next") in objs and ("Deployment", "chat-next-epp") in objs
    assert not any(kind == "HTTPRoute" for kind, _ in objs)


def test_the_picker_reads_minisgls_metric_names_from_its_engine_config():
    objs = rendered()
    config = json.loads(objs[("ConfigMap", "chat-epp")]["data"][constants.EPP_CONFIG_FILE])
    plugins = {p["type"]: p.get("parameters", {}) for p in config["plugins"]}
    extractor = plugins["core-metrics-extractor"]
    (engine,) = extractor["engineConfigs"]
    assert extractor["defaultEngine"] == engine["name"] == constants.EPP_ENGINE_NAME
    labels = objs[("Deployment", "chat")]["spec"]["template"]["metadata"]["labels"]
    assert labels[extractor["engineLabelKey"]] == engine["name"]  # the pods say which names to read
    assert engine["queuedRequestsSpec"] == "minisgl_num_requests_waiting"
    assert engine["kvUsageSpec"] == "minisgl_kv_cache_usage_ratio"
    assert engine["cacheInfoSpec"] == "minisgl_cache_config_info"
    assert plugins["metrics-data-source"]["path"] == "/metrics"
    # Every scorer of the default profile is a declared plugin, prefix reuse weighed most.
    (profile,) = config["schedulingProfiles"]
    weights = {p["pluginRef"]: p["weight"] for p in profile["plugins"]}
    assert set(weights) == {"queue-scorer", "kv-cache-utilization-scorer", "prefix-cache-scorer"} <= set(plugins)
    assert max(weights, key=weights.get) == "prefix-cache-scorer"
    assert "featureGates" not in config  # flow control only where it holds requests for scale-from-zero


def test_adapters_change_the_server_pods_only_since_every_pod_of_the_pool_serves_every_adapter():
    # An InferencePool serves every model name its pods answer to, so an adapter needs no object of
    # its own; and with all of spec.adapters resident in every pod (--max-loras holds them all), the
    # picker's LoRA affinity (a gauge of the adapters each pod holds, which minisgl does not export:
    # loraSpec stays empty) would have nothing to choose between.
    adapters = [{"name": "sql", "source": "org/sql-lora"}, {"name": "chat", "source": "/models/chat"}]
    plain, served = rendered(), rendered({**SPEC, "adapters": adapters})
    assert set(served) == set(plain)
    for key in served:
        if key != ("Deployment", "chat"):
            assert served[key] == plain[key], key
    config = json.loads(served[("ConfigMap", "chat-epp")]["data"][constants.EPP_CONFIG_FILE])
    (engine,) = next(p for p in config["plugins"] if p["type"] == "core-metrics-extractor")["parameters"]["engineConfigs"]
    assert engine["loraSpec"] == ""
    pool = served[("InferencePool", "chat")]["spec"]["selector"]["matchLabels"]
    template = served[("Deployment", "chat")]["spec"]["template"]
    assert matches(pool, template["metadata"]["labels"])
    args = template["spec"]["containers"][0]["args"]
    assert args[args.index("--lora-modules") + 1:][:2] == ["sql=/models/lora/org/sql-lora", "chat=/models/chat"]
    assert args[args.index("--max-loras") + 1] == "2"


def test_the_chart_passes_the_endpoint_picker_image_to_the_operator(monkeypatch):
    from operator_chart_tools import helm_template

    objs = helm_template({"endpointPicker": {"image": {"repository": "r/epp", "tag": "v1"}}})
    (dep,) = [o for o in objs if o["kind"] == "Deployment"]
    env = {e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env[constants.EPP_IMAGE_ENV] == "r/epp:v1"
    monkeypatch.setenv(constants.EPP_IMAGE_ENV, "r/epp:v1")
    from minisgl_operator import config

    assert config.endpoint_picker_image() == "r/epp:v1"


# --- through the reconciler, against the fake API server ---------------------------------------

LOG = logging.getLogger("test-router")


def test_the_reconciler_applies_the_router_and_removes_it_when_the_spec_drops_it(fake, reconciler):
    body = fake.create_inferenceservice("chat", SPEC)
    outcome = reconciler.reconcile(body)
    assert outcome.problem is None, outcome.problem
    assert {k for k in fake.children()} >= {("InferencePool", "chat"), ("HTTPRoute", "chat"), ("Deployment", "chat-epp")}
    body = fake.update_spec("chat", lambda spec: spec.pop("router"))
    outcome = reconciler.reconcile(body)
    assert set(fake.children()) == {("Deployment", "chat"), ("Service", "chat"), ("PodDisruptionBudget", "chat")}
    assert {"InferencePool/chat", "Deployment/chat-epp", "PodDisruptionBudget/chat-epp"} <= set(outcome.deleted)


def test_the_fake_api_server_refuses_a_pool_its_crd_refuses(fake):
    pool = rendered()[("InferencePool", "chat")]
    del pool["spec"]["targetPorts"]
    with pytest.raises(ApiError, match="'targetPorts' is a required property"):
        fake.apply(pool)
    pool = rendered()[("InferencePool", "chat")]
    pool["spec"]["endpointPickerRef"]["failureMode"] = "FailSometimes"
    with pytest.raises(ApiError, match="is not one of"):
        fake.apply(pool)


def test_the_fake_api_server_runs_the_crds_cel_rules_too(fake):
    # InferencePool's own rules: an endpoint picker Service needs a port; each target port once.
    pool = rendered()[("InferencePool", "chat")]
    del pool["spec"]["endpointPickerRef"]["port"]
    with pytest.raises(ApiError, match="port is required when kind is 'Service'"):
        fake.apply(pool)
    pool = rendered()[("InferencePool", "chat")]
    del pool["spec"]["endpointPickerRef"]["kind"]  # defaulted to Service first, as the API server does
    del pool["spec"]["endpointPickerRef"]["port"]
    assert operator_crds.custom_errors(pool) != []
    pool = rendered()[("InferencePool", "chat")]
    pool["spec"]["targetPorts"] *= 2
    assert operator_crds.custom_errors(pool) == ["InferencePool.spec.targetPorts: port number must be unique"]


# --- a picker that survives a node, a route that waits, a config that reaches the picker -----------


def test_two_pickers_serve_side_by_side_roll_one_at_a_time_and_a_pdb_keeps_one():
    objs = rendered()
    dep = objs[("Deployment", "chat-epp")]["spec"]
    assert dep["replicas"] == 2
    assert dep["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    # Both serve: with leader election only the leader is Ready and a PDB would block every drain of its node.
    (ctr,) = dep["template"]["spec"]["containers"]
    assert "--ha-enable-leader-election=false" in ctr["args"]
    pdb = objs[("PodDisruptionBudget", "chat-epp")]["spec"]
    assert pdb["maxUnavailable"] == 1 and pdb["selector"]["matchLabels"] == dep["selector"]["matchLabels"]
    # The server's PDB and the picker's select disjoint pods.
    server_pdb = objs[("PodDisruptionBudget", "chat")]["spec"]["selector"]["matchLabels"]
    assert not matches(server_pdb, dep["template"]["metadata"]["labels"])
    assert not matches(pdb["selector"]["matchLabels"], objs[("Deployment", "chat")]["spec"]["template"]["metadata"]["labels"])
    spread = dep["template"]["spec"]["topologySpreadConstraints"]
    assert spread[0]["topologyKey"] == "kubernetes.io/hostname"
    assert spread[0]["labelSelector"]["matchLabels"] == dep["selector"]["matchLabels"]


def test_the_failure_mode_is_the_users_choice():
    for mode in ("FailOpen", "FailClose"):
        spec = {"model": "m", "router": {"failureMode": mode}}
        assert rendered(spec)[("InferencePool", "chat")]["spec"]["endpointPickerRef"]["failureMode"] == mode


def test_the_pickers_pods_carry_their_configs_hash_so_a_config_change_restarts_them():
    # llm-d reads its config at start only: switching minReplicas between 0 and 1 turns flow control
    # on or off in the ConfigMap, and the pickers must restart to see it.
    keda = {"prometheusAddress": "http://prom:9090", "target": "4"}
    always_up = {"model": "m", "router": {}, "autoscaling": {"minReplicas": 1, "maxReplicas": 3, "keda": keda}}
    to_zero = {"model": "m", "router": {}, "autoscaling": {"minReplicas": 0, "maxReplicas": 3, "keda": keda}}
    a, b = rendered(always_up), rendered(to_zero)
    assert a[("ConfigMap", "chat-epp")]["data"] != b[("ConfigMap", "chat-epp")]["data"]
    template_a = a[("Deployment", "chat-epp")]["spec"]["template"]
    template_b = b[("Deployment", "chat-epp")]["spec"]["template"]
    assert template_a != template_b
    assert template_a["metadata"]["annotations"][constants.ANNOTATION_CONFIG_HASH] == meta.config_hash(a[("ConfigMap", "chat-epp")]["data"])


def _seconds(duration: str) -> int:
    import re

    units = {"h": 3600, "m": 60, "s": 1}
    return sum(int(n) * units[u] for n, u in re.findall(r"([0-9]+)(h|m|s)", duration))


def test_the_route_lets_a_response_stream_and_a_held_request_wait_for_a_pod():
    # An Envoy-based gateway's default (15 s) cuts streams and the requests held while a pod starts.
    route = rendered()[("HTTPRoute", "chat")]
    (rule,) = route["spec"]["rules"]
    assert _seconds(rule["timeouts"]["backendRequest"]) == constants.DEFAULT_ROUTE_TIMEOUT_SECONDS
    assert _seconds(rule["timeouts"]["request"]) == constants.DEFAULT_ROUTE_TIMEOUT_SECONDS  # nothing held: all pods up
    keda = {"prometheusAddress": "http://prom:9090", "target": "4"}
    to_zero = {"model": "m", "startupTimeoutSeconds": 1200, "router": {"gateway": GATEWAY, "requestTimeoutSeconds": 600},
               "autoscaling": {"minReplicas": 0, "maxReplicas": 3, "keda": keda}}  # fmt: skip
    objs = rendered(to_zero)
    (rule,) = objs[("HTTPRoute", "chat")]["spec"]["rules"]
    config = json.loads(objs[("ConfigMap", "chat-epp")]["data"][constants.EPP_CONFIG_FILE])
    held = _seconds(config["flowControl"]["defaultRequestTTL"])
    assert held > 600  # a pod that starts in the time the spec allows gets the held requests
    assert _seconds(rule["timeouts"]["backendRequest"]) == 600
    assert _seconds(rule["timeouts"]["request"]) == 600 + held
    operator_crds.validate(objs[("HTTPRoute", "chat")])


def test_a_held_request_is_answered_by_the_picker_before_the_gateways_ext_proc_timeout_cuts_it():
    """Flow control holds a request inside one ext-proc message; a gateway waits 1000 s for it
    (the Gateway API Inference Extension's Envoy Gateway setup, messageTimeout 1000s). The default
    startupTimeoutSeconds (1800) would hold past that: the hold stops short, so the picker answers."""
    keda = {"prometheusAddress": "http://prom:9090", "target": "4"}
    spec = {"model": "m", "router": {"gateway": GATEWAY}, "autoscaling": {"minReplicas": 0, "maxReplicas": 3, "keda": keda}}
    assert constants.DEFAULT_STARTUP_TIMEOUT_SECONDS + 60 > 1000
    config = json.loads(rendered(spec)[("ConfigMap", "chat-epp")]["data"][constants.EPP_CONFIG_FILE])
    assert _seconds(config["flowControl"]["defaultRequestTTL"]) < 1000


def test_a_route_the_gateway_did_not_accept_is_degraded_with_the_gateways_words(fake):
    """The Gateway reports per parent whether it accepted the route and resolved its backends
    (status.parents[].conditions, as gateway-api defines them): a refusal reaches the status."""
    handlers.configure(fake, default_image="registry.example/minisgl:1")
    try:
        fake.create_inferenceservice("chat", {"model": "m", "router": {"gateway": {"name": "gw"}}})
        reconciler = handlers._get_reconciler()
        reconciler.reconcile(fake.inferenceservice("chat"))
        # The gateway controller writes the route's status (the operator never does).
        refusal = {"type": "Accepted", "status": "False", "reason": "NotAllowedByListeners",
                   "message": "No listener allows routes from namespace llm"}  # fmt: skip
        fake.objects[("HTTPRoute", "llm", "chat")]["status"] = {"parents": [
            {"parentRef": {"name": "gw"}, "controllerName": "gateway.envoyproxy.io/gatewayclass-controller",
             "conditions": [refusal, {"type": "ResolvedRefs", "status": "True", "reason": "ResolvedRefs"}]}]}  # fmt: skip
        reconciler.reconcile(fake.inferenceservice("chat"))
        degraded = next(c for c in fake.inferenceservice("chat")["status"]["conditions"] if c["type"] == constants.CONDITION_DEGRADED)
        assert degraded["reason"] == "GatewayRefused"
        assert "NotAllowedByListeners" in degraded["message"] and "gw" in degraded["message"]
    finally:
        handlers._reconciler = None


def test_the_docs_state_what_the_picker_arrangement_costs_where_the_render_has_it():
    """Two active pickers (no leader election) each keep their own prefix index, FailOpen routes at
    random without them, the picker speaks TLS the gateway must accept, and held requests outlast
    common ext-proc timeouts: the render has each of these, so the Kubernetes page must say it."""
    from pathlib import Path

    docs = (Path(__file__).resolve().parents[2] / "docs" / "kubernetes.md").read_text()
    objs = {(o["kind"], o["metadata"]["name"]): o for o in render.render(isvc({"model": "m", "router": {}}))}
    picker = objs[("Deployment", "chat-epp")]
    assert picker["spec"]["replicas"] == constants.EPP_REPLICAS > 1
    assert "--ha-enable-leader-election=false" in picker["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "own prefix index" in docs and "active-passive" in docs
    assert constants.DEFAULT_FAILURE_MODE == "FailOpen" and "at random" in docs
    assert "DestinationRule" in docs and "HealthCheckPolicy" in docs
    assert "startupTimeoutSeconds` + 60 s" in docs and "ext-proc" in docs and "940 s" in docs
