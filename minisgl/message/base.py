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
import itertools
import operator
import sys
import typing
from collections.abc import Callable
from typing import Any, TypeVar

import msgpack

if sys.version_info >= (3, 11):
    from typing import dataclass_transform
else:
    from typing_extensions import dataclass_transform

T = TypeVar("T")
_CLASSES: list[type] = []
_INDEX: dict[type, int] = {}
_NESTED: dict[type, dict[int, tuple[type, bool]]] = {}  # per class: field position -> (M, whether list[M])
# Per class, its field values as a tuple, read in C (operator.attrgetter): the scheduler encodes a
# StepOutput for every running request at every step, on the thread that launches the GPU's work.
_GETTERS: dict[type, Callable[[Any], tuple]] = {}


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
    _INDEX[cls], _NESTED[cls] = len(_CLASSES), nested
    # (attrgetter of one name returns the value itself, of none it cannot be made)
    _GETTERS[cls] = operator.attrgetter(*names) if len(names) > 1 else lambda obj: tuple(getattr(obj, n) for n in names)
    _CLASSES.append(cls)
    return cls


def _values(obj: Any) -> list | tuple:
    cls = type(obj)
    nested = _NESTED[cls]
    if not nested:
        return _GETTERS[cls](obj)  # msgpack packs a tuple as an array
    values = list(_GETTERS[cls](obj))
    for i, (item_cls, many) in nested.items():
        if not many:
            values[i] = _values(values[i])
        elif _NESTED[item_cls]:
            values[i] = [_values(item) for item in values[i]]
        else:
            values[i] = list(map(_GETTERS[item_cls], values[i]))
    return values


def _build(cls: type, values: list) -> Any:
    for i, (item_cls, many) in _NESTED[cls].items():
        if not many:
            values[i] = _build(item_cls, values[i])
        elif _NESTED[item_cls]:
            values[i] = [_build(item_cls, v) for v in values[i]]
        else:
            values[i] = list(itertools.starmap(item_cls, values[i]))
    return cls(*values)


def encode(msg: Any) -> bytes:
    if type(msg) not in _INDEX:
        raise TypeError(f"cannot send a {type(msg).__name__}: not a registered message")
    return msgpack.packb([_INDEX[type(msg)], *_values(msg)], use_bin_type=True)


def decode(data: bytes) -> Any:
    index, *values = msgpack.unpackb(data, raw=False, strict_map_key=False)
    return _build(_CLASSES[index], values)
