"""The static cost the Kubernetes API server gives a CRD's CEL rules when the CRD is written, and
the limits it refuses a CRD by.

A port, for the CEL this project's CRDs use, of:
- google/cel-go ``checker/cost.go`` (the ``coster``: identifiers, selects, calls by overload,
  comprehensions and the sizes they propagate) at the version apiextensions-apiserver pins (v0.29),
  with the macro expansions of ``parser/macro.go`` (has, all, exists, exists_one, map, filter);
- kubernetes/apiserver ``pkg/cel/common/schemas.go`` (``SchemaDeclType``: the largest size of every
  list, map and string, from maxItems/maxProperties/maxLength/enum or else from the largest request)
  and ``pkg/cel/types.go``, ``pkg/cel/limits.go`` (serialized sizes);
- kubernetes/apiserver ``pkg/cel/library/cost.go`` (the Kubernetes functions: quantity(), compareTo()),
  and ``pkg/cel/environment/base.go`` (has() costs nothing: ``PresenceTestHasCost(false)``);
- kubernetes/apiextensions-apiserver ``pkg/apiserver/schema/cel/compilation.go`` (``sizeEstimator``,
  ``maxCardinality``), ``pkg/apis/apiextensions/validation/cel_validation.go`` (the cardinality of a
  rule under lists and maps) and ``validation.go`` (the limits, ``getExpressionCost``, the total).
``metadata`` at a resource's root follows the released servers (up to 1.36): its name is as long as
a request unless the CRD declares both ``name`` and ``generateName`` (1.37 caps it at 253).

Parsing is cel-python's (its Lark grammar); types are inferred here from the schema, enough to pick
the overload each call's cost depends on. A function or construct outside that set raises
:class:`Unsupported` rather than being priced wrongly. Only the maximum is computed: it is what the
API server compares with its limits.
"""

from __future__ import annotations

import ast as pyast
import functools
import math
from dataclasses import dataclass, field
from typing import Any

from celpy.celparser import CELParser
from lark import Token, Tree

# k8s.io/apiserver/pkg/apis/cel/config.go and apiextensions validation.go.
PER_CALL_LIMIT = 1_000_000  # the run-time limit of one evaluation of one rule
RUNTIME_CEL_COST_BUDGET = 10_000_000  # the run-time limit of all rules on one object
MAX_REQUEST_SIZE_BYTES = 3 * 1024 * 1024
STATIC_ESTIMATED_COST_LIMIT = 10_000_000
STATIC_ESTIMATED_CRD_COST_LIMIT = 100_000_000
# cel-go common/cost.go
SELECT_AND_IDENT_COST = 1
LIST_CREATE_BASE_COST = 10
MAP_CREATE_BASE_COST = 30
STRING_TRAVERSAL_COST_FACTOR = 0.1
REGEX_STRING_LENGTH_COST_FACTOR = 0.25
# k8s.io/apiserver/pkg/cel/limits.go
MIN_STRING_SIZE, MIN_BOOL_SIZE, MIN_NUMBER_SIZE = 2, 4, 1
MAX_DURATION_SIZE_JSON, MAX_DATETIME_SIZE_JSON, JSON_DATE_SIZE = 32, 32, 12
MIN_DURATION_SIZE_JSON, MIN_DATETIME_SIZE_JSON = 3, 21

U64 = 2**64 - 1
ACCUMULATOR = "__result__"


class Unsupported(ValueError):
    """A rule uses CEL this port does not price."""


# --- sizes and costs: uint64 arithmetic that saturates, as cel-go's ---------------------------------


def _add(x: int, y: int) -> int:
    return min(x + y, U64)


def _mul(x: int, y: int) -> int:
    return min(x * y, U64)


def _factor(x: int, f: float) -> int:
    """multiplyByCostFactor: x * f rounded up, in float64 as cel-go computes it."""
    if x > 0 and f > 0 and float(x) > U64 / f:
        return U64
    value = math.ceil(float(x) * f)
    return U64 if value >= 2.0**64 else int(value)


@dataclass(frozen=True)
class Range:
    """cel-go's SizeEstimate and CostEstimate: a [min, max] range."""

    min: int
    max: int

    def __add__(self, other: Range) -> Range:
        return Range(_add(self.min, other.min), _add(self.max, other.max))

    def times(self, other: Range) -> Range:
        return Range(_mul(self.min, other.min), _mul(self.max, other.max))

    def factor(self, f: float) -> Range:
        return Range(_factor(self.min, f), _factor(self.max, f))

    def union(self, other: Range) -> Range:
        return Range(min(self.min, other.min), max(self.max, other.max))


def fixed(n: int) -> Range:
    return Range(n, n)


ZERO, ONE, UNKNOWN = fixed(0), fixed(1), Range(0, U64)


# --- DeclType: a schema as CEL sees it (k8s.io/apiserver/pkg/cel/common/schemas.go) ---------------


@dataclass(eq=False)
class Decl:
    """A schema node's CEL type with ``max_elements`` (a list's items, a map's entries, a string's
    length) and ``min_size`` (its smallest JSON form). ``bounded``: the schema declares that bound
    (maxItems, maxProperties, maxLength, an enum), rather than the request size implying it."""

    kind: str  # object, map, list, string, bytes, int, double, bool, dyn, timestamp, duration
    min_size: int
    max_elements: int = 0
    bounded: bool = True
    fields: dict[str, Decl] = field(default_factory=dict)
    elem: Decl | None = None
    key: Decl | None = None


STRING_KEY = Decl("string", MIN_STRING_SIZE)  # apiservercel.StringType: the shared key type, MaxElements 0


def _max_string_length_per_request(node: dict[str, Any]) -> int:
    return {"duration": MAX_DURATION_SIZE_JSON, "date": JSON_DATE_SIZE, "date-time": MAX_DATETIME_SIZE_JSON}.get(
        node.get("format", ""), MAX_REQUEST_SIZE_BYTES - 2
    )


def _with_type_and_object_meta(node: dict[str, Any]) -> dict[str, Any]:
    """apiVersion, kind, metadata.name and metadata.generateName, always visible at a resource's root."""
    props = node.get("properties") or {}
    meta = (props.get("metadata") or {}).get("properties") or {}
    if (
        (props.get("kind") or {}).get("type") == "string"
        and (props.get("apiVersion") or {}).get("type") == "string"
        and (props.get("metadata") or {}).get("type") == "object"
        and (meta.get("name") or {}).get("type") == "string"
        and (meta.get("generateName") or {}).get("type") == "string"
    ):
        return node
    string = {"type": "string"}
    metadata = {"type": "object", "properties": {"name": string, "generateName": string}}
    return {**node, "properties": {**props, "kind": string, "apiVersion": string, "metadata": metadata}}


def schema_decl(node: dict[str, Any], resource_root: bool = False) -> Decl | None:
    """SchemaDeclType: the CEL type of a structural schema node, or None where CEL cannot see it."""
    if node.get("x-kubernetes-int-or-string"):
        if "maxLength" in node:
            return Decl("dyn", 1, max(0, node["maxLength"]) * 4)
        return Decl("dyn", 1, MAX_REQUEST_SIZE_BYTES - 2, bounded=False)
    if resource_root:
        node = _with_type_and_object_meta(node)
    kind = node.get("type")
    if kind == "array":
        if not isinstance(node.get("items"), dict):
            return None
        items = schema_decl(node["items"], bool(node["items"].get("x-kubernetes-embedded-resource")))
        if items is None:
            return None
        if "maxItems" in node:
            return Decl("list", 2, max(0, node["maxItems"]), elem=items)
        return Decl("list", 2, (MAX_REQUEST_SIZE_BYTES - 2) // (items.min_size + 1), bounded=False, elem=items)
    if kind == "object":
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            values = schema_decl(extra, bool(extra.get("x-kubernetes-embedded-resource")))
            if values is None:
                return None
            if "maxProperties" in node:
                return Decl("map", 2, max(0, node["maxProperties"]), elem=values, key=STRING_KEY)
            return Decl("map", 2, (MAX_REQUEST_SIZE_BYTES - 2) // (values.min_size + 6), bounded=False, elem=values, key=STRING_KEY)
        required = set(node.get("required") or ())
        obj = Decl("object", 2)
        for name, sub in (node.get("properties") or {}).items():
            decl = schema_decl(sub, bool(sub.get("x-kubernetes-embedded-resource")))
            if decl is None:
                continue
            obj.fields[name] = decl
            if name in required and "default" not in sub:
                obj.min_size += len(name) + decl.min_size + 4
        return obj
    if kind == "string":
        fmt = node.get("format")
        if fmt == "byte":
            if "maxLength" in node:
                return Decl("bytes", MIN_STRING_SIZE, max(0, node["maxLength"]))
            return Decl("bytes", MIN_STRING_SIZE, _max_string_length_per_request(node), bounded=False)
        if fmt in ("duration", "date", "date-time"):
            min_size = {"duration": MIN_DURATION_SIZE_JSON, "date": JSON_DATE_SIZE, "date-time": MIN_DATETIME_SIZE_JSON}[fmt]
            kind = "duration" if fmt == "duration" else "timestamp"
            return Decl(kind, min_size, _max_string_length_per_request(node))
        if "maxLength" in node:
            return Decl("string", MIN_STRING_SIZE, max(0, node["maxLength"]) * 4)
        if node.get("enum"):
            return Decl("string", MIN_STRING_SIZE, max(len(v) for v in node["enum"] if isinstance(v, str)))
        return Decl("string", MIN_STRING_SIZE, _max_string_length_per_request(node), bounded=False)
    simple = {"boolean": ("bool", MIN_BOOL_SIZE), "number": ("double", MIN_NUMBER_SIZE), "integer": ("int", MIN_NUMBER_SIZE)}
    if kind in simple:
        return Decl(*simple[kind])
    return None


# --- CEL types, as far as overloads and select costs need them -------------------------------------


@dataclass(frozen=True)
class T:
    kind: str  # bool int uint double string bytes null list map struct dyn quantity timestamp duration
    params: tuple[T, ...] = ()
    decl: Decl | None = field(default=None, compare=False)


DYN, BOOL, INT, STRING = T("dyn"), T("bool"), T("int"), T("string")


def decl_type(decl: Decl) -> T:
    if decl.kind == "object":
        return T("struct", decl=decl)
    if decl.kind == "list":
        return T("list", (decl_type(decl.elem),))
    if decl.kind == "map":
        return T("map", (STRING, decl_type(decl.elem)))
    return T(decl.kind)


# --- the AST, with cel-go's macro expansions -------------------------------------------------------


@dataclass(eq=False)
class Expr:
    kind: str  # literal ident select call list map comprehension
    value: Any = None  # literal: the value; ident: the name; select: the field; call: the function
    operand: Expr | None = None  # select: the operand; call: the target of a member call
    args: list[Expr] = field(default_factory=list)  # call: the arguments; list: the items; map: k, v, k, v...
    test_only: bool = False  # select inside has()
    iter_var: str = ""
    accu_var: str = ""
    iter_range: Expr | None = None
    accu_init: Expr | None = None
    loop_cond: Expr | None = None
    loop_step: Expr | None = None
    result: Expr | None = None


def _call(function: str, *args: Expr, target: Expr | None = None) -> Expr:
    return Expr("call", function, target, list(args))


def _accu() -> Expr:
    return Expr("ident", ACCUMULATOR)


def _literal(token: Token) -> Any:
    text = str(token)
    if token.type == "BOOL_LIT":
        return text == "true"
    if token.type == "NULL_LIT":
        return None
    if token.type == "UINT_LIT":
        return ("uint", int(text[:-1], 0))
    if token.type == "INT_LIT":
        return int(text, 0)
    if token.type == "FLOAT_LIT":
        return float(text)
    if token.type == "BYTES_LIT":
        return pyast.literal_eval(text)
    if token.type in ("STRING_LIT", "MLSTRING_LIT"):
        return pyast.literal_eval(text)
    raise Unsupported(f"literal {text}")


_BINARY = {
    "relation_lt": "_<_", "relation_le": "_<=_", "relation_gt": "_>_", "relation_ge": "_>=_",
    "relation_eq": "_==_", "relation_ne": "_!=_", "relation_in": "@in",
    "addition_add": "_+_", "addition_sub": "_-_",
    "multiplication_mul": "_*_", "multiplication_div": "_/_", "multiplication_mod": "_%_",
}  # fmt: skip


def _macro(name: str, target: Expr | None, args: list[Expr]) -> Expr | None:
    """parser/macro.go: has() and the comprehension macros, or None for an ordinary call."""
    if name == "has" and target is None and len(args) == 1:
        if args[0].kind != "select":
            raise Unsupported("has() needs a field selection")
        return Expr("select", args[0].value, args[0].operand, test_only=True)
    if target is None or len(args) not in (2, 3) or args[0].kind != "ident":
        return None
    var, body = args[0].value, args[-1]
    accu = _accu
    if name == "all" and len(args) == 2:
        init, cond = Expr("literal", True), _call("@not_strictly_false", accu())
        step, result = _call("_&&_", accu(), body), accu()
    elif name == "exists" and len(args) == 2:
        init, cond = Expr("literal", False), _call("@not_strictly_false", _call("!_", accu()))
        step, result = _call("_||_", accu(), body), accu()
    elif name in ("exists_one", "existsOne") and len(args) == 2:
        init, cond = Expr("literal", 0), Expr("literal", True)
        step = _call("_?_:_", body, _call("_+_", accu(), Expr("literal", 1)), accu())
        result = _call("_==_", accu(), Expr("literal", 1))
    elif name == "map":
        init, cond, result = Expr("list"), Expr("literal", True), accu()
        step = _call("_+_", accu(), Expr("list", args=[body]))
        if len(args) == 3:
            step = _call("_?_:_", args[1], step, accu())
    elif name == "filter" and len(args) == 2:
        init, cond, result = Expr("list"), Expr("literal", True), accu()
        step = _call("_?_:_", body, _call("_+_", accu(), Expr("list", args=[Expr("ident", var)])), accu())
    else:
        return None
    return Expr("comprehension", iter_var=var, accu_var=ACCUMULATOR, iter_range=target, accu_init=init,
                loop_cond=cond, loop_step=step, result=result)  # fmt: skip


def _build(tree: Tree | Token) -> Expr:
    if isinstance(tree, Token):
        raise Unsupported(f"token {tree}")
    kids = [k for k in tree.children if k is not None]
    rule = tree.data
    if rule == "expr":
        if len(kids) == 1:
            return _build(kids[0])
        return _call("_?_:_", *(_build(k) for k in kids))
    if rule in ("conditionalor", "conditionaland"):
        if len(kids) == 1:
            return _build(kids[0])
        return _call("_||_" if rule == "conditionalor" else "_&&_", _build(kids[0]), _build(kids[1]))
    if rule in ("relation", "addition", "multiplication"):
        if len(kids) == 1:
            return _build(kids[0])
        op_tree, right = kids
        (left,) = [k for k in op_tree.children if k is not None]
        lhs, rhs = _build(left), _build(right)
        op = _BINARY[op_tree.data]
        return _call("@in", lhs, rhs) if op == "@in" else _call(op, lhs, rhs)
    if rule == "unary":
        if len(kids) == 1:
            return _build(kids[0])
        op, operand = kids
        return _call("!_" if op.data == "unary_not" else "-_", _build(operand))
    if rule in ("member", "primary"):
        return _build(kids[0])
    if rule == "member_dot":
        return Expr("select", str(kids[1]), _build(kids[0]))
    if rule in ("member_dot_arg", "ident_arg"):
        target = _build(kids[0]) if rule == "member_dot_arg" else None
        name = str(kids[1] if rule == "member_dot_arg" else kids[0])
        rest = kids[2:] if rule == "member_dot_arg" else kids[1:]
        args = [_build(e) for e in rest[0].children] if rest else []
        expanded = _macro(name, target, args)
        return expanded if expanded is not None else _call(name, *args, target=target)
    if rule == "member_index":
        return _call("_[_]", _build(kids[0]), _build(kids[1]))
    if rule == "ident":
        return Expr("ident", str(kids[0]))
    if rule == "paren_expr":
        return _build(kids[0])
    if rule == "literal":
        return Expr("literal", _literal(kids[0]))
    if rule == "list_lit":
        return Expr("list", args=[_build(e) for e in kids[0].children] if kids else [])
    if rule == "map_lit":
        return Expr("map", args=[_build(e) for e in kids[0].children] if kids else [])
    raise Unsupported(f"CEL construct {rule}")


@functools.cache
def _parser() -> CELParser:
    return CELParser()


def parse(rule: str) -> Expr:
    return _build(_parser().parse(rule))


# --- type inference: the overload of each call -----------------------------------------------------

_STRING_COMPARE = {"_<_": "less_string", "_<=_": "less_equals_string", "_>_": "greater_string", "_>=_": "greater_equals_string"}


class _Checker:
    """Types every node (``types``) and picks each call's overload (``overloads``), from the schema."""

    def __init__(self, root: Decl):
        self.types: dict[int, T] = {}
        self.overloads: dict[int, str] = {}
        self.scope: list[dict[str, T]] = [{"self": decl_type(root), "oldSelf": decl_type(root)}]

    def lookup(self, name: str) -> T:
        for frame in reversed(self.scope):
            if name in frame:
                return frame[name]
        raise Unsupported(f"undeclared reference {name}")

    def check(self, e: Expr) -> T:
        t = self._check(e)
        self.types[id(e)] = t
        return t

    def _check(self, e: Expr) -> T:
        if e.kind == "literal":
            v = e.value
            if isinstance(v, bool):
                return BOOL
            if isinstance(v, tuple):
                return T("uint")
            return {int: INT, float: T("double"), str: STRING, bytes: T("bytes"), type(None): T("null")}[type(v)]
        if e.kind == "ident":
            return self.lookup(e.value)
        if e.kind == "select":
            operand = self.check(e.operand)
            if e.test_only:
                self._field(operand, e.value)
                return BOOL
            return self._field(operand, e.value)
        if e.kind == "list":
            items = [self.check(a) for a in e.args]
            return T("list", (items[0] if items else DYN,))
        if e.kind == "map":
            parts = [self.check(a) for a in e.args]
            return T("map", (parts[0], parts[1]) if parts else (DYN, DYN))
        if e.kind == "comprehension":
            rng = self.check(e.iter_range)
            accu = self.check(e.accu_init)
            var = rng.params[0] if rng.kind in ("list", "map") else DYN
            self.scope.append({e.accu_var: accu})
            self.scope.append({e.iter_var: var})
            self.check(e.loop_cond)
            step = self.check(e.loop_step)
            self.scope.pop()
            if accu.kind == "list" and step.kind == "list":
                self.scope[-1][e.accu_var] = step
            result = self.check(e.result)
            self.scope.pop()
            return result
        return self._call(e)

    @staticmethod
    def _field(operand: T, name: str) -> T:
        if operand.kind == "struct":
            if name not in operand.decl.fields:
                raise Unsupported(f"undefined field {name}")
            return decl_type(operand.decl.fields[name])
        if operand.kind == "map":
            return operand.params[1]
        if operand.kind == "dyn":
            return DYN
        raise Unsupported(f"select .{name} on {operand.kind}")

    def _call(self, e: Expr) -> T:
        target = self.check(e.operand) if e.operand is not None else None
        args = [self.check(a) for a in e.args]
        fn, kinds = e.value, [a.kind for a in args]
        overload, result = self._resolve(fn, target, args, kinds)
        self.overloads[id(e)] = overload
        return result

    def _resolve(self, fn: str, target: T | None, args: list[T], kinds: list[str]) -> tuple[str, T]:
        if fn in ("_&&_", "_||_"):
            return ("logical_and" if fn == "_&&_" else "logical_or"), BOOL
        if fn == "!_":
            return "logical_not", BOOL
        if fn == "@not_strictly_false":
            return "not_strictly_false", BOOL
        if fn == "_?_:_":
            return "conditional", args[1] if args[1].kind != "dyn" else args[2]
        if fn in ("_==_", "_!=_"):
            return ("equals" if fn == "_==_" else "not_equals"), BOOL
        if fn in _STRING_COMPARE:
            if kinds[0] == "string":
                return _STRING_COMPARE[fn], BOOL
            return f"{fn}:{kinds[0]}", BOOL
        if fn == "@in":
            if kinds[1] == "list":
                return "in_list", BOOL
            if kinds[1] == "map":
                return "in_map", BOOL
            raise Unsupported("'in' on a value that is neither list nor map")
        if fn == "_+_":
            if kinds[0] == "string":
                return "add_string", STRING
            if kinds[0] == "bytes":
                return "add_bytes", T("bytes")
            if kinds[0] == "list":
                return "add_list", args[0] if args[0].params[0].kind != "dyn" else args[1]
            return f"add_{kinds[0]}", args[0]
        if fn in ("_-_", "_*_", "_/_", "_%_", "-_"):
            return f"{fn}:{kinds[0]}", args[0]
        if fn == "_[_]":
            if kinds[0] == "list":
                return "index_list", args[0].params[0]
            if kinds[0] == "map":
                return "index_map", args[0].params[1]
            if kinds[0] == "dyn":
                return "index_dyn", DYN
            raise Unsupported(f"index into {kinds[0]}")
        if fn == "size":
            subject = target if target is not None else args[0]
            return f"size_{subject.kind}", INT
        if target is not None and target.kind in ("string", "dyn"):
            string_fns = {"matches": "matches_string", "contains": "contains_string",
                          "startsWith": "starts_with_string", "endsWith": "ends_with_string"}  # fmt: skip
            if fn in string_fns:
                return string_fns[fn], BOOL
        if fn in ("quantity", "isQuantity") and target is None:
            return fn, T("quantity") if fn == "quantity" else BOOL
        if fn in ("compareTo", "isGreaterThan", "isLessThan", "sign", "asInteger", "isInteger") and target is not None:
            return fn, BOOL if fn.startswith("is") else INT
        if fn in ("int", "string", "double", "dyn", "type") and target is None:
            return fn, {"int": INT, "string": STRING, "double": T("double"), "dyn": DYN, "type": DYN}[fn]
        raise Unsupported(f"function {fn}")


# --- the cost: cel-go checker/cost.go ---------------------------------------------------------------


@dataclass
class _Entry:
    """entrySizeEstimate: a list's or map's key and value sizes, where CEL knows them."""

    container: str
    key: Range
    val: Range


@dataclass
class _Local:
    path: list[str] | None
    size: Range | None
    entry: _Entry | None


@dataclass(frozen=True)
class Lookup:
    """A size the estimator took from the schema: the path (from self) and the node it found."""

    path: tuple[str, ...]
    decl: Decl


class Coster:
    def __init__(self, root: Decl, checker: _Checker):
        self.root = root
        self.types, self.overloads = checker.types, checker.overloads
        self.paths: dict[int, list[str]] = {}
        self.sizes: dict[int, Range] = {}
        self.entries: dict[int, _Entry] = {}
        self.locals: dict[str, list[_Local]] = {}
        self.lookups: list[Lookup] = []

    # sizeEstimator.EstimateSize (compilation.go): a path's MaxElements, from the rule's own node.
    def estimate_size(self, path: list[str] | None) -> Range | None:
        if not path:
            return None
        node = self.root
        for name in path[1:]:
            if name in ("@items", "@values"):
                node = node.elem
            elif name == "@keys":
                node = node.key
            else:
                node = node.fields.get(name)
            if node is None:
                return None
        self.lookups.append(Lookup(tuple(path), node))
        return Range(0, node.max_elements)

    def type(self, e: Expr) -> T:
        return self.types[id(e)]

    def local(self, name: str) -> _Local | None:
        stack = self.locals.get(name)
        return stack[-1] if stack else None

    def path(self, e: Expr) -> list[str] | None:
        if e.kind == "ident":
            var = self.local(e.value)
            if var is not None:
                return list(var.path) if var.path is not None else None
        found = self.paths.get(id(e))
        return list(found) if found is not None else None

    def compute_size(self, e: Expr) -> Range | None:
        if id(e) in self.sizes:
            return self.sizes[id(e)]
        literal = _expr_size(e)
        if literal is not None:
            return literal
        estimated = self.estimate_size(self.path(e))
        if estimated is not None:
            self.sizes[id(e)] = estimated
            return estimated
        if self.type(e).kind in ("bool", "double", "duration", "int", "timestamp", "uint"):
            return ONE
        if e.kind == "ident":
            var = self.local(e.value)
            if var is not None and var.size is not None:
                return var.size
        return None

    def size_or_unknown(self, e: Expr) -> Range:
        size = self.compute_size(e)
        return size if size is not None else UNKNOWN

    def entry_size(self, e: Expr) -> _Entry | None:
        if id(e) in self.entries:
            return self.entries[id(e)]
        if e.kind == "ident":
            var = self.local(e.value)
            if var is not None:
                return var.entry
        return None

    def push(self, name: str, path: list[str] | None, size: Range | None, entry: _Entry | None) -> None:
        self.locals.setdefault(name, []).append(_Local(path, size, entry))

    def pop(self, name: str) -> None:
        self.locals[name].pop()

    def cost(self, e: Expr) -> Range:
        if e.kind == "literal":
            return ZERO
        if e.kind == "ident":
            var = self.local(e.value)
            self.paths[id(e)] = list(var.path or []) if var is not None else [e.value]
            return fixed(SELECT_AND_IDENT_COST)
        if e.kind == "select":
            if e.test_only:  # PresenceTestHasCost(false): has() costs only its operand
                return self.cost(e.operand)
            total = self.cost(e.operand)
            if self.type(e.operand).kind in ("map", "struct"):
                total = total + fixed(SELECT_AND_IDENT_COST)
            self.paths[id(e)] = (self.path(e.operand) or []) + [e.value]
            return total
        if e.kind == "list":
            total, item = ZERO, Range(0 if not e.args else U64, 0)
            for a in e.args:
                total = total + self.cost(a)
                item = item.union(self.size_or_unknown(a))
            self.entries[id(e)] = _Entry("list", ONE, item)
            return total + fixed(LIST_CREATE_BASE_COST)
        if e.kind == "map":
            total = ZERO
            key = val = Range(0 if not e.args else U64, 0)
            for k, v in zip(e.args[::2], e.args[1::2]):
                total = total + self.cost(k) + self.cost(v)
                key, val = key.union(self.size_or_unknown(k)), val.union(self.size_or_unknown(v))
            self.entries[id(e)] = _Entry("map", key, val)
            return total + fixed(MAP_CREATE_BASE_COST)
        if e.kind == "comprehension":
            return self._comprehension(e)
        return self._call(e)

    def _comprehension(self, e: Expr) -> Range:
        total = self.cost(e.iter_range) + self.cost(e.accu_init)
        self.push(e.accu_var, self.path(e.accu_init), self.compute_size(e.accu_init), self.entry_size(e.accu_init))
        entry = self.entry_size(e.iter_range)
        container = entry.container if entry is not None else self.type(e.iter_range).kind
        if container == "list":
            size, sub = (entry.val if entry else None), "@items"
        else:
            size, sub = (entry.key if entry else None), "@keys"
        self.push(e.iter_var, (self.path(e.iter_range) or []) + [sub], size, None)
        loop = self.cost(e.loop_cond)
        step = self.cost(e.loop_step)
        self.pop(e.iter_var)
        total = total + self.cost(e.result)
        self.pop(e.accu_var)
        count = self.size_or_unknown(e.iter_range)
        total = total + count.times(step + loop)
        if e.accu_init.kind == "literal":
            size = self.compute_size(e.accu_init)
            if size is not None:
                self.sizes[id(e)] = size
        elif e.accu_init.kind in ("list", "map"):
            self.sizes[id(e)] = count
            step_entry = self.entry_size(e.loop_step)
            if step_entry is not None:
                self.entries[id(e)] = step_entry
        return total

    def _call(self, e: Expr) -> Range:
        if e.value == "dyn":
            (arg,) = e.args
            cost = self.cost(arg)
            if (size := self.compute_size(arg)) is not None:
                self.sizes[id(e)] = size
            if (entry := self.entry_size(arg)) is not None:
                self.entries[id(e)] = entry
            return ONE + cost
        arg_costs = [self.cost(a) for a in e.args]
        arg_sizes = [self.compute_size(a) for a in e.args]  # newAstNode's ComputedSize
        total = ZERO
        target_size = None
        if e.operand is not None:
            total = total + self.cost(e.operand)
            target_size = self.compute_size(e.operand)
        overload = self.overloads[id(e)]
        fn_cost, result = self._function(e, overload, target_size, arg_sizes, arg_costs)
        if overload in ("index_list", "index_map"):
            entry = self.entry_size(e.args[0])
            result = entry.val if entry is not None else None
            self.paths[id(e)] = (self.path(e.args[0]) or []) + ["@items" if overload == "index_list" else "@values"]
        if result is None:
            result = self.compute_size(e)
        if result is not None:
            self.sizes[id(e)] = result
        return total + fn_cost

    def _function(self, e, overload, target_size, arg_sizes, arg_costs) -> tuple[Range, Range | None]:
        args_sum = ZERO
        for cost in arg_costs:
            args_sum = args_sum + cost

        def known(size: Range | None) -> Range:
            return size if size is not None else UNKNOWN

        # k8s.io/apiserver/pkg/cel/library/cost.go EstimateCallCost: the Kubernetes functions
        if e.value in ("quantity", "isQuantity") and e.args:
            return known(arg_sizes[0]).factor(STRING_TRAVERSAL_COST_FACTOR) + args_sum, None
        if e.value in ("sign", "asInteger", "isInteger", "isGreaterThan", "isLessThan", "compareTo"):
            return ONE + args_sum, None
        # cel-go checker/cost.go functionCost
        if overload in ("starts_with_string", "ends_with_string"):
            return known(arg_sizes[0]).factor(STRING_TRAVERSAL_COST_FACTOR) + args_sum, None
        if overload == "in_list":
            return known(arg_sizes[1]).factor(1) + args_sum, None
        if overload == "matches_string":
            string = (known(target_size) + ONE).factor(STRING_TRAVERSAL_COST_FACTOR)
            regex = known(arg_sizes[0]).factor(REGEX_STRING_LENGTH_COST_FACTOR)
            return string.times(regex) + args_sum, None
        if overload == "contains_string":
            string = known(target_size).factor(STRING_TRAVERSAL_COST_FACTOR)
            sub = known(arg_sizes[0]).factor(STRING_TRAVERSAL_COST_FACTOR)
            return string.times(sub) + args_sum, None
        if overload in ("logical_and", "logical_or"):
            lhs, rhs = arg_costs
            return Range(lhs.min, (lhs + rhs).max), None
        if overload == "conditional":
            size = known(arg_sizes[1]).union(known(arg_sizes[2]))
            a, b = self.entry_size(e.args[1]), self.entry_size(e.args[2])
            if a is not None and b is not None:
                self.entries[id(e)] = _Entry(a.container, a.key.union(b.key), a.val.union(b.val))
            return arg_costs[0] + arg_costs[1].union(arg_costs[2]), size
        if overload in ("add_string", "add_bytes", "add_list"):
            size = known(arg_sizes[0]) + known(arg_sizes[1])
            a, b = self.entry_size(e.args[0]), self.entry_size(e.args[1])
            if a is not None and b is not None:
                self.entries[id(e)] = _Entry(a.container, a.key.union(b.key), a.val.union(b.val))
            if overload == "add_list":
                return ONE + args_sum, size
            return size.factor(STRING_TRAVERSAL_COST_FACTOR) + args_sum, size
        if overload in ("equals", "not_equals", *_STRING_COMPARE.values()):
            lhs, rhs = known(arg_sizes[0]), known(arg_sizes[1])
            smallest = min(lhs.max, rhs.max)
            return Range(1 if smallest > 0 else 0, smallest).factor(STRING_TRAVERSAL_COST_FACTOR) + args_sum, None
        return ONE + args_sum, None  # O(1) functions


def _expr_size(e: Expr) -> Range | None:
    """computeExprSize: what a literal, list or map spells out."""
    if e.kind == "literal":
        v = e.value
        if isinstance(v, str):
            return fixed(len(v))
        if isinstance(v, bytes):
            return fixed(len(v))
        return ONE
    if e.kind == "list":
        return fixed(len(e.args))
    if e.kind == "map":
        return fixed(len(e.args) // 2)
    return None


@dataclass(frozen=True)
class RuleCost:
    path: str  # where the rule sits, as the API server names it
    rule: str
    max_cost: int  # CompilationResult.MaxCost
    cardinality: int  # how many times the rule may run in one object
    lookups: tuple[Lookup, ...]  # every list, map and string size the estimate took from the schema

    @property
    def cost(self) -> int:
        """getExpressionCost: the estimate times the cardinality, saturating."""
        return U64 if self.max_cost and U64 // self.max_cost < self.cardinality else self.max_cost * self.cardinality

    def unbounded(self) -> list[str]:
        """The lists, maps and strings the rule touches whose size the schema does not bound."""
        unbounded_kinds = ("list", "map", "string", "bytes", "dyn")
        return sorted({".".join(x.path) for x in self.lookups if not x.decl.bounded and x.decl.kind in unbounded_kinds})


def estimate(rule: str, decl: Decl) -> tuple[int, tuple[Lookup, ...]]:
    """The MaxCost of one rule whose self has the type ``decl`` (env.EstimateCost)."""
    expr = parse(rule)
    checker = _Checker(decl)
    if checker.check(expr).kind not in ("bool", "dyn"):
        raise Unsupported(f"{rule!r} does not evaluate to a bool")
    coster = Coster(decl, checker)
    return coster.cost(expr).max, tuple(coster.lookups)


def _max_elements(node: dict[str, Any]) -> int | None:
    """extractMaxElements: how many children a node may have (None: unbounded)."""
    if node.get("type") == "object":
        if isinstance(node.get("additionalProperties"), dict):
            return max(0, node["maxProperties"]) if "maxProperties" in node else None
        return 1
    if node.get("type") == "array":
        return max(0, node["maxItems"]) if "maxItems" in node else None
    return 1


def rule_costs(openapi: dict[str, Any]) -> list[RuleCost]:
    """Every x-kubernetes-validations rule of a CRD version's openAPIV3Schema, priced as the API
    server prices it when the CRD is created or updated."""
    found: list[RuleCost] = []

    def walk(node: dict[str, Any], path: str, cardinality: int | None, root: bool) -> None:
        rules = node.get("x-kubernetes-validations") or []
        if rules:
            decl = schema_decl(node, root or bool(node.get("x-kubernetes-embedded-resource")))
            if decl is None:
                raise Unsupported(f"{path}: rules on a node CEL cannot see")
            for i, rule in enumerate(rules):
                max_cost, lookups = estimate(rule["rule"], decl)
                count = cardinality if cardinality is not None else MAX_REQUEST_SIZE_BYTES // (decl.min_size + 1)
                found.append(RuleCost(f"{path}.x-kubernetes-validations[{i}].rule", rule["rule"], max_cost, count, lookups))
        factor = _max_elements(node)
        child = None if cardinality is None or factor is None else min(cardinality * factor, U64)
        for name, sub in (node.get("properties") or {}).items():
            walk(sub, f"{path}.properties[{name}]", child, False)
        if isinstance(node.get("items"), dict):
            walk(node["items"], f"{path}.items", child, False)
        if isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"], f"{path}.additionalProperties", child, False)

    walk(openapi, "openAPIV3Schema", 1, True)
    return found


def _factor_text(cost: int, limit: int) -> str:
    factor = cost / limit
    if factor > 100.0:
        return "more than 100x"
    return f"{factor:f}x" if factor < 1.5 else f"{factor:.1f}x"


def crd_problems(crd: dict[str, Any]) -> list[str]:
    """What the API server answers (Forbidden) for a CustomResourceDefinition whose rules cost too
    much, one line per problem; empty when it accepts them."""
    problems = []
    hint = "(try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"
    for i, version in enumerate(crd["spec"]["versions"]):
        schema = (version.get("schema") or {}).get("openAPIV3Schema")
        if not schema:
            continue
        prefix = f"spec.versions[{i}].schema."
        costs = rule_costs(schema)
        for rc in costs:
            if rc.cost > STATIC_ESTIMATED_COST_LIMIT:
                problems.append(f"{prefix}{rc.path}: Forbidden: estimated rule cost exceeds budget by factor of "
                                f"{_factor_text(rc.cost, STATIC_ESTIMATED_COST_LIMIT)} {hint}")  # fmt: skip
        total = min(sum(rc.cost for rc in costs), U64)
        if total > STATIC_ESTIMATED_CRD_COST_LIMIT:
            factor = _factor_text(total, STATIC_ESTIMATED_CRD_COST_LIMIT)
            problems.append(f"{prefix}openAPIV3Schema: Forbidden: x-kubernetes-validations estimated rule cost total for entire "
                            f"OpenAPIv3 schema exceeds budget by factor of {factor} {hint}")  # fmt: skip
    return problems
