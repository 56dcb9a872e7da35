"""The operator package's shape: its ``__init__`` lists every module, lowest first, and a module imports
only modules listed above it (so there is no import cycle, and none is hidden inside a function)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import minisgl_operator

PACKAGE = Path(minisgl_operator.__file__).parent


def listed_modules() -> list[str]:
    """The module names of the package docstring's map, in its order."""
    return re.findall(r"^- ``(\w+)``", minisgl_operator.__doc__ or "", flags=re.MULTILINE)


def package_imports(path: Path) -> list[tuple[str, bool]]:
    """(module of this package that ``path`` imports, whether the import is at the top level)."""
    tree = ast.parse(path.read_text())
    top = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            names = [node.module] if node.module else [alias.name for alias in node.names]
            found += [(name.split(".")[0], id(node) in top) for name in names]
    return found


def test_the_package_docstring_lists_every_module_once():
    modules = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem not in ("__init__", "__main__"))
    listed = listed_modules()
    assert sorted(listed) == modules
    assert len(set(listed)) == len(listed)


def test_each_module_imports_only_modules_listed_above_it_at_its_top_level():
    order = {name: i for i, name in enumerate(listed_modules())}
    for path in PACKAGE.glob("*.py"):
        if path.stem in ("__init__", "__main__"):
            continue
        for imported, at_top in package_imports(path):
            if imported == "__version__":
                continue
            assert at_top, f"{path.name} imports {imported} inside a function (an import cycle hidden there)"
            assert order[imported] < order[path.stem], f"{path.name} imports {imported}, listed below it"
