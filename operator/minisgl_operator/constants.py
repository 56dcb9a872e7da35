"""Fixed names shared by the CRD, the renderer, the reconciler and the Helm chart's tests."""

from __future__ import annotations

from . import __version__

# The custom resource.
GROUP = "minisgl.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "InferenceService"
PLURAL = "inferenceservices"
SINGULAR = "inferenceservice"
# Not "isvc": that one is KServe's.
SHORT_NAMES = ["misvc"]
CATEGORIES = ["minisgl"]
CRD_NAME = f"{PLURAL}.{GROUP}"

# Tensor-parallel sizes: one GPU per rank. Up to 8 ranks fit one pod; more span several nodes,
# one pod of gpusPerNode GPUs each (a LeaderWorkerSet group).
TP_SIZES = (1, 2, 4, 8, 16, 32, 64)
GPUS_PER_NODE = (1, 2, 4, 8)
MAX_SINGLE_POD_TP = 8

# Spec defaults (the CRD schema advertises the same values).
DEFAULT_REPLICAS = 1
DEFAULT_TP = 1
DEFAULT_TARGET_WAITING_REQUESTS = 4
DEFAULT_CACHE_ACCESS_MODES = ("ReadWriteOnce",)
# Access modes that several pods on several nodes can mount at once.
SHARED_ACCESS_MODES = ("ReadWriteMany", "ReadOnlyMany")

# Rollouts. The default replaces one pod at a time without a surge pod: it needs no spare GPU, so
# it completes on a full GPU pool (a surge pod there would stay Pending forever).
ROLLOUT_ROLLING = "RollingUpdate"
ROLLOUT_RECREATE = "Recreate"
DEFAULT_MAX_SURGE = 0
DEFAULT_MAX_UNAVAILABLE = 1
# How long a pod may take to download and load its model (the startup probe on the readiness
# path restarts it after that), and the margin the Deployment's progress deadline adds on top.
DEFAULT_STARTUP_TIMEOUT_SECONDS = 1800
PROGRESS_DEADLINE_MARGIN_SECONDS = 600

# The operator itself.
OPERATOR_NAME = "minisgl-operator"
FIELD_MANAGER = OPERATOR_NAME
OPERATOR_VERSION = __version__
# The server image used when an InferenceService sets no spec.image; the chart overrides it
# through this environment variable.
DEFAULT_SERVER_IMAGE = f"minisgl/minisgl:{__version__}"
SERVER_IMAGE_ENV = "MINISGL_SERVER_IMAGE"
RESYNC_SECONDS_ENV = "MINISGL_OPERATOR_RESYNC_SECONDS"
DEFAULT_RESYNC_SECONDS = 60.0

# Labels (https://kubernetes.io/docs/concepts/overview/working-with-objects/common-labels/).
LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_PART_OF = "app.kubernetes.io/part-of"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_VERSION = "app.kubernetes.io/version"
APP_NAME = "minisgl"
COMPONENT = "inference-server"

# Annotations.
ANNOTATION_CONFIG_HASH = f"{GROUP}/config-hash"
KOPF_ANNOTATION_PREFIX = f"operator.{GROUP}"

# Container and volume names.
CONTAINER_NAME = "server"
PORT_NAME = "http"
SHM_VOLUME = "dshm"
SHM_MOUNT = "/dev/shm"
# NCCL keeps its buffers in /dev/shm; Docker's default 64 MiB is far too small for tp > 1.
SHM_SIZE_LIMIT = "16Gi"
TMP_VOLUME = "tmp"
TMP_MOUNT = "/tmp"
CACHE_VOLUME = "model-cache"
CACHE_MOUNT = "/models"
PVC_SUFFIX = "-model-cache"
# A created cache outlives its InferenceService unless modelCache.retain is false: it holds
# hundreds of GB that a delete, a rename or a GitOps replace would otherwise download again.
DEFAULT_CACHE_RETAIN = True
# The Job that fills a shared created cache once, before any server pod starts (NAME-load: within
# the name budget crd.NAME_MAX leaves). It runs the server's own download, in the server image.
LOADER_SUFFIX = "-load"
LOADER_COMPONENT = "model-loader"
LOADER_CONTAINER = "loader"
LOADER_COMMAND = (
    "python", "-c", "import sys; from minisgl.engine.engine import _local_path; print(_local_path(sys.argv[1]))",
)  # fmt: skip
LOADER_BACKOFF_LIMIT = 4
# What a loader Job downloads (the model and the Hub adapters): a Job that succeeded at it is kept
# when something else changes (env, image, placement), since the cache already holds those files.
ANNOTATION_DOWNLOADS = f"{GROUP}/downloads"
# LoRA adapters (spec.adapters). The server reads a local PEFT directory (adapter_config.json +
# adapter_model.safetensors) and downloads none, so a Hub adapter is fetched first into the model
# cache, each into a directory of its own named by its id: the loader Job does it for a shared created
# cache (as for the model), elsewhere an init container of each server pod (as the server does the
# model at its start). huggingface_hub is the server image's own (the engine downloads with it).
ADAPTER_CACHE = f"{CACHE_MOUNT}/lora"
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
ADAPTER_CONTAINER = "adapters"
ADAPTER_DOWNLOAD_COMMAND = (
    "python", "-c",
    "import sys; from huggingface_hub import snapshot_download\n"
    "for repo, local_dir in zip(sys.argv[1::2], sys.argv[2::2]):\n"
    f"    print(snapshot_download(repo, local_dir=local_dir, allow_patterns={list(ADAPTER_FILES)!r}))",
)  # fmt: skip
# Environment of the server container. Downloads (HF_HOME), FlashInfer's JIT-compiled kernels and
# Triton's compiled kernels (minisgl's own, compiled by the first start on a GPU: the image cannot
# ship them, see the Dockerfile's header) go to the model cache volume, so a restarted pod, and on
# a shared cache every later pod, finds them and starts without compiling; HOME (torch's caches)
# goes to the /tmp emptyDir because the root filesystem is read-only.
CACHE_ENV = {
    "HF_HOME": f"{CACHE_MOUNT}/huggingface",
    "FLASHINFER_WORKSPACE_BASE": f"{CACHE_MOUNT}/flashinfer",
    "TRITON_CACHE_DIR": f"{CACHE_MOUNT}/triton",
    "HOME": TMP_MOUNT,
}
# The CUDA base image sets NVIDIA_VISIBLE_DEVICES=all: a container of it that asks no GPU (the loader,
# the adapters' download, the cache-owner) would still see every GPU of its node through the NVIDIA
# container runtime, beside the pods the device plugin gave them to. "void" makes the runtime leave
# the container alone (no GPU, no driver).
NO_GPU_ENV = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}
# A read-only cache (modelCache.readOnly): the compiled kernels go to /tmp, and the Hub client reads
# the cache without asking the Hub (it would write refs and locks beside the files).
READ_ONLY_CACHE_ENV = {
    **CACHE_ENV,
    "FLASHINFER_WORKSPACE_BASE": f"{TMP_MOUNT}/flashinfer",
    "TRITON_CACHE_DIR": f"{TMP_MOUNT}/triton",
    "HF_HUB_OFFLINE": "1",
}
# The init container that makes a shared cache's top directory the server user's (root, with
# CAP_CHOWN alone; only where it is someone else's, like fsGroupChangePolicy OnRootMismatch): its
# last argument is UID:GID.
CACHE_OWNER_CONTAINER = "cache-owner"
CACHE_OWNER_COMMAND = (
    "python", "-c",
    "import os, sys\n"
    "path, (uid, gid) = sys.argv[1], map(int, sys.argv[2].split(':'))\n"
    "st = os.stat(path)\n"
    "if (st.st_uid, st.st_gid) != (uid, gid):\n"
    "    os.chown(path, uid, gid)\n"
    "print(path, 'owned by', uid, gid)",
)  # fmt: skip

# Without modelCache the weights go to an emptyDir: bounded, so a large model cannot fill the
# node's disk unnoticed (the kubelet evicts the pod instead). Sized from the model where its id
# names its parameter count (sizing.py), else this; podTemplate can change it.
EMPTYDIR_CACHE_SIZE_LIMIT = "200Gi"
TMP_SIZE_LIMIT = "16Gi"
# Node disk a pod asks for beyond its disk-backed emptyDirs: container logs (the root filesystem is
# read-only). Requested and limited, so the scheduler places the pod where its emptyDirs fit.
EPHEMERAL_STORAGE = "ephemeral-storage"
EPHEMERAL_LOG_MARGIN = "2Gi"

# A GPU pod with no CPU or memory request is BestEffort (evicted first under node pressure): these
# requests apply where spec.resources sets none (sizing.py). CPU per GPU: small enough for a
# 4-vCPU single-GPU node once its system daemons are placed. Memory: each rank's process (CUDA
# context, pinned buffers, tokenizer) plus a share of the pod's weights for staging them on their way
# to the GPU (the weight files are memory-mapped: the rest of their pages is page cache the kernel
# reclaims); no limit, so a pod may use what the node has free. Where the model's size is unknown, a
# flat amount per GPU.
DEFAULT_CPU_PER_GPU = 2
HOST_MEMORY_GI_PER_GPU = 4
STAGING_SHARE_OF_WEIGHTS = 0.25
DEFAULT_MEMORY_GI_PER_GPU = 16
# The disk a known model needs in an emptyDir cache: its weights (bf16: 2 bytes a parameter) and
# tokenizer and config files beside them, plus the compiled Triton and FlashInfer kernels, plus each
# Hub adapter.
WEIGHT_BYTES_PER_PARAMETER = 2
CACHE_WEIGHTS_FACTOR = 1.1
KERNEL_CACHE_GI = 4
ADAPTER_CACHE_GI = 1

# The non-root user the server image runs as (Dockerfile: USER 10001:10001).
RUN_AS_USER = 10001

# GPUs come from spec.tp, never from spec.resources.
GPU_RESOURCE = "nvidia.com/gpu"

# Autoscaling: the per-pod gauge the server exports on its metrics path, read through the
# custom metrics API (needs a metrics adapter such as prometheus-adapter).
WAITING_REQUESTS_METRIC = "minisgl_num_requests_waiting"
# The other series the router's endpoint picker and KEDA's queries read (minisgl.server.http.metrics
# defines them; tests/operator/test_operator_server_contract.py checks a real scrape has each).
RUNNING_REQUESTS_METRIC = "minisgl_num_requests_running"
KV_USAGE_METRIC = "minisgl_kv_cache_usage_ratio"
CACHE_CONFIG_METRIC = "minisgl_cache_config_info"
CACHE_PAGE_SIZE_LABEL = "page_size"
CACHE_NUM_PAGES_LABEL = "num_pages"
TTFT_BUCKET_METRIC = "minisgl_time_to_first_token_seconds_bucket"
# The label the chart's PodMonitor copies from a pod's app.kubernetes.io/instance: which
# InferenceService a series belongs to, for KEDA's Prometheus queries.
PROMETHEUS_ISVC_LABEL = "inference_service"

# KEDA (keda.sh/v1alpha1 ScaledObject): the Prometheus query each spec.autoscaling.keda.metric
# names, and how the target compares with it (AverageValue: per replica; Value: as a whole).
KEDA_API_VERSION = "keda.sh/v1alpha1"
KEDA_METRIC_WAITING = "waitingRequests"
KEDA_METRIC_KV = "kvCacheUtilization"
KEDA_METRIC_TTFT = "ttftP90"
KEDA_METRICS = (KEDA_METRIC_WAITING, KEDA_METRIC_KV, KEDA_METRIC_TTFT)
KEDA_POLLING_SECONDS = 15
# TTFT p90 over this window: long enough for a few requests, short enough to follow a burst.
KEDA_RATE_WINDOW = "2m"
# Scale down one pod at a time after this much calm (a GPU pod takes minutes to come back).
SCALE_DOWN_STABILIZATION_SECONDS = 600
SCALE_DOWN_PERIOD_SECONDS = 300
SCALE_UP_STABILIZATION_SECONDS = 120

# The router: Gateway API Inference Extension objects and the endpoint picker (EPP) that scores
# the pods. The EPP now lives in llm-d's router (the extension keeps the InferencePool API).
INFERENCE_POOL_API_VERSION = "inference.networking.k8s.io/v1"
GATEWAY_API_GROUP = "gateway.networking.k8s.io"
HTTPROUTE_API_VERSION = f"{GATEWAY_API_GROUP}/v1"
EPP_SUFFIX = "-epp"
EPP_COMPONENT = "endpoint-picker"
EPP_IMAGE_ENV = "MINISGL_ENDPOINT_PICKER_IMAGE"
DEFAULT_EPP_IMAGE = "ghcr.io/llm-d/llm-d-router-endpoint-picker:v0.10.0"
EPP_GRPC_PORT = 9002
EPP_HEALTH_PORT = 9003
EPP_METRICS_PORT = 9090
EPP_CONFIG_FILE = "epp-config.yaml"
EPP_CONFIG_MOUNT = "/config"
# The pod label the EPP's core-metrics-extractor reads to pick an engine's metric names.
EPP_ENGINE_LABEL = "llm-d.ai/engine-type"
EPP_ENGINE_NAME = "minisgl"
# The EPP's own gauge of requests it holds (flow control): with no pod up, they wait there, which
# is what lets KEDA scale from zero. Labelled by the pool's name.
EPP_QUEUE_METRIC = "llm_d_epp_flow_control_queue_size"
EPP_POOL_LABEL = "inference_pool"
# Two pickers, both serving (no leader election): one can go (a node drain, a crash, a rollout)
# without taking the gateway's routing with it. With leader election only the leader is Ready, so a
# PDB could never let it be evicted and every drain of its node would hang.
EPP_REPLICAS = 2
EPP_CONTAINER = "epp"
EPP_METRICS_PORT_NAME = "metrics"
# The picker's ext-proc gRPC is TLS with its own certificate (its --secure-serving default), so its
# Service says HTTP/2, as upstream's inferencepool chart does; kubernetes.io/h2c would say cleartext.
EPP_APP_PROTOCOL = "http2"
# A gateway waits this long for the picker's answer to one ext-proc message (the Gateway API
# Inference Extension's Envoy Gateway setup: messageTimeout 1000s). A request flow control holds
# past it is cut by the gateway with an opaque error, so the picker lets it go a margin sooner and
# answers itself.
EXT_PROC_MESSAGE_TIMEOUT_SECONDS = 1000
EXT_PROC_MARGIN_SECONDS = 60
# The longest a response may stream through the gateway (HTTPRoute backendRequest timeout; an
# Envoy-based gateway otherwise cuts every request at 15 s). spec.router.requestTimeoutSeconds.
DEFAULT_ROUTE_TIMEOUT_SECONDS = 3600
# With two pickers, both down is rare; then serving without smart routing beats refusing everything.
DEFAULT_FAILURE_MODE = "FailOpen"
# spec.router.gatewayProvider: the gateways whose own kinds must be told about the picker, as llm-d
# router's llm-d-router-gateway chart (provider.name) does. Istio: a DestinationRule, TLS to the
# picker with its self-signed certificate accepted. GKE: a HealthCheckPolicy of the pool's pods and a
# GCPBackendPolicy, whose timeoutSec is the backend service's timeout (GKE's load balancer cuts a
# response there, not at the HTTPRoute's timeouts).
GATEWAY_PROVIDER_ISTIO = "Istio"
GATEWAY_PROVIDER_GKE = "GKE"
GATEWAY_PROVIDERS = (GATEWAY_PROVIDER_ISTIO, GATEWAY_PROVIDER_GKE)
ISTIO_NETWORKING_API_VERSION = "networking.istio.io/v1"
GKE_NETWORKING_API_VERSION = "networking.gke.io/v1"
# upstream's HealthCheckPolicy: checked every 2 s (GCP's default is 5), so a pod that stops
# answering leaves the pool sooner.
GKE_HEALTH_CHECK_SECONDS = 2

# Multi-node: LeaderWorkerSet (leaderworkerset.x-k8s.io/v1) and the variables it gives each pod.
LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"
LWS_LEADER_ADDRESS_ENV = "LWS_LEADER_ADDRESS"
LWS_WORKER_INDEX_ENV = "LWS_WORKER_INDEX"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
LWS_EXCLUSIVE_TOPOLOGY_ANNOTATION = "leaderworkerset.sigs.k8s.io/exclusive-topology"
# The oldest LWS whose status says which generation it observed (status.observedGeneration, v0.9):
# without it a rollout cannot be told from a stale status.
LWS_MIN_VERSION = "v0.9.0"
# The port rank 0 hosts torch.distributed's rendezvous on (the leader pod's).
DIST_INIT_PORT = 29500

# Probe timing. The startup probe's budget (failureThreshold * period) is spec.startupTimeoutSeconds.
STARTUP_PERIOD_SECONDS = 10
READINESS_PERIOD_SECONDS = 5
LIVENESS_PERIOD_SECONDS = 10
PROBE_TIMEOUT_SECONDS = 5
# After SIGTERM's preStop pause the pod has left the Service's endpoints everywhere (kube-proxy,
# ingress controllers), so the server's 503s while draining reach no client.
PRESTOP_SLEEP_SECONDS = 10
# Grace period = preStop + the server's drain timeout + this margin (uvicorn shutdown, teardown).
TERMINATION_GRACE_MARGIN_SECONDS = 15

# How long a pod may wait Unschedulable before that is a problem: long enough for a cluster
# autoscaler or Karpenter to boot a GPU node (and its driver) for it; until then the status says
# the pod waits for capacity (Progressing), with no Warning.
CAPACITY_WAIT_SECONDS = 900

# Status vocabulary.
PHASE_PENDING = "Pending"
PHASE_PROGRESSING = "Progressing"
PHASE_READY = "Ready"
PHASE_DEGRADED = "Degraded"
PHASE_SCALED_TO_ZERO = "ScaledToZero"
PHASES = (PHASE_PENDING, PHASE_PROGRESSING, PHASE_READY, PHASE_DEGRADED, PHASE_SCALED_TO_ZERO)
CONDITION_READY = "Ready"
CONDITION_PROGRESSING = "Progressing"
CONDITION_DEGRADED = "Degraded"
CONDITION_TYPES = (CONDITION_READY, CONDITION_PROGRESSING, CONDITION_DEGRADED)
