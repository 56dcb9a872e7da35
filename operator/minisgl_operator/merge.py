"""Lists keyed like the Kubernetes API keys them: the podTemplate override and the drift check.

The API merges some lists item by item, by a key (``patchMergeKey`` in its schema, ``x-kubernetes-
list-map-keys`` for server-side apply): containers and volumes by name, volume mounts by path. A
strategic-merge override and a drift check must key them the same way, or an override replaces
the operator's whole container list, and a mutating webhook that appends an env var or a sidecar
reads as drift on every resync. No maintained Python package implements strategic merge (it lives
in Go, in the API server and kubectl), so the few pod-spec keys are listed here.
"""

from __future__ import annotations

import copy
from typing import Any

# List field name -> merge key, for the lists of a pod template (core/v1 PodSpec, Container).
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "ports": "containerPort",
    "imagePullSecrets": "name",
    "topologySpreadConstraints": "topologyKey",
    "hostAliases": "ip",
    "resourceClaims": "name",
    "readinessGates": "conditionType",
}


def keyed(field: str, items: list[Any]) -> str | None:
    """The merge key of list ``field``, when every item carries it (else the list is atomic)."""
    key = MERGE_KEYS.get(field)
    if key is None or not all(isinstance(item, dict) and key in item for item in items):
        return None
    return key


def strategic_merge(base: Any, override: Any, field: str = "") -> Any:
    """``override`` merged into a copy of ``base``: maps merge key by key, keyed lists item by item
    (an override item with a new key is appended), any other value is replaced."""
    if isinstance(base, dict) and isinstance(override, dict):
        merged = copy.deepcopy(base)
        for name, value in override.items():
            merged[name] = strategic_merge(base[name], value, name) if name in base else copy.deepcopy(value)
        return merged
    if isinstance(base, list) and isinstance(override, list):
        key = keyed(field, base + override)
        if key is None:
            return copy.deepcopy(override)
        merged_list = copy.deepcopy(base)
        index = {item[key]: i for i, item in enumerate(merged_list)}
        for item in override:
            if item[key] in index:
                merged_list[index[item[key]]] = strategic_merge(merged_list[index[item[key]]], item, field)
            else:
                merged_list.append(copy.deepcopy(item))
        return merged_list
    return copy.deepcopy(override)
