# Sourced by scripts/test: a real Apache Airflow 3 (PyPI apache-airflow, with the standard
# provider's human-in-the-loop operators) on a private PostgreSQL cluster, both on free loopback
# ports, running the test DAGs of tests/fakes/airflow/dags.
#
#   start_airflow     exports FLOWGATE_TEST_AIRFLOW_URL, FLOWGATE_TEST_AIRFLOW_USERNAME and
#                     FLOWGATE_TEST_AIRFLOW_PASSWORD, and sets $airflow_pids
#   stop_airflow      stops Airflow's processes, then PostgreSQL (also safe to call twice)
#
# Installs Airflow into .venv-airflow (git-ignored) on first use. PostgreSQL, not SQLite: with
# two writes in flight SQLite answers "database is locked" and the scheduler exits. Everything
# lives in one temporary folder ($airflow_home); output goes to target/airflow-*.log. Its DAGs
# folder links tests/fakes/airflow/dags/*.py and examples/airflow/*.py.

airflow_version=3.3.2
airflow_pids=()

# A free TCP port on 127.0.0.1.
airflow_free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

install_airflow() {
  local venv=$PWD/.venv-airflow
  if [ ! -x "$venv/bin/airflow" ] \
      || ! "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('apache-airflow') != '$airflow_version')" 2>/dev/null; then
    echo "== installing apache-airflow $airflow_version into $venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "apache-airflow[postgres]==$airflow_version"
  fi
}

start_airflow() {
  install_airflow
  local venv=$PWD/.venv-airflow
  # Debian's postgresql package keeps initdb and pg_ctl in /usr/lib/postgresql/<version>/bin.
  if ! command -v initdb >/dev/null || ! command -v pg_ctl >/dev/null; then
    local pg_bin
    pg_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
    [ -n "$pg_bin" ] && [ -x "$pg_bin/initdb" ] || {
      echo "PostgreSQL's initdb and pg_ctl are missing: apt-get install postgresql" >&2
      return 1; }
    PATH=$pg_bin:$PATH
  fi
  mkdir -p target
  airflow_home=$(mktemp -d /tmp/flowgate-airflow.XXXXXX)
  chmod 755 "$airflow_home"
  local pg_port api_port pg_user=airflow
  pg_port=$(airflow_free_port)
  api_port=$(airflow_free_port)

  # initdb refuses to run as root: the cluster belongs to the postgres user then.
  local as=()
  if [ "$(id -u)" = 0 ]; then as=(runuser -u postgres --); fi
  mkdir -p "$airflow_home/pg"
  if [ "$(id -u)" = 0 ]; then chown postgres "$airflow_home/pg"; fi
  "${as[@]}" initdb -D "$airflow_home/pg" -U "$pg_user" --auth=trust >target/airflow-pg.log 2>&1
  "${as[@]}" pg_ctl -D "$airflow_home/pg" -l "$airflow_home/pg/server.log" \
    -o "-p $pg_port -k $airflow_home/pg -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off" \
    -w start >>target/airflow-pg.log 2>&1
  airflow_pg_dir=$airflow_home/pg
  createdb -h 127.0.0.1 -p "$pg_port" -U "$pg_user" airflow

  # The test account (SimpleAuthManager) has the role `flowgate policy` says a tool's user needs,
  # so every test shows that role is enough; its password comes from the passwords file.
  local password
  password=$(python3 -c 'import secrets; print(secrets.token_hex(12))')
  printf '{"flowgate": "%s"}' "$password" >"$airflow_home/passwords.json"
  export AIRFLOW_HOME=$airflow_home
  # The test DAGs and the example's DAG (examples/airflow), linked into one folder.
  mkdir -p "$airflow_home/dags"
  ln -s "$PWD"/tests/fakes/airflow/dags/*.py "$PWD"/examples/airflow/*.py "$airflow_home/dags/"
  export AIRFLOW__CORE__DAGS_FOLDER=$airflow_home/dags
  export AIRFLOW__CORE__LOAD_EXAMPLES=False
  export AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION=False
  export AIRFLOW__CORE__PARALLELISM=4
  export AIRFLOW__CORE__EXECUTION_API_SERVER_URL=http://127.0.0.1:$api_port/execution/
  export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS=flowgate:user
  export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE=$airflow_home/passwords.json
  export AIRFLOW__API__BASE_URL=http://127.0.0.1:$api_port
  export AIRFLOW__API__PORT=$api_port
  export AIRFLOW__API__HOST=127.0.0.1
  export AIRFLOW__API__WORKERS=1
  export AIRFLOW__API_AUTH__JWT_SECRET
  AIRFLOW__API_AUTH__JWT_SECRET=$(python3 -c 'import secrets; print(secrets.token_hex(32))')
  export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=postgresql+psycopg2://$pg_user@127.0.0.1:$pg_port/airflow
  export AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL=5
  export AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC=1
  "$venv/bin/airflow" db migrate >target/airflow-migrate.log 2>&1 || {
    echo "airflow db migrate failed: see target/airflow-migrate.log" >&2; return 1; }
  setsid "$venv/bin/airflow" api-server >target/airflow-api.log 2>&1 &
  airflow_pids+=($!)
  setsid "$venv/bin/airflow" scheduler >target/airflow-scheduler.log 2>&1 &
  airflow_pids+=($!)
  setsid "$venv/bin/airflow" dag-processor >target/airflow-dag-processor.log 2>&1 &
  airflow_pids+=($!)
  # Nothing after this needs Airflow's settings; the tests read the three variables below.
  unset AIRFLOW_HOME "${!AIRFLOW__@}"

  FLOWGATE_TEST_AIRFLOW_URL=http://127.0.0.1:$api_port
  FLOWGATE_TEST_AIRFLOW_USERNAME=flowgate
  FLOWGATE_TEST_AIRFLOW_PASSWORD=$password
  export FLOWGATE_TEST_AIRFLOW_URL FLOWGATE_TEST_AIRFLOW_USERNAME FLOWGATE_TEST_AIRFLOW_PASSWORD
  # Ready when the API is healthy and the DAG processor has parsed every test DAG (and the one
  # broken on purpose, flowgate_broken.py, shows as an import error).
  python3 - "$FLOWGATE_TEST_AIRFLOW_URL" "$password" "$AIRFLOW_DAGS_EXPECTED" <<'PY' || {
import json, sys, time, urllib.request
base, password, wanted = sys.argv[1], sys.argv[2], set(sys.argv[3].split())
deadline = time.time() + 120
token, last = None, "nothing yet"
while time.time() < deadline:
    try:
        if token is None:
            req = urllib.request.Request(base + "/auth/token", method="POST",
                data=json.dumps({"username": "flowgate", "password": password}).encode(),
                headers={"Content-Type": "application/json"})
            token = json.load(urllib.request.urlopen(req, timeout=5))["access_token"]
        req = urllib.request.Request(base + "/api/v2/dags?limit=100",
                                     headers={"Authorization": "Bearer " + token})
        have = {d["dag_id"] for d in json.load(urllib.request.urlopen(req, timeout=5))["dags"]}
        req = urllib.request.Request(base + "/api/v2/importErrors",
                                     headers={"Authorization": "Bearer " + token})
        broken = {i["filename"].rsplit("/", 1)[-1]
                  for i in json.load(urllib.request.urlopen(req, timeout=5))["import_errors"]}
        if wanted <= have and "flowgate_broken.py" in broken:
            sys.exit(0)
        last = f"DAGs so far: {sorted(have)}"
    except Exception as e:  # not up yet
        last = repr(e)
    time.sleep(0.3)
print(f"Airflow was not ready in 120 s: {last}", file=sys.stderr)
sys.exit(1)
PY
    echo "Airflow did not start: see target/airflow-*.log" >&2; return 1; }
  echo "== Airflow $airflow_version on $FLOWGATE_TEST_AIRFLOW_URL (PostgreSQL on $pg_port, home $airflow_home)"
}

# The DAG ids start_airflow waits for.
AIRFLOW_DAGS_EXPECTED="flowgate_hello flowgate_fails flowgate_slow flowgate_approval flowgate_form flowgate_timeout flowgate_retry flowgate_paused flowgate_run_timeout release_approval"

stop_airflow() {
  local pid
  # Each was started in a process group of its own (setsid): its workers stop with it.
  for pid in "${airflow_pids[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
  for _ in $(seq 100); do
    local alive=0
    for pid in "${airflow_pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  for pid in "${airflow_pids[@]}"; do kill -KILL -- "-$pid" 2>/dev/null || true; done
  airflow_pids=()
  if [ -n "${airflow_pg_dir:-}" ] && [ -f "$airflow_pg_dir/postmaster.pid" ]; then
    local as=()
    if [ "$(id -u)" = 0 ]; then as=(runuser -u postgres --); fi
    "${as[@]}" pg_ctl -D "$airflow_pg_dir" -m fast -w stop >/dev/null 2>&1 || true
  fi
  if [ -n "${airflow_home:-}" ]; then rm -rf "$airflow_home"; fi
  airflow_pg_dir=
  airflow_home=
}
