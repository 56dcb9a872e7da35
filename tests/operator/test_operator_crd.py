"""The InferenceService CRD: one definition (operator/minisgl_operator/crd.py), a valid
apiextensions.k8s.io/v1 object, and a schema that accepts the examples and rejects bad specs."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import celpy
import jsonschema
import kubernetes_validate
import pytest
import yaml
from celpy import celtypes

from minisgl_operator import cli, constants, crd, schema, spec

REPO = Path(__file__).resolve().parents[2]
CHART_CRD = REPO / "charts" / "minisgl-operator" / "crds" / "inferenceservices.minisgl.io.yaml"
EXAMPLES = sorted((REPO / "operator" / "examples").glob("*.yaml"))
MANIFEST = crd.crd_manifest()
VERSION = MANIFEST["spec"]["versions"][0]
OPENAPI = VERSION["schema"]["openAPIV3Schema"]


def _yaml_blocks(markdown: Path) -> list[dict]:
    docs = []
    for block in re.findall(r"```yaml\n(.*?)```", markdown.read_text(), flags=re.S):
        docs += [d for d in yaml.safe_load_all(block) if isinstance(d, dict) and d.get("kind") == constants.KIND]
    return docs


def example_objects() -> list[dict]:
    docs = []
    for path in EXAMPLES:
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    docs += _yaml_blocks(REPO / "charts" / "minisgl-operator" / "README.md")
    docs += _yaml_blocks(REPO / "docs" / "kubernetes.md")
    return docs


# --- one source of truth -------------------------------------------------------------------------


def test_the_charts_crd_file_is_generated_from_the_operators_definition():
    assert CHART_CRD.read_text() == cli.crd_yaml(), (
        "charts/minisgl-operator/crds/ is stale: run "
        "`PYTHONPATH=operator python -m minisgl_operator crd > charts/minisgl-operator/crds/inferenceservices.minisgl.io.yaml`"
    )
    assert yaml.safe_load(CHART_CRD.read_text()) == MANIFEST


# --- a valid CRD --------------------------------------------------------------------------------


@pytest.mark.parametrize("k8s", [kubernetes_validate.latest_version(), "1.30"])
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
            _at(col["jsonPath"].split("[", 1)[0])  # the column's field exists in the schema


def test_the_reason_column_shows_why_an_inference_service_is_degraded():
    (column,) = [c for c in VERSION["additionalPrinterColumns"] if c["name"] == "Reason"]
    match = re.fullmatch(r'\.status\.conditions\[\?\(@\.type=="(\w+)"\)\]\.reason', column["jsonPath"])
    assert match and match.group(1) == constants.CONDITION_DEGRADED
    assert "reason" in _at(".status.conditions")["items"]["properties"]


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
    assert len(docs) >= 3  # operator/examples/* and the docs/kubernetes.md examples
    for doc in docs:
        assert schema.errors(doc) == [], doc["metadata"]["name"]
        spec.parse(doc)  # the CEL twins and the server's parser accept them too


MINIMAL = {"apiVersion": constants.API_VERSION, "kind": constants.KIND, "metadata": {"name": "m"}, "spec": {"model": "org/model"}}


def with_spec(**changes) -> dict:
    obj = copy.deepcopy(MINIMAL)
    obj["spec"].update(changes)
    return obj


@pytest.mark.parametrize(
    "obj, problem",
    [
        (with_spec(tp=3), "spec.tp: 3 is not one of [1, 2, 4, 8, 16, 32, 64]"),
        (with_spec(tp=128), "spec.tp: 128 is not one of [1, 2, 4, 8, 16, 32, 64]"),
        (with_spec(tp=16, gpusPerNode=16), "spec.gpusPerNode: 16 is not one of [1, 2, 4, 8]"),
        (with_spec(autoscaling={"maxReplicas": 2, "keda": {"prometheusAddress": "http://p", "target": "four"}}),
         "spec.autoscaling.keda.target: 'four' does not match"),
        (with_spec(autoscaling={"maxReplicas": 2, "keda": {"prometheusAddress": "http://p", "target": "4", "metric": "gpu"}}),
         "spec.autoscaling.keda.metric: 'gpu' is not one of"),
        (with_spec(router={"canary": {"inferenceService": "b", "weight": 101}}), "spec.router.canary.weight: 101 is greater than"),
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
        ({**MINIMAL, "metadata": {"name": "a" * (crd.NAME_MAX + 1)}}, "metadata.name: 'aaaa"),
        (with_spec(args=["--x"] * (crd.ARGS_MAX_ITEMS + 1)), "spec.args: ['--x'"),
        (with_spec(modelCache={"size": "1Gi", "accessModes": ["ReadWriteMany"] * 5}), "spec.modelCache.accessModes: ['ReadWriteMany'"),
        ({k: v for k, v in MINIMAL.items() if k != "spec"}, "<root>: 'spec' is a required property"),
        # LoRA adapters: a name a request's model field can carry, a source that is a Hub id or a path.
        (with_spec(adapters=[{"name": "org/sql", "source": "org/sql-lora"}]), "spec.adapters[0].name: 'org/sql' does not match"),
        (with_spec(adapters=[{"name": "-sql", "source": "org/sql-lora"}]), "spec.adapters[0].name: '-sql' does not match"),
        (with_spec(adapters=[{"name": "sql lora", "source": "org/sql-lora"}]), "spec.adapters[0].name: 'sql lora' does not match"),
        (with_spec(adapters=[{"name": "a" * (crd.ADAPTER_NAME_MAX + 1), "source": "x"}]), "spec.adapters[0].name: 'aaaa"),
        (with_spec(adapters=[{"name": "sql"}]), "spec.adapters[0]: 'source' is a required property"),
        (with_spec(adapters=[{"name": "sql", "source": "org/../etc"}]), "spec.adapters[0].source: 'org/../etc' does not match"),
        (with_spec(adapters=[{"name": "sql", "source": "a/b/c"}]), "spec.adapters[0].source: 'a/b/c' does not match"),
        (with_spec(adapters=[{"name": "sql", "source": "org/sql-lora", "rank": 0}]), "spec.adapters[0].rank: 0 is less than"),
        (with_spec(adapters=[{"name": "sql", "source": "org/sql-lora", "path": "/x"}]), "spec.adapters[0]: Additional properties"),
        (with_spec(adapters=[{"name": f"a{i}", "source": "org/a"} for i in range(crd.ADAPTERS_MAX_ITEMS + 1)]),
         "spec.adapters: [{'name': 'a0'"),
        (with_spec(adapters=[{"name": "sql", "source": "org/a"}, {"name": "sql", "source": "org/b"}]),
         "spec.adapters[1]: Duplicate value: name='sql'"),
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


def test_the_args_rule_refuses_every_prefix_of_a_guarded_flag_and_no_other_flag():
    from minisgl.server import args as server_args
    from minisgl_operator import server

    pattern = re.compile(crd.ARGS_RULE.split("'")[1])
    guarded = [flag[2:] for flag in (*server.OWNED_FLAGS, *server.FORBIDDEN_FLAGS)]
    prefixes = {name[:i] for name in guarded for i in range(1, len(name) + 1)}
    for prefix in prefixes:
        assert pattern.match(f"--{prefix}") and pattern.match(f"--{prefix}=x"), prefix
    for flag in (o for action in server_args.build_parser()._actions for o in action.option_strings if o.startswith("--")):
        assert bool(pattern.match(flag)) == (flag[2:] in prefixes), flag


def test_every_cel_rule_has_a_python_twin():
    assert sorted(schema.cel_rules()) == sorted([*spec.CEL_TWINS, *spec.TRANSITION_TWINS])
    # Transition rules (oldSelf) have twins that take the old and the new value.
    assert all("oldSelf" in rule for rule in spec.TRANSITION_TWINS)
    assert not any("oldSelf" in rule for rule in spec.CEL_TWINS)


KEDA = {"prometheusAddress": "http://prometheus:9090", "target": "4"}

REJECTED = [
        ({**MINIMAL, "metadata": {"name": "Chat_Bot"}}, crd.NAME_RULE, "DNS-1035"),
        ({**MINIMAL, "metadata": {"name": "1chat"}}, crd.NAME_RULE, "DNS-1035"),
        # NAME-epp and a LeaderWorkerSet's StatefulSet labels must fit (test_operator_names).
        ({**MINIMAL, "metadata": {"name": "a" * (crd.MULTI_NODE_NAME_MAX + 1)}, "spec": {"model": "m", "tp": 16, "gpusPerNode": 8}},
         crd.NAME_RULE, f"at most {crd.MULTI_NODE_NAME_MAX} characters"),
        (with_spec(autoscaling={"minReplicas": 5, "maxReplicas": 2}), crd.AUTOSCALING_RULE, "minReplicas must not exceed"),
        (with_spec(modelCache={"claimName": "x", "storageClassName": "y"}), crd.CACHE_RULE, "apply only to a PVC"),
        (with_spec(modelCache={"claimName": "x", "perPod": True}), crd.PER_POD_CACHE_RULE, "perPod needs size"),
        (with_spec(modelCache={"size": "1Gi", "accessModes": ["ReadOnlyMany"]}), crd.WRITABLE_CACHE_RULE, "ReadOnlyMany only"),
        (with_spec(resources={"limits": {"nvidia.com/gpu": 2}}), crd.GPU_RESOURCES_RULE, "spec.tp sets the GPUs"),
        (with_spec(resources={"requests": {"nvidia.com/gpu": 2}}), crd.GPU_RESOURCES_RULE, "spec.tp sets the GPUs"),
        # argparse prefixes: --t is --tp, --por is --port, --sh is --shell.
        (with_spec(tp=2, args=["--t", "8"]), crd.ARGS_RULE, "--tp"),
        (with_spec(args=["--por", "8000"]), crd.ARGS_RULE, "--port"),
        (with_spec(args=["--mod=x"]), crd.ARGS_RULE, "--model"),
        (with_spec(args=["--host", "::"]), crd.ARGS_RULE, "--host"),
        (with_spec(args=["--sh"]), crd.ARGS_RULE, "--shell"),
        (with_spec(rollout={"strategy": "Recreate", "maxSurge": 1}), crd.ROLLOUT_RULE, "Recreate takes no"),
        (with_spec(rollout={"maxSurge": 0, "maxUnavailable": 0}), crd.ROLLOUT_RULE, "a rolling update needs maxSurge"),
        (with_spec(startupTimeoutSeconds=3600, rollout={"progressDeadlineSeconds": 600}), crd.PROGRESS_RULE, "must exceed"),
        (with_spec(rollout={"progressDeadlineSeconds": 1000}), crd.PROGRESS_RULE, "must exceed"),
        (with_spec(replicas=2, modelCache={"size": "1Gi"}), crd.SHARED_CACHE_RULE, "ReadWriteOnce model cache"),
        (with_spec(autoscaling={"maxReplicas": 3}, modelCache={"size": "1Gi", "accessModes": ["ReadWriteOnce"]}),
         crd.SHARED_CACHE_RULE, "ReadWriteOnce"),
        (with_spec(rollout={"maxSurge": 1, "maxUnavailable": 0}, modelCache={"size": "1Gi"}), crd.SHARED_CACHE_RULE, "ReadWriteOnce"),
        # A multi-node replica's pods sit on several nodes: a ReadWriteOnce cache cannot follow.
        (with_spec(tp=16, gpusPerNode=8, modelCache={"size": "1Gi"}), crd.SHARED_CACHE_RULE, "ReadWriteOnce"),
        (with_spec(tp=16), crd.MULTI_NODE_RULE, "set spec.gpusPerNode"),
        (with_spec(autoscaling={"minReplicas": 0, "maxReplicas": 2}), crd.SCALE_TO_ZERO_RULE, "needs autoscaling.keda and router"),
        (with_spec(autoscaling={"minReplicas": 0, "maxReplicas": 2, "keda": KEDA}),
         crd.SCALE_TO_ZERO_RULE, "needs autoscaling.keda and router"),
        (with_spec(autoscaling={"minReplicas": 0, "maxReplicas": 2}, router={}),
         crd.SCALE_TO_ZERO_RULE, "needs autoscaling.keda and router"),
        (with_spec(router={"canary": {"inferenceService": "other", "weight": 5}}), crd.CANARY_GATEWAY_RULE, "needs spec.router.gateway"),
        (with_spec(router={"gateway": {"name": "gw"}, "canary": {"inferenceService": MINIMAL["metadata"]["name"], "weight": 5}}),
         crd.CANARY_NAME_RULE, "another InferenceService"),
        # Fields that would otherwise be ignored.
        (with_spec(router={"hostnames": ["llm.example.com"]}), crd.HOSTNAMES_RULE, "need spec.router.gateway"),
        (with_spec(tp=8, gpusPerNode=8, exclusiveTopology="rack"), crd.EXCLUSIVE_TOPOLOGY_RULE, "needs tp above gpusPerNode"),
        (with_spec(exclusiveTopology="rack"), crd.EXCLUSIVE_TOPOLOGY_RULE, "needs tp above gpusPerNode"),
        (with_spec(autoscaling={"maxReplicas": 2, "targetWaitingRequests": 3, "keda": KEDA}), crd.KEDA_TARGET_RULE, "set keda.target"),
        (with_spec(model="gpt2", adapters=[{"name": "sql", "source": "org/sql"}, {"name": "gpt2", "source": "org/gpt2-lora"}]),
         crd.ADAPTER_BASE_NAME_RULE, "'gpt2' is the base model's name"),
]


@pytest.mark.parametrize("obj, rule, problem", REJECTED)
def test_cel_twins_reject_what_the_cel_rules_reject(obj, rule, problem):
    assert any(problem in p for p in spec.CEL_TWINS[rule](obj))
    with pytest.raises(spec.SpecError, match=problem):
        spec.parse(obj)


ACCEPTED = [
        with_spec(autoscaling={"minReplicas": 2, "maxReplicas": 2}, modelCache={"claimName": "x"}),
        with_spec(replicas=4, modelCache={"size": "1Ti", "accessModes": ["ReadWriteMany"]}),
        with_spec(replicas=4, modelCache={"size": "1Ti", "perPod": True, "storageClassName": "local-nvme"}),
        with_spec(replicas=1, modelCache={"size": "1Ti"}, rollout={"strategy": "Recreate"}),
        with_spec(replicas=1, modelCache={"size": "1Ti"}),  # the default rollout has no surge pod
        with_spec(args=["--max-running-requests", "8", "--served-model-name=tp"], rollout={"maxSurge": 1, "maxUnavailable": 0}),
        with_spec(startupTimeoutSeconds=7200, rollout={"progressDeadlineSeconds": 7201}),
        with_spec(tp=16, gpusPerNode=8, replicas=2, modelCache={"claimName": "models"}),
        with_spec(tp=8, gpusPerNode=8, modelCache={"size": "1Gi"}),  # one node: one pod
        with_spec(router={"gateway": {"name": "gw"}, "canary": {"inferenceService": "other", "weight": 5}},
                  autoscaling={"minReplicas": 0, "maxReplicas": 2, "keda": KEDA}),
        with_spec(router={}),
        with_spec(model="gpt2", adapters=[{"name": "gpt2-sql", "source": "org/sql", "rank": 64}, {"name": "c", "source": "/m/c"}]),
]


@pytest.mark.parametrize("obj", ACCEPTED)
def test_cel_twins_accept_valid_objects(obj):
    for twin in spec.CEL_TWINS.values():
        assert twin(obj) == []


TRANSITIONS = [
        ({"size": "100Gi"}, {"size": "200Gi"}, True),  # growing is allowed (volume expansion)
        ({"size": "200Gi"}, {"size": "100Gi"}, False),
        ({"size": "1Ti"}, {"size": "1000Gi"}, False),  # 1Ti is 1024Gi: compared by value
        ({"size": "1Gi"}, {"size": "1Gi", "storageClassName": "fast"}, False),
        ({"size": "1Gi", "accessModes": ["ReadWriteOnce"]}, {"size": "1Gi"}, True),  # the default, spelled out
        ({"size": "1Gi"}, {"size": "1Gi", "accessModes": ["ReadWriteMany"]}, False),
        ({"size": "1Gi"}, {"claimName": "other"}, True),  # a new claim: the old PVC is left as it is
        ({"size": "1Gi", "perPod": True}, {"size": "2Gi", "perPod": True, "storageClassName": "x"}, True),  # new pods, new volumes
]


@pytest.mark.parametrize("old, new, accepted", TRANSITIONS)
def test_the_immutable_cache_rule_twin_compares_old_and_new(old, new, accepted):
    problems = spec.TRANSITION_TWINS[crd.IMMUTABLE_CACHE_RULE](old, new)
    assert (problems == []) == accepted, problems


# --- the CEL rules themselves, evaluated by a CEL interpreter ----------------------------------------
#
# No API server runs here, but cel-python evaluates the rules as written, after the schema's
# defaults are applied (the API server defaults, then validates). Two functions of the Kubernetes
# CEL library that plain CEL lacks are supplied from the operator's own code: quantity() and its
# compareTo(), over minisgl_operator.quantity.


def _cel_program(rule: str):
    from minisgl_operator import quantity

    def compare_to(a, b):
        x, y = quantity.parse(str(a)), quantity.parse(str(b))
        return celtypes.IntType((x > y) - (x < y))

    env = celpy.Environment()
    return env.program(env.compile(rule), functions={"quantity": celtypes.StringType, "compareTo": compare_to})


def _defaulted(node: dict, value):
    """``value`` with the schema's defaults filled in, as the API server stores it."""
    if not isinstance(value, dict):
        return value
    out = dict(value)
    for name, sub in (node.get("properties") or {}).items():
        if name not in out and "default" in sub:
            out[name] = copy.deepcopy(sub["default"])
        if name in out:
            out[name] = _defaulted(sub, out[name])
    return out


def _field(obj: dict, path: tuple[str, ...]):
    for name in path:
        if not isinstance(obj, dict) or name not in obj:
            return None
        obj = obj[name]
    return obj


def _cel_accepts(rule: str, path: tuple[str, ...], obj: dict) -> bool:
    value = _field(_defaulted(OPENAPI, obj), path)
    if value is None:
        return True  # a rule runs only where its field is set
    result = _cel_program(rule).evaluate({"self": celpy.json_to_cel(value)})
    assert isinstance(result, celtypes.BoolType), f"{rule} evaluated to {result!r}"
    return bool(result)


@pytest.mark.parametrize("obj", [case[0] for case in REJECTED] + ACCEPTED)
def test_each_cel_rule_and_its_python_twin_agree(obj):
    for path, rule in schema.cel_rules_at():
        if rule in spec.TRANSITION_TWINS:
            continue
        assert _cel_accepts(rule, path, obj) == (spec.CEL_TWINS[rule](obj) == []), rule


@pytest.mark.parametrize("case", REJECTED, ids=lambda case: case[2])
def test_the_cel_rule_itself_rejects_what_its_twin_rejects(case):
    obj, rule, _ = case
    (path,) = [p for p, r in schema.cel_rules_at() if r == rule]
    assert not _cel_accepts(rule, path, obj)


@pytest.mark.parametrize("old, new, accepted", TRANSITIONS)
def test_the_immutable_cache_transition_rule_agrees_with_its_twin(old, new, accepted):
    (path,) = [p for p, r in schema.cel_rules_at() if r == crd.IMMUTABLE_CACHE_RULE]
    assert path == ("spec", "modelCache")
    cache_schema = OPENAPI["properties"]["spec"]["properties"]["modelCache"]
    activation = {"self": celpy.json_to_cel(_defaulted(cache_schema, new)), "oldSelf": celpy.json_to_cel(_defaulted(cache_schema, old))}
    assert bool(_cel_program(crd.IMMUTABLE_CACHE_RULE).evaluate(activation)) == accepted


def test_the_readme_example_is_the_one_it_tells_you_to_apply():
    # The first one; the scaling-out examples after it are validated with the others (example_objects).
    readme_example, *_ = _yaml_blocks(REPO / "docs" / "kubernetes.md")
    shipped = yaml.safe_load((REPO / "operator" / "examples" / "inferenceservice.yaml").read_text())
    assert readme_example == shipped


# --- the fake API server refuses what the CRD refuses --------------------------------------------


@pytest.mark.parametrize("adapters, model, refusal", [
    ([{"name": "sql", "source": "org/a"}, {"name": "sql", "source": "org/b"}], "org/base", "spec.adapters[1]: Duplicate value"),
    ([{"name": "sql/v2", "source": "org/a"}], "org/base", "spec.adapters.0.name: 'sql/v2' does not match"),
    ([{"name": f"a{i}", "source": "org/a"} for i in range(crd.ADAPTERS_MAX_ITEMS + 1)], "org/base", "is too long"),
    ([{"name": "gpt2", "source": "org/gpt2-lora"}], "gpt2", "an adapter's name must differ from the base model's"),
])  # fmt: skip
def test_the_api_server_refuses_bad_adapters_with_422(fake, adapters, model, refusal):
    from minisgl_operator.kube import ApiError

    with pytest.raises(ApiError) as refused:
        fake.submit_inferenceservice("chat", {"model": model, "adapters": adapters})
    assert refused.value.status == 422 and refusal in refused.value.message, refused.value.message
    assert (constants.KIND, "llm", "chat") not in fake.objects
    with pytest.raises(spec.SpecError):  # and the operator's own checks, for a file the API server never saw
        spec.parse(with_spec(model=model, adapters=adapters))


def test_the_api_server_stores_good_adapters(fake):
    adapters = [{"name": "sql", "source": "org/sql-lora", "rank": 16}, {"name": "chat", "source": "/models/chat"}]
    stored = fake.submit_inferenceservice("chat", {"model": "org/base", "adapters": adapters})
    assert stored["spec"]["adapters"] == adapters
    assert spec.parse(stored).adapters == (spec.Adapter("sql", "org/sql-lora", 16), spec.Adapter("chat", "/models/chat"))


def test_the_adapters_list_is_keyed_by_name_as_the_api_server_merges_it():
    adapters = _at(".spec.adapters")
    assert (adapters["x-kubernetes-list-type"], adapters["x-kubernetes-list-map-keys"]) == ("map", ["name"])
    assert "name" in adapters["items"]["required"]  # a map list's keys must be required (or defaulted)
