#!/usr/bin/env bash
# checkov, the policy scanner that tests/docker (Dockerfiles) and tests/operator (rendered
# manifests) run, in a virtual environment of its own: it pins dozens of dependencies, which must
# not replace the project's packages. The tests find it at this same path
# (tests/docker/dockerfiles.py, tests/operator/test_operator_checkov.py).
# Pinned, so a new release cannot turn CI red on its own; idempotent.
set -euo pipefail

CHECKOV_VERSION=3.3.30
PY=$(command -v python || command -v python3)
CHECKOV_VENV="${MINISGL_CHECKOV_VENV:-${XDG_DATA_HOME:-$HOME/.local/share}/minisgl/checkov-venv}"

if [ -x "$CHECKOV_VENV/bin/checkov" ] \
    && [ "$("$CHECKOV_VENV/bin/python" -c "import importlib.metadata as m; print(m.version('checkov'))" 2>/dev/null)" = "$CHECKOV_VERSION" ]; then
    echo "checkov $CHECKOV_VERSION already installed in $CHECKOV_VENV"
else
    mkdir -p "$(dirname "$CHECKOV_VENV")"
    "$PY" -m venv "$CHECKOV_VENV"
    "$CHECKOV_VENV/bin/python" -m pip install -q --upgrade pip
    "$CHECKOV_VENV/bin/python" -m pip install -q "checkov==$CHECKOV_VERSION"
fi
"$CHECKOV_VENV/bin/checkov" --version
