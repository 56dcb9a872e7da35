"""The LICENSE file is the license pyproject.toml declares, so a wheel or a reader gets the terms
the package metadata names."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_the_license_file_is_the_one_the_package_declares():
    declared = re.search(r'^license = \{ text = "([^"]+)" \}$', (REPO / "pyproject.toml").read_text(), re.M)
    assert declared and declared.group(1) == "Apache-2.0"
    words = (REPO / "LICENSE").read_text().split()
    assert words[:4] == ["Apache", "License", "Version", "2.0,"], words[:6]
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in (REPO / "LICENSE").read_text()
