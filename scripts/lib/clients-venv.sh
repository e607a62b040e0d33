# Sourced by scripts/clients and scripts/balancer: the Python `mcp` 2.x client with
# `fastmcp-tasks`' client extension, pinned, in .venv-clients (git-ignored).
#
#   ensure_clients_venv    installs the pins on first use (or when they changed); sets $venv

ensure_clients_venv() {
  local python_pins=("mcp==2.3.0" "fastmcp-tasks==4.1.4")
  venv=$PWD/.venv-clients
  if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" - "${python_pins[@]}" <<'PY'
import sys
from importlib.metadata import PackageNotFoundError, version
for pin in sys.argv[1:]:
    name, want = pin.split("==")
    try:
        if version(name) != want:
            sys.exit(1)
    except PackageNotFoundError:
        sys.exit(1)
PY
  then
    echo "== installing ${python_pins[*]} into $venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q "${python_pins[@]}"
  fi
}
