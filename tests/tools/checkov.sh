#!/usr/bin/env bash
# checkov, the policy scanner that tests/docker (Dockerfiles) and tests/operator (rendered
# manifests) run, in a virtual environment of its own (tool_venv.bash says why; the tests find it
# through tests/tool_venvs.py). Pinned, so a new release cannot turn CI red on its own; idempotent.
set -euo pipefail
. "$(dirname "$0")/tool_venv.bash"

venv=$(tool_venv checkov checkov==3.3.30)
"$venv/bin/checkov" --version
