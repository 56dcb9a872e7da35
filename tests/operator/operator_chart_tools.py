"""Real Helm for the tests: lint and template through Helm's own Go library, no helm binary.

- ``helm_lint``: ``helm lint`` via helm-sdkpy (Helm v4's action.Lint), and ``helm lint --strict``
  via helm-python-sdk, which also takes values and a Kubernetes version;
- ``helm_template``: ``helm template`` via helm-python-sdk's offline render (Helm v4's engine).
Both packages ship the compiled Helm library in their wheels; tests/tools/operator.sh installs them.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import helm_python
import helm_sdkpy
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "minisgl-operator"
RELEASE = "minisgl"
NAMESPACE = "minisgl-system"


def helm_template(values: dict[str, Any] | None = None, chart: Path = CHART) -> list[dict]:
    """The chart's manifests, as `helm template RELEASE CHART -n NAMESPACE` prints them (CRDs not included)."""
    with helm_python.Chart.load(str(chart)) as loaded:
        rendered = loaded.render(values=values or {}, name=RELEASE, namespace=NAMESPACE, is_install=True)
    objects = []
    for path, text in sorted(rendered.items()):
        if not path.endswith((".yaml", ".yml")):
            continue  # NOTES.txt
        objects += [doc for doc in yaml.safe_load_all(text) if doc]
    return objects


def helm_notes(values: dict[str, Any] | None = None, chart: Path = CHART) -> str:
    with helm_python.Chart.load(str(chart)) as loaded:
        rendered = loaded.render(values=values or {}, name=RELEASE, namespace=NAMESPACE, is_install=True)
    return next(text for path, text in rendered.items() if path.endswith("NOTES.txt"))


def helm_lint_strict(values: dict[str, Any] | None = None, chart: Path = CHART, kube_version: str = "v1.33.0") -> dict:
    return helm_python.lint(str(chart), values, strict=True, kube_version=kube_version, namespace=NAMESPACE)


def helm_lint_sdkpy(chart: Path = CHART) -> dict:
    config = helm_sdkpy.Configuration(namespace=NAMESPACE)
    return asyncio.run(helm_sdkpy.Lint(config).run(str(chart)))


def crds(chart: Path = CHART) -> list[dict]:
    out = []
    for path in sorted((chart / "crds").glob("*.yaml")):
        out += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return out
