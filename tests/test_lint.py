"""The repository passes `ruff check` under the configuration in pyproject.toml ([tool.ruff]).

A test rather than a separate CI step: the README's one test command then checks style too, so a
change that breaks the lint rules (an unsorted import, a shadowed name, a line past the limit)
fails where every other regression fails, with no second command to remember. ruff is pinned in
the test extras, so the same version judges every run.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_ruff_check_reports_nothing():
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "."], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, f"ruff check . failed:\n{result.stdout}{result.stderr}"
