"""Reading the repository's Dockerfiles with a real parser, and finding the linters they pass.

The parser is the `dockerfile` package, a binding of Docker's own (Go) Dockerfile parser, so a test
sees the instructions exactly as `docker build` would. The linters are installed by
tests/tools/docker.sh; the paths here must stay in step with that script.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import dockerfile
import pytest

from tests.tool_venvs import tool_binary

REPO = Path(__file__).resolve().parents[2]
GPU_DOCKERFILE = REPO / "Dockerfile"
OPERATOR_DOCKERFILE = REPO / "operator" / "Dockerfile"
DOCKERFILES = {"gpu": GPU_DOCKERFILE, "operator": OPERATOR_DOCKERFILE}
HADOLINT_CONFIG = REPO / ".hadolint.yaml"
DOCKERIGNORE = REPO / ".dockerignore"
INSTALL_HINT = "install the tools with `bash tests/tools/docker.sh`"


@dataclass(frozen=True)
class Stage:
    """One build stage: its FROM line and the instructions after it."""

    base: str
    name: str | None
    commands: tuple[dockerfile.Command, ...]

    def all(self, cmd: str) -> list[dockerfile.Command]:
        return [c for c in self.commands if c.cmd == cmd.upper()]

    def last(self, cmd: str) -> dockerfile.Command:
        found = self.all(cmd)
        assert found, f"stage {self.name or self.base!r} has no {cmd.upper()} instruction"
        return found[-1]

    def env(self) -> dict[str, str]:
        """ENV values (later ones win), as the parser splits them into key/value pairs."""
        out: dict[str, str] = {}
        for c in self.all("ENV"):
            pairs = c.value
            out.update(dict(zip(pairs[0::2], pairs[1::2])))
        return out

    def args(self) -> dict[str, str | None]:
        """ARG defaults declared in this stage."""
        out: dict[str, str | None] = {}
        for c in self.all("ARG"):
            for item in c.value:
                name, _, default = item.partition("=")
                out[name] = default.strip('"') if "=" in item else None
        return out

    def labels(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for c in self.all("LABEL"):
            pairs = c.value
            for key, raw in zip(pairs[0::2], pairs[1::2]):
                out[key] = " ".join(shlex.split(raw))  # the parser keeps the quotes
        return out

    def run_text(self) -> str:
        """Every RUN of the stage, joined: what its shell will execute."""
        return "\n".join(" ".join(c.value) for c in self.all("RUN"))


def global_args(path: Path) -> dict[str, str | None]:
    """The ARGs declared before the first FROM (the only ones FROM lines can use), with defaults."""
    out: dict[str, str | None] = {}
    for command in dockerfile.parse_file(str(path)):
        if command.cmd == "FROM":
            break
        if command.cmd == "ARG":
            for item in command.value:
                name, _, default = item.partition("=")
                out[name] = default.strip('"') if "=" in item else None
    return out


def resolve(value: str, args: dict[str, str | None]) -> str:
    """A FROM/LABEL value with `${NAME}` replaced by the build argument's default."""
    return re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1)) or "", value)


def parse(path: Path) -> list[Stage]:
    """The build stages of a Dockerfile, in order."""
    stages: list[Stage] = []
    current: list[dockerfile.Command] = []
    header: tuple[str, str | None] | None = None
    for command in dockerfile.parse_file(str(path)):
        if header is None and command.cmd == "ARG":
            continue  # global build arguments: global_args()
        if command.cmd == "FROM":
            if header is not None:
                stages.append(Stage(header[0], header[1], tuple(current)))
            value = command.value
            name = value[2] if len(value) == 3 and value[1].upper() == "AS" else None
            header, current = (value[0], name), []
        else:
            assert header is not None, f"{path}: {command.cmd} before the first FROM"
            current.append(command)
    assert header is not None, f"{path} has no FROM"
    stages.append(Stage(header[0], header[1], tuple(current)))
    return stages


def final_stage(path: Path) -> Stage:
    """The stage `docker build` tags as the image (the last one)."""
    return parse(path)[-1]


def exec_form(command: dockerfile.Command) -> list[str]:
    """The argv of an ENTRYPOINT/CMD, which must be in exec (JSON) form to be predictable."""
    assert command.json, f"{command.original!r} must use the exec (JSON) form"
    return list(command.value)


def healthcheck_argv(command: dockerfile.Command) -> list[str]:
    assert command.json, f"{command.original!r} must use the exec (JSON) form"
    kind, *argv = command.value
    assert kind == "CMD", f"HEALTHCHECK {kind} is not a check"
    return argv


def dockerignore_patterns() -> list[str]:
    """.dockerignore as the Docker CLI reads it: stripped lines, no blanks, no comments."""
    lines = [line.strip() for line in DOCKERIGNORE.read_text().splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


# ---------------------------------------------------------------------------------------------
# The linters, where tests/tools/docker.sh puts them. Missing ones fail the test, never skip it.


def hadolint_path() -> str:
    beside_python = Path(sys.executable).parent / "hadolint"
    if beside_python.is_file() and os.access(beside_python, os.X_OK):
        return str(beside_python)
    found = shutil.which("hadolint")
    if found is None:
        pytest.fail(f"hadolint is not installed: {INSTALL_HINT}")
    return found


def checkov_path() -> str:
    return str(tool_binary("checkov", "checkov"))
