"""Comments say why, and stay true: no tracker numbers anywhere and no measured figures in the code.

The repository has no issue tracker, so an issue number in a comment points nowhere. A figure measured
once ("took 14 us", "1.8% slower") goes stale as the code changes under it, and nothing re-measures
it there: figures live in benchmark/NOTES.md, whose dated sections say where each was measured, and
a comment points there. A test rather than a review habit, so the README's test command keeps both
out.
"""

from __future__ import annotations

import io
import re
import subprocess
import tokenize
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

TRACKER = re.compile(r"\bissues?\s+#?\d+", re.I)
# A duration, a rate or a comparison: what a measurement prints. Durations in seconds are left out
# on purpose: timeouts and intervals ("every 0.2 s") are settings, not measurements.
FIGURE = re.compile(
    r"\d(?:[\d,]*\d)?(?:\.\d+)?\s?(?:us|µs|ms|ns|[GTM]i?B/s|TFLOP/s|TFLOPS|tok/s|tokens/s)\b"
    r"|\d(?:\.\d+)?x\s+(?:faster|slower)\b|\d+(?:\.\d+)?%\s+(?:faster|slower)\b")
# benchmark/NOTES.md is the journal the figures belong in (its headings name the work they came
# from); the vendored CRDs are other projects' files.
NOT_CHECKED = ("benchmark/NOTES.md", "tests/operator/crds/")
CODE = ("minisgl/", "operator/minisgl_operator/")


def repository_files() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, text=True, check=True).stdout.splitlines()
    return [p for p in listed if not p.startswith(NOT_CHECKED) and (REPO / p).is_file()]


def prose(source: str) -> list[tuple[int, str]]:
    """(first line, text) of each comment block (consecutive comment lines joined) and docstring."""
    blocks: list[tuple[int, str]] = []
    previous, last_comment_line = tokenize.NEWLINE, -2
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            if tok.start[0] == last_comment_line + 1 and blocks:
                blocks[-1] = (blocks[-1][0], blocks[-1][1] + " " + tok.string.lstrip("# "))
            else:
                blocks.append((tok.start[0], tok.string.lstrip("# ")))
            last_comment_line = tok.start[0]
        elif tok.type == tokenize.STRING and previous in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            blocks.append((tok.start[0], tok.string))
        if tok.type not in (tokenize.NL, tokenize.COMMENT):
            previous = tok.type
    return blocks


def test_no_file_refers_to_an_issue_tracker_by_number():
    found = []
    for path in repository_files():
        try:
            text = (REPO / path).read_text()
        except UnicodeDecodeError:
            continue
        found += [f"{path}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}" for m in TRACKER.finditer(text)]
    assert not found, "say what the reference meant instead of its number:\n" + "\n".join(found)


def test_the_code_quotes_no_measured_figures_in_its_comments():
    found = []
    for path in repository_files():
        if path.startswith(CODE) and path.endswith(".py"):
            for line, text in prose((REPO / path).read_text()):
                found += [f"{path}:{line}: {m.group(0)}" for m in FIGURE.finditer(text)]
    assert not found, "move the figure to benchmark/NOTES.md and point there:\n" + "\n".join(found)


def test_the_checks_see_what_they_are_meant_to():
    """The patterns catch the forms that went stale before, and leave settings alone."""
    assert TRACKER.search("per token (" + "issue\n21: four stop strings)")  # split, or this file would match
    assert FIGURE.search("took 14 us against 1.8 us") and FIGURE.search("read at 1.2-1.9 TB/s")
    assert FIGURE.search("decoded 1.8% slower") and FIGURE.search("cost ~75 µs of host time")
    assert not FIGURE.search("every 0.2 s when idle") and not FIGURE.search("a 64 KiB cap, 16 tokens")
    blocks = prose('"""Doc 10 ms."""\nx = "not 5 ms"  # a comment\n# that goes on\n')
    assert [text for _, text in blocks] == ['"""Doc 10 ms."""', "a comment that goes on"]
