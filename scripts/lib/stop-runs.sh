# Sourced by the scripts that start `flowgate serve` on the local engine (scripts/bench/run,
# scripts/bench/profile, scripts/lib/serve-flowgate.sh).
#
#   stop_runs STATE_DIR...
#
# A run outlives its server by design, so what started a server stops, when it is done, the
# process group of each run still going under the state folders it used (a run with an `exit`
# file has ended, and its group id may be someone else's by now). The group id is read from
# the run's pid file: its commands' own command lines need not name the state folder
# (`flowgate ask` does not).

stop_runs() {
  local dir f
  for dir in "$@"; do
    for f in "$dir"/runs/*/pid; do
      [ -f "$f" ] && [ ! -f "${f%pid}exit" ] && kill -TERM -- "-$(cut -d' ' -f1 "$f")" 2>/dev/null || true
    done
  done
}
