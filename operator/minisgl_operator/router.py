"""Pure functions: the objects of spec.router, prefix- and load-aware routing through the Gateway
API Inference Extension. Nothing here routes a request: a gateway with inference-extension support
sends each request to the pod that the endpoint picker (EPP, llm-d's router) chooses.

- ``InferencePool`` (inference.networking.k8s.io/v1): the serving pods and their EPP;
- the EPP: ConfigMap (its EndpointPickerConfig), ServiceAccount, Role and RoleBinding (it watches
  the pool and its pods), Deployment of two replicas (image: the chart's endpointPicker.image), its
  PodDisruptionBudget, and Service (ext-proc gRPC, which the gateway calls);
- ``HTTPRoute`` (gateway.networking.k8s.io/v1) on the user's Gateway, when spec.router.gateway is
  set: its backends are this pool and, for a canary, another InferenceService's pool, weighted.
- with spec.router.gatewayProvider, what that gateway needs of its own kinds (as llm-d router's
  llm-d-router-gateway chart renders them): Istio's ``DestinationRule`` for the picker's Service,
  GKE's ``HealthCheckPolicy`` and ``GCPBackendPolicy`` of the pool.

The EPP scores pods on queued requests, KV-cache use and its own prefix index; it learns minisgl's
metric names from the ``engineConfigs`` entry below (the pods carry its engine label).
"""

from __future__ import annotations

import json

from . import constants, server
from .meta import Obj, child_metadata, config_hash, labels, pull_policy, serving_selector
from .sizing import reserve_disk
from .spec import InferenceService

POOL_GROUP = constants.INFERENCE_POOL_API_VERSION.split("/")[0]

# minisgl's /metrics, under the names the EPP's core-metrics-extractor reads (one engineConfigs
# entry). No LoRA spec: the EPP's LoRA affinity reads a gauge of the adapters each pod holds now
# (vLLM's lora_requests_info: max_lora, running/waiting adapters), which minisgl does not export;
# and spec.adapters are resident in every pod of the pool (--max-loras holds them all), so any pod
# serves any adapter. Nor does an adapter need an object of its own: an InferencePool serves every
# model name its pods answer to (InferenceObjective and InferenceModelRewrite are optional policy).
ENGINE_METRICS = {
    "name": constants.EPP_ENGINE_NAME,
    "queuedRequestsSpec": constants.WAITING_REQUESTS_METRIC,
    "runningRequestsSpec": constants.RUNNING_REQUESTS_METRIC,
    "kvUsageSpec": constants.KV_USAGE_METRIC,
    "loraSpec": "",
    "cacheInfoSpec": constants.CACHE_CONFIG_METRIC,
    "cacheBlockSizeLabelName": constants.CACHE_PAGE_SIZE_LABEL,
    "cacheNumBlocksLabelName": constants.CACHE_NUM_PAGES_LABEL,
}
# The EPP's default scoring, as llm-d's chart sets it: queue and KV load, prefix reuse weighed most.
SCORERS = {"queue-scorer": 2, "kv-cache-utilization-scorer": 2, "prefix-cache-scorer": 3}


def epp_name(isvc: InferenceService) -> str:
    return f"{isvc.name}{constants.EPP_SUFFIX}"


def scales_to_zero(isvc: InferenceService) -> bool:
    return isvc.autoscaling is not None and isvc.autoscaling.min_replicas == 0


def endpoint_picker_config(isvc: InferenceService) -> Obj:
    config: Obj = {
        "apiVersion": "llm-d.ai/v1alpha1",
        "kind": "EndpointPickerConfig",
        "plugins": [
            *({"type": name} for name in SCORERS),
            {"type": "metrics-data-source", "parameters": {"scheme": "http", "path": server.METRICS_PATH}},
            {
                "type": "core-metrics-extractor",
                "parameters": {
                    "engineLabelKey": constants.EPP_ENGINE_LABEL,
                    "defaultEngine": constants.EPP_ENGINE_NAME,
                    "engineConfigs": [dict(ENGINE_METRICS)],
                },
            },
        ],
        "schedulingProfiles": [
            {"name": "default", "plugins": [{"pluginRef": name, "weight": weight} for name, weight in SCORERS.items()]}
        ],
    }
    if scales_to_zero(isvc):
        # With no pod up, flow control holds the requests (its queue is what KEDA activates on)
        # for as long as a pod may take to start and load the model.
        config["featureGates"] = ["flowControl"]
        config["flowControl"] = {"defaultRequestTTL": f"{held_seconds(isvc)}s"}
    return config


def _epp_metadata(isvc: InferenceService) -> Obj:
    meta = child_metadata(isvc, epp_name(isvc))
    meta["labels"] = {**labels(isvc), **epp_selector(isvc), constants.LABEL_COMPONENT: constants.EPP_COMPONENT}
    return meta


def epp_selector(isvc: InferenceService) -> dict[str, str]:
    # Not the server pods' selector: the EPP's pods must never join the pool or the Service.
    return {constants.LABEL_NAME: f"{constants.APP_NAME}{constants.EPP_SUFFIX}", constants.LABEL_INSTANCE: isvc.name}


def config_map(isvc: InferenceService) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _epp_metadata(isvc),
        # JSON is YAML: no YAML writer needed in the operator.
        "data": {constants.EPP_CONFIG_FILE: json.dumps(endpoint_picker_config(isvc), indent=2)},
    }


def service_account(isvc: InferenceService) -> Obj:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _epp_metadata(isvc)}


# What the EPP reads (llm-d router's chart grants the same): its pool, the pool's pods, and the
# optional objective/rewrite objects in both API groups it knows.
EPP_RULES = [
    {"apiGroups": [POOL_GROUP], "resources": ["inferencepools"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["inference.networking.x-k8s.io", "llm-d.ai"],
     "resources": ["inferenceobjectives", "inferencemodelrewrites"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
]  # fmt: skip


def role(isvc: InferenceService) -> Obj:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": _epp_metadata(isvc),
        "rules": [dict(rule) for rule in EPP_RULES],
    }


def role_binding(isvc: InferenceService) -> Obj:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _epp_metadata(isvc),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": epp_name(isvc)},
        "subjects": [{"kind": "ServiceAccount", "name": epp_name(isvc), "namespace": isvc.namespace}],
    }


def _grpc_probe(period: int) -> Obj:
    return {"grpc": {"port": constants.EPP_HEALTH_PORT, "service": "inference-extension"}, "periodSeconds": period,
            "timeoutSeconds": constants.PROBE_TIMEOUT_SECONDS, "failureThreshold": 3}  # fmt: skip


def _field_env(name: str, path: str) -> Obj:
    return {"name": name, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": path}}}


def deployment(isvc: InferenceService, image: str) -> Obj:
    args = [
        "--pool-name", isvc.name,
        "--pool-namespace", isvc.namespace,
        "--pool-group", POOL_GROUP,
        "--config-file", f"{constants.EPP_CONFIG_MOUNT}/{constants.EPP_CONFIG_FILE}",
        "--grpc-port", str(constants.EPP_GRPC_PORT),
        "--grpc-health-port", str(constants.EPP_HEALTH_PORT),
        "--metrics-port", str(constants.EPP_METRICS_PORT),
        "--metrics-endpoint-auth=false",
        # Both replicas serve (constants.EPP_REPLICAS says why); each keeps the prefix index of the
        # requests it routes.
        "--ha-enable-leader-election=false",
        "--zap-encoder", "json",
    ]  # fmt: skip
    container = {
        "name": constants.EPP_CONTAINER,
        "image": image,
        "imagePullPolicy": pull_policy(image),
        "args": args,
        "env": [_field_env("NAMESPACE", "metadata.namespace"), _field_env("POD_NAME", "metadata.name"),
                {"name": "HOME", "value": constants.TMP_MOUNT}],
        "ports": [
            {"name": "grpc", "containerPort": constants.EPP_GRPC_PORT, "protocol": "TCP"},
            {"name": "grpc-health", "containerPort": constants.EPP_HEALTH_PORT, "protocol": "TCP"},
            {"name": constants.EPP_METRICS_PORT_NAME, "containerPort": constants.EPP_METRICS_PORT, "protocol": "TCP"},
        ],
        "livenessProbe": _grpc_probe(10),
        "readinessProbe": _grpc_probe(2),
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "4", "memory": "4Gi"}},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
        # The root filesystem is read-only: whatever the picker caches goes to /tmp.
        "volumeMounts": [{"name": "config", "mountPath": constants.EPP_CONFIG_MOUNT, "readOnly": True},
                         {"name": constants.TMP_VOLUME, "mountPath": constants.TMP_MOUNT}],
    }
    selector = epp_selector(isvc)
    pod_spec = {
        "serviceAccountName": epp_name(isvc),
        "enableServiceLinks": False,
        "securityContext": {"runAsNonRoot": True, "runAsUser": constants.RUN_AS_USER, "runAsGroup": constants.RUN_AS_USER,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        # The two pickers on two nodes where there are two: one node's drain leaves the other.
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                       "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": selector}}],
        "containers": [container],
        "volumes": [{"name": "config", "configMap": {"name": epp_name(isvc)}},
                    {"name": constants.TMP_VOLUME, "emptyDir": {"sizeLimit": "1Gi"}}],
    }  # fmt: skip
    reserve_disk(pod_spec, constants.EPP_CONTAINER)
    # llm-d reads its config file only at start: the config's hash on the pod template rolls the
    # pickers when it changes (flow control on or off as minReplicas crosses 0).
    annotations = {constants.ANNOTATION_CONFIG_HASH: config_hash(config_map(isvc)["data"])}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _epp_metadata(isvc),
        "spec": {
            "replicas": constants.EPP_REPLICAS,
            # A new picker is Ready before an old one goes: routing never stops during a rollout.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "selector": {"matchLabels": selector},
            "revisionHistoryLimit": 3,
            "template": {"metadata": {"labels": _epp_metadata(isvc)["labels"], "annotations": annotations}, "spec": pod_spec},
        },
    }


def epp_disruption_budget(isvc: InferenceService) -> Obj:
    """One picker at a time may be evicted (a node drain): the other keeps routing."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _epp_metadata(isvc),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": epp_selector(isvc)},
                 "unhealthyPodEvictionPolicy": "AlwaysAllow"},
    }  # fmt: skip


def epp_service(isvc: InferenceService) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _epp_metadata(isvc),
        "spec": {
            "type": "ClusterIP",
            "selector": epp_selector(isvc),
            "ports": [
                {"name": "grpc-ext-proc", "port": constants.EPP_GRPC_PORT, "targetPort": "grpc", "protocol": "TCP",
                 "appProtocol": constants.EPP_APP_PROTOCOL},
                {"name": "http-metrics", "port": constants.EPP_METRICS_PORT, "targetPort": constants.EPP_METRICS_PORT_NAME,
                 "protocol": "TCP"},
            ],
        },
    }  # fmt: skip


def inference_pool(isvc: InferenceService) -> Obj:
    assert isvc.router is not None
    return {
        "apiVersion": constants.INFERENCE_POOL_API_VERSION,
        "kind": "InferencePool",
        "metadata": child_metadata(isvc, isvc.name),
        "spec": {
            "selector": {"matchLabels": serving_selector(isvc)},
            "targetPorts": [{"number": isvc.port}],
            "endpointPickerRef": {
                "kind": "Service",
                "name": epp_name(isvc),
                "port": {"number": constants.EPP_GRPC_PORT},
                "failureMode": isvc.router.failure_mode,
            },
        },
    }


def _pool_backend(name: str, weight: int) -> Obj:
    return {"group": POOL_GROUP, "kind": "InferencePool", "name": name, "weight": weight}


def held_seconds(isvc: InferenceService) -> int:
    """How long flow control holds a request while no pod runs: as long as a pod may take to start,
    but never past the gateway's ext-proc message timeout (the picker answers before it is cut)."""
    return min(isvc.startup_timeout_seconds + 60,
               constants.EXT_PROC_MESSAGE_TIMEOUT_SECONDS - constants.EXT_PROC_MARGIN_SECONDS)


def _duration(seconds: int) -> str:
    """A Gateway API duration (GEP-2257: at most 5 digits a unit)."""
    hours, rest = divmod(seconds, 3600)
    return (f"{hours}h" if hours else "") + (f"{rest}s" if rest or not hours else "")


def request_seconds(isvc: InferenceService) -> int:
    """The longest a request may take through the gateway: its response's streaming, plus the time the
    picker may hold it before any pod is up (scale from zero)."""
    assert isvc.router is not None
    return isvc.router.request_timeout_seconds + (held_seconds(isvc) if scales_to_zero(isvc) else 0)


def route_timeouts(isvc: InferenceService) -> Obj:
    """backendRequest: the longest a response may stream; request: :func:`request_seconds`. An
    Envoy-based gateway's default cuts both at 15 s."""
    assert isvc.router is not None
    return {"request": _duration(request_seconds(isvc)), "backendRequest": _duration(isvc.router.request_timeout_seconds)}


def http_route(isvc: InferenceService) -> Obj | None:
    router = isvc.router
    if router is None or router.gateway is None:
        return None
    parent: Obj = {"group": constants.GATEWAY_API_GROUP, "kind": "Gateway", "name": router.gateway.name}
    if router.gateway.namespace:
        parent["namespace"] = router.gateway.namespace
    if router.gateway.section_name:
        parent["sectionName"] = router.gateway.section_name
    canary = router.canary
    backends = [_pool_backend(isvc.name, 100 - (canary.weight if canary else 0))]
    if canary is not None:
        backends.append(_pool_backend(canary.inference_service, canary.weight))
    rule: Obj = {"matches": [{"path": {"type": "PathPrefix", "value": "/"}}], "backendRefs": backends}
    if router.gateway_provider != constants.GATEWAY_PROVIDER_GKE:
        # GKE's gateway times a request by the GCPBackendPolicy; upstream's chart leaves these out there.
        rule["timeouts"] = route_timeouts(isvc)
    spec: Obj = {"parentRefs": [parent], "rules": [rule]}
    if router.hostnames:
        spec["hostnames"] = list(router.hostnames)
    return {
        "apiVersion": constants.HTTPROUTE_API_VERSION,
        "kind": "HTTPRoute",
        "metadata": child_metadata(isvc, isvc.name),
        "spec": spec,
    }


def destination_rule(isvc: InferenceService) -> Obj:
    """Istio: the gateway speaks TLS to the picker (SIMPLE) and accepts its self-signed certificate."""
    return {
        "apiVersion": constants.ISTIO_NETWORKING_API_VERSION,
        "kind": "DestinationRule",
        "metadata": _epp_metadata(isvc),
        "spec": {
            "host": f"{epp_name(isvc)}.{isvc.namespace}.svc.cluster.local",
            "trafficPolicy": {"tls": {"mode": "SIMPLE", "insecureSkipVerify": True}},
        },
    }


def _pool_target(isvc: InferenceService) -> Obj:
    return {"group": POOL_GROUP, "kind": "InferencePool", "name": isvc.name}


def health_check_policy(isvc: InferenceService) -> Obj:
    """GKE: how its load balancer checks the pool's pods. /ready, not upstream's /health: minisgl's
    /health answers while the model still downloads. The port is fixed (USE_FIXED_PORT): GKE's CRD
    refuses a port with the default portSpecification, which upstream's chart leaves unset."""
    check = {"portSpecification": "USE_FIXED_PORT", "port": isvc.port, "requestPath": server.READINESS_PATH}
    return {
        "apiVersion": constants.GKE_NETWORKING_API_VERSION,
        "kind": "HealthCheckPolicy",
        "metadata": child_metadata(isvc, isvc.name),
        "spec": {
            "targetRef": _pool_target(isvc),
            "default": {"timeoutSec": constants.GKE_HEALTH_CHECK_SECONDS, "checkIntervalSec": constants.GKE_HEALTH_CHECK_SECONDS,
                        "config": {"type": "HTTP", "httpHealthCheck": check}},
        },
    }  # fmt: skip


def backend_policy(isvc: InferenceService) -> Obj:
    """GKE: the backend service's timeout, which GKE's load balancer holds a request to (its default,
    30 s, would cut every long stream): the HTTPRoute's request timeout."""
    return {
        "apiVersion": constants.GKE_NETWORKING_API_VERSION,
        "kind": "GCPBackendPolicy",
        "metadata": child_metadata(isvc, isvc.name),
        "spec": {"targetRef": _pool_target(isvc), "default": {"timeoutSec": request_seconds(isvc)}},
    }


def gateway_objects(isvc: InferenceService) -> list[Obj]:
    """What spec.router.gatewayProvider's gateway needs of its own kinds; none without it."""
    provider = isvc.router.gateway_provider if isvc.router is not None else None
    if provider == constants.GATEWAY_PROVIDER_ISTIO:
        return [destination_rule(isvc)]
    if provider == constants.GATEWAY_PROVIDER_GKE:
        return [health_check_policy(isvc), backend_policy(isvc)]
    return []


def objects(isvc: InferenceService, epp_image: str) -> list[Obj]:
    """Every object spec.router asks for, in apply order (the picker before the pool names it, the
    pool before a route points at it); none without spec.router."""
    if isvc.router is None:
        return []
    built = [config_map(isvc), service_account(isvc), role(isvc), role_binding(isvc), deployment(isvc, epp_image),
             epp_disruption_budget(isvc), epp_service(isvc), inference_pool(isvc), *gateway_objects(isvc), http_route(isvc)]
    return [obj for obj in built if obj is not None]
