"""The checks a constraint passes before it is compiled: how deeply a JSON schema nests is read
from its text without parsing it (brackets inside strings do not count), and a schema nested past
the server's limit is refused naming the field and the flag."""

from __future__ import annotations

import json

from minisgl.constrained.constraints import bound_problem, constraint_problem, json_depth
from tests.constrained.helpers import nested_schema


def test_json_depth_counts_the_nesting_of_arrays_and_objects_outside_strings():
    value = {"a": [1, {"b": "[[[{{"}], "c\\\"[": "x\\\\", "d": [[[]]]}
    assert json_depth(json.dumps(value)) == 4  # {} > "d": [ > [ > [
    assert json_depth(json.dumps({"a": [1, {"b": "[[[{{"}]})) == 3
    assert json_depth('"[{"') == 0 and json_depth("3") == 0 and json_depth("{}") == 1


def test_json_depth_reads_a_text_too_deep_for_the_json_parser():
    deep = "[" * 100_000 + "]" * 100_000
    assert json_depth(deep) == 100_000
    assert "nested too deeply" in constraint_problem(("json_schema", deep))  # not a RecursionError


def test_a_schema_past_the_depth_limit_is_refused_naming_the_field_and_the_flag():
    schema = ("json_schema", nested_schema(10))  # 21 levels: 2 per object, 1 for the leaf
    assert bound_problem(schema, 21) is None
    problem = bound_problem(schema, 20)
    assert problem.startswith("response_format or guided_json")
    assert "nests 21 levels deep, more than this server's limit of 20 (--max-grammar-depth)" in problem
    assert bound_problem(("regex", "(" * 50 + ")" * 50), 20) is None  # the time budget bounds the other kinds
