"""checkov's Kubernetes checks on everything the operator and the chart create.

checkov runs once, with no skip at all. Every finding must then match an entry of JUSTIFIED (a
check, the objects it may fail on, and why that is right for this project), and every entry must
still be needed: a justification that no longer matches a finding fails the test too.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from operator_chart_tools import NAMESPACE, helm_template

from minisgl_operator import constants, render
from tests.tool_venvs import tool_binary

pytestmark = pytest.mark.slow  # checkov's run: tens of seconds on 2 cores

REPO = Path(__file__).resolve().parents[2]
OPERATOR_DEPLOYMENT = f"Deployment.{NAMESPACE}."
CRD_UPGRADE_JOB = f"Job.{NAMESPACE}."
SERVER_NAMESPACE = "llm"



def _endpoint_pickers() -> tuple[str, ...]:
    """The resource ids of the examples' router endpoint pickers (spec.router)."""
    ids = []
    for path in sorted((REPO / "operator" / "examples").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and "router" in doc["spec"]:
                ids.append(f"Deployment.{SERVER_NAMESPACE}.{doc['metadata']['name']}{constants.EPP_SUFFIX}")
    return tuple(ids)


# check id -> (prefix of the resource ids it may fail on, why)
JUSTIFIED: dict[str, tuple[tuple[str, ...], str]] = {
    "CKV_K8S_38": (
        (OPERATOR_DEPLOYMENT, CRD_UPGRADE_JOB, *_endpoint_pickers()),
        "The operator, the CRD upgrade hook and the router's endpoint picker (it watches its InferencePool and "
        "pods) are Kubernetes API clients: their pods need their ServiceAccount token. "
        "The inference server pods do not mount one (automountServiceAccountToken: false).",
    ),
    "CKV_K8S_15": (
        (OPERATOR_DEPLOYMENT, CRD_UPGRADE_JOB, f"Deployment.{SERVER_NAMESPACE}.", f"Job.{SERVER_NAMESPACE}."),
        "Images are pinned tags (appVersion by default). The server image (which the model cache's "
        "loader Job runs too) is many GB of CUDA: IfNotPresent lets a GPU pod restart from the node's "
        "copy when the registry is unreachable.",
    ),
    "CKV_K8S_43": (
        (OPERATOR_DEPLOYMENT, CRD_UPGRADE_JOB, f"Deployment.{SERVER_NAMESPACE}.", f"Job.{SERVER_NAMESPACE}."),
        "The image reference is the user's (spec.image, chart values image.*); pinned tags by default, "
        "and a digest is accepted wherever a user wants one (spec.image: name@sha256:...).",
    ),
    "CKV_K8S_35": (
        (f"Deployment.{SERVER_NAMESPACE}.", f"Job.{SERVER_NAMESPACE}."),
        "A user's spec.env passes HF_TOKEN from a Secret: huggingface_hub reads the token from the "
        "HF_TOKEN environment variable (the example shows it; the loader Job downloads with it); the server reads its API key from "
        "MINISGL_API_KEY the same way.",
    ),
    "CKV_K8S_25": (
        (f"Deployment.{SERVER_NAMESPACE}.", f"Job.{SERVER_NAMESPACE}."),
        "The cache-owner init container adds CAP_CHOWN (all others dropped) to give a shared model cache's top "
        "directory to the server's UID: the kubelet applies fsGroup only to ReadWriteOnce volumes, so an NFS, EFS "
        "or Filestore volume is root's. It runs before the server, on that one directory; modelCache.setOwner: "
        "false leaves it out.",
    ),
    "CKV2_K8S_6": (
        (f"Pod.{NAMESPACE}.", f"Pod.{SERVER_NAMESPACE}."),
        "Which clients may call a model server is the cluster's own network policy, not the "
        "operator's; the operator pod listens only for the kubelet's health probe.",
    ),
}


def operator_objects() -> list[dict]:
    """What the operator renders for the examples users start from (all of them set resources)."""
    docs = []
    for path in sorted((REPO / "operator" / "examples").glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    objects = []
    for i, doc in enumerate(docs):
        doc["metadata"]["namespace"] = SERVER_NAMESPACE
        doc["metadata"]["uid"] = f"uid-{i}"
        objects += render.render(doc)
    return objects


def chart_objects() -> list[dict]:
    everything = {
        "metrics": {"podMonitor": {"enabled": True}},
        "watchNamespaces": [SERVER_NAMESPACE],
    }
    return helm_template() + helm_template(everything)


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("checkov")
    (out / "operator.yaml").write_text(yaml.safe_dump_all(operator_objects()))
    (out / "chart.yaml").write_text(yaml.safe_dump_all(chart_objects()))
    cmd = [str(tool_binary("checkov", "checkov")), "-d", str(out), "--framework", "kubernetes", "--skip-download", "-o", "json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env={**os.environ, "BC_SKIP_MAPPING": "TRUE"})
    assert proc.stdout.strip(), f"checkov printed nothing (rc={proc.returncode}): {proc.stderr[-2000:]}"
    data = json.loads(proc.stdout)
    assert isinstance(data, dict) and data.get("check_type") == "kubernetes", str(data)[:2000]
    return data


def test_checkov_read_every_object(report):
    summary = report["summary"]
    assert summary["parsing_errors"] == 0
    assert summary["resource_count"] >= len(operator_objects()) + 5
    assert summary["passed"] > 100


def test_checkov_ran_the_pod_security_checks_and_they_pass(report):
    passed = {c["check_id"] for c in report["results"]["passed_checks"]}
    failed = {c["check_id"] for c in report["results"]["failed_checks"]}
    # liveness, readiness, no privilege escalation, read-only root, no NET_RAW, capabilities
    # dropped, seccomp, non-root, high UID, not in the default namespace, CPU and memory limits.
    assert {
        "CKV_K8S_8", "CKV_K8S_9", "CKV_K8S_20", "CKV_K8S_22", "CKV_K8S_28", "CKV_K8S_37",
        "CKV_K8S_31", "CKV_K8S_23", "CKV_K8S_40", "CKV_K8S_21", "CKV_K8S_11", "CKV_K8S_13",
    } <= passed - failed  # fmt: skip


def test_every_finding_is_justified(report):
    unjustified = []
    for finding in report["results"]["failed_checks"]:
        prefixes, _ = JUSTIFIED.get(finding["check_id"], ((), ""))
        if not finding["resource"].startswith(prefixes):
            unjustified.append(f"{finding['check_id']} {finding['check_name']}: {finding['resource']}")
    assert unjustified == [], "\n".join(unjustified)


def test_every_justification_is_still_needed(report):
    failed = {finding["check_id"] for finding in report["results"]["failed_checks"]}
    assert set(JUSTIFIED) <= failed, f"stale justifications: {set(JUSTIFIED) - failed}"
    for check, (prefixes, why) in JUSTIFIED.items():
        assert prefixes and len(why) > 40, check
