"""The fake API refuses what a real API server refuses where the operator meets it: server-side
apply's field ownership and its 500 for an undeclared field, names and label values over their
limits, and the admission webhooks of KEDA and LWS. Each refusal is compared with the real
server's answer, quoted from a published report or from the component's source."""

from __future__ import annotations

import kube_webhooks
import pytest

from minisgl_operator import constants, render
from minisgl_operator.kube import ApiError


def isvc(spec: dict, name: str = "chat") -> dict:
    meta = {"name": name, "namespace": "llm", "uid": "u1"}
    return {"apiVersion": constants.API_VERSION, "kind": constants.KIND, "metadata": meta, "spec": spec}


def child(kind: str, spec: dict | None = None, name: str = "chat") -> dict:
    (found,) = [o for o in render.render(isvc(spec or {"model": "m"}, name)) if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def refused(fake, obj, **kwargs) -> ApiError:
    with pytest.raises(ApiError) as caught:
        fake.apply(obj, **kwargs)
    return caught.value


# --- server-side apply ----------------------------------------------------------------------------


def test_an_undeclared_field_fails_the_apply_with_the_api_servers_500():
    # kubernetes/kubernetes#122480, the response body of a real API server:
    real = ('{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"failed to create typed patch '
            'object (general/admin-api; /v1, Kind=Service): .spec.topologyKeys: field not declared in schema","code":500}')  # fmt: skip
    from operator_fake_kube import FakeKube

    fake = FakeKube()
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "admin-api", "namespace": "general"},
               "spec": {"ports": [{"port": 80}], "topologyKeys": ["kubernetes.io/hostname"]}}  # fmt: skip
    error = refused(fake, service)
    assert (error.status, error.message) == (500, real.split('"message":"')[1].split('","code"')[0])


def test_a_typo_under_the_pod_template_fails_the_apply_with_a_500_naming_the_field(fake):
    deployment = child("Deployment")
    deployment["spec"]["template"]["spec"]["nodeSelectr"] = {"gpu": "h100"}
    error = refused(fake, deployment)
    assert error.status == 500
    assert error.message == ("failed to create typed patch object (llm/chat; apps/v1, Kind=Deployment): "
                             ".spec.template.spec.nodeSelectr: field not declared in schema")  # fmt: skip


def test_a_typo_inside_a_keyed_list_is_named_by_the_items_key(fake):
    deployment = child("Deployment", {"model": "m", "env": [{"name": "HF_TOKEN", "value": "x"}]})
    (server,) = [ctr for ctr in deployment["spec"]["template"]["spec"]["containers"] if ctr["name"] == constants.CONTAINER_NAME]
    (token,) = [var for var in server["env"] if var["name"] == "HF_TOKEN"]
    del token["value"]
    token["valueFrom"] = {"secretKeyRefs": {"name": "hf"}}
    error = refused(fake, deployment)
    assert error.message.endswith(
        '.spec.template.spec.containers[name="server"].env[name="HF_TOKEN"].valueFrom.secretKeyRefs: field not declared in schema'
    )


def test_an_undeclared_field_of_a_custom_resource_is_a_500_too(fake):
    # kubernetes/kubernetes#139253: the same plain error for a CRD's schema.
    pool = child("InferencePool", {"model": "m", "router": {}})
    pool["spec"]["targetPortz"] = [{"number": 8000}]
    error = refused(fake, pool)
    assert error.status == 500 and error.message.endswith(".spec.targetPortz: field not declared in schema")


def test_fields_another_manager_set_survive_the_operators_apply(fake):
    deployment = child("Deployment")
    fake.apply(deployment)
    fake.edit("Deployment", "chat", lambda d: d["metadata"].setdefault("annotations", {}).update({"team": "llm"}))
    sidecar = {"name": "log-shipper", "image": "busybox"}
    fake.edit("Deployment", "chat", lambda d: d["spec"]["template"]["spec"]["containers"].append(sidecar))
    stored = fake.apply(deployment)
    assert stored["metadata"]["annotations"]["team"] == "llm"
    # containers merge by name (a map list), so the server container is the operator's and the sidecar stays
    assert [ctr["name"] for ctr in stored["spec"]["template"]["spec"]["containers"]] == ["server", "log-shipper"]


def test_fields_the_operator_stops_applying_are_removed_unless_someone_else_owns_them(fake):
    deployment = child("Deployment")
    deployment["metadata"]["labels"].update({"old": "1", "shared": "1"})
    fake.apply(deployment)
    label_only = {"apiVersion": "apps/v1", "kind": "Deployment",
                  "metadata": {"name": "chat", "namespace": "llm", "labels": {"shared": "1"}}}
    fake.apply(label_only, manager="someone-else", force=False)  # same value: the label is shared, no conflict
    for key in ("old", "shared"):
        del deployment["metadata"]["labels"][key]
    stored = fake.apply(deployment)
    assert "old" not in stored["metadata"]["labels"]
    assert stored["metadata"]["labels"]["shared"] == "1"


def test_a_keyed_item_the_operator_stops_applying_goes_whole_with_its_defaulted_fields(fake):
    # structured-merge-diff removes the item (its key path) once its applier drops it and nobody else
    # holds a field of it: the defaults the API server filled in (terminationMessagePath) go with it.
    cache = {"claimName": "models", "setOwner": False}  # no cache-owner: the adapters' init container alone
    adapters = {"model": "m", "modelCache": cache, "adapters": [{"name": "a", "source": "org/a"}]}
    stored = fake.apply(child("Deployment", adapters))
    (init,) = stored["spec"]["template"]["spec"]["initContainers"]
    assert init["terminationMessagePath"] == "/dev/termination-log"  # defaulted, owned by no manager
    stored = fake.apply(child("Deployment", {"model": "m", "modelCache": cache}))
    assert "initContainers" not in stored["spec"]["template"]["spec"]
    # An item another manager holds a field of stays, with that field.
    fake.apply(child("Deployment", adapters))
    fake.edit("Deployment", "chat", lambda d: d["spec"]["template"]["spec"]["initContainers"][0].update(workingDir="/tmp"))
    stored = fake.apply(child("Deployment", {"model": "m", "modelCache": cache}))
    (init,) = stored["spec"]["template"]["spec"]["initContainers"]
    assert init["workingDir"] == "/tmp" and "command" not in init


def test_a_conflicting_apply_without_force_is_refused_with_the_api_servers_409(fake):
    # A real 409 (khuedoan/homelab#161): "Apply failed with 1 conflict: conflict with
    # \"kubectl-client-side-apply\" using apiextensions.k8s.io/v1: .spec.versions"
    deployment = child("Deployment")
    fake.apply(deployment)
    fake.edit("Deployment", "chat", lambda d: d["spec"].update(replicas=3))
    error = refused(fake, deployment, manager="other-tool", force=False)
    assert error.status == 409
    assert error.message == 'Apply failed with 1 conflict: conflict with "kubectl-edit" using apps/v1: .spec.replicas'
    assert fake.apply(deployment)["spec"]["replicas"] == deployment["spec"]["replicas"]  # force takes the field back


# --- names and labels -------------------------------------------------------------------------------


def test_a_service_name_over_63_characters_is_refused_as_the_api_server_words_it(fake):
    service = child("Service")
    service["metadata"]["name"] = "a" * 64
    error = refused(fake, service)
    assert error.status == 422
    assert f'metadata.name: Invalid value: "{"a" * 64}": must be no more than 63 characters' in error.message


def test_a_label_value_over_63_characters_is_refused(fake):
    deployment = child("Deployment")
    deployment["spec"]["template"]["metadata"]["labels"]["x"] = "v" * 64
    error = refused(fake, deployment)
    assert error.status == 422
    assert f'spec.template.metadata.labels: Invalid value: "{"v" * 64}": must be no more than 63 characters' in error.message


# --- KEDA's admission webhook -------------------------------------------------------------------------

KEDA = {"model": "m", "autoscaling": {"minReplicas": 1, "maxReplicas": 4,
                                      "keda": {"prometheusAddress": "http://prometheus:9090", "target": "4"}}}  # fmt: skip
HPA = {"model": "m", "autoscaling": {"minReplicas": 1, "maxReplicas": 4}}


def test_keda_refuses_a_scaled_object_whose_target_an_hpa_already_scales(fake):
    fake.apply(child("HorizontalPodAutoscaler", HPA))
    error = refused(fake, child("ScaledObject", KEDA))
    # The message of kedacore/keda v2.20 verifyHpas, as controller-runtime denies it (403).
    assert error.status == 403
    assert error.message == (f'admission webhook "{kube_webhooks.KEDA_WEBHOOK}" denied the request: the workload \'chat\' of '
                             f"type '{constants.API_VERSION}.{constants.KIND}' is already managed by the hpa 'chat'")  # fmt: skip


def test_keda_accepts_the_scaled_object_once_the_hpa_is_gone_and_updates_beside_its_own_hpa(fake):
    fake.apply(child("HorizontalPodAutoscaler", HPA))
    fake.delete("HorizontalPodAutoscaler", "llm", "chat")
    scaled = fake.apply(child("ScaledObject", KEDA))
    fake.run_controllers()  # the KEDA operator creates keda-hpa-chat, owned by the ScaledObject
    hpa = fake.objects[("HorizontalPodAutoscaler", "llm", "keda-hpa-chat")]
    assert hpa["metadata"]["ownerReferences"][0]["uid"] == scaled["metadata"]["uid"]
    fake.apply(child("ScaledObject", KEDA))  # its own HPA does not block an update
    fake.delete("ScaledObject", "llm", "chat")
    assert ("HorizontalPodAutoscaler", "llm", "keda-hpa-chat") not in fake.objects  # garbage-collected


def test_keda_skips_an_hpa_marked_as_not_owning_its_target(fake):
    hpa = child("HorizontalPodAutoscaler", HPA)
    hpa["metadata"]["annotations"] = {kube_webhooks.HPA_OWNERSHIP_ANNOTATION: "false"}
    fake.apply(hpa)
    fake.apply(child("ScaledObject", KEDA))


# --- LWS's admission webhooks -----------------------------------------------------------------------

MULTI_NODE = {"model": "m", "tp": 16, "gpusPerNode": 8, "modelCache": {"claimName": "models"}}


def test_lws_defaults_what_the_operator_leaves_out_and_a_reapply_changes_nothing(fake):
    lws = child("LeaderWorkerSet", MULTI_NODE)
    del lws["spec"]["networkConfig"]
    stored = fake.apply(lws)
    spec = stored["spec"]
    # kubernetes-sigs/lws v0.10 LeaderWorkerSetWebhook.Default
    assert spec["networkConfig"]["subdomainPolicy"] == "Shared"
    assert spec["rolloutStrategy"]["type"] == "RollingUpdate"
    assert spec["leaderWorkerTemplate"]["restartPolicy"] in ("RecreateGroupOnPodRestart", "None")
    if "rollingUpdateConfiguration" not in (lws["spec"].get("rolloutStrategy") or {}):
        assert spec["rolloutStrategy"]["rollingUpdateConfiguration"] == {"maxUnavailable": 1, "maxSurge": 0, "partition": 0}
    again = fake.apply(lws)
    assert again["metadata"]["generation"] == stored["metadata"]["generation"]  # defaults are nobody's fields


def test_lws_refuses_a_rollout_with_neither_surge_nor_unavailability(fake):
    lws = child("LeaderWorkerSet", MULTI_NODE)
    lws["spec"]["rolloutStrategy"] = {"type": "RollingUpdate", "rollingUpdateConfiguration": {"maxUnavailable": 0, "maxSurge": 0}}
    error = refused(fake, lws)
    assert error.status == 403
    assert error.message == (f'admission webhook "{kube_webhooks.LWS_WEBHOOK}" denied the request: spec.rolloutStrategy.'
                             "rollingUpdateConfiguration.maxUnavailable: Invalid value: 0: must not be 0 when `maxSurge` is 0")  # fmt: skip


def test_more_than_a_million_groups_are_refused(fake):
    # The LWS CRD's schema says it before the webhook would (both: kube_names.LWS_MAX_REPLICAS).
    lws = child("LeaderWorkerSet", MULTI_NODE)
    lws["spec"]["replicas"] = 1_000_001
    error = refused(fake, lws)
    assert error.status == 422 and "spec.replicas" in error.message and "1000000" in error.message


def test_a_mutating_webhook_rewrites_what_the_operator_applies(fake):
    fake.image_mirror = ("registry.example/", "mirror.internal/")
    dep = child("Deployment", {"model": "m", "image": "registry.example/minisgl:1"})
    stored = fake.apply(dep)
    assert stored["spec"]["template"]["spec"]["containers"][0]["image"] == "mirror.internal/minisgl:1"
    assert fake.apply(dep)["metadata"]["generation"] == stored["metadata"]["generation"]  # the same result again
