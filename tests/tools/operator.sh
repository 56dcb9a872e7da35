#!/usr/bin/env bash
# Tools for tests/operator (the Kubernetes operator and its Helm chart):
#   - kopf, kubernetes: what the operator runs on (its handlers are tested against a fake API);
#   - jsonschema, pyyaml: the operator validates specs with the CRD's schema, and reads YAML;
#   - kubernetes-validate: the official OpenAPI schemas of Kubernetes, to validate every object;
#   - cel-python: a CEL interpreter, to evaluate the CRD's validation rules as the API server would;
#   - helm-sdkpy and helm-python-sdk: Helm's own Go library, compiled into their wheels, for
#     `helm lint` and `helm template` without a helm binary (helm-sdkpy declares Python >= 3.12 but
#     runs on 3.11, hence --ignore-requires-python);
#   (checkov, which these tests also run, comes from tests/tools/checkov.sh)
# Versions are pinned so that a new release cannot turn CI red on its own.
# Idempotent: when the pinned versions are already there it only checks them and returns.
set -euo pipefail

# kubernetes 36, not 37: 37 requires python-dateutil>=3 and pydantic>=2.14.2, which would replace
# versions other packages in the same environment pin.
PY_PINS=(
    "kopf==1.45.2"
    "kubernetes==36.0.3"
    "kubernetes-validate==1.37.0"
    "helm-python-sdk==0.2.2"
    "cel-python==0.5.0"
)
# Shared with the rest of the project: any version from these on is fine, installed only if missing.
PY_ANY=("jsonschema>=4.18" "PyYAML>=6")
HELM_SDKPY_PIN="helm-sdkpy==0.1.32"

# The interpreter the test command runs (`python -m pytest`); python3 where there is no `python`.
PY=$(command -v python || command -v python3)

have_py_pkg() {  # "name==version": is exactly this version installed for $PY?
    local name=${1%%==*} version=${1##*==}
    [ "$("$PY" -c "import importlib.metadata as m; print(m.version('$name'))" 2>/dev/null)" = "$version" ]
}

missing=()
for pin in "${PY_PINS[@]}"; do
    have_py_pkg "$pin" || missing+=("$pin")
done
for spec in "${PY_ANY[@]}"; do
    "$PY" -c "import importlib.metadata as m, sys; from packaging.requirements import Requirement as R; r = R(sys.argv[1]); sys.exit(0 if r.specifier.contains(m.version(r.name), prereleases=True) else 1)" "$spec" 2>/dev/null \
        || missing+=("$spec")
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "operator test packages already installed: ${PY_PINS[*]} ${PY_ANY[*]}"
else
    "$PY" -m pip install -q "${missing[@]}"
fi
if have_py_pkg "$HELM_SDKPY_PIN"; then
    echo "$HELM_SDKPY_PIN already installed"
else
    "$PY" -m pip install -q --ignore-requires-python "$HELM_SDKPY_PIN"
fi


# Fail here, not later in the tests, if a tool does not work.
"$PY" - <<'PY'
import asyncio, pathlib, tempfile

import celpy
import helm_python
import helm_sdkpy
import jsonschema
import kopf
import kubernetes
import kubernetes_validate
import yaml

print("kopf", kopf.__version__ if hasattr(kopf, "__version__") else "", "kubernetes", kubernetes.__version__,
      "kubernetes-validate (k8s", kubernetes_validate.latest_version() + ")", "helm", helm_python.helm_sdk_version())
with tempfile.TemporaryDirectory() as tmp:
    chart = pathlib.Path(tmp) / "probe"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: probe\nversion: 0.1.0\n")
    (chart / "templates" / "cm.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: probe\n")
    report = asyncio.run(helm_sdkpy.Lint(helm_sdkpy.Configuration(namespace="default")).run(str(chart)))
    assert not report.get("Errors"), report
    with helm_python.Chart.load(str(chart)) as loaded:
        assert "probe/templates/cm.yaml" in loaded.render(name="probe", namespace="default")
PY
