"""The server's environment variables are declared once, in minisgl.utils.env, and read only there."""

from __future__ import annotations

import pathlib
import re

from minisgl.utils import env

PACKAGE = pathlib.Path(env.__file__).parents[1]
READS = re.compile(r"os\.environ\.get\(|os\.getenv\(|os\.environ\[")
# prebuild.py sets variables for the FlashInfer build it starts; server_process.py hands a copy of
# the environment to the server it starts. Neither reads a setting.
NOT_READERS = {"utils/env.py", "prebuild.py", "benchmark/server_process.py"}


def test_no_module_reads_the_environment_directly():
    readers = [str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
               if str(p.relative_to(PACKAGE)) not in NOT_READERS and READS.search(p.read_text())]
    assert readers == []


def test_every_minisgl_variable_named_in_the_package_is_declared():
    declared = {v.name for v in env.ALL}
    named = {m for p in PACKAGE.rglob("*.py") for m in re.findall(r"\bMINISGL_[A-Z0-9_]+\b", p.read_text())}
    assert named <= declared, named - declared
    assert len(declared) == len(env.ALL)


def test_a_switch_is_on_only_when_set_to_1(monkeypatch):
    var = env.DISABLE_OVERLAP
    monkeypatch.delenv(var.name, raising=False)
    assert (var.is_set(), var.on(), var.get()) == (False, False, "0")
    monkeypatch.setenv(var.name, "0")
    assert (var.is_set(), var.on()) == (True, False)
    monkeypatch.setenv(var.name, "1")
    assert var.on()


def test_variables_are_read_when_asked_not_at_import(monkeypatch):
    monkeypatch.setenv(env.LOG_LEVEL.name, "debug")
    assert env.LOG_LEVEL.get() == "debug"
