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
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from . import constants
from .kube import CUSTOM_KINDS, KubeApi

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
    # The custom kinds (LeaderWorkerSet, ScaledObject, the router's and its gateway's): the API
    # adapter's table.
    **CUSTOM_KINDS,
}
# Kinds of CRDs the cluster may lack (or install after the operator started, unwatched then); every
# other kind is always served, so always watched, and a miss in its index is an absence.
# These are the custom kinds but the operator's own.
OPTIONAL_KINDS = frozenset(CUSTOM_KINDS) - {constants.KIND}


# How long a live GET that found no object of an optional kind is believed (the operator's own apply
# forgets it at once): where a CRD is not installed every reconcile would otherwise GET each such
# child, for a 404 each time.
ABSENT_TTL_SECONDS = 60.0
# kopf's event loop updates an index while a handler thread copies it; a copy that meets a change
# ("dictionary changed size during iteration") is taken again.
COPY_ATTEMPTS = 5
T = TypeVar("T")


def _copied(read: Callable[[], T]) -> T:
    for _ in range(COPY_ATTEMPTS - 1):
        try:
            return read()
        except RuntimeError:
            continue
    return read()


def index_id(kind: str) -> str:
    """The kopf index's id, which is also the keyword its handlers receive it by."""
    return f"minisgl_index_{INDEXED_KINDS[kind][2]}"


def _labels_match(labels: Mapping[str, str] | None, selector: str) -> bool:
    labels = labels or {}
    return all(labels.get(k) == v for k, _, v in (term.partition("=") for term in filter(None, selector.split(","))))


class IndexedApi:
    """:class:`kube.KubeApi` reading from kopf's indexes (``kind -> index``); with none, every read is live."""

    def __init__(self, api: KubeApi, indexes: Mapping[str, Mapping[Any, Any]] | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.live = api
        self.indexes: dict[str, Mapping[Any, Any]] = dict(indexes or {})
        self.clock = clock
        self._absent: dict[tuple[str, str, str], float] = {}  # (kind, namespace, name) -> believed until

    def _indexed(self, kind: str, namespace: str, name: str) -> tuple[bool, Obj | None]:
        """(whether kind is indexed, the object it holds or None)."""
        index = self.indexes.get(kind)
        if index is None:
            return False, None
        def read() -> Obj | None:
            store = index.get((namespace, name)) if hasattr(index, "get") else None
            found = next(iter(store), None) if store is not None else None
            return copy.deepcopy(dict(found)) if found is not None else None

        return True, _copied(read)

    def get(self, kind: str, namespace: str, name: str) -> Obj | None:
        _, found = self._indexed(kind, namespace, name)
        return found if found is not None else self.live.get(kind, namespace, name)

    def get_owned(self, kind: str, namespace: str, name: str) -> Obj | None:
        """The object where the operator's own could be: a miss in a built-in kind's index is final."""
        indexed, found = self._indexed(kind, namespace, name)
        if found is not None or (indexed and kind not in OPTIONAL_KINDS):
            return found
        key = (kind, namespace, name)
        if self._absent.get(key, 0.0) > self.clock():
            return None
        found = self.live.get(kind, namespace, name)
        if found is None and kind in OPTIONAL_KINDS:
            self._absent[key] = self.clock() + ABSENT_TTL_SECONDS
        return found

    def list_pods(self, namespace: str, label_selector: str) -> list[Obj]:
        index = self.indexes.get("Pod")
        if index is None:
            return self.live.list_pods(namespace, label_selector)
        pods = _copied(lambda: [pod for (ns, _), store in list(index.items()) if ns == namespace for pod in list(store)])
        return [copy.deepcopy(dict(p)) for p in pods if _labels_match((p.get("metadata") or {}).get("labels"), label_selector)]

    def apply(self, obj: Obj) -> Obj:
        self._absent.pop((obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"]), None)
        return self.live.apply(obj)

    def delete(self, kind: str, namespace: str, name: str, uid: str | None = None) -> None:
        self.live.delete(kind, namespace, name, uid=uid)

    def patch_status(self, namespace: str, name: str, status: Obj) -> Obj:
        return self.live.patch_status(namespace, name, status)

    def scale(self, namespace: str, name: str, replicas: int) -> None:
        self.live.scale(namespace, name, replicas)

    def create_event(self, event: Obj) -> None:
        self.live.create_event(event)
