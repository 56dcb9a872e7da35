"""The README's Layout section names every folder of the package, and only folders that exist."""

from __future__ import annotations

import pathlib
import re

REPO = pathlib.Path(__file__).resolve().parents[1]


def layout_section() -> str:
    text = (REPO / "README.md").read_text()
    return text.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]


def test_every_package_folder_is_in_the_layout_and_every_listed_one_exists():
    package = {f"minisgl/{p.parent.name}" for p in (REPO / "minisgl").glob("*/__init__.py")}
    listed = set(re.findall(r"^\| `(minisgl/[a-z_]+)` \|", layout_section(), flags=re.M))
    assert listed == package, {"missing": package - listed, "not a folder": listed - package}

