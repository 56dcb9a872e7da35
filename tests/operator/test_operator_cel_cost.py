"""The API server's cost estimate of CEL rules (cel_cost.py): it reproduces the figures of the
upstream tests it was ported from, and the InferenceService CRD's every rule is under the per-rule
budget, the CRD under the total, and every list, map and string a rule reads is bounded."""

from __future__ import annotations

import copy
from pathlib import Path

import cel_cost as cc
import pytest
import yaml

from minisgl_operator import crd

REPO = Path(__file__).resolve().parents[2]

# --- the upstream figures ---------------------------------------------------------------------------
#
# kubernetes/apiextensions-apiserver pkg/apiserver/schema/cel/compilation_test.go, TestCostEstimation:
# (schema generator, rule, cost without bounds, the bound set, cost with it). Cases whose expected
# cost is 0 there are not checked there either (schemaChecker skips them), so they are left out.


def _leaf(kind: str) -> dict:
    if kind == "int-or-string":
        return {"x-kubernetes-int-or-string": True}
    if kind in ("duration", "date", "date-time"):
        return {"type": "string", "format": kind}
    return {"type": kind}


def array(kind: str):
    return lambda bound: {"type": "array", "items": _leaf(kind), **({"maxItems": bound} if bound is not None else {})}


def map_of(item: dict):
    return lambda bound: {"type": "object", "additionalProperties": item, **({"maxProperties": bound} if bound is not None else {})}


def string(enum: tuple[str, ...] = ()):
    return lambda bound: {"type": "string", **({"enum": list(enum)} if enum else {}), **({"maxLength": bound} if bound is not None else {})}


OBJECT = {"type": "object", "required": ["required"], "properties": {"required": {"type": "string"}, "optional": {"type": "string"}}}


def nested_all_bounded(bound):
    value = {**OBJECT, **({"maxProperties": bound} if bound is not None else {})}
    item = {"type": "object", "additionalProperties": value, **({"maxProperties": bound} if bound is not None else {})}
    return {"type": "array", "items": item, **({"maxItems": bound} if bound is not None else {})}


def nested_one_bounded(bound):
    item = {"type": "object", "additionalProperties": OBJECT, **({"maxProperties": bound} if bound is not None else {})}
    return {"type": "array", "items": item}


def strings_map(bound):
    value = {"type": "string", **({"maxLength": bound} if bound is not None else {})}
    return {"type": "object", "additionalProperties": value, **({"maxProperties": bound} if bound is not None else {})}


UPSTREAM = [
    ("number array with all", array("number"), "self.all(x, true)", 4718591, 10, 32),
    ("string array with all", array("string"), "self.all(x, true)", 3145727, 20, 62),
    ("boolean array with all", array("boolean"), "self.all(x, true)", 1887437, 5, 17),
    ("array of number arrays with all", lambda b: {**array("number")(b), "items": {"type": "array", "items": {"type": "number"}}},
     "self.all(x, true)", 3145727, 100, 302),
    ("array of objects with all", lambda b: {**array("number")(b), "items": OBJECT}, "self.all(x, true)", 555128, 50, 152),
    ("map of numbers with all", map_of({"type": "number"}), "self.all(x, true)", 1348169, 10, 32),
    ("map of strings with all", map_of({"type": "string"}), "self.all(x, true)", 1179647, 3, 11),
    ("map of booleans with all", map_of({"type": "boolean"}), "self.all(x, true)", 943718, 100, 302),
    ("string with contains", string(), "self.contains('test')", 314574, 10, 5),
    ("string with startsWith", string(), "self.startsWith('test')", 2, 15, 2),
    ("string with endsWith", string(), "self.endsWith('test')", 2, 30, 2),
    ("concat string", string(), 'size(self + "hello") > size("hello")', 314578, 4, 7),
    ("index of array with numbers", array("number"), "self[1] == 0.0", 2, 5000, 2),
    ("index of array with strings", array("string"), "self[1] == self[1]", 314577, 8, 314577),
    ("O(n^2) loop with numbers", array("number"), "self.all(x, self.all(y, true))", None, 10, 352),
    ("O(n^3) loop with numbers", array("number"), "self.all(x, self.all(y, self.all(z, true)))", None, 10, 3552),
    ("regex matches simple", string(), 'self.matches("x")', 314574, 50, 22),
    ("regex matches empty string", string(), '"".matches("(((((((((())))))))))[0-9]")', 7, 10, 7),
    ("regex matches empty regex", string(), 'self.matches("")', 1, 100, 1),
    ("map of strings with value length", strings_map, "self.all(x, x.contains(self[x]))", 2752507, 10, 72),
    ("set array maxLength to zero", array("number"), "self[3] == 0.0", 2, 0, 2),
    ("set map maxLength to zero", map_of({"type": "number"}), 'self["x"] == 0.0', 2, 0, 2),
    ("set string maxLength to zero", string(), 'self == "x"', 2, 0, 1),
    ("set maxLength greater than estimated maxLength", array("number"), "self.all(x, x == 0.0)", 6291454, 3 * 1024 * 2048, 25165826),
    ("nested types with root rule with all supporting maxLength", nested_all_bounded,
     'self.all(x, x["y"].required == "z")', 7340027, 10, 72),
    ("nested types with root rule with one supporting maxLength", nested_one_bounded,
     'self.all(x, x["y"].required == "z")', 7340027, 10, 7340027),
    ("int-or-string array with all", array("int-or-string"), "self.all(x, true)", 4718591, 10, 32),
    ("index of array with int-or-strings", array("int-or-string"), "self[0] == 5", 3, 10, 3),
    ("index of array with booleans", array("boolean"), "self[0] == false", 2, 25, 2),
    ("index of array of objects", lambda b: {**array("number")(b), "items": OBJECT}, "self[0] == null", 2, 422, 2),
    ("array of number maps with all", lambda b: {**array("number")(b), "items": map_of({"type": "number"})(None)},
     "self.all(x, x.y == 25.2)", 6291452, 12, 74),
    ("index of array of number maps", lambda b: {**array("number")(b), "items": map_of({"type": "number"})(None)},
     "self[0].x > 2.0", 4, 3000, 4),
    ("duration array with all", array("duration"), "self.all(x, true)", 2359295, 5, 17),
    ("date array with all", array("date"), "self.all(x, true)", 725936, 15, 47),
    ("date-time array with all", array("date-time"), "self.all(x, true)", 428963, 25, 77),
    ("map of int-or-strings with all", map_of(_leaf("int-or-string")), "self.all(x, true)", 1348169, 15, 47),
    ("map of objects with all", map_of(OBJECT), "self.all(x, true)", 428963, 20, 62),
    ("map of number maps with all", map_of(map_of({"type": "number"})(None)), "self.all(x, true)", 1179647, 10, 32),
    ("map of number arrays with all", map_of(array("number")(None)), "self.all(x, true)", 1179647, 25, 77),
    ("map of durations with all", map_of(_leaf("duration")), "self.all(x, true)", 1048577, 5, 17),
    ("map of dates with all", map_of(_leaf("date")), "self.all(x, true)", 524288, 10, 32),
    ("map of date-times with all", map_of(_leaf("date-time")), "self.all(x, true)", 349526, 25, 77),
    ("check cost of size call", map_of({"type": "integer"}), "oldSelf.size() == self.size()", 5, 10, 5),
    ("enums with maxLength equals to the longest possible value", string(("A", "B", "C", "LongValue")), "self.contains('A')", 2, 1000, 401),
    ("IntOrString type with quantity rule", lambda b: {"x-kubernetes-int-or-string": True, **({"maxLength": b} if b is not None else {})},
     "isQuantity(self)", 314574, 20, 9),
]  # fmt: skip


def _cost(schema: dict, rule: str) -> int:
    return cc.estimate(rule, cc.schema_decl(schema))[0]


@pytest.mark.parametrize("name, schema, rule, unbounded, bound, bounded", UPSTREAM, ids=[c[0] for c in UPSTREAM])
def test_the_estimate_reproduces_the_apiextensions_test_table(name, schema, rule, unbounded, bound, bounded):
    if unbounded is None:  # upstream only asserts it exceeds the per-call limit
        assert _cost(schema(None), rule) >= cc.PER_CALL_LIMIT
    else:
        assert _cost(schema(None), rule) == unbounded
    assert _cost(schema(bound), rule) == bounded


# google/cel-go checker/cost_test.go: expressions whose cost needs no size estimator.
CEL_GO = [
    ("[1, 2, 3].all(x, true)", 20),
    ("2 in [1, 2, 3]", 13),
    ("'123'.matches('[0-9]')", 2),
    ('{"a": 1, "b": 2, "c": 3}.size() > 0', 32),  # "create map" is 30, then size() and > cost 1 each
    ("true || false", 0),
    ("1 < 2", 1),
    ("1 == 2", 1),
]


@pytest.mark.parametrize("rule, cost", CEL_GO)
def test_the_estimate_reproduces_cel_go_literal_costs(rule, cost):
    assert _cost({"type": "object"}, rule) == cost


# pkg/apis/apiextensions/validation/validation_test.go, TestCostInfo: how many times a rule on a
# string under these containers may run.
CARDINALITY = [
    ([{"type": "object", "properties": {}}], 1),
    ([{"type": "array", "maxItems": 5}], 5),
    ([{"type": "array"}], None),
    ([{"type": "object", "additionalProperties": {}, "maxProperties": 10}], 10),
    ([{"type": "object", "additionalProperties": {}}], None),
    ([{"type": "object", "additionalProperties": {}, "maxProperties": 5}, {"type": "array", "maxItems": 5}], 25),
    ([{"type": "object", "additionalProperties": {}, "maxProperties": 5}, {"type": "array"}], None),
    ([{"type": "array", "maxItems": 3}, {"type": "object", "properties": {}}], 3),
    ([{"type": "array", "maxItems": 2}, {"type": "object", "properties": {}},
      {"type": "object", "additionalProperties": {}, "maxProperties": 4}], 8),
]  # fmt: skip


def _nest(containers: list[dict], leaf: dict) -> dict:
    node = leaf
    for outer in reversed(containers):
        outer = copy.deepcopy(outer)
        if outer["type"] == "array":
            outer["items"] = node
        elif "additionalProperties" in outer:
            outer["additionalProperties"] = node
        else:
            outer["properties"] = {"child": node}
        node = outer
    return node


@pytest.mark.parametrize("containers, cardinality", CARDINALITY)
def test_a_rule_under_lists_and_maps_runs_as_often_as_their_bounds_allow(containers, cardinality):
    leaf = {"type": "string", "maxLength": 1, "x-kubernetes-validations": [{"rule": "self == 'x'"}]}
    (found,) = cc.rule_costs(_nest(containers, leaf))
    if cardinality is None:  # unbounded: as many as fit in a request (compilation.go maxCardinality)
        assert found.cardinality == cc.MAX_REQUEST_SIZE_BYTES // (2 + 1)
    else:
        assert found.cardinality == cardinality
    assert found.cost == found.max_cost * found.cardinality


def test_a_rule_over_budget_gets_the_api_servers_refusal():
    # The shape of the shared-cache rule before it had bounds: the "roughly 17.8M".
    schema = {
        "type": "object",
        "properties": {"modes": {"type": "array", "items": {"type": "string", "enum": ["ReadWriteOnce", "ReadWriteMany"]}}},
        "x-kubernetes-validations": [{"rule": "has(self.modes) && self.modes.exists(m, m in ['ReadWriteMany', 'ReadOnlyMany'])"}],
    }
    manifest = {"spec": {"versions": [{"name": "v1", "schema": {"openAPIV3Schema": schema}}]}}
    (rule,) = cc.rule_costs(schema)
    # 1048575 two-byte strings fit in a request; each turn costs 17: the loop condition 3, the step
    # 14 (the accumulator 1, `in` over two items 2, m 1, the list literal 10); has(), self.modes and
    # the result cost 4.
    assert rule.cost == 1048575 * 17 + 4
    assert rule.unbounded() == ["self.modes"]
    (problem,) = cc.crd_problems(manifest)
    assert problem.startswith(
        "spec.versions[0].schema.openAPIV3Schema.x-kubernetes-validations[0].rule: Forbidden: "
        "estimated rule cost exceeds budget by factor of 1.8x"
    )
    schema["properties"]["modes"]["maxItems"] = 4
    assert cc.crd_problems(manifest) == []


def test_the_total_of_a_crds_rules_is_limited_too():
    # Each rule runs on up to 10000 strings of 4096 bytes: about 8M, under the per-rule budget.
    item = {"type": "string", "maxLength": 1024, "x-kubernetes-validations": [{"rule": "self.matches('^[a-z]+$')"}]}
    props = {f"list{i}": {"type": "array", "maxItems": 10000, "items": item} for i in range(13)}
    schema = {"type": "object", "properties": props}
    manifest = {"spec": {"versions": [{"name": "v1", "schema": {"openAPIV3Schema": schema}}]}}
    costs = cc.rule_costs(schema)
    assert all(rc.cost <= cc.STATIC_ESTIMATED_COST_LIMIT for rc in costs)
    assert sum(rc.cost for rc in costs) > cc.STATIC_ESTIMATED_CRD_COST_LIMIT
    (problem,) = cc.crd_problems(manifest)
    assert "estimated rule cost total for entire OpenAPIv3 schema exceeds budget" in problem


def test_a_rule_outside_the_ported_functions_is_refused_not_guessed():
    with pytest.raises(cc.Unsupported, match="function"):
        _cost({"type": "string"}, "self.lowerAscii() == 'a'")


# --- the InferenceService CRD ----------------------------------------------------------------------

COSTS = cc.rule_costs(crd.openapi_schema())


def test_the_crd_has_rules_to_price():
    assert len(COSTS) >= 15


@pytest.mark.parametrize("rule", COSTS, ids=[rc.path for rc in COSTS])
def test_every_rule_of_the_crd_is_under_the_per_rule_budget(rule):
    assert rule.cost <= cc.STATIC_ESTIMATED_COST_LIMIT, rule


@pytest.mark.parametrize("rule", COSTS, ids=[rc.path for rc in COSTS])
def test_every_rule_runs_within_the_per_call_limit_even_on_the_largest_object(rule):
    # At run time each evaluation stops at PerCallLimit (a refused write); the estimate bounds it.
    assert rule.max_cost <= cc.PER_CALL_LIMIT, rule


def test_all_rules_together_run_within_the_runtime_budget_of_one_object():
    assert sum(rc.cost for rc in COSTS) <= cc.RUNTIME_CEL_COST_BUDGET


@pytest.mark.parametrize("rule", COSTS, ids=[rc.path for rc in COSTS])
def test_every_list_map_and_string_a_rule_reads_is_bounded(rule):
    assert rule.unbounded() == [], rule.rule


def test_the_crd_is_under_the_total_budget_and_the_api_server_would_accept_it():
    assert sum(rc.cost for rc in COSTS) <= cc.STATIC_ESTIMATED_CRD_COST_LIMIT
    assert cc.crd_problems(crd.crd_manifest()) == []


def test_the_charts_crd_file_is_accepted_too(fake):
    # What `helm install` sends (crds/) and the upgrade hook applies.
    chart_crd = yaml.safe_load((REPO / "charts" / "minisgl-operator" / "crds" / "inferenceservices.minisgl.io.yaml").read_text())
    assert cc.crd_problems(chart_crd) == []
    fake.apply_crd(chart_crd)


def test_the_fake_api_refuses_a_crd_over_budget(fake):
    from minisgl_operator.kube import ApiError

    manifest = crd.crd_manifest()
    assert fake.apply_crd(manifest)["metadata"]["name"] == manifest["metadata"]["name"]
    too_costly = copy.deepcopy(manifest)
    cache = too_costly["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["modelCache"]
    del cache["properties"]["accessModes"]["maxItems"]
    with pytest.raises(ApiError) as refused:
        fake.apply_crd(too_costly)
    assert refused.value.status == 422
    assert "estimated rule cost exceeds budget" in refused.value.message
