# Sourced by the tests/tools scripts whose tool pins dependencies that must not replace the
# project's own (checkov pins dozens; LiteLLM pins openai 2.x): each gets a virtual environment of
# its own at the path tests/tool_venvs.py computes. Not a *.sh file, so install_tools.sh does not run it.

# tool_venv NAME PACKAGE==VERSION... : install the pinned packages into NAME's venv unless they are
# there already at those versions; prints the venv's path.
tool_venv() {
    local name=$1; shift
    local upper
    upper=$(echo "$name" | tr '[:lower:]' '[:upper:]')
    local override="MINISGL_${upper}_VENV"
    local repo
    repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
    local venv="${!override:-$repo/.tool-venvs/$name-venv}"  # in the checkout, not the user's home
    local py
    py=$(command -v python || command -v python3)
    local have=""
    if [ -x "$venv/bin/python" ]; then
        have=$("$venv/bin/python" - "$@" <<'PY' 2>/dev/null
import importlib.metadata as m, sys
print(all(m.version(p.split("==")[0]) == p.split("==")[1] for p in sys.argv[1:]))
PY
)
    fi
    if [ "$have" != "True" ]; then
        mkdir -p "$(dirname "$venv")"
        "$py" -m venv "$venv" >&2
        "$venv/bin/python" -m pip install -q --upgrade pip >&2
        "$venv/bin/python" -m pip install -q "$@" >&2
    else
        echo "$* already installed in $venv" >&2
    fi
    echo "$venv"
}
