"""Validate objects against the CRD's structural schema with a real JSON Schema validator.

A CRD schema is OpenAPI v3.0 with Kubernetes extensions; JSON Schema needs a few of them spelled
out: ``x-kubernetes-int-or-string`` is the ``anyOf`` next to it, ``x-kubernetes-preserve-unknown-
fields`` allows unknown keys, and every other ``x-kubernetes-*`` key (CEL rules, list types) is not
JSON Schema at all. The CEL rules are mirrored in Python in ``spec.py``; a list keyed by
``x-kubernetes-list-map-keys`` is checked for repeated keys here (``duplicate_keys``).

With ``strict`` (the default), objects reject unknown fields, as ``kubectl apply`` does with its
default ``--validate=strict``; the API server would otherwise prune them silently.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import jsonschema

from . import crd


def to_json_schema(node: dict[str, Any], *, strict: bool = True, root: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key.startswith("x-kubernetes-"):
            continue
        if key == "nullable":
            continue
        if key == "properties":
            # A root's metadata schema declares only name and generateName: the rest of ObjectMeta
            # is the API server's own, never unknown.
            out[key] = {
                name: to_json_schema(sub, strict=strict and not (root and name == "metadata"), root=False)
                for name, sub in value.items()
            }
        elif key in ("additionalProperties", "items", "not") and isinstance(value, dict):
            out[key] = to_json_schema(value, strict=strict, root=False)
        elif key in ("anyOf", "oneOf", "allOf"):
            out[key] = [to_json_schema(sub, strict=strict, root=False) for sub in value]
        else:
            out[key] = value
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    if (
        strict
        and node.get("type") == "object"
        and "properties" in node
        and "additionalProperties" not in node
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def validator(*, strict: bool = True) -> jsonschema.protocols.Validator:
    schema = to_json_schema(crd.openapi_schema(), strict=strict)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft4Validator)
    cls.check_schema(schema)
    return cls(schema)


def _path(error: jsonschema.ValidationError) -> str:
    parts = [str(p) if not isinstance(p, int) else f"[{p}]" for p in error.absolute_path]
    return ".".join(parts).replace(".[", "[") or "<root>"


def _message(error: jsonschema.ValidationError) -> str:
    if error.validator == "oneOf":
        choices = [" + ".join(branch.get("required", [])) for branch in error.validator_value]
        return f"{_path(error)}: set exactly one of {', '.join(choices)}"
    if error.validator == "additionalProperties":
        return f"{_path(error)}: {error.message} (unknown field)"
    return f"{_path(error)}: {error.message}"


def errors(obj: dict[str, Any], *, strict: bool = True) -> list[str]:
    """Every schema violation of an InferenceService object, as 'path: problem' lines."""
    found: Iterable[jsonschema.ValidationError] = validator(strict=strict).iter_errors(obj)
    return sorted([*(_message(e) for e in found), *duplicate_keys(crd.openapi_schema(), obj)])


def duplicate_keys(node: dict[str, Any], value: Any, path: str = "") -> list[str]:
    """Items of an ``x-kubernetes-list-type: map`` list that repeat another's keys
    (x-kubernetes-list-map-keys), as the API server refuses them (Duplicate value): JSON Schema's
    uniqueItems compares whole items. Parts of ``value`` not of the schema's shape are skipped."""
    problems: list[str] = []
    if isinstance(value, dict):
        for name, sub in (node.get("properties") or {}).items():
            if name in value:
                problems += duplicate_keys(sub, value[name], f"{path}.{name}" if path else name)
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            for name, item in value.items():
                problems += duplicate_keys(extra, item, f"{path}.{name}" if path else name)
    if isinstance(value, list) and isinstance(node.get("items"), dict):
        keys = node.get("x-kubernetes-list-map-keys") if node.get("x-kubernetes-list-type") == "map" else None
        seen: set[str] = set()
        for i, item in enumerate(value):
            if keys is not None and isinstance(item, dict):
                key = ", ".join(f"{k}={item.get(k)!r}" for k in keys)
                if key in seen:
                    problems.append(f"{path}[{i}]: Duplicate value: {key} (each {' + '.join(keys)} at most once)")
                seen.add(key)
            problems += duplicate_keys(node["items"], item, f"{path}[{i}]")
    return problems


def cel_rules_at() -> list[tuple[tuple[str, ...], str]]:
    """Every CEL rule (x-kubernetes-validations) in the schema, with the path of the field it is
    attached to (its ``self``): ``(("spec", "rollout"), rule)``; each has a twin in spec.py."""
    rules: list[tuple[tuple[str, ...], str]] = []

    def walk(node: Any, path: tuple[str, ...]) -> None:
        if not isinstance(node, dict):
            return
        for rule in node.get("x-kubernetes-validations", []):
            rules.append((path, rule["rule"]))
        for name, child in (node.get("properties") or {}).items():
            walk(child, (*path, name))

    walk(crd.openapi_schema(), ())
    return rules


def cel_rules() -> list[str]:
    return [rule for _, rule in cel_rules_at()]
