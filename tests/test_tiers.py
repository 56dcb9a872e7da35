"""The fast loop stays fast: a test that starts the server, a process group or worker processes is
marked `slow`, so `python -m pytest -m "not slow"` (CONTRIBUTING.md) leaves it out.

Read from the source, without running anything: a test starts processes when its body, a function
it calls or a fixture it takes (in its module, a conftest.py above it, or a tests/ helper module it
imports from) creates a `ServerProcess` or `CommandProcess`, calls `tiny_qwen3_server`,
`start_in_own_group`, `spawn` (multiprocessing's or torch's), a multiprocessing `Process` or a
`subprocess.Popen` (a process left running). Commands run to their end (`subprocess.run`: `ruff`,
`hadolint`, `python -m minisgl --help`) are not counted: whether they belong in the fast loop is a
question of their time, which `--durations` answers. The *_cuda.py files are marked `cuda` and
`slow` by tests/conftest.py, so they are not read here.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
STARTERS = {"ServerProcess", "CommandProcess", "tiny_qwen3_server", "start_in_own_group", "spawn", "Process", "Popen"}
# tiny_qwen3_server returns (model_dir, server, client): only the last two start the server.
SERVER_FIXTURES_OF_TINY_QWEN3 = (1, 2)


def _called_names(node: ast.AST) -> set[str]:
    names = set()
    for call in ast.walk(node):
        if isinstance(call, ast.Call):
            f = call.func
            names.add(f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else "")
    return names


def _parameters(fn: ast.FunctionDef) -> set[str]:
    return {a.arg for a in fn.args.args + fn.args.kwonlyargs}


class Module:
    """The functions of one file and which of them start processes, given what its imports start."""

    def __init__(self, path: Path, imported_starters: set[str], fixture_starters: set[str]):
        self.tree = ast.parse(path.read_text())
        self.functions = {n.name: n for n in ast.walk(self.tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        starting = set(imported_starters) | STARTERS
        fixtures = set(fixture_starters)
        for node in self.tree.body:  # model_dir, server, client = tiny_qwen3_server(...)
            if isinstance(node, ast.Assign) and "tiny_qwen3_server" in _called_names(node.value):
                target = node.targets[0]
                if isinstance(target, ast.Tuple):
                    fixtures |= {target.elts[i].id for i in SERVER_FIXTURES_OF_TINY_QWEN3 if i < len(target.elts)}
        classes = [n for n in ast.walk(self.tree) if isinstance(n, ast.ClassDef)]
        changed = True
        while changed:
            changed = False
            for cls in classes:  # a class whose methods start processes starts them when made
                if cls.name not in starting and any(isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))
                                                    and m.name in starting for m in cls.body):
                    starting.add(cls.name)
                    changed = True
            for name, fn in self.functions.items():
                if name in starting:
                    continue
                if _called_names(fn) & starting or _parameters(fn) & fixtures:
                    starting.add(name)
                    if name not in STARTERS and not name.startswith("test"):
                        fixtures.add(name)
                    changed = True
        self.starting, self.fixtures = starting, fixtures

    def imports_from_tests(self) -> dict[str, str]:
        """name -> tests module path it is imported from."""
        out = {}
        for node in self.tree.body:
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tests."):
                for alias in node.names:
                    out[alias.asname or alias.name] = node.module
        return out

    def marked_slow(self, fn: ast.FunctionDef) -> bool:
        def says_slow(node: ast.AST) -> bool:
            return any(isinstance(n, ast.Attribute) and n.attr == "slow" for n in ast.walk(node))

        module_mark = any(isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in n.targets)
                          and says_slow(n.value) for n in self.tree.body)
        return module_mark or any(says_slow(d) for d in fn.decorator_list)


def _helper_starters() -> dict[str, set[str]]:
    """For each tests/ helper module (not a test file), the functions in it that start processes."""
    out = {}
    for path in TESTS.rglob("*.py"):
        if not path.name.startswith("test_") and "crds" not in path.parts:
            module = ".".join(path.relative_to(TESTS.parent).with_suffix("").parts)
            out[module] = Module(path, set(), set()).starting - STARTERS
    return out


def _conftest_fixtures(path: Path, helpers: dict[str, set[str]]) -> set[str]:
    """The fixtures of the conftest.py files from tests/ down to `path`'s folder that start processes."""
    found: set[str] = set()
    folder = path.parent
    chain = [folder, *folder.parents]
    for directory in reversed(chain[: len(chain) - len(TESTS.parents)]):
        conftest = directory / "conftest.py"
        if conftest.exists():
            module = Module(conftest, set(), found)
            found |= {n for n in module.starting if n in module.functions}
    # Fixture plugins named in tests/conftest.py (pytest_plugins).
    found |= helpers.get("tests.lora.fixtures", set())
    return found


def unmarked_starting_tests() -> list[str]:
    helpers = _helper_starters()
    missing = []
    for path in sorted(TESTS.rglob("test_*.py")):
        if path.stem.endswith("_cuda"):
            continue
        probe = Module(path, set(), set())
        imported = {name for name, mod in probe.imports_from_tests().items() if name in helpers.get(mod, set())}
        module = Module(path, imported, _conftest_fixtures(path, helpers))
        for name, fn in module.functions.items():
            if name.startswith("test") and name in module.starting and not module.marked_slow(fn):
                missing.append(f"{path.relative_to(TESTS.parent)}::{name}")
    return missing


def test_every_test_that_starts_processes_is_marked_slow():
    missing = unmarked_starting_tests()
    assert not missing, "mark these @pytest.mark.slow (or the module: pytestmark = pytest.mark.slow):\n" + \
        "\n".join(missing)


def test_the_reading_finds_a_server_through_a_fixture_a_helper_and_a_direct_call(tmp_path):
    source = '''
import pytest
from tests.server.serving import ServerProcess, tiny_qwen3_server
model_dir, server, client = tiny_qwen3_server()

@pytest.fixture
def big_server(model_dir):
    return ServerProcess("--model", model_dir)

def start_two():
    return [ServerProcess(), ServerProcess()]

def test_direct():
    ServerProcess()

def test_through_fixture(big_server):
    pass

def test_through_module_fixture(client):
    pass

def test_through_helper():
    start_two()

def test_model_dir_only(model_dir):
    pass

@pytest.mark.slow
def test_marked(server):
    pass
'''
    path = tmp_path / "test_example.py"
    path.write_text(source)
    module = Module(path, set(), set())
    starting = {n for n in module.starting if n.startswith("test")}
    assert starting == {"test_direct", "test_through_fixture", "test_through_module_fixture", "test_through_helper",
                        "test_marked"}
    assert module.marked_slow(module.functions["test_marked"])
    assert not module.marked_slow(module.functions["test_direct"])
