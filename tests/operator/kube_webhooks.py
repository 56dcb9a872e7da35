"""The admission webhooks of the components the operator drives, as the fake API runs them.

- KEDA v2.20 (kedacore/keda ``apis/keda/v1alpha1/scaledobject_webhook.go``, webhook
  ``vscaledobject.kb.io``): a ScaledObject is refused when an HPA it does not own already scales its
  target (``verifyHpas``), when another ScaledObject scales the same target (``verifyScaledObjects``),
  when its name or its HPA's name exceeds a label value's 63 characters (``verifyName``), and when
  its replica bounds are inverted (``CheckReplicaCountBoundsAreValid``).
- LWS v0.10 (kubernetes-sigs/lws ``pkg/webhooks/leaderworkerset_webhook.go``, webhooks
  ``mleaderworkerset.kb.io`` and ``vleaderworkerset.kb.io``): ``Default`` fills restartPolicy,
  the rollout strategy and the subdomain policy; ``generalValidate`` refuses a name that is not a
  DNS-1035 label, more than a million groups, a size below 1, and a rolling update with neither
  surge nor unavailability.
KEDA's webhook reads through its manager's client, which controller-runtime backs with informer
caches: an HPA deleted a moment ago may still be listed (``FakeKube.keda_cache_delay``).
A refusal is what controller-runtime makes of a validator's error (``admission.Denied``): 403
Forbidden, which the API server reports as 'admission webhook "NAME" denied the request: ...'.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import kube_names

Obj = dict[str, Any]
KEDA_WEBHOOK, LWS_WEBHOOK = "vscaledobject.kb.io", "vleaderworkerset.kb.io"
HPA_OWNERSHIP_ANNOTATION = "validations.keda.sh/hpa-ownership"
TRANSFER_HPA_ANNOTATION = "scaledobject.keda.sh/transfer-hpa-ownership"
MAX_INT32 = 2**31 - 1


class Denied(Exception):
    def __init__(self, webhook: str, message: str):
        self.webhook = webhook
        super().__init__(f'admission webhook "{webhook}" denied the request: {message}')


def _gvk(api_version: str, kind: str) -> str:
    """GroupVersionKindResource.GVKString: group/version.kind."""
    group, _, version = api_version.rpartition("/")
    return f"{group}/{version}.{kind}"


def keda_hpa_name(so: Obj) -> str:
    """getHpaName: the HPA KEDA creates for a ScaledObject."""
    config = ((so["spec"].get("advanced") or {}).get("horizontalPodAutoscalerConfig") or {})
    return config.get("name") or f"keda-hpa-{so['metadata']['name']}"


def validate_scaled_object(so: Obj, listing: Callable[[str], Iterable[Obj]]) -> None:
    """KEDA's validateWorkload on create and update; ``listing(kind)`` lists the namespace's objects."""
    name, spec = so["metadata"]["name"], so["spec"]
    target = spec["scaleTargetRef"]
    target_gvk = _gvk(target.get("apiVersion", "apps/v1"), target.get("kind", "Deployment"))
    for other in listing("ScaledObject"):
        if other["metadata"]["name"] == name:
            continue
        ref = other["spec"]["scaleTargetRef"]
        if _gvk(ref.get("apiVersion", "apps/v1"), ref.get("kind", "Deployment")) == target_gvk and ref["name"] == target["name"]:
            raise Denied(KEDA_WEBHOOK, f"the workload '{ref['name']}' of type '{target_gvk}' is already managed by "
                                       f"the ScaledObject '{other['metadata']['name']}'")
        if keda_hpa_name(other) == keda_hpa_name(so):
            raise Denied(KEDA_WEBHOOK, f"the HPA '{keda_hpa_name(so)}' is already managed by "
                                       f"the ScaledObject '{other['metadata']['name']}'")
    for hpa in listing("HorizontalPodAutoscaler"):
        if (hpa["metadata"].get("annotations") or {}).get(HPA_OWNERSHIP_ANNOTATION) == "false":
            continue
        ref = hpa["spec"]["scaleTargetRef"]
        if _gvk(ref.get("apiVersion", ""), ref["kind"]) != target_gvk or ref["name"] != target["name"]:
            continue
        owned = any(o.get("kind") == so["kind"] and o.get("name") == name for o in hpa["metadata"].get("ownerReferences") or [])
        if owned:
            continue
        if (so["metadata"].get("annotations") or {}).get(TRANSFER_HPA_ANNOTATION) == "true":
            if (keda_hpa_name(so) == hpa["metadata"]["name"]
                    and (spec.get("advanced") or {}).get("horizontalPodAutoscalerConfig", {}).get("name")):
                continue
            raise Denied(KEDA_WEBHOOK, f"the existing hpa '{hpa['metadata']['name']}' for workload '{target['name']}' "
                                       f"of type '{target_gvk}' must be specified by name in advanced settings "
                                       "to enable ownership transfer")  # fmt: skip
        raise Denied(KEDA_WEBHOOK, f"the workload '{target['name']}' of type '{target_gvk}' is already managed by "
                                   f"the hpa '{hpa['metadata']['name']}'")
    minimum, maximum = spec.get("minReplicaCount", 0), spec.get("maxReplicaCount", 100)
    if minimum > maximum:
        raise Denied(KEDA_WEBHOOK, f"MinReplicaCount={minimum} must be less than MaxReplicaCount={maximum}")
    if "idleReplicaCount" in spec and spec["idleReplicaCount"] >= minimum:
        raise Denied(KEDA_WEBHOOK, f"IdleReplicaCount={spec['idleReplicaCount']} must be less than MinReplicaCount={minimum}")
    if len(name) > kube_names.LABEL_MAX:
        raise Denied(KEDA_WEBHOOK, f'scaledobject name "{name}" is {len(name)} characters long; must be no more than 63 characters '
                                   'because it is used as the "scaledobject.keda.sh/name" label value')  # fmt: skip
    hpa_name = keda_hpa_name(so)
    if len(hpa_name) > kube_names.LABEL_MAX:
        raise Denied(KEDA_WEBHOOK, f'HPA name "{hpa_name}" derived from scaledobject is {len(hpa_name)} characters long; must be no more '
                                   "than 63 characters; set spec.advanced.horizontalPodAutoscalerConfig.name to a shorter name or "
                                   "shorten the scaledobject name")  # fmt: skip


def default_leader_worker_set(lws: Obj) -> None:
    """The LWS mutating webhook's Default, in place."""
    spec = lws.setdefault("spec", {})
    group = spec.setdefault("leaderWorkerTemplate", {})
    if not group.get("restartPolicy"):
        group["restartPolicy"] = "RecreateGroupOnPodRestart"
    if group["restartPolicy"] == "Default":
        group["restartPolicy"] = "None"
    rollout = spec.setdefault("rolloutStrategy", {})
    rollout.setdefault("type", "RollingUpdate")
    if rollout["type"] == "RollingUpdate" and rollout.get("rollingUpdateConfiguration") is None:
        rollout["rollingUpdateConfiguration"] = {"maxUnavailable": 1, "maxSurge": 0, "partition": 0}
    network = spec.setdefault("networkConfig", {})
    network.setdefault("subdomainPolicy", "Shared")


def _scaled(value: Any, total: int, round_up: bool) -> int:
    if isinstance(value, str) and value.endswith("%"):
        share = int(value[:-1]) * total / 100
        return int(-(-share // 1)) if round_up else int(share)
    return int(value)


def validate_leader_worker_set(lws: Obj) -> None:
    """The LWS validating webhook's generalValidate (the parts of it this project's objects meet)."""
    name = lws["metadata"]["name"]
    errors = [f'metadata.name: Invalid value: "{name}": {e}' for e in kube_names.is_dns1035_label(name)]
    spec = lws["spec"]
    replicas, size = spec.get("replicas", 1), spec["leaderWorkerTemplate"].get("size", 1)
    if replicas < 0:
        errors.append(f"spec.replicas: Invalid value: {replicas}: replicas must be equal or greater than 0")
    if replicas > kube_names.LWS_MAX_REPLICAS:
        errors.append(f"spec.replicas: Invalid value: {replicas}: replicas must be equal or less than 1000000")
    if size < 1:
        errors.append(f"spec.leaderWorkerTemplate.size: Invalid value: {size}: size must be equal or greater than 1")
    if replicas * size > MAX_INT32:
        errors.append(f"spec.replicas: Invalid value: {replicas}: the product of replicas and worker replicas must not exceed {MAX_INT32}")
    update = (spec.get("rolloutStrategy") or {}).get("rollingUpdateConfiguration") or {}
    unavailable = _scaled(update.get("maxUnavailable", 1), replicas, False)
    surge = _scaled(update.get("maxSurge", 0), replicas, True)
    if unavailable == 0 and surge == 0 and replicas != 0:
        errors.append(f"spec.rolloutStrategy.rollingUpdateConfiguration.maxUnavailable: Invalid value: {update.get('maxUnavailable')}: "
                      "must not be 0 when `maxSurge` is 0")  # fmt: skip
    if errors:
        raise Denied(LWS_WEBHOOK, "[" + ", ".join(errors) + "]" if len(errors) > 1 else errors[0])
