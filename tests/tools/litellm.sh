#!/usr/bin/env bash
# LiteLLM, a client many users put in front of minisgl, for tests/server/test_litellm.py: in a
# virtual environment of its own, since it pins openai 2.x beside the project's openai 3.x. `mcp`
# is a dependency LiteLLM imports for tool calls but does not declare. Pinned; idempotent.
set -euo pipefail
. "$(dirname "$0")/tool_venv.bash"

venv=$(tool_venv litellm litellm==1.106.2 mcp==2.3.0)
"$venv/bin/python" -c "import importlib.metadata as m; print('litellm', m.version('litellm'))"
