"""The package passes the type checker (mypy) under the configuration in pyproject.toml ([tool.mypy]).

A test rather than a separate CI step, as tests/test_lint.py is for ruff: the README's test command
then type-checks too. The modules that had errors when the checker came in are listed there (a
ratchet that only shrinks); every other module must stay clean. mypy is pinned in the test extras,
so the same version judges every run. Slow: a cold run analyses torch's and pydantic's types too
(its cache, .mypy_cache in the checkout, makes reruns quick), so it starts with the session and runs
in the background at the lowest CPU priority (tests/background.py).
"""

from __future__ import annotations

import sys

import pytest

from tests import background

MYPY = [sys.executable, "-m", "mypy"]  # started with the session, in the background (tests/conftest.py)


@pytest.mark.slow
def test_the_package_type_checks():
    result = background.run_command("mypy", MYPY)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert "Success: no issues found" in result.stdout
