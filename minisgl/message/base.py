"""Typed messages between processes, serialized with msgpack.

Every message is a dataclass registered in order of definition; on the wire it is a msgpack
array `[class index, field values...]`. Messages nest: a field annotated `list[M]`, M a
registered message, travels as a list of M's field-value arrays and comes back as M objects, so
a batch message carries `StepOutput` or `Reply` objects end to end, with no per-item dicts of
field names on the wire and no conversions at each hop.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, TypeVar

import msgpack

T = TypeVar("T")
_CLASSES: list[type] = []
_INDEX: dict[type, int] = {}
_FIELDS: dict[type, tuple[str, ...]] = {}
_NESTED: dict[type, dict[int, type]] = {}  # per class: position of a list[M] field -> M


def message(cls: type[T]) -> type[T]:
    cls = dataclasses.dataclass(cls)
    names = tuple(f.name for f in dataclasses.fields(cls))
    hints = typing.get_type_hints(cls)
    nested = {}
    for i, name in enumerate(names):
        hint = hints[name]
        if typing.get_origin(hint) is list and typing.get_args(hint) and typing.get_args(hint)[0] in _INDEX:
            nested[i] = typing.get_args(hint)[0]
    _INDEX[cls], _FIELDS[cls], _NESTED[cls] = len(_CLASSES), names, nested
    _CLASSES.append(cls)
    return cls


def _values(obj: Any) -> list:
    cls = type(obj)
    values = [getattr(obj, name) for name in _FIELDS[cls]]
    for i in _NESTED[cls]:
        values[i] = [_values(item) for item in values[i]]
    return values


def _build(cls: type, values: list) -> Any:
    for i, item_cls in _NESTED[cls].items():
        values[i] = [_build(item_cls, v) for v in values[i]]
    return cls(*values)


def encode(msg: Any) -> bytes:
    if type(msg) not in _INDEX:
        raise TypeError(f"cannot send a {type(msg).__name__}: not a registered message")
    return msgpack.packb([_INDEX[type(msg)], *_values(msg)], use_bin_type=True)


def decode(data: bytes) -> Any:
    index, *values = msgpack.unpackb(data, raw=False, strict_map_key=False)
    return _build(_CLASSES[index], values)
