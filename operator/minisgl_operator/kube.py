"""The operator's only door to the Kubernetes API: a seven-method adapter over the official client.

The reconciler and the handlers call :class:`KubeApi`; :class:`KubernetesApi` implements it with
the ``kubernetes`` package, and the tests pass a recording fake with the same methods. Objects go
in and come out as plain dicts in the API's own (camelCase) JSON form.

``PERMISSIONS`` lists every API permission the operator uses, kopf's own included; the Helm
chart's RBAC grants exactly these (a test compares them).
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from . import constants

Obj = dict[str, Any]


# What the API server answers with HTTP 500 although retrying cannot help: server-side apply of an
# object with a field its type does not declare (a typo under a preserve-unknown-fields podTemplate
# reaches the Deployment so) fails to build the typed patch, the same way every time.
PERMANENT_SERVER_ERRORS = ("field not declared in schema", "failed to create typed patch object")


class ApiError(Exception):
    """A failed API call. ``status`` is the HTTP status (0: the API server was not reached)."""

    def __init__(self, status: int, reason: str, message: str):
        self.status = status
        self.reason = reason
        self.message = message
        super().__init__(f"{status} {reason}: {message}")

    @property
    def retryable(self) -> bool:
        """Worth retrying as is: conflicts, throttling, server errors, no connection.
        Anything else (400 Bad Request, 403 Forbidden, 422 Invalid, ...) needs a person, and so does
        server-side apply's 500 for an object its schema cannot type (a field that does not exist)."""
        if any(sign in self.message for sign in PERMANENT_SERVER_ERRORS):
            return False
        return self.status in (0, 409, 429) or self.status >= 500


class KubeApi(Protocol):
    def get(self, kind: str, namespace: str, name: str) -> Obj | None:
        """The object, or None when it does not exist."""

    def apply(self, obj: Obj) -> Obj:
        """Server-side apply ``obj`` (creating it if needed) as the operator's field manager."""

    def delete(self, kind: str, namespace: str, name: str, uid: str | None = None) -> None:
        """Delete the object; no error when it is already gone. With ``uid``, only if it is still that
        object (a precondition: 409 Conflict otherwise)."""

    def patch_status(self, namespace: str, name: str, status: Obj) -> Obj:
        """Merge-patch the status subresource of an InferenceService."""

    def scale(self, namespace: str, name: str, replicas: int) -> None:
        """Set an InferenceService's replicas through its scale subresource, as an autoscaler does."""

    def create_event(self, event: Obj) -> None:
        """Create a core/v1 Event."""

    def list_pods(self, namespace: str, label_selector: str) -> list[Obj]:
        """The pods matching ``label_selector`` (filtered by the API server, not here)."""


# (apiGroup, resource) -> verbs. Each line says who needs it.
PERMISSIONS: dict[tuple[str, str], tuple[str, ...]] = {
    # kopf watches InferenceServices and patches its progress annotations on them; the
    # Deployment watch handler reads the owner by name.
    (constants.GROUP, constants.PLURAL): ("get", "list", "watch", "patch"),
    # The reconciler writes status.
    (constants.GROUP, f"{constants.PLURAL}/status"): ("patch",),
    # The replicas KEDA left at zero, raised when KEDA goes (an HPA never scales a target at zero).
    (constants.GROUP, f"{constants.PLURAL}/scale"): ("patch",),
    # ownerReferences with blockOwnerDeletion need this where the
    # OwnerReferencesPermissionEnforcement admission plugin is on.
    (constants.GROUP, f"{constants.PLURAL}/finalizers"): ("update",),
    # Children: server-side apply is authorized as patch, and as create when the object is new.
    # Every kind is also listed and watched (label-filtered): kopf's indexes serve the reconciler's
    # reads (cache.py), so a reconcile with nothing to do reads nothing from the API server.
    # Deployments are also watched (status changes, deletions -> reconcile the owner).
    # Deleted too: the endpoint picker's when the router goes, the server's when it becomes a LeaderWorkerSet.
    ("apps", "deployments"): ("get", "list", "watch", "create", "patch", "delete"),
    ("", "services"): ("get", "list", "watch", "create", "patch", "delete"),
    ("", "persistentvolumeclaims"): ("get", "list", "watch", "create", "patch"),
    # The model cache's loader Job: replaced (deleted, created) when the model changes, and
    # watched (its completion starts the server pods).
    ("batch", "jobs"): ("get", "list", "watch", "create", "patch", "delete"),
    # HPA and PDB are deleted again when the spec stops asking for them.
    ("autoscaling", "horizontalpodautoscalers"): ("get", "list", "watch", "create", "patch", "delete"),
    ("policy", "poddisruptionbudgets"): ("get", "list", "watch", "create", "patch", "delete"),
    # Multi-node replicas (LeaderWorkerSet), KEDA, and the router's objects: each deleted again
    # when the spec stops asking for it (the router's endpoint picker is a Deployment, Service,
    # ConfigMap, ServiceAccount, Role and RoleBinding).
    ("leaderworkerset.x-k8s.io", "leaderworkersets"): ("get", "list", "watch", "create", "patch", "delete"),
    ("keda.sh", "scaledobjects"): ("get", "list", "watch", "create", "patch", "delete"),
    ("inference.networking.k8s.io", "inferencepools"): ("get", "list", "watch", "create", "patch", "delete"),
    (constants.GATEWAY_API_GROUP, "httproutes"): ("get", "list", "watch", "create", "patch", "delete"),
    # What spec.router.gatewayProvider's gateway needs: Istio's DestinationRule, GKE's policies.
    ("networking.istio.io", "destinationrules"): ("get", "list", "watch", "create", "patch", "delete"),
    ("networking.gke.io", "healthcheckpolicies"): ("get", "list", "watch", "create", "patch", "delete"),
    ("networking.gke.io", "gcpbackendpolicies"): ("get", "list", "watch", "create", "patch", "delete"),
    ("", "configmaps"): ("get", "list", "watch", "create", "patch", "delete"),
    ("", "serviceaccounts"): ("get", "list", "watch", "create", "patch", "delete"),
    ("rbac.authorization.k8s.io", "roles"): ("get", "list", "watch", "create", "patch", "delete"),
    ("rbac.authorization.k8s.io", "rolebindings"): ("get", "list", "watch", "create", "patch", "delete"),
    # A Role can grant only what its creator holds: these are what the endpoint picker's Role
    # grants it (router.EPP_RULES), besides pods and inferencepools above.
    ("inference.networking.x-k8s.io", "inferenceobjectives"): ("get", "list", "watch"),
    ("inference.networking.x-k8s.io", "inferencemodelrewrites"): ("get", "list", "watch"),
    ("llm-d.ai", "inferenceobjectives"): ("get", "list", "watch"),
    ("llm-d.ai", "inferencemodelrewrites"): ("get", "list", "watch"),
    # Events, the operator's and kopf's own.
    ("", "events"): ("create",),
    # Pods are read (and watched, by label) for the reasons a rollout is stuck: Unschedulable,
    # ImagePullBackOff, CrashLoopBackOff, OOMKilled, a missing Secret.
    ("", "pods"): ("get", "list", "watch"),
}
# No peering (the chart runs kopf with --standalone and one replica) and no cluster scanning
# (settings.scanning.disabled): kopf then needs no CRD, namespace or KopfPeering permissions.

# Every request carries a timeout (connect, read): a half-open connection would otherwise block
# a handler forever while it holds its object's lock, and kopf's liveness would still answer.
REQUEST_TIMEOUT_SECONDS = (5.0, 30.0)

APPLY_CONTENT_TYPE = "application/apply-patch+yaml"
MERGE_PATCH_CONTENT_TYPE = "application/merge-patch+json"

# kind -> (API class name in kubernetes.client, method suffix)
_TYPED = {
    "Deployment": ("AppsV1Api", "namespaced_deployment"),
    "Service": ("CoreV1Api", "namespaced_service"),
    "PersistentVolumeClaim": ("CoreV1Api", "namespaced_persistent_volume_claim"),
    "HorizontalPodAutoscaler": ("AutoscalingV2Api", "namespaced_horizontal_pod_autoscaler"),
    "PodDisruptionBudget": ("PolicyV1Api", "namespaced_pod_disruption_budget"),
    "ConfigMap": ("CoreV1Api", "namespaced_config_map"),
    "ServiceAccount": ("CoreV1Api", "namespaced_service_account"),
    "Role": ("RbacAuthorizationV1Api", "namespaced_role"),
    "RoleBinding": ("RbacAuthorizationV1Api", "namespaced_role_binding"),
    "Job": ("BatchV1Api", "namespaced_job"),
}
def _custom(api_version: str, plural: str) -> tuple[str, str, str]:
    group, version = api_version.split("/")
    return group, version, plural


# Custom resources: kind -> (group, version, plural), through the CustomObjectsApi.
CUSTOM_KINDS: dict[str, tuple[str, str, str]] = {
    constants.KIND: (constants.GROUP, constants.VERSION, constants.PLURAL),
    "LeaderWorkerSet": _custom(constants.LWS_API_VERSION, "leaderworkersets"),
    "ScaledObject": _custom(constants.KEDA_API_VERSION, "scaledobjects"),
    "InferencePool": _custom(constants.INFERENCE_POOL_API_VERSION, "inferencepools"),
    "HTTPRoute": _custom(constants.HTTPROUTE_API_VERSION, "httproutes"),
    "DestinationRule": _custom(constants.ISTIO_NETWORKING_API_VERSION, "destinationrules"),
    "HealthCheckPolicy": _custom(constants.GKE_NETWORKING_API_VERSION, "healthcheckpolicies"),
    "GCPBackendPolicy": _custom(constants.GKE_NETWORKING_API_VERSION, "gcpbackendpolicies"),
}


class KubernetesApi:
    """:class:`KubeApi` on the official ``kubernetes`` client."""

    def __init__(self, api_client: Any):
        from kubernetes import client

        self._client = client
        self._api_client = api_client
        self._apis: dict[str, Any] = {}

    @classmethod
    def from_environment(cls) -> KubernetesApi:
        """In a pod: the ServiceAccount; elsewhere: the kubeconfig."""
        from kubernetes import client, config

        try:
            config.load_incluster_config()
        except config.ConfigException:
            config.load_kube_config()
        return cls(client.ApiClient())

    def _api(self, class_name: str) -> Any:
        if class_name not in self._apis:
            self._apis[class_name] = getattr(self._client, class_name)(self._api_client)
        return self._apis[class_name]

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        kwargs.setdefault("_request_timeout", REQUEST_TIMEOUT_SECONDS)
        try:
            return fn(*args, **kwargs)
        except ApiException as exc:
            message = exc.reason or ""
            try:
                message = json.loads(exc.body).get("message", message)
            except (TypeError, ValueError, AttributeError):
                pass
            raise ApiError(exc.status or 0, exc.reason or "", message) from exc
        except HTTPError as exc:
            raise ApiError(0, "ConnectionError", str(exc)) from exc
        except ValueError as exc:  # the client's own model validation (pydantic) refused the request
            raise ApiError(400, "ClientValidation", str(exc)) from exc

    @staticmethod
    def _json(response: Any) -> Obj:
        return json.loads(response.data)

    def _typed(self, kind: str) -> tuple[Any, str]:
        try:
            class_name, suffix = _TYPED[kind]
        except KeyError:
            raise ValueError(f"the operator does not manage {kind} objects") from None
        return self._api(class_name), suffix

    def get(self, kind: str, namespace: str, name: str) -> Obj | None:
        try:
            if kind in CUSTOM_KINDS:
                return self._json(
                    self._call(
                        self._api("CustomObjectsApi").get_namespaced_custom_object,
                        *CUSTOM_KINDS[kind][:2], namespace, CUSTOM_KINDS[kind][2], name,
                        _preload_content=False,
                    )
                )  # fmt: skip
            api, suffix = self._typed(kind)
            return self._json(self._call(getattr(api, f"read_{suffix}"), name, namespace, _preload_content=False))
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def apply(self, obj: Obj) -> Obj:
        meta = obj["metadata"]
        if obj["kind"] in CUSTOM_KINDS and obj["kind"] != constants.KIND:
            group, version, plural = CUSTOM_KINDS[obj["kind"]]
            patch = self._api("CustomObjectsApi").patch_namespaced_custom_object
            return self._server_side_apply(patch, obj, group, version, meta["namespace"], plural, meta["name"])
        api, suffix = self._typed(obj["kind"])
        return self._server_side_apply(getattr(api, f"patch_{suffix}"), obj, meta["name"], meta["namespace"])

    def _server_side_apply(self, patch, obj: dict, *names: str) -> dict:
        """`obj` applied by the operator's field manager, taking over conflicting fields."""
        response = self._call(patch, *names, body=obj, field_manager=constants.FIELD_MANAGER, force=True,
                              _content_type=APPLY_CONTENT_TYPE, _preload_content=False)
        return self._json(response)

    def delete(self, kind: str, namespace: str, name: str, uid: str | None = None) -> None:
        options = {"propagation_policy": "Background", **({"body": {"preconditions": {"uid": uid}}} if uid else {})}
        try:
            if kind in CUSTOM_KINDS and kind != constants.KIND:
                group, version, plural = CUSTOM_KINDS[kind]
                self._call(self._api("CustomObjectsApi").delete_namespaced_custom_object, group, version, namespace,
                           plural, name, **options)
                return
            api, suffix = self._typed(kind)
            self._call(getattr(api, f"delete_{suffix}"), name, namespace, **options)
        except ApiError as exc:
            if exc.status != 404:
                raise

    def patch_status(self, namespace: str, name: str, status: Obj) -> Obj:
        response = self._call(
            self._api("CustomObjectsApi").patch_namespaced_custom_object_status,
            constants.GROUP,
            constants.VERSION,
            namespace,
            constants.PLURAL,
            name,
            {"status": status},
            _content_type=MERGE_PATCH_CONTENT_TYPE,
            _preload_content=False,
        )
        return self._json(response)

    def scale(self, namespace: str, name: str, replicas: int) -> None:
        self._call(
            self._api("CustomObjectsApi").patch_namespaced_custom_object_scale,
            constants.GROUP, constants.VERSION, namespace, constants.PLURAL, name,
            {"spec": {"replicas": replicas}},
            _content_type=MERGE_PATCH_CONTENT_TYPE,
            _preload_content=False,
        )  # fmt: skip

    def create_event(self, event: Obj) -> None:
        self._call(
            self._api("CoreV1Api").create_namespaced_event,
            event["metadata"]["namespace"],
            event,
            _preload_content=False,
        )

    def list_pods(self, namespace: str, label_selector: str) -> list[Obj]:
        response = self._call(
            self._api("CoreV1Api").list_namespaced_pod,
            namespace,
            label_selector=label_selector,
            _preload_content=False,
        )
        return self._json(response).get("items") or []


    def apply_crd(self, crd: Obj) -> Obj:
        """Server-side apply the CustomResourceDefinition (the chart's upgrade hook: Helm installs
        a chart's crds/ once and never upgrades them)."""
        return self._server_side_apply(self._api("ApiextensionsV1Api").patch_custom_resource_definition, crd,
                                       crd["metadata"]["name"])
