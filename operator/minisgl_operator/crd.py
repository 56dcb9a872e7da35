"""The InferenceService CustomResourceDefinition: its schema is defined here and nowhere else.

The chart's ``crds/`` file is generated from :func:`crd_manifest` (``minisgl-operator crd``), and a
test fails when the two differ. The operator validates specs against the same schema
(``schema.py``), so the API server and the operator accept and reject the same objects.
"""

from __future__ import annotations

from typing import Any

from . import constants, k8s_schema, server

# A Kubernetes resource.Quantity, as the API server's own schemas spell it.
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
    r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
# An RFC 1035 label: what a Service name must be. The InferenceService's name becomes the name of
# its Service, Deployment and pods' label values, so it must be one.
DNS_1035_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
DNS_1035_MAX = 63
# The longest name whose derived names all fit in 63 characters: NAME-epp names the endpoint
# picker's Service (a DNS-1035 label), and KEDA names its HPA keda-hpa-NAME (its webhook refuses a
# ScaledObject whose HPA name exceeds a label value's 63). A multi-node replica is a LeaderWorkerSet
# whose group g runs a StatefulSet NAME-g; its pods carry the label controller-revision-hash=
# NAME-g-HASH (HASH: up to 10 characters), and the LWS webhook allows g up to a million.
KEDA_HPA_PREFIX = "keda-hpa-"
NAME_MAX = DNS_1035_MAX - max(len(constants.EPP_SUFFIX), len(KEDA_HPA_PREFIX))
LWS_MAX_REPLICAS, REVISION_HASH_MAX = 1_000_000, 10
MULTI_NODE_NAME_MAX = DNS_1035_MAX - len(f"-{LWS_MAX_REPLICAS - 1}-") - REVISION_HASH_MAX
# Bounds of the lists, maps and strings the CEL rules read: the API server prices a rule at the
# largest value a request could hold where the schema sets no bound (cel_cost in tests/operator).
# The args rule's regex runs on every item: these keep its worst case under the per-call limit.
ARGS_MAX_ITEMS, ARG_MAX_LENGTH = 64, 512
QUANTITY_MAX_LENGTH = 64
RESOURCE_NAMES_MAX = 32
DNS_1123_SUBDOMAIN_MAX = 253
ACCESS_MODES = ("ReadWriteOnce", "ReadWriteOncePod", "ReadWriteMany", "ReadOnlyMany")  # a PVC's, each at most once
# LoRA adapters: a name is what a request's model field selects the adapter by, so it is safe in an
# OpenAI model name, a URL path and a metric label (no '/': never a Hub id or a path, the forms the
# base model's name takes); a source is a Hub id (it becomes a directory of the model cache, so no
# segment may be '.' or '..') or an absolute path in the pod.
ADAPTERS_MAX_ITEMS = 64
ADAPTER_NAME_MAX = 63
ADAPTER_NAME_PATTERN = r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$"
_HUB_PART = r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?"
ADAPTER_SOURCE_PATTERN = rf"^(/.*|{_HUB_PART}(/{_HUB_PART})?)$"
# A Hub id or a path, for the model or an adapter; bounded so that the API server can price the
# rule comparing adapter names with the model's.
SOURCE_MAX_LENGTH = 1024
MAX_LORA_RANK = 1024

# CEL rules (x-kubernetes-validations): what a JSON schema cannot say. spec.py checks each of them
# again in Python (CEL_TWINS), so the operator and the render command catch the same mistakes.
_MULTI_NODE = f"has(self.spec.gpusPerNode) && (has(self.spec.tp) ? self.spec.tp : {constants.DEFAULT_TP}) > self.spec.gpusPerNode"
NAME_RULE = (
    f"size(self.metadata.name) <= ({_MULTI_NODE} ? {MULTI_NODE_NAME_MAX} : {NAME_MAX}) && "
    f"self.metadata.name.matches('{DNS_1035_PATTERN}')"
)
AUTOSCALING_RULE = "!has(self.minReplicas) || self.minReplicas <= self.maxReplicas"
CACHE_RULE = "!has(self.claimName) || (!has(self.storageClassName) && !has(self.accessModes))"
PER_POD_CACHE_RULE = "!has(self.perPod) || !self.perPod || has(self.size)"
READ_ONLY_CACHE_RULE = "!has(self.readOnly) || !self.readOnly || has(self.claimName)"
RETAIN_RULE = "!has(self.retain) || (has(self.size) && !(has(self.perPod) && self.perPod))"
# A created PVC starts empty: read-only access alone leaves nothing able to write the model.
WRITABLE_CACHE_RULE = "!has(self.size) || !has(self.accessModes) || self.accessModes.exists(m, m != 'ReadOnlyMany')"
GPU_RESOURCES_RULE = (
    f"(!has(self.requests) || !('{constants.GPU_RESOURCE}' in self.requests)) && "
    f"(!has(self.limits) || !('{constants.GPU_RESOURCE}' in self.limits))"
)
# argparse takes any unambiguous prefix of a flag (--t is --tp): refuse every prefix of the owned
# and forbidden flags, not only their full spelling, with or without "=value".
_GUARDED = sorted(flag[2:] for flag in (*server.OWNED_FLAGS, *server.FORBIDDEN_FLAGS))
assert all(name.replace("-", "").isalnum() for name in _GUARDED), "flag names need no regex escaping"


def _prefix_regex(words: list[str]) -> str:
    """A regex of every non-empty prefix of ``words``, as a trie (t(p)?|h(o(s(t)?)?)?): the API
    server prices a regex by its length, and listing each prefix would grow with the square of a name's."""
    parts = []
    for first in sorted({w[0] for w in words}):
        rest = _prefix_regex([w[1:] for w in words if w[0] == first and len(w) > 1])
        parts.append(first + (f"({rest})?" if rest else ""))
    return "|".join(parts)


ARGS_RULE = "self.all(a, !a.matches('^--(" + _prefix_regex(_GUARDED) + ")(=.*)?$'))"
ROLLOUT_RULE = (
    f"has(self.strategy) && self.strategy == '{constants.ROLLOUT_RECREATE}' "
    "? !has(self.maxSurge) && !has(self.maxUnavailable) "
    f": (has(self.maxSurge) ? self.maxSurge : {constants.DEFAULT_MAX_SURGE}) + "
    f"(has(self.maxUnavailable) ? self.maxUnavailable : {constants.DEFAULT_MAX_UNAVAILABLE}) >= 1"
)
PROGRESS_RULE = (
    "!has(self.rollout) || !has(self.rollout.progressDeadlineSeconds) || self.rollout.progressDeadlineSeconds > "
    f"(has(self.startupTimeoutSeconds) ? self.startupTimeoutSeconds : {constants.DEFAULT_STARTUP_TIMEOUT_SECONDS})"
)
# A ReadWriteOnce volume attaches to one node: a PVC the operator creates with it may serve only one
# pod at a time (one replica, no autoscaling beyond one, no surge pod during a rollout).
_SHARED_MODES = "[" + ", ".join(f"'{m}'" for m in constants.SHARED_ACCESS_MODES) + "]"
SHARED_CACHE_RULE = (
    "!has(self.modelCache) || !has(self.modelCache.size) || (has(self.modelCache.perPod) && self.modelCache.perPod) || "
    f"(has(self.modelCache.accessModes) && self.modelCache.accessModes.exists(m, m in {_SHARED_MODES})) || ("
    f"(has(self.replicas) ? self.replicas : {constants.DEFAULT_REPLICAS}) <= 1 && "
    f"(!has(self.gpusPerNode) || (has(self.tp) ? self.tp : {constants.DEFAULT_TP}) <= self.gpusPerNode) && "
    "(!has(self.autoscaling) || self.autoscaling.maxReplicas <= 1) && "
    f"(!has(self.rollout) || (has(self.rollout.strategy) && self.rollout.strategy == '{constants.ROLLOUT_RECREATE}') || "
    "!has(self.rollout.maxSurge) || self.rollout.maxSurge == 0))"
)
# More than 8 ranks cannot share one pod's node: say how many GPUs a node has, and the operator
# spreads the ranks over tp / gpusPerNode pods (a LeaderWorkerSet group).
MULTI_NODE_RULE = f"(has(self.tp) ? self.tp : {constants.DEFAULT_TP}) <= {constants.MAX_SINGLE_POD_TP} || has(self.gpusPerNode)"
# No pod, no metric and no server to queue in: only the router's endpoint picker (flow control)
# holds requests while the InferenceService has no pod, and only KEDA activates from zero on it.
SCALE_TO_ZERO_RULE = (
    "!has(self.autoscaling) || !has(self.autoscaling.minReplicas) || self.autoscaling.minReplicas > 0 || "
    "(has(self.autoscaling.keda) && has(self.router))"
)
# A canary's share needs a route to split; the route's other backend is another InferenceService.
CANARY_GATEWAY_RULE = "!has(self.canary) || has(self.gateway)"
HOSTNAMES_RULE = "!has(self.hostnames) || has(self.gateway)"
# Fields that mean something only with another: refused alone rather than silently ignored.
EXCLUSIVE_TOPOLOGY_RULE = (
    f"!has(self.exclusiveTopology) || (has(self.gpusPerNode) && (has(self.tp) ? self.tp : {constants.DEFAULT_TP}) > self.gpusPerNode)"
)
KEDA_TARGET_RULE = "!has(self.keda) || !has(self.targetWaitingRequests)"
# A request's model field selects an adapter or the base model: an adapter named like the base
# model could never be reached. (A name in spec.args' --served-model-name is the server's parser's
# to refuse: the operator runs it, spec.py.)
ADAPTER_BASE_NAME_RULE = "!has(self.adapters) || self.adapters.all(a, a.name != self.model)"
CANARY_NAME_RULE = (
    "!has(self.spec.router) || !has(self.spec.router.canary) || "
    "self.spec.router.canary.inferenceService != self.metadata.name"
)
# A PVC's spec is immutable but for growing its size: the CRD refuses the edits the API server would
# refuse on the PVC later (a transition rule: it compares with the stored object, oldSelf).
IMMUTABLE_CACHE_RULE = (
    "!has(self.size) || !has(oldSelf.size) || (has(self.perPod) && self.perPod) || (has(oldSelf.perPod) && oldSelf.perPod) || ("
    "(has(self.storageClassName) ? self.storageClassName : '') == (has(oldSelf.storageClassName) ? oldSelf.storageClassName : '') && "
    "(has(self.accessModes) ? self.accessModes : ['ReadWriteOnce']) == "
    "(has(oldSelf.accessModes) ? oldSelf.accessModes : ['ReadWriteOnce']) && "
    "quantity(self.size).compareTo(quantity(oldSelf.size)) >= 0)"
)


def _quantity(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "pattern": QUANTITY_PATTERN,
        "x-kubernetes-int-or-string": True,
    }


def _quantity_map(description: str) -> dict[str, Any]:
    return {
        "type": "object",
        "description": description,
        "maxProperties": RESOURCE_NAMES_MAX,
        "additionalProperties": {**_quantity("A quantity, e.g. 8, 500m, 64Gi."), "maxLength": QUANTITY_MAX_LENGTH},
    }


def _local_object_ref(what: str) -> dict[str, Any]:
    return {
        "type": "object",
        "description": f"The {what} to read.",
        "required": ["name"],
        "properties": {
            "name": {"type": "string", "minLength": 1},
            "optional": {"type": "boolean"},
        },
    }


def _router_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "description": (
            "Prefix- and load-aware routing through the Gateway API Inference Extension: an InferencePool of "
            "the pods, its endpoint picker (llm-d router; image: chart value endpointPicker.image), and, with "
            "gateway, an HTTPRoute on that Gateway. Needs the InferencePool CRD, Gateway API and a gateway "
            "implementation with inference extension support."
        ),
        "properties": {
            "gateway": {
                "type": "object",
                "description": "The Gateway the HTTPRoute attaches to. Without it: pool and picker only (a canary target).",
                "required": ["name"],
                "properties": {
                    "name": {"type": "string", "minLength": 1},
                    "namespace": {"type": "string", "minLength": 1, "description": "Default: this namespace."},
                    "sectionName": {"type": "string", "minLength": 1, "description": "One listener of the Gateway."},
                },
            },
            "hostnames": {
                "type": "array",
                "maxItems": 16,
                "items": {"type": "string", "minLength": 1, "maxLength": 253},
                "description": "Host names the HTTPRoute matches (default: every host of the Gateway).",
            },
            "canary": {
                "type": "object",
                "description": (
                    "Send weight percent of the route's requests to another InferenceService's pool (it needs "
                    "router too, without gateway); the rest stays on this one."
                ),
                "required": ["inferenceService", "weight"],
                "properties": {
                    "inferenceService": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": DNS_1035_MAX,
                        "description": "Another InferenceService of this namespace.",
                    },
                    "weight": {"type": "integer", "minimum": 0, "maximum": 100},
                },
            },
            "failureMode": {
                "type": "string",
                "enum": ["FailClose", "FailOpen"],
                "default": constants.DEFAULT_FAILURE_MODE,
                "description": (
                    "What the gateway does when both endpoint pickers are down: pick a pod itself (FailOpen: "
                    "requests still served, without prefix- and load-aware routing or flow control), or refuse "
                    "every request (FailClose)."
                ),
            },
            "requestTimeoutSeconds": {
                "type": "integer",
                "minimum": 1,
                "maximum": 86400,
                "default": constants.DEFAULT_ROUTE_TIMEOUT_SECONDS,
                "description": (
                    "The longest a response may take through the gateway, streaming included (the HTTPRoute's "
                    "backendRequest timeout; the request timeout adds the time flow control holds a request "
                    "while the service is scaled to zero)."
                ),
            },
            "gatewayProvider": {
                "type": "string",
                "enum": list(constants.GATEWAY_PROVIDERS),
                "description": (
                    "The gateway implementation, for the objects of its own kinds the picker needs (its CRDs must "
                    f"be installed): {constants.GATEWAY_PROVIDER_ISTIO}, a DestinationRule (TLS to the picker, its "
                    f"certificate accepted); {constants.GATEWAY_PROVIDER_GKE}, a HealthCheckPolicy and a "
                    "GCPBackendPolicy (timeoutSec: the HTTPRoute's request timeout) of the InferencePool. "
                    "Unset: none (Envoy Gateway, kgateway, ...)."
                ),
            },
        },
        "x-kubernetes-validations": [
            {"rule": CANARY_GATEWAY_RULE, "message": "canary needs gateway: the route carries the split"},
            {"rule": HOSTNAMES_RULE, "message": "hostnames need gateway: they are the route's"},
        ],
    }


def _keda_schema() -> dict[str, Any]:
    number = {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?$"}
    return {
        "type": "object",
        "description": (
            "Scale with a KEDA ScaledObject (needs KEDA and a Prometheus that scrapes the pods, e.g. the chart's "
            f"PodMonitor) instead of the HPA: {constants.KEDA_METRIC_WAITING} (queued requests per replica), "
            f"{constants.KEDA_METRIC_KV} (mean KV-cache use, 0-1) or {constants.KEDA_METRIC_TTFT} (time to first token, seconds). "
            "Scale-up waits for startupTimeoutSeconds after a pod starts (model load) before counting it."
        ),
        "required": ["prometheusAddress", "target"],
        "properties": {
            "prometheusAddress": {"type": "string", "minLength": 1, "description": "e.g. http://prometheus-operated.monitoring:9090"},
            "metric": {"type": "string", "enum": list(constants.KEDA_METRICS), "default": constants.KEDA_METRIC_WAITING},
            "target": {**number, "description": "The value to hold the metric at, e.g. '4', '0.8', '2.5'."},
            "activationTarget": {
                **number,
                "description": "Above this, KEDA scales up from minReplicas 0 (default 0: any load).",
            },
        },
    }


def _adapters_schema() -> dict[str, Any]:
    return {
        "type": "array",
        "maxItems": ADAPTERS_MAX_ITEMS,
        "description": (
            "LoRA adapters served beside the base model (the server's --lora-modules), each in its own slot of "
            "GPU memory (--max-loras: one per adapter unless spec.args sets it). A request selects one by its "
            "model field; /v1/models lists them. Each is a PEFT adapter directory (adapter_config.json and "
            "adapter_model.safetensors) trained on the base model."
        ),
        # Keyed by name, as the API server checks it: each name once.
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["name"],
        "items": {
            "type": "object",
            "required": ["name", "source"],
            "properties": {
                "name": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": ADAPTER_NAME_MAX,
                    "pattern": ADAPTER_NAME_PATTERN,
                    "description": (
                        "The model name requests select the adapter by: letters, digits, '.', '_' and '-', "
                        "starting and ending with a letter or digit; unique, and not the base model's name."
                    ),
                },
                "source": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": SOURCE_MAX_LENGTH,
                    "pattern": ADAPTER_SOURCE_PATTERN,
                    "description": (
                        "Hugging Face adapter id (org/name; downloaded into the model cache at "
                        f"{constants.ADAPTER_CACHE}/ID before the server starts, with the pods' environment: HF_TOKEN) "
                        f"or an absolute path in the pod, e.g. inside the model cache at {constants.CACHE_MOUNT}."
                    ),
                },
                "rank": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_LORA_RANK,
                    "description": (
                        "The adapter's LoRA rank (r, or its largest per module): the slots are sized for the "
                        "largest rank given (--max-lora-rank; the server's default without one). An adapter "
                        "above the slots' rank is refused when the server starts."
                    ),
                },
            },
        },
    }


def spec_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "description": (
            "A model served by minisgl: GPU pods behind one Service (a Deployment, or a LeaderWorkerSet when "
            "tp spans several nodes), optionally behind the Gateway API Inference Extension's router."
        ),
        "required": ["model"],
        "properties": {
            "model": {
                "type": "string",
                "minLength": 1,
                "maxLength": SOURCE_MAX_LENGTH,
                "description": (
                    "Hugging Face model id (downloaded into the model cache) or a path inside the "
                    f"model cache, which is mounted at {constants.CACHE_MOUNT}."
                ),
            },
            "tp": {
                "type": "integer",
                "enum": list(constants.TP_SIZES),
                "default": constants.DEFAULT_TP,
                "description": (
                    "Tensor-parallel size: GPUs per replica. Up to gpusPerNode (or 8) they share one pod; "
                    "beyond, the replica is a LeaderWorkerSet group of tp / gpusPerNode pods."
                ),
            },
            "gpusPerNode": {
                "type": "integer",
                "enum": list(constants.GPUS_PER_NODE),
                "description": (
                    "GPUs of one node. When tp exceeds it, each replica spans tp / gpusPerNode nodes: a "
                    "LeaderWorkerSet (needs the LWS controller) whose leader pod runs the API and rank 0, and "
                    "whose workers run only their engine ranks."
                ),
            },
            "exclusiveTopology": {
                "type": "string",
                "minLength": 1,
                "description": (
                    "Multi-node only: a node label key (e.g. a rack or NVLink-domain label); each group gets one "
                    "domain of its own, all its pods inside it (LWS exclusive topology)."
                ),
            },
            "router": _router_schema(),
            "adapters": _adapters_schema(),
            "replicas": {
                "type": "integer",
                "format": "int32",
                "minimum": 0,
                "default": constants.DEFAULT_REPLICAS,
                "description": "Pods. Set by the HPA through the scale subresource when autoscaling is on.",
            },
            "image": {
                "type": "string",
                "minLength": 1,
                "description": "Server image; the operator's default (chart value serverImage) when unset.",
            },
            "port": {
                "type": "integer",
                "minimum": 1,
                "maximum": 65535,
                "default": server.DEFAULT_PORT,
                "description": "Port the server listens on and the Service exposes.",
            },
            "args": {
                "type": "array",
                "maxItems": ARGS_MAX_ITEMS,
                "items": {"type": "string", "maxLength": ARG_MAX_LENGTH},
                "x-kubernetes-validations": [
                    {
                        "rule": ARGS_RULE,
                        "message": "spec.args may not set (or abbreviate) "
                        + ", ".join((*server.OWNED_FLAGS, *server.FORBIDDEN_FLAGS)),
                    }
                ],
                "description": (
                    "Extra server flags, e.g. [--max-running-requests, '128']. "
                    "--model, --tp, --host and --port come from the fields above."
                ),
            },
            "resources": {
                "type": "object",
                "description": (
                    "CPU and memory of the server container. GPUs come from tp. Where neither requests "
                    f"nor limits name cpu or memory, {constants.DEFAULT_CPU_PER_GPU} CPUs per GPU and "
                    "memory for the model's weights (from the parameter count its id names) are requested, "
                    "never BestEffort; status.podResources says what was chosen."
                ),
                "x-kubernetes-validations": [
                    {"rule": GPU_RESOURCES_RULE, "message": f"do not set {constants.GPU_RESOURCE}: spec.tp sets the GPUs per pod"}
                ],
                "properties": {
                    "requests": _quantity_map("Requested resources, e.g. {cpu: 8, memory: 64Gi}."),
                    "limits": _quantity_map("Resource limits, e.g. {memory: 96Gi}."),
                },
            },
            "env": {
                "type": "array",
                "description": "Extra environment variables (core/v1 EnvVar), e.g. HF_TOKEN from a Secret.",
                "items": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {
                        "name": {"type": "string", "minLength": 1},
                        "value": {"type": "string"},
                        "valueFrom": k8s_schema.structural("V1EnvVarSource"),
                    },
                },
            },
            "envFrom": {
                "type": "array",
                "description": "Environment from ConfigMaps or Secrets (core/v1 EnvFromSource).",
                "items": {
                    "type": "object",
                    "properties": {
                        "prefix": {"type": "string"},
                        "configMapRef": _local_object_ref("ConfigMap"),
                        "secretRef": _local_object_ref("Secret"),
                    },
                },
            },
            "modelCache": {
                "type": "object",
                "description": (
                    f"Model cache mounted at {constants.CACHE_MOUNT} (HF_HOME lives there): an existing PVC "
                    "(claimName), a PVC the operator creates and every pod shares (size, storageClassName, "
                    "accessModes: ReadWriteMany for more than one pod), or one volume per pod (size + perPod, "
                    "e.g. on node-local storage). Without it the cache is an emptyDir sized for the model "
                    f"(at most {constants.EMPTYDIR_CACHE_SIZE_LIMIT} where its id names no parameter count) "
                    "and every new pod downloads the model again."
                ),
                "oneOf": [{"required": ["claimName"]}, {"required": ["size"]}],
                "properties": {
                    "claimName": {"type": "string", "minLength": 1, "description": "An existing PVC."},
                    "size": {
                        "type": "string",
                        "maxLength": QUANTITY_MAX_LENGTH,
                        "pattern": QUANTITY_PATTERN,
                        "description": "Size of the PVC the operator creates, e.g. 200Gi.",
                    },
                    "storageClassName": {
                        "type": "string",
                        "maxLength": DNS_1123_SUBDOMAIN_MAX,
                        "description": "Storage class of the created PVC.",
                    },
                    "perPod": {
                        "type": "boolean",
                        "description": (
                            "One volume per pod (a generic ephemeral volume of size), created and deleted with the "
                            "pod; fits node-local storage. No volume is shared, so any replica count works."
                        ),
                    },
                    "accessModes": {
                        "type": "array",
                        "maxItems": len(ACCESS_MODES),
                        "description": (
                            "Access modes of the created PVC (default ReadWriteOnce: one pod at a time). "
                            "More than one pod (replicas, autoscaling, a surge pod) needs ReadWriteMany."
                        ),
                        "items": {"type": "string", "enum": list(ACCESS_MODES)},
                    },
                    "readOnly": {
                        "type": "boolean",
                        "description": (
                            "claimName is a pre-filled cache the pods only read (e.g. ReadOnlyMany): mounted read-only, "
                            "with the compiled-kernel caches in /tmp and the Hugging Face Hub offline; Hub adapters "
                            "cannot be downloaded into it."
                        ),
                    },
                    "setOwner": {
                        "type": "boolean",
                        "description": (
                            f"Whether an init container (root, CAP_CHOWN only) makes the top of a shared PVC cache "
                            f"UID {constants.RUN_AS_USER}'s before the first writer starts (default true): Kubernetes "
                            "applies fsGroup only to ReadWriteOnce volumes, so an NFS, EFS or Filestore volume is "
                            "otherwise root's. false where Pod Security 'restricted' forbids it and the storage "
                            f"already gives UID {constants.RUN_AS_USER} the volume (an EFS access point, an NFS export)."
                        ),
                    },
                    "retain": {
                        "type": "boolean",
                        "description": (
                            f"Keep the created PVC when the InferenceService is deleted, renamed or replaced (default "
                            f"{str(constants.DEFAULT_CACHE_RETAIN).lower()}: it holds the downloaded model; a new InferenceService "
                            "of the same name adopts it, another one mounts it with claimName). false: it is deleted "
                            "with the InferenceService."
                        ),
                    },
                },
                "x-kubernetes-validations": [
                    {"rule": RETAIN_RULE, "message": "retain applies only to a PVC the operator creates (size, not perPod)"},
                    {
                        "rule": CACHE_RULE,
                        "message": "storageClassName and accessModes apply only to a PVC the operator creates (size)",
                    },
                    {"rule": PER_POD_CACHE_RULE, "message": "perPod needs size (the size of each pod's volume)"},
                    {"rule": READ_ONLY_CACHE_RULE, "message": "readOnly applies only to an existing PVC (claimName)"},
                    {
                        "rule": WRITABLE_CACHE_RULE,
                        "message": "a created cache cannot be ReadOnlyMany only: nothing could download the model into it",
                    },
                    {
                        "rule": IMMUTABLE_CACHE_RULE,
                        "message": (
                            "the created PVC's storageClassName and accessModes cannot change and its size cannot "
                            "shrink (a PVC's spec is immutable); delete the PVC first or use a new claim"
                        ),
                    },
                ],
            },
            "nodeSelector": {
                "type": "object",
                "additionalProperties": {"type": "string"},
                "description": "Node labels the pods must match, e.g. a GPU product label.",
            },
            "tolerations": {
                "type": "array",
                "description": "Pod tolerations (core/v1 Toleration), e.g. for tainted GPU nodes.",
                "items": {
                    "type": "object",
                    "properties": {
                        "key": {"type": "string"},
                        "operator": {"type": "string", "enum": ["Exists", "Equal"]},
                        "value": {"type": "string"},
                        "effect": {"type": "string", "enum": ["NoSchedule", "PreferNoSchedule", "NoExecute"]},
                        "tolerationSeconds": {"type": "integer", "format": "int64"},
                    },
                },
            },
            "affinity": {
                **k8s_schema.structural("V1Affinity"),
                "description": "Pod affinity (core/v1 Affinity), passed through unchanged.",
            },
            "podTemplate": {
                "type": "object",
                "description": (
                    "A strategic-merge override of the pods the operator renders (core/v1 PodTemplateSpec): "
                    "labels and annotations, imagePullSecrets, runtimeClassName, priorityClassName, "
                    "serviceAccountName, schedulerName, topologySpreadConstraints, extra volumes and mounts, "
                    f"sidecars. Lists merge by their Kubernetes merge key (containers and volumes by name, so "
                    f"containers[name={constants.CONTAINER_NAME}] changes the server container). The selector labels, "
                    "the server's command, args and GPUs stay the operator's."
                ),
                "properties": {
                    "metadata": {
                        "type": "object",
                        "properties": {
                            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                            "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
                        },
                    },
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                },
            },
            "startupTimeoutSeconds": {
                "type": "integer",
                "minimum": constants.STARTUP_PERIOD_SECONDS,
                "default": constants.DEFAULT_STARTUP_TIMEOUT_SECONDS,
                "description": (
                    "How long a pod may take to download and load the model before it counts as stuck and the "
                    "kubelet restarts it (the startup probe on the readiness path). Raise it for very large models."
                ),
            },
            "rollout": {
                "type": "object",
                "description": (
                    "How a spec change replaces the pods. The default (maxSurge 0, maxUnavailable 1) needs no "
                    "spare GPU, so it completes on a full GPU pool; maxSurge 1, maxUnavailable 0 keeps every "
                    "replica serving but needs a free GPU node for the surge pod; Recreate stops all pods first."
                ),
                "properties": {
                    "strategy": {
                        "type": "string",
                        "enum": [constants.ROLLOUT_ROLLING, constants.ROLLOUT_RECREATE],
                        "default": constants.ROLLOUT_ROLLING,
                    },
                    "maxSurge": {
                        "type": "integer",
                        "format": "int32",
                        "minimum": 0,
                        "description": f"Extra pods during a rolling update (default {constants.DEFAULT_MAX_SURGE}).",
                    },
                    "maxUnavailable": {
                        "type": "integer",
                        "format": "int32",
                        "minimum": 0,
                        "description": f"Pods that may be down during a rolling update (default {constants.DEFAULT_MAX_UNAVAILABLE}).",
                    },
                    "progressDeadlineSeconds": {
                        "type": "integer",
                        "format": "int32",
                        "minimum": 1,
                        "description": (
                            "How long a rollout may make no progress before the InferenceService is Degraded "
                            f"(default: startupTimeoutSeconds + {constants.PROGRESS_DEADLINE_MARGIN_SECONDS}). Must exceed "
                            "startupTimeoutSeconds."
                        ),
                    },
                },
                "x-kubernetes-validations": [
                    {
                        "rule": ROLLOUT_RULE,
                        "message": "Recreate takes no maxSurge/maxUnavailable; a rolling update needs maxSurge + maxUnavailable >= 1",
                    }
                ],
            },
            "autoscaling": {
                "type": "object",
                "description": (
                    f"An autoscaling/v2 HPA on the per-pod metric {constants.WAITING_REQUESTS_METRIC} "
                    "(requests queued, not yet running; needs a custom metrics adapter such as "
                    "prometheus-adapter), or with keda a KEDA ScaledObject on a Prometheus query."
                ),
                "required": ["maxReplicas"],
                "properties": {
                    "minReplicas": {
                        "type": "integer",
                        "format": "int32",
                        "minimum": 0,
                        "default": 1,
                        "description": "0 (scale to zero) needs keda and router: the endpoint picker holds requests meanwhile.",
                    },
                    "keda": _keda_schema(),
                    "maxReplicas": {"type": "integer", "format": "int32", "minimum": 1},
                    "targetWaitingRequests": {
                        "type": "integer",
                        "minimum": 1,
                        "description": (
                            f"Average waiting requests per pod that the HPA aims for (default "
                            f"{constants.DEFAULT_TARGET_WAITING_REQUESTS}); with keda, keda.target instead."
                        ),
                    },
                },
                "x-kubernetes-validations": [
                    {
                        "rule": AUTOSCALING_RULE,
                        "message": "minReplicas must not exceed maxReplicas",
                    },
                    {"rule": KEDA_TARGET_RULE, "message": "targetWaitingRequests is the HPA's: with keda, set keda.target"},
                ],
            },
        },
        "x-kubernetes-validations": [
            {
                "rule": SHARED_CACHE_RULE,
                "message": (
                    "a ReadWriteOnce model cache attaches to one node: with more than one pod (replicas, "
                    "autoscaling.maxReplicas, rollout.maxSurge) use accessModes [ReadWriteMany], perPod, or a claimName"
                ),
            },
            {"rule": PROGRESS_RULE, "message": "rollout.progressDeadlineSeconds must exceed startupTimeoutSeconds"},
            {"rule": MULTI_NODE_RULE, "message": f"tp above {constants.MAX_SINGLE_POD_TP} spans several nodes: set gpusPerNode"},
            {
                "rule": ADAPTER_BASE_NAME_RULE,
                "message": "an adapter's name must differ from the base model's (spec.model): requests select either by it",
            },
            {"rule": EXCLUSIVE_TOPOLOGY_RULE, "message": "exclusiveTopology places multi-node groups: it needs tp above gpusPerNode"},
            {
                "rule": SCALE_TO_ZERO_RULE,
                "message": (
                    "autoscaling.minReplicas 0 needs autoscaling.keda and router: only the router's endpoint picker "
                    "holds requests while no pod runs, and only KEDA scales up from zero"
                ),
            },
        ],
    }


def status_schema() -> dict[str, Any]:
    condition = {
        "type": "object",
        "required": ["type", "status"],
        "properties": {
            "type": {"type": "string", "enum": list(constants.CONDITION_TYPES)},
            "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
            "reason": {"type": "string"},
            "message": {"type": "string"},
            "lastTransitionTime": {"type": "string", "format": "date-time"},
            "observedGeneration": {"type": "integer", "format": "int64"},
        },
    }
    return {
        "type": "object",
        "description": "Observed state, written by the operator.",
        "properties": {
            "phase": {"type": "string", "enum": list(constants.PHASES)},
            "replicas": {"type": "integer", "format": "int32", "description": "Pods that exist."},
            "readyReplicas": {"type": "integer", "format": "int32", "description": "Pods that pass /ready."},
            "selector": {"type": "string", "description": "Label selector of the pods (for the scale subresource)."},
            "url": {"type": "string", "description": "In-cluster URL of the Service."},
            "observedGeneration": {"type": "integer", "format": "int64"},
            "podResources": {
                "type": "object",
                "description": (
                    "What each server pod requests of its node (the scheduler needs a node where it fits), "
                    "and on what basis: spec.resources, else defaults sized from the model's parameter count."
                ),
                "properties": {
                    "cpu": {"type": "string"},
                    "memory": {"type": "string"},
                    "ephemeralStorage": {"type": "string"},
                    "gpus": {"type": "integer", "format": "int32"},
                    "basis": {"type": "string"},
                },
            },
            "conditions": {
                "type": "array",
                "items": condition,
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["type"],
            },
        },
    }


def openapi_schema() -> dict[str, Any]:
    """The openAPIV3Schema of v1alpha1."""
    return {
        "type": "object",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            # Only name and generateName may be declared here; both are, so that the API server
            # prices NAME_RULE at this length rather than a request's (before 1.37 it takes the
            # declared length only when both are). It appends 5 characters to a generateName.
            "metadata": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "maxLength": NAME_MAX},
                    "generateName": {"type": "string", "maxLength": NAME_MAX - 5},
                },
            },
            "spec": spec_schema(),
            "status": status_schema(),
        },
        "x-kubernetes-validations": [
            {"rule": CANARY_NAME_RULE, "message": "spec.router.canary must name another InferenceService"},
            {
                "rule": NAME_RULE,
                "message": (
                    "the name must be a DNS-1035 label (lower case letters, digits and '-', starting "
                    f"with a letter) of at most {NAME_MAX} characters, {MULTI_NODE_NAME_MAX} when tp spans "
                    "several nodes: it names the Service, NAME-epp, KEDA's HPA and the LeaderWorkerSet's StatefulSets"
                ),
            }
        ],
    }


PRINTER_COLUMNS = [
    {"name": "Model", "type": "string", "jsonPath": ".spec.model"},
    {"name": "TP", "type": "integer", "jsonPath": ".spec.tp"},
    {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
    {"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas"},
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    # Why it is Degraded (AsExpected when it is not): Unschedulable, CrashLoopBackOff, CacheReadOnly, ...
    {"name": "Reason", "type": "string", "jsonPath": f'.status.conditions[?(@.type=="{constants.CONDITION_DEGRADED}")].reason'},
    {"name": "URL", "type": "string", "jsonPath": ".status.url", "priority": 1},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def crd_manifest() -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": constants.CRD_NAME,
            "labels": {constants.LABEL_PART_OF: constants.APP_NAME},
        },
        "spec": {
            "group": constants.GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": constants.KIND,
                "listKind": f"{constants.KIND}List",
                "plural": constants.PLURAL,
                "singular": constants.SINGULAR,
                "shortNames": list(constants.SHORT_NAMES),
                "categories": list(constants.CATEGORIES),
            },
            "versions": [
                {
                    "name": constants.VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": openapi_schema()},
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.replicas",
                            "statusReplicasPath": ".status.replicas",
                            "labelSelectorPath": ".status.selector",
                        },
                    },
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                }
            ],
        },
    }
