"""The package passes the type checker (mypy) under the configuration in pyproject.toml ([tool.mypy]).

A test rather than a separate CI step, as tests/test_lint.py is for ruff: the README's test command
then type-checks too. The modules that had errors when the checker came in are listed there (a
ratchet that only shrinks); every other module must stay clean. mypy is pinned in the test extras,
so the same version judges every run. Slow: a cold run analyses torch's and pydantic's types too
(its cache, .mypy_cache in the checkout, makes reruns quick).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_package_type_checks():
    result = subprocess.run([sys.executable, "-m", "mypy"], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert "Success: no issues found" in result.stdout
