#!/usr/bin/env bash
# instructor, for tests/server/test_tool_clients.py: in a virtual environment of its own, since it
# pins openai below the project's (it installs openai 3.3 beside the project's newer 3.x). Pinned;
# idempotent.
set -euo pipefail
. "$(dirname "$0")/tool_venv.bash"

venv=$(tool_venv instructor instructor==1.17.0)
"$venv/bin/python" -c "import importlib.metadata as m; print('instructor', m.version('instructor'), 'openai', m.version('openai'))"
