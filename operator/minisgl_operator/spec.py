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

import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from . import constants as c
from . import crd, schema, server

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
    access_modes: tuple[str, ...] = c.DEFAULT_CACHE_ACCESS_MODES

    @property
    def operator_created(self) -> bool:
        return self.claim_name is None


@dataclass(frozen=True)
class Autoscaling:
    min_replicas: int
    max_replicas: int
    target_waiting_requests: int


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

    @property
    def pvc_name(self) -> str:
        if self.model_cache is None:
            raise ValueError("no model cache")
        return self.model_cache.claim_name or f"{self.name}{c.PVC_SUFFIX}"

    @property
    def server_command_line(self) -> list[str]:
        return server.command_line(self.model, self.tp, self.port, self.args)

    @property
    def termination_grace_seconds(self) -> int:
        return math.ceil(self.drain_timeout) + c.TERMINATION_GRACE_MARGIN_SECONDS


# --- the CEL rules' twins ---------------------------------------------------------------------


def _check_name(obj: Mapping[str, Any]) -> list[str]:
    name = obj.get("metadata", {}).get("name", "")
    if len(name) > crd.DNS_1035_MAX or not re.fullmatch(crd.DNS_1035_PATTERN, name):
        return [
            f"metadata.name: {name!r} is not a DNS-1035 label (lower case letters, digits and '-', "
            f"starting with a letter, at most {crd.DNS_1035_MAX} characters): it names the Service"
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


CEL_TWINS: dict[str, Callable[[Mapping[str, Any]], list[str]]] = {
    crd.NAME_RULE: _check_name,
    crd.AUTOSCALING_RULE: _check_autoscaling,
    crd.CACHE_RULE: _check_cache,
}


# --- checks no schema can express --------------------------------------------------------------


def _check_gpus(spec: Mapping[str, Any]) -> list[str]:
    problems = []
    for kind in ("requests", "limits"):
        if c.GPU_RESOURCE in spec.get("resources", {}).get(kind, {}):
            problems.append(f"spec.resources.{kind}: do not set {c.GPU_RESOURCE}; spec.tp sets the GPUs per pod")
    return problems


def _parse_server_args(spec: Mapping[str, Any]) -> tuple[list[str], float]:
    extra = list(spec.get("args", []))
    try:
        server.check_extra_args(extra)
        argv = server.command_line(spec["model"], spec.get("tp", c.DEFAULT_TP), spec.get("port", server.DEFAULT_PORT), extra)
        parsed = server.parse_command_line(argv)
    except server.ServerArgsError as exc:
        return [f"spec.args: the server would refuse {extra!r}: {exc}"], server.DEFAULT_DRAIN_TIMEOUT
    return [], float(parsed.drain_timeout)


def parse(obj: Mapping[str, Any], default_image: str = c.DEFAULT_SERVER_IMAGE) -> InferenceService:
    """The InferenceService ``obj`` (a whole object, as kopf or a YAML file gives it), validated."""
    meta = obj.get("metadata") or {}
    if (obj.get("apiVersion"), obj.get("kind")) != (c.API_VERSION, c.KIND):
        raise SpecError([f"not an {c.API_VERSION} {c.KIND}: apiVersion={obj.get('apiVersion')!r} kind={obj.get('kind')!r}"])
    checked = {k: obj[k] for k in ("apiVersion", "kind", "metadata", "spec") if k in obj}
    problems = schema.errors(checked)
    if problems:  # the rest assumes the types are right
        raise SpecError(problems)
    for twin in CEL_TWINS.values():
        problems += twin(obj)
    spec = obj["spec"]
    problems += _check_gpus(spec)
    arg_problems, drain_timeout = _parse_server_args(spec)
    problems += arg_problems
    if problems:
        raise SpecError(problems)

    cache = spec.get("modelCache")
    scaling = spec.get("autoscaling")
    return InferenceService(
        name=meta["name"],
        namespace=meta.get("namespace") or "default",
        uid=meta.get("uid") or PLACEHOLDER_UID,
        model=spec["model"],
        tp=spec.get("tp", c.DEFAULT_TP),
        replicas=spec.get("replicas", c.DEFAULT_REPLICAS),
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
            access_modes=tuple(cache.get("accessModes", c.DEFAULT_CACHE_ACCESS_MODES)),
        ),
        node_selector=dict(spec.get("nodeSelector", {})),
        tolerations=tuple(spec.get("tolerations", [])),
        affinity=spec.get("affinity"),
        autoscaling=None
        if scaling is None
        else Autoscaling(
            min_replicas=scaling.get("minReplicas", 1),
            max_replicas=scaling["maxReplicas"],
            target_waiting_requests=scaling.get("targetWaitingRequests", c.DEFAULT_TARGET_WAITING_REQUESTS),
        ),
    )
