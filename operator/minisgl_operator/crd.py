"""The InferenceService CustomResourceDefinition: its schema is defined here and nowhere else.

The chart's ``crds/`` file is generated from :func:`crd_manifest` (``minisgl-operator crd``), and a
test fails when the two differ. The operator validates specs against the same schema
(``schema.py``), so the API server and the operator accept and reject the same objects.
"""

from __future__ import annotations

from typing import Any

from . import constants as c
from . import server

# A Kubernetes resource.Quantity, as the API server's own schemas spell it.
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
    r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
# An RFC 1035 label: what a Service name must be. The InferenceService's name becomes the name of
# its Service, Deployment and pods' label values, so it must be one.
DNS_1035_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
DNS_1035_MAX = 63

# CEL rules (x-kubernetes-validations): what a JSON schema cannot say. spec.py checks each of them
# again in Python (CEL_TWINS), so the operator and the render command catch the same mistakes.
NAME_RULE = f"size(self.metadata.name) <= {DNS_1035_MAX} && self.metadata.name.matches('{DNS_1035_PATTERN}')"
AUTOSCALING_RULE = "!has(self.minReplicas) || self.minReplicas <= self.maxReplicas"
CACHE_RULE = "!has(self.claimName) || (!has(self.storageClassName) && !has(self.accessModes))"


def _quantity(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "pattern": QUANTITY_PATTERN,
        "x-kubernetes-int-or-string": True,
    }


def _quantity_map(description: str) -> dict[str, Any]:
    return {
        "type": "object",
        "description": description,
        "additionalProperties": _quantity("A quantity, e.g. 8, 500m, 64Gi."),
    }


def _local_object_ref(what: str) -> dict[str, Any]:
    return {
        "type": "object",
        "description": f"The {what} to read.",
        "required": ["name"],
        "properties": {
            "name": {"type": "string", "minLength": 1},
            "optional": {"type": "boolean"},
        },
    }


def spec_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "description": "A model served by minisgl: one Deployment of GPU pods behind one Service.",
        "required": ["model"],
        "properties": {
            "model": {
                "type": "string",
                "minLength": 1,
                "description": (
                    "Hugging Face model id (downloaded into the model cache) or a path inside the "
                    f"model cache, which is mounted at {c.CACHE_MOUNT}."
                ),
            },
            "tp": {
                "type": "integer",
                "enum": list(c.TP_SIZES),
                "default": c.DEFAULT_TP,
                "description": "Tensor-parallel size: GPUs per pod (nvidia.com/gpu limit).",
            },
            "replicas": {
                "type": "integer",
                "format": "int32",
                "minimum": 0,
                "default": c.DEFAULT_REPLICAS,
                "description": "Pods. Set by the HPA through the scale subresource when autoscaling is on.",
            },
            "image": {
                "type": "string",
                "minLength": 1,
                "description": "Server image; the operator's default (chart value serverImage) when unset.",
            },
            "port": {
                "type": "integer",
                "minimum": 1,
                "maximum": 65535,
                "default": server.DEFAULT_PORT,
                "description": "Port the server listens on and the Service exposes.",
            },
            "args": {
                "type": "array",
                "items": {"type": "string"},
                "description": (
                    "Extra server flags, e.g. [--max-running-requests, '128']. "
                    "--model, --tp, --host and --port come from the fields above."
                ),
            },
            "resources": {
                "type": "object",
                "description": "CPU and memory of the server container. GPUs come from tp.",
                "properties": {
                    "requests": _quantity_map("Requested resources, e.g. {cpu: 8, memory: 64Gi}."),
                    "limits": _quantity_map("Resource limits, e.g. {memory: 96Gi}."),
                },
            },
            "env": {
                "type": "array",
                "description": "Extra environment variables (core/v1 EnvVar), e.g. HF_TOKEN from a Secret.",
                "items": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {
                        "name": {"type": "string", "minLength": 1},
                        "value": {"type": "string"},
                        "valueFrom": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                    },
                },
            },
            "envFrom": {
                "type": "array",
                "description": "Environment from ConfigMaps or Secrets (core/v1 EnvFromSource).",
                "items": {
                    "type": "object",
                    "properties": {
                        "prefix": {"type": "string"},
                        "configMapRef": _local_object_ref("ConfigMap"),
                        "secretRef": _local_object_ref("Secret"),
                    },
                },
            },
            "modelCache": {
                "type": "object",
                "description": (
                    f"Persistent model cache mounted at {c.CACHE_MOUNT} (HF_HOME lives there): an existing "
                    "PVC (claimName), or a PVC the operator creates (size, storageClassName, accessModes). "
                    "Without it the cache is an emptyDir and every new pod downloads the model again."
                ),
                "oneOf": [{"required": ["claimName"]}, {"required": ["size"]}],
                "properties": {
                    "claimName": {"type": "string", "minLength": 1, "description": "An existing PVC."},
                    "size": {
                        "type": "string",
                        "pattern": QUANTITY_PATTERN,
                        "description": "Size of the PVC the operator creates, e.g. 200Gi.",
                    },
                    "storageClassName": {"type": "string", "description": "Storage class of the created PVC."},
                    "accessModes": {
                        "type": "array",
                        "description": (
                            "Access modes of the created PVC (default ReadWriteOnce). Replicas on "
                            "several nodes need ReadWriteMany."
                        ),
                        "items": {
                            "type": "string",
                            "enum": ["ReadWriteOnce", "ReadWriteOncePod", "ReadWriteMany", "ReadOnlyMany"],
                        },
                    },
                },
                "x-kubernetes-validations": [
                    {
                        "rule": CACHE_RULE,
                        "message": "storageClassName and accessModes apply only to a PVC the operator creates (size)",
                    }
                ],
            },
            "nodeSelector": {
                "type": "object",
                "additionalProperties": {"type": "string"},
                "description": "Node labels the pods must match, e.g. a GPU product label.",
            },
            "tolerations": {
                "type": "array",
                "description": "Pod tolerations (core/v1 Toleration), e.g. for tainted GPU nodes.",
                "items": {
                    "type": "object",
                    "properties": {
                        "key": {"type": "string"},
                        "operator": {"type": "string", "enum": ["Exists", "Equal"]},
                        "value": {"type": "string"},
                        "effect": {"type": "string", "enum": ["NoSchedule", "PreferNoSchedule", "NoExecute"]},
                        "tolerationSeconds": {"type": "integer", "format": "int64"},
                    },
                },
            },
            "affinity": {
                "type": "object",
                "description": "Pod affinity (core/v1 Affinity), passed through unchanged.",
                "x-kubernetes-preserve-unknown-fields": True,
            },
            "autoscaling": {
                "type": "object",
                "description": (
                    f"An autoscaling/v2 HPA on the per-pod metric {c.WAITING_REQUESTS_METRIC} "
                    "(requests queued, not yet running). Needs a custom metrics adapter such as "
                    "prometheus-adapter."
                ),
                "required": ["maxReplicas"],
                "properties": {
                    "minReplicas": {"type": "integer", "format": "int32", "minimum": 1, "default": 1},
                    "maxReplicas": {"type": "integer", "format": "int32", "minimum": 1},
                    "targetWaitingRequests": {
                        "type": "integer",
                        "minimum": 1,
                        "default": c.DEFAULT_TARGET_WAITING_REQUESTS,
                        "description": "Average waiting requests per pod that the HPA aims for.",
                    },
                },
                "x-kubernetes-validations": [
                    {
                        "rule": AUTOSCALING_RULE,
                        "message": "minReplicas must not exceed maxReplicas",
                    }
                ],
            },
        },
    }


def status_schema() -> dict[str, Any]:
    condition = {
        "type": "object",
        "required": ["type", "status"],
        "properties": {
            "type": {"type": "string", "enum": list(c.CONDITION_TYPES)},
            "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
            "reason": {"type": "string"},
            "message": {"type": "string"},
            "lastTransitionTime": {"type": "string", "format": "date-time"},
            "observedGeneration": {"type": "integer", "format": "int64"},
        },
    }
    return {
        "type": "object",
        "description": "Observed state, written by the operator.",
        "properties": {
            "phase": {"type": "string", "enum": list(c.PHASES)},
            "replicas": {"type": "integer", "format": "int32", "description": "Pods that exist."},
            "readyReplicas": {"type": "integer", "format": "int32", "description": "Pods that pass /ready."},
            "selector": {"type": "string", "description": "Label selector of the pods (for the scale subresource)."},
            "url": {"type": "string", "description": "In-cluster URL of the Service."},
            "observedGeneration": {"type": "integer", "format": "int64"},
            "conditions": {
                "type": "array",
                "items": condition,
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["type"],
            },
        },
    }


def openapi_schema() -> dict[str, Any]:
    """The openAPIV3Schema of v1alpha1."""
    return {
        "type": "object",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec_schema(),
            "status": status_schema(),
        },
        "x-kubernetes-validations": [
            {
                "rule": NAME_RULE,
                "message": (
                    "the name must be a DNS-1035 label (lower case letters, digits and '-', starting "
                    f"with a letter, at most {DNS_1035_MAX} characters): it names the Service"
                ),
            }
        ],
    }


PRINTER_COLUMNS = [
    {"name": "Model", "type": "string", "jsonPath": ".spec.model"},
    {"name": "TP", "type": "integer", "jsonPath": ".spec.tp"},
    {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
    {"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas"},
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "URL", "type": "string", "jsonPath": ".status.url", "priority": 1},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def crd_manifest() -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": c.CRD_NAME,
            "labels": {c.LABEL_PART_OF: c.APP_NAME},
        },
        "spec": {
            "group": c.GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": c.KIND,
                "listKind": f"{c.KIND}List",
                "plural": c.PLURAL,
                "singular": c.SINGULAR,
                "shortNames": list(c.SHORT_NAMES),
                "categories": list(c.CATEGORIES),
            },
            "versions": [
                {
                    "name": c.VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": openapi_schema()},
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.replicas",
                            "statusReplicasPath": ".status.replicas",
                            "labelSelectorPath": ".status.selector",
                        },
                    },
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                }
            ],
        },
    }
