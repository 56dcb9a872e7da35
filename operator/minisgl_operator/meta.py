"""Names and metadata every child of an InferenceService shares: the pod selector, labels,
ownerReference, and the config hash that says what was applied. Both ``render`` (the server's
objects) and ``router`` (the endpoint picker's) build on these.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from . import constants
from .spec import InferenceService

Obj = dict[str, Any]



def pod_selector(name: str) -> dict[str, str]:
    """The labels that select an InferenceService's pods; never change them (Deployment selectors are immutable)."""
    return {constants.LABEL_NAME: constants.APP_NAME, constants.LABEL_INSTANCE: name}


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
        constants.LABEL_COMPONENT: constants.COMPONENT,
        constants.LABEL_PART_OF: constants.APP_NAME,
        constants.LABEL_MANAGED_BY: constants.OPERATOR_NAME,
    }


def owner_reference(isvc: InferenceService) -> Obj:
    return {
        "apiVersion": constants.API_VERSION,
        "kind": constants.KIND,
        "name": isvc.name,
        "uid": isvc.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def child_metadata(isvc: InferenceService, name: str) -> Obj:
    return {
        "name": name,
        "namespace": isvc.namespace,
        "labels": labels(isvc),
        "ownerReferences": [owner_reference(isvc)],
    }


def serving_selector(isvc: InferenceService) -> dict[str, str]:
    """The pods that serve HTTP: all of them, or a multi-node group's leaders only."""
    if isvc.multi_node:
        return {**selector_labels(isvc), constants.LWS_WORKER_INDEX_LABEL: "0"}
    return selector_labels(isvc)


def scale_selector(isvc: InferenceService) -> str:
    """status.selector, which the HPA averages its per-pod metric over: the pods that serve (and
    export /metrics), so a multi-node group's workers do not count as idle pods."""
    return ",".join(f"{k}={v}" for k, v in sorted(serving_selector(isvc).items()))


def pull_policy(image: str) -> str:
    """Kubernetes' own default for a container's imagePullPolicy: Always for ':latest' or no tag (a
    moving reference, which a node's stale copy would silently pin), IfNotPresent for a pinned tag or
    a digest (a GPU pod then restarts from the node's copy when the registry is unreachable)."""
    if "@" in image:
        return "IfNotPresent"
    name = image.rsplit("/", 1)[-1]
    tag = name.partition(":")[2]
    return "Always" if tag in ("", "latest") else "IfNotPresent"


def config_hash(obj: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]
