"""Typed messages between processes, serialized with msgpack.

Every message is a dataclass registered by class name; `encode` tags it with that name and
`decode` rebuilds the right class, so each socket carries plain, inspectable msgpack maps.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

import msgpack

_REGISTRY: dict[str, type] = {}
T = TypeVar("T")


def message(cls: type[T]) -> type[T]:
    cls = dataclasses.dataclass(cls)
    _REGISTRY[cls.__name__] = cls
    return cls


def encode(msg: Any) -> bytes:
    fields = {f.name: getattr(msg, f.name) for f in dataclasses.fields(msg)}
    return msgpack.packb({"__type__": type(msg).__name__, **fields}, use_bin_type=True)


def decode(data: bytes) -> Any:
    obj = msgpack.unpackb(data, raw=False, strict_map_key=False)
    cls = _REGISTRY[obj.pop("__type__")]
    return cls(**obj)
