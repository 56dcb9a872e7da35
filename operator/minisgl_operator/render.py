"""Pure functions: a parsed InferenceService -> the Kubernetes objects that serve it.

Nothing here talks to the API server. The reconciler applies exactly what :func:`children`
returns, and ``minisgl-operator render`` prints exactly that, so the dry run cannot drift from
what the operator does.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any

from . import constants, merge, router, server, sizing
from . import spec as spec_mod
from .meta import Obj, child_metadata, config_hash, labels, pull_policy, selector_labels, serving_selector
from .spec import InferenceService

# --- the pod -----------------------------------------------------------------------------------


def _http_probe(path: str, period: int, failure_threshold: int) -> Obj:
    return {
        "httpGet": {"path": path, "port": constants.PORT_NAME},
        "periodSeconds": period,
        "timeoutSeconds": constants.PROBE_TIMEOUT_SECONDS,
        "failureThreshold": failure_threshold,
    }


def _env(isvc: InferenceService) -> list[Obj]:
    # The operator's defaults first; a spec.env entry of the same name replaces one (env is a
    # list keyed by name: a duplicate name would make server-side apply fail).
    cache_env = constants.READ_ONLY_CACHE_ENV if isvc.model_cache and isvc.model_cache.read_only else constants.CACHE_ENV
    merged: dict[str, Obj] = {name: {"name": name, "value": value} for name, value in cache_env.items()}
    for var in isvc.env:
        merged[var["name"]] = copy.deepcopy(dict(var))
    return list(merged.values())


def _cache_volume(isvc: InferenceService) -> Obj:
    cache = isvc.model_cache
    if cache is None:
        return {"name": constants.CACHE_VOLUME, "emptyDir": {"sizeLimit": sizing.defaults(isvc).cache_size_limit}}
    if cache.per_pod:
        # A generic ephemeral volume: one PVC per pod, created and deleted with it.
        claim_spec: Obj = {"accessModes": list(cache.access_modes), "resources": {"requests": {"storage": cache.size}}}
        if cache.storage_class_name:
            claim_spec["storageClassName"] = cache.storage_class_name
        return {
            "name": constants.CACHE_VOLUME,
            "ephemeral": {"volumeClaimTemplate": {"metadata": {"labels": labels(isvc)}, "spec": claim_spec}},
        }
    claim: Obj = {"claimName": isvc.pvc_name}
    if cache.read_only:
        claim["readOnly"] = True
    return {"name": constants.CACHE_VOLUME, "persistentVolumeClaim": claim}


def _cache_mount(isvc: InferenceService) -> Obj:
    mount: Obj = {"name": constants.CACHE_VOLUME, "mountPath": constants.CACHE_MOUNT}
    if isvc.model_cache is not None and isvc.model_cache.read_only:
        mount["readOnly"] = True
    return mount


def cache_owner(isvc: InferenceService) -> Obj:
    """The init container that gives a shared cache's top directory to the server user. The kubelet
    applies fsGroup to ReadWriteOnce volumes only: an NFS, EFS or Filestore volume stays root's, and
    the first download would fail. Root with CAP_CHOWN alone, the top directory only, and only where
    it is someone else's."""
    uid = constants.RUN_AS_USER
    return {
        "name": constants.CACHE_OWNER_CONTAINER,
        "image": isvc.image,
        "imagePullPolicy": pull_policy(isvc.image),
        "command": [*constants.CACHE_OWNER_COMMAND, constants.CACHE_MOUNT, f"{uid}:{uid}"],
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "env": [dict(constants.NO_GPU_ENV)],
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "256Mi"}},
        "securityContext": {
            "runAsUser": 0,
            "runAsNonRoot": False,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"], "add": ["CHOWN"]},
        },
        "volumeMounts": [{"name": constants.CACHE_VOLUME, "mountPath": constants.CACHE_MOUNT}],
    }


def _server_args(isvc: InferenceService, role: str) -> list[str]:
    """The server's flags in a pod; a multi-node group's pods add their place in the group: the
    kubelet expands LWS's $(LWS_LEADER_ADDRESS) and $(LWS_WORKER_INDEX) (0 on the leader)."""
    args = isvc.server_command_line
    if role == SINGLE:
        return args
    rank = "0" if role == LEADER else f"$({constants.LWS_WORKER_INDEX_ENV})"
    return args + server.node_flags(isvc.nodes, rank, f"$({constants.LWS_LEADER_ADDRESS_ENV}):{constants.DIST_INIT_PORT}")


# What a pod is: the only pod of a replica, or the leader or a worker of a multi-node group.
SINGLE, LEADER, WORKER = "single", "leader", "worker"


def pod_template(isvc: InferenceService, role: str = SINGLE) -> Obj:
    container: Obj = {
        "name": constants.CONTAINER_NAME,
        "image": isvc.image,
        "imagePullPolicy": pull_policy(isvc.image),
        "command": list(server.SERVER_COMMAND),
        # The server writes no termination message: the tail of its log (a wrong model id's 404, a
        # CUDA error) becomes the crash's message, which the status shows.
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "args": _server_args(isvc, role),
        "ports": [{"name": constants.PORT_NAME, "containerPort": isvc.port, "protocol": "TCP"}],
        "env": _env(isvc),
        "resources": sizing.server_resources(isvc),
        # The startup probe asks /ready, which answers 200 only once the model is loaded (/health
        # does during the download too): a stuck download or NCCL hang is restarted after
        # spec.startupTimeoutSeconds instead of staying NotReady forever.
        "startupProbe": _http_probe(
            server.READINESS_PATH,
            constants.STARTUP_PERIOD_SECONDS,
            math.ceil(isvc.startup_timeout_seconds / constants.STARTUP_PERIOD_SECONDS),
        ),
        "readinessProbe": _http_probe(server.READINESS_PATH, constants.READINESS_PERIOD_SECONDS, 3),
        "livenessProbe": _http_probe(server.LIVENESS_PATH, constants.LIVENESS_PERIOD_SECONDS, 3),
        # After SIGTERM the endpoint removal takes a few seconds to reach every kube-proxy and
        # ingress; serving on through this pause keeps clients from meeting the drain's 503s.
        "lifecycle": {"preStop": {"sleep": {"seconds": constants.PRESTOP_SLEEP_SECONDS}}},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [
            {"name": constants.SHM_VOLUME, "mountPath": constants.SHM_MOUNT},
            {"name": constants.TMP_VOLUME, "mountPath": constants.TMP_MOUNT},
            _cache_mount(isvc),
        ],
    }
    if isvc.env_from:
        container["envFrom"] = [copy.deepcopy(dict(e)) for e in isvc.env_from]
    if role != SINGLE:
        # Rank 0 hosts torch.distributed's rendezvous on the leader; the workers connect to it.
        container["ports"].append({"name": "dist-init", "containerPort": constants.DIST_INIT_PORT, "protocol": "TCP"})
    if role == WORKER:
        # A worker node serves no HTTP: nothing to probe. Its ranks exit when the leader goes, and
        # the group restarts as one (RecreateGroupOnPodRestart); the leader's /ready covers all ranks.
        for key in ("startupProbe", "readinessProbe", "livenessProbe", "lifecycle"):
            del container[key]
        container["ports"] = [p for p in container["ports"] if p["name"] != constants.PORT_NAME]

    pod_spec: Obj = {
        # The server never calls the Kubernetes API.
        "automountServiceAccountToken": False,
        # No *_SERVICE_HOST/_PORT variables: a Service named like an env var prefix could clash
        # with the server's own MINISGL_* settings.
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": isvc.termination_grace_seconds,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": constants.RUN_AS_USER,
            "runAsGroup": constants.RUN_AS_USER,
            "fsGroup": constants.RUN_AS_USER,
            # Do not chown a model cache of many GB on every start.
            "fsGroupChangePolicy": "OnRootMismatch",
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
        "volumes": [
            {"name": constants.SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": constants.SHM_SIZE_LIMIT}},
            {"name": constants.TMP_VOLUME, "emptyDir": {"sizeLimit": constants.TMP_SIZE_LIMIT}},
            _cache_volume(isvc),
        ],
    }
    if isvc.node_selector:
        pod_spec["nodeSelector"] = dict(isvc.node_selector)
    if isvc.tolerations:
        pod_spec["tolerations"] = [copy.deepcopy(dict(t)) for t in isvc.tolerations]
    if isvc.affinity:
        pod_spec["affinity"] = copy.deepcopy(dict(isvc.affinity))

    # Which metric names the endpoint picker reads; on every pod, router or not, so adding or removing
    # spec.router leaves the pod template (and so every GPU pod) as it is.
    pod_labels = {**labels(isvc), constants.EPP_ENGINE_LABEL: constants.EPP_ENGINE_NAME}
    annotations = {} if role == WORKER else {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(isvc.port),
        "prometheus.io/path": server.METRICS_PATH,
    }
    template = {"metadata": {"labels": pod_labels, "annotations": annotations}, "spec": pod_spec}
    template = merge.strategic_merge(template, dict(isvc.pod_template))
    if isvc.hub_adapters and not isvc.loads_model:
        # The server reads adapters from local directories only: each pod fetches the Hub ones into
        # its cache first, as the server fetches the model (on a shared created cache, the loader Job
        # has, once). After the podTemplate merge: with the server container's final environment.
        server_ctr = next(ctr for ctr in template["spec"]["containers"] if ctr["name"] == constants.CONTAINER_NAME)
        template["spec"].setdefault("initContainers", []).insert(0, adapter_downloader(isvc, server_ctr))
    if isvc.model_cache is not None and isvc.model_cache.takes_owner and not isvc.loads_model:
        template["spec"].setdefault("initContainers", []).insert(0, cache_owner(isvc))
    sizing.reserve_disk(template["spec"], constants.CONTAINER_NAME)
    # The Deployment and Service select the pods by these: an override must not change them.
    template["metadata"]["labels"].update(pod_labels)
    if not template["metadata"]["annotations"]:
        del template["metadata"]["annotations"]
    return template


# --- the children ------------------------------------------------------------------------------


def _strategy(isvc: InferenceService) -> Obj:
    rollout = isvc.rollout
    if rollout.strategy == constants.ROLLOUT_RECREATE:
        return {"type": constants.ROLLOUT_RECREATE}
    return {
        "type": constants.ROLLOUT_ROLLING,
        "rollingUpdate": {"maxSurge": rollout.max_surge, "maxUnavailable": rollout.max_unavailable},
    }


def deployment(isvc: InferenceService) -> Obj:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": child_metadata(isvc, isvc.name),
        "spec": {
            "replicas": isvc.replicas,
            "selector": {"matchLabels": selector_labels(isvc)},
            "strategy": _strategy(isvc),
            # Longer than the startup probe's budget, or a slow first download reads as a failure.
            "progressDeadlineSeconds": isvc.progress_deadline_seconds,
            "revisionHistoryLimit": 3,
            "template": pod_template(isvc),
        },
    }


def leader_worker_set(isvc: InferenceService) -> Obj:
    """A replica that spans several nodes: one LWS group of ``isvc.nodes`` pods. The leader (worker
    index 0) runs the API and ranks 0..k-1, each worker only its k ranks; a pod that fails
    restarts the whole group, since the ranks cannot rejoin one by one."""
    rollout = isvc.rollout
    # LWS rolls groups only; Recreate becomes "every group may go at once".
    surge, unavailable = (
        (0, max(isvc.replicas, 1)) if rollout.strategy == constants.ROLLOUT_RECREATE else (rollout.max_surge, rollout.max_unavailable)
    )
    meta = child_metadata(isvc, isvc.name)
    if isvc.exclusive_topology:
        # Each group in a topology domain of its own (a rack, an NVLink domain): all its pods inside it.
        meta["annotations"] = {constants.LWS_EXCLUSIVE_TOPOLOGY_ANNOTATION: isvc.exclusive_topology}
    return {
        "apiVersion": constants.LWS_API_VERSION,
        "kind": "LeaderWorkerSet",
        "metadata": meta,
        "spec": {
            "replicas": isvc.replicas,
            "startupPolicy": "LeaderCreated",
            # A headless Service per group, named NAME-GROUP. The default (Shared) wants one named NAME,
            # which is the InferenceService's own Service: LWS skips creating it when that one exists
            # (the leader's address then never resolves), and the operator refuses a foreign one.
            "networkConfig": {"subdomainPolicy": "UniquePerReplica"},
            "rolloutStrategy": {
                "type": "RollingUpdate",
                "rollingUpdateConfiguration": {"maxSurge": surge, "maxUnavailable": unavailable},
            },
            "leaderWorkerTemplate": {
                "size": isvc.nodes,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": pod_template(isvc, LEADER),
                "workerTemplate": pod_template(isvc, WORKER),
            },
        },
    }


def workload(isvc: InferenceService) -> Obj:
    """What runs the pods: a Deployment, or a LeaderWorkerSet when a replica spans several nodes."""
    return leader_worker_set(isvc) if isvc.multi_node else deployment(isvc)


def service(isvc: InferenceService) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": child_metadata(isvc, isvc.name),
        "spec": {
            "type": "ClusterIP",
            "selector": serving_selector(isvc),
            "ports": [
                {
                    "name": constants.PORT_NAME,
                    "port": isvc.port,
                    "targetPort": constants.PORT_NAME,
                    "protocol": "TCP",
                    "appProtocol": "http",
                }
            ],
        },
    }


def persistent_volume_claim(isvc: InferenceService) -> Obj | None:
    cache = isvc.model_cache
    if cache is None or not cache.operator_created:
        return None
    pvc_spec: Obj = {
        "accessModes": list(cache.access_modes),
        "resources": {"requests": {"storage": cache.size}},
    }
    if cache.storage_class_name:
        pvc_spec["storageClassName"] = cache.storage_class_name
    meta = child_metadata(isvc, isvc.pvc_name)
    if cache.retain:
        # No ownerReference: the garbage collector leaves it when the InferenceService goes. Its
        # labels name the InferenceService, and one of that name adopts it (reconcile.claims).
        del meta["ownerReferences"]
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": pvc_spec}


def loader_name(isvc: InferenceService) -> str:
    return f"{isvc.name}{constants.LOADER_SUFFIX}"


def loader_selector(isvc: InferenceService) -> dict[str, str]:
    # Not the server pods' selector: the loader's pod must never join the Service or the pool.
    return {constants.LABEL_NAME: f"{constants.APP_NAME}{constants.LOADER_SUFFIX}", constants.LABEL_INSTANCE: isvc.name}


def _downloader(isvc: InferenceService, name: str, command: list[str], server_ctr: Obj) -> Obj:
    """A container that downloads into the model cache with the server container's image,
    environment (HF_TOKEN...) and security context. No GPU."""
    container: Obj = {
        "name": name,
        "image": isvc.image,
        "imagePullPolicy": pull_policy(isvc.image),
        "command": command,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "env": [*(e for e in copy.deepcopy(server_ctr["env"]) if e["name"] != constants.NO_GPU_ENV["name"]),
                dict(constants.NO_GPU_ENV)],
        "resources": {"requests": {"cpu": "1", "memory": "4Gi"}, "limits": {"cpu": "4", "memory": "8Gi"}},
        "securityContext": copy.deepcopy(server_ctr["securityContext"]),
        "volumeMounts": [
            {"name": constants.TMP_VOLUME, "mountPath": constants.TMP_MOUNT},
            {"name": constants.CACHE_VOLUME, "mountPath": constants.CACHE_MOUNT},
        ],
    }
    if "envFrom" in server_ctr:
        container["envFrom"] = copy.deepcopy(server_ctr["envFrom"])
    return container


def adapter_downloader(isvc: InferenceService, server_ctr: Obj) -> Obj:
    """Downloads each Hub adapter into its directory of the model cache (``Adapter.path``)."""
    pairs = [arg for a in isvc.hub_adapters for arg in (a.source, a.path)]
    return _downloader(isvc, constants.ADAPTER_CONTAINER, [*constants.ADAPTER_DOWNLOAD_COMMAND, *pairs], server_ctr)


def downloads(isvc: InferenceService) -> str:
    """What the loader Job fetches into the cache, as its annotation records it."""
    return " ".join([*([] if isvc.model.startswith("/") else [isvc.model]), *sorted(a.source for a in isvc.hub_adapters)])


def model_loader(isvc: InferenceService) -> Obj | None:
    """A Job that downloads the model into a shared created cache once, with the server's own
    download function and the server pods' environment (HF_TOKEN...), before any server pod starts:
    the reconciler applies the workload only once it has succeeded. The Hub adapters too, beside it."""
    if not isvc.loads_model:
        return None
    server_pod = pod_template(isvc)["spec"]
    server_ctr = server_pod["containers"][0]
    pod_labels = {**labels(isvc), **loader_selector(isvc), constants.LABEL_COMPONENT: constants.LOADER_COMPONENT}
    containers = [] if isvc.model.startswith("/") else [
        _downloader(isvc, constants.LOADER_CONTAINER, [*constants.LOADER_COMMAND, isvc.model], server_ctr)
    ]
    if isvc.hub_adapters:
        containers.append(adapter_downloader(isvc, server_ctr))
    pod_spec: Obj = {
        "restartPolicy": "Never",
        **({"initContainers": [cache_owner(isvc)]} if isvc.model_cache.takes_owner else {}),
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": server_pod["securityContext"],
        "containers": containers,
        "volumes": [{"name": constants.TMP_VOLUME, "emptyDir": {"sizeLimit": constants.TMP_SIZE_LIMIT}}, _cache_volume(isvc)],
    }
    for key in ("imagePullSecrets", "nodeSelector", "tolerations"):
        if key in server_pod:
            pod_spec[key] = server_pod[key]
    sizing.reserve_disk(pod_spec, containers[0]["name"])
    meta = child_metadata(isvc, loader_name(isvc))
    meta["labels"] = pod_labels
    meta["annotations"] = {constants.ANNOTATION_DOWNLOADS: downloads(isvc)}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "backoffLimit": constants.LOADER_BACKOFF_LIMIT,
            "template": {"metadata": {"labels": pod_labels}, "spec": pod_spec},
        },
    }


def horizontal_pod_autoscaler(isvc: InferenceService) -> Obj | None:
    """Scales the InferenceService itself (its scale subresource), not the Deployment: the HPA
    writes spec.replicas, and the operator carries it to the Deployment like any other change."""
    scaling = isvc.autoscaling
    if scaling is None or scaling.keda is not None:
        return None
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": child_metadata(isvc, isvc.name),
        "spec": {
            "scaleTargetRef": {"apiVersion": constants.API_VERSION, "kind": constants.KIND, "name": isvc.name},
            "minReplicas": scaling.min_replicas,
            "maxReplicas": scaling.max_replicas,
            "metrics": [
                {
                    "type": "Pods",
                    "pods": {
                        "metric": {"name": constants.WAITING_REQUESTS_METRIC},
                        "target": {"type": "AverageValue", "averageValue": str(scaling.target_waiting_requests)},
                    },
                }
            ],
            "behavior": scaling_behavior(isvc),
        },
    }


def _prometheus_query(isvc: InferenceService, metric: str) -> tuple[str, str]:
    """The PromQL of a spec.autoscaling.keda.metric over this InferenceService's pods, and the
    target type: AverageValue divides by the replicas (a per-replica target), Value does not."""
    pods = f'{constants.PROMETHEUS_ISVC_LABEL}="{isvc.name}",namespace="{isvc.namespace}"'
    if metric == constants.KEDA_METRIC_WAITING:
        return f"sum({constants.WAITING_REQUESTS_METRIC}{{{pods}}})", "AverageValue"
    if metric == constants.KEDA_METRIC_KV:
        return f"avg({constants.KV_USAGE_METRIC}{{{pods}}})", "Value"
    return (
        f"histogram_quantile(0.9, sum by (le) (rate({constants.TTFT_BUCKET_METRIC}{{{pods}}}[{constants.KEDA_RATE_WINDOW}])))",
        "Value",
    )


def scaling_behavior(isvc: InferenceService) -> Obj:
    """The behaviour of the HPA (ours, or the one KEDA makes), with the model's load time in it. A pod that is still
    loading adds no capacity, so the queue keeps rising meanwhile: a load must last
    SCALE_UP_STABILIZATION_SECONDS to count, and the replicas at most double per that period.
    Scale-down waits at least as long as a pod takes to load (startupTimeoutSeconds), so capacity
    is never given back sooner than it could be had again."""
    return {
        "scaleUp": {
            "stabilizationWindowSeconds": constants.SCALE_UP_STABILIZATION_SECONDS,
            "policies": [{"type": "Percent", "value": 100, "periodSeconds": constants.SCALE_UP_STABILIZATION_SECONDS}],
        },
        "scaleDown": {
            "stabilizationWindowSeconds": min(max(constants.SCALE_DOWN_STABILIZATION_SECONDS, isvc.startup_timeout_seconds), 3600),
            "policies": [{"type": "Pods", "value": 1, "periodSeconds": constants.SCALE_DOWN_PERIOD_SECONDS}],
        },
    }


def scaled_object(isvc: InferenceService) -> Obj | None:
    """KEDA instead of the HPA: a Prometheus trigger on the chosen metric, scaling the
    InferenceService's scale subresource. With minReplicas 0 a second trigger counts the requests
    the router's endpoint picker holds while no pod runs: KEDA activates on it (0 -> 1)."""
    scaling = isvc.autoscaling
    if scaling is None or scaling.keda is None:
        return None
    keda = scaling.keda
    query, metric_type = _prometheus_query(isvc, keda.metric)
    trigger_meta = {"serverAddress": keda.prometheus_address, "query": query, "threshold": keda.target}
    if keda.activation_target is not None:
        trigger_meta["activationThreshold"] = keda.activation_target
    triggers = [{"type": "prometheus", "name": keda.metric.lower(), "metricType": metric_type, "metadata": trigger_meta}]
    if scaling.min_replicas == 0:
        held = f'sum({constants.EPP_QUEUE_METRIC}{{{constants.EPP_POOL_LABEL}="{isvc.name}",namespace="{isvc.namespace}"}}) or vector(0)'
        triggers.append({
            "type": "prometheus",
            "name": "held-by-router",
            "metricType": "AverageValue",
            "metadata": {"serverAddress": keda.prometheus_address, "query": held,
                         "threshold": str(constants.DEFAULT_TARGET_WAITING_REQUESTS), "activationThreshold": "0"},
        })  # fmt: skip
    return {
        "apiVersion": constants.KEDA_API_VERSION,
        "kind": "ScaledObject",
        "metadata": child_metadata(isvc, isvc.name),
        "spec": {
            "scaleTargetRef": {"apiVersion": constants.API_VERSION, "kind": constants.KIND, "name": isvc.name},
            "minReplicaCount": scaling.min_replicas,
            "maxReplicaCount": scaling.max_replicas,
            "pollingInterval": constants.KEDA_POLLING_SECONDS,
            # A new pod loads its model for up to startupTimeoutSeconds: do not scale back to zero
            # before a scale-up could have served anything, nor right after the object appears.
            "cooldownPeriod": max(constants.SCALE_DOWN_STABILIZATION_SECONDS, isvc.startup_timeout_seconds),
            "initialCooldownPeriod": isvc.startup_timeout_seconds,
            "advanced": {
                "horizontalPodAutoscalerConfig": {
                    "behavior": scaling_behavior(isvc),
                }
            },
            "triggers": triggers,
        },
    }


def wants_pdb(isvc: InferenceService) -> bool:
    return isvc.replicas > 1 or (isvc.autoscaling is not None and isvc.autoscaling.max_replicas > 1)


def pod_disruption_budget(isvc: InferenceService) -> Obj | None:
    if not wants_pdb(isvc):
        return None
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": child_metadata(isvc, isvc.name),
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": selector_labels(isvc)},
            # A crash-looping pod must not block node drains.
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }


def _with_hash(obj: Obj) -> Obj:
    obj["metadata"]["annotations"] = {**obj["metadata"].get("annotations", {}), constants.ANNOTATION_CONFIG_HASH: config_hash(obj)}
    return obj


def children(isvc: InferenceService, epp_image: str = constants.DEFAULT_EPP_IMAGE) -> list[Obj]:
    """Every object the operator applies for ``isvc``, in apply order."""
    built = [
        persistent_volume_claim(isvc),
        model_loader(isvc),
        workload(isvc),
        service(isvc),
        pod_disruption_budget(isvc),
        horizontal_pod_autoscaler(isvc),
        scaled_object(isvc),
        *router.objects(isvc, epp_image),
    ]
    return [_with_hash(obj) for obj in built if obj is not None]


def removable(isvc: InferenceService) -> list[tuple[str, str]]:
    """(kind, name) of every child the operator may create for ``isvc`` and deletes again when the
    spec stops asking for it (a switch between Deployment and LeaderWorkerSet, HPA and KEDA, a
    router or gateway provider that goes). Never the PVC: it holds data."""
    epp = router.epp_name(isvc)
    return [
        ("Job", loader_name(isvc)), ("Deployment", isvc.name), ("LeaderWorkerSet", isvc.name), ("PodDisruptionBudget", isvc.name),
        ("HorizontalPodAutoscaler", isvc.name), ("ScaledObject", isvc.name), ("HTTPRoute", isvc.name),
        ("InferencePool", isvc.name), ("Service", epp), ("PodDisruptionBudget", epp), ("Deployment", epp),
        ("RoleBinding", epp), ("Role", epp), ("ServiceAccount", epp), ("ConfigMap", epp),
        ("DestinationRule", epp), ("HealthCheckPolicy", isvc.name), ("GCPBackendPolicy", isvc.name),
    ]  # fmt: skip


def render(obj: Mapping[str, Any], default_image: str = constants.DEFAULT_SERVER_IMAGE,
           epp_image: str = constants.DEFAULT_EPP_IMAGE) -> list[Obj]:
    """Parse an InferenceService object and render its children (raises spec.SpecError)."""
    return children(spec_mod.parse(obj, default_image), epp_image)
