"""The kopf handlers, called as kopf calls them, against a recording fake of the Kubernetes API.

No API server can run on the machines these tests run on (no Kubernetes, no container runtime),
so nothing here claims cluster behaviour: it pins down what the operator asks the API to do.
"""

from __future__ import annotations

import copy
import logging

import kopf
import pytest

from minisgl_operator import cache, constants, handlers, kube, server
from minisgl_operator.kube import ApiError

LOG = logging.getLogger("test-operator")
T0 = "2026-01-01T00:00:00Z"
IMAGE = "registry.example/minisgl:1.2.3"


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> str:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture(autouse=True)
def wire(fake, clock, monkeypatch):
    handlers.configure(fake, default_image=IMAGE, clock=clock)
    monkeypatch.setattr(handlers, "resyncer", handlers.Resync())
    yield
    handlers._reconciler = None


SPEC = {
    "model": "Qwen/Qwen3-8B",
    "tp": 2,
    "replicas": 2,
    "resources": {"requests": {"cpu": "4000m", "memory": "64Gi"}, "limits": {"memory": "64Gi"}},
    "modelCache": {"size": "200Gi", "accessModes": ["ReadWriteMany"]},
    "autoscaling": {"minReplicas": 2, "maxReplicas": 4},
}


def create(fake, name="chat", spec=None):
    body = fake.create_inferenceservice(name, spec or SPEC)
    handlers.on_create(body=body, logger=LOG)
    finish_loader(fake, name)
    return fake.inferenceservice(name)


def finish_loader(fake, name="chat"):
    """The Job controller runs the shared cache's loader to its end; the operator hears of it."""
    key = ("Job", "llm", f"{name}{constants.LOADER_SUFFIX}")
    if key in fake.objects and not (fake.objects[key].get("status") or {}).get("conditions"):
        fake.run_jobs()
        handlers.on_job_event(event={"type": "MODIFIED", "object": fake.objects[key]}, logger=LOG)


def resync(body):
    """The periodic resync, as the operator runs it: kopf's watch announced the object, then one round."""
    handlers.track(event={"type": None, "object": body})
    handlers.resyncer.run_once(LOG)


def deployment_event(fake, name="chat", type_="MODIFIED", obj=None):
    obj = obj if obj is not None else fake.objects[("Deployment", "llm", name)]
    handlers.on_deployment_event(event={"type": type_, "object": obj}, logger=LOG)


def condition(body, type_):
    return next(cond for cond in body["status"]["conditions"] if cond["type"] == type_)


# --- create ------------------------------------------------------------------------------------


def test_create_applies_every_child_once_in_order_and_writes_status(fake):
    body = create(fake)

    applied = [(kind, name) for verb, kind, _, name in fake.writes() if verb == "apply"]
    assert applied == [
        ("PersistentVolumeClaim", "chat-model-cache"),
        ("Job", "chat-load"),  # fills the shared cache; the server pods wait for it
        ("Service", "chat"),
        ("PodDisruptionBudget", "chat"),
        ("HorizontalPodAutoscaler", "chat"),
        ("Deployment", "chat"),  # once the loader succeeded
    ]
    uid = body["metadata"]["uid"]
    for (kind, name), obj in fake.children().items():
        if kind == "PersistentVolumeClaim":
            assert "ownerReferences" not in obj["metadata"]  # retained: it outlives the InferenceService
            continue
        (ref,) = obj["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["name"], ref["uid"], ref["controller"]) == (constants.KIND, "chat", uid, True), kind

    dep = fake.objects[("Deployment", "llm", "chat")]
    assert dep["spec"]["template"]["spec"]["containers"][0]["image"] == IMAGE

    status = body["status"]
    assert status["phase"] == constants.PHASE_PENDING  # the Deployment controller has not seen it yet
    assert status["observedGeneration"] == 1
    assert status["url"] == f"http://chat.llm.svc:{server.DEFAULT_PORT}"
    assert status["selector"] == "app.kubernetes.io/instance=chat,app.kubernetes.io/name=minisgl"
    assert condition(body, constants.CONDITION_READY)["status"] == "False"
    assert condition(body, constants.CONDITION_PROGRESSING)["status"] == "True"
    assert condition(body, constants.CONDITION_DEGRADED)["status"] == "False"
    assert all(cond["lastTransitionTime"] == T0 for cond in status["conditions"])

    assert [(e["type"], e["reason"]) for e in fake.events] == [("Normal", "Applied")] * 2  # before and after the loader
    assert {e["involvedObject"]["uid"] for e in fake.events} == {uid}


def test_reconciling_again_with_nothing_changed_writes_nothing(fake, clock):
    # The fake API server added defaults and canonicalized quantities ("4000m" -> "4", gpu 2 -> "2"):
    # none of that may read as drift.
    body = create(fake)
    dep = fake.objects[("Deployment", "llm", "chat")]
    container = dep["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["requests"]["cpu"] == "4"
    assert container["resources"]["limits"][constants.GPU_RESOURCE] == "2"
    assert container["terminationMessagePath"] == "/dev/termination-log"

    fake.reset_calls()
    clock.now = "2026-01-01T00:05:00Z"
    handlers.on_resume(body=body, logger=LOG)
    resync(fake.inferenceservice("chat"))
    handlers.on_update(body=fake.inferenceservice("chat"), logger=LOG)
    deployment_event(fake)

    assert fake.writes() == []
    assert {verb for verb, *_ in fake.calls} == {"get", "list"}


# --- status follows the Deployment -------------------------------------------------------------


def test_status_follows_the_deployment_until_ready(fake, clock):
    create(fake)
    fake.set_deployment_status("chat", replicas=2, updatedReplicas=2, readyReplicas=1)
    clock.now = "2026-01-01T00:10:00Z"
    fake.reset_calls()
    deployment_event(fake)

    assert fake.writes() == [("patch_status", constants.KIND, "llm", "chat")]
    body = fake.inferenceservice("chat")
    assert body["status"]["phase"] == constants.PHASE_PROGRESSING
    assert body["status"]["readyReplicas"] == 1
    ready = condition(body, constants.CONDITION_READY)
    assert (ready["status"], ready["reason"], ready["message"]) == ("True", "MinimumReplicasReady", "1/2 replicas ready")
    assert ready["lastTransitionTime"] == "2026-01-01T00:10:00Z"
    # Degraded did not change, so its transition time did not either.
    assert condition(body, constants.CONDITION_DEGRADED)["lastTransitionTime"] == T0

    fake.set_deployment_status("chat", replicas=2, updatedReplicas=2, readyReplicas=2, availableReplicas=2)
    clock.now = "2026-01-01T00:20:00Z"
    deployment_event(fake)
    body = fake.inferenceservice("chat")
    assert body["status"]["phase"] == constants.PHASE_READY
    assert body["status"]["replicas"] == 2
    assert condition(body, constants.CONDITION_READY)["reason"] == "AllReplicasReady"
    assert condition(body, constants.CONDITION_READY)["lastTransitionTime"] == "2026-01-01T00:10:00Z"
    progressing = condition(body, constants.CONDITION_PROGRESSING)
    assert (progressing["status"], progressing["reason"]) == ("False", "RolloutComplete")

    fake.reset_calls()
    deployment_event(fake)
    assert fake.writes() == []


def test_a_stuck_rollout_is_degraded_with_the_deployments_message(fake):
    create(fake)
    fake.set_deployment_status(
        "chat",
        replicas=2,
        updatedReplicas=2,
        readyReplicas=0,
        conditions=[
            {
                "type": "Progressing",
                "status": "False",
                "reason": "ProgressDeadlineExceeded",
                "message": 'ReplicaSet "chat-5d9c" has timed out progressing.',
            }
        ],
    )
    fake.reset_calls()
    deployment_event(fake)
    body = fake.inferenceservice("chat")
    assert body["status"]["phase"] == constants.PHASE_DEGRADED
    degraded = condition(body, constants.CONDITION_DEGRADED)
    assert (degraded["status"], degraded["reason"]) == ("True", "ProgressDeadlineExceeded")
    assert "timed out" in degraded["message"]
    assert [(e["type"], e["reason"]) for e in fake.events[-1:]] == [("Warning", "ProgressDeadlineExceeded")]


def test_scaled_to_zero(fake):
    create(fake, spec={"model": "m", "replicas": 0})
    fake.set_deployment_status("chat", replicas=0)
    deployment_event(fake)
    body = fake.inferenceservice("chat")
    assert body["status"]["phase"] == constants.PHASE_SCALED_TO_ZERO
    assert condition(body, constants.CONDITION_READY)["reason"] == "ScaledToZero"
    assert ("PodDisruptionBudget", "chat") not in fake.children()


# --- drift ---------------------------------------------------------------------------------------


def test_an_edited_deployment_is_put_back(fake):
    create(fake)
    desired = copy.deepcopy(fake.objects[("Deployment", "llm", "chat")]["spec"]["template"])

    def tamper(dep):
        container = dep["spec"]["template"]["spec"]["containers"][0]
        container["image"] = "someone/else:latest"
        container["resources"]["limits"][constants.GPU_RESOURCE] = "1"
        dep["spec"]["replicas"] = 7

    fake.edit("Deployment", "chat", tamper)
    fake.reset_calls()
    deployment_event(fake)

    assert [w for w in fake.writes() if w[0] == "apply"] == [("apply", "Deployment", "llm", "chat")]
    repaired = fake.objects[("Deployment", "llm", "chat")]
    assert repaired["spec"]["replicas"] == 2
    assert repaired["spec"]["template"] == desired


def test_a_deleted_deployment_comes_back(fake):
    create(fake)
    gone = fake.objects[("Deployment", "llm", "chat")]
    fake.remove("Deployment", "chat")
    fake.reset_calls()
    deployment_event(fake, type_="DELETED", obj=gone)

    assert ("apply", "Deployment", "llm", "chat") in fake.writes()
    assert ("Deployment", "chat") in fake.children()


def test_the_resync_timer_recreates_a_deleted_service(fake):
    create(fake)
    fake.remove("Service", "chat")
    fake.reset_calls()
    resync(fake.inferenceservice("chat"))
    assert [w for w in fake.writes() if w[0] == "apply"] == [("apply", "Service", "llm", "chat")]


def test_the_resync_follows_kopfs_watch_and_one_failure_does_not_stop_the_rest(fake):
    create(fake, name="chat")
    create(fake, name="code")
    for name in ("chat", "code", "gone"):
        handlers.track(event={"type": None, "object": {"metadata": {"namespace": "llm", "name": name}}})
    handlers.track(event={"type": "DELETED", "object": fake.inferenceservice("code")})
    assert sorted(handlers.resyncer.known()) == [("llm", "chat"), ("llm", "gone")]

    fake.remove("Service", "chat")
    fake.fail_next["get"] = ApiError(500, "InternalError", "etcd timeout")  # the first read fails
    handlers.resyncer.run_once(LOG)  # does not raise
    handlers.resyncer.run_once(LOG)
    assert ("Service", "chat") in fake.children()
    assert handlers.resyncer.known() == [("llm", "chat")]  # "gone" does not exist: forgotten


# --- spec changes --------------------------------------------------------------------------------


def test_a_spec_update_rolls_the_deployment_and_removes_what_is_no_longer_wanted(fake):
    create(fake)
    fake.set_deployment_status("chat", replicas=2, updatedReplicas=2, readyReplicas=2)

    def change(spec):
        spec["tp"] = 4
        spec["replicas"] = 1
        del spec["autoscaling"]

    body = fake.update_spec("chat", change)
    fake.reset_calls()
    handlers.on_update(body=body, logger=LOG)

    writes = fake.writes()
    assert ("apply", "Deployment", "llm", "chat") in writes
    assert ("delete", "HorizontalPodAutoscaler", "llm", "chat") in writes
    assert ("delete", "PodDisruptionBudget", "llm", "chat") in writes
    assert not any(w[1] in ("Service", "PersistentVolumeClaim") for w in writes)
    container = fake.objects[("Deployment", "llm", "chat")]["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"][constants.GPU_RESOURCE] == "4"
    assert container["args"][container["args"].index(server.FLAG_TP) + 1] == "4"
    body = fake.inferenceservice("chat")
    assert body["status"]["observedGeneration"] == 2
    assert body["status"]["phase"] == constants.PHASE_PROGRESSING  # the controller has not seen generation 2


def test_kubectl_scale_reaches_the_deployment(fake):
    create(fake)
    body = fake.update_spec("chat", lambda spec: spec.update(replicas=3))
    handlers.on_update(body=body, logger=LOG)
    assert fake.objects[("Deployment", "llm", "chat")]["spec"]["replicas"] == 3


# --- bad specs and API errors: Degraded + Event, never a crash loop -----------------------------


def test_a_bad_spec_is_degraded_with_an_event_and_no_child_is_written(fake):
    bad = {"model": "Qwen/Qwen3-8B", "tp": 2, "args": ["--max-running-requests", "many", "--no-such-flag"]}
    body = fake.create_inferenceservice("chat", bad)

    handlers.on_create(body=body, logger=LOG)  # does not raise: kopf would retry forever

    assert fake.children() == {}
    body = fake.inferenceservice("chat")
    assert body["status"]["phase"] == constants.PHASE_DEGRADED
    degraded = condition(body, constants.CONDITION_DEGRADED)
    assert (degraded["status"], degraded["reason"]) == ("True", "InvalidSpec")
    assert "spec.args" in degraded["message"]
    (event,) = fake.events
    assert (event["type"], event["reason"]) == ("Warning", "InvalidSpec")
    assert event["message"] == degraded["message"]

    # The same bad spec again: no second Event, no status write.
    fake.reset_calls()
    resync(body)
    assert fake.writes() == []


def test_a_spec_turned_bad_leaves_the_running_deployment_alone(fake):
    create(fake)
    fake.set_deployment_status("chat", replicas=2, updatedReplicas=2, readyReplicas=2)
    deployment_event(fake)
    before = copy.deepcopy(fake.objects[("Deployment", "llm", "chat")])

    body = fake.update_spec("chat", lambda spec: spec.update(tp=3))  # as if the CRD were older
    fake.reset_calls()
    handlers.on_update(body=body, logger=LOG)

    assert [w for w in fake.writes() if w[0] in ("apply", "delete")] == []
    assert fake.objects[("Deployment", "llm", "chat")] == before
    body = fake.inferenceservice("chat")
    assert condition(body, constants.CONDITION_DEGRADED)["reason"] == "InvalidSpec"
    assert "spec.tp" in condition(body, constants.CONDITION_DEGRADED)["message"]
    assert condition(body, constants.CONDITION_READY)["status"] == "True"  # the old pods still serve

    # Fixing the spec clears Degraded.
    body = fake.update_spec("chat", lambda spec: spec.update(tp=2))
    handlers.on_update(body=body, logger=LOG)
    assert condition(fake.inferenceservice("chat"), constants.CONDITION_DEGRADED)["status"] == "False"


def test_an_object_the_api_server_rejects_is_degraded_not_retried(fake):
    fake.fail_next["apply"] = ApiError(422, "Invalid", 'Deployment.apps "chat" is invalid: spec.template...')
    body = fake.create_inferenceservice("chat", {"model": "m"})
    handlers.on_create(body=body, logger=LOG)
    degraded = condition(fake.inferenceservice("chat"), constants.CONDITION_DEGRADED)
    assert (degraded["status"], degraded["reason"]) == ("True", "ApplyRejected")
    assert "is invalid" in degraded["message"]
    assert fake.events[-1]["type"] == "Warning"


@pytest.mark.parametrize("status_code", [409, 429, 500, 503, 0])
def test_transient_api_errors_make_kopf_retry_later(fake, status_code):
    fake.fail_next["apply"] = ApiError(status_code, "Transient", "try again")
    body = fake.create_inferenceservice("chat", {"model": "m"})
    with pytest.raises(kopf.TemporaryError):
        handlers.on_create(body=body, logger=LOG)
    # ... and the retry succeeds.
    handlers.on_create(body=fake.inferenceservice("chat"), logger=LOG)
    assert ("Deployment", "chat") in fake.children()


def test_a_child_name_taken_by_someone_else_is_not_overwritten(fake):
    foreign = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "chat", "namespace": "llm"},
        "spec": {"ports": [{"port": 80}]},
    }
    fake.add_foreign(foreign)
    body = fake.create_inferenceservice("chat", {"model": "m"})
    handlers.on_create(body=body, logger=LOG)

    assert ("apply", "Service", "llm", "chat") not in fake.writes()
    assert fake.objects[("Service", "llm", "chat")]["spec"] == foreign["spec"]
    assert condition(fake.inferenceservice("chat"), constants.CONDITION_DEGRADED)["reason"] == "NameConflict"


# --- deletion and foreign objects ----------------------------------------------------------------


def test_deletion_writes_nothing_the_garbage_collector_does_the_rest(fake):
    create(fake)
    body = fake.inferenceservice("chat")
    body["metadata"]["deletionTimestamp"] = "2026-01-01T01:00:00Z"
    fake.reset_calls()
    handlers.on_update(body=body, logger=LOG)
    handlers.on_delete(name="chat", namespace="llm", logger=LOG)
    assert fake.writes() == []


def test_deployment_events_of_other_owners_are_ignored(fake):
    create(fake)
    other = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "llm", "ownerReferences": [
            {"kind": "ReplicaSet", "name": "x", "uid": "u", "controller": True, "apiVersion": "apps/v1"}]},
    }
    fake.reset_calls()
    deployment_event(fake, obj=other)
    assert fake.calls == []


# --- registration with kopf ----------------------------------------------------------------------


def _ours(handler, group, plural):
    return handler.selector is not None and (handler.selector.group, handler.selector.any_name) == (group, plural)


def test_the_handlers_are_registered_with_kopf_for_the_inferenceservice_resource():
    registry = kopf.get_default_registry()
    changing = {str(h.id): h for h in registry._changing.get_all_handlers() if _ours(h, constants.GROUP, constants.PLURAL)}
    assert set(changing) == {"reconcile-create", "reconcile-update", "reconcile-resume", "deleted"}
    assert str(changing["reconcile-create"].reason) == "create"
    assert str(changing["reconcile-update"].reason) == "update"
    assert changing["reconcile-resume"].initial is True
    assert str(changing["deleted"].reason) == "delete"
    # Optional: kopf puts no finalizer on InferenceServices, deletion is never blocked on the operator.
    assert changing["deleted"].requires_finalizer is False
    for handler in changing.values():
        assert handler.selector.version == constants.VERSION

    # No timers or daemons: kopf would put its finalizer on every InferenceService for them.
    assert [h for h in registry._spawning.get_all_handlers() if _ours(h, constants.GROUP, constants.PLURAL)] == []

    (tracker,) = [h for h in registry._watching.get_all_handlers() if _ours(h, constants.GROUP, constants.PLURAL)]
    assert str(tracker.id) == "track"
    for group, plural in (("apps", "deployments"), ("", "pods")):
        (watcher,) = [h for h in registry._watching.get_all_handlers() if _ours(h, group, plural)]
        assert watcher.labels == {constants.LABEL_MANAGED_BY: constants.OPERATOR_NAME}


def test_startup_configures_kopf_for_least_privilege(fake):
    settings = kopf.OperatorSettings()
    handlers.startup(settings=settings, logger=LOG)
    assert handlers.resyncer.running  # the periodic resync, in place of a kopf timer
    handlers.cleanup()
    assert not handlers.resyncer.running
    assert settings.peering.standalone is True
    # kopf's own requests time out too: a half-open connection must not hang its watches.
    assert settings.networking.connect_timeout is not None and settings.networking.request_timeout is not None
    assert settings.scanning.disabled is True
    assert isinstance(settings.persistence.progress_storage, kopf.AnnotationsProgressStorage)
    assert handlers._get_reconciler().api.live is fake  # a configured API is kept
    # Every kind the operator reads is watched with its label selector in the API server.
    for group, _, plural in (v for k, v in cache.INDEXED_KINDS.items() if k != constants.KIND):
        assert settings.watching.label_selectors[group, plural] == handlers.MANAGED_SELECTOR


# --- switching autoscalers, errors that no retry fixes, the router's health ----------------------

def test_switching_a_running_service_from_the_hpa_to_keda_converges(fake):
    # The fake API runs KEDA's admission webhook (kube_webhooks): a ScaledObject whose target an HPA
    # already scales is refused, so the HPA must go first.
    spec = {"model": "m", "modelCache": {"size": "100Gi", "accessModes": ["ReadWriteMany"]},
            "autoscaling": {"minReplicas": 1, "maxReplicas": 4}}  # fmt: skip
    create(fake, spec=spec)
    assert ("HorizontalPodAutoscaler", "chat") in fake.children()
    keda = {"prometheusAddress": "http://prom:9090", "target": "4"}
    body = fake.update_spec("chat", lambda s: s["autoscaling"].update(keda=keda))
    handlers.on_update(body=body, logger=LOG)
    children = fake.children()
    assert ("ScaledObject", "chat") in children and ("HorizontalPodAutoscaler", "chat") not in children
    assert condition(fake.inferenceservice("chat"), constants.CONDITION_DEGRADED)["status"] == "False"
    # The HPA went before the ScaledObject came: never two autoscalers on one target.
    writes = [(verb, kind) for verb, kind, _, name in fake.writes() if name == "chat" and verb in ("apply", "delete")]
    assert writes.index(("delete", "HorizontalPodAutoscaler")) < writes.index(("apply", "ScaledObject"))
    # ... and back: the ScaledObject goes before the HPA comes.
    fake.reset_calls()
    body = fake.update_spec("chat", lambda s: s["autoscaling"].pop("keda"))
    handlers.on_update(body=body, logger=LOG)
    writes = [(verb, kind) for verb, kind, _, name in fake.writes() if name == "chat" and verb in ("apply", "delete")]
    assert writes.index(("delete", "ScaledObject")) < writes.index(("apply", "HorizontalPodAutoscaler"))
    assert ("ScaledObject", "chat") not in fake.children()


UNDECLARED = ('failed to create typed patch object (apps/v1, Kind=Deployment): '
              '.spec.template.spec.containers[name="server"].resorces: field not declared in schema')  # fmt: skip


def test_server_side_applys_500_for_an_undeclared_field_is_a_clear_condition_not_a_retry(fake):
    fake.fail_next["apply"] = ApiError(500, "InternalError", UNDECLARED)
    body = fake.create_inferenceservice("chat", {"model": "m"})
    handlers.on_create(body=body, logger=LOG)  # no kopf.TemporaryError: retrying cannot fix it
    degraded = condition(fake.inferenceservice("chat"), constants.CONDITION_DEGRADED)
    assert (degraded["status"], degraded["reason"]) == ("True", "ApplyRejected")
    assert "resorces: field not declared in schema" in degraded["message"]
    assert fake.events[-1]["type"] == "Warning"


def test_a_server_error_that_kopf_retries_still_reaches_the_status(fake):
    fake.fail_next["apply"] = ApiError(500, "InternalError", "Internal error occurred: webhook call failed")
    body = fake.create_inferenceservice("chat", {"model": "m"})
    with pytest.raises(kopf.TemporaryError):
        handlers.on_create(body=body, logger=LOG)
    degraded = condition(fake.inferenceservice("chat"), constants.CONDITION_DEGRADED)
    assert (degraded["status"], degraded["reason"]) == ("True", "ApplyFailed")
    assert "retrying" in degraded["message"] and "webhook call failed" in degraded["message"]
    handlers.on_create(body=fake.inferenceservice("chat"), logger=LOG)  # the retry succeeds and clears it
    assert condition(fake.inferenceservice("chat"), constants.CONDITION_DEGRADED)["status"] == "False"


def test_a_misspelt_pod_template_field_is_an_invalid_spec_naming_it(fake):
    spec = {"model": "m", "podTemplate": {"spec": {"containers": [{"name": "server", "resorces": {}}]}}}
    body = fake.create_inferenceservice("chat", spec)
    handlers.on_create(body=body, logger=LOG)
    degraded = condition(fake.inferenceservice("chat"), constants.CONDITION_DEGRADED)
    assert (degraded["status"], degraded["reason"]) == ("True", "InvalidSpec")
    assert "spec.podTemplate.spec.containers[0].resorces: unknown field" in degraded["message"]
    assert not any(verb == "apply" for verb, *_ in fake.writes())


def test_a_router_without_an_available_endpoint_picker_is_not_ready(fake):
    spec = {"model": "m", "replicas": 2, "router": {"gateway": {"name": "gw"}}}
    create(fake, spec=spec)
    fake.set_deployment_status("chat", replicas=2, updatedReplicas=2, readyReplicas=2, availableReplicas=2)
    fake.set_deployment_status("chat-epp", replicas=2, updatedReplicas=2, readyReplicas=0, availableReplicas=0)
    deployment_event(fake)
    body = fake.inferenceservice("chat")
    ready = condition(body, constants.CONDITION_READY)
    assert (ready["status"], ready["reason"]) == ("False", "EndpointPickerUnavailable")
    assert body["status"]["phase"] != constants.PHASE_READY
    fake.set_deployment_status("chat-epp", replicas=2, updatedReplicas=2, readyReplicas=1, availableReplicas=1)
    deployment_event(fake)
    body = fake.inferenceservice("chat")
    assert condition(body, constants.CONDITION_READY)["status"] == "True"
    assert body["status"]["phase"] == constants.PHASE_READY


def test_a_crash_looping_endpoint_picker_says_so_in_the_status(fake):
    fake.add_node("gpu-1", 8)
    fake.image_faults["registry.example/epp:broken"] = "CrashLoopBackOff"
    handlers.configure(fake, default_image=IMAGE)
    handlers._reconciler.epp_image = "registry.example/epp:broken"
    create(fake, spec={"model": "m", "router": {}})
    fake.run_controllers()
    deployment_event(fake)
    body = fake.inferenceservice("chat")
    degraded = condition(body, constants.CONDITION_DEGRADED)
    assert (degraded["status"], degraded["reason"]) == ("True", "CrashLoopBackOff")
    assert "chat-epp" in degraded["message"]
    assert condition(body, constants.CONDITION_READY)["status"] == "False"


# --- a model cache that outlives its InferenceService, filled once ------------------------------

SHARED_CACHE = {"model": "Qwen/Qwen3-8B", "replicas": 2, "modelCache": {"size": "300Gi", "accessModes": ["ReadWriteMany"]}}


def test_the_model_cache_survives_deleting_the_inferenceservice_and_a_new_one_adopts_it(fake):
    # A delete and re-create (a GitOps replace) must not download hundreds of GB again.
    create(fake, spec=SHARED_CACHE)
    pvc_uid = fake.objects[("PersistentVolumeClaim", "llm", "chat-model-cache")]["metadata"]["uid"]
    fake.user_delete(constants.KIND, "chat")  # the garbage collector follows the ownerReferences
    assert set(fake.children()) == {("PersistentVolumeClaim", "chat-model-cache")}

    body = create(fake, spec=SHARED_CACHE)  # same name, new uid
    assert condition(body, constants.CONDITION_DEGRADED)["status"] == "False"  # no NameConflict: adopted
    assert fake.objects[("PersistentVolumeClaim", "llm", "chat-model-cache")]["metadata"]["uid"] == pvc_uid
    assert ("Deployment", "chat") in fake.children()


def test_a_renamed_inferenceservice_leaves_the_cache_for_claim_name(fake):
    create(fake, spec=SHARED_CACHE)
    fake.user_delete(constants.KIND, "chat")
    renamed = {**SHARED_CACHE, "modelCache": {"claimName": "chat-model-cache"}}
    body = create(fake, name="assistant", spec=renamed)
    assert condition(body, constants.CONDITION_DEGRADED)["status"] == "False"
    volumes = fake.objects[("Deployment", "llm", "assistant")]["spec"]["template"]["spec"]["volumes"]
    assert {"name": constants.CACHE_VOLUME, "persistentVolumeClaim": {"claimName": "chat-model-cache"}} in volumes


def test_retain_false_deletes_the_cache_with_the_inferenceservice(fake):
    create(fake, spec={**SHARED_CACHE, "modelCache": {**SHARED_CACHE["modelCache"], "retain": False}})
    fake.user_delete(constants.KIND, "chat")
    assert fake.children() == {}


def test_a_foreign_claim_of_the_caches_name_is_still_not_adopted(fake):
    fake.add_foreign({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "chat-model-cache", "namespace": "llm"},
                      "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}})  # fmt: skip
    body = create(fake, spec=SHARED_CACHE)
    degraded = condition(body, constants.CONDITION_DEGRADED)
    assert (degraded["status"], degraded["reason"]) == ("True", "NameConflict")


def test_retain_is_refused_where_the_operator_creates_no_claim():
    from minisgl_operator.spec import SpecError, parse

    for model_cache in ({"claimName": "models", "retain": True}, {"size": "10Gi", "perPod": True, "retain": False}):
        body = {"apiVersion": constants.API_VERSION, "kind": constants.KIND, "metadata": {"name": "chat", "namespace": "llm"},
                "spec": {"model": "m", "modelCache": model_cache}}  # fmt: skip
        with pytest.raises(SpecError, match="retain: applies only to a PVC the operator creates"):
            parse(body)


def test_the_server_pods_wait_for_the_loader_job_to_fill_the_shared_cache(fake):
    body = fake.create_inferenceservice("chat", SHARED_CACHE)
    handlers.on_create(body=body, logger=LOG)
    job = fake.objects[("Job", "llm", "chat-load")]
    assert ("Deployment", "chat") not in fake.children()  # no GPU pod downloads meanwhile
    progressing = condition(fake.inferenceservice("chat"), constants.CONDITION_PROGRESSING)
    assert (progressing["status"], progressing["reason"]) == ("True", "LoadingModel")
    # The Job runs the server's own download into the same cache, with the server's environment.
    (ctr,) = job["spec"]["template"]["spec"]["containers"]
    assert ctr["command"][-1] == "Qwen/Qwen3-8B" and ctr["image"] == IMAGE
    assert {"name": "HF_HOME", "value": constants.CACHE_ENV["HF_HOME"]} in ctr["env"]
    volumes = job["spec"]["template"]["spec"]["volumes"]
    assert {"name": constants.CACHE_VOLUME, "persistentVolumeClaim": {"claimName": "chat-model-cache"}} in volumes
    assert constants.GPU_RESOURCE not in ctr["resources"].get("limits", {})
    finish_loader(fake)
    assert ("Deployment", "chat") in fake.children()


def test_a_failed_loader_is_degraded_and_a_new_model_waits_while_the_old_pods_serve(fake):
    create(fake, spec=SHARED_CACHE)
    old_args = fake.objects[("Deployment", "llm", "chat")]["spec"]["template"]["spec"]["containers"][0]["args"]
    fake.image_faults[IMAGE] = "CrashLoopBackOff"  # the next loader's download fails
    body = fake.update_spec("chat", lambda spec: spec.update(model="Qwen/Qwen3-32B"))
    handlers.on_update(body=body, logger=LOG)
    # The loader Job's pod template is immutable: the old Job went, a new one for the new model came.
    (ctr,) = fake.objects[("Job", "llm", "chat-load")]["spec"]["template"]["spec"]["containers"]
    assert ctr["command"][-1] == "Qwen/Qwen3-32B"
    assert fake.objects[("Deployment", "llm", "chat")]["spec"]["template"]["spec"]["containers"][0]["args"] == old_args
    fake.run_jobs()
    handlers.on_job_event(event={"type": "MODIFIED", "object": fake.objects[("Job", "llm", "chat-load")]}, logger=LOG)
    degraded = condition(fake.inferenceservice("chat"), constants.CONDITION_DEGRADED)
    assert (degraded["status"], degraded["reason"]) == ("True", "ModelLoadFailed")
    assert "BackoffLimitExceeded" in degraded["message"]
    assert fake.objects[("Deployment", "llm", "chat")]["spec"]["template"]["spec"]["containers"][0]["args"] == old_args


def test_the_fake_api_servers_500_for_an_undeclared_field_is_recognised_as_permanent(fake):
    # The fake answers server-side apply of a field the type does not declare as the API server does
    # (kube_apply): the operator must read that answer as a refusal, not as a transient failure.
    from minisgl_operator import render as render_mod

    body = fake.create_inferenceservice("chat", {"model": "m"})
    dep = next(o for o in render_mod.render(body, IMAGE) if o["kind"] == "Deployment")
    dep["spec"]["template"]["spec"]["containers"][0]["resorces"] = {}
    with pytest.raises(ApiError) as info:
        fake.apply(dep)
    assert info.value.status == 500 and not info.value.retryable


# --- reads from kopf's indexes, not a GET per child per reconcile ---------------------------------


def kopf_indexes(fake) -> dict[str, dict]:
    """What kopf's indexes hold after its watches streamed the fake's objects: (namespace, name) ->
    [object], the children's filtered by the operator's label as the API server filters them."""
    out = {}
    for kind in cache.INDEXED_KINDS:
        selector = "" if kind == constants.KIND else handlers.MANAGED_SELECTOR
        out[kind] = {(o["metadata"]["namespace"], o["metadata"]["name"]): [o] for o in fake.watch(kind, selector)}
    return out


def reconcile_with_indexes(fake, name="chat"):
    """A Deployment event as kopf delivers it: with every index as a keyword argument."""
    indexes = {cache.index_id(kind): index for kind, index in kopf_indexes(fake).items()}
    event = {"type": "MODIFIED", "object": fake.objects[("Deployment", "llm", name)]}
    handlers.on_deployment_event(event=event, logger=LOG, **indexes)


def test_every_kind_the_reconciler_reads_has_a_kopf_index_on_the_operators_label():
    registry = kopf.get_default_registry()
    for kind, (group, version, plural) in cache.INDEXED_KINDS.items():
        (index,) = [h for h in registry._indexing.get_all_handlers() if str(h.id) == cache.index_id(kind)]
        assert (index.selector.group, index.selector.version, index.selector.any_name) == (group, version, plural)
        assert index.labels == (None if kind == constants.KIND else {constants.LABEL_MANAGED_BY: constants.OPERATOR_NAME})
        assert {"list", "watch"} <= set(kube.PERMISSIONS[(group, plural)]), kind


@pytest.mark.parametrize("spec", [SPEC, {**SPEC, "router": {"gateway": {"name": "gw"}}}], ids=["hpa", "router"])
def test_a_reconcile_with_nothing_to_do_reads_nothing_from_the_api_server(fake, spec):
    # Every pod and Deployment event reconciles its owner: 15-25 live GETs each would load the API
    # server with the pods' churn. With kopf's indexes, steady state costs no request at all.
    create(fake, spec=spec)
    reconcile_with_indexes(fake)  # the indexes hand over; the status settles
    fake.reset_calls()
    reconcile_with_indexes(fake)
    assert [call for call in fake.calls if call[1] in cache.INDEXED_KINDS and call[1] not in cache.OPTIONAL_KINDS] == []
    assert fake.writes() == []
    # Custom kinds the cluster may lack are read live only where the spec does not ask for them.
    assert {kind for _, kind, _, _ in fake.calls} <= cache.OPTIONAL_KINDS


def test_children_of_crds_the_cluster_lacks_are_not_read_live_on_every_reconcile(fake):
    """Without the LWS, KEDA or Gateway CRDs each optional kind's GET is a 404: asked once, believed a
    while, and forgotten when the operator applies such an object itself."""
    create(fake, spec={"model": "m"})
    for _ in range(5):
        reconcile_with_indexes(fake)
    optional_gets = [call for call in fake.calls if call[0] == "get" and call[1] in cache.OPTIONAL_KINDS]
    assert len(optional_gets) == len(set(optional_gets)) <= len(cache.OPTIONAL_KINDS) + 1, optional_gets
    # The spec moves to KEDA: the ScaledObject the operator applies is seen at once, not a minute later.
    keda = {"prometheusAddress": "http://prom:9090", "target": "4"}
    fake.update_spec("chat", lambda spec: spec.update(autoscaling={"maxReplicas": 3, "keda": keda}))
    reconcile_with_indexes(fake)
    fake.update_spec("chat", lambda spec: spec.pop("autoscaling"))
    reconcile_with_indexes(fake)
    assert ("ScaledObject", "chat") not in fake.children()


def test_an_index_copied_while_kopf_updates_it_is_copied_again():
    """kopf's loop changes an index while a handler thread reads it: the copy meets
    'dictionary changed size during iteration' and is taken again."""

    class Busy(dict):
        def __init__(self, *args, clashes: int = 2):
            super().__init__(*args)
            self.clashes = clashes

        def items(self):
            if self.clashes:
                self.clashes -= 1
                raise RuntimeError("dictionary changed size during iteration")
            return super().items()

    pod = {"metadata": {"name": "p", "namespace": "llm", "labels": {"a": "b"}}}
    api = cache.IndexedApi(None, indexes={"Pod": Busy({("llm", "p"): [pod]})})
    assert api.list_pods("llm", "a=b") == [pod]


def test_with_indexes_a_foreign_object_of_a_childs_name_is_still_not_overwritten(fake):
    # A foreign object carries no operator label, so no index holds it: a miss is read live.
    create(fake, spec={"model": "m"})
    reconcile_with_indexes(fake)
    fake.add_foreign({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "chat", "namespace": "llm"},
                      "spec": {"maxUnavailable": 2}})  # fmt: skip
    fake.update_spec("chat", lambda spec: spec.update(replicas=3))
    reconcile_with_indexes(fake)
    assert fake.objects[("PodDisruptionBudget", "llm", "chat")]["spec"] == {"maxUnavailable": 2}
    degraded = condition(fake.inferenceservice("chat"), constants.CONDITION_DEGRADED)
    assert (degraded["status"], degraded["reason"]) == ("True", "NameConflict")


def test_with_indexes_what_the_spec_drops_is_still_deleted(fake):
    create(fake, spec=SPEC)
    reconcile_with_indexes(fake)
    fake.update_spec("chat", lambda spec: spec.pop("autoscaling"))
    reconcile_with_indexes(fake)
    assert ("HorizontalPodAutoscaler", "chat") not in fake.children()


# --- LoRA adapters (spec.adapters) ---------------------------------------------------------------

ADAPTER = {"name": "sql", "source": "org/sql-lora", "rank": 32}


def _server_args(fake) -> list[str]:
    return fake.objects[("Deployment", "llm", "chat")]["spec"]["template"]["spec"]["containers"][0]["args"]


def test_adapters_the_api_server_stored_are_loaded_with_the_model_then_served(fake):
    body = fake.submit_inferenceservice("chat", {**SHARED_CACHE, "adapters": [ADAPTER]})
    handlers.on_create(body=body, logger=LOG)
    job = fake.objects[("Job", "llm", "chat-load")]["spec"]["template"]["spec"]
    assert [ctr["name"] for ctr in job["containers"]] == [constants.LOADER_CONTAINER, constants.ADAPTER_CONTAINER]
    assert ("Deployment", "chat") not in fake.children()  # the adapter is not in the cache yet
    finish_loader(fake)
    args = _server_args(fake)
    assert args[args.index("--lora-modules"):] == [
        "--lora-modules", "sql=/models/lora/org/sql-lora", "--max-loras", "1", "--max-lora-rank", "32"]
    assert "initContainers" not in fake.objects[("Deployment", "llm", "chat")]["spec"]["template"]["spec"]


def test_a_new_adapter_is_downloaded_before_the_pods_roll_to_serve_it(fake):
    create(fake, spec=SHARED_CACHE)
    old_args = _server_args(fake)
    body = fake.update_spec("chat", lambda spec: spec.update(adapters=[ADAPTER]))
    handlers.on_update(body=body, logger=LOG)
    # The Job's pod template is immutable: a new Job, with the adapter, replaced the finished one.
    job = fake.objects[("Job", "llm", "chat-load")]
    assert job["spec"]["template"]["spec"]["containers"][1]["command"][-2:] == ["org/sql-lora", "/models/lora/org/sql-lora"]
    assert _server_args(fake) == old_args  # the pods keep serving the model alone meanwhile
    progressing = condition(fake.inferenceservice("chat"), constants.CONDITION_PROGRESSING)
    assert (progressing["status"], progressing["reason"]) == ("True", "LoadingModel")
    finish_loader(fake)
    assert "sql=/models/lora/org/sql-lora" in _server_args(fake)


def test_removing_every_adapter_rolls_the_pods_back_to_the_base_model(fake):
    spec = {"model": "Qwen/Qwen3-8B", "modelCache": {"claimName": "models"}, "adapters": [ADAPTER]}
    create(fake, spec=spec)
    init = fake.objects[("Deployment", "llm", "chat")]["spec"]["template"]["spec"]["initContainers"]
    assert constants.ADAPTER_CONTAINER in {c["name"] for c in init}
    body = fake.update_spec("chat", lambda spec: spec.pop("adapters"))
    handlers.on_update(body=body, logger=LOG)
    dep = fake.objects[("Deployment", "llm", "chat")]["spec"]["template"]["spec"]
    assert "--lora-modules" not in dep["containers"][0]["args"]
    assert constants.ADAPTER_CONTAINER not in {c["name"] for c in dep.get("initContainers", [])}


@pytest.mark.parametrize("spec", [
    {**SHARED_CACHE, "adapters": [ADAPTER]},  # the loader Job fetches it
    {"model": "Qwen/Qwen3-8B", "modelCache": {"claimName": "models"}, "adapters": [ADAPTER]},  # an init container
], ids=["loader", "init-container"])  # fmt: skip
def test_with_adapters_reconciling_again_writes_nothing(fake, clock, spec):
    # The API server defaults the init container's fields too: none of that may read as drift.
    body = create(fake, spec=spec)
    fake.reset_calls()
    clock.now = "2026-01-01T00:05:00Z"
    resync(body)
    handlers.on_update(body=fake.inferenceservice("chat"), logger=LOG)
    assert fake.writes() == []


def test_adapters_the_server_would_refuse_are_degraded_and_the_running_pods_stay(fake):
    create(fake, spec={"model": "Qwen/Qwen3-8B", "modelCache": {"claimName": "models"}})
    before = copy.deepcopy(fake.objects[("Deployment", "llm", "chat")])
    # A name the base model answers to (spec.args' --served-model-name): only the server's parser sees it.
    body = fake.update_spec("chat", lambda spec: spec.update(adapters=[{"name": "qwen", "source": "org/q-lora"}],
                                                             args=["--served-model-name", "qwen"]))
    handlers.on_update(body=body, logger=LOG)
    assert fake.objects[("Deployment", "llm", "chat")] == before
    degraded = condition(fake.inferenceservice("chat"), constants.CONDITION_DEGRADED)
    assert (degraded["status"], degraded["reason"]) == ("True", "InvalidSpec")
    assert "spec.adapters" in degraded["message"] and "'qwen' is already the base model's name" in degraded["message"]


def test_a_failing_adapter_download_says_so_in_the_status():
    from minisgl_operator import status

    # A private adapter without HF_TOKEN: the init container exits 1 again and again, and the kubelet
    # reports it under initContainerStatuses (the server container waits in PodInitializing).
    pod = {"metadata": {"name": "chat-7d9f-abcde"}, "status": {
        "initContainerStatuses": [{"name": constants.ADAPTER_CONTAINER, "ready": False, "restartCount": 3,
                                   "state": {"waiting": {"reason": "CrashLoopBackOff",
                                                         "message": "back-off 40s restarting failed container=adapters"}},
                                   "lastState": {"terminated": {"reason": "Error", "exitCode": 1}}}],
        "containerStatuses": [{"name": constants.CONTAINER_NAME, "ready": False, "state": {"waiting": {"reason": "PodInitializing"}}}],
    }}  # fmt: skip
    problem = status.pod_problem([pod])
    assert problem is not None and problem.reason == "CrashLoopBackOff"
    assert f"container {constants.ADAPTER_CONTAINER}" in problem.message
