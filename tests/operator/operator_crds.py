"""The published CRDs of the projects the operator renders objects for, vendored in crds/ with
their versions (crds/README.md says where each comes from), and a validator for their objects.

No API server runs here; what one would check on a custom resource, its CRD's structural schema,
is checked with a real JSON Schema validator after the same conversion the operator's own CRD
goes through (minisgl_operator.schema.to_json_schema), strict: an unknown field is an error, as
``kubectl apply --validate=strict`` makes it; then the CRD's CEL rules (x-kubernetes-validations)
run in cel-python on the object with the schema's defaults filled in, as the API server runs them.
Core kinds go to kubernetes-validate (the official OpenAPI schemas of Kubernetes), so
:func:`validate` covers every object the operator renders. The chart's own CRD (the
InferenceService's, generated from minisgl_operator.crd) is read the same way, so that the fake API
server refuses an InferenceService as a real one would (operator_fake_kube.submit_inferenceservice).
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
CHART_CRDS = Path(__file__).resolve().parents[2] / "charts" / "minisgl-operator" / "crds"
K8S_VERSION = kubernetes_validate.latest_version()


@functools.cache
def published() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> that version's openAPIV3Schema, for every served version of every vendored CRD."""
    out = {}
    for path in [*sorted(CRDS.glob("*/*.yaml")), *sorted(CHART_CRDS.glob("*.yaml"))]:
        # A release may publish all its CRDs in one file of many documents (Istio's crd-all.gen.yaml).
        for crd in filter(None, yaml.load_all(path.read_text(), Loader=yaml.CSafeLoader)):
            group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
            for version in crd["spec"]["versions"]:
                if version.get("served"):
                    out[(f"{group}/{version['name']}", kind)] = version["schema"]["openAPIV3Schema"]
    return out


# What the API server accepts at the root of every custom resource, whether its schema declares them
# or not (Istio's declare only spec and status).
ROOT_FIELDS = {"apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"}}


@functools.cache
def _validator(api_version: str, kind: str) -> jsonschema.protocols.Validator:
    root = published()[(api_version, kind)]
    root = {**root, "properties": {**ROOT_FIELDS, **root.get("properties", {})}}
    converted = schema.to_json_schema(root, strict=True)
    cls = jsonschema.validators.validator_for(converted, default=jsonschema.Draft4Validator)
    return cls(converted)


def is_custom(obj: dict[str, Any]) -> bool:
    return (obj.get("apiVersion"), obj.get("kind")) in published()


def custom_errors(obj: dict[str, Any]) -> list[str]:
    """Every violation of its published CRD's schema, list keys (x-kubernetes-list-map-keys: each
    key once) and CEL rules, as 'path: problem' lines."""
    found = _validator(obj["apiVersion"], obj["kind"]).iter_errors(obj)
    problems = sorted(f"{'.'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}" for e in found)
    if problems:  # the API server runs the CEL rules only on an object of the right shape
        return problems
    node = published()[(obj["apiVersion"], obj["kind"])]
    value = defaulted(node, obj)
    return schema.duplicate_keys(node, value) + _cel_problems(node, value, obj["kind"])


def defaulted(node: dict[str, Any], value: Any) -> Any:
    """``value`` with its schema's defaults filled in, as the API server stores it before validating."""
    if isinstance(value, list) and isinstance(node.get("items"), dict):
        return [defaulted(node["items"], item) for item in value]
    if not isinstance(value, dict):
        return value
    out = dict(value)
    for name, sub in (node.get("properties") or {}).items():
        if name not in out and "default" in sub:
            out[name] = sub["default"]
        if name in out:
            out[name] = defaulted(sub, out[name])
    return out


def _cel_problems(node: dict[str, Any], value: Any, path: str) -> list[str]:
    """The CRD's x-kubernetes-validations, evaluated by cel-python where their field is set. A rule
    cel-python cannot evaluate is a problem too: it is never skipped."""
    import celpy

    problems = []
    for rule in node.get("x-kubernetes-validations", []):
        if "oldSelf" in rule["rule"]:
            continue  # a transition rule: the API server runs it only on an update, against the stored value
        try:
            env = celpy.Environment()
            ok = env.program(env.compile(rule["rule"])).evaluate({"self": celpy.json_to_cel(value)})
        except Exception as exc:  # noqa: BLE001 - any failure to evaluate is reported, not passed
            problems.append(f"{path}: cannot evaluate {rule['rule']!r}: {exc}")
            continue
        if not bool(ok):
            problems.append(f"{path}: {rule.get('message') or rule['rule']}")
    if isinstance(value, dict):
        for name, sub in (node.get("properties") or {}).items():
            if name in value:
                problems += _cel_problems(sub, value[name], f"{path}.{name}")
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            for name, item in value.items():
                problems += _cel_problems(extra, item, f"{path}.{name}")
    if isinstance(value, list) and isinstance(node.get("items"), dict):
        for i, item in enumerate(value):
            problems += _cel_problems(node["items"], item, f"{path}[{i}]")
    return problems


def validate(obj: dict[str, Any]) -> None:
    """Raise if ``obj`` is not valid for its kind: a vendored CRD's schema, or a current Kubernetes'."""
    if is_custom(obj):
        problems = custom_errors(obj)
        if problems:
            raise ValueError(f"{obj['kind']} {obj['metadata']['name']}: " + "; ".join(problems))
        return
    kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
