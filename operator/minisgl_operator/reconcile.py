"""The reconcile loop: make the cluster match one InferenceService, writing only what differs.

For each child that ``render.children`` asks for:
- missing                                  -> apply (create);
- present, same config hash, and every field the operator sets still has its value
                                           -> nothing (the API server's defaults are ignored);
- otherwise (spec changed, or someone edited or deleted a field: drift)
                                           -> apply (server-side apply, forced).
Children the spec no longer asks for (HPA, PDB) are deleted. Then the status is computed from the
Deployment and patched only when it changed, and an Event is posted only when something happened.

A spec the cluster cannot run never raises: it becomes a Degraded condition and a Warning Event,
and the running children are left alone. API errors worth retrying raise ``RetryableError``
(kopf retries the handler with a backoff); other API errors become Degraded too.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from . import constants, merge, quantity, render, router, server, sizing, status
from . import spec as spec_mod
from .cache import IndexedApi
from .kube import ApiError, KubeApi
from .meta import labels, scale_selector, selector_string, service_url

Obj = dict[str, Any]
log = logging.getLogger(__name__)


# What runs the server pods; the status follows it (both report replicas, updated and ready ones).
WORKLOAD_KINDS = ("Deployment", "LeaderWorkerSet")
# What scales them; one replaces the other when the spec switches between the HPA and KEDA.
AUTOSCALER_KINDS = ("HorizontalPodAutoscaler", "ScaledObject")


class RetryableError(Exception):
    """A transient API failure; the handler should run again later (after ``delay`` seconds, if given)."""

    def __init__(self, message: str, delay: float | None = None):
        super().__init__(message)
        self.delay = delay


# KEDA's admission webhook reads HPAs from its informer cache: right after the operator deleted the
# HPA it replaces, the webhook may still see it and refuse the ScaledObject (403). The cache catches
# up within moments: retry soon, rather than leave the InferenceService without an autoscaler until
# the next resync.
KEDA_SEES_OLD_HPA = "is already managed by the hpa"
KEDA_RETRY_SECONDS = 3


@dataclass
class Outcome:
    applied: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    status_written: bool = False
    events: list[str] = field(default_factory=list)
    problem: status.Problem | None = None


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


# --- comparing what is there with what should be ---------------------------------------------

_QUANTITY_PARENTS = ("requests", "limits")
_QUANTITY_KEYS = ("sizeLimit", "storage", "averageValue")


def _same_scalar(current: Any, desired: Any, key: str, parent: str) -> bool:
    if current == desired:
        return True
    if parent in _QUANTITY_PARENTS or key in _QUANTITY_KEYS:
        a, b = quantity.parse(current), quantity.parse(desired)
        return a is not None and a == b
    return False


def contains(current: Any, desired: Any, key: str = "", parent: str = "") -> bool:
    """Whether ``current`` has every field of ``desired`` with the same value. Extra fields in
    ``current`` (the API server's defaults, status, managedFields) do not matter, nor do extra
    items of a keyed list (an env var or a sidecar a mutating webhook added: the API server merges
    those lists by key, so applying again would change nothing); quantities compare by value,
    since the API server canonicalizes them ('4000m' is stored as '4')."""
    if isinstance(desired, dict):
        if not isinstance(current, dict):
            return False
        return all(k in current and contains(current[k], v, k, key) for k, v in desired.items())
    if isinstance(desired, list):
        if not isinstance(current, list):
            return False
        merge_key = merge.keyed(key, desired)
        if merge_key is not None:
            by_key = {item.get(merge_key): item for item in current if isinstance(item, dict)}
            return all(item[merge_key] in by_key and contains(by_key[item[merge_key]], item, key, parent) for item in desired)
        if len(current) != len(desired):
            return False
        return all(contains(a, b, key, parent) for a, b in zip(current, desired))
    return _same_scalar(current, desired, key, parent)


def up_to_date(current: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    hash_key = constants.ANNOTATION_CONFIG_HASH
    current_hash = (current.get("metadata", {}).get("annotations") or {}).get(hash_key)
    return current_hash == desired["metadata"]["annotations"][hash_key] and contains(current, desired)


def immutable_change(current: Mapping[str, Any] | None, desired: Mapping[str, Any]) -> status.Problem | None:
    """The refusal the API server would give (422) for applying ``desired`` over ``current``: a PVC's
    spec is immutable but for growing its storage request. Checked before applying, against the
    PVC that exists, with the same function as the CRD's transition rule."""
    if current is None or desired["kind"] != "PersistentVolumeClaim":
        return None
    want, have = desired["spec"], current.get("spec") or {}
    old = {"size": (have.get("resources") or {}).get("requests", {}).get("storage"), "accessModes": have.get("accessModes")}
    new = {"size": want["resources"]["requests"]["storage"], "accessModes": want["accessModes"]}
    if "storageClassName" in want:  # unset: the API server's default class filled it in, not a change
        old["storageClassName"], new["storageClassName"] = have.get("storageClassName", ""), want["storageClassName"]
    found = spec_mod.check_cache_transition(old, new)
    if not found:
        return None
    name = desired["metadata"]["name"]
    return status.Problem("CacheImmutable", f"PersistentVolumeClaim {name} was left as it is: {found[0]}")


def owned_by(obj: Mapping[str, Any], uid: str) -> bool:
    return any(ref.get("uid") == uid and ref.get("controller") for ref in obj.get("metadata", {}).get("ownerReferences") or [])


def claims(current: Mapping[str, Any], isvc: spec_mod.InferenceService) -> bool:
    """Whether this InferenceService may write ``current``: a child it owns, or a retained model
    cache (no owner) that an InferenceService of this name created: a new one of the same name
    (a GitOps replace, a delete and re-create) adopts it."""
    if owned_by(current, isvc.uid):
        return True
    meta = current.get("metadata") or {}
    mine = labels(isvc)
    retained = current.get("kind") == "PersistentVolumeClaim" and not meta.get("ownerReferences")
    return retained and all((meta.get("labels") or {}).get(k) == mine[k] for k in (constants.LABEL_INSTANCE, constants.LABEL_MANAGED_BY))


def _loader_state(job: Mapping[str, Any]) -> tuple[str | None, status.Problem | None]:
    """(why the workload waits, or None once the loader Job succeeded; the Job's failure, if any)."""
    job_status = job.get("status") or {}
    conditions = {cond.get("type"): cond for cond in job_status.get("conditions") or [] if cond.get("status") == "True"}
    name = job["metadata"]["name"]
    if int(job_status.get("succeeded") or 0) >= 1 or "Complete" in conditions:
        return None, None
    waiting = f"Job {name} is filling the model cache; the server pods start once it has succeeded"
    if "Failed" in conditions:
        failed = conditions["Failed"]
        message = f"Job {name} could not fill the model cache: {failed.get('reason', '')} {failed.get('message', '')}".rstrip()
        return waiting, status.Problem("ModelLoadFailed", message + " (kubectl logs job/" + name + ")")
    return waiting, None


def _loaded_already(current: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    """A loader Job that succeeded at the same downloads: the cache holds the files, and a change to
    anything else (env, image, placement) neither replaces the Job nor holds the rollout."""
    if desired["kind"] != "Job":
        return False
    done, _ = _loader_state(current)
    said = ((current.get("metadata") or {}).get("annotations") or {}).get(constants.ANNOTATION_DOWNLOADS)
    return done is None and said == desired["metadata"]["annotations"][constants.ANNOTATION_DOWNLOADS]


def _applied_as(obj: Mapping[str, Any]) -> tuple[str, str]:
    """(config hash, version) of an object: its generation where it has one (a spec edit bumps it, a
    status update does not), else its resourceVersion."""
    meta = obj.get("metadata") or {}
    version = str(meta["generation"]) if "generation" in meta else f"rv{meta.get('resourceVersion', '')}"
    return (meta.get("annotations") or {}).get(constants.ANNOTATION_CONFIG_HASH, ""), version


def _keda_saw_deleted_hpa(exc: ApiError, kind: str, outcome: Outcome) -> bool:
    """KEDA's webhook refused a ScaledObject for an HPA this very reconcile deleted (its cache lags)."""
    deleted_hpa = any(ref.startswith("HorizontalPodAutoscaler/") for ref in outcome.deleted)
    return kind == "ScaledObject" and exc.status == 403 and KEDA_SEES_OLD_HPA in exc.message and deleted_hpa


# An apply answered 404: the kind's API path does not exist, i.e. the cluster lacks its CRD.
NOT_SERVED = " (the cluster serves no {}: is its CRD installed?)"


# What a Gateway (HTTPRoute) or the inference extension (InferencePool) reports per parent Gateway in
# status.parents[].conditions (gateway-api apis/v1 RouteConditionAccepted and RouteConditionResolvedRefs;
# the InferencePool's InferencePoolConditionAccepted and InferencePoolConditionResolvedRefs).
ROUTING_KINDS = ("HTTPRoute", "InferencePool")
PARENT_CONDITIONS = ("Accepted", "ResolvedRefs")


def _refused_by_gateway(obj: Mapping[str, Any]) -> status.Problem | None:
    """A route or pool a Gateway did not accept (a listener that admits no route from this namespace,
    a backend it cannot resolve): without this the requests just never arrive."""
    for parent in (obj.get("status") or {}).get("parents") or []:
        for cond in parent.get("conditions") or []:
            if cond.get("type") in PARENT_CONDITIONS and cond.get("status") == "False":
                gateway = (parent.get("parentRef") or {}).get("name", "?")
                return status.Problem(
                    "GatewayRefused",
                    f"{obj['kind']} {obj['metadata']['name']}: Gateway {gateway} says {cond['type']}=False "
                    f"({cond.get('reason', '')}): {cond.get('message', '')}".rstrip(": "),
                )
    return None


def _old_lws(workload: Mapping[str, Any] | None) -> status.Problem | None:
    """A LeaderWorkerSet controller older than v0.9 writes a status without observedGeneration: the
    InferenceService would wait for it forever (Pending), so say which version it needs."""
    if workload is None or workload.get("kind") != "LeaderWorkerSet":
        return None
    lws_status = workload.get("status") or {}
    if not lws_status or "observedGeneration" in lws_status:
        return None
    return status.Problem(
        "LeaderWorkerSetTooOld",
        f"LeaderWorkerSet {workload['metadata']['name']} has a status without observedGeneration: its controller is older "
        f"than {constants.LWS_MIN_VERSION}, which multi-node InferenceServices need; upgrade kubernetes-sigs/lws",
    )


def _server_pod(wanted: list[Obj], isvc: spec_mod.InferenceService) -> Obj:
    """The pod spec of the server (a multi-node group's leader) in the rendered children."""
    workload = next(o for o in wanted if o["kind"] in WORKLOAD_KINDS and o["metadata"]["name"] == isvc.name)
    if workload["kind"] == "Deployment":
        return workload["spec"]["template"]["spec"]
    return workload["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]


def _ref(obj: Mapping[str, Any]) -> str:
    return f"{obj['kind']}/{obj['metadata']['name']}"


# --- events ------------------------------------------------------------------------------------


def event(body: Mapping[str, Any], type_: str, reason: str, message: str, now: str) -> Obj:
    meta = body["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
        "involvedObject": {
            "apiVersion": body.get("apiVersion", constants.API_VERSION),
            "kind": body.get("kind", constants.KIND),
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta.get("uid", ""),
            "resourceVersion": meta.get("resourceVersion", ""),
        },
        "type": type_,
        "reason": reason,
        "message": message[:1024],
        "source": {"component": constants.OPERATOR_NAME},
        "reportingComponent": constants.OPERATOR_NAME,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


# --- the loop ----------------------------------------------------------------------------------


class Reconciler:
    def __init__(self, api: KubeApi, default_image: str = constants.DEFAULT_SERVER_IMAGE, clock: Callable[[], str] = utc_now,
                 epp_image: str = constants.DEFAULT_EPP_IMAGE):
        # Reads come from kopf's indexes once the handlers hand them over (cache.IndexedApi).
        self.api = api if isinstance(api, IndexedApi) else IndexedApi(api)
        self.default_image = default_image
        self.epp_image = epp_image
        self.clock = clock
        # (kind, namespace, name) -> (config hash, version) of what the last apply returned: an object
        # nobody changed since is up to date even where a mutating webhook rewrote a field the operator
        # sets (an image mirror), which would otherwise read as drift on every event and resync.
        self._applied: dict[tuple[str, str, str], tuple[str, str]] = {}

    def reconcile(self, body: Mapping[str, Any]) -> Outcome:
        meta = body["metadata"]
        outcome = Outcome()
        if meta.get("deletionTimestamp"):
            return outcome  # the garbage collector removes the children (ownerReferences)

        try:
            isvc = spec_mod.parse(body, self.default_image)
        except spec_mod.SpecError as exc:
            outcome.problem = status.Problem("InvalidSpec", f"the spec cannot run: {exc}")
            self._finish(body, outcome, deployment=self._owned_deployment(body))
            return outcome

        deployment: Obj | None = None
        picker: Obj | None = None
        problems: list[status.Problem] = []
        wanted = render.children(isvc, self.epp_image)
        wanted_refs = {(d["kind"], d["metadata"]["name"]) for d in wanted}
        # An autoscaler the spec replaced goes first: two autoscalers would fight over spec.replicas,
        # and KEDA's admission webhook refuses a ScaledObject while an HPA scales its target.
        raised = self._leave_zero(isvc, wanted_refs, outcome)
        if raised is not isvc:
            isvc, wanted = raised, render.children(raised, self.epp_image)
        self._delete_unwanted(isvc, wanted_refs, outcome, kinds=AUTOSCALER_KINDS)
        # One child refused (a PVC edit the API server forbids, a name taken) does not stop the
        # others: a new image or replica count still reaches the Deployment.
        loading: str | None = None
        for desired in wanted:
            kind, name = desired["kind"], desired["metadata"]["name"]
            current = self._get(kind, isvc.namespace, name)
            if current is not None and not claims(current, isvc):
                problems.append(
                    status.Problem("NameConflict", f"{kind} {name} already exists and is not owned by this InferenceService")
                )
                continue
            if kind in WORKLOAD_KINDS and name == isvc.name and loading is not None:
                deployment = current  # the pods start (or change model) once the cache holds the model
                continue
            key = (kind, isvc.namespace, name)
            if current is not None and (up_to_date(current, desired) or self._unchanged_since_applied(key, current, desired)
                                        or _loaded_already(current, desired)):
                result = current
            else:
                if kind == "Job" and current is not None:
                    # A Job's pod template is immutable: a new download is a new Job. Only the one read
                    # (its uid): a stale read must not delete the Job that replaced it already.
                    if not self._delete_exactly(current):
                        loading = f"Job {name} is being replaced; the server pods wait for it"
                        continue
                    outcome.deleted.append(_ref(desired))
                refusal = immutable_change(current, desired)
                if refusal is not None:
                    problems.append(refusal)
                    continue
                try:
                    result = self.api.apply(desired)
                except ApiError as exc:
                    if exc.retryable:
                        self._report_retry(body, outcome, isvc, kind, name, exc)
                        raise RetryableError(str(exc)) from exc
                    if _keda_saw_deleted_hpa(exc, kind, outcome):
                        raise RetryableError(str(exc), delay=KEDA_RETRY_SECONDS) from exc
                    problems.append(status.Problem("ApplyRejected", f"the API server rejected {kind} {name}: {exc.message}"
                                                   + (NOT_SERVED.format(desired["apiVersion"]) if exc.status == 404 else "")))
                    continue
                outcome.applied.append(_ref(desired))
                self._applied[key] = _applied_as(result)
            if kind in WORKLOAD_KINDS and name == isvc.name:
                deployment = result
            elif kind == "Deployment" and isvc.router is not None and name == router.epp_name(isvc):
                picker = result
            elif kind == "Job":
                loading, failed = _loader_state(result)
                if failed is not None:
                    problems.append(failed)
            elif kind in ROUTING_KINDS:
                problems += filter(None, [_refused_by_gateway(result)])

        if not problems:
            self._delete_unwanted(isvc, wanted_refs, outcome)
        deployment = deployment or self._owned_deployment(body)
        pods, now = self._pods(isvc), self.clock()
        problems += filter(None, [self._unshareable_claim(isvc), status.pod_problem(pods, now), _old_lws(deployment)])
        outcome.problem = status.combine(problems)

        self._finish(body, outcome, deployment=deployment, isvc=isvc, picker=picker, loading=loading,
                     pod_resources=sizing.summary(isvc, _server_pod(wanted, isvc)), capacity=status.capacity_wait(pods, now))
        return outcome

    def _unchanged_since_applied(self, key: tuple[str, str, str], current: Mapping[str, Any], desired: Obj) -> bool:
        """The same config as the last apply, and nobody changed the object since (its version is the one
        that apply returned)."""
        wanted = desired["metadata"]["annotations"][constants.ANNOTATION_CONFIG_HASH]
        return self._applied.get(key) == _applied_as(current) and _applied_as(current)[0] == wanted

    def _leave_zero(self, isvc: spec_mod.InferenceService, wanted: set[tuple[str, str]],
                    outcome: Outcome) -> spec_mod.InferenceService:
        """When KEDA goes (the spec moved to the HPA or to no autoscaling) while the replicas are the
        zero it scaled to, raise them first: an HPA does nothing for a target at zero replicas
        (ScalingDisabled), and without an autoscaler nothing else would. The spec carries the new
        count, as an autoscaler's write does; this reconcile renders it at once."""
        if isvc.replicas != 0 or ("ScaledObject", isvc.name) in wanted:
            return isvc
        scaled = self._get("ScaledObject", isvc.namespace, isvc.name, owned=True)
        if scaled is None or not owned_by(scaled, isvc.uid):
            return isvc
        replicas = max(1, isvc.autoscaling.min_replicas if isvc.autoscaling else 1)
        try:
            self.api.scale(isvc.namespace, isvc.name, replicas)
        except ApiError as exc:
            raise RetryableError(str(exc)) from exc
        outcome.applied.append(f"{constants.KIND}/{isvc.name} replicas 0 -> {replicas} (KEDA, which scaled it to zero, is gone)")
        return dataclasses.replace(isvc, replicas=replicas)

    def _delete_unwanted(self, isvc: spec_mod.InferenceService, wanted: set[tuple[str, str]], outcome: Outcome,
                         kinds: tuple[str, ...] | None = None) -> None:
        """Delete the children this InferenceService owns and its spec no longer asks for (of ``kinds``)."""
        for kind, name in render.removable(isvc):
            if (kind, name) in wanted or (kinds is not None and kind not in kinds):
                continue
            current = self._get(kind, isvc.namespace, name, owned=True)
            if current is not None and owned_by(current, isvc.uid):
                self._delete(kind, isvc.namespace, name)
                outcome.deleted.append(f"{kind}/{name}")

    def _report_retry(self, body: Mapping[str, Any], outcome: Outcome, isvc: spec_mod.InferenceService, kind: str,
                      name: str, exc: ApiError) -> None:
        """A server error that kopf will retry still reaches the status (a 500 that repeats is a
        problem someone must see); throttling, conflicts and no connection pass silently."""
        if exc.status < 500:
            return
        outcome.problem = status.Problem("ApplyFailed", f"the API server failed {kind} {name} (retrying): {exc.message}")
        try:
            self._finish(body, outcome, deployment=self._owned_deployment(body), isvc=isvc)
        except RetryableError:
            pass  # the retry comes anyway

    # -- helpers --

    def _get(self, kind: str, namespace: str, name: str, owned: bool = False) -> Obj | None:
        """The object (``owned``: only where one of the operator's own could be, cache.IndexedApi)."""
        try:
            return (self.api.get_owned if owned else self.api.get)(kind, namespace, name)
        except ApiError as exc:
            raise RetryableError(str(exc)) from exc

    def _delete_exactly(self, obj: Mapping[str, Any]) -> bool:
        """Delete ``obj`` if it is still the object of that name (its uid); False where another replaced it."""
        meta = obj["metadata"]
        try:
            self.api.delete(obj["kind"], meta["namespace"], meta["name"], uid=meta.get("uid"))
        except ApiError as exc:
            if exc.status == 409:  # the uid precondition failed: what was read is gone already
                return False
            raise RetryableError(str(exc)) from exc
        return True

    def _delete(self, kind: str, namespace: str, name: str) -> None:
        try:
            self.api.delete(kind, namespace, name)
        except ApiError as exc:
            raise RetryableError(str(exc)) from exc

    def _unshareable_claim(self, isvc: spec_mod.InferenceService) -> status.Problem | None:
        """An existing claim (spec.modelCache.claimName) that attaches to one node only, while more
        than one pod may run: the CRD cannot see the PVC, so the operator says it."""
        cache = isvc.model_cache
        if cache is None or cache.claim_name is None:
            return None
        pvc = self._get("PersistentVolumeClaim", isvc.namespace, cache.claim_name)
        modes = set(((pvc or {}).get("spec") or {}).get("accessModes") or [])
        if modes == {"ReadOnlyMany"} and not cache.read_only:
            return status.Problem(
                "CacheReadOnly",
                f"PersistentVolumeClaim {cache.claim_name} is ReadOnlyMany: the pods would write the Hub's locks and the "
                "compiled kernels into it and fail; if it holds the model already, set spec.modelCache.readOnly: true",
            )
        if not modes or modes & set(constants.SHARED_ACCESS_MODES) or isvc.max_pods <= 1:
            return None
        return status.Problem(
            "CacheNotShareable",
            f"PersistentVolumeClaim {cache.claim_name} is {', '.join(sorted(modes))}: it attaches to one node, but up to "
            f"{isvc.max_pods} pods may mount it (replicas, autoscaling, rollout.maxSurge); pods on other nodes cannot start",
        )

    def _pods(self, isvc: spec_mod.InferenceService) -> list[Obj]:
        """The server pods, and the endpoint pickers' (a picker in CrashLoopBackOff says why routing fails)."""
        selectors = [selector_string(isvc.name)]
        if isvc.router is not None:
            selectors.append(",".join(f"{k}={v}" for k, v in sorted(router.epp_selector(isvc).items())))
        if isvc.loads_model:  # a loader stuck on a missing HF token Secret says so
            selectors.append(",".join(f"{k}={v}" for k, v in sorted(render.loader_selector(isvc).items())))
        try:
            return [pod for selector in selectors for pod in self.api.list_pods(isvc.namespace, selector)]
        except ApiError as exc:
            raise RetryableError(str(exc)) from exc

    def _owned_deployment(self, body: Mapping[str, Any]) -> Obj | None:
        """The workload (Deployment or LeaderWorkerSet) this InferenceService owns, if any."""
        meta = body["metadata"]
        for kind in WORKLOAD_KINDS:
            try:
                found = self.api.get_owned(kind, meta["namespace"], meta["name"])
            except ApiError:
                continue
            if found is not None and owned_by(found, meta.get("uid", "")):
                return found
        return None

    def _finish(
        self,
        body: Mapping[str, Any],
        outcome: Outcome,
        *,
        deployment: Obj | None,
        isvc: spec_mod.InferenceService | None = None,
        picker: Obj | None = None,
        loading: str | None = None,
        pod_resources: Obj | None = None,
        capacity: str | None = None,
    ) -> None:
        meta = body["metadata"]
        raw_spec = body.get("spec") or {}
        desired = isvc.replicas if isvc else raw_spec.get("replicas", constants.DEFAULT_REPLICAS)
        port = isvc.port if isvc else raw_spec.get("port", server.DEFAULT_PORT)
        now = self.clock()
        previous = body.get("status") or {}
        new = status.compute(
            url=service_url(meta["name"], meta["namespace"], port),
            selector=scale_selector(isvc) if isvc else selector_string(meta["name"]),
            generation=meta.get("generation", 0),
            desired_replicas=desired if isinstance(desired, int) and not isinstance(desired, bool) else 0,
            deployment=deployment,
            picker=picker if isvc is not None and isvc.router is not None else None,
            loading=loading,
            pod_resources=pod_resources,
            capacity=capacity,
            problem=outcome.problem,
            previous=previous,
            now=now,
        )

        if outcome.applied:
            self._event(body, "Normal", "Applied", "applied " + ", ".join(outcome.applied), now, outcome)
        if outcome.deleted:
            self._event(body, "Normal", "Deleted", "deleted " + ", ".join(outcome.deleted), now, outcome)
        was, now_degraded = status.degraded(previous), status.degraded(new)
        if now_degraded and (not was or (was.get("reason"), was.get("message")) != (now_degraded["reason"], now_degraded["message"])):
            self._event(body, "Warning", now_degraded["reason"], now_degraded["message"], now, outcome)

        if status.changed(previous, new):
            try:
                self.api.patch_status(meta["namespace"], meta["name"], new)
            except ApiError as exc:
                raise RetryableError(str(exc)) from exc
            outcome.status_written = True

    def _event(self, body: Mapping[str, Any], type_: str, reason: str, message: str, now: str, outcome: Outcome) -> None:
        try:
            self.api.create_event(event(body, type_, reason, message, now))
        except ApiError as exc:  # an Event is best effort: never fail a reconcile for one
            log.warning("could not post event %s: %s", reason, exc)
            return
        outcome.events.append(f"{type_}/{reason}")
