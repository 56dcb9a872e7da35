"""Where tests/tools/tool_venv.bash installs the tools that live in virtual environments of their
own (checkov, LiteLLM): one rule, read by the tests that run them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def tool_venv(name: str) -> Path:
    """$MINISGL_<NAME>_VENV, else .tool-venvs/<name>-venv in the checkout (git ignores it): the tests
    keep out of the user's home directory."""
    override = os.environ.get(f"MINISGL_{name.upper()}_VENV")
    if override:
        return Path(override)
    return REPO / ".tool-venvs" / f"{name}-venv"


def tool_binary(name: str, binary: str) -> Path:
    """`binary` in `name`'s venv; the test fails (not skips) when it is missing: a missing tool is a
    broken set-up, not a reason to pass."""
    path = tool_venv(name) / "bin" / binary
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(f"{name} is not installed at {path}: run `bash tests/tools/{name}.sh`")
    return path
