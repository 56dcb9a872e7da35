"""Shared by the structured-output tests: schemas that compile fast or for minutes, and the compile
worker processes this test process started."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import psutil


def nested_schema(depth: int) -> str:
    """Objects nested `depth` deep, inline: compile time grows steeply with it (a crafted
    schema nested 450 deep compiled for minutes)."""
    schema = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
    return json.dumps(schema)


def slow_schema(depth: int = 550, branches: int = 4) -> str:
    """An object of `branches` arrays each nested `depth` deep, ending in different types (xgrammar
    shares the rules of identical branches): far slower to compile than one branch as deep, and
    never nested deeper than json's recursion limit allows (xgrammar 0.2.9 compiles nested_schema(400)
    in seconds; benchmark/NOTES.md)."""
    props = {}
    for i in range(branches):
        schema: dict = {"type": ["string", "integer", "boolean", "number"][i % 4]}
        for _ in range(depth):
            schema = {"type": "array", "items": schema}
        props[f"b{i}"] = schema
    return json.dumps({"type": "object", "properties": props, "required": list(props)})


SLOW_SCHEMA = slow_schema()  # compiles for far longer than any budget these tests set
SIMPLE_SCHEMA = json.dumps({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
                            "additionalProperties": False})


def compile_workers() -> set[int]:
    """Pids of the live grammar compile workers that this process started."""
    pids = set()
    for p in psutil.Process().children():
        try:
            if "minisgl.constrained.worker" in p.cmdline() and p.status() != psutil.STATUS_ZOMBIE:
                pids.add(p.pid)
        except psutil.NoSuchProcess:
            pass
    return pids


def wait_until(done: Callable[[], bool], what: str, timeout: float = 600) -> None:
    """Poll until `done()`; a hang guard, not a timing assertion (workers start slowly on a busy machine)."""
    give_up = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < give_up, f"{what}: not after {timeout} s"
        time.sleep(0.05)
