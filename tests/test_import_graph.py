"""The folders of minisgl import each other downward only, read from every module's source (ast;
imports inside functions and under TYPE_CHECKING count too, as they couple the folders all the
same):

- minisgl/kernels/ is the bottom: it imports nothing of minisgl but itself and minisgl/utils/
  (no model, layer, quantization, attention, engine, scheduler or server code);
- minisgl/layers/ does not import minisgl/quantization/ (quantization builds on the layers);
- minisgl/server/ is the top: only the entry point above it (`python -m minisgl`,
  minisgl/__main__.py) imports it, and it does not import that back;
- minisgl/benchmark/ (what the benchmarks and the server tests share) stands beside: no other
  folder imports it;
- over all folders and top-level modules, no cycle;
- and the README's Layout table lists the folders in an order the imports keep: each folder
  imports only folders listed above it (utils at the bottom, the server and the benchmark support
  at the top).

Each package says what it is for in its `__init__` docstring.
"""

from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path

import minisgl
from tests.test_readme_layout import layout_section

PACKAGE = Path(minisgl.__file__).parent
ENTRY_POINTS = {"__main__"}


def module_name(path: Path) -> tuple[str, ...]:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return parts[:-1] if parts[-1] == "__init__" else parts


def imported(path: Path) -> set[str]:
    """The dotted names a module imports (relative imports resolved; `from a import b` gives both
    a and a.b, as b may be a module)."""
    own = module_name(path)
    package = own if path.name == "__init__.py" else own[:-1]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ((node.module,) if node.module else ()))
            else:
                base = node.module
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def folder(name: str) -> str | None:
    """The folder (or top-level module) of minisgl that a dotted name lies in; None outside it."""
    parts = name.split(".")
    if parts[0] != "minisgl" or len(parts) < 2:
        return None
    return parts[1] if (PACKAGE / parts[1]).is_dir() or (PACKAGE / f"{parts[1]}.py").is_file() else None


def imports_of(source_folder: str) -> list[tuple[str, str]]:
    """(file, folder it imports) for every module of a folder of minisgl, its own folder left out."""
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if folder(".".join(module_name(path))) != source_folder:
            continue
        for name in imported(path):
            target = folder(name)
            if target is not None and target != source_folder:
                out.append((str(path.relative_to(PACKAGE.parent)), target))
    return sorted(set(out))


def folders() -> set[str]:
    return {folder(".".join(module_name(path))) for path in PACKAGE.rglob("*.py")} - {None}


def test_the_graph_sees_every_kind_of_import():
    """Relative, absolute, `from package import module` and imports inside functions: else the
    rules below could pass by not seeing an import."""
    assert ("minisgl/layers/moe.py", "kernels") in imports_of("layers")  # in a function
    assert ("minisgl/layers/moe.py", "distributed") in imports_of("layers")  # absolute, at the top
    assert ("minisgl/attention/flashinfer.py", "prebuild") in imports_of("attention")  # a top-level module
    assert ("minisgl/kernels/dispatch.py", "utils") in imports_of("kernels")  # `from minisgl.utils import env`
    assert {"kernels", "layers", "quantization", "server", "engine", "__main__"} <= folders()


def test_kernels_import_nothing_of_minisgl_but_utils():
    above = [(path, target) for path, target in imports_of("kernels") if target != "utils"]
    assert not above, f"minisgl/kernels/ is the bottom of the import graph: {above}"


def test_layers_do_not_import_quantization():
    assert not [(p, t) for p, t in imports_of("layers") if t == "quantization"]


def test_only_the_entry_points_import_the_server():
    below = [(path, target) for source in folders() - ENTRY_POINTS - {"server"}
             for path, target in imports_of(source) if target == "server"]
    assert not below, f"the server is the top of the import graph: {below}"


def test_the_server_imports_no_entry_point():
    assert not [(p, t) for p, t in imports_of("server") if t in ENTRY_POINTS]


def test_no_folder_imports_the_benchmark_support():
    users = [(path, target) for source in folders() - {"benchmark"}
             for path, target in imports_of(source) if target == "benchmark"]
    assert not users, f"minisgl/benchmark/ is support for the benchmarks and tests, beside the package: {users}"


def folder_graph() -> dict[str, dict[str, list[str]]]:
    """{folder: {folder it imports: the files that import it}}."""
    graph: dict[str, dict[str, list[str]]] = {source: {} for source in folders()}
    for source, targets in graph.items():
        for path, target in imports_of(source):
            targets.setdefault(target, []).append(path)
    return graph


def find_cycle(graph: dict[str, dict[str, list[str]]]) -> list[str] | None:
    """A cycle of the graph as the folders along it, the first repeated at the end; None if none.
    Depth-first: an edge back to a folder still on the path closes a cycle."""
    done: set[str] = set()
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if target in path:
                return path[path.index(target):] + [target]
            if target not in done:
                cycle = visit(target)
                if cycle:
                    return cycle
        path.pop()
        done.add(node)
        return None

    for start in sorted(graph):
        if start not in done:
            cycle = visit(start)
            if cycle:
                return cycle
    return None


def test_a_cycle_is_found_and_named():
    """The search below cannot pass by missing a cycle: a long one behind an acyclic part is found."""
    graph = {"d": {"a": ["d.py"]}, "a": {"b": ["a.py"]}, "b": {"c": ["b.py"], "e": ["b.py"]},
             "c": {"a": ["c.py"]}, "e": {}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"a": []}}) == ["a", "a"]
    assert find_cycle({"a": {"b": []}, "b": {}, "c": {"b": []}}) is None


def test_the_folder_graph_has_no_cycle():
    graph = folder_graph()
    cycle = find_cycle(graph)
    if cycle:
        edges = "\n".join(f"  {a} -> {b}: {', '.join(graph[a][b])}" for a, b in itertools.pairwise(cycle))
        raise AssertionError(f"folders import each other in a cycle, {' -> '.join(cycle)}:\n{edges}")


def test_every_package_says_what_it_is_for():
    packages = sorted({path.parent for path in PACKAGE.rglob("*.py")})
    undocumented = [str(package.relative_to(PACKAGE.parent)) for package in packages
                    if not (package / "__init__.py").is_file()
                    or not ast.get_docstring(ast.parse((package / "__init__.py").read_text()))]
    assert not undocumented, f"packages without an __init__ docstring: {undocumented}"


def test_each_folder_imports_only_folders_above_it_in_the_readme_layout():
    order = re.findall(r"^\| `minisgl/([a-z_]+)` \|", layout_section(), flags=re.MULTILINE)
    rank = {name: i for i, name in enumerate(order)}
    upward = [f"{path} imports {target}, which the table lists after {source}" for source in order
              for path, target in imports_of(source) if rank.get(target, -1) > rank[source]]
    assert not upward, "README.md's Layout lists the folders from the bottom of the import graph up:\n" + \
        "\n".join(upward)
