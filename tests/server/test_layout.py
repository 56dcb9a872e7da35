"""minisgl/server/ is one folder per job, imported downward only: `args` (the flags) at the bottom,
then `parsers` (reading a chat's output) and `runtime` (worker processes, supervision, the pipeline's client), then `http`
(the app and its routers) and `shell`, and `launch`, the entry points, on top. Read from every
module's source, imports inside functions included."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_import_graph import PACKAGE, imported

SERVER = PACKAGE / "server"
# What each part of the server may import of the server's other parts.
MAY_IMPORT = {
    "args": set(),
    "parsers": {"args"},
    "runtime": {"args"},
    "http": {"args", "parsers", "runtime"},
    "shell": {"runtime"},
    "launch": {"args", "runtime", "http", "shell"},
}


def part(path: Path) -> str:
    return path.relative_to(SERVER).with_suffix("").parts[0]


@pytest.mark.parametrize("path", sorted(p for p in SERVER.rglob("*.py") if p.name != "__init__.py" or p.parent != SERVER),
                         ids=lambda p: str(p.relative_to(SERVER)))
def test_each_part_of_the_server_imports_only_the_parts_below_it(path):
    own = part(path)
    used = {name.split(".")[2] for name in imported(path) if name.startswith("minisgl.server.") and name.count(".") >= 2}
    assert used - {own} <= MAY_IMPORT[own], f"{path.relative_to(SERVER)} imports {sorted(used - {own} - MAY_IMPORT[own])}"


def test_every_module_of_the_server_belongs_to_a_part():
    assert {part(p) for p in SERVER.rglob("*.py") if p != SERVER / "__init__.py"} == set(MAY_IMPORT)
