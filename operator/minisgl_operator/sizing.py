"""What a pod asks of its node: CPU, memory and disk (the scheduler places it where they fit).

Where the spec names none, the server's requests and its emptyDir cache are sized from the model:
its id usually names its parameter count ('Qwen/Qwen3-0.6B', 'meta-llama/Llama-3.1-8B-Instruct',
'mistralai/Mixtral-8x7B-v0.1'), from which follow the weights' bytes in host memory while they load
and on disk in the cache. A model whose id names none gets flat amounts, and the status says so.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from . import constants, quantity
from .spec import InferenceService

Obj = dict[str, Any]

# A parameter count in a model id: '0.6B', '8b', '135M', '8x7B' (experts x size); not 'A3B' (the
# active parameters of 'Qwen3-30B-A3B'), nor a version ('3.1').
_PARAMETERS = re.compile(r"(?<![A-Za-z0-9.])(?:(\d+)x)?(\d+(?:\.\d+)?)([BbMm])(?![A-Za-z0-9])")


def model_parameters(model: str) -> Decimal | None:
    """Parameters, in billions, that the model's id names (the largest count in its last part), or None."""
    found = [
        Decimal(experts or 1) * Decimal(count) / (1 if unit in "Bb" else 1000)
        for experts, count, unit in _PARAMETERS.findall(model.rstrip("/").rsplit("/", 1)[-1])
    ]
    return max(found) if found else None


@dataclass(frozen=True)
class Defaults:
    """What a server pod asks for where the spec does not say, and why."""

    cpu: str
    memory: str
    cache_size_limit: str
    basis: str


def defaults(isvc: InferenceService) -> Defaults:
    gpus = isvc.gpus_per_pod
    cpu = str(constants.DEFAULT_CPU_PER_GPU * gpus)
    billions = model_parameters(isvc.model)
    if billions is None:
        memory, cache = f"{constants.DEFAULT_MEMORY_GI_PER_GPU * gpus}Gi", constants.EMPTYDIR_CACHE_SIZE_LIMIT
        basis = (f"{isvc.model} names no parameter count: {memory} of memory and a {cache} emptyDir cache per pod "
                 "(spec.resources, modelCache and podTemplate set others)")  # fmt: skip
        return Defaults(cpu, memory, cache, basis)
    weights_gi = billions * constants.WEIGHT_BYTES_PER_PARAMETER  # 1e9 bytes: a GiB, rounded up
    staging = weights_gi / isvc.nodes * Decimal(str(constants.STAGING_SHARE_OF_WEIGHTS))
    memory = f"{math.ceil(constants.HOST_MEMORY_GI_PER_GPU * gpus + staging)}Gi"
    cache_gi = weights_gi * Decimal(str(constants.CACHE_WEIGHTS_FACTOR)) + constants.KERNEL_CACHE_GI
    cache = f"{math.ceil(cache_gi + constants.ADAPTER_CACHE_GI * len(isvc.hub_adapters))}Gi"
    basis = f"{isvc.model}: {billions.normalize():f}B parameters (from its id), about {math.ceil(weights_gi)}Gi of bf16 weights"
    return Defaults(cpu, memory, cache, basis)


def server_resources(isvc: InferenceService) -> Obj:
    """The server container's resources: spec.resources, the GPUs of spec.tp, and the defaults for
    what spec.resources leaves out."""
    requests = dict(isvc.resources.get("requests", {}))
    limits = dict(isvc.resources.get("limits", {}))
    limits[constants.GPU_RESOURCE] = isvc.gpus_per_pod
    # Never BestEffort: QoS counts only cpu and memory, so a GPU limit alone leaves a pod first in
    # line for eviction. A limit without a request makes the request equal to it, so only a
    # resource named in neither gets the default.
    chosen = defaults(isvc)
    for name, value in (("cpu", chosen.cpu), ("memory", chosen.memory)):
        if name not in requests and name not in limits:
            requests[name] = value
    out: Obj = {"limits": limits}
    if requests:
        out["requests"] = requests
    return out


def summary(isvc: InferenceService, pod_spec: Obj) -> Obj:
    """status.podResources: what the server container of a rendered pod requests, and on what basis."""
    container = next(ctr for ctr in pod_spec["containers"] if ctr["name"] == constants.CONTAINER_NAME)
    requests = (container.get("resources") or {}).get("requests") or {}
    limits = (container.get("resources") or {}).get("limits") or {}
    asked = {key: str(requests.get(name, limits.get(name))) for key, name in
             (("cpu", "cpu"), ("memory", "memory"), ("ephemeralStorage", constants.EPHEMERAL_STORAGE))
             if name in requests or name in limits}  # fmt: skip
    return {**asked, "gpus": isvc.gpus_per_pod, "basis": defaults(isvc).basis}


def reserve_disk(pod_spec: Obj, container_name: str) -> None:
    """Request (and limit) the node disk the pod's disk-backed emptyDirs may fill, plus its logs, on
    ``container_name``, unless its resources already name ephemeral-storage. Without a request the
    scheduler places a 200Gi cache on a node with 50Gi free, and the kubelet evicts it mid-download.
    Computed from the final volumes, so a podTemplate that resizes an emptyDir moves the request."""
    sizes = [
        quantity.parse(v["emptyDir"].get("sizeLimit")) or Decimal(0)
        for v in pod_spec.get("volumes", [])
        if isinstance(v.get("emptyDir"), dict) and v["emptyDir"].get("medium") != "Memory"
    ]
    total = quantity.format_bytes(sum(sizes, quantity.parse(constants.EPHEMERAL_LOG_MARGIN) or Decimal(0)))
    container = next(ctr for ctr in pod_spec["containers"] if ctr["name"] == container_name)
    resources = container.setdefault("resources", {})
    if any(constants.EPHEMERAL_STORAGE in (resources.get(kind) or {}) for kind in ("requests", "limits")):
        return
    for kind in ("requests", "limits"):
        resources.setdefault(kind, {})[constants.EPHEMERAL_STORAGE] = total
