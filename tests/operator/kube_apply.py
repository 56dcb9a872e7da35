"""Server-side apply as the API server does it, for the fake API (operator_fake_kube.py): the parts
of sigs.k8s.io/structured-merge-diff and k8s.io/apimachinery ``pkg/util/managedfields`` that the
operator's applies meet.

- Typing: the applied object is typed against its kind's schema (built-in kinds: the official
  OpenAPI schemas that kubernetes-validate ships; custom resources: their vendored CRDs; metadata:
  ObjectMeta). A field the schema does not declare, where it does not preserve unknown fields,
  fails the apply with HTTP 500 "failed to create typed patch object (NS/NAME; GROUP/VERSION,
  Kind=KIND): PATH: field not declared in schema" (structuredmerge.go returns a plain error, which
  the API server turns into a 500: kubernetes/kubernetes#122480, #139253).
- Field sets: every leaf a manager set; maps by key; lists by their x-kubernetes-list-type: a
  ``map`` list's items by their keys (containers by name), a ``set`` list's items by value, an
  ``atomic`` (or undeclared) list whole. Paths print as structured-merge-diff prints them:
  ``.spec.template.spec.containers[name="server"].image``.
- Ownership: a field another manager set to another value is a conflict (409) unless the apply
  forces, which takes it over; a field the applier set before and omits now is removed unless
  another manager owns it too (an item of a map list whole, with its defaulted fields, once nobody
  holds a field of it); everyone else's fields stay. An update (``kubectl edit``) takes the
  fields it changed.
Not modelled: managedFields in the returned object (the fake keeps them beside it), field
validation of non-apply writes, and ownership of the items of an atomic list one by one.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import kubernetes_validate
import operator_crds

Obj = dict[str, Any]
# A path element: ("f", field) | ("k", ((key, value), ...)) | ("v", value) | ("i", index)
Element = tuple[str, Any]
FieldPath = tuple[Element, ...]
PRESERVE = {"x-kubernetes-preserve-unknown-fields": True}


class TypeError_(ValueError):
    """An applied object that does not fit its schema (the 500 of a real API server)."""


@functools.cache
def _definitions() -> dict[str, Obj]:
    root = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    version = kubernetes_validate.latest_version()
    return json.loads((root / f"v{version}-local-strict" / "_definitions.json").read_text())["$defs"]


@functools.cache
def _builtin(api_version: str, kind: str) -> Obj:
    group, _, version = api_version.rpartition("/")
    group = group.split(".")[0] if group else "core"
    for node in _definitions().values():
        gvks = node.get("x-kubernetes-group-version-kind") or []
        if any(g.get("kind") == kind and g.get("version") == version and (g.get("group") or "core").split(".")[0] == group for g in gvks):
            return node
    raise KeyError(f"no schema for {api_version} {kind}")


def _resolve(node: Obj | None) -> Obj | None:
    while node is not None and "$ref" in node:
        node = _definitions()[node["$ref"].rsplit("/", 1)[-1]]
    return node


OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"


def schema_of(obj: Obj) -> Obj:
    """The root schema an apply of ``obj`` is typed against."""
    if operator_crds.is_custom(obj):
        root = copy.copy(operator_crds.published()[(obj["apiVersion"], obj["kind"])])
    else:
        root = copy.copy(_builtin(obj["apiVersion"], obj["kind"]))
    root["properties"] = {**(root.get("properties") or {}), "metadata": _definitions()[OBJECT_META]}
    return root


def canonical_quantity(value: Any) -> Any:
    """A resource.Quantity as the API server stores it (1 -> "1", "4000m" -> "4")."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, str) and value.endswith("m") and value[:-1].isdigit():
        milli = Decimal(value[:-1])
        return str(int(milli / 1000)) if milli % 1000 == 0 else value
    return value


def _is_quantity(node: Obj | None) -> bool:
    return bool(node) and node.get("$ref", "").endswith("resource.Quantity")


def _child(node: Obj | None, key: str) -> Obj | None:
    """The (unresolved) schema of field ``key`` of an object; PRESERVE where anything goes; None: undeclared."""
    node = _resolve(node)
    if node is None or node.get("x-kubernetes-int-or-string"):
        return PRESERVE
    props = node.get("properties") or {}
    if key in props:
        return props[key] or PRESERVE
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        return extra
    if node.get("x-kubernetes-preserve-unknown-fields") or extra is True or not props:
        return PRESERVE
    return None


def _list_kind(node: Obj | None) -> tuple[str, tuple[str, ...]]:
    node = _resolve(node) or {}
    kind = node.get("x-kubernetes-list-type", "atomic")
    return kind, tuple(node.get("x-kubernetes-list-map-keys") or ())


def _item_schema(node: Obj | None) -> Obj:
    node = _resolve(node) or {}
    return _resolve(node.get("items")) or PRESERVE


def format_path(path: FieldPath) -> str:
    out = ""
    for kind, value in path:
        if kind == "f":
            out += f".{value}"
        elif kind == "k":
            out += "[" + ",".join(f"{k}={json.dumps(v)}" for k, v in value) + "]"
        elif kind == "v":
            out += f"[={json.dumps(value)}]"
        else:
            out += f"[{value}]"
    return out


def fields(value: Any, node: Obj | None, path: FieldPath = ()) -> Iterator[tuple[FieldPath, Any]]:
    """The leaves of ``value`` with their field paths; raises TypeError_ on an undeclared field.
    Quantities are compared as the API server stores them."""
    if _is_quantity(node):
        yield path, canonical_quantity(value)
        return
    node = _resolve(node)
    if isinstance(value, dict) and value:
        for key, sub in value.items():
            child = _child(node, key)
            if child is None:
                raise TypeError_(f"{format_path((*path, ('f', key)))}: field not declared in schema")
            yield from fields(sub, child, (*path, ("f", key)))
        return
    if isinstance(value, list) and value:
        kind, keys = _list_kind(node)
        item_schema = _item_schema(node)
        if kind == "map" and keys and all(isinstance(i, dict) for i in value):
            for item in value:
                element = ("k", tuple((k, item.get(k)) for k in keys))
                yield from fields(item, item_schema, (*path, element))
            return
        if kind == "set":
            for item in value:
                yield (*path, ("v", item)), item
            return
        for i, item in enumerate(value):  # atomic: typed item by item, owned whole
            for _ in fields(item, item_schema, (*path, ("i", i))):
                pass
    yield path, value


def fieldset(obj: Obj) -> dict[FieldPath, Any]:
    """What an apply of ``obj`` sets: every leaf but the identity fields and status."""
    body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "status")}
    not_applied = ("name", "namespace", "managedFields", "resourceVersion", "uid", "creationTimestamp", "generation")
    meta = {k: v for k, v in (body.get("metadata") or {}).items() if k not in not_applied}
    body["metadata"] = meta
    if not meta:
        del body["metadata"]
    return dict(fields(body, schema_of(obj)))


def _find(container: Any, element: Element, create: bool) -> tuple[Any, Any]:
    """(container, key) addressing ``element`` inside ``container``, creating list items if asked."""
    kind, value = element
    if kind == "f":
        return container, value
    for i, item in enumerate(container):
        if (kind == "k" and isinstance(item, dict) and all(item.get(k) == v for k, v in value)) or (kind == "v" and item == value):
            return container, i
    if not create:
        return container, None
    container.append({k: v for k, v in value} if kind == "k" else value)
    return container, len(container) - 1


def get(obj: Any, path: FieldPath) -> Any:
    node = obj
    for element in path:
        if node is None:
            return None
        if element[0] == "f":
            node = node.get(element[1]) if isinstance(node, dict) else None
        else:
            if not isinstance(node, list):
                return None
            _, i = _find(node, element, create=False)
            node = None if i is None else node[i]
    return node


def set_(obj: Obj, path: FieldPath, value: Any) -> None:
    node: Any = obj
    for depth, element in enumerate(path):
        last = depth == len(path) - 1
        container, key = _find(node, element, create=True)
        if last:
            container[key] = copy.deepcopy(value)
            return
        if element[0] == "f" and not isinstance(container.get(key), (dict, list)):
            container[key] = [] if path[depth + 1][0] in ("k", "v") else {}
        node = container[key]


def _prune(obj: Obj, path: FieldPath) -> None:
    """Remove the maps and list items that the removal of ``path`` left empty."""
    for depth in range(len(path) - 1, 0, -1):
        if get(obj, path[:depth]) not in ({}, []):
            return
        container, key = _find(get(obj, path[: depth - 1]), path[depth - 1], create=False)
        if key is not None:
            del container[key]


def delete(obj: Obj, path: FieldPath) -> None:
    parent = get(obj, path[:-1]) if len(path) > 1 else obj
    if not isinstance(parent, (dict, list)):
        return
    container, key = _find(parent, path[-1], create=False)
    if key is None or (isinstance(container, dict) and key not in container):
        return
    del container[key]
    _prune(obj, path)


def _is_key_field(path: FieldPath) -> bool:
    """Whether ``path`` is a key field of a map list's item (``containers[name="x"].name``)."""
    return len(path) >= 2 and path[-2][0] == "k" and path[-1][0] == "f" and path[-1][1] in dict(path[-2][1])


class Conflict(Exception):
    def __init__(self, conflicts: list[tuple[str, FieldPath]], api_version: str):
        self.conflicts = conflicts
        managers = sorted({m for m, _ in conflicts})
        lines = [f"conflict with \"{m}\" using {api_version}: {format_path(p)}" for m, p in conflicts]
        n = len(conflicts)
        message = f"Apply failed with {n} conflict{'s' if n > 1 else ''}: " + ("; ".join(lines))
        self.managers = managers
        super().__init__(message)


def apply(live: Obj | None, applied: Obj, managed: dict[str, set[FieldPath]], manager: str, force: bool) -> Obj:
    """The object after ``manager`` applies ``applied`` onto ``live`` (None: a create); updates
    ``managed`` (manager -> the field paths it owns) in place."""
    new_fields = fieldset(applied)  # raises TypeError_ first, as the API server types the patch first
    result = copy.deepcopy(live) if live is not None else {
        "apiVersion": applied["apiVersion"], "kind": applied["kind"],
        "metadata": {"name": applied["metadata"]["name"], "namespace": applied["metadata"].get("namespace")},
    }  # fmt: skip
    conflicts = []
    for path, value in new_fields.items():
        for other, owned in managed.items():
            if other != manager and path in owned and get(result, path) != value:
                conflicts.append((other, path))
    if conflicts and not force:
        raise Conflict(conflicts, applied["apiVersion"])
    for other, path in conflicts:
        managed[other].discard(path)
    others = set().union(*(owned for m, owned in managed.items() if m != manager)) if managed else set()
    kept = others | set(new_fields)
    # Key fields last: the item of a map list is found by its key. An item whose key the applier
    # dropped and nobody else holds a field of goes whole, the fields defaulted into it with it.
    for path in sorted(managed.get(manager, set()) - kept, key=_is_key_field):
        item = path[:-1]
        if _is_key_field(path) and not any(p[: len(item)] == item for p in kept):
            delete(result, item)
        else:
            delete(result, path)
    for path, value in new_fields.items():
        set_(result, path, value)
    result["apiVersion"] = applied["apiVersion"]
    managed[manager] = set(new_fields)
    return result


def update(before: Obj, after: Obj, managed: dict[str, set[FieldPath]], manager: str) -> None:
    """An update (PUT, kubectl edit) by ``manager``: it owns what it changed; nobody owns what it removed."""
    old, new = fieldset(before), fieldset(after)
    changed = {p for p, v in new.items() if old.get(p, object()) != v}
    gone = set(old) - set(new)
    for owned in managed.values():
        owned -= changed | gone
    managed.setdefault(manager, set()).update(changed)
