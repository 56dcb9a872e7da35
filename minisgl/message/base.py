"""Typed messages between processes, serialized with msgpack.

Every message is a dataclass registered in order of definition; on the wire it is a msgpack
array `[class index, field values...]`. Messages nest: a field annotated with a registered class
M travels as M's field-value array, one annotated `list[M]` as a list of them, and both come
back as M objects. So `TokenizedRequestMsg` carries `SamplingParams` and a batch message carries `StepOutput`
or `Reply` objects end to end, with no dicts of field names on the wire and no conversions at
each hop.
"""

from __future__ import annotations

import dataclasses
import sys
import typing
from typing import Any, TypeVar

import msgpack

if sys.version_info >= (3, 11):
    from typing import dataclass_transform
else:
    from typing_extensions import dataclass_transform

T = TypeVar("T")
_CLASSES: list[type] = []
_INDEX: dict[type, int] = {}
_FIELDS: dict[type, tuple[str, ...]] = {}
_NESTED: dict[type, dict[int, tuple[type, bool]]] = {}  # per class: field position -> (M, whether list[M])


@dataclass_transform()  # type checkers then see a message's fields as a dataclass's
def message(cls: type[T]) -> type[T]:
    """Register `cls`, made a dataclass unless it is one already (SamplingParams, from minisgl.core)."""
    if not dataclasses.is_dataclass(cls):
        cls = dataclasses.dataclass(cls)
    names = tuple(f.name for f in dataclasses.fields(cls))
    hints = typing.get_type_hints(cls)
    nested = {}
    for i, name in enumerate(names):
        hint, args = hints[name], typing.get_args(hints[name])
        if hint in _INDEX:
            nested[i] = (hint, False)
        elif typing.get_origin(hint) is list and args and args[0] in _INDEX:
            nested[i] = (args[0], True)
    _INDEX[cls], _FIELDS[cls], _NESTED[cls] = len(_CLASSES), names, nested
    _CLASSES.append(cls)
    return cls


def _values(obj: Any) -> list:
    cls = type(obj)
    values = [getattr(obj, name) for name in _FIELDS[cls]]
    for i, (_, many) in _NESTED[cls].items():
        values[i] = [_values(item) for item in values[i]] if many else _values(values[i])
    return values


def _build(cls: type, values: list) -> Any:
    for i, (item_cls, many) in _NESTED[cls].items():
        values[i] = [_build(item_cls, v) for v in values[i]] if many else _build(item_cls, values[i])
    return cls(*values)


def encode(msg: Any) -> bytes:
    if type(msg) not in _INDEX:
        raise TypeError(f"cannot send a {type(msg).__name__}: not a registered message")
    return msgpack.packb([_INDEX[type(msg)], *_values(msg)], use_bin_type=True)


def decode(data: bytes) -> Any:
    index, *values = msgpack.unpackb(data, raw=False, strict_map_key=False)
    return _build(_CLASSES[index], values)
