"""The published CRDs of the projects the operator renders objects for, vendored in crds/ with
their versions (crds/README.md says where each comes from), and a validator for their objects.

No API server runs here; what one would check on a custom resource, its CRD's structural schema,
is checked with a real JSON Schema validator after the same conversion the operator's own CRD
goes through (minisgl_operator.schema.to_json_schema), strict: an unknown field is an error, as
``kubectl apply --validate=strict`` makes it. Core kinds go to kubernetes-validate (the official
OpenAPI schemas of Kubernetes), so :func:`validate` covers every object the operator renders.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

from minisgl_operator import schema

CRDS = Path(__file__).resolve().parent / "crds"
K8S_VERSION = kubernetes_validate.latest_version()


@functools.cache
def published() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> that version's openAPIV3Schema, for every served version of every vendored CRD."""
    out = {}
    for path in sorted(CRDS.glob("*/*.yaml")):
        crd = yaml.safe_load(path.read_text())
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            if version.get("served"):
                out[(f"{group}/{version['name']}", kind)] = version["schema"]["openAPIV3Schema"]
    return out


@functools.cache
def _validator(api_version: str, kind: str) -> jsonschema.protocols.Validator:
    converted = schema.to_json_schema(published()[(api_version, kind)], strict=True)
    cls = jsonschema.validators.validator_for(converted, default=jsonschema.Draft4Validator)
    return cls(converted)


def is_custom(obj: dict[str, Any]) -> bool:
    return (obj.get("apiVersion"), obj.get("kind")) in published()


def custom_errors(obj: dict[str, Any]) -> list[str]:
    """Every violation of its published CRD's schema, as 'path: problem' lines."""
    found = _validator(obj["apiVersion"], obj["kind"]).iter_errors(obj)
    return sorted(f"{'.'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}" for e in found)


def validate(obj: dict[str, Any]) -> None:
    """Raise if ``obj`` is not valid for its kind: a vendored CRD's schema, or a current Kubernetes'."""
    if is_custom(obj):
        problems = custom_errors(obj)
        if problems:
            raise ValueError(f"{obj['kind']} {obj['metadata']['name']}: " + "; ".join(problems))
        return
    kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
