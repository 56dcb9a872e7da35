"""Nodes of realistic shapes and the scheduler's resource fit, as the fake API plays them.

A node offers its *allocatable* resources, capacity less what the provider reserves for the system.
The reservations here are GKE's (cloud.google.com/kubernetes-engine/docs/concepts/plan-node-sizes,
"Node allocatable resources" and "Local ephemeral storage reservation"): CPU 6% of the first core,
1% of the next, 0.5% of the next two, 0.25% above four; memory 25% of the first 4 GiB, 20% of the next
4, 10% of the next 8, 6% of the next 112, 2% above 128, plus a 100 MiB eviction threshold; the boot
disk min(50%, 6 GiB + 35%, 100 GiB) plus a 10% eviction threshold. EKS's and AKS's are of the same
order. The page's own example, a 4-vCPU node with a 100 GB boot disk, shows 3920m CPU and 43.8 GiB of
ephemeral-storage allocatable. System DaemonSets (device plugin, kube-proxy, log and metrics agents)
then take their requests from it: DAEMON_REQUESTS.

The fit is kube-scheduler's NodeResourcesFit (kubernetes ``pkg/scheduler/framework/plugins/noderesources/
fit.go``, ``computePodResourceRequest``): a pod asks the sum of its containers' requests (a limit
where the request is unset) or the largest init container's, whichever is more; an emptyDir in memory
asks nothing of the disk; and it fits a node where every resource asked is at most allocatable less
what the pods already there ask. The shapes are those of common GPU nodes: 4 vCPU/16 GiB/1 GPU
(g5.xlarge, g6.xlarge, g2-standard-4), 8/32/1 (g5.2xlarge, g2-standard-8), 48/192/4 (g5.12xlarge,
g2-standard-48), 96/1152/8 (p4d.24xlarge, a2-ultragpu-8g).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from minisgl_operator import constants, quantity

Obj = dict[str, Any]
GI = Decimal(2**30)
RESOURCES = ("cpu", "memory", constants.EPHEMERAL_STORAGE)
DAEMON_REQUESTS = {"cpu": Decimal("0.4"), "memory": Decimal("0.75") * GI, constants.EPHEMERAL_STORAGE: Decimal(0)}


@dataclass(frozen=True)
class Shape:
    cpus: int
    memory_gi: int
    gpus: int
    disk_gi: float


SHAPES = {
    "4vcpu-16gi-1gpu": Shape(4, 16, 1, 100),
    "8vcpu-32gi-1gpu": Shape(8, 32, 1, 200),
    "48vcpu-192gi-4gpu": Shape(48, 192, 4, 500),
    "96vcpu-1152gi-8gpu": Shape(96, 1152, 8, 2000),
}


def _tiered(amount: Decimal, tiers: list[tuple[Decimal | None, Decimal]]) -> Decimal:
    """Sum of each tier's share of ``amount``: [(tier size or None for the rest, fraction)]."""
    reserved, left = Decimal(0), amount
    for size, fraction in tiers:
        part = left if size is None else min(left, size)
        reserved += part * fraction
        left -= part
    return reserved


def allocatable(shape: Shape) -> dict[str, Decimal]:
    """What the scheduler may give the node's pods, less the system DaemonSets' requests."""
    cpu = Decimal(shape.cpus)
    cpu -= _tiered(cpu, [(Decimal(1), Decimal("0.06")), (Decimal(1), Decimal("0.01")), (Decimal(2), Decimal("0.005")),
                         (None, Decimal("0.0025"))])  # fmt: skip
    memory = shape.memory_gi * GI
    memory -= _tiered(memory, [(4 * GI, Decimal("0.25")), (4 * GI, Decimal("0.20")), (8 * GI, Decimal("0.10")),
                               (112 * GI, Decimal("0.06")), (None, Decimal("0.02"))]) + 100 * 2**20  # fmt: skip
    disk = Decimal(str(shape.disk_gi)) * GI
    disk -= min(disk / 2, 6 * GI + disk * Decimal("0.35"), 100 * GI) + disk / 10
    free = {"cpu": cpu, "memory": memory, constants.EPHEMERAL_STORAGE: disk}
    return {name: free[name] - DAEMON_REQUESTS[name] for name in RESOURCES}


def _container_requests(container: Obj) -> dict[str, Decimal]:
    resources = container.get("resources") or {}
    requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
    return {name: quantity.parse(requests.get(name, limits.get(name, 0))) or Decimal(0) for name in RESOURCES}


def pod_requests(pod_spec: Obj) -> dict[str, Decimal]:
    """NodeResourcesFit's request of a pod: max(sum of its containers, largest init container), per resource."""
    total = {name: Decimal(0) for name in RESOURCES}
    for container in pod_spec.get("containers", []):
        for name, value in _container_requests(container).items():
            total[name] += value
    for container in pod_spec.get("initContainers", []):
        for name, value in _container_requests(container).items():
            total[name] = max(total[name], value)
    return total


def insufficient(free: dict[str, Decimal], pod_spec: Obj) -> list[str]:
    """The resources the pod asks more of than ``free`` holds, named as the scheduler names them."""
    asked = pod_requests(pod_spec)
    return [name for name in RESOURCES if asked[name] > free[name]]


def visible_gpus(container: Obj, image_env: dict[str, str], node_gpus: int) -> int:
    """The GPUs a container sees through the NVIDIA container runtime (NVIDIA container toolkit,
    "Specialized Configurations with Docker", NVIDIA_VISIBLE_DEVICES): the device plugin sets the
    variable to the GPUs it allocated to a container that asks for some; otherwise the container's
    environment, over its image's, decides: 'all' is every GPU of the node, 'none', 'void' or unset none."""
    asked = int(((container.get("resources") or {}).get("limits") or {}).get(constants.GPU_RESOURCE, 0))
    if asked:
        return asked
    env = {**image_env, **{e["name"]: e.get("value", "") for e in container.get("env") or []}}
    return node_gpus if env.get("NVIDIA_VISIBLE_DEVICES") == "all" else 0
