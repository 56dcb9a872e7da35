"""The --lora-modules value's form, name=path, read both where the flags are checked (the API
process, which answers to the names) and where the engine loads the adapters. Standard library only,
as minisgl/utils/choices.py is (the flags are read without torch)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def parse_lora_modules(value: Mapping[str, str] | Iterable[str] | None) -> dict[str, str]:
    """`lora_modules` as name -> path: a mapping, or `name=path` strings (the flag's form). A
    ValueError names a malformed or repeated entry."""
    if not value:
        return {}
    if isinstance(value, Mapping):
        return dict(value)
    modules: dict[str, str] = {}
    for item in value:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise ValueError(f"--lora-modules takes name=path, got {item!r}")
        if name in modules:
            raise ValueError(f"--lora-modules names {name!r} twice")
        modules[name] = path
    return modules
