"""A recording, in-memory fake of the operator's Kubernetes API adapter (minisgl_operator.kube.KubeApi).

It behaves like an API server where it matters to the reconciler:
- ``apply`` creates or replaces the object, keeps uid/creationTimestamp/status, bumps
  resourceVersion, and bumps a Deployment's metadata.generation when its spec changed;
- it fills in defaults the way the API server does (restartPolicy, terminationMessagePath,
  probe successThreshold and scheme, a Service's clusterIP, ...) and canonicalizes quantities
  (a limit of ``nvidia.com/gpu: 1`` comes back as ``"1"``, ``cpu: 4000m`` as ``"4"``), so a
  reconciler that compared naively would see drift where there is none;
- ``patch_status`` is a JSON merge patch of the status subresource.
It does not model server-side apply's field ownership (an apply replaces the whole object), nor
admission, RBAC or the controllers: tests play the Deployment controller with ``set_deployment_status``.

Every call is recorded in ``calls`` as (verb, kind, namespace, name); ``writes()`` lists the
calls that change something.
"""

from __future__ import annotations

import copy
import itertools
from decimal import Decimal
from typing import Any, Callable

from minisgl_operator import constants as c
from minisgl_operator.kube import ApiError

Obj = dict[str, Any]
WRITE_VERBS = ("apply", "delete", "patch_status", "create_event")
KNOWN_KINDS = ("Deployment", "Service", "PersistentVolumeClaim", "HorizontalPodAutoscaler", "PodDisruptionBudget")


def _canonical_quantity(value: Any) -> str:
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str) and value.endswith("m") and value[:-1].isdigit():
        milli = Decimal(value[:-1])
        return str(int(milli / 1000)) if milli % 1000 == 0 else value
    return value


def _default_pod_spec(pod: Obj) -> None:
    pod.setdefault("restartPolicy", "Always")
    pod.setdefault("dnsPolicy", "ClusterFirst")
    pod.setdefault("schedulerName", "default-scheduler")
    for container in pod.get("containers", []):
        container.setdefault("terminationMessagePath", "/dev/termination-log")
        container.setdefault("terminationMessagePolicy", "File")
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            if probe in container:
                container[probe].setdefault("successThreshold", 1)
                container[probe].get("httpGet", {}).setdefault("scheme", "HTTP")
        for kind in ("limits", "requests"):
            res = container.get("resources", {}).get(kind)
            if res:
                container["resources"][kind] = {k: _canonical_quantity(v) for k, v in res.items()}


def _apply_defaults(obj: Obj) -> None:
    kind = obj["kind"]
    if kind == "Deployment":
        _default_pod_spec(obj["spec"]["template"]["spec"])
    elif kind == "Service":
        obj["spec"].setdefault("clusterIP", "10.96.12.34")
        obj["spec"].setdefault("clusterIPs", ["10.96.12.34"])
        obj["spec"].setdefault("sessionAffinity", "None")
        obj["spec"].setdefault("internalTrafficPolicy", "Cluster")
        obj["spec"].setdefault("ipFamilies", ["IPv4"])
    elif kind == "PersistentVolumeClaim":
        obj["spec"].setdefault("volumeMode", "Filesystem")


def _merge_patch(target: Obj, patch: Obj) -> Obj:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge_patch(target[key], value)
        else:
            target[key] = copy.deepcopy(value)
    return target


class FakeKube:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], Obj] = {}
        self.calls: list[tuple[str, str, str, str]] = []
        self.events: list[Obj] = []
        self._versions = itertools.count(1000)
        self._uids = itertools.count(1)
        # verb -> error to raise on the next call of that verb (once)
        self.fail_next: dict[str, ApiError] = {}

    # --- the KubeApi protocol ----------------------------------------------------------------

    def get(self, kind: str, namespace: str, name: str) -> Obj | None:
        self._record("get", kind, namespace, name)
        found = self.objects.get((kind, namespace, name))
        return copy.deepcopy(found) if found is not None else None

    def apply(self, obj: Obj) -> Obj:
        meta = obj["metadata"]
        self._record("apply", obj["kind"], meta["namespace"], meta["name"])
        assert obj["kind"] in KNOWN_KINDS, f"the operator applied an unexpected kind {obj['kind']}"
        key = (obj["kind"], meta["namespace"], meta["name"])
        old = self.objects.get(key)
        new = copy.deepcopy(obj)
        _apply_defaults(new)
        new_meta = new["metadata"]
        new_meta["resourceVersion"] = str(next(self._versions))
        if old is None:
            new_meta["uid"] = f"child-uid-{next(self._uids)}"
            new_meta["creationTimestamp"] = "2026-01-01T00:00:00Z"
            new_meta["generation"] = 1
        else:
            new_meta["uid"] = old["metadata"]["uid"]
            new_meta["creationTimestamp"] = old["metadata"]["creationTimestamp"]
            generation = old["metadata"].get("generation", 1)
            new_meta["generation"] = generation + (1 if old.get("spec") != new.get("spec") else 0)
            if "status" in old:
                new["status"] = copy.deepcopy(old["status"])
        self.objects[key] = new
        return copy.deepcopy(new)

    def delete(self, kind: str, namespace: str, name: str) -> None:
        self._record("delete", kind, namespace, name)
        self.objects.pop((kind, namespace, name), None)

    def patch_status(self, namespace: str, name: str, status: Obj) -> Obj:
        self._record("patch_status", c.KIND, namespace, name)
        key = (c.KIND, namespace, name)
        obj = self.objects[key]
        obj["status"] = _merge_patch(obj.get("status") or {}, status)
        obj["metadata"]["resourceVersion"] = str(next(self._versions))
        return copy.deepcopy(obj)

    def create_event(self, event: Obj) -> None:
        involved = event["involvedObject"]
        self._record("create_event", "Event", involved["namespace"], involved["name"])
        self.events.append(copy.deepcopy(event))

    # --- what the tests do: users, controllers, inspection -------------------------------------

    def _record(self, verb: str, kind: str, namespace: str, name: str) -> None:
        self.calls.append((verb, kind, namespace, name))
        error = self.fail_next.pop(verb, None)
        if error is not None:
            raise error

    def writes(self) -> list[tuple[str, str, str, str]]:
        return [call for call in self.calls if call[0] in WRITE_VERBS]

    def reset_calls(self) -> None:
        self.calls.clear()

    def create_inferenceservice(self, name: str, spec: Obj, namespace: str = "llm") -> Obj:
        """What `kubectl apply` of an InferenceService leaves in the API server."""
        body = {
            "apiVersion": c.API_VERSION,
            "kind": c.KIND,
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": f"isvc-uid-{next(self._uids)}",
                "generation": 1,
                "resourceVersion": str(next(self._versions)),
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"},
            },
            "spec": copy.deepcopy(spec),
        }
        self.objects[(c.KIND, namespace, name)] = body
        return copy.deepcopy(body)

    def inferenceservice(self, name: str, namespace: str = "llm") -> Obj:
        return copy.deepcopy(self.objects[(c.KIND, namespace, name)])

    def update_spec(self, name: str, change: Callable[[Obj], None], namespace: str = "llm") -> Obj:
        """A user edits the spec: the API server bumps metadata.generation."""
        body = self.objects[(c.KIND, namespace, name)]
        change(body["spec"])
        body["metadata"]["generation"] += 1
        body["metadata"]["resourceVersion"] = str(next(self._versions))
        return copy.deepcopy(body)

    def edit(self, kind: str, name: str, change: Callable[[Obj], None], namespace: str = "llm") -> Obj:
        """Someone else (kubectl edit, another controller) changes a child: drift."""
        obj = self.objects[(kind, namespace, name)]
        before = copy.deepcopy(obj.get("spec"))
        change(obj)
        if kind == "Deployment" and obj.get("spec") != before:
            obj["metadata"]["generation"] += 1
        obj["metadata"]["resourceVersion"] = str(next(self._versions))
        return copy.deepcopy(obj)

    def remove(self, kind: str, name: str, namespace: str = "llm") -> None:
        """Someone deletes a child behind the operator's back."""
        del self.objects[(kind, namespace, name)]

    def add_foreign(self, obj: Obj) -> None:
        """An object the operator does not own (no ownerReference to the InferenceService)."""
        meta = obj["metadata"]
        stored = copy.deepcopy(obj)
        stored["metadata"].setdefault("uid", f"foreign-uid-{next(self._uids)}")
        self.objects[(obj["kind"], meta["namespace"], meta["name"])] = stored

    def set_deployment_status(self, name: str, namespace: str = "llm", **status: Any) -> Obj:
        """Play the Deployment controller: observe the current generation and report pods."""
        dep = self.objects[("Deployment", namespace, name)]
        dep["status"] = {"observedGeneration": dep["metadata"]["generation"], **status}
        dep["metadata"]["resourceVersion"] = str(next(self._versions))
        return copy.deepcopy(dep)

    def children(self, namespace: str = "llm") -> dict[tuple[str, str], Obj]:
        return {(k, n): o for (k, ns, n), o in self.objects.items() if ns == namespace and k != c.KIND}
