"""docs/life-of-a-request.md stays true: the files it names exist, the messages it names are the
pipeline's, each hop's message is built by the file the table says sends it and read by the one
that receives it, every message the pipeline declares is on the page, and each `Class.method` it
names is defined in the package. A rename or a new message that the page does not follow fails
here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGE = (REPO / "docs" / "life-of-a-request.md").read_text()
MESSAGES = REPO / "minisgl" / "message" / "messages.py"


def declared_messages() -> set[str]:
    tree = ast.parse(MESSAGES.read_text())
    return {n.name for n in tree.body if isinstance(n, ast.ClassDef)
            and any(getattr(d, "id", None) == "message" for d in n.decorator_list)}


def hops() -> list[tuple[str, str, str]]:
    """(message, sender file, receiver file) of each row of the page's table."""
    rows = re.findall(r"^\| \d+ \| `(\w+)` \| `([\w/.]+)` \| `([\w/.]+)` \|$", PAGE, flags=re.M)
    assert len(rows) >= 5, "the page has no table of hops"
    return rows


def test_every_file_and_folder_the_page_names_exists():
    named = set(re.findall(r"`(minisgl/[\w/.]*)`", PAGE))
    missing = sorted(p for p in named if not (REPO / p).exists())
    assert not missing, f"docs/life-of-a-request.md names what is not there: {missing}"


def test_each_hop_is_built_by_its_sender_and_read_by_its_receiver():
    messages = declared_messages()
    for message, sender, receiver in hops():
        assert message in messages, f"{message} is not declared in minisgl/message/messages.py"
        assert re.search(rf"\b{message}\(", (REPO / sender).read_text()), f"{sender} does not build {message}"
        assert re.search(rf"\b{message}\b", (REPO / receiver).read_text()), f"{receiver} does not read {message}"


def test_every_message_of_the_pipeline_is_on_the_page():
    on_page = set(re.findall(r"`(\w+)`", PAGE))
    missing = sorted(m for m in declared_messages() if m.endswith("Msg") and m not in on_page)
    assert not missing, f"docs/life-of-a-request.md does not say where these travel: {missing}"


def test_every_method_the_page_names_is_defined_on_its_class():
    definitions: dict[str, set[str]] = {}
    for path in (REPO / "minisgl").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                definitions.setdefault(node.name, set()).update(
                    n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))
    named = set(re.findall(r"`([A-Z]\w+)\.(\w+)`", PAGE))
    assert named, "the page names no methods"
    missing = sorted(f"{c}.{m}" for c, m in named if m not in definitions.get(c, set()))
    assert not missing, f"docs/life-of-a-request.md names methods that do not exist: {missing}"
