"""The operator under a real cluster's rules: volumes that attach to one node, a full GPU pool,
immutable PVCs, finalizers, pods that cannot start, webhooks that add to the pods, label-filtered
watches.

The handlers run against the fake API (operator_fake_kube.py), which refuses what an API server
refuses and plays the Deployment controller, the scheduler and the kubelet on a pool of GPU nodes
(``run_controllers``). No real cluster runs here: the fake's rules are the ones these tests name.
"""

from __future__ import annotations

import copy
import logging

import kopf
import pytest
from kopf._cogs.structs import references

from minisgl_operator import constants, handlers
from minisgl_operator.kube import ApiError

LOG = logging.getLogger("test-operator")
IMAGE = "registry.example/minisgl:1.2.3"
NEW_IMAGE = "registry.example/minisgl:1.2.4"


@pytest.fixture(autouse=True)
def wire(fake, monkeypatch):
    handlers.configure(fake, default_image=IMAGE, clock=lambda: "2026-01-01T00:00:00Z")
    monkeypatch.setattr(handlers, "resyncer", handlers.Resync())
    yield
    handlers._reconciler = None


AN_HOUR_AGO = "2025-12-31T23:00:00Z"  # the reconciler's clock is 2026-01-01T00:00:00Z


def gpu_pool(fake, nodes: int, gpus: int = 8) -> None:
    for i in range(nodes):
        fake.add_node(f"gpu-{i}", gpus)


def create(fake, spec: dict, name: str = "chat") -> dict:
    body = fake.create_inferenceservice(name, spec)
    handlers.on_create(body=body, logger=LOG)
    finish_loader(fake, name)
    return fake.inferenceservice(name)


def finish_loader(fake, name: str = "chat") -> None:
    """The Job controller runs the model cache's loader (if there is one) to its end, and the
    operator hears of it: the server pods may start."""
    job = fake.objects.get(("Job", "llm", f"{name}{constants.LOADER_SUFFIX}"))
    if job is not None and not (job.get("status") or {}).get("conditions"):
        fake.run_jobs()
        job = fake.objects[("Job", "llm", f"{name}{constants.LOADER_SUFFIX}")]
        handlers.on_job_event(event={"type": "MODIFIED", "object": job}, logger=LOG)


def update(fake, change, name: str = "chat") -> None:
    handlers.on_update(body=fake.update_spec(name, change), logger=LOG)
    finish_loader(fake, name)


def settle(fake, name: str = "chat") -> dict:
    """The controllers run, then the operator hears about it (the Deployment's and pods' events)."""
    finish_loader(fake, name)
    fake.run_controllers()
    deployment = fake.objects.get(("Deployment", "llm", name))
    if deployment is not None:
        handlers.on_deployment_event(event={"type": "MODIFIED", "object": deployment}, logger=LOG)
    for pod in fake.pods(name):
        handlers.on_pod_event(event={"type": "MODIFIED", "object": pod}, logger=LOG)
    return fake.inferenceservice(name)


def condition(body: dict, type_: str) -> dict:
    return next(cond for cond in body["status"]["conditions"] if cond["type"] == type_)


def pod_states(fake, name: str = "chat") -> list[tuple[str, str]]:
    return sorted((p["spec"]["containers"][0]["image"], p["status"]["phase"]) for p in fake.pods(name))


# --- 1. a ReadWriteOnce cache attaches to one node ------------------------------------------------


def test_the_fake_scheduler_keeps_a_second_pod_of_a_read_write_once_claim_off_other_nodes(fake):
    # The rule the old operator broke: a PVC the pods share, created ReadWriteOnce, two tp=8 pods.
    gpu_pool(fake, 2)
    fake.add_foreign(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "team-models", "namespace": "llm"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Ti"}}},
        }
    )
    create(fake, {"model": "m", "tp": 8, "replicas": 2, "modelCache": {"claimName": "team-models"}})
    body = settle(fake)

    states = [p["status"]["phase"] for p in fake.pods("chat")]
    assert sorted(states) == ["Pending", "Running"]
    # The operator names the cause (the claim it cannot see in the CRD) and the pod's symptom.
    degraded = condition(body, constants.CONDITION_DEGRADED)
    assert (degraded["status"], degraded["reason"]) == ("True", "CacheNotShareable")
    assert "team-models is ReadWriteOnce" in degraded["message"]
    assert "Multi-Attach" in degraded["message"]
    assert fake.events[-1]["reason"] == "CacheNotShareable"


def test_a_created_read_write_once_cache_for_several_pods_is_refused_before_anything_is_created(fake):
    body = create(fake, {"model": "m", "tp": 8, "replicas": 2, "modelCache": {"size": "1Ti"}})
    assert fake.children() == {}
    degraded = condition(body, constants.CONDITION_DEGRADED)
    assert degraded["reason"] == "InvalidSpec"
    assert "ReadWriteOnce model cache attaches to one node" in degraded["message"]


@pytest.mark.parametrize(
    "cache",
    [
        {"size": "1Ti", "accessModes": ["ReadWriteMany"], "storageClassName": "nfs"},
        {"size": "1Ti", "perPod": True, "storageClassName": "local-nvme"},
    ],
    ids=["read-write-many", "per-pod"],
)
def test_a_shareable_cache_scales_out_across_nodes_and_rolls(fake, cache):
    gpu_pool(fake, 2)
    create(fake, {"model": "m", "tp": 8, "replicas": 2, "modelCache": cache})
    body = settle(fake)
    assert body["status"]["phase"] == constants.PHASE_READY
    assert {p["spec"]["nodeName"] for p in fake.pods()} == {"gpu-0", "gpu-1"}

    update(fake, lambda spec: spec.update(image=NEW_IMAGE))
    body = settle(fake)
    assert pod_states(fake) == [(NEW_IMAGE, "Running")] * 2
    assert body["status"]["phase"] == constants.PHASE_READY


# --- 2. a full GPU pool still rolls ----------------------------------------------------------------


SHARED = {"size": "1Ti", "accessModes": ["ReadWriteMany"]}


def test_the_default_rollout_completes_on_a_full_gpu_pool(fake):
    gpu_pool(fake, 2)  # 16 GPUs, both tp=8 replicas use them all: no room for a surge pod
    create(fake, {"model": "m", "tp": 8, "replicas": 2, "modelCache": SHARED})
    settle(fake)
    strategy = fake.objects[("Deployment", "llm", "chat")]["spec"]["strategy"]
    assert strategy == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}

    update(fake, lambda spec: spec.update(image=NEW_IMAGE))
    body = settle(fake)
    assert pod_states(fake) == [(NEW_IMAGE, "Running")] * 2
    assert body["status"]["phase"] == constants.PHASE_READY
    assert condition(body, constants.CONDITION_DEGRADED)["status"] == "False"


def test_a_surge_rollout_on_a_full_pool_says_why_it_is_stuck(fake):
    gpu_pool(fake, 2)
    fake.now = AN_HOUR_AGO  # the surge pod has waited longer than a node autoscaler needs
    create(fake, {"model": "m", "tp": 8, "replicas": 2, "modelCache": SHARED, "rollout": {"maxSurge": 1, "maxUnavailable": 0}})
    settle(fake)
    update(fake, lambda spec: spec.update(image=NEW_IMAGE))
    body = settle(fake)

    # The old pods keep serving; the surge pod waits for a GPU, and the status says so, not only
    # after the progress deadline.
    assert pod_states(fake) == [(IMAGE, "Running"), (IMAGE, "Running"), (NEW_IMAGE, "Pending")]
    assert condition(body, constants.CONDITION_READY)["status"] == "True"
    degraded = condition(body, constants.CONDITION_DEGRADED)
    assert (degraded["status"], degraded["reason"]) == ("True", "Unschedulable")
    assert f"Insufficient {constants.GPU_RESOURCE}" in degraded["message"]


def test_recreate_stops_every_pod_first(fake):
    gpu_pool(fake, 1)
    create(fake, {"model": "m", "tp": 8, "modelCache": {"size": "1Ti"}, "rollout": {"strategy": "Recreate"}})
    settle(fake)
    assert fake.objects[("Deployment", "llm", "chat")]["spec"]["strategy"] == {"type": "Recreate"}
    update(fake, lambda spec: spec.update(image=NEW_IMAGE))
    assert settle(fake)["status"]["phase"] == constants.PHASE_READY
    assert pod_states(fake) == [(NEW_IMAGE, "Running")]


# --- 3. a PVC's spec is immutable ------------------------------------------------------------------


def test_the_fake_api_refuses_to_change_a_pvcs_spec_but_lets_it_grow(fake):
    create(fake, {"model": "m", "modelCache": {"size": "100Gi"}})
    pvc = fake.objects[("PersistentVolumeClaim", "llm", "chat-model-cache")]
    assert pvc["spec"]["storageClassName"] == "standard"  # the default class, filled in

    for change in ({"accessModes": ["ReadWriteMany"]}, {"storageClassName": "fast"}, {"resources": {"requests": {"storage": "50Gi"}}}):
        edited = {**pvc, "spec": {**pvc["spec"], **change}}
        with pytest.raises(ApiError) as info:
            fake.apply(edited)
        assert info.value.status == 422 and "immutable" in info.value.message
    fake.apply({**pvc, "spec": {**pvc["spec"], "resources": {"requests": {"storage": "200Gi"}}}})


@pytest.mark.parametrize(
    "cache_change",
    [{"storageClassName": "fast"}, {"accessModes": ["ReadWriteOncePod"]}, {"size": "50Gi"}],
    ids=["storage-class", "access-modes", "shrink"],
)
def test_an_immutable_cache_edit_is_reported_and_the_rest_of_the_spec_still_applies(fake, cache_change):
    gpu_pool(fake, 1)
    create(fake, {"model": "m", "modelCache": {"size": "100Gi"}})
    settle(fake)

    def change(spec):
        spec["modelCache"].update(cache_change)
        spec["image"] = NEW_IMAGE
        spec["args"] = ["--max-running-requests", "32"]

    fake.reset_calls()
    update(fake, change)

    assert ("apply", "PersistentVolumeClaim", "llm", "chat-model-cache") not in fake.writes()
    container = fake.objects[("Deployment", "llm", "chat")]["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == NEW_IMAGE
    assert container["args"][-2:] == ["--max-running-requests", "32"]
    degraded = condition(fake.inferenceservice("chat"), constants.CONDITION_DEGRADED)
    assert (degraded["status"], degraded["reason"]) == ("True", "CacheImmutable")
    assert "chat-model-cache" in degraded["message"]


def test_an_hpa_scale_still_reaches_the_deployment_when_the_pvc_is_refused(fake):
    create(fake, {"model": "m", "modelCache": {"size": "100Gi", "accessModes": ["ReadWriteMany"]}, "autoscaling": {"maxReplicas": 4}})
    # The PVC's class changes behind the CRD's back (an older CRD without the transition rule).
    update(fake, lambda spec: spec["modelCache"].update(storageClassName="other"))
    update(fake, lambda spec: spec.update(replicas=3))  # the HPA writes the scale subresource
    assert fake.objects[("Deployment", "llm", "chat")]["spec"]["replicas"] == 3


def test_growing_the_cache_is_applied(fake):
    create(fake, {"model": "m", "modelCache": {"size": "100Gi"}})
    update(fake, lambda spec: spec["modelCache"].update(size="200Gi"))
    pvc = fake.objects[("PersistentVolumeClaim", "llm", "chat-model-cache")]
    assert pvc["spec"]["resources"]["requests"]["storage"] == "200Gi"
    assert condition(fake.inferenceservice("chat"), constants.CONDITION_DEGRADED)["status"] == "False"


# --- 4. deletion never waits for the operator ------------------------------------------------------


KOPF_FINALIZER = "kopf.zalando.org/KopfFinalizerMarker"


def kopf_would_add_a_finalizer() -> bool:
    """Whether kopf blocks the deletion of InferenceServices with its finalizer: it does for any
    timer or daemon, and for a non-optional deletion handler."""
    registry = kopf.get_default_registry()
    ours = [
        h
        for h in [*registry._changing.get_all_handlers(), *registry._spawning.get_all_handlers()]
        if h.selector is not None and (h.selector.group, h.selector.any_name) == (constants.GROUP, constants.PLURAL)
    ]
    return any(h.requires_finalizer for h in ours)


def test_deleting_an_inferenceservice_while_the_operator_is_down_deletes_it_and_its_children(fake):
    create(fake, {"model": "m", "modelCache": {"size": "100Gi", "retain": False}})
    if kopf_would_add_a_finalizer():  # what kopf does on its first pass over the object
        fake.objects[(constants.KIND, "llm", "chat")]["metadata"]["finalizers"] = [KOPF_FINALIZER]
    assert fake.children() != {}

    # The operator is uninstalled (or down); the user deletes the InferenceService.
    fake.user_delete(constants.KIND, "chat")

    assert (constants.KIND, "llm", "chat") not in fake.objects
    assert fake.children() == {}  # the garbage collector followed the ownerReferences


def test_the_fake_api_keeps_a_pvc_in_use_until_its_pods_are_gone(fake):
    gpu_pool(fake, 1)
    create(fake, {"model": "m", "modelCache": {"size": "100Gi"}})
    settle(fake)
    fake.user_delete("PersistentVolumeClaim", "chat-model-cache")  # kubectl delete pvc, by mistake
    pvc = fake.objects[("PersistentVolumeClaim", "llm", "chat-model-cache")]
    assert pvc["metadata"]["deletionTimestamp"] and pvc["metadata"]["finalizers"] == ["kubernetes.io/pvc-protection"]
    fake.user_delete(constants.KIND, "chat")  # the InferenceService, its Deployment and pods go: so does the PVC
    assert fake.children() == {} and fake.pods() == []


def test_the_fake_api_keeps_an_object_with_a_finalizer_until_it_is_removed(fake):
    create(fake, {"model": "m"})
    fake.objects[(constants.KIND, "llm", "chat")]["metadata"]["finalizers"] = ["example.com/hold"]
    fake.user_delete(constants.KIND, "chat")
    assert fake.inferenceservice("chat")["metadata"]["deletionTimestamp"]
    assert ("Deployment", "chat") in fake.children()
    fake.remove_finalizer(constants.KIND, "chat", "example.com/hold")
    assert (constants.KIND, "llm", "chat") not in fake.objects and fake.children() == {}


# --- 8. pods that cannot start: the reason, in status and an Event --------------------------------


def _missing_secret(fake):
    return {"env": [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "HF_TOKEN"}}}]}


@pytest.mark.parametrize(
    "setup, reason, words",
    [
        (lambda fake: (fake.add_node("gpu-0", 4), setattr(fake, "now", AN_HOUR_AGO), {"tp": 8})[2], "Unschedulable",
         f"Insufficient {constants.GPU_RESOURCE}"),
        (lambda fake: (gpu_pool(fake, 1), fake.image_faults.update({IMAGE: "ImagePullBackOff"}), {})[2], "ImagePullBackOff", IMAGE),
        (lambda fake: (gpu_pool(fake, 1), _missing_secret(fake))[1], "CreateContainerConfigError", 'secret "hf-token" not found'),
        (lambda fake: (gpu_pool(fake, 1), fake.image_faults.update({IMAGE: "OOMKilled"}), {})[2], "OOMKilled", "memory"),
        (lambda fake: (gpu_pool(fake, 1), fake.image_faults.update({IMAGE: "CrashLoopBackOff"}), {})[2], "CrashLoopBackOff", "back-off"),
    ],
    ids=["no-free-gpu", "image-pull", "missing-secret", "oom-killed", "crash-loop"],
)
def test_a_pod_that_cannot_start_says_why_in_status_and_an_event(fake, setup, reason, words):
    extra = setup(fake)
    create(fake, {"model": "m", **extra})
    body = settle(fake)

    assert body["status"]["phase"] == constants.PHASE_DEGRADED
    degraded = condition(body, constants.CONDITION_DEGRADED)
    assert (degraded["status"], degraded["reason"]) == ("True", reason)
    assert words in degraded["message"]
    warnings = [(e["reason"], e["message"]) for e in fake.events if e["type"] == "Warning"]
    assert warnings == [(reason, degraded["message"])]

    # Fixed (a node, the image, the Secret): the next pod starts and Degraded clears.
    fake.image_faults.clear()
    fake.add_node("gpu-big", 8)
    fake.add_secret("hf-token", {"HF_TOKEN": "aGY="})
    for pod in fake.pods():
        fake.objects.pop(("Pod", "llm", pod["metadata"]["name"]))  # the kubelet's next try
    body = settle(fake)
    assert body["status"]["phase"] == constants.PHASE_READY
    assert condition(body, constants.CONDITION_DEGRADED)["status"] == "False"


# --- 13. watches filter by label in the API server ------------------------------------------------


def test_the_operator_watches_only_its_own_deployments_and_pods(fake):
    settings = kopf.OperatorSettings()
    handlers.startup(settings=settings, logger=LOG)
    handlers.cleanup()
    create(fake, {"model": "m"})
    fake.add_foreign(
        {"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": {"name": "web", "namespace": "llm", "labels": {"app": "web"}}, "spec": {}}
    )

    for group, plural, kind in (("apps", "deployments", "Deployment"), ("", "pods", "Pod")):
        resource = references.Resource(group, "v1", plural)
        (selector,) = settings.watching.label_selectors.collect(resource)
        assert selector == f"{constants.LABEL_MANAGED_BY}={constants.OPERATOR_NAME}"
        streamed = fake.watch(kind, selector)
        assert all(o["metadata"]["labels"][constants.LABEL_MANAGED_BY] == constants.OPERATOR_NAME for o in streamed)
    assert [o["metadata"]["name"] for o in fake.watch("Deployment", selector)] == ["chat"]
    # The InferenceServices themselves are not filtered: every one of them is the operator's.
    assert settings.watching.label_selectors.collect(references.Resource(constants.GROUP, constants.VERSION, constants.PLURAL)) == []


# --- 14. what a mutating webhook adds is not drift -------------------------------------------------


def test_env_volumes_and_sidecars_added_by_a_webhook_are_not_drift(fake):
    create(fake, {"model": "m", "env": [{"name": "LOG_FORMAT", "value": "json"}]})

    def webhook(dep):
        pod = dep["spec"]["template"]["spec"]
        pod["containers"][0]["env"].append({"name": "OTEL_SERVICE_NAME", "value": "chat"})
        pod["containers"][0]["volumeMounts"].append({"name": "istio-certs", "mountPath": "/etc/certs"})
        pod["containers"].append({"name": "istio-proxy", "image": "istio/proxyv2:1.24"})
        pod["volumes"].append({"name": "istio-certs", "emptyDir": {}})

    fake.edit("Deployment", "chat", webhook)
    fake.reset_calls()
    for _ in range(3):  # the old operator re-applied (and posted an Event) on every one, forever
        handlers.on_deployment_event(event={"type": "MODIFIED", "object": fake.objects[("Deployment", "llm", "chat")]}, logger=LOG)
    assert fake.writes() == []
    handlers.track(event={"type": None, "object": fake.inferenceservice("chat")})
    handlers.resyncer.run_once(LOG)
    assert fake.writes() == []


def test_a_changed_value_inside_a_keyed_list_is_still_drift(fake):
    create(fake, {"model": "m", "env": [{"name": "LOG_FORMAT", "value": "json"}]})

    def tamper(dep):
        env = dep["spec"]["template"]["spec"]["containers"][0]["env"]
        next(e for e in env if e["name"] == "LOG_FORMAT")["value"] = "text"

    fake.edit("Deployment", "chat", tamper)
    fake.reset_calls()
    handlers.on_deployment_event(event={"type": "MODIFIED", "object": fake.objects[("Deployment", "llm", "chat")]}, logger=LOG)
    assert [w for w in fake.writes() if w[0] == "apply"] == [("apply", "Deployment", "llm", "chat")]


def test_a_field_a_mutating_webhook_rewrites_is_not_drift_applied_on_every_resync(fake):
    """An image mirror webhook rewrites the image the operator sets: the object never contains what
    the operator renders, yet nobody changed it since the operator applied it; no apply, no Event."""
    gpu_pool(fake, 1)
    fake.image_mirror = ("registry.example/", "mirror.internal/")
    create(fake, {"model": "m"})
    settle(fake)
    fake.reset_calls()
    events = len(fake.events)
    for _ in range(3):
        handlers._get_reconciler().reconcile(fake.inferenceservice("chat"))
    assert [c for c in fake.writes() if c[0] == "apply"] == []
    assert len(fake.events) == events
    # A real edit is still drift, and repaired.
    fake.edit("Deployment", "chat", lambda d: d["spec"]["template"]["spec"]["containers"][0].update(image="other:1"))
    outcome = handlers._get_reconciler().reconcile(fake.inferenceservice("chat"))
    assert "Deployment/chat" in outcome.applied


def test_a_change_that_downloads_nothing_new_keeps_the_loader_job_and_rolls_at_once(fake):
    """The loader Job succeeded at the model: a new env var, image or node selector needs no second
    download, so the Job stays and the Deployment takes the change now, not after a new Job."""
    gpu_pool(fake, 2)
    create(fake, {"model": "org/m", "replicas": 2, "modelCache": SHARED})
    settle(fake)
    fake.reset_calls()
    body = fake.update_spec("chat", lambda spec: spec.update(env=[{"name": "MINISGL_LOG_LEVEL", "value": "debug"}], image=NEW_IMAGE))
    outcome = handlers._get_reconciler().reconcile(body)
    assert "Job/chat-load" not in outcome.deleted and "Deployment/chat" in outcome.applied
    env = fake.objects[("Deployment", "llm", "chat")]["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "MINISGL_LOG_LEVEL", "value": "debug"} in env
    # A new model is a new download: a new Job, and the pods wait for it.
    outcome = handlers._get_reconciler().reconcile(fake.update_spec("chat", lambda spec: spec.update(model="org/other")))
    assert "Job/chat-load" in outcome.deleted and "Job/chat-load" in outcome.applied


def test_a_stale_read_of_the_loader_job_never_deletes_the_job_that_replaced_it(fake):
    """kopf's index may still hold the old Job after the operator replaced it: deleting by name would
    take the new one. The delete names the uid it read; the API server refuses it (409) for another."""
    gpu_pool(fake, 1)
    create(fake, {"model": "org/m", "modelCache": SHARED})
    stale = copy.deepcopy(fake.objects[("Job", "llm", "chat-load")])
    handlers._get_reconciler().reconcile(fake.update_spec("chat", lambda spec: spec.update(model="org/other")))  # a new Job
    new_uid = fake.objects[("Job", "llm", "chat-load")]["metadata"]["uid"]
    assert new_uid != stale["metadata"]["uid"]
    reconciler = handlers._get_reconciler()
    reconciler.api.indexes["Job"] = {("llm", "chat-load"): [stale]}  # the index has not caught up
    reconciler.reconcile(fake.update_spec("chat", lambda spec: spec.update(model="org/third")))
    assert fake.objects[("Job", "llm", "chat-load")]["metadata"]["uid"] == new_uid
