"""Names and labels as the API server validates them, and the names the controllers the operator
drives derive from an object's name.

The checks follow kubernetes/apimachinery ``pkg/util/validation/validation.go`` (IsDNS1035Label,
IsDNS1123Label, IsDNS1123Subdomain, MaxLenError, RegexError) and ``pkg/api/validate/content``
(label keys and values); which check names which kind follows kubernetes/kubernetes
``pkg/apis/*/validation`` (a Service's name is a DNS-1035 label, a StatefulSet's a DNS-1123 label,
a Role's a path segment, most others a DNS-1123 subdomain). The derived names follow the
controllers: the Deployment controller (ReplicaSet NAME-HASH, pod-template-hash), the StatefulSet
controller (pods NAME-ORDINAL, labels controller-revision-hash=NAME-HASH and
statefulset.kubernetes.io/pod-name), the Job controller (label job-name=NAME), LWS v0.10 (a leader StatefulSet NAME, one worker StatefulSet
NAME-GROUP per group, the LWS webhook's limit of a million groups) and KEDA v2.20 (its HPA
keda-hpa-NAME, unless the ScaledObject names one).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

Obj = dict[str, Any]

DNS1035_LABEL = "[a-z]([-a-z0-9]*[a-z0-9])?"
DNS1123_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_SUBDOMAIN = DNS1123_LABEL + "(\\." + DNS1123_LABEL + ")*"
LABEL_VALUE = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?"
QUALIFIED_NAME = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
LABEL_MAX, SUBDOMAIN_MAX = 63, 253
# The longest hash a controller appends: a uint32 in decimal, safe-encoded (controller.ComputeHash).
HASH_MAX = 10
LWS_MAX_REPLICAS = 1_000_000  # the LWS webhook refuses more groups


def _max_len(n: int) -> str:
    return f"must be no more than {n} characters"


def _regex(message: str, fmt: str, *examples: str) -> str:
    if not examples:
        return f"{message} (regex used for validation is '{fmt}')"
    return f"{message} (e.g. " + " or ".join(f"'{e}', " for e in examples) + f"regex used for validation is '{fmt}')"


def is_dns1035_label(value: str) -> list[str]:
    errs = [_max_len(LABEL_MAX)] if len(value) > LABEL_MAX else []
    if not re.fullmatch(DNS1035_LABEL, value):
        errs.append(_regex("a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
                           "alphabetic character, and end with an alphanumeric character",
                           DNS1035_LABEL, "my-name", "abc-123"))  # fmt: skip
    return errs


def is_dns1123_label(value: str) -> list[str]:
    errs = [_max_len(LABEL_MAX)] if len(value) > LABEL_MAX else []
    if not re.fullmatch(DNS1123_LABEL, value):
        errs.append(_regex("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
                           "must start and end with an alphanumeric character", DNS1123_LABEL, "my-name", "123-abc"))  # fmt: skip
    return errs


def is_dns1123_subdomain(value: str) -> list[str]:
    errs = [_max_len(SUBDOMAIN_MAX)] if len(value) > SUBDOMAIN_MAX else []
    if not re.fullmatch(DNS1123_SUBDOMAIN, value):
        errs.append(_regex("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                           "and must start and end with an alphanumeric character", DNS1123_SUBDOMAIN, "example.com"))  # fmt: skip
    return errs


def is_path_segment_name(value: str) -> list[str]:
    if value in (".", ".."):
        return [f"may not be '{value}'"]
    return [f"may not contain '{c}'" for c in "/%" if c in value]


def is_label_value(value: str) -> list[str]:
    errs = [_max_len(LABEL_MAX)] if len(value) > LABEL_MAX else []
    if not re.fullmatch(LABEL_VALUE, value):
        errs.append(_regex("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
                           "and must start and end with an alphanumeric character",
                           LABEL_VALUE, "MyValue", "my_value", "12345"))  # fmt: skip
    return errs


def is_label_key(key: str) -> list[str]:
    prefix, _, name = key.rpartition("/")
    errs = [f"prefix part {e}" for e in is_dns1123_subdomain(prefix)] if "/" in key else []
    if not name:
        return [*errs, "name part must be non-empty"]
    if len(name) > LABEL_MAX:
        errs.append(f"name part {_max_len(LABEL_MAX)}")
    if not re.fullmatch(QUALIFIED_NAME, name):
        errs.append("name part " + _regex("must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
                                          "with an alphanumeric character", QUALIFIED_NAME, "MyName", "my.name", "123-abc"))  # fmt: skip
    return errs


NAME_CHECKS = {
    "Service": is_dns1035_label,
    "StatefulSet": is_dns1123_label,
    "Role": is_path_segment_name,
    "RoleBinding": is_path_segment_name,
    "ClusterRole": is_path_segment_name,
    "ClusterRoleBinding": is_path_segment_name,
}


def _invalid(path: str, value: str, detail: str) -> str:
    return f'{path}: Invalid value: "{value}": {detail}'


def label_problems(labels: dict[str, str] | None, path: str) -> list[str]:
    found = []
    for key, value in (labels or {}).items():
        found += [_invalid(path, key, e) for e in is_label_key(key)]
        found += [_invalid(path, value, e) for e in is_label_value(value)]
    return found


def _templates(obj: Obj) -> Iterator[tuple[str, Obj]]:
    spec = obj.get("spec") or {}
    if "template" in spec:
        yield "spec.template", spec["template"]
    group = spec.get("leaderWorkerTemplate") or {}
    for key in ("leaderTemplate", "workerTemplate"):
        if key in group:
            yield f"spec.leaderWorkerTemplate.{key}", group[key]


def object_problems(obj: Obj) -> list[str]:
    """ValidateObjectMeta's and the pod templates' refusals of names and labels, as field errors."""
    meta = obj["metadata"]
    check = NAME_CHECKS.get(obj["kind"], is_dns1123_subdomain)
    found = [_invalid("metadata.name", meta["name"], e) for e in check(meta["name"])]
    found += label_problems(meta.get("labels"), "metadata.labels")
    for path, template in _templates(obj):
        found += label_problems((template.get("metadata") or {}).get("labels"), f"{path}.metadata.labels")
    selector = ((obj.get("spec") or {}).get("selector") or {})
    if isinstance(selector, dict):
        found += label_problems(selector.get("matchLabels"), "spec.selector.matchLabels")
    return found


def derived(obj: Obj) -> list[Obj]:
    """The objects (kind, metadata.name and labels) the controllers create for ``obj`` at its
    largest: the longest names and label values they could give them."""
    name, kind, spec = obj["metadata"]["name"], obj["kind"], obj.get("spec") or {}
    hash_ = "h" * HASH_MAX
    out: list[Obj] = []

    def pod(pod_name: str, labels: dict[str, str]) -> None:
        out.append({"kind": "Pod", "metadata": {"name": pod_name, "labels": labels}})

    if kind == "Deployment":
        out.append({"kind": "ReplicaSet", "metadata": {"name": f"{name}-{hash_}", "labels": {"pod-template-hash": hash_}}})
        # pods: generateName NAME-HASH-, cut by the API server to leave room for 5 random characters
    elif kind == "LeaderWorkerSet":
        groups = spec.get("replicas", 1)
        size = (spec.get("leaderWorkerTemplate") or {}).get("size", 1)
        last_group = min(groups, LWS_MAX_REPLICAS) - 1
        for sts, ordinal in ((name, last_group), (f"{name}-{last_group}", size - 1)):
            if ordinal < 0 or (sts != name and size < 2):
                continue
            out.append({"kind": "StatefulSet", "metadata": {"name": sts}})
            pod_name = f"{sts}-{ordinal}"
            pod(pod_name, {"controller-revision-hash": f"{sts}-{hash_}", "statefulset.kubernetes.io/pod-name": pod_name,
                           "leaderworkerset.sigs.k8s.io/name": name})  # fmt: skip
    elif kind == "Job":
        # the Job controller labels its pods with the Job's name (pods: generateName NAME-, cut)
        pod(f"{name}-{hash_[:5]}", {"batch.kubernetes.io/job-name": name, "job-name": name})
    elif kind == "ScaledObject":
        hpa = ((spec.get("advanced") or {}).get("horizontalPodAutoscalerConfig") or {}).get("name") or f"keda-hpa-{name}"
        out.append({"kind": "HorizontalPodAutoscaler", "metadata": {"name": hpa, "labels": {"scaledobject.keda.sh/name": name}}})
    return out


def derived_problems(obj: Obj) -> list[str]:
    """What fails when the controllers create ``obj``'s dependents: their names and labels, and a
    pod's hostname (a StatefulSet pod's is its name, a DNS-1123 label)."""
    found = []
    for child in derived(obj):
        what = f'{child["kind"]} {child["metadata"]["name"]}'
        found += [f"{what}: {p}" for p in object_problems(child)]
        if child["kind"] == "Pod" and obj["kind"] == "LeaderWorkerSet":
            hostname = child["metadata"]["name"]
            found += [f"{what}: " + _invalid("spec.hostname", hostname, e) for e in is_dns1123_label(hostname)]
    return found
