"""What the operator renders for an InferenceService: the pods' GPUs, args, probes, volumes and
owners, and every object validated against the official schema of a current Kubernetes."""

from __future__ import annotations

import copy
import re
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import operator_crds
import pytest
import yaml

from minisgl.server import args as server_args
from minisgl_operator import cli, constants, render, server
from minisgl_operator.spec import PLACEHOLDER_UID, SpecError, parse

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "operator" / "examples").glob("*.yaml"))
K8S_VERSION = kubernetes_validate.latest_version()
OLDEST_K8S = "1.30"


def isvc(spec: dict, name: str = "chat", namespace: str = "llm", uid: str = "uid-123") -> dict:
    return {
        "apiVersion": constants.API_VERSION,
        "kind": constants.KIND,
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
        "spec": spec,
    }


def objects(spec: dict, **kw) -> dict[str, dict]:
    rendered = render.render(isvc(spec, **kw))
    by_kind = {o["kind"]: o for o in rendered}
    assert len(by_kind) == len(rendered), "one object per kind"
    return by_kind


def pod(spec: dict) -> dict:
    return objects(spec)["Deployment"]["spec"]["template"]["spec"]


def container(spec: dict) -> dict:
    (only,) = pod(spec)["containers"]
    return only


POD_TEMPLATE = {
    "metadata": {
        "labels": {"kueue.x-k8s.io/queue-name": "gpu-queue", constants.LABEL_INSTANCE: "hijack"},
        "annotations": {"karpenter.sh/do-not-disrupt": "true", "sidecar.istio.io/inject": "false"},
    },
    "spec": {
        "imagePullSecrets": [{"name": "registry-creds"}],
        "runtimeClassName": "nvidia",
        "priorityClassName": "inference-high",
        "serviceAccountName": "llm-server",
        "schedulerName": "volcano",
        "topologySpreadConstraints": [
            {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway",
             "labelSelector": {"matchLabels": {constants.LABEL_INSTANCE: "chat"}}},
        ],
        "volumes": [
            {"name": "chat-templates", "configMap": {"name": "templates"}},
            {"name": constants.CACHE_VOLUME, "emptyDir": {"sizeLimit": "1Ti"}},
        ],
        "containers": [
            {"name": constants.CONTAINER_NAME, "volumeMounts": [{"name": "chat-templates", "mountPath": "/templates", "readOnly": True}],
             "env": [{"name": "NCCL_DEBUG", "value": "INFO"}]},
            {"name": "log-shipper", "image": "fluent/fluent-bit:3.1", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}},
        ],
    },
}  # fmt: skip


# A matrix of specs that covers every branch of the renderer.
MATRIX = {
    "tp1-minimal": {"model": "Qwen/Qwen3-0.6B"},
    "tp2-claim": {"model": "Qwen/Qwen3-8B", "tp": 2, "modelCache": {"claimName": "models"}},
    "tp4-created-cache-autoscaling": {
        "model": "meta-llama/Llama-3.3-70B-Instruct",
        "tp": 4,
        "replicas": 2,
        "modelCache": {"size": "300Gi", "storageClassName": "fast", "accessModes": ["ReadWriteMany"]},
        "autoscaling": {"minReplicas": 2, "maxReplicas": 8, "targetWaitingRequests": 6},
    },
    "tp8-everything": {
        "model": "/models/deepseek",
        "tp": 8,
        "replicas": 3,
        "image": "registry.example/minisgl:9.9.9",
        "port": 8080,
        "args": ["--max-running-requests", "64", "--drain-timeout", "120", "--served-model-name", "ds"],
        "resources": {"requests": {"cpu": 32, "memory": "900Gi"}, "limits": {"cpu": "64", "memory": "1000Gi"}},
        "env": [
            {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}},
            {"name": "HF_HOME", "value": "/models/hf"},
        ],
        "envFrom": [{"secretRef": {"name": "api-key"}}, {"configMapRef": {"name": "extra", "optional": True}, "prefix": "X_"}],
        "modelCache": {"claimName": "shared-models"},
        "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "podAffinityTerm": {
                            "topologyKey": "kubernetes.io/hostname",
                            "labelSelector": {"matchLabels": {"app.kubernetes.io/instance": "chat"}},
                        },
                    }
                ]
            }
        },
        "autoscaling": {"maxReplicas": 4},
    },
    "scaled-to-zero": {"model": "m", "replicas": 0},
    "per-pod-cache-surge-rollout": {
        "model": "m",
        "replicas": 4,
        "modelCache": {"size": "500Gi", "perPod": True},
        "rollout": {"maxSurge": 1, "maxUnavailable": 0, "progressDeadlineSeconds": 7800},
        "startupTimeoutSeconds": 7200,
        "podTemplate": POD_TEMPLATE,
    },
    "recreate": {"model": "m", "modelCache": {"size": "100Gi"}, "rollout": {"strategy": "Recreate"}},
    "router-canary": {"model": "m", "router": {"gateway": {"name": "gw", "namespace": "infra", "sectionName": "https"},
                                               "hostnames": ["llm.example.com"], "canary": {"inferenceService": "next", "weight": 25},
                                               "failureMode": "FailOpen"}},
    "router-no-gateway": {"model": "m", "router": {}},
    "multi-node-recreate": {"model": "m", "tp": 32, "gpusPerNode": 8, "replicas": 2, "exclusiveTopology": "example.com/rack",
                            "modelCache": {"claimName": "models"}, "rollout": {"strategy": "Recreate"}},
    "multi-node-router-keda-kv": {"model": "m", "tp": 16, "gpusPerNode": 8, "router": {"gateway": {"name": "gw"}},
                                  "autoscaling": {"minReplicas": 0, "maxReplicas": 3,
                                                  "keda": {"prometheusAddress": "http://prom:9090",
                                                           "metric": "kvCacheUtilization", "target": "0.8",
                                                           "activationTarget": "0.1"}}},
    "keda-waiting": {"model": "m", "autoscaling": {"minReplicas": 1, "maxReplicas": 3,
                                                   "keda": {"prometheusAddress": "http://prom:9090", "target": "4"}}},
    "adapters-shared-cache": {"model": "org/base", "replicas": 2, "modelCache": {"size": "100Gi", "accessModes": ["ReadWriteMany"]},
                              "adapters": [{"name": "sql", "source": "org/sql-lora", "rank": 32},
                                           {"name": "local", "source": "/models/mine/chat-lora"}]},
    "adapters-multi-node": {"model": "m", "tp": 16, "gpusPerNode": 8, "modelCache": {"claimName": "models"},
                            "args": ["--max-loras", "8"], "adapters": [{"name": "sql", "source": "org/sql-lora"}]},
}  # fmt: skip


# --- GPUs, args and the server's own parser ----------------------------------------------------


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_each_pod_gets_tp_gpus_and_the_server_runs_with_that_tp(tp):
    ctr = container({"model": "Qwen/Qwen3-8B", "tp": tp})
    assert ctr["resources"]["limits"][constants.GPU_RESOURCE] == tp
    assert constants.GPU_RESOURCE not in ctr["resources"].get("requests", {})  # defaults to the limit
    parsed = server.parse_command_line(ctr["args"])
    assert parsed.tp == tp
    assert parsed.model == "Qwen/Qwen3-8B"


def test_the_command_line_is_model_tp_host_port_then_spec_args_and_the_server_accepts_it():
    ctr = container({"model": "org/m", "tp": 2, "port": 8000, "args": ["--max-running-requests", "32", "--dtype=bfloat16"]})
    assert ctr["command"] == list(server.SERVER_COMMAND)
    assert ctr["args"] == [
        "--model", "org/m", "--tp", "2", "--host", "0.0.0.0", "--port", "8000",
        "--max-running-requests", "32", "--dtype=bfloat16",
    ]  # fmt: skip
    # Parsed by minisgl's own argument parser, exactly as the server will.
    parsed = server_args.build_parser().parse_args(ctr["args"])
    assert (parsed.model, parsed.tp, parsed.host, parsed.port) == ("org/m", 2, "0.0.0.0", 8000)
    assert (parsed.max_running_requests, parsed.dtype) == (32, "bfloat16")
    assert ctr["ports"] == [{"name": constants.PORT_NAME, "containerPort": 8000, "protocol": "TCP"}]


@pytest.mark.parametrize(
    "args, complaint",
    [
        (["--no-such-flag"], "unrecognized arguments"),
        (["--dtype", "float8"], "--dtype"),
        (["--max-running-requests", "lots"], "invalid int value"),
        (["--memory-ratio", "1.5"], "--memory-ratio"),
        (["--tp", "2"], "--tp comes from the InferenceService spec"),
        (["--port=80"], "--port comes from the InferenceService spec"),
        (["--model", "x"], "--model comes from"),
        (["--host", "127.0.0.1"], "--host comes from"),
        (["--shell"], "must serve HTTP"),
    ],
)
def test_spec_args_the_server_would_refuse_are_a_spec_error(args, complaint):
    with pytest.raises(SpecError) as info:
        render.render(isvc({"model": "m", "args": args}))
    assert any(p.startswith("spec.args") and complaint in p for p in info.value.problems), info.value.problems


@pytest.mark.parametrize(
    "args, owned",
    [
        (["--tens", "8"], "--tp"),  # --tensor-parallel-size: with tp 2, the server would start 8 ranks on 2 GPUs
        (["--por", "8000"], "--port"),  # probes and the Service would miss the server
        (["--po=8000"], "--port"),
        (["--mod", "other/model"], "--model"),
        (["--ho", "::"], "--host"),
        (["--node-r", "1"], "--node-rank"),  # every pod would claim one node's ranks
    ],
)
def test_abbreviated_owned_flags_are_refused_as_argparse_would_read_them(args, owned):
    # argparse accepts any unambiguous prefix of a flag: the server's parser reads --t as --tp.
    assert server_args.build_parser().parse_args(args).__dict__ != server_args.build_parser().parse_args([]).__dict__
    with pytest.raises(server.ServerArgsError, match=owned):
        server.check_extra_args(args)
    with pytest.raises(SpecError) as info:
        render.render(isvc({"model": "m", "tp": 2, "args": args}))
    assert any(owned in p for p in info.value.problems), info.value.problems


def test_gpus_cannot_be_requested_through_resources():
    with pytest.raises(SpecError, match="spec.tp sets the GPUs"):
        render.render(isvc({"model": "m", "resources": {"limits": {constants.GPU_RESOURCE: 2}}}))


# --- probes, shutdown, shared memory, cache ----------------------------------------------------


def _budget(probe: dict) -> int:
    return probe["periodSeconds"] * probe["failureThreshold"]


def test_the_startup_probe_waits_for_the_model_to_load_not_for_the_process():
    # /health answers 200 while the weights still download: a startup probe on it bounds nothing.
    ctr = container({"model": "m"})
    startup, ready, live = ctr["startupProbe"], ctr["readinessProbe"], ctr["livenessProbe"]
    assert startup["httpGet"] == {"path": server_args.READINESS_PATH, "port": constants.PORT_NAME}
    assert ready["httpGet"] == {"path": server_args.READINESS_PATH, "port": constants.PORT_NAME}
    assert live["httpGet"] == {"path": server_args.LIVENESS_PATH, "port": constants.PORT_NAME}
    # Downloading and loading a large model: 30 minutes by default before the kubelet restarts it ...
    assert _budget(startup) == constants.DEFAULT_STARTUP_TIMEOUT_SECONDS == 30 * 60
    # ... and the Deployment does not call the rollout failed before that.
    dep = objects({"model": "m"})["Deployment"]
    assert dep["spec"]["progressDeadlineSeconds"] > _budget(startup)


def test_startup_and_progress_budgets_are_spec_fields():
    spec = {"model": "meta-llama/Llama-3.1-405B", "startupTimeoutSeconds": 4 * 3600, "rollout": {"progressDeadlineSeconds": 5 * 3600}}
    dep = objects(spec)["Deployment"]
    assert _budget(dep["spec"]["template"]["spec"]["containers"][0]["startupProbe"]) == 4 * 3600
    assert dep["spec"]["progressDeadlineSeconds"] == 5 * 3600
    # Without a progress deadline it follows the startup budget.
    dep = objects({"model": "m", "startupTimeoutSeconds": 7200})["Deployment"]
    assert dep["spec"]["progressDeadlineSeconds"] == 7200 + constants.PROGRESS_DEADLINE_MARGIN_SECONDS
    with pytest.raises(SpecError, match="progressDeadlineSeconds must exceed startupTimeoutSeconds"):
        render.render(isvc({"model": "m", "startupTimeoutSeconds": 7200, "rollout": {"progressDeadlineSeconds": 3600}}))


def test_a_stopping_pod_keeps_serving_while_its_endpoint_removal_spreads():
    ctr = container({"model": "m"})
    assert ctr["lifecycle"]["preStop"] == {"sleep": {"seconds": constants.PRESTOP_SLEEP_SECONDS}}
    assert constants.PRESTOP_SLEEP_SECONDS >= 5
    # The grace period covers the pause, then the drain.
    grace = pod({"model": "m"})["terminationGracePeriodSeconds"]
    assert grace > constants.PRESTOP_SLEEP_SECONDS + server_args.defaults()["drain_timeout"]


def test_the_grace_period_outlasts_the_servers_drain():
    default = pod({"model": "m"})["terminationGracePeriodSeconds"]
    assert default > server_args.defaults()["drain_timeout"]
    longer = pod({"model": "m", "args": ["--drain-timeout", "120"]})["terminationGracePeriodSeconds"]
    assert longer > 120


def test_dev_shm_is_memory_backed_for_nccl():
    spec = pod({"model": "m", "tp": 8})
    shm = next(v for v in spec["volumes"] if v["name"] == constants.SHM_VOLUME)
    assert shm["emptyDir"]["medium"] == "Memory"
    assert {"name": constants.SHM_VOLUME, "mountPath": "/dev/shm"} in spec["containers"][0]["volumeMounts"]


def _env(ctr: dict) -> dict[str, dict]:
    names = [e["name"] for e in ctr["env"]]
    assert len(names) == len(set(names)), "duplicate env names break server-side apply"
    return {e["name"]: e for e in ctr["env"]}


def test_without_a_model_cache_hf_home_is_on_an_emptydir_and_no_pvc_is_made():
    rendered = objects({"model": "m"})
    spec = rendered["Deployment"]["spec"]["template"]["spec"]
    cache = next(v for v in spec["volumes"] if v["name"] == constants.CACHE_VOLUME)
    # Bounded: the kubelet evicts the pod instead of letting the download fill the node's disk.
    assert cache == {"name": constants.CACHE_VOLUME, "emptyDir": {"sizeLimit": constants.EMPTYDIR_CACHE_SIZE_LIMIT}}
    tmp = next(v for v in spec["volumes"] if v["name"] == constants.TMP_VOLUME)
    assert tmp["emptyDir"]["sizeLimit"] == constants.TMP_SIZE_LIMIT
    assert "PersistentVolumeClaim" not in rendered
    assert _env(spec["containers"][0])["HF_HOME"]["value"].startswith(constants.CACHE_MOUNT + "/")


def test_triton_compiles_into_the_model_cache_so_the_next_pod_starts_warm():
    """The image cannot carry minisgl's Triton kernels (Dockerfile header): the first pod on a GPU
    compiles them into the model cache volume, where a later pod (a shared claim) finds them."""
    rendered = objects({"model": "m", "modelCache": {"claimName": "team-models"}})
    ctr = rendered["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert _env(ctr)["TRITON_CACHE_DIR"]["value"].startswith(constants.CACHE_MOUNT + "/")
    assert {"name": constants.CACHE_VOLUME, "mountPath": constants.CACHE_MOUNT} in ctr["volumeMounts"]


def test_an_existing_claim_is_mounted_and_not_created():
    rendered = objects({"model": "m", "modelCache": {"claimName": "team-models"}})
    spec = rendered["Deployment"]["spec"]["template"]["spec"]
    assert {"name": constants.CACHE_VOLUME, "persistentVolumeClaim": {"claimName": "team-models"}} in spec["volumes"]
    assert {"name": constants.CACHE_VOLUME, "mountPath": constants.CACHE_MOUNT} in spec["containers"][0]["volumeMounts"]
    assert "PersistentVolumeClaim" not in rendered


def test_a_sized_cache_becomes_a_pvc_that_the_pods_mount():
    rendered = objects({"model": "m", "modelCache": {"size": "250Gi", "storageClassName": "ssd"}})
    pvc = rendered["PersistentVolumeClaim"]
    assert pvc["metadata"]["name"] == "chat-model-cache"
    assert pvc["spec"] == {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "250Gi"}},
        "storageClassName": "ssd",
    }
    volumes = rendered["Deployment"]["spec"]["template"]["spec"]["volumes"]
    assert {"name": constants.CACHE_VOLUME, "persistentVolumeClaim": {"claimName": "chat-model-cache"}} in volumes


def test_a_per_pod_cache_is_a_generic_ephemeral_volume_and_no_shared_pvc():
    rendered = objects({"model": "m", "replicas": 3, "modelCache": {"size": "500Gi", "perPod": True, "storageClassName": "local-nvme"}})
    assert "PersistentVolumeClaim" not in rendered
    volume = next(v for v in rendered["Deployment"]["spec"]["template"]["spec"]["volumes"] if v["name"] == constants.CACHE_VOLUME)
    claim = volume["ephemeral"]["volumeClaimTemplate"]
    assert claim["spec"] == {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "500Gi"}},
        "storageClassName": "local-nvme",
    }


def _qos(pod_spec: dict) -> str:
    """The pod's QoS class, by the kubelet's rule: only cpu and memory count."""
    (ctr,) = pod_spec["containers"]
    requests, limits = ctr["resources"].get("requests", {}), ctr["resources"].get("limits", {})
    if not any(r in requests or r in limits for r in ("cpu", "memory")):
        return "BestEffort"
    if all(r in limits and requests.get(r, limits[r]) == limits[r] for r in ("cpu", "memory")):
        return "Guaranteed"
    return "Burstable"


def test_a_gpu_pod_without_resources_is_never_best_effort():
    def cpu_memory(res: dict) -> dict:
        return {k: v for k, v in res.items() if k != constants.EPHEMERAL_STORAGE}

    ctr = container({"model": "m", "tp": 4})
    assert cpu_memory(ctr["resources"]["requests"]) == {
        "cpu": str(4 * constants.DEFAULT_CPU_PER_GPU), "memory": f"{4 * constants.DEFAULT_MEMORY_GI_PER_GPU}Gi"}
    assert _qos(pod({"model": "m", "tp": 4})) == "Burstable"
    # What the spec names wins; a limit alone already sets the request.
    ctr = container({"model": "m", "resources": {"limits": {"memory": "64Gi"}, "requests": {"cpu": "2"}}})
    assert cpu_memory(ctr["resources"]["requests"]) == {"cpu": "2"}
    assert cpu_memory(ctr["resources"]["limits"]) == {"memory": "64Gi", constants.GPU_RESOURCE: 1}




def test_the_pod_template_override_merges_like_a_strategic_merge_patch():
    dep = objects({"model": "m", "podTemplate": POD_TEMPLATE})["Deployment"]
    template = dep["spec"]["template"]
    meta, spec = template["metadata"], template["spec"]
    assert meta["labels"]["kueue.x-k8s.io/queue-name"] == "gpu-queue"
    assert meta["labels"][constants.LABEL_INSTANCE] == "chat"  # the selector labels stay the operator's
    assert meta["annotations"]["karpenter.sh/do-not-disrupt"] == "true"
    assert meta["annotations"]["prometheus.io/path"] == server.METRICS_PATH  # merged, not replaced
    for key in ("imagePullSecrets", "runtimeClassName", "priorityClassName", "serviceAccountName", "schedulerName",
                "topologySpreadConstraints"):
        assert spec[key] == POD_TEMPLATE["spec"][key], key
    # Containers merge by name: the server keeps everything the operator set, plus the mount and env.
    server_ctr, sidecar = spec["containers"]
    assert server_ctr["name"] == constants.CONTAINER_NAME and sidecar["name"] == "log-shipper"
    assert server_ctr["args"][:2] == [server.FLAG_MODEL, "m"]
    assert server_ctr["resources"]["limits"][constants.GPU_RESOURCE] == 1
    assert {"name": "chat-templates", "mountPath": "/templates", "readOnly": True} in server_ctr["volumeMounts"]
    assert {"name": constants.CACHE_VOLUME, "mountPath": constants.CACHE_MOUNT} in server_ctr["volumeMounts"]
    assert {e["name"] for e in server_ctr["env"]} >= {"NCCL_DEBUG", "HF_HOME"}
    # Volumes merge by name: a new one is added, the cache's emptyDir gets a larger limit.
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["chat-templates"] == {"name": "chat-templates", "configMap": {"name": "templates"}}
    assert volumes[constants.CACHE_VOLUME] == {"name": constants.CACHE_VOLUME, "emptyDir": {"sizeLimit": "1Ti"}}
    assert set(volumes) == {constants.SHM_VOLUME, constants.TMP_VOLUME, constants.CACHE_VOLUME, "chat-templates"}
    kubernetes_validate.validate(dep, K8S_VERSION, strict=True)


@pytest.mark.parametrize(
    "container_override, complaint",
    [
        ({"name": constants.CONTAINER_NAME, "args": ["--tp", "8"]}, "args comes from the spec"),
        ({"name": constants.CONTAINER_NAME, "command": ["sh"]}, "command comes from the spec"),
        ({"name": constants.CONTAINER_NAME, "resources": {"limits": {constants.GPU_RESOURCE: 8}}}, "spec.tp sets the GPUs"),
    ],
)
def test_the_pod_template_cannot_take_over_what_the_spec_owns(container_override, complaint):
    with pytest.raises(SpecError, match=complaint):
        render.render(isvc({"model": "m", "podTemplate": {"spec": {"containers": [container_override]}}}))


def test_spec_env_overrides_the_operators_defaults_and_env_from_passes_through():
    ctr = container(MATRIX["tp8-everything"])
    env = _env(ctr)
    assert env["HF_HOME"] == {"name": "HF_HOME", "value": "/models/hf"}
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "hf", "key": "token"}
    assert ctr["envFrom"] == MATRIX["tp8-everything"]["envFrom"]


def test_scheduling_fields_pass_through():
    spec = pod(MATRIX["tp8-everything"])
    assert spec["nodeSelector"] == MATRIX["tp8-everything"]["nodeSelector"]
    assert spec["tolerations"] == MATRIX["tp8-everything"]["tolerations"]
    assert spec["affinity"] == MATRIX["tp8-everything"]["affinity"]


# --- replicas, autoscaling, disruption ----------------------------------------------------------


def test_one_replica_no_autoscaling_means_no_hpa_and_no_pdb():
    rendered = objects({"model": "m"})
    assert set(rendered) == {"Deployment", "Service"}
    assert rendered["Deployment"]["spec"]["replicas"] == 1


def test_several_replicas_get_a_pdb_that_allows_one_pod_down():
    rendered = objects({"model": "m", "replicas": 3})
    assert rendered["Deployment"]["spec"]["replicas"] == 3
    pdb = rendered["PodDisruptionBudget"]["spec"]
    assert pdb["maxUnavailable"] == 1
    assert pdb["selector"]["matchLabels"] == rendered["Deployment"]["spec"]["selector"]["matchLabels"]


def test_autoscaling_is_an_hpa_on_waiting_requests_that_scales_the_inferenceservice():
    rendered = objects(MATRIX["tp4-created-cache-autoscaling"])
    hpa = rendered["HorizontalPodAutoscaler"]
    assert hpa["apiVersion"] == "autoscaling/v2"
    # Through the InferenceService's scale subresource, so spec.replicas stays the one truth.
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": constants.API_VERSION, "kind": constants.KIND, "name": "chat"}
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 8)
    (metric,) = hpa["spec"]["metrics"]
    assert metric == {
        "type": "Pods",
        "pods": {
            "metric": {"name": "minisgl_num_requests_waiting"},
            "target": {"type": "AverageValue", "averageValue": "6"},
        },
    }
    assert "PodDisruptionBudget" in rendered


def test_autoscaling_defaults():
    hpa = objects({"model": "m", "autoscaling": {"maxReplicas": 3}})["HorizontalPodAutoscaler"]["spec"]
    assert hpa["minReplicas"] == 1
    assert hpa["metrics"][0]["pods"]["target"]["averageValue"] == str(constants.DEFAULT_TARGET_WAITING_REQUESTS)


# --- service, labels, owners, metrics ----------------------------------------------------------


def test_the_service_exposes_the_named_port_of_the_pods():
    rendered = objects({"model": "m", "port": 8000})
    svc = rendered["Service"]["spec"]
    assert svc["ports"] == [{"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP", "appProtocol": "http"}]
    assert svc["selector"] == rendered["Deployment"]["spec"]["selector"]["matchLabels"]


@pytest.mark.parametrize("case", sorted(MATRIX))
def test_every_child_is_owned_labelled_and_hashed(case):
    for obj in render.render(isvc(MATRIX[case])):
        meta = obj["metadata"]
        assert meta["namespace"] == "llm"
        retained = obj["kind"] == "PersistentVolumeClaim" and MATRIX[case]["modelCache"].get("retain", True)
        assert meta.get("ownerReferences") == (None if retained else [
            {"apiVersion": constants.API_VERSION, "kind": constants.KIND, "name": "chat", "uid": "uid-123", "controller": True,
             "blockOwnerDeletion": True}
        ])  # fmt: skip
        # The router's endpoint picker and the model loader are apps of their own: their pods must
        # never match the servers' selectors.
        app, component = {"chat-epp": ("minisgl-epp", "endpoint-picker"), "chat-load": ("minisgl-load", "model-loader")}.get(
            meta["name"], ("minisgl", "inference-server"))  # fmt: skip
        assert meta["labels"] == {
            "app.kubernetes.io/name": app,
            "app.kubernetes.io/instance": "chat",
            "app.kubernetes.io/component": component,
            "app.kubernetes.io/part-of": "minisgl",
            "app.kubernetes.io/managed-by": "minisgl-operator",
        }
        assert len(meta["annotations"][constants.ANNOTATION_CONFIG_HASH]) == 16


def test_pods_are_scraped_on_the_servers_metrics_path_and_labelled():
    template = objects({"model": "m", "port": 9000})["Deployment"]["spec"]["template"]
    assert template["metadata"]["annotations"] == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "9000",
        "prometheus.io/path": server_args.METRICS_PATH,
    }
    assert template["metadata"]["labels"]["app.kubernetes.io/managed-by"] == constants.OPERATOR_NAME


def test_the_pod_selector_never_depends_on_the_spec():
    a = objects({"model": "a", "tp": 1})["Deployment"]["spec"]["selector"]
    b = objects({"model": "b", "tp": 8, "replicas": 4, "port": 7000})["Deployment"]["spec"]["selector"]
    assert a == b  # a Deployment's selector is immutable


def test_the_config_hash_changes_with_the_spec_and_only_then():
    def dep_hash(spec):
        return objects(spec)["Deployment"]["metadata"]["annotations"][constants.ANNOTATION_CONFIG_HASH]

    assert dep_hash({"model": "m"}) == dep_hash({"model": "m"})
    assert dep_hash({"model": "m"}) != dep_hash({"model": "m", "replicas": 2})


def test_the_server_runs_unprivileged_with_a_read_only_root():
    spec = pod({"model": "m"})
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["automountServiceAccountToken"] is False
    ctr = spec["containers"][0]
    assert ctr["securityContext"]["readOnlyRootFilesystem"] is True
    assert ctr["securityContext"]["allowPrivilegeEscalation"] is False
    # Everything the server writes lands on a volume.
    mounts = {m["mountPath"] for m in ctr["volumeMounts"]}
    for value in constants.CACHE_ENV.values():
        assert any(value == m or value.startswith(m + "/") for m in mounts), value


# --- official schemas ---------------------------------------------------------------------------


@pytest.mark.parametrize("case", sorted(MATRIX))
def test_every_rendered_object_is_valid_for_a_current_kubernetes(case):
    for obj in render.render(isvc(MATRIX[case])):
        operator_crds.validate(obj)  # a core kind's schema, or its vendored CRD's
        if not operator_crds.is_custom(obj):
            # ... and for the oldest the chart supports (Chart.yaml kubeVersion: the preStop sleep action).
            kubernetes_validate.validate(obj, OLDEST_K8S, strict=True)


def example_docs(example: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(example.read_text()) if d]


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_the_examples_render_to_valid_objects(example):
    for doc in example_docs(example):
        rendered = render.render(doc)
        kinds = {o["kind"] for o in rendered}
        assert "Service" in kinds and kinds & {"Deployment", "LeaderWorkerSet"}
        for obj in rendered:
            operator_crds.validate(obj)


# --- the render command -------------------------------------------------------------------------


def _cli(*argv: str) -> subprocess.CompletedProcess:
    env_path = f"{REPO / 'operator'}:{REPO}"
    return subprocess.run(
        [sys.executable, "-m", "minisgl_operator", *argv],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"},
        timeout=60,
    )


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_render_prints_exactly_what_the_operator_applies(example):
    result = _cli("render", str(example))
    assert result.returncode == 0, result.stderr
    printed = list(yaml.safe_load_all(result.stdout))
    assert printed == [obj for doc in example_docs(example) for obj in render.children(parse(doc))]
    # A file has no uid yet: the ownerReference carries a placeholder the API server replaces (a
    # retained model cache has none: it outlives the InferenceService).
    owned = [o for o in printed if "ownerReferences" in o["metadata"]]
    assert {o["metadata"]["ownerReferences"][0]["uid"] for o in owned} == {PLACEHOLDER_UID}
    assert all(o["kind"] == "PersistentVolumeClaim" for o in printed if o not in owned)


def test_render_explains_a_bad_file_and_fails(tmp_path):
    bad = copy.deepcopy(yaml.safe_load(EXAMPLES[0].read_text()))
    bad["spec"]["tp"] = 3
    del bad["spec"]["model"]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))
    result = _cli("render", str(path))
    assert result.returncode == 1
    assert result.stdout == ""
    assert "spec.tp: 3 is not one of [1, 2, 4, 8, 16, 32, 64]" in result.stderr
    assert "'model' is a required property" in result.stderr


def test_render_uses_the_namespace_flag_only_when_the_file_has_none(tmp_path):
    doc = isvc({"model": "m"})
    del doc["metadata"]["namespace"]
    path = tmp_path / "one.yaml"
    path.write_text(yaml.safe_dump(doc))
    out = list(yaml.safe_load_all(_cli("render", "-n", "team-a", str(path)).stdout))
    assert {o["metadata"]["namespace"] for o in out} == {"team-a"}
    assert cli.main(["render", str(path), "--image", "x/y:1"]) == 0


# --- scaling, disk, and what a router switch may touch ------------------------------------------


def test_the_hpa_scales_up_no_faster_than_new_pods_can_load():
    # A burst must not add a pod every 15 s (the HPA's sync period) while each takes minutes to load.
    hpa = objects({"model": "m", "startupTimeoutSeconds": 900, "autoscaling": {"maxReplicas": 16}})["HorizontalPodAutoscaler"]
    up = hpa["spec"]["behavior"]["scaleUp"]
    assert up["stabilizationWindowSeconds"] >= 60
    (policy,) = up["policies"]
    assert policy["periodSeconds"] >= up["stabilizationWindowSeconds"]
    assert policy in ({"type": "Percent", "value": 100, "periodSeconds": policy["periodSeconds"]},
                      {"type": "Pods", "value": 1, "periodSeconds": policy["periodSeconds"]})  # fmt: skip
    assert hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] >= 900


@pytest.mark.parametrize("case", ["tp1-minimal", "tp8-everything", "multi-node-recreate"])
def test_adding_or_removing_the_router_leaves_the_gpu_pods_alone(case):
    # A changed pod template rolls every GPU pod (minutes of model load each): the router must not.
    def templates(spec: dict) -> list[dict]:
        workload = next(o for o in render.render(isvc(spec))
                        if o["metadata"]["name"] == "chat" and o["kind"] in ("Deployment", "LeaderWorkerSet"))
        return [workload["spec"].get("template")] + list(workload["spec"].get("leaderWorkerTemplate", {}).values())

    without = MATRIX[case]
    with_router = {**without, "router": {"gateway": {"name": "gw"}}}
    assert templates(with_router) == templates(without)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_no_example_sets_replicas_beside_autoscaling(example):
    # The autoscaler writes spec.replicas; a manifest that sets it too resets the count on every apply.
    for doc in example_docs(example):
        assert not ("replicas" in doc["spec"] and "autoscaling" in doc["spec"]), doc["metadata"]["name"]


def _ephemeral(ctr: dict) -> tuple[str | None, str | None]:
    res = ctr.get("resources") or {}
    return (res.get("requests") or {}).get(constants.EPHEMERAL_STORAGE), (res.get("limits") or {}).get(constants.EPHEMERAL_STORAGE)


def _disk_backed_emptydirs(pod_spec: dict) -> int:
    from minisgl_operator import quantity

    return sum(quantity.parse(v["emptyDir"]["sizeLimit"]) for v in pod_spec["volumes"]
               if "emptyDir" in v and v["emptyDir"].get("medium") != "Memory")  # fmt: skip


@pytest.mark.parametrize("case", sorted(MATRIX))
def test_every_pod_asks_the_scheduler_for_the_disk_its_emptydirs_may_fill(case):
    # Without an ephemeral-storage request the scheduler puts a 200Gi emptyDir cache on a node with
    # 50Gi free and the kubelet evicts the pod mid-download (DiskPressure).
    from minisgl_operator import quantity

    for obj in render.render(isvc(MATRIX[case])):
        templates = [obj["spec"]["template"]] if obj["kind"] == "Deployment" else []
        if obj["kind"] == "LeaderWorkerSet":
            templates += [obj["spec"]["leaderWorkerTemplate"][t] for t in ("leaderTemplate", "workerTemplate")]
        for template in templates:
            spec = template["spec"]
            main = spec["containers"][0]
            request, limit = _ephemeral(main)
            assert request is not None and limit is not None, (case, obj["metadata"]["name"])
            assert quantity.parse(request) >= _disk_backed_emptydirs(spec) + quantity.parse(constants.EPHEMERAL_LOG_MARGIN)


def test_the_emptydir_model_cache_counts_and_a_pvc_cache_does_not():
    from minisgl_operator import quantity

    on_node = _ephemeral(container({"model": "m"}))[0]
    on_pvc = _ephemeral(container({"model": "m", "modelCache": {"claimName": "models"}}))[0]
    assert quantity.parse(on_node) - quantity.parse(on_pvc) == quantity.parse(constants.EMPTYDIR_CACHE_SIZE_LIMIT)
    # A podTemplate that resizes the emptyDir cache moves the request with it; spec.resources names its own.
    resized = pod(MATRIX["per-pod-cache-surge-rollout"])  # its podTemplate turns the cache into a 1Ti emptyDir
    assert quantity.parse(_ephemeral(resized["containers"][0])[0]) >= quantity.parse("1Ti")
    own = container({"model": "m", "resources": {"requests": {constants.EPHEMERAL_STORAGE: "50Gi"}}})
    assert _ephemeral(own) == ("50Gi", None)


@pytest.mark.parametrize("field, value, path", [
    ("affinity", {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerm": []}}},
     "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"),
    ("affinity", {"podAntiAfinity": {}}, "affinity"),
    ("env", [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "s", "kye": "t"}}}], "env[0].valueFrom.secretKeyRef"),
    ("env", [{"name": "T", "valueFrom": {"secretRef": {"name": "s"}}}], "env[0].valueFrom"),
])  # fmt: skip
def test_the_crd_types_affinity_and_value_from_so_a_typo_is_refused_at_apply(field, value, path):
    # Passed through unchecked, a typo here reached server-side apply of the Deployment: HTTP 500.
    with pytest.raises(SpecError, match=re.escape(f"spec.{path}: Additional properties are not allowed")):
        parse(isvc({"model": "m", field: value}))


def test_well_formed_affinity_and_value_from_pass_through_unchanged():
    spec = MATRIX["tp8-everything"]
    ctr = container(spec)
    assert next(e for e in ctr["env"] if e["name"] == "HF_TOKEN") == spec["env"][0]
    assert pod(spec)["affinity"] == spec["affinity"]
    divisor = {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": 1}}}
    assert parse(isvc({"model": "m", "env": [divisor]})).env == (divisor,)  # a quantity: int or string


# --- LoRA adapters (spec.adapters) ---------------------------------------------------------------

ADAPTERS = [
    {"name": "sql", "source": "org/sql-lora", "rank": 32},
    {"name": "chat.v2", "source": "/models/mine/chat-lora", "rank": 8},
    {"name": "Summarize_1", "source": "summarize-lora"},
]


def test_adapters_become_the_servers_lora_flags_with_a_slot_each_of_the_largest_rank():
    args = container({"model": "org/base", "adapters": ADAPTERS})["args"]
    assert args[args.index("--lora-modules"):] == [
        "--lora-modules", "sql=/models/lora/org/sql-lora", "chat.v2=/models/mine/chat-lora",
        "Summarize_1=/models/lora/summarize-lora", "--max-loras", "3", "--max-lora-rank", "32",
    ]  # fmt: skip
    # Parsed and checked by minisgl's own parser, exactly as the server will.
    parsed = server.parse_command_line(args)
    assert parsed.lora_adapters == {"sql": "/models/lora/org/sql-lora", "chat.v2": "/models/mine/chat-lora",
                                    "Summarize_1": "/models/lora/summarize-lora"}  # fmt: skip
    assert (parsed.max_loras, parsed.max_lora_rank) == (3, 32)


def test_without_adapters_or_rank_hints_the_servers_defaults_stand():
    assert not any(a.startswith("--lora") or a.startswith("--max-lora") for a in container({"model": "m"})["args"])
    args = container({"model": "m", "adapters": [{"name": "a", "source": "/models/a"}]})["args"]
    parsed = server.parse_command_line(args)
    assert "--max-lora-rank" not in args and parsed.max_lora_rank == server_args.ServerArgs.max_lora_rank


def test_spec_args_may_size_the_slots_themselves_and_the_operator_adds_no_second_flag():
    # Spare slots for adapters loaded at runtime (vLLM's --allow-runtime-lora-updating API).
    args = container({"model": "m", "adapters": ADAPTERS,
                      "args": ["--max-loras", "8", "--max-lora-r=64", "--allow-runtime-lora-updating"]})["args"]
    assert args.count("--max-loras") == 1 and "--max-lora-rank" not in args
    parsed = server.parse_command_line(args)
    assert (parsed.max_loras, parsed.max_lora_rank, parsed.allow_runtime_lora_updating) == (8, 64, True)


@pytest.mark.parametrize("args, complaint", [
    (["--max-loras", "2"], "spec.adapters: the server would refuse them: --max-loras 2 is fewer slots than the 3 adapters"),
    (["--max-lora-rank", "16"], "spec.adapters[0].rank: 32 is above spec.args' --max-lora-rank 16"),
    (["--served-model-name", "base", "sql"], "spec.adapters: the server would refuse them: --lora-modules: 'sql' is already"),
    (["--lora-modules", "x=/models/x"], "--lora-modules comes from the InferenceService spec"),
    (["--lora", "x=/models/x"], "--lora-modules comes from the InferenceService spec"),  # argparse's prefix
])  # fmt: skip
def test_adapters_the_server_would_not_start_with_are_a_spec_error(args, complaint):
    # Each would be a crash loop at the server's start (a full pool, a rank above the slots', a name
    # the base model answers to), or a second list of adapters that argparse would let win silently.
    with pytest.raises(SpecError) as info:
        render.render(isvc({"model": "org/base", "adapters": ADAPTERS, "args": args}))
    assert any(complaint in p for p in info.value.problems), info.value.problems


def _init(template: dict) -> dict:
    """The adapters' init container (a claim also gets the cache-owner, which runs first)."""
    (only,) = [c for c in template["spec"].get("initContainers", []) if c["name"] == constants.ADAPTER_CONTAINER]
    return only


def test_hub_adapters_are_downloaded_into_the_model_cache_before_the_server_starts():
    spec = {"model": "org/base", "adapters": ADAPTERS, "env": [{"name": "HF_TOKEN", "value": "t"}],
            "envFrom": [{"secretRef": {"name": "hub"}}], "modelCache": {"claimName": "models"}}
    template = objects(spec)["Deployment"]["spec"]["template"]
    init, server_ctr = _init(template), template["spec"]["containers"][0]
    assert init["name"] == constants.ADAPTER_CONTAINER and init["image"] == server_ctr["image"]
    # Each Hub id once, into the directory the server's --lora-modules names; the local path is not fetched.
    assert init["command"] == [*constants.ADAPTER_DOWNLOAD_COMMAND, "org/sql-lora", "/models/lora/org/sql-lora",
                               "summarize-lora", "/models/lora/summarize-lora"]  # fmt: skip
    assert {"name": constants.CACHE_VOLUME, "mountPath": constants.CACHE_MOUNT} in init["volumeMounts"]
    # The server container's environment (HF_TOKEN, HF_HOME) and lockdown, but no GPU.
    assert (init["env"], init["envFrom"]) == ([*server_ctr["env"], constants.NO_GPU_ENV], server_ctr["envFrom"])
    assert init["securityContext"] == server_ctr["securityContext"]
    assert "nvidia.com/gpu" not in str(init["resources"])


def test_adapters_from_paths_alone_need_no_download():
    assert "initContainers" not in pod({"model": "m", "adapters": [{"name": "a", "source": "/models/a"}]})


def test_a_podtemplate_environment_reaches_the_adapter_download_too():
    override = {"spec": {"containers": [{"name": constants.CONTAINER_NAME, "env": [{"name": "HF_ENDPOINT", "value": "https://hub.example"}]}]}}
    init = _init(objects({"model": "m", "adapters": ADAPTERS, "podTemplate": override})["Deployment"]["spec"]["template"])
    assert {"name": "HF_ENDPOINT", "value": "https://hub.example"} in init["env"]


def test_every_pod_of_a_multi_node_group_fetches_the_adapters_its_ranks_load():
    lws = objects(MATRIX["adapters-multi-node"])["LeaderWorkerSet"]["spec"]["leaderWorkerTemplate"]
    for role in ("leaderTemplate", "workerTemplate"):
        template = lws[role]
        assert _init(template)["command"][-2:] == ["org/sql-lora", "/models/lora/org/sql-lora"]
        args = template["spec"]["containers"][0]["args"]  # a worker's node rank is the kubelet's to expand
        assert args[args.index("--lora-modules") + 1] == "sql=/models/lora/org/sql-lora"
        assert args.count("--max-loras") == 1  # spec.args' 8


def test_on_a_shared_created_cache_the_loader_job_fetches_the_adapters_once_beside_the_model():
    rendered = objects(MATRIX["adapters-shared-cache"])
    assert "initContainers" not in rendered["Deployment"]["spec"]["template"]["spec"]
    job_pod = rendered["Job"]["spec"]["template"]["spec"]
    assert [ctr["name"] for ctr in job_pod["containers"]] == [constants.LOADER_CONTAINER, constants.ADAPTER_CONTAINER]
    assert job_pod["containers"][1]["command"][-2:] == ["org/sql-lora", "/models/lora/org/sql-lora"]
    # A model from a path has nothing to load; its Hub adapters still do.
    local_model = objects({**MATRIX["adapters-shared-cache"], "model": "/models/base"})
    assert [ctr["name"] for ctr in local_model["Job"]["spec"]["template"]["spec"]["containers"]] == [constants.ADAPTER_CONTAINER]
    assert "Job" not in objects({**MATRIX["adapters-shared-cache"], "model": "/models/base",
                                 "adapters": [{"name": "a", "source": "/models/a"}]})  # fmt: skip


def test_the_download_command_runs_and_fails_on_an_adapter_it_cannot_fetch(tmp_path):
    command = _init(objects({"model": "m", "adapters": ADAPTERS})["Deployment"]["spec"]["template"])["command"]
    env = {"PATH": "/usr/bin:/bin", "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    nothing = subprocess.run([sys.executable, *command[1:3]], capture_output=True, text=True, env=env, timeout=120)
    assert nothing.returncode == 0, nothing.stderr  # valid Python; huggingface_hub is there
    missing = subprocess.run([sys.executable, *command[1:3], "org/sql-lora", str(tmp_path / "lora" / "org" / "sql-lora")],
                             capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
    assert missing.returncode != 0 and "LocalEntryNotFoundError" in missing.stderr


def test_a_downloaded_hub_adapter_is_where_the_server_loads_it_from(tiny_model_dir, tmp_path):
    """peft writes an adapter; the files the download keeps (its allow_patterns) are the ones the
    server's loader reads, at the path its --lora-modules names (the cache mount mapped to tmp_path)."""
    import shutil

    from minisgl.lora import load_adapter
    from minisgl.models import load_model_config
    from tests.lora.peft_adapters import build_adapter

    model_dir = tiny_model_dir("Qwen3ForCausalLM")
    written = build_adapter(model_dir, str(tmp_path / "peft"), rank=8, alpha=16)
    template = objects({"model": "m", "adapters": [ADAPTERS[0]]})["Deployment"]["spec"]["template"]
    parsed = server.parse_command_line(template["spec"]["containers"][0]["args"])
    in_pod = parsed.lora_adapters["sql"]
    assert _init(template)["command"][-1] == in_pod and in_pod.startswith(constants.CACHE_MOUNT + "/")
    local = tmp_path / "cache" / in_pod.removeprefix(constants.CACHE_MOUNT + "/")
    local.mkdir(parents=True)
    for name in constants.ADAPTER_FILES:
        shutil.copy(f"{written}/{name}", local / name)
    # The download itself, offline: huggingface_hub finds the directory filled and keeps it.
    command = _init(template)["command"]
    env = {"PATH": "/usr/bin:/bin", "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, *command[1:3], command[-2], str(local)], capture_output=True, text=True,
                          env=env, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    adapter = load_adapter("sql", str(local), load_model_config(model_dir), max_rank=parsed.max_lora_rank)
    assert adapter.rank == 8
