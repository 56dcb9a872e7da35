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

# Tensor-parallel sizes a pod can run with (one GPU per rank, all ranks in one pod).
TP_SIZES = (1, 2, 4, 8)

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
# Environment of the server container. Downloads (HF_HOME) and FlashInfer's JIT-compiled kernels
# go to the model cache volume, so a restarted pod finds both; HOME (torch, triton caches) goes to
# the /tmp emptyDir because the root filesystem is read-only.
CACHE_ENV = {
    "HF_HOME": f"{CACHE_MOUNT}/huggingface",
    "FLASHINFER_WORKSPACE_BASE": f"{CACHE_MOUNT}/flashinfer",
    "HOME": TMP_MOUNT,
}

# Without modelCache the weights go to an emptyDir: bounded, so a large model cannot fill the
# node's disk unnoticed (the kubelet evicts the pod instead). podTemplate can raise it.
EMPTYDIR_CACHE_SIZE_LIMIT = "200Gi"
TMP_SIZE_LIMIT = "16Gi"

# A GPU pod with no CPU or memory request is BestEffort (evicted first under node pressure): these
# requests per GPU apply where spec.resources sets none.
DEFAULT_CPU_PER_GPU = 4
DEFAULT_MEMORY_GI_PER_GPU = 32

# The non-root user the server image runs as (Dockerfile: USER 10001:10001).
RUN_AS_USER = 10001

# GPUs come from spec.tp, never from spec.resources.
GPU_RESOURCE = "nvidia.com/gpu"

# Autoscaling: the per-pod gauge the server exports on its metrics path, read through the
# custom metrics API (needs a metrics adapter such as prometheus-adapter).
WAITING_REQUESTS_METRIC = "minisgl_num_requests_waiting"

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
