"""What a pod asks of its node: CPU, memory and disk (the scheduler places it where they fit)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from . import constants, quantity

Obj = dict[str, Any]


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
