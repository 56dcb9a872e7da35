"""Replicas that span several nodes: when tp exceeds gpusPerNode the operator renders a
LeaderWorkerSet (valid for the published LWS CRD) whose leader and workers run the server with
the node flags the server's own parser accepts, and switches between it and a Deployment."""

from __future__ import annotations

import operator_crds
import pytest

from minisgl.server.args import parse_args
from minisgl.server.runtime.nodes import NodePlacement
from minisgl_operator import constants, handlers, render

SPEC = {"model": "deepseek-ai/DeepSeek-V3", "tp": 16, "gpusPerNode": 8, "replicas": 2,
        "exclusiveTopology": "example.com/rack", "modelCache": {"claimName": "models"}}  # fmt: skip


def isvc(spec: dict) -> dict:
    return {"apiVersion": constants.API_VERSION, "kind": constants.KIND, "metadata": {"name": "ds", "namespace": "llm", "uid": "u1"},
            "spec": spec}  # fmt: skip


def by_kind(spec: dict) -> dict[str, dict]:
    return {o["kind"]: o for o in render.render(isvc(spec))}


def server_args_in(template: dict, env: dict[str, str]):
    """The flags a pod's server gets once the kubelet expanded $(VAR), parsed by the server itself."""
    (ctr,) = template["spec"]["containers"]
    argv = ctr["args"]
    for name, value in env.items():
        argv = [a.replace(f"$({name})", value) for a in argv]
    assert not any("$(" in a for a in argv), argv
    return parse_args(argv[argv.index("--model"):])


def test_tp_over_gpus_per_node_is_a_leader_worker_set_valid_for_the_lws_crd():
    objs = by_kind(SPEC)
    assert "Deployment" not in objs
    lws = objs["LeaderWorkerSet"]
    operator_crds.validate(lws)
    assert lws["spec"]["replicas"] == 2
    group = lws["spec"]["leaderWorkerTemplate"]
    assert group["size"] == 2 and group["restartPolicy"] == "RecreateGroupOnPodRestart"
    assert lws["metadata"]["annotations"][constants.LWS_EXCLUSIVE_TOPOLOGY_ANNOTATION] == "example.com/rack"
    for template in (group["leaderTemplate"], group["workerTemplate"]):
        (ctr,) = template["spec"]["containers"]
        assert ctr["resources"]["limits"][constants.GPU_RESOURCE] == 8


def test_the_leader_and_the_workers_run_the_ranks_of_their_node_and_meet_at_the_leader():
    group = by_kind(SPEC)["LeaderWorkerSet"]["spec"]["leaderWorkerTemplate"]
    leader_address = "ds-0.ds.llm"
    leader = server_args_in(group["leaderTemplate"], {constants.LWS_LEADER_ADDRESS_ENV: leader_address})
    worker_env = {constants.LWS_LEADER_ADDRESS_ENV: leader_address, constants.LWS_WORKER_INDEX_ENV: "1"}
    worker = server_args_in(group["workerTemplate"], worker_env)
    assert (leader.tp, leader.nnodes, leader.node_rank) == (16, 2, 0)
    assert (worker.tp, worker.nnodes, worker.node_rank) == (16, 2, 1)
    assert leader.dist_init_addr == worker.dist_init_addr == f"{leader_address}:{constants.DIST_INIT_PORT}"
    ranks = [list(NodePlacement.of(a).local_ranks) for a in (leader, worker)]
    assert ranks == [list(range(8)), list(range(8, 16))]
    # The rendezvous port is declared on the leader, which hosts it.
    (ctr,) = group["leaderTemplate"]["spec"]["containers"]
    assert {"name": "dist-init", "containerPort": constants.DIST_INIT_PORT, "protocol": "TCP"} in ctr["ports"]


def test_workers_serve_no_http_so_only_leaders_are_probed_and_selected():
    objs = by_kind(SPEC)
    group = objs["LeaderWorkerSet"]["spec"]["leaderWorkerTemplate"]
    (leader,) = group["leaderTemplate"]["spec"]["containers"]
    (worker,) = group["workerTemplate"]["spec"]["containers"]
    assert {"startupProbe", "readinessProbe", "livenessProbe"} <= set(leader)
    assert not {"startupProbe", "readinessProbe", "livenessProbe"} & set(worker)
    assert constants.PORT_NAME not in {p["name"] for p in worker["ports"]}
    assert objs["Service"]["spec"]["selector"][constants.LWS_WORKER_INDEX_LABEL] == "0"


def test_tp_within_one_node_stays_a_deployment():
    objs = by_kind({**{k: v for k, v in SPEC.items() if k != "exclusiveTopology"}, "tp": 8})
    assert "LeaderWorkerSet" not in objs and objs["Deployment"]["spec"]["template"]["spec"]["containers"][0]["args"].count("--nnodes") == 0


def test_spec_args_may_not_set_the_node_flags():
    from minisgl_operator.spec import SpecError, parse

    for flag in ("--nnodes", "--node-rank", "--dist-init-addr"):
        with pytest.raises(SpecError, match=flag):
            parse(isvc({**SPEC, "args": [flag, "1"]}))


def test_growing_past_one_node_replaces_the_deployment_with_a_leader_worker_set(fake):
    handlers.configure(fake, default_image="registry.example/minisgl:1")
    try:
        single_node = {k: v for k, v in SPEC.items() if k != "exclusiveTopology"}
        body = fake.create_inferenceservice("ds", {**single_node, "tp": 8, "replicas": 1})
        handlers._get_reconciler().reconcile(body)
        assert ("Deployment", "ds") in fake.children()
        body = fake.update_spec("ds", lambda spec: spec.update(tp=16))
        outcome = handlers._get_reconciler().reconcile(body)
        assert outcome.deleted == ["Deployment/ds"]
        assert ("LeaderWorkerSet", "ds") in fake.children() and ("Deployment", "ds") not in fake.children()
        # The status follows the LeaderWorkerSet as it followed the Deployment.
        lws = fake.objects[("LeaderWorkerSet", "llm", "ds")]
        lws["status"] = {"observedGeneration": lws["metadata"]["generation"], "replicas": 1, "readyReplicas": 1,
                         "updatedReplicas": 1}  # fmt: skip
        handlers._get_reconciler().reconcile(fake.inferenceservice("ds"))
        status = fake.inferenceservice("ds")["status"]
        assert status["phase"] == constants.PHASE_READY
        # The HPA averages over status.selector's pods: the leaders, which export the metrics.
        assert f"{constants.LWS_WORKER_INDEX_LABEL}=0" in status["selector"].split(",")
    finally:
        handlers._reconciler = None


def multi_node_cluster(fake, replicas: int = 1):
    """Two 8-GPU nodes per group, and the operator reconciling a two-node InferenceService."""
    for i in range(2 * replicas):
        fake.add_node(f"gpu-{i}", gpus=8)
    fake.add_foreign({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "models", "namespace": "llm"},
                      "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "2Ti"}}}})
    handlers.configure(fake, default_image="registry.example/minisgl:1")
    single_rack = {k: v for k, v in SPEC.items() if k != "exclusiveTopology"}
    return fake.create_inferenceservice("ds", {**single_rack, "replicas": replicas})


def test_a_group_forms_because_its_leader_address_resolves_beside_the_operators_service(fake):
    """LWS (Shared policy) creates its headless Service only where the name is free: the operator's
    ClusterIP Service of the same name would leave the workers unable to resolve the leader, and the
    group would restart forever. Each group's own headless Service (UniquePerReplica) resolves."""
    try:
        body = multi_node_cluster(fake, replicas=2)
        reconciler = handlers._get_reconciler()
        reconciler.reconcile(body)
        fake.run_controllers()
        reconciler.reconcile(fake.inferenceservice("ds"))
        status = fake.inferenceservice("ds")["status"]
        assert status["phase"] == constants.PHASE_READY, status["conditions"]
        assert status["readyReplicas"] == 2
        # The InferenceService's Service is still the one clients use; each group has a headless one.
        assert fake.objects[("Service", "llm", "ds")]["spec"]["type"] == "ClusterIP"
        assert {n for (k, ns, n) in fake.objects if k == "Service"} == {"ds", "ds-0", "ds-1"}
    finally:
        handlers._reconciler = None


def test_the_lws_controller_running_first_takes_no_name_the_operator_needs(fake):
    """Had LWS created a Service named after the InferenceService before the operator's, the operator
    would find a foreign Service there (NameConflict) and never apply its own."""
    try:
        body = multi_node_cluster(fake)
        reconciler = handlers._get_reconciler()
        reconciler.reconcile(body)
        fake.remove("Service", "ds")  # the LeaderWorkerSet exists; the Service does not yet
        fake.run_controllers()
        outcome = reconciler.reconcile(fake.inferenceservice("ds"))
        assert outcome.problem is None
        assert "Service/ds" in outcome.applied
    finally:
        handlers._reconciler = None


def test_an_lws_controller_too_old_to_report_observed_generation_is_named_not_waited_for(fake):
    """LWS before v0.9 writes no status.observedGeneration: the InferenceService would sit Pending forever."""
    try:
        fake.lws_version = (0, 8)
        body = multi_node_cluster(fake)
        reconciler = handlers._get_reconciler()
        reconciler.reconcile(body)
        fake.run_controllers()
        reconciler.reconcile(fake.inferenceservice("ds"))
        status = fake.inferenceservice("ds")["status"]
        degraded = next(c for c in status["conditions"] if c["type"] == constants.CONDITION_DEGRADED)
        assert degraded["reason"] == "LeaderWorkerSetTooOld" and constants.LWS_MIN_VERSION in degraded["message"]
    finally:
        handlers._reconciler = None
