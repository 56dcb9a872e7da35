"""Both Dockerfiles pass hadolint and checkov's Dockerfile checks.

Ignores are allowed only with a reason: hadolint's in .hadolint.yaml (a comment above each rule),
checkov's inline (`# checkov:skip=CKV_...: reason`). Each linter is also shown a bad Dockerfile,
so a linter that silently checks nothing (or ignores the config) cannot pass these tests.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.docker.dockerfiles import DOCKERFILES, HADOLINT_CONFIG, REPO, checkov_path, hadolint_path

BAD_DOCKERFILE = """\
FROM quay.io/someone/ubuntu:latest
RUN apt-get update && apt-get install -y curl
RUN pip install requests
EXPOSE 22
"""


def hadolint(target: Path | None, stdin: str | None = None) -> list[dict]:
    """hadolint's findings (JSON) for a file, or for a Dockerfile given on stdin."""
    cmd = [hadolint_path(), "--config", str(HADOLINT_CONFIG), "--format", "json", str(target) if target else "-"]
    proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.stdout.strip(), f"hadolint printed nothing (rc={proc.returncode}): {proc.stderr}"
    return json.loads(proc.stdout)


def checkov(target: Path) -> dict:
    """checkov's Dockerfile report for one file (offline: --skip-download)."""
    cmd = [checkov_path(), "--file", str(target), "--framework", "dockerfile", "--skip-download", "--output", "json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.stdout.strip(), f"checkov printed nothing (rc={proc.returncode}): {proc.stderr[-2000:]}"
    report = json.loads(proc.stdout)
    assert isinstance(report, dict) and report.get("check_type") == "dockerfile", report
    return report


@pytest.fixture(scope="module", params=sorted(DOCKERFILES))
def checkov_report(request) -> tuple[str, dict]:
    return request.param, checkov(DOCKERFILES[request.param])


# --- hadolint ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_hadolint_finds_nothing(name):
    findings = hadolint(DOCKERFILES[name])
    assert findings == [], "\n".join(f"{f['file']}:{f['line']} {f['code']} {f['message']}" for f in findings)


def test_hadolint_flags_a_bad_dockerfile_with_the_project_config():
    codes = {f["code"] for f in hadolint(None, stdin=BAD_DOCKERFILE)}
    # latest tag, untrusted registry (trustedRegistries), apt without --no-install-recommends,
    # apt lists left behind, unpinned pip package.
    assert {"DL3007", "DL3026", "DL3015", "DL3009", "DL3013"} <= codes, codes
    # ... while the rules .hadolint.yaml ignores stay ignored.
    ignored = set(yaml.safe_load(HADOLINT_CONFIG.read_text()).get("ignored") or [])
    assert not codes & ignored, codes & ignored


def test_every_hadolint_ignore_is_justified_in_the_config():
    text = HADOLINT_CONFIG.read_text()
    config = yaml.safe_load(text)
    assert config.get("failure-threshold") == "style", "every finding must fail the lint"
    lines = text.splitlines()
    for rule in config.get("ignored") or []:
        at = next(i for i, line in enumerate(lines) if re.fullmatch(rf"\s*-\s*{rule}\s*", line))
        comment = []
        for line in reversed(lines[:at]):
            if not line.strip().startswith("#"):
                break
            comment.insert(0, line.strip().lstrip("#").strip())
        reason = " ".join(comment)
        assert rule in reason, f"the comment above {rule} in .hadolint.yaml must name it"
        assert len(reason.split()) >= 15, f"{rule} is ignored without a real reason: {reason!r}"


# --- checkov -----------------------------------------------------------------------------------


@pytest.mark.slow  # checkov's run: tens of seconds on 2 cores
def test_checkov_passes(checkov_report):
    name, report = checkov_report
    failed = report["results"]["failed_checks"]
    assert report["summary"]["parsing_errors"] == 0, report["summary"]
    assert failed == [], "\n".join(f"{name}: {c['check_id']} {c['check_name']} lines {c['file_line_range']}" for c in failed)


def test_checkov_ran_the_checks_the_issue_names(checkov_report):
    _, report = checkov_report
    passed = {c["check_id"] for c in report["results"]["passed_checks"]}
    # HEALTHCHECK present, a USER set, the last USER is not root, no port 22.
    assert {"CKV_DOCKER_2", "CKV_DOCKER_3", "CKV_DOCKER_8", "CKV_DOCKER_1"} <= passed, passed
    # No `latest` base: checked by checkov where FROM names the image; where FROM takes a build
    # argument, skipped with its reason, and the argument's default is checked by tests/docker.
    skipped = {c["check_id"] for c in report["results"]["skipped_checks"]}
    assert "CKV_DOCKER_7" in passed | skipped


def test_checkov_skips_are_justified_inline(checkov_report):
    name, report = checkov_report
    for check in report["results"]["skipped_checks"]:
        reason = (check["check_result"].get("suppress_comment") or "").strip()
        assert reason and reason != "No comment provided", f"{name}: {check['check_id']} is skipped without a reason"


@pytest.mark.slow  # checkov's run: tens of seconds on 2 cores
def test_checkov_flags_a_bad_dockerfile(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text(BAD_DOCKERFILE)
    failed = {c["check_id"] for c in checkov(bad)["results"]["failed_checks"]}
    assert {"CKV_DOCKER_1", "CKV_DOCKER_2", "CKV_DOCKER_3", "CKV_DOCKER_7"} <= failed, failed
