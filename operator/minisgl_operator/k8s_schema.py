"""Core/v1 types the CRD embeds (Affinity, EnvVarSource), and the field names of a PodSpec, read
from the official ``kubernetes`` client's models instead of being written out here.

A field the CRD passes through with ``x-kubernetes-preserve-unknown-fields`` accepts any typo, and
the typo only surfaces when server-side apply of the Deployment fails (an HTTP 500, "field not
declared in schema"). So the small types get a structural schema of their own, and podTemplate.spec
(a whole PodSpec: too large to embed in the CRD) has its field names checked by ``unknown_fields``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

from kubernetes import client

# Fields that are resource quantities although the client types them as plain strings.
_QUANTITY_FIELDS = ("divisor",)
_SCALARS = {"str": {"type": "string"}, "int": {"type": "integer"}, "bool": {"type": "boolean"}, "float": {"type": "number"}}
# Older releases of the client spell them List[...] and Dict[...] (the operator image may hold one).
_LIST = re.compile(r"^[Ll]ist\[(.+)\]$")
_MAP = re.compile(r"^[Dd]ict\[str, (.+)\]$")


def _model(type_name: str) -> Any | None:
    return getattr(client, type_name, None) if type_name.startswith("V1") else None


def structural(type_name: str, field: str = "") -> dict[str, Any]:
    """The structural schema of a client type name ('V1Affinity', 'list[str]', 'dict[str, str]')."""
    if field in _QUANTITY_FIELDS:
        return {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True}
    if type_name in _SCALARS:
        return dict(_SCALARS[type_name])
    if type_name == "object":  # an IntOrString
        return {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True}
    if match := _LIST.match(type_name):
        return {"type": "array", "items": structural(match.group(1))}
    if match := _MAP.match(type_name):
        return {"type": "object", "additionalProperties": structural(match.group(1))}
    model = _model(type_name)
    if model is None:
        raise ValueError(f"no structural schema for the client type {type_name!r}")
    return {
        "type": "object",
        "properties": {model.attribute_map[attr]: structural(t, model.attribute_map[attr]) for attr, t in model.openapi_types.items()},
    }


@functools.cache
def _fields(type_name: str) -> dict[str, str] | None:
    """JSON field name -> client type name of a model, None for a type this check cannot see into."""
    model = _model(type_name)
    if model is None:
        return None
    return {model.attribute_map[attr]: t for attr, t in model.openapi_types.items()}


def unknown_fields(value: Any, type_name: str, path: str) -> list[str]:
    """Every key of ``value`` (a dict in the API's JSON form) that its client type does not declare,
    as 'path.key' strings; free-form maps (labels, annotations) and unknown types are not entered."""
    if match := _LIST.match(type_name):
        if not isinstance(value, list):
            return []
        return [found for i, item in enumerate(value) for found in unknown_fields(item, match.group(1), f"{path}[{i}]")]
    fields = _fields(type_name)
    if fields is None or not isinstance(value, Mapping):
        return []
    found = []
    for key, item in value.items():
        if key not in fields:
            found.append(f"{path}.{key}")
        else:
            found += unknown_fields(item, fields[key], f"{path}.{key}")
    return found
