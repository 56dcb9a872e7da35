"""The InferenceService CRD: one definition (operator/minisgl_operator/crd.py), a valid
apiextensions.k8s.io/v1 object, and a schema that accepts the examples and rejects bad specs."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from minisgl_operator import cli, crd, schema, spec
from minisgl_operator import constants as c

REPO = Path(__file__).resolve().parents[2]
CHART_CRD = REPO / "charts" / "minisgl-operator" / "crds" / "inferenceservices.minisgl.io.yaml"
EXAMPLES = sorted((REPO / "operator" / "examples").glob("*.yaml"))
MANIFEST = crd.crd_manifest()
VERSION = MANIFEST["spec"]["versions"][0]
OPENAPI = VERSION["schema"]["openAPIV3Schema"]


def _yaml_blocks(markdown: Path) -> list[dict]:
    docs = []
    for block in re.findall(r"```yaml\n(.*?)```", markdown.read_text(), flags=re.S):
        docs += [d for d in yaml.safe_load_all(block) if isinstance(d, dict) and d.get("kind") == c.KIND]
    return docs


def example_objects() -> list[dict]:
    docs = []
    for path in EXAMPLES:
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    docs += _yaml_blocks(REPO / "charts" / "minisgl-operator" / "README.md")
    docs += _yaml_blocks(REPO / "README.md")
    return docs


# --- one source of truth -------------------------------------------------------------------------


def test_the_charts_crd_file_is_generated_from_the_operators_definition():
    assert CHART_CRD.read_text() == cli.crd_yaml(), (
        "charts/minisgl-operator/crds/ is stale: run "
        "`PYTHONPATH=operator python -m minisgl_operator crd > charts/minisgl-operator/crds/inferenceservices.minisgl.io.yaml`"
    )
    assert yaml.safe_load(CHART_CRD.read_text()) == MANIFEST


# --- a valid CRD --------------------------------------------------------------------------------


@pytest.mark.parametrize("k8s", [kubernetes_validate.latest_version(), "1.29"])
def test_the_crd_is_a_valid_apiextensions_v1_object(k8s):
    kubernetes_validate.validate(MANIFEST, k8s, strict=True)


def test_names_scope_and_version():
    s = MANIFEST["spec"]
    assert MANIFEST["metadata"]["name"] == "inferenceservices.minisgl.io"
    assert (s["group"], s["scope"]) == ("minisgl.io", "Namespaced")
    assert s["names"]["kind"] == "InferenceService"
    assert s["names"]["plural"] == "inferenceservices"
    assert "misvc" in s["names"]["shortNames"]
    assert "isvc" not in s["names"]["shortNames"]  # KServe's
    assert [(v["name"], v["served"], v["storage"]) for v in s["versions"]] == [("v1alpha1", True, True)]


def test_status_and_scale_subresources_so_kubectl_scale_and_an_hpa_work():
    assert VERSION["subresources"]["status"] == {}
    assert VERSION["subresources"]["scale"] == {
        "specReplicasPath": ".spec.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    }


def _at(path: str) -> dict:
    node = OPENAPI
    for part in path.strip(".").split("."):
        node = node["properties"][part]
    return node


def test_printer_columns_show_model_tp_ready_and_age_from_real_fields():
    columns = {col["name"]: col for col in VERSION["additionalPrinterColumns"]}
    assert {"Model", "TP", "Ready", "Age"} <= set(columns)
    assert columns["Age"]["jsonPath"] == ".metadata.creationTimestamp"
    for col in columns.values():
        if col["jsonPath"].startswith((".spec", ".status")):
            _at(col["jsonPath"])  # the column's field exists in the schema


def test_status_schema_has_phase_ready_replicas_conditions_url_and_observed_generation():
    status = _at(".status")["properties"]
    assert {"phase", "readyReplicas", "conditions", "url", "observedGeneration", "replicas", "selector"} <= set(status)
    condition = status["conditions"]["items"]
    assert condition["properties"]["type"]["enum"] == ["Ready", "Progressing", "Degraded"]
    assert {"reason", "message", "lastTransitionTime"} <= set(condition["properties"])


def _walk(node: dict, path: str = ""):
    yield path, node
    for name, child in node.get("properties", {}).items():
        yield from _walk(child, f"{path}.{name}")
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            yield from _walk(node[key], f"{path}[{key}]")


def test_the_schema_is_structural():
    # Every node has a type, except int-or-string nodes; anyOf/oneOf carry no types of their own
    # beyond int-or-string's; preserve-unknown-fields only on objects.
    for path, node in _walk(OPENAPI):
        if node.get("x-kubernetes-int-or-string"):
            assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}], path
            continue
        assert "type" in node, f"{path or '<root>'} has no type"
        for branch in node.get("oneOf", []) + node.get("anyOf", []):
            assert set(branch) <= {"required"}, path
        if node.get("x-kubernetes-preserve-unknown-fields"):
            assert node["type"] == "object", path


def test_the_converted_schema_is_a_valid_json_schema():
    converted = schema.to_json_schema(OPENAPI)
    jsonschema.Draft4Validator.check_schema(converted)
    assert "x-kubernetes-validations" not in str(converted)


# --- what the schema accepts and rejects (a real JSON Schema validator) --------------------------


def test_the_examples_are_accepted():
    docs = example_objects()
    assert len(docs) >= 3  # operator/examples/* and the README examples
    for doc in docs:
        assert schema.errors(doc) == [], doc["metadata"]["name"]
        spec.parse(doc)  # the CEL twins and the server's parser accept them too


MINIMAL = {"apiVersion": c.API_VERSION, "kind": c.KIND, "metadata": {"name": "m"}, "spec": {"model": "org/model"}}


def with_spec(**changes) -> dict:
    obj = copy.deepcopy(MINIMAL)
    obj["spec"].update(changes)
    return obj


@pytest.mark.parametrize(
    "obj, problem",
    [
        (with_spec(tp=3), "spec.tp: 3 is not one of [1, 2, 4, 8]"),
        (with_spec(tp=16), "spec.tp: 16 is not one of [1, 2, 4, 8]"),
        ({**MINIMAL, "spec": {"tp": 2}}, "spec: 'model' is a required property"),
        (with_spec(model=""), "spec.model: '' should be non-empty"),
        (with_spec(replicas=-1), "spec.replicas: -1 is less than the minimum of 0"),
        (with_spec(port=70000), "spec.port: 70000 is greater than the maximum of 65535"),
        (with_spec(args="--tp 2"), "spec.args: '--tp 2' is not of type 'array'"),
        (with_spec(modelCache={"claimName": "a", "size": "1Gi"}), "spec.modelCache: set exactly one of claimName, size"),
        (with_spec(modelCache={}), "spec.modelCache: set exactly one of claimName, size"),
        (with_spec(modelCache={"size": "lots"}), "spec.modelCache.size: 'lots' does not match"),
        (with_spec(resources={"limits": {"memory": "16 GB"}}), "spec.resources.limits.memory: '16 GB' does not match"),
        (with_spec(autoscaling={"minReplicas": 1}), "spec.autoscaling: 'maxReplicas' is a required property"),
        (with_spec(autoscaling={"maxReplicas": 0}), "spec.autoscaling.maxReplicas: 0 is less than the minimum of 1"),
        (with_spec(env=[{"value": "x"}]), "spec.env[0]: 'name' is a required property"),
        (with_spec(tolerations=[{"operator": "Maybe"}]), "spec.tolerations[0].operator: 'Maybe' is not one of"),
        (with_spec(gpus=2), "spec: Additional properties are not allowed ('gpus' was unexpected) (unknown field)"),
        ({k: v for k, v in MINIMAL.items() if k != "spec"}, "<root>: 'spec' is a required property"),
    ],
)
def test_bad_specs_are_rejected_with_the_field_named(obj, problem):
    problems = schema.errors(obj)
    assert any(p.startswith(problem) for p in problems), problems
    with pytest.raises(spec.SpecError):
        spec.parse(obj)


def test_booleans_are_not_numbers():
    assert schema.errors(with_spec(tp=True)) != []


# --- the CEL rules and their Python twins -------------------------------------------------------


def test_every_cel_rule_has_a_python_twin():
    assert sorted(schema.cel_rules()) == sorted(spec.CEL_TWINS)


@pytest.mark.parametrize(
    "obj, rule, problem",
    [
        ({**MINIMAL, "metadata": {"name": "Chat_Bot"}}, crd.NAME_RULE, "DNS-1035"),
        ({**MINIMAL, "metadata": {"name": "1chat"}}, crd.NAME_RULE, "DNS-1035"),
        ({**MINIMAL, "metadata": {"name": "a" * 64}}, crd.NAME_RULE, "DNS-1035"),
        (with_spec(autoscaling={"minReplicas": 5, "maxReplicas": 2}), crd.AUTOSCALING_RULE, "minReplicas must not exceed"),
        (with_spec(modelCache={"claimName": "x", "storageClassName": "y"}), crd.CACHE_RULE, "apply only to a PVC"),
    ],
)
def test_cel_twins_reject_what_the_cel_rules_reject(obj, rule, problem):
    assert any(problem in p for p in spec.CEL_TWINS[rule](obj))
    with pytest.raises(spec.SpecError, match=problem):
        spec.parse(obj)


def test_cel_twins_accept_a_valid_object():
    obj = with_spec(autoscaling={"minReplicas": 2, "maxReplicas": 2}, modelCache={"claimName": "x"})
    for twin in spec.CEL_TWINS.values():
        assert twin(obj) == []


def test_the_readme_example_is_the_one_it_tells_you_to_apply():
    (readme_example,) = _yaml_blocks(REPO / "README.md")
    shipped = yaml.safe_load((REPO / "operator" / "examples" / "inferenceservice.yaml").read_text())
    assert readme_example == shipped
