"""Pure functions: a parsed InferenceService -> the Kubernetes objects that serve it.

Nothing here talks to the API server. The reconciler applies exactly what :func:`children`
returns, and ``minisgl-operator render`` prints exactly that, so the dry run cannot drift from
what the operator does.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
from typing import Any, Mapping

from . import constants as c
from . import merge, server
from . import spec as spec_mod
from .spec import InferenceService

Obj = dict[str, Any]


# --- names and metadata ------------------------------------------------------------------------


def pod_selector(name: str) -> dict[str, str]:
    """The labels that select an InferenceService's pods; never change them (Deployment selectors are immutable)."""
    return {c.LABEL_NAME: c.APP_NAME, c.LABEL_INSTANCE: name}


def selector_string(name: str) -> str:
    """The pod selector as the scale subresource reports it (status.selector), for the HPA."""
    return ",".join(f"{k}={v}" for k, v in sorted(pod_selector(name).items()))


def service_url(name: str, namespace: str, port: int) -> str:
    return f"http://{name}.{namespace}.svc:{port}"


def selector_labels(isvc: InferenceService) -> dict[str, str]:
    return pod_selector(isvc.name)


def labels(isvc: InferenceService) -> dict[str, str]:
    return {
        **selector_labels(isvc),
        c.LABEL_COMPONENT: c.COMPONENT,
        c.LABEL_PART_OF: c.APP_NAME,
        c.LABEL_MANAGED_BY: c.OPERATOR_NAME,
    }


def owner_reference(isvc: InferenceService) -> Obj:
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND,
        "name": isvc.name,
        "uid": isvc.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _metadata(isvc: InferenceService, name: str) -> Obj:
    return {
        "name": name,
        "namespace": isvc.namespace,
        "labels": labels(isvc),
        "ownerReferences": [owner_reference(isvc)],
    }


# --- the pod -----------------------------------------------------------------------------------


def _http_probe(path: str, period: int, failure_threshold: int) -> Obj:
    return {
        "httpGet": {"path": path, "port": c.PORT_NAME},
        "periodSeconds": period,
        "timeoutSeconds": c.PROBE_TIMEOUT_SECONDS,
        "failureThreshold": failure_threshold,
    }


def _env(isvc: InferenceService) -> list[Obj]:
    # The operator's defaults first; a spec.env entry of the same name replaces one (env is a
    # list keyed by name: a duplicate name would make server-side apply fail).
    merged: dict[str, Obj] = {name: {"name": name, "value": value} for name, value in c.CACHE_ENV.items()}
    for var in isvc.env:
        merged[var["name"]] = copy.deepcopy(dict(var))
    return list(merged.values())


def _resources(isvc: InferenceService) -> Obj:
    requests = dict(isvc.resources.get("requests", {}))
    limits = dict(isvc.resources.get("limits", {}))
    limits[c.GPU_RESOURCE] = isvc.tp
    # Never BestEffort: QoS counts only cpu and memory, so a GPU limit alone leaves a pod first in
    # line for eviction. A limit without a request makes the request equal to it, so only a
    # resource named in neither gets the default.
    defaults = {"cpu": str(c.DEFAULT_CPU_PER_GPU * isvc.tp), "memory": f"{c.DEFAULT_MEMORY_GI_PER_GPU * isvc.tp}Gi"}
    for name, value in defaults.items():
        if name not in requests and name not in limits:
            requests[name] = value
    out: Obj = {"limits": limits}
    if requests:
        out["requests"] = requests
    return out


def _cache_volume(isvc: InferenceService) -> Obj:
    cache = isvc.model_cache
    if cache is None:
        return {"name": c.CACHE_VOLUME, "emptyDir": {"sizeLimit": c.EMPTYDIR_CACHE_SIZE_LIMIT}}
    if cache.per_pod:
        # A generic ephemeral volume: one PVC per pod, created and deleted with it.
        claim_spec: Obj = {"accessModes": list(cache.access_modes), "resources": {"requests": {"storage": cache.size}}}
        if cache.storage_class_name:
            claim_spec["storageClassName"] = cache.storage_class_name
        return {
            "name": c.CACHE_VOLUME,
            "ephemeral": {"volumeClaimTemplate": {"metadata": {"labels": labels(isvc)}, "spec": claim_spec}},
        }
    return {"name": c.CACHE_VOLUME, "persistentVolumeClaim": {"claimName": isvc.pvc_name}}


def pod_template(isvc: InferenceService) -> Obj:
    container: Obj = {
        "name": c.CONTAINER_NAME,
        "image": isvc.image,
        "imagePullPolicy": "IfNotPresent",
        "command": list(server.SERVER_COMMAND),
        "args": isvc.server_command_line,
        "ports": [{"name": c.PORT_NAME, "containerPort": isvc.port, "protocol": "TCP"}],
        "env": _env(isvc),
        "resources": _resources(isvc),
        # The startup probe asks /ready, which answers 200 only once the model is loaded (/health
        # does during the download too): a stuck download or NCCL hang is restarted after
        # spec.startupTimeoutSeconds instead of staying NotReady forever.
        "startupProbe": _http_probe(
            server.READINESS_PATH, c.STARTUP_PERIOD_SECONDS, math.ceil(isvc.startup_timeout_seconds / c.STARTUP_PERIOD_SECONDS)
        ),
        "readinessProbe": _http_probe(server.READINESS_PATH, c.READINESS_PERIOD_SECONDS, 3),
        "livenessProbe": _http_probe(server.LIVENESS_PATH, c.LIVENESS_PERIOD_SECONDS, 3),
        # After SIGTERM the endpoint removal takes a few seconds to reach every kube-proxy and
        # ingress; serving on through this pause keeps clients from meeting the drain's 503s.
        "lifecycle": {"preStop": {"sleep": {"seconds": c.PRESTOP_SLEEP_SECONDS}}},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [
            {"name": c.SHM_VOLUME, "mountPath": c.SHM_MOUNT},
            {"name": c.TMP_VOLUME, "mountPath": c.TMP_MOUNT},
            {"name": c.CACHE_VOLUME, "mountPath": c.CACHE_MOUNT},
        ],
    }
    if isvc.env_from:
        container["envFrom"] = [copy.deepcopy(dict(e)) for e in isvc.env_from]

    pod_spec: Obj = {
        # The server never calls the Kubernetes API.
        "automountServiceAccountToken": False,
        # No *_SERVICE_HOST/_PORT variables: a Service named like an env var prefix could clash
        # with the server's own MINISGL_* settings.
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": isvc.termination_grace_seconds,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": c.RUN_AS_USER,
            "runAsGroup": c.RUN_AS_USER,
            "fsGroup": c.RUN_AS_USER,
            # Do not chown a model cache of many GB on every start.
            "fsGroupChangePolicy": "OnRootMismatch",
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
        "volumes": [
            {"name": c.SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": c.SHM_SIZE_LIMIT}},
            {"name": c.TMP_VOLUME, "emptyDir": {"sizeLimit": c.TMP_SIZE_LIMIT}},
            _cache_volume(isvc),
        ],
    }
    if isvc.node_selector:
        pod_spec["nodeSelector"] = dict(isvc.node_selector)
    if isvc.tolerations:
        pod_spec["tolerations"] = [copy.deepcopy(dict(t)) for t in isvc.tolerations]
    if isvc.affinity:
        pod_spec["affinity"] = copy.deepcopy(dict(isvc.affinity))

    template = {
        "metadata": {
            "labels": labels(isvc),
            "annotations": {
                "prometheus.io/scrape": "true",
                "prometheus.io/port": str(isvc.port),
                "prometheus.io/path": server.METRICS_PATH,
            },
        },
        "spec": pod_spec,
    }
    template = merge.strategic_merge(template, dict(isvc.pod_template))
    # The Deployment and Service select the pods by these: an override must not change them.
    template["metadata"]["labels"].update(labels(isvc))
    return template


# --- the children ------------------------------------------------------------------------------


def _strategy(isvc: InferenceService) -> Obj:
    rollout = isvc.rollout
    if rollout.strategy == c.ROLLOUT_RECREATE:
        return {"type": c.ROLLOUT_RECREATE}
    return {
        "type": c.ROLLOUT_ROLLING,
        "rollingUpdate": {"maxSurge": rollout.max_surge, "maxUnavailable": rollout.max_unavailable},
    }


def deployment(isvc: InferenceService) -> Obj:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(isvc, isvc.name),
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


def service(isvc: InferenceService) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(isvc, isvc.name),
        "spec": {
            "type": "ClusterIP",
            "selector": selector_labels(isvc),
            "ports": [
                {
                    "name": c.PORT_NAME,
                    "port": isvc.port,
                    "targetPort": c.PORT_NAME,
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
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _metadata(isvc, isvc.pvc_name),
        "spec": pvc_spec,
    }


def horizontal_pod_autoscaler(isvc: InferenceService) -> Obj | None:
    """Scales the InferenceService itself (its scale subresource), not the Deployment: the HPA
    writes spec.replicas, and the operator carries it to the Deployment like any other change."""
    scaling = isvc.autoscaling
    if scaling is None:
        return None
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": _metadata(isvc, isvc.name),
        "spec": {
            "scaleTargetRef": {"apiVersion": c.API_VERSION, "kind": c.KIND, "name": isvc.name},
            "minReplicas": scaling.min_replicas,
            "maxReplicas": scaling.max_replicas,
            "metrics": [
                {
                    "type": "Pods",
                    "pods": {
                        "metric": {"name": c.WAITING_REQUESTS_METRIC},
                        "target": {"type": "AverageValue", "averageValue": str(scaling.target_waiting_requests)},
                    },
                }
            ],
            # A GPU pod takes minutes to start: scale down one pod at a time, after a long calm.
            "behavior": {
                "scaleDown": {
                    "stabilizationWindowSeconds": 600,
                    "policies": [{"type": "Pods", "value": 1, "periodSeconds": 300}],
                }
            },
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
        "metadata": _metadata(isvc, isvc.name),
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": selector_labels(isvc)},
            # A crash-looping pod must not block node drains.
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }


def config_hash(obj: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def _with_hash(obj: Obj) -> Obj:
    obj["metadata"]["annotations"] = {c.ANNOTATION_CONFIG_HASH: config_hash(obj)}
    return obj


# The kinds the operator may create, in the order it applies them, and the ones it removes
# again when the spec stops asking for them (a PVC is never removed that way: it holds data).
CHILD_KINDS = ("PersistentVolumeClaim", "Deployment", "Service", "PodDisruptionBudget", "HorizontalPodAutoscaler")
REMOVABLE_KINDS = ("PodDisruptionBudget", "HorizontalPodAutoscaler")


def children(isvc: InferenceService) -> list[Obj]:
    """Every object the operator applies for ``isvc``, in apply order."""
    built = [
        persistent_volume_claim(isvc),
        deployment(isvc),
        service(isvc),
        pod_disruption_budget(isvc),
        horizontal_pod_autoscaler(isvc),
    ]
    return [_with_hash(obj) for obj in built if obj is not None]


def render(obj: Mapping[str, Any], default_image: str = c.DEFAULT_SERVER_IMAGE) -> list[Obj]:
    """Parse an InferenceService object and render its children (raises spec.SpecError)."""
    return children(spec_mod.parse(obj, default_image))
