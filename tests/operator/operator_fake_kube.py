"""A recording, in-memory fake of the operator's Kubernetes API adapter (minisgl_operator.kube.KubeApi).

It behaves like an API server where it matters to the reconciler:
- ``apply`` is server-side apply (kube_apply.py): fields merge into the stored object by owner,
  a field the applier stops setting goes unless someone else owns it, ``edit`` (kubectl edit) takes
  the fields it changes, and a field the schema does not declare fails with the API server's 500;
  it keeps uid/creationTimestamp/status, bumps resourceVersion, and bumps a Deployment's
  metadata.generation when its spec changed;
- it refuses what a real API server refuses with 422 Invalid: a name or label value over its limit
  (kube_names.py), a change to a PVC's spec other than growing its storage request (the spec is
  immutable), a change to a Deployment's selector, a custom resource (LeaderWorkerSet,
  ScaledObject, InferencePool, HTTPRoute, Istio's and GKE's gateway kinds) that its published CRD's schema refuses (operator_crds.py,
  the vendored CRDs), an InferenceService that the chart's CRD refuses (``submit_inferenceservice``),
  and (``apply_crd``) a CRD whose CEL rules cost too much (cel_cost.py);
- a kind in ``uninstalled`` (a CRD the cluster lacks) has no API path: an apply is 404 NotFound, a
  GET or delete the adapter's "no such object" (it reads their 404 so);
- it runs the admission webhooks of KEDA (a ScaledObject whose target an HPA already scales) and
  LWS (defaulting, validation), answering 403 as they do (kube_webhooks.py);
- it fills in defaults the way the API server does (restartPolicy, terminationMessagePath,
  probe successThreshold and scheme, a Service's clusterIP, a PVC's default storage class, ...)
  and canonicalizes quantities (a limit of ``nvidia.com/gpu: 1`` comes back as ``"1"``,
  ``cpu: 4000m`` as ``"4"``), so a reconciler that compared naively would see drift where there is none;
- deletion honours finalizers (an object with finalizers only gets a deletionTimestamp, a PVC gets
  kubernetes.io/pvc-protection and goes only once no pod mounts it) and the garbage collector
  removes the dependents of a deleted owner (ownerReferences);
- lists and watches filter by label selector in the "server" (``list_pods``, ``watch``);
- ``patch_status`` is a JSON merge patch of the status subresource.
``run_controllers`` plays the Deployment controller, the scheduler and the kubelet on a pool of
GPU nodes (``add_node``): rolling updates honour maxSurge/maxUnavailable, a pod needs free
``nvidia.com/gpu`` on one node, a ReadWriteOnce claim in use on one node makes every other node
unschedulable for the pod (the Multi-Attach failure), and a missing Secret, an image that cannot
be pulled or a container that runs out of memory show in the pod's status as the kubelet reports them.
It also plays the KEDA operator (keda-hpa-NAME for each ScaledObject). It does not model RBAC or
time (progress deadlines: tests set them with ``set_deployment_status``).

Every call is recorded in ``calls`` as (verb, kind, namespace, name); ``writes()`` lists the
calls that change something.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import cel_cost
import kube_apply
import kube_hpa
import kube_lws
import kube_names
import kube_nodes
import kube_volumes
import kube_webhooks
import operator_crds

from minisgl_operator import constants
from minisgl_operator.kube import ApiError

Obj = dict[str, Any]
WRITE_VERBS = ("apply", "delete", "patch_status", "scale", "create_event")
KNOWN_KINDS = (
    "Deployment", "Service", "PersistentVolumeClaim", "HorizontalPodAutoscaler", "PodDisruptionBudget", "ConfigMap",
    "ServiceAccount", "Role", "RoleBinding", "LeaderWorkerSet", "ScaledObject", "InferencePool", "HTTPRoute", "Job",
    "DestinationRule", "HealthCheckPolicy", "GCPBackendPolicy",
)  # fmt: skip
# What the API server answers for a kind no installed CRD serves: its path does not exist (404), on a
# read, a write or a delete alike.
NO_SUCH_RESOURCE = "the server could not find the requested resource"
DEFAULT_STORAGE_CLASS = "standard"
EDITOR, FOREIGN_MANAGER = "kubectl-edit", "kubectl-client-side-apply"  # field managers of other writers
SINGLE_NODE_MODES = ("ReadWriteOnce", "ReadWriteOncePod")
# A PVC in use by a pod is only deleted once no pod uses it.
PVC_PROTECTION = "kubernetes.io/pvc-protection"
# The kubelet's view of an image: fake.image_faults[image] = "ImagePullBackOff" or "OOMKilled".
IMAGE_FAULTS = ("ImagePullBackOff", "ErrImagePull", "OOMKilled", "CrashLoopBackOff")


def _default_pod_spec(pod: Obj) -> None:
    pod.setdefault("restartPolicy", "Always")
    pod.setdefault("dnsPolicy", "ClusterFirst")
    pod.setdefault("schedulerName", "default-scheduler")
    for container in [*pod.get("initContainers", []), *pod.get("containers", [])]:
        container.setdefault("terminationMessagePath", "/dev/termination-log")
        container.setdefault("terminationMessagePolicy", "File")
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            if probe in container:
                container[probe].setdefault("successThreshold", 1)
                container[probe].get("httpGet", {}).setdefault("scheme", "HTTP")
        for kind in ("limits", "requests"):
            res = container.get("resources", {}).get(kind)
            if res:
                container["resources"][kind] = {k: kube_apply.canonical_quantity(v) for k, v in res.items()}


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
        # The DefaultStorageClass admission plugin.
        obj["spec"].setdefault("storageClassName", DEFAULT_STORAGE_CLASS)


def _storage(pvc: Obj) -> Decimal:
    from minisgl_operator import quantity

    return quantity.parse(pvc["spec"]["resources"]["requests"]["storage"]) or Decimal(0)


def _invalid(obj: Obj, old: Obj | None, new: Obj) -> str | None:
    """What a real API server's validation refuses on an update (422 Invalid)."""
    if old is None:
        return None
    kind, name = obj["kind"], obj["metadata"]["name"]
    if kind == "PersistentVolumeClaim":
        before, after = dict(old["spec"]), dict(new["spec"])
        grown = _storage(new) >= _storage(old)
        before.pop("resources"), after.pop("resources")
        if before != after or not grown:
            return (
                f'PersistentVolumeClaim "{name}" is invalid: spec: Forbidden: spec is immutable after creation '
                "except resources.requests and volumeAttributesClassName for bound claims"
            )
    if kind == "Deployment" and old["spec"].get("selector") != new["spec"].get("selector"):
        return f'Deployment.apps "{name}" is invalid: spec.selector: Invalid value: field is immutable'
    return None


def matches(labels: dict[str, str] | None, selector: str) -> bool:
    """An equality-based label selector ('a=b,c=d'), as the API server evaluates it."""
    labels = labels or {}
    for term in filter(None, selector.split(",")):
        key, _, value = term.partition("=")
        if labels.get(key) != value:
            return False
    return True


def _template_hash(template: Obj) -> str:
    return hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:10]


def _mirror_images(pod_spec: Obj, registry: str, mirror: str) -> None:
    """A mutating admission webhook that sends image pulls to a mirror (Kyverno's or
    k8s-image-swapper's image rewrite): it rewrites each container's image on every create and update.
    Server-side apply attributes a webhook's changes to the request's field manager, so managedFields
    show the operator owning the rewritten value."""
    for container in [*pod_spec.get("initContainers", []), *pod_spec.get("containers", [])]:
        if container.get("image", "").startswith(registry):
            container["image"] = mirror + container["image"][len(registry):]


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
        # (kind, namespace, name) -> field manager -> the field paths it owns (server-side apply)
        self.managed: dict[tuple[str, str, str], dict[str, set]] = {}
        self.nodes: dict[str, int] = {}  # node name -> nvidia.com/gpu it has
        self.node_allocatable: dict[str, dict[str, Decimal]] = {}  # node name -> cpu, memory, disk it offers
        self.image_faults: dict[str, str] = {}
        self.image_mirror: tuple[str, str] | None = None  # a mutating webhook's (registry, mirror)
        # KEDA's webhook sees a deleted HPA for this many more of its admissions (kube_webhooks.py)
        self.keda_cache_delay = 0
        self._keda_stale: list[tuple[Obj, int]] = []
        self.now = "2026-01-01T00:00:00Z"  # when the controllers act (a pod condition's lastTransitionTime)
        self.crash_logs: dict[str, str] = {}  # image -> what its crashing container last logs
        self.lws_version = kube_lws.CURRENT_VERSION  # the LeaderWorkerSet controller's (kube_lws.py)
        # (namespace, claim) -> (uid, gid) owning the volume's root; root's unless set (kube_volumes.py)
        self.volume_owner: dict[tuple[str, str], tuple[int, int]] = {}
        self._pod_names = itertools.count(1)
        self.uninstalled: set[str] = set()  # custom kinds whose CRD the cluster lacks

    # --- the KubeApi protocol ----------------------------------------------------------------

    def get(self, kind: str, namespace: str, name: str) -> Obj | None:
        self._record("get", kind, namespace, name)
        if kind in self.uninstalled:  # the adapter reads a 404 as "no such object" (kube.KubernetesApi.get)
            return None
        found = self.objects.get((kind, namespace, name))
        return copy.deepcopy(found) if found is not None else None

    def apply(self, obj: Obj, manager: str = constants.FIELD_MANAGER, force: bool = True) -> Obj:
        """Server-side apply (kube_apply.py), as the operator's field manager with force unless
        told otherwise; then defaulting, validation (422) and admission webhooks (403)."""
        meta = obj["metadata"]
        self._record("apply", obj["kind"], meta["namespace"], meta["name"])
        assert obj["kind"] in KNOWN_KINDS, f"the operator applied an unexpected kind {obj['kind']}"
        if obj["kind"] in self.uninstalled:
            raise ApiError(404, "NotFound", NO_SUCH_RESOURCE)
        key = (obj["kind"], meta["namespace"], meta["name"])
        old = self.objects.get(key)
        managed = copy.deepcopy(self.managed.get(key, {}))
        try:
            new = kube_apply.apply(old, obj, managed, manager, force)
        except kube_apply.TypeError_ as exc:
            group_version = obj["apiVersion"] if "/" in obj["apiVersion"] else f"/{obj['apiVersion']}"
            where = f"{meta['namespace']}/{meta['name']}; {group_version}, Kind={obj['kind']}"
            raise ApiError(500, "InternalError", f"failed to create typed patch object ({where}): {exc}") from None
        except kube_apply.Conflict as exc:
            raise ApiError(409, "Conflict", str(exc)) from None
        _apply_defaults(new)
        if self.image_mirror is not None and obj["kind"] == "Deployment":
            _mirror_images(new["spec"]["template"]["spec"], *self.image_mirror)  # a mutating webhook
        if obj["kind"] == "LeaderWorkerSet":
            kube_webhooks.default_leader_worker_set(new)  # the LWS mutating webhook
        problems = kube_names.object_problems(new)
        if operator_crds.is_custom(new):
            # The API server validates a custom resource against its CRD's schema (422 Invalid).
            problems += operator_crds.custom_errors(new)
        if problems:
            raise ApiError(422, "Invalid", f'{obj["kind"]} "{meta["name"]}" is invalid: ' + "; ".join(problems))
        problem = _invalid(obj, old, new)
        if problem is not None:
            raise ApiError(422, "Invalid", problem)
        try:
            if obj["kind"] == "ScaledObject":
                kube_webhooks.validate_scaled_object(new, lambda kind: self._keda_cache(kind, meta["namespace"]))
            if obj["kind"] == "LeaderWorkerSet":
                kube_webhooks.validate_leader_worker_set(new)
        except kube_webhooks.Denied as exc:
            raise ApiError(403, "Forbidden", str(exc)) from None
        new_meta = new["metadata"]
        new_meta["resourceVersion"] = str(next(self._versions))
        if old is None:
            if obj["kind"] == "PersistentVolumeClaim":  # the StorageObjectInUseProtection admission plugin
                new_meta.setdefault("finalizers", []).append(PVC_PROTECTION)
            new_meta["uid"] = f"child-uid-{next(self._uids)}"
            new_meta["creationTimestamp"] = "2026-01-01T00:00:00Z"
            new_meta["generation"] = 1
        else:
            generation = old["metadata"].get("generation", 1)
            new_meta["generation"] = generation + (1 if old.get("spec") != new.get("spec") else 0)
        self.objects[key] = new
        self.managed[key] = managed
        return copy.deepcopy(new)

    def apply_crd(self, crd: Obj) -> Obj:
        """Server-side apply of a CustomResourceDefinition: refused (422) where the API server's
        estimate of its CEL rules' cost exceeds its limits (cel_cost.py)."""
        name = crd["metadata"]["name"]
        self._record("apply", "CustomResourceDefinition", "", name)
        problems = cel_cost.crd_problems(crd)
        if problems:
            raise ApiError(422, "Invalid", f'CustomResourceDefinition.apiextensions.k8s.io "{name}" is invalid: [{", ".join(problems)}]')
        stored = copy.deepcopy(crd)
        stored["metadata"]["resourceVersion"] = str(next(self._versions))
        self.objects[("CustomResourceDefinition", "", name)] = stored
        return copy.deepcopy(stored)

    def _keda_cache(self, kind: str, namespace: str) -> list[Obj]:
        """What KEDA's webhook lists: the objects, and for a few admissions more those deleted lately."""
        stale = [copy.deepcopy(o) for o, _ in self._keda_stale if o["kind"] == kind and o["metadata"]["namespace"] == namespace]
        if kind == "HorizontalPodAutoscaler":  # once per admission
            self._keda_stale = [(o, n - 1) for o, n in self._keda_stale if n > 1]
        return self.watch(kind, "", namespace) + stale

    def delete(self, kind: str, namespace: str, name: str, uid: str | None = None) -> None:
        self._record("delete", kind, namespace, name)
        if kind in self.uninstalled:  # a 404, which the adapter takes for "already gone" (kube.KubernetesApi.delete)
            return
        stored = self.objects.get((kind, namespace, name))
        if uid and stored is not None and stored["metadata"].get("uid") != uid:
            raise ApiError(409, "Conflict", f"Precondition failed: UID in precondition: {uid}, "
                                            f"UID in object meta: {stored['metadata'].get('uid')}")  # fmt: skip
        if kind == "HorizontalPodAutoscaler" and self.keda_cache_delay and (kind, namespace, name) in self.objects:
            self._keda_stale.append((copy.deepcopy(self.objects[(kind, namespace, name)]), self.keda_cache_delay))
        self._delete((kind, namespace, name))
        self._release_claims()

    def list_pods(self, namespace: str, label_selector: str) -> list[Obj]:
        self._record("list", "Pod", namespace, label_selector)
        return self.watch("Pod", label_selector, namespace)

    def patch_status(self, namespace: str, name: str, status: Obj) -> Obj:
        self._record("patch_status", constants.KIND, namespace, name)
        key = (constants.KIND, namespace, name)
        obj = self.objects[key]
        obj["status"] = _merge_patch(obj.get("status") or {}, status)
        obj["metadata"]["resourceVersion"] = str(next(self._versions))
        return copy.deepcopy(obj)

    def scale(self, namespace: str, name: str, replicas: int) -> None:
        """A merge patch of an InferenceService's scale subresource (its spec.replicas)."""
        self._record("scale", constants.KIND, namespace, name)
        self._set_replicas(namespace, name, replicas)

    def _set_replicas(self, namespace: str, name: str, replicas: int) -> None:
        body = self.objects[(constants.KIND, namespace, name)]
        if body["spec"].get("replicas") != replicas:
            body["spec"]["replicas"] = replicas
            body["metadata"]["generation"] += 1
            body["metadata"]["resourceVersion"] = str(next(self._versions))

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
            "apiVersion": constants.API_VERSION,
            "kind": constants.KIND,
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
        self.objects[(constants.KIND, namespace, name)] = body
        return copy.deepcopy(body)

    def submit_inferenceservice(self, name: str, spec: Obj, namespace: str = "llm") -> Obj:
        """`kubectl apply` of a new InferenceService to an API server with the chart's CRD: 422
        Invalid for what the CRD's schema, list keys or CEL rules refuse (operator_crds), else what
        ``create_inferenceservice`` stores. (That one stores any spec, as a CRD of an older
        operator would let through: the operator's own checks are what those tests exercise.)"""
        obj = {"apiVersion": constants.API_VERSION, "kind": constants.KIND, "metadata": {"name": name, "namespace": namespace},
               "spec": copy.deepcopy(spec)}
        problems = operator_crds.custom_errors(obj)
        if problems:
            raise ApiError(422, "Invalid", f'{constants.KIND}.{constants.GROUP} "{name}" is invalid: ' + "; ".join(problems))
        return self.create_inferenceservice(name, spec, namespace)

    def inferenceservice(self, name: str, namespace: str = "llm") -> Obj:
        return copy.deepcopy(self.objects[(constants.KIND, namespace, name)])

    def update_spec(self, name: str, change: Callable[[Obj], None], namespace: str = "llm") -> Obj:
        """A user edits the spec: the API server bumps metadata.generation."""
        body = self.objects[(constants.KIND, namespace, name)]
        change(body["spec"])
        body["metadata"]["generation"] += 1
        body["metadata"]["resourceVersion"] = str(next(self._versions))
        return copy.deepcopy(body)

    def edit(self, kind: str, name: str, change: Callable[[Obj], None], namespace: str = "llm") -> Obj:
        """Someone else (kubectl edit, another controller) changes a child: drift. The editor
        becomes the manager of the fields it changed (an update takes them from the applier)."""
        obj = self.objects[(kind, namespace, name)]
        before = copy.deepcopy(obj)
        change(obj)
        if kind in KNOWN_KINDS:
            kube_apply.update(before, obj, self.managed.setdefault((kind, namespace, name), {}), EDITOR)
        if kind == "Deployment" and obj.get("spec") != before.get("spec"):
            obj["metadata"]["generation"] += 1
        obj["metadata"]["resourceVersion"] = str(next(self._versions))
        return copy.deepcopy(obj)

    def remove(self, kind: str, name: str, namespace: str = "llm") -> None:
        """Someone deletes a child behind the operator's back."""
        del self.objects[(kind, namespace, name)]
        self.managed.pop((kind, namespace, name), None)

    def add_foreign(self, obj: Obj) -> None:
        """An object the operator does not own (no ownerReference to the InferenceService)."""
        meta = obj["metadata"]
        stored = copy.deepcopy(obj)
        stored["metadata"].setdefault("uid", f"foreign-uid-{next(self._uids)}")
        key = (obj["kind"], meta["namespace"], meta["name"])
        self.objects[key] = stored
        if obj["kind"] in KNOWN_KINDS:
            self.managed[key] = {FOREIGN_MANAGER: set(kube_apply.fieldset(stored))}

    def set_deployment_status(self, name: str, namespace: str = "llm", **status: Any) -> Obj:
        """Play the Deployment controller: observe the current generation and report pods."""
        dep = self.objects[("Deployment", namespace, name)]
        dep["status"] = {"observedGeneration": dep["metadata"]["generation"], **status}
        dep["metadata"]["resourceVersion"] = str(next(self._versions))
        return copy.deepcopy(dep)

    def children(self, namespace: str = "llm") -> dict[tuple[str, str], Obj]:
        return {(k, n): o for (k, ns, n), o in self.objects.items() if ns == namespace and k not in (constants.KIND, "Pod", "Secret")}

    # --- deletion: finalizers and the garbage collector --------------------------------------

    def _delete(self, key: tuple[str, str, str]) -> None:
        obj = self.objects.get(key)
        if obj is None:
            return
        if obj["metadata"].get("finalizers"):
            obj["metadata"].setdefault("deletionTimestamp", "2026-01-01T01:00:00Z")
            return
        del self.objects[key]
        self.managed.pop(key, None)
        uid = obj["metadata"].get("uid")
        for other_key, other in list(self.objects.items()):
            refs = other["metadata"].get("ownerReferences") or []
            if other_key[1] == key[1] and any(ref.get("uid") == uid for ref in refs):
                self._delete(other_key)

    def user_delete(self, kind: str, name: str, namespace: str = "llm") -> None:
        """`kubectl delete` (or the namespace's deletion): waits for finalizers, then the GC cascades."""
        self._delete((kind, namespace, name))
        self._release_claims()

    def _release_claims(self) -> None:
        """The PVC protection controller: a deleted PVC goes once no pod mounts it."""
        for (kind, namespace, name), obj in list(self.objects.items()):
            meta = obj["metadata"]
            if kind != "PersistentVolumeClaim" or not meta.get("deletionTimestamp"):
                continue
            if not any(name in self._claims(pod) for pod in self.pods(namespace=namespace)):
                self.remove_finalizer(kind, name, PVC_PROTECTION, namespace)

    def remove_finalizer(self, kind: str, name: str, finalizer: str, namespace: str = "llm") -> None:
        """What the finalizer's owner does when it is done; the object goes once none is left."""
        key = (kind, namespace, name)
        meta = self.objects[key]["metadata"]
        meta["finalizers"] = [f for f in meta.get("finalizers", []) if f != finalizer]
        if not meta["finalizers"] and meta.get("deletionTimestamp"):
            del meta["finalizers"], meta["deletionTimestamp"]
            self._delete(key)
            self._release_claims()

    # --- watches, filtered in the "API server" -------------------------------------------------

    def watch(self, kind: str, label_selector: str, namespace: str | None = None) -> list[Obj]:
        """The objects a watch with this label selector streams (what kopf's handlers then see)."""
        return [
            copy.deepcopy(obj)
            for (k, ns, _), obj in sorted(self.objects.items())
            if k == kind and (namespace is None or ns == namespace) and matches(obj["metadata"].get("labels"), label_selector)
        ]

    # --- the Deployment controller, the scheduler and the kubelet -----------------------------

    def add_node(self, name: str, gpus: int = 0, shape: str | None = None) -> None:
        """A GPU node; with ``shape`` (kube_nodes.SHAPES) also its allocatable CPU, memory and disk,
        which the scheduler then fits pods into (a node without a shape has no limit but GPUs)."""
        if shape is not None:
            self.nodes[name] = kube_nodes.SHAPES[shape].gpus
            self.node_allocatable[name] = kube_nodes.allocatable(kube_nodes.SHAPES[shape])
        else:
            self.nodes[name] = gpus

    def add_secret(self, name: str, keys: dict[str, str], namespace: str = "llm") -> None:
        self.objects[("Secret", namespace, name)] = {
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace},
            "data": dict(keys),
        }  # fmt: skip

    def pods(self, deployment: str | None = None, namespace: str = "llm") -> list[Obj]:
        return [
            o for (k, ns, _), o in sorted(self.objects.items())
            if k == "Pod" and ns == namespace and (deployment is None or o["metadata"]["_deployment"] == deployment)
        ]  # fmt: skip

    def run_controllers(self, namespace: str = "llm", max_steps: int = 100) -> None:
        """Reconcile every Deployment until nothing changes: roll, schedule, start, report; and
        play the KEDA operator (each ScaledObject's HPA) and the Job controller."""
        self._keda(namespace)
        self.run_jobs(namespace)
        for _ in range(max_steps):
            changed = False
            for (kind, ns, name), dep in sorted(self.objects.items()):
                if kind == "Deployment" and ns == namespace:
                    changed |= self._roll(dep)
                if kind == "LeaderWorkerSet" and ns == namespace:
                    changed |= self._lws_groups(dep)
            changed |= self._schedule(namespace)
            if not changed:
                break
        for (kind, ns, name), dep in list(self.objects.items()):
            if kind == "Deployment" and ns == namespace:
                self._report(dep)
            if kind == "LeaderWorkerSet" and ns == namespace:
                self._lws_report(dep)

    # --- the LeaderWorkerSet controllers and cluster DNS (kube_lws.py) -------------------------

    def _lws_groups(self, lws: Obj) -> bool:
        """Headless Services (only where the name is free) and each group's pods, as LWS creates them."""
        changed = False
        for service in kube_lws.headless_services(lws):
            key = ("Service", service["metadata"]["namespace"], service["metadata"]["name"])
            if key not in self.objects:  # CreateHeadlessServiceIfNotExists: any Service of the name will do
                service["metadata"]["uid"] = f"lws-uid-{next(self._uids)}"
                service["metadata"]["resourceVersion"] = str(next(self._versions))
                self.objects[key] = service
                self.managed[key] = {"lws": set(kube_apply.fieldset(service))}
                changed = True
        meta = lws["metadata"]
        template_hash = _template_hash(lws["spec"]["leaderWorkerTemplate"])
        for group in range(lws["spec"].get("replicas", 1)):
            for name, template, pod_labels in kube_lws.group_pods(lws, group):
                key = ("Pod", meta["namespace"], name)
                if key in self.objects and self.objects[key]["metadata"]["_hash"] == template_hash:
                    continue
                owner = {"kind": "LeaderWorkerSet", "name": meta["name"], "uid": meta["uid"], "controller": True}
                self.objects[key] = {
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {**template.get("metadata", {}), "labels": pod_labels, "name": name,
                                 "namespace": meta["namespace"], "uid": f"pod-uid-{next(self._uids)}",
                                 "ownerReferences": [owner], "_deployment": meta["name"], "_hash": template_hash},
                    "spec": template["spec"], "status": {"phase": "Pending", "conditions": []},
                }  # fmt: skip
                changed = True
        return changed

    def _lws_report(self, lws: Obj) -> None:
        """A group whose leader address does not resolve never forms: its pods crash-loop as a group."""
        meta = lws["metadata"]
        services = {name: o for (k, ns, name), o in self.objects.items() if k == "Service" and ns == meta["namespace"]}
        ready_groups = 0
        for group in range(lws["spec"].get("replicas", 1)):
            pods = [self.objects.get(("Pod", meta["namespace"], name)) for name, _, _ in kube_lws.group_pods(lws, group)]
            if any(pod is None or not pod["spec"].get("nodeName") for pod in pods):
                continue
            leader = pods[0]
            address = kube_lws.leader_address(lws, group)
            if not kube_lws.resolves(services, leader["metadata"]["labels"], kube_lws.leader_subdomain(lws, group)):
                for pod in pods:
                    (container, *_) = pod["spec"]["containers"]
                    last = self._terminated(container, "Error", 1, f"could not resolve the leader address {address}")
                    waiting = {"reason": "CrashLoopBackOff", "message": "back-off 5m0s restarting failed container"}
                    pod["status"] = self._not_running({"type": "PodScheduled", "status": "True"}, container,
                                                      {"waiting": waiting}, last)  # fmt: skip
                continue
            ready_groups += all(_ready(pod) for pod in pods)
        replicas = lws["spec"].get("replicas", 1)
        lws["status"] = {"observedGeneration": meta["generation"], "replicas": replicas, "readyReplicas": ready_groups,
                         "updatedReplicas": replicas, "hpaPodSelector": f"{kube_lws.SET_NAME_LABEL}={meta['name']},"
                         f"{kube_lws.WORKER_INDEX_LABEL}=0"}  # fmt: skip
        if self.lws_version < kube_lws.OBSERVED_GENERATION_SINCE:
            del lws["status"]["observedGeneration"]
        meta["resourceVersion"] = str(next(self._versions))

    def _keda(self, namespace: str) -> None:
        """The KEDA operator: an HPA (keda-hpa-NAME) for each ScaledObject, owned by it."""
        for so in self.watch("ScaledObject", "", namespace):
            spec, meta = so["spec"], so["metadata"]
            owner = {"apiVersion": so["apiVersion"], "kind": "ScaledObject", "name": meta["name"], "uid": meta["uid"],
                     "controller": True, "blockOwnerDeletion": True}  # fmt: skip
            hpa = {
                "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                "metadata": {"name": kube_webhooks.keda_hpa_name(so), "namespace": namespace, "ownerReferences": [owner],
                             "labels": {"scaledobject.keda.sh/name": meta["name"]}},
                "spec": {"scaleTargetRef": spec["scaleTargetRef"], "minReplicas": max(1, spec.get("minReplicaCount", 0)),
                         "maxReplicas": spec.get("maxReplicaCount", 100)},
            }  # fmt: skip
            key = ("HorizontalPodAutoscaler", namespace, hpa["metadata"]["name"])
            old = self.objects.get(key)
            hpa["metadata"]["uid"] = old["metadata"]["uid"] if old else f"keda-uid-{next(self._uids)}"
            hpa["metadata"]["resourceVersion"] = str(next(self._versions))
            self.objects[key] = hpa
            self.managed[key] = {"keda": set(kube_apply.fieldset(hpa))}

    def run_hpa(self, namespace: str = "llm", wanted_by_metrics: dict[str, int] | None = None) -> None:
        """The HPA controller (kube_hpa.py), for every HPA that scales an InferenceService (the
        operator's or KEDA's): ``wanted_by_metrics`` maps an HPA's name to the count its metrics ask."""
        for hpa in self.watch("HorizontalPodAutoscaler", "", namespace):
            target = hpa["spec"]["scaleTargetRef"]
            key = (constants.KIND, namespace, target["name"])
            if target["kind"] != constants.KIND or key not in self.objects:
                continue
            current = self.objects[key]["spec"].get("replicas", constants.DEFAULT_REPLICAS)
            desired, conditions = kube_hpa.decide(hpa, current, (wanted_by_metrics or {}).get(hpa["metadata"]["name"]))
            stored = self.objects[("HorizontalPodAutoscaler", namespace, hpa["metadata"]["name"])]
            stored["status"] = {"currentReplicas": current, "desiredReplicas": desired, "conditions": conditions}
            if desired != current:
                self._set_replicas(namespace, target["name"], desired)

    def run_jobs(self, namespace: str = "llm") -> None:
        """The Job controller and the kubelet, in one step: each unfinished Job's pod runs to its end,
        successfully unless ``image_faults`` names its image (then the Job fails, BackoffLimitExceeded)."""
        for (kind, ns, _), job in sorted(self.objects.items()):
            if kind != "Job" or ns != namespace or (job.get("status") or {}).get("conditions"):
                continue
            (container, *_) = job["spec"]["template"]["spec"]["containers"]
            if self.image_faults.get(container["image"]) or self._cache_write_error(job["spec"]["template"]["spec"], ns):
                condition = {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                             "message": "Job has reached the specified backoff limit"}  # fmt: skip
                job["status"] = {"failed": job["spec"].get("backoffLimit", 6) + 1, "conditions": [condition]}
            else:
                job["status"] = {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}
            job["metadata"]["resourceVersion"] = str(next(self._versions))

    def _roll(self, dep: Obj) -> bool:
        spec, name, namespace = dep["spec"], dep["metadata"]["name"], dep["metadata"]["namespace"]
        want = spec.get("replicas", 1)
        current_hash = _template_hash(spec["template"])
        pods = self.pods(name, namespace)
        new = [p for p in pods if p["metadata"]["_hash"] == current_hash]
        old = [p for p in pods if p["metadata"]["_hash"] != current_hash]
        strategy = spec.get("strategy") or {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
        if len(new) > want:
            self._remove_pod(new[-1])
            return True
        if strategy["type"] == "Recreate":
            if old:
                for pod in old:
                    self._remove_pod(pod)
                return True
            if len(new) < want:
                self._create_pod(dep, current_hash)
                return True
            return False
        rolling = strategy.get("rollingUpdate") or {}
        surge, unavailable = int(rolling.get("maxSurge", 0)), int(rolling.get("maxUnavailable", 0))
        if len(new) < want and len(pods) < want + surge:
            self._create_pod(dep, current_hash)
            return True
        ready = sum(1 for p in pods if _ready(p))
        for pod in sorted(old, key=_ready):  # pods that do not serve go first
            if not _ready(pod) or ready - 1 >= want - unavailable:
                self._remove_pod(pod)
                return True
        return False

    def _create_pod(self, dep: Obj, template_hash: str) -> None:
        template = copy.deepcopy(dep["spec"]["template"])
        namespace = dep["metadata"]["namespace"]
        name = f"{dep['metadata']['name']}-{template_hash[:5]}-{next(self._pod_names)}"
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                **template.get("metadata", {}),
                "name": name,
                "namespace": namespace,
                "uid": f"pod-uid-{next(self._uids)}",
                "ownerReferences": [
                    {"kind": "ReplicaSet", "name": dep["metadata"]["name"], "uid": dep["metadata"]["uid"], "controller": True}
                ],
                "_deployment": dep["metadata"]["name"],
                "_hash": template_hash,
            },
            "spec": template["spec"],
            "status": {"phase": "Pending", "conditions": []},
        }
        self.objects[("Pod", namespace, name)] = pod

    def _remove_pod(self, pod: Obj) -> None:
        self.objects.pop(("Pod", pod["metadata"]["namespace"], pod["metadata"]["name"]), None)

    def _gpus(self, pod: Obj) -> int:
        return sum(int(ctr.get("resources", {}).get("limits", {}).get(constants.GPU_RESOURCE, 0)) for ctr in pod["spec"]["containers"])

    def _claims(self, pod: Obj) -> list[str]:
        return [v["persistentVolumeClaim"]["claimName"] for v in pod["spec"].get("volumes", []) if "persistentVolumeClaim" in v]

    def _schedule(self, namespace: str) -> bool:
        changed = False
        for pod in self.pods(namespace=namespace):
            if pod["spec"].get("nodeName"):
                continue
            reasons, feasible = [], []
            for node, gpus in sorted(self.nodes.items()):
                placed = [p for p in self.pods(namespace=namespace) if p["spec"].get("nodeName") == node]
                used = sum(self._gpus(p) for p in placed)
                short = [constants.GPU_RESOURCE] if gpus - used < self._gpus(pod) else []
                if node in self.node_allocatable:
                    free = dict(self.node_allocatable[node])
                    for other in placed:
                        for resource, value in kube_nodes.pod_requests(other["spec"]).items():
                            free[resource] -= value
                    short += kube_nodes.insufficient(free, pod["spec"])
                if short:
                    reasons.append(f"node {node}: " + ", ".join(f"Insufficient {r}" for r in short))
                    continue
                conflict = self._attach_conflict(pod, node, namespace)
                if conflict:
                    reasons.append(f"node {node}: {conflict}")
                    continue
                feasible.append(node)
            if feasible:
                pod["spec"]["nodeName"] = feasible[0]
                pod["status"] = self._kubelet(pod, namespace)
                changed = True
            else:
                message = f"0/{len(self.nodes)} nodes are available: " + "; ".join(reasons)
                condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
                before = (pod["status"].get("conditions") or [{}])[0]
                if {k: v for k, v in before.items() if k != "lastTransitionTime"} != condition:
                    pod["status"] = {"phase": "Pending", "conditions": [{**condition, "lastTransitionTime": self.now}]}
        return changed

    def _attach_conflict(self, pod: Obj, node: str, namespace: str) -> str | None:
        for claim in self._claims(pod):
            pvc = self.objects.get(("PersistentVolumeClaim", namespace, claim))
            if pvc is None:
                return f'persistentvolumeclaim "{claim}" not found'
            if not set(pvc["spec"]["accessModes"]) & set(SINGLE_NODE_MODES) or set(pvc["spec"]["accessModes"]) - set(SINGLE_NODE_MODES):
                continue  # a ReadWriteMany or ReadOnlyMany claim mounts anywhere
            for other in self.pods(namespace=namespace):
                other_node = other["spec"].get("nodeName")
                if other is not pod and other_node and other_node != node and claim in self._claims(other):
                    return f'Multi-Attach error for volume "{claim}": already used by pod {other["metadata"]["name"]} on {other_node}'
        return None

    def _kubelet(self, pod: Obj, namespace: str) -> Obj:
        scheduled = {"type": "PodScheduled", "status": "True"}
        (container, *_) = pod["spec"]["containers"]
        for var in container.get("env", []):
            ref = (var.get("valueFrom") or {}).get("secretKeyRef")
            if ref and not ref.get("optional") and ("Secret", namespace, ref["name"]) not in self.objects:
                waiting = {"reason": "CreateContainerConfigError", "message": f'secret "{ref["name"]}" not found'}
                return self._not_running(scheduled, container, {"waiting": waiting})
        failed = self._cache_write_error(pod["spec"], namespace)
        if failed is not None:
            name, message = failed
            culprit = next(c for c in [*pod["spec"].get("initContainers", []), *pod["spec"]["containers"]] if c["name"] == name)
            last = self._terminated(culprit, "Error", 1, message)
            waiting = {"reason": "CrashLoopBackOff", "message": "back-off 5m0s restarting failed container"}
            status = self._not_running(scheduled, culprit, {"waiting": waiting}, last)
            if culprit is not container:
                status["initContainerStatuses"] = status.pop("containerStatuses")
            return status
        fault = self.image_faults.get(container["image"])
        if fault in ("ImagePullBackOff", "ErrImagePull"):
            waiting = {"reason": fault, "message": f'Back-off pulling image "{container["image"]}"'}
            return self._not_running(scheduled, container, {"waiting": waiting})
        if fault in ("OOMKilled", "CrashLoopBackOff"):
            oom = fault == "OOMKilled"
            last = self._terminated(container, "OOMKilled" if oom else "Error", 137 if oom else 1,
                                    self.crash_logs.get(container["image"], ""))
            waiting = {"reason": "CrashLoopBackOff", "message": "back-off 5m0s restarting failed container"}
            return self._not_running(scheduled, container, {"waiting": waiting}, last)
        ready = {"type": "Ready", "status": "True"}
        statuses = [{"name": container["name"], "ready": True, "restartCount": 0, "state": {"running": {}}}]
        return {"phase": "Running", "conditions": [scheduled, ready], "containerStatuses": statuses}

    def _cache_write_error(self, pod_spec: Obj, namespace: str) -> tuple[str, str] | None:
        """kube_volumes.write_error on this namespace's claims; a cache-owner's chown is remembered."""
        claims = {name: o for (k, ns, name), o in self.objects.items() if k == "PersistentVolumeClaim" and ns == namespace}
        owners = {claim: owner for (ns, claim), owner in self.volume_owner.items() if ns == namespace}
        failed = kube_volumes.write_error(pod_spec, claims, owners)
        self.volume_owner.update({(namespace, claim): owner for claim, owner in owners.items()})
        return failed

    @staticmethod
    def _terminated(container: Obj, reason: str, exit_code: int, log: str) -> Obj:
        """lastState.terminated as the kubelet reports it (kubernetes pkg/kubelet/kuberuntime/
        kuberuntime_container.go): the server writes no termination message file, so a message is there
        only under terminationMessagePolicy FallbackToLogsOnError, the tail of the container's log
        (at most 80 lines and 2048 bytes)."""
        terminated = {"reason": reason, "exitCode": exit_code}
        if log and container.get("terminationMessagePolicy") == "FallbackToLogsOnError":
            terminated["message"] = "\n".join(log.splitlines()[-80:])[-2048:]
        return {"terminated": terminated}

    @staticmethod
    def _not_running(scheduled: Obj, container: Obj, state: Obj, last: Obj | None = None) -> Obj:
        status = {"name": container["name"], "ready": False, "restartCount": 5 if last else 0, "state": state}
        if last:
            status["lastState"] = last
        return {"phase": "Pending", "conditions": [scheduled, {"type": "Ready", "status": "False"}], "containerStatuses": [status]}

    def _report(self, dep: Obj) -> None:
        pods = self.pods(dep["metadata"]["name"], dep["metadata"]["namespace"])
        current_hash = _template_hash(dep["spec"]["template"])
        updated = [p for p in pods if p["metadata"]["_hash"] == current_hash]
        ready = sum(1 for p in pods if _ready(p))
        complete = len(updated) == len(pods) == dep["spec"].get("replicas", 1) and all(_ready(p) for p in pods)
        progressing = {
            "type": "Progressing",
            "status": "True",
            "reason": "NewReplicaSetAvailable" if complete else "ReplicaSetUpdated",
        }
        dep["status"] = {
            "observedGeneration": dep["metadata"]["generation"],
            "replicas": len(pods),
            "updatedReplicas": len(updated),
            "readyReplicas": ready,
            "availableReplicas": ready,
            "conditions": [progressing],
        }
        dep["metadata"]["resourceVersion"] = str(next(self._versions))


def _ready(pod: Obj) -> bool:
    return any(cond["type"] == "Ready" and cond["status"] == "True" for cond in pod["status"].get("conditions", []))
