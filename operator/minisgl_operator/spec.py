"""Parse an InferenceService object into a typed, validated value, or say everything wrong with it.

Three layers of checks, each from its single source:
1. the CRD's JSON schema (``schema.py``): types, enums, ranges, required fields;
2. the CRD's CEL rules, mirrored one for one in ``CEL_TWINS``;
3. the server's own argument parser (``minisgl.server.args`` via ``server.py``): spec.args must
   be flags the server accepts, with values it accepts.
The API server runs 1 and 2 on every write, but the operator runs all three again: the render
command reads files the API server never saw, and only the operator can run 3.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from . import constants, crd, k8s_schema, quantity, schema, server

# The ownerReference uid that `render` prints for a file without metadata.uid: the API server
# assigns the real one when the InferenceService is created.
PLACEHOLDER_UID = "00000000-0000-0000-0000-000000000000"


class SpecError(ValueError):
    """An InferenceService the cluster cannot run; ``problems`` lists every reason."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("; ".join(self.problems))


@dataclass(frozen=True)
class ModelCache:
    claim_name: str | None = None
    size: str | None = None
    storage_class_name: str | None = None
    access_modes: tuple[str, ...] = constants.DEFAULT_CACHE_ACCESS_MODES
    per_pod: bool = False
    retain: bool = constants.DEFAULT_CACHE_RETAIN
    read_only: bool = False
    set_owner: bool = True

    @property
    def takes_owner(self) -> bool:
        """A claim that fsGroup may not cover (created ReadWriteMany, or an existing claim of unknown
        modes) that the pods write: its top directory is made the server user's first."""
        if self.read_only or not self.set_owner or self.per_pod:
            return False
        return self.claim_name is not None or self.shared

    @property
    def operator_created(self) -> bool:
        """A PVC the operator creates once and every pod mounts."""
        return self.claim_name is None and not self.per_pod

    @property
    def shared(self) -> bool:
        """A created PVC that pods on several nodes mount at once."""
        return self.operator_created and any(m in constants.SHARED_ACCESS_MODES for m in self.access_modes)


@dataclass(frozen=True)
class Rollout:
    strategy: str = constants.ROLLOUT_ROLLING
    max_surge: int = constants.DEFAULT_MAX_SURGE
    max_unavailable: int = constants.DEFAULT_MAX_UNAVAILABLE
    progress_deadline_seconds: int | None = None


@dataclass(frozen=True)
class Keda:
    """A KEDA ScaledObject on a Prometheus query instead of the HPA."""

    prometheus_address: str
    metric: str
    target: str
    activation_target: str | None = None


@dataclass(frozen=True)
class Autoscaling:
    min_replicas: int
    max_replicas: int
    target_waiting_requests: int
    keda: Keda | None = None


@dataclass(frozen=True)
class Gateway:
    name: str
    namespace: str | None = None
    section_name: str | None = None


@dataclass(frozen=True)
class Canary:
    inference_service: str
    weight: int


@dataclass(frozen=True)
class Router:
    """Gateway API Inference Extension routing: pool, endpoint picker and (with a gateway) a route."""

    gateway: Gateway | None = None
    hostnames: tuple[str, ...] = ()
    canary: Canary | None = None
    failure_mode: str = constants.DEFAULT_FAILURE_MODE
    request_timeout_seconds: int = constants.DEFAULT_ROUTE_TIMEOUT_SECONDS
    gateway_provider: str | None = None  # one of constants.GATEWAY_PROVIDERS


@dataclass(frozen=True)
class Adapter:
    """A LoRA adapter served beside the base model (spec.adapters[])."""

    name: str
    source: str
    rank: int | None = None

    @property
    def from_hub(self) -> bool:
        """A Hugging Face id, downloaded into the model cache (as spec.model is), not a path in the pod."""
        return not self.source.startswith("/")

    @property
    def path(self) -> str:
        """Where the server reads it: the path, or the Hub adapter's directory in the model cache."""
        return f"{constants.ADAPTER_CACHE}/{self.source}" if self.from_hub else self.source


@dataclass(frozen=True)
class InferenceService:
    name: str
    namespace: str
    uid: str
    model: str
    tp: int
    replicas: int
    image: str
    port: int
    args: tuple[str, ...]
    drain_timeout: float
    resources: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    env: tuple[Mapping[str, Any], ...] = ()
    env_from: tuple[Mapping[str, Any], ...] = ()
    model_cache: ModelCache | None = None
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    affinity: Mapping[str, Any] | None = None
    autoscaling: Autoscaling | None = None
    rollout: Rollout = Rollout()
    startup_timeout_seconds: int = constants.DEFAULT_STARTUP_TIMEOUT_SECONDS
    pod_template: Mapping[str, Any] = field(default_factory=dict)
    gpus_per_node: int | None = None
    exclusive_topology: str | None = None
    router: Router | None = None
    adapters: tuple[Adapter, ...] = ()

    @property
    def nodes(self) -> int:
        """Pods per replica: 1, or tp / gpusPerNode when the ranks span several nodes."""
        if self.gpus_per_node is None or self.tp <= self.gpus_per_node:
            return 1
        return self.tp // self.gpus_per_node

    @property
    def multi_node(self) -> bool:
        return self.nodes > 1

    @property
    def gpus_per_pod(self) -> int:
        return self.tp // self.nodes

    @property
    def progress_deadline_seconds(self) -> int:
        return self.rollout.progress_deadline_seconds or self.startup_timeout_seconds + constants.PROGRESS_DEADLINE_MARGIN_SECONDS

    @property
    def max_pods(self) -> int:
        """The most pods that can exist at once: replicas (or the HPA's maximum) plus a surge pod."""
        most = max(self.replicas, self.autoscaling.max_replicas if self.autoscaling else 0)
        if self.rollout.strategy == constants.ROLLOUT_ROLLING:
            most += self.rollout.max_surge
        return most

    @property
    def loads_model(self) -> bool:
        """A loader Job fills the cache before any server pod starts: a created cache that pods on
        several nodes share (each would download the same files at once) and a Hugging Face id, for
        the model or an adapter."""
        shared = self.model_cache is not None and self.model_cache.shared
        return shared and (not self.model.startswith("/") or bool(self.hub_adapters))

    @property
    def hub_adapters(self) -> tuple[Adapter, ...]:
        """The adapters to download, each source once."""
        return tuple({a.source: a for a in self.adapters if a.from_hub}.values())

    @property
    def pvc_name(self) -> str:
        if self.model_cache is None:
            raise ValueError("no model cache")
        return self.model_cache.claim_name or f"{self.name}{constants.PVC_SUFFIX}"

    @property
    def server_command_line(self) -> list[str]:
        return server.command_line(self.model, self.tp, self.port, [*_adapter_flags(self.adapters, self.args), *self.args])

    @property
    def termination_grace_seconds(self) -> int:
        return constants.PRESTOP_SLEEP_SECONDS + math.ceil(self.drain_timeout) + constants.TERMINATION_GRACE_MARGIN_SECONDS


# --- the CEL rules' twins ---------------------------------------------------------------------


def _check_name(obj: Mapping[str, Any]) -> list[str]:
    name = obj.get("metadata", {}).get("name", "")
    spec = _spec(obj)
    multi_node = "gpusPerNode" in spec and spec.get("tp", constants.DEFAULT_TP) > spec["gpusPerNode"]
    longest = crd.MULTI_NODE_NAME_MAX if multi_node else crd.NAME_MAX
    if len(name) > longest or not re.fullmatch(crd.DNS_1035_PATTERN, name):
        return [
            f"metadata.name: {name!r} is not a DNS-1035 label (lower case letters, digits and '-', "
            f"starting with a letter) of at most {longest} characters"
            + (" (tp spans several nodes)" if multi_node else "")
            + ": it names the Service, NAME-epp, KEDA's HPA and the LeaderWorkerSet's StatefulSets"
        ]
    return []


def _check_autoscaling(obj: Mapping[str, Any]) -> list[str]:
    scaling = obj.get("spec", {}).get("autoscaling")
    if scaling and scaling.get("minReplicas", 1) > scaling["maxReplicas"]:
        return ["spec.autoscaling: minReplicas must not exceed maxReplicas"]
    return []


def _check_cache(obj: Mapping[str, Any]) -> list[str]:
    cache = obj.get("spec", {}).get("modelCache")
    if cache and "claimName" in cache and ("storageClassName" in cache or "accessModes" in cache):
        return [
            "spec.modelCache: storageClassName and accessModes apply only to a PVC the operator creates (size)"
        ]
    return []


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("spec") or {}


def _check_per_pod_cache(obj: Mapping[str, Any]) -> list[str]:
    cache = _spec(obj).get("modelCache") or {}
    if cache.get("perPod") and "size" not in cache:
        return ["spec.modelCache: perPod needs size (the size of each pod's volume)"]
    return []


def _check_read_only_cache(obj: Mapping[str, Any]) -> list[str]:
    cache = _spec(obj).get("modelCache") or {}
    if cache.get("readOnly") and "claimName" not in cache:
        return ["spec.modelCache: readOnly applies only to an existing PVC (claimName)"]
    return []


def _check_retain(obj: Mapping[str, Any]) -> list[str]:
    cache = _spec(obj).get("modelCache") or {}
    if "retain" in cache and ("size" not in cache or cache.get("perPod")):
        return ["spec.modelCache.retain: applies only to a PVC the operator creates (size, not perPod)"]
    return []


def _check_writable_cache(obj: Mapping[str, Any]) -> list[str]:
    cache = _spec(obj).get("modelCache") or {}
    if "size" in cache and "accessModes" in cache and all(m == "ReadOnlyMany" for m in cache["accessModes"]):
        return ["spec.modelCache: a created cache cannot be ReadOnlyMany only: nothing could download the model into it"]
    return []


def _check_gpus(obj: Mapping[str, Any]) -> list[str]:
    problems = []
    for kind in ("requests", "limits"):
        if constants.GPU_RESOURCE in (_spec(obj).get("resources") or {}).get(kind, {}):
            problems.append(f"spec.resources.{kind}: do not set {constants.GPU_RESOURCE}: spec.tp sets the GPUs per pod")
    return problems


def _check_args(obj: Mapping[str, Any]) -> list[str]:
    guarded = (*server.OWNED_FLAGS, *server.FORBIDDEN_FLAGS)
    problems = []
    for arg in _spec(obj).get("args") or []:
        name = arg.split("=", 1)[0]
        if arg.startswith("--") and len(name) >= 3:
            for flag_name in guarded:
                if flag_name.startswith(name):
                    problems.append(f"spec.args: {arg!r} sets (or abbreviates) {flag_name}, which comes from the spec")
    return problems


def _rollout_values(rollout: Mapping[str, Any]) -> tuple[str, int, int]:
    return (
        rollout.get("strategy", constants.ROLLOUT_ROLLING),
        rollout.get("maxSurge", constants.DEFAULT_MAX_SURGE),
        rollout.get("maxUnavailable", constants.DEFAULT_MAX_UNAVAILABLE),
    )


def _check_rollout(obj: Mapping[str, Any]) -> list[str]:
    rollout = _spec(obj).get("rollout")
    if rollout is None:
        return []
    strategy, surge, unavailable = _rollout_values(rollout)
    if strategy == constants.ROLLOUT_RECREATE and ("maxSurge" in rollout or "maxUnavailable" in rollout):
        return ["spec.rollout: Recreate takes no maxSurge/maxUnavailable"]
    if strategy == constants.ROLLOUT_ROLLING and surge + unavailable < 1:
        return ["spec.rollout: a rolling update needs maxSurge + maxUnavailable >= 1"]
    return []


def _check_progress(obj: Mapping[str, Any]) -> list[str]:
    spec = _spec(obj)
    deadline = (spec.get("rollout") or {}).get("progressDeadlineSeconds")
    startup = spec.get("startupTimeoutSeconds", constants.DEFAULT_STARTUP_TIMEOUT_SECONDS)
    if deadline is not None and deadline <= startup:
        return ["spec.rollout: progressDeadlineSeconds must exceed startupTimeoutSeconds"]
    return []


def _check_shared_cache(obj: Mapping[str, Any]) -> list[str]:
    spec = _spec(obj)
    cache = spec.get("modelCache") or {}
    if "size" not in cache or cache.get("perPod"):
        return []
    if any(m in constants.SHARED_ACCESS_MODES for m in cache.get("accessModes", ())):
        return []
    strategy, surge, _ = _rollout_values(spec.get("rollout") or {})
    surging = strategy == constants.ROLLOUT_ROLLING and surge > 0
    several = spec.get("replicas", constants.DEFAULT_REPLICAS) > 1 or (spec.get("autoscaling") or {}).get("maxReplicas", 0) > 1
    several = several or ("gpusPerNode" in spec and spec.get("tp", constants.DEFAULT_TP) > spec["gpusPerNode"])
    if several or surging:
        return [
            "spec.modelCache: a ReadWriteOnce model cache attaches to one node: with more than one pod (replicas, "
            "autoscaling.maxReplicas, rollout.maxSurge, tp over gpusPerNode) use accessModes [ReadWriteMany], perPod, "
            "or a claimName"
        ]
    return []


def _check_multi_node(obj: Mapping[str, Any]) -> list[str]:
    spec = _spec(obj)
    if spec.get("tp", constants.DEFAULT_TP) > constants.MAX_SINGLE_POD_TP and "gpusPerNode" not in spec:
        return [f"spec.tp: {spec['tp']} is above {constants.MAX_SINGLE_POD_TP} and spans several nodes: set spec.gpusPerNode"]
    return []


def _check_scale_to_zero(obj: Mapping[str, Any]) -> list[str]:
    spec = _spec(obj)
    scaling = spec.get("autoscaling") or {}
    if scaling.get("minReplicas", 1) == 0 and not ("keda" in scaling and "router" in spec):
        return [
            "spec.autoscaling.minReplicas: 0 needs autoscaling.keda and router: only the router's endpoint picker "
            "holds requests while no pod runs, and only KEDA scales up from zero"
        ]
    return []


def _check_canary_gateway(obj: Mapping[str, Any]) -> list[str]:
    router = _spec(obj).get("router") or {}
    if "canary" in router and "gateway" not in router:
        return ["spec.router.canary: needs spec.router.gateway (the route carries the split)"]
    return []


def _check_hostnames(obj: Mapping[str, Any]) -> list[str]:
    router = _spec(obj).get("router") or {}
    if "hostnames" in router and "gateway" not in router:
        return ["spec.router.hostnames: need spec.router.gateway (they are the route's)"]
    return []


def _check_exclusive_topology(obj: Mapping[str, Any]) -> list[str]:
    spec = _spec(obj)
    multi_node = "gpusPerNode" in spec and spec.get("tp", constants.DEFAULT_TP) > spec["gpusPerNode"]
    if "exclusiveTopology" in spec and not multi_node:
        return ["spec.exclusiveTopology: places multi-node groups only: it needs tp above gpusPerNode"]
    return []


def _check_keda_target(obj: Mapping[str, Any]) -> list[str]:
    scaling = _spec(obj).get("autoscaling") or {}
    if "keda" in scaling and "targetWaitingRequests" in scaling:
        return ["spec.autoscaling.targetWaitingRequests: the HPA's target; with keda, set keda.target"]
    return []


def _check_adapter_base_name(obj: Mapping[str, Any]) -> list[str]:
    spec = _spec(obj)
    return [
        f"spec.adapters[{i}].name: {a.get('name')!r} is the base model's name (spec.model): requests select either by it"
        for i, a in enumerate(spec.get("adapters") or [])
        if a.get("name") == spec.get("model")
    ]


def _check_canary_name(obj: Mapping[str, Any]) -> list[str]:
    canary = (_spec(obj).get("router") or {}).get("canary") or {}
    if canary.get("inferenceService") == obj.get("metadata", {}).get("name"):
        return ["spec.router.canary.inferenceService: must name another InferenceService, not this one"]
    return []


CEL_TWINS: dict[str, Callable[[Mapping[str, Any]], list[str]]] = {
    crd.NAME_RULE: _check_name,
    crd.AUTOSCALING_RULE: _check_autoscaling,
    crd.CACHE_RULE: _check_cache,
    crd.PER_POD_CACHE_RULE: _check_per_pod_cache,
    crd.READ_ONLY_CACHE_RULE: _check_read_only_cache,
    crd.RETAIN_RULE: _check_retain,
    crd.WRITABLE_CACHE_RULE: _check_writable_cache,
    crd.GPU_RESOURCES_RULE: _check_gpus,
    crd.ARGS_RULE: _check_args,
    crd.ROLLOUT_RULE: _check_rollout,
    crd.PROGRESS_RULE: _check_progress,
    crd.SHARED_CACHE_RULE: _check_shared_cache,
    crd.MULTI_NODE_RULE: _check_multi_node,
    crd.SCALE_TO_ZERO_RULE: _check_scale_to_zero,
    crd.CANARY_GATEWAY_RULE: _check_canary_gateway,
    crd.CANARY_NAME_RULE: _check_canary_name,
    crd.HOSTNAMES_RULE: _check_hostnames,
    crd.EXCLUSIVE_TOPOLOGY_RULE: _check_exclusive_topology,
    crd.KEDA_TARGET_RULE: _check_keda_target,
    crd.ADAPTER_BASE_NAME_RULE: _check_adapter_base_name,
}


def check_cache_transition(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> list[str]:
    """The twin of the transition rule IMMUTABLE_CACHE_RULE: ``old`` and ``new`` are spec.modelCache
    before and after an edit. The reconciler runs it against the PVC that exists (``pvc_as_cache``)."""
    if not old or not new or "size" not in old or "size" not in new or old.get("perPod") or new.get("perPod"):
        return []
    changed = []
    if old.get("storageClassName", "") != new.get("storageClassName", ""):
        changed.append("storageClassName")
    default = list(constants.DEFAULT_CACHE_ACCESS_MODES)
    if list(old.get("accessModes", default)) != list(new.get("accessModes", default)):
        changed.append("accessModes")
    before, after = quantity.parse(old["size"]), quantity.parse(new["size"])
    if before is not None and after is not None and after < before:
        changed.append("size (it shrank)")
    if changed:
        return [
            f"spec.modelCache: {', '.join(changed)} of the created PVC cannot change (a PVC's spec is immutable "
            "but for growing its size); delete the PVC first or use a new claim"
        ]
    return []


TRANSITION_TWINS: dict[str, Callable[[Mapping[str, Any] | None, Mapping[str, Any] | None], list[str]]] = {
    crd.IMMUTABLE_CACHE_RULE: check_cache_transition,
}


# --- checks no schema can express --------------------------------------------------------------

# The server container's fields that podTemplate may not override: they come from the spec.
POD_TEMPLATE_OWNED_CONTAINER_FIELDS = ("command", "args")


def _check_pod_template(spec: Mapping[str, Any]) -> list[str]:
    # The CRD keeps podTemplate.spec open (a whole PodSpec is too large to embed), so a misspelt field
    # is caught here: server-side apply of the Deployment would fail on it with an HTTP 500.
    pod_spec = (spec.get("podTemplate") or {}).get("spec") or {}
    problems = [
        f"{path}: unknown field (not in core/v1 PodSpec)"
        for path in k8s_schema.unknown_fields(pod_spec, "V1PodSpec", "spec.podTemplate.spec")
    ]
    for container in ((spec.get("podTemplate") or {}).get("spec") or {}).get("containers") or []:
        if not isinstance(container, Mapping) or container.get("name") != constants.CONTAINER_NAME:
            continue
        for key in POD_TEMPLATE_OWNED_CONTAINER_FIELDS:
            if key in container:
                problems.append(
                    f"spec.podTemplate: the {constants.CONTAINER_NAME} container's {key} comes from the spec (model, tp, port, args)"
                )
        for kind in ("requests", "limits"):
            if constants.GPU_RESOURCE in ((container.get("resources") or {}).get(kind) or {}):
                problems.append(f"spec.podTemplate: do not set {constants.GPU_RESOURCE}: spec.tp sets the GPUs per pod")
    return problems


def _check_read_only_adapters(spec: Mapping[str, Any]) -> list[str]:
    if (spec.get("modelCache") or {}).get("readOnly") and any(a.from_hub for a in _adapters(spec)):
        return ["spec.adapters: a Hub adapter is downloaded into the model cache, which modelCache.readOnly makes "
                "read-only: put it in the cache beforehand and name its path"]
    return []


def _adapter_flags(adapters: tuple[Adapter, ...], args: tuple[str, ...] | list[str]) -> list[str]:
    """--lora-modules, and slots for every adapter (--max-loras) of the largest rank given
    (--max-lora-rank), each unless spec.args sets it (e.g. spare slots for runtime loading)."""
    set_by_args = server.fields_set_by(list(args)) if adapters else set()
    ranks = [a.rank for a in adapters if a.rank is not None]
    return server.adapter_flags(
        [(a.name, a.path) for a in adapters],
        None if "max_loras" in set_by_args else len(adapters),
        None if "max_lora_rank" in set_by_args or not ranks else max(ranks),
    )


def _adapters(spec: Mapping[str, Any]) -> tuple[Adapter, ...]:
    return tuple(Adapter(a["name"], a["source"], a.get("rank")) for a in spec.get("adapters") or [])


def _slot_problems(adapters: tuple[Adapter, ...], parsed: Any) -> list[str]:
    """spec.args' own --max-lora-rank below a rank hint of spec.adapters: the server would fail at its
    start, loading them (a crash loop, not a refusal). Too few --max-loras its parser refuses."""
    problems = []
    for i, a in enumerate(adapters):
        if a.rank is not None and a.rank > parsed.max_lora_rank:
            problems.append(
                f"spec.adapters[{i}].rank: {a.rank} is above spec.args' --max-lora-rank {parsed.max_lora_rank}"
            )
    return problems


def _parse_server_args(spec: Mapping[str, Any]) -> tuple[list[str], float]:
    extra = list(spec.get("args", []))
    adapters = _adapters(spec)
    try:
        server.check_extra_args(extra)
        argv = server.command_line(spec["model"], spec.get("tp", constants.DEFAULT_TP), spec.get("port", server.DEFAULT_PORT),
                                   [*_adapter_flags(adapters, extra), *extra])
        parsed = server.parse_command_line(argv)
    except server.ServerArgsError as exc:
        if adapters and server.FLAG_LORA_MODULES in str(exc):  # e.g. a name in --served-model-name
            return [f"spec.adapters: the server would refuse them: {exc}"], server.DEFAULT_DRAIN_TIMEOUT
        return [f"spec.args: the server would refuse {extra!r}: {exc}"], server.DEFAULT_DRAIN_TIMEOUT
    return _slot_problems(adapters, parsed), float(parsed.drain_timeout)


def parse(obj: Mapping[str, Any], default_image: str = constants.DEFAULT_SERVER_IMAGE) -> InferenceService:
    """The InferenceService ``obj`` (a whole object, as kopf or a YAML file gives it), validated."""
    meta = obj.get("metadata") or {}
    if (obj.get("apiVersion"), obj.get("kind")) != (constants.API_VERSION, constants.KIND):
        raise SpecError([f"not an {constants.API_VERSION} {constants.KIND}: apiVersion={obj.get('apiVersion')!r} kind={obj.get('kind')!r}"])
    checked = {k: obj[k] for k in ("apiVersion", "kind", "metadata", "spec") if k in obj}
    problems = schema.errors(checked)
    if problems:  # the rest assumes the types are right
        raise SpecError(problems)
    for twin in CEL_TWINS.values():
        problems += twin(obj)
    spec = obj["spec"]
    problems += _check_pod_template(spec)
    problems += _check_read_only_adapters(spec)
    arg_problems, drain_timeout = _parse_server_args(spec)
    problems += arg_problems
    if problems:
        raise SpecError(problems)

    cache = spec.get("modelCache")
    scaling = spec.get("autoscaling")
    rollout = spec.get("rollout") or {}
    keda = (scaling or {}).get("keda")
    router = spec.get("router")
    return InferenceService(
        name=meta["name"],
        namespace=meta.get("namespace") or "default",
        uid=meta.get("uid") or PLACEHOLDER_UID,
        model=spec["model"],
        tp=spec.get("tp", constants.DEFAULT_TP),
        replicas=spec.get("replicas", constants.DEFAULT_REPLICAS),
        image=spec.get("image") or default_image,
        port=spec.get("port", server.DEFAULT_PORT),
        args=tuple(spec.get("args", [])),
        drain_timeout=drain_timeout,
        resources={k: dict(v) for k, v in spec.get("resources", {}).items()},
        env=tuple(spec.get("env", [])),
        env_from=tuple(spec.get("envFrom", [])),
        model_cache=None
        if cache is None
        else ModelCache(
            claim_name=cache.get("claimName"),
            size=cache.get("size"),
            storage_class_name=cache.get("storageClassName"),
            access_modes=tuple(cache.get("accessModes", constants.DEFAULT_CACHE_ACCESS_MODES)),
            per_pod=bool(cache.get("perPod", False)),
            retain=bool(cache.get("retain", constants.DEFAULT_CACHE_RETAIN)),
            read_only=bool(cache.get("readOnly", False)),
            set_owner=bool(cache.get("setOwner", True)),
        ),
        node_selector=dict(spec.get("nodeSelector", {})),
        tolerations=tuple(spec.get("tolerations", [])),
        affinity=spec.get("affinity"),
        autoscaling=None
        if scaling is None
        else Autoscaling(
            min_replicas=scaling.get("minReplicas", 1),
            max_replicas=scaling["maxReplicas"],
            target_waiting_requests=scaling.get("targetWaitingRequests", constants.DEFAULT_TARGET_WAITING_REQUESTS),
            keda=None
            if keda is None
            else Keda(
                prometheus_address=keda["prometheusAddress"],
                metric=keda.get("metric", constants.KEDA_METRIC_WAITING),
                target=keda["target"],
                activation_target=keda.get("activationTarget"),
            ),
        ),
        rollout=Rollout(
            strategy=rollout.get("strategy", constants.ROLLOUT_ROLLING),
            max_surge=rollout.get("maxSurge", constants.DEFAULT_MAX_SURGE),
            max_unavailable=rollout.get("maxUnavailable", constants.DEFAULT_MAX_UNAVAILABLE),
            progress_deadline_seconds=rollout.get("progressDeadlineSeconds"),
        ),
        startup_timeout_seconds=spec.get("startupTimeoutSeconds", constants.DEFAULT_STARTUP_TIMEOUT_SECONDS),
        pod_template=copy.deepcopy(spec.get("podTemplate") or {}),
        gpus_per_node=spec.get("gpusPerNode"),
        exclusive_topology=spec.get("exclusiveTopology"),
        router=None if router is None else _router(router),
        adapters=_adapters(spec),
    )


def _router(router: Mapping[str, Any]) -> Router:
    gateway, canary = router.get("gateway"), router.get("canary")
    return Router(
        gateway=None
        if gateway is None
        else Gateway(name=gateway["name"], namespace=gateway.get("namespace"), section_name=gateway.get("sectionName")),
        hostnames=tuple(router.get("hostnames", ())),
        canary=None if canary is None else Canary(canary["inferenceService"], canary["weight"]),
        failure_mode=router.get("failureMode", constants.DEFAULT_FAILURE_MODE),
        request_timeout_seconds=router.get("requestTimeoutSeconds", constants.DEFAULT_ROUTE_TIMEOUT_SECONDS),
        gateway_provider=router.get("gatewayProvider"),
    )
