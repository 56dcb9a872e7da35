"""Reads from kopf's indexes instead of a live GET for every child on every reconcile.

kopf watches each kind the operator writes (label-filtered to ``managed-by=minisgl-operator`` in
the API server) and keeps one index per kind: ``(namespace, name) -> [object]``. It runs no regular
handler before every index has its initial listing, so once a handler runs, an index answers as a
watch-fed cache would. :class:`IndexedApi` serves reads from them:

- ``get``: an indexed object, or (a miss) a live GET: a foreign object of the same name carries no
  operator label, so only the API server can say that the name is free or taken;
- ``get_owned``: the same, but a miss in the index of an always-served kind means "not ours": the
  operator's own objects always carry its label. Custom kinds (LeaderWorkerSet, ScaledObject, the
  router's) fall back to a live GET, since kopf watches only the CRDs the cluster had at its start;
- ``list_pods``: filtered from the pod index;
- writes go to the API server.
A reconcile with nothing to do then reads nothing from the API server, however many events fire.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from . import constants
from .kube import KubeApi

Obj = dict[str, Any]

# kind -> (group, version, plural): what kopf indexes, each by (namespace, name).
INDEXED_KINDS: dict[str, tuple[str, str, str]] = {
    constants.KIND: (constants.GROUP, constants.VERSION, constants.PLURAL),
    "Deployment": ("apps", "v1", "deployments"),
    "Service": ("", "v1", "services"),
    "PersistentVolumeClaim": ("", "v1", "persistentvolumeclaims"),
    "HorizontalPodAutoscaler": ("autoscaling", "v2", "horizontalpodautoscalers"),
    "PodDisruptionBudget": ("policy", "v1", "poddisruptionbudgets"),
    "ConfigMap": ("", "v1", "configmaps"),
    "ServiceAccount": ("", "v1", "serviceaccounts"),
    "Role": ("rbac.authorization.k8s.io", "v1", "roles"),
    "RoleBinding": ("rbac.authorization.k8s.io", "v1", "rolebindings"),
    "Job": ("batch", "v1", "jobs"),
    "Pod": ("", "v1", "pods"),
    "LeaderWorkerSet": (*constants.LWS_API_VERSION.split("/"), "leaderworkersets"),
    "ScaledObject": (*constants.KEDA_API_VERSION.split("/"), "scaledobjects"),
    "InferencePool": (*constants.INFERENCE_POOL_API_VERSION.split("/"), "inferencepools"),
    "HTTPRoute": (*constants.HTTPROUTE_API_VERSION.split("/"), "httproutes"),
}
# Kinds of CRDs the cluster may lack (or install after the operator started, unwatched then); every
# other kind is always served, so always watched, and a miss in its index is an absence.
OPTIONAL_KINDS = frozenset(("LeaderWorkerSet", "ScaledObject", "InferencePool", "HTTPRoute"))


def index_id(kind: str) -> str:
    """The kopf index's id, which is also the keyword its handlers receive it by."""
    return f"minisgl_index_{INDEXED_KINDS[kind][2]}"


def _labels_match(labels: Mapping[str, str] | None, selector: str) -> bool:
    labels = labels or {}
    return all(labels.get(k) == v for k, _, v in (term.partition("=") for term in filter(None, selector.split(","))))


class IndexedApi:
    """:class:`kube.KubeApi` reading from kopf's indexes (``kind -> index``); with none, every read is live."""

    def __init__(self, api: KubeApi, indexes: Mapping[str, Mapping[Any, Any]] | None = None):
        self.live = api
        self.indexes: dict[str, Mapping[Any, Any]] = dict(indexes or {})

    def _indexed(self, kind: str, namespace: str, name: str) -> tuple[bool, Obj | None]:
        """(whether kind is indexed, the object it holds or None)."""
        index = self.indexes.get(kind)
        if index is None:
            return False, None
        store = index.get((namespace, name)) if hasattr(index, "get") else None
        found = next(iter(store), None) if store is not None else None
        return True, copy.deepcopy(dict(found)) if found is not None else None

    def get(self, kind: str, namespace: str, name: str) -> Obj | None:
        _, found = self._indexed(kind, namespace, name)
        return found if found is not None else self.live.get(kind, namespace, name)

    def get_owned(self, kind: str, namespace: str, name: str) -> Obj | None:
        """The object where the operator's own could be: a miss in a built-in kind's index is final."""
        indexed, found = self._indexed(kind, namespace, name)
        if found is not None or (indexed and kind not in OPTIONAL_KINDS):
            return found
        return self.live.get(kind, namespace, name)

    def list_pods(self, namespace: str, label_selector: str) -> list[Obj]:
        index = self.indexes.get("Pod")
        if index is None:
            return self.live.list_pods(namespace, label_selector)
        pods = [pod for (ns, _), store in list(index.items()) if ns == namespace for pod in list(store)]
        return [copy.deepcopy(dict(p)) for p in pods if _labels_match((p.get("metadata") or {}).get("labels"), label_selector)]

    def apply(self, obj: Obj) -> Obj:
        return self.live.apply(obj)

    def delete(self, kind: str, namespace: str, name: str) -> None:
        self.live.delete(kind, namespace, name)

    def patch_status(self, namespace: str, name: str, status: Obj) -> Obj:
        return self.live.patch_status(namespace, name, status)

    def scale(self, namespace: str, name: str, replicas: int) -> None:
        self.live.scale(namespace, name, replicas)

    def create_event(self, event: Obj) -> None:
        self.live.create_event(event)
