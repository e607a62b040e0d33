# Sourced by scripts/conformance and scripts/clients: starts one `flowgate serve` on a free
# loopback port for the rest of the calling script, and stops it (and any command it left
# running) on exit.
#
#   serve_flowgate MANIFEST [NAME=VALUE ...]    sets $url, $work (a private temp folder), $server
#
# FLOWGATE_BIN names a binary already built (scripts/test passes the test build's, so the caller
# costs no compile of its own); otherwise the debug binary is built.

. scripts/lib/stop-runs.sh

serve_flowgate() {
  local manifest=$1; shift
  local bin
  if [ -n "${FLOWGATE_BIN:-}" ]; then
    bin=$FLOWGATE_BIN
  else
    cargo build -q -p flowgate
    bin=${CARGO_TARGET_DIR:-$PWD/target}/debug/flowgate
  fi
  work=$(mktemp -d)
  local port
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  env FLOWGATE_STATE_DIR="$work/state" FLOWGATE_LOG=warn \
    FLOWGATE_HANDLE_KEYS="c1:$(head -c32 /dev/urandom | base64 -w0)" "$@" \
    "$bin" serve --manifest "$manifest" --listen "127.0.0.1:$port" >"$work/server.log" 2>&1 &
  server=$!
  trap stop_flowgate EXIT
  for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
  kill -0 "$server" 2>/dev/null || { echo "flowgate did not start:"; cat "$work/server.log"; exit 1; }
  url=http://127.0.0.1:$port/mcp
}

stop_flowgate() {
  kill "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  stop_runs "$work/state"
  pkill -f "$work/state" 2>/dev/null || true
  rm -rf "$work"
}
