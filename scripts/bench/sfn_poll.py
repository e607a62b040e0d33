#!/usr/bin/env python3
"""Step Functions polling within AWS's API quota: flowgate against a hand-rolled poller.

Keeps EXECUTIONS running Step Functions executions (moto, real state machines) polled for
SECONDS through tests/fakes/aws/sfn_proxy.py with AWS's published bucket sizes and refill
rates (scale 1: GetExecutionHistory refills 20/s, DescribeExecution 15/s):

* flowgate: the executions are started as tasks through one flowgate instance; clients poll
  `tasks/get` honouring the `pollIntervalMs` each answer carries.
* the peer, side by side on an account (proxy scope) of its own: what people hand-roll today,
  a status tool that calls DescribeExecution and GetExecutionHistory (newest 100 events) for
  every execution once a second.

Reported for each: client-visible errors (flowgate must have none), engine calls a second per
operation over the steady-state window against the refill rates, throttled answers, and for
flowgate the pollIntervalMs it settled on.

    .venv-moto/bin/python scripts/bench/sfn_poll.py [EXECUTIONS] [SECONDS] [FLOWGATE_BINARY]

Defaults: 500 executions, 90 s (the interval settles near 31 s: the steady-state window, the
second half of the run, should hold at least one poll of every task), target/debug/flowgate. Needs moto in .venv-moto (scripts/test
installs it). Loopback only; everything it starts is stopped at the end, and the run is
bounded by SECONDS plus the start-up.
"""

import concurrent.futures
import heapq
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

import boto3
import botocore.config

EXECUTIONS = int(sys.argv[1]) if len(sys.argv) > 1 else 500
SECONDS = int(sys.argv[2]) if len(sys.argv) > 2 else 90
BIN = sys.argv[3] if len(sys.argv) > 3 else os.path.join(
    os.environ.get("CARGO_TARGET_DIR", "target"), "debug", "flowgate")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The steady state: the last part of the run, after the interval has settled.
STEADY_FROM = 0.5
REFILL = {"GetExecutionHistory": 20.0, "DescribeExecution": 15.0, "StartExecution": 300.0}
META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "sfn-poll-bench", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
}

os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")
os.environ.setdefault("AWS_REGION", "us-east-1")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ["AWS_EC2_METADATA_DISABLED"] = "true"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port):
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    sys.exit(f"nothing listened on port {port}")


def http_json(url, body=None, headers=None, timeout=30):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers=headers or {},
                                 method="POST" if data is not None else "GET")
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def mcp(url, method, params, name=None):
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": method,
    }
    if name:
        headers["Mcp-Name"] = name
    params = dict(params, _meta=META)
    return http_json(url, {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}, headers)


class Scheduler:
    """Runs `job(key)` for many keys, each when it falls due, on a bounded pool of threads."""

    def __init__(self, workers, until):
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers)
        self.until = until
        self.heap = []
        self.lock = threading.Lock()

    def at(self, when, key):
        with self.lock:
            heapq.heappush(self.heap, (when, key))

    def run(self, job):
        while time.monotonic() < self.until:
            with self.lock:
                due = self.heap[0][0] if self.heap else None
            if due is None or due > time.monotonic():
                time.sleep(0.01)
                continue
            with self.lock:
                _, key = heapq.heappop(self.heap)
            self.pool.submit(job, key)
        self.pool.shutdown(wait=True, cancel_futures=True)


def proxy_scope(proxy, name):
    http_json(f"{proxy}/_proxy/scopes/{name}", {})
    return f"{proxy}/scope/{name}"


def proxy_report(proxy, name):
    return http_json(f"{proxy}/_proxy/scopes/{name}")


def poll_for(proxy, scope, start, poll):
    """Polls with `poll` on `start`'s schedule for SECONDS; returns the scope's report at the
    start of the steady-state window, the report at the end, and the window's length."""
    sched = Scheduler(workers=64, until=time.monotonic() + SECONDS)
    snapshot = {}

    def snap():
        time.sleep(SECONDS * STEADY_FROM)
        snapshot["before"] = proxy_report(proxy, scope)
        snapshot["at"] = time.monotonic()

    start(sched)
    threading.Thread(target=snap, daemon=True).start()
    sched.run(lambda key: poll(sched, key))
    after = proxy_report(proxy, scope)
    return snapshot["before"], after, time.monotonic() - snapshot["at"]


def rates(before, after, seconds):
    ops = set(after["calls"]) | set(after["throttled"])
    out = {}
    for op in sorted(ops):
        calls = after["calls"].get(op, 0) - before["calls"].get(op, 0)
        throttled = after["throttled"].get(op, 0) - before["throttled"].get(op, 0)
        out[op] = (calls / seconds, throttled / seconds)
    return out


def run_flowgate(proxy, arn, work):
    endpoint = proxy_scope(proxy, "flowgate")
    manifest = os.path.join(work, "bench.yaml")
    with open(manifest, "w") as f:
        f.write("tools:\n  - name: job\n    task: required\n    poll_interval_ms: 1000\n"
                f"    target: {{engine: stepfunctions, state_machine_arn: \"{arn}\", endpoint_url: \"{endpoint}\"}}\n")
    port = free_port()
    env = dict(os.environ, FLOWGATE_STATE_DIR=work, FLOWGATE_LOG="error",
               FLOWGATE_HANDLE_KEYS="b1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8")
    server = subprocess.Popen([BIN, "serve", "--listen", f"127.0.0.1:{port}", "--manifest", manifest],
                              env=env, stdout=subprocess.DEVNULL)
    try:
        wait_port(port)
        url = f"http://127.0.0.1:{port}/mcp"
        tasks = []
        with concurrent.futures.ThreadPoolExecutor(max_workers=16) as pool:
            calls = [pool.submit(mcp, url, "tools/call", {"name": "job", "arguments": {"n": i}}, "job")
                     for i in range(EXECUTIONS)]
            for c in calls:
                result = c.result()["result"]
                tasks.append(result["taskId"])
        errors = []
        intervals = {}

        def poll(sched, task):
            try:
                answer = mcp(url, "tasks/get", {"taskId": task}, task)
                if "error" in answer:
                    errors.append(answer["error"].get("message", "error"))
                    return
                status = answer["result"].get("status")
                if status not in ("working", "input_required"):
                    errors.append(f"status {status}")
                interval = answer["result"].get("pollIntervalMs", 1000)
                intervals[task] = interval
            except (urllib.error.URLError, OSError, ValueError, KeyError) as e:
                errors.append(repr(e))
                interval = 1000
            sched.at(time.monotonic() + interval / 1000.0, task)

        def start(sched):
            t0 = time.monotonic()
            for i, task in enumerate(tasks):
                sched.at(t0 + (i % 1000) / 1000.0, task)

        before, after, window = poll_for(proxy, "flowgate", start, poll)
        return {
            "whole_run_throttled": sum(after["throttled"].values()),
            "whole_run_calls": sum(after["calls"].values()),
            "errors": errors,
            "rates": rates(before, after, window),
            "intervals": list(intervals.values()),
            "window": window,
        }
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()


def run_peer(proxy, arns):
    endpoint = proxy_scope(proxy, "peer")
    client = boto3.client("stepfunctions", endpoint_url=endpoint, region_name="us-east-1",
                          config=botocore.config.Config(retries={"max_attempts": 1},
                                                        max_pool_connections=64))
    errors = []

    def poll(sched, arn):
        try:
            client.describe_execution(executionArn=arn)
            client.get_execution_history(executionArn=arn, reverseOrder=True, maxResults=100)
        except Exception as e:  # the hand-rolled status tool surfaces every failure
            errors.append(type(e).__name__)
        sched.at(time.monotonic() + 1.0, arn)

    def start(sched):
        t0 = time.monotonic()
        for i, arn in enumerate(arns):
            sched.at(t0 + (i % 1000) / 1000.0, arn)

    before, after, window = poll_for(proxy, "peer", start, poll)
    return {"whole_run_throttled": sum(after["throttled"].values()),
            "whole_run_calls": sum(after["calls"].values()),
            "errors": errors, "rates": rates(before, after, window), "window": window}


def main():
    if not os.path.exists(BIN):
        sys.exit(f"{BIN} does not exist: build it (cargo build -p flowgate) or pass its path")
    work = tempfile.mkdtemp(prefix="sfn-poll-")
    os.chmod(work, 0o700)
    procs = []
    try:
        moto_port, proxy_port = free_port(), free_port()
        procs.append(subprocess.Popen(
            [os.path.join(ROOT, ".venv-moto", "bin", "moto_server"), "-p", str(moto_port), "-H", "127.0.0.1"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_port(moto_port)
        moto = f"http://127.0.0.1:{moto_port}"
        http_json(f"{moto}/moto-api/config", {"stepfunctions": {"execute_state_machine": True}},
                  {"Content-Type": "application/json"})
        procs.append(subprocess.Popen(
            [sys.executable, os.path.join(ROOT, "tests", "fakes", "aws", "sfn_proxy.py"),
             "--port", str(proxy_port), "--upstream", moto],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_port(proxy_port)
        proxy = f"http://127.0.0.1:{proxy_port}"
        admin = boto3.client("stepfunctions", endpoint_url=moto, region_name="us-east-1")
        definition = {"StartAt": "Wait", "States": {"Wait": {"Type": "Wait", "Seconds": 3600, "End": True}}}
        arn = admin.create_state_machine(name="bench", definition=json.dumps(definition),
                                         roleArn="arn:aws:iam::123456789012:role/bench")["stateMachineArn"]
        print(f"flowgate: {EXECUTIONS} running executions polled for {SECONDS} s through the proxy ...", flush=True)
        f = run_flowgate(proxy, arn, work)
        peer_arns = [admin.start_execution(stateMachineArn=arn, name=f"peer-{i}", input="{}")["executionArn"]
                     for i in range(EXECUTIONS)]
        print(f"peer: {EXECUTIONS} running executions polled for {SECONDS} s through the proxy ...", flush=True)
        p = run_peer(proxy, peer_arns)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()

    def per_op(name, r):
        print(f"\n{name} (steady state: the last {r['window']:.0f} s)")
        print(f"  {'operation':22}{'calls/s':>9}{'refill/s':>10}{'throttled/s':>13}")
        for op, (calls, throttled) in r["rates"].items():
            refill = REFILL.get(op)
            print(f"  {op:22}{calls:>9.2f}{(f'{refill:.0f}' if refill else '-'):>10}{throttled:>13.2f}")
        print(f"  whole run: {r['whole_run_calls']} calls, {r['whole_run_throttled']} throttled")
        print(f"  client-visible errors: {len(r['errors'])}" +
              (f" (e.g. {r['errors'][0]})" if r["errors"] else ""))

    per_op("flowgate", f)
    if f["intervals"]:
        iv = sorted(f["intervals"])
        print(f"  pollIntervalMs settled on: median {statistics.median(iv):.0f}, min {iv[0]}, max {iv[-1]}")
    per_op("peer: DescribeExecution + GetExecutionHistory every second", p)
    f_calls = sum(c for c, _ in f["rates"].values())
    p_calls = sum(c for c, _ in p["rates"].values())
    p_throttled = sum(t for _, t in p["rates"].values())
    if f_calls > 0:
        print(f"\npeer / flowgate: {p_calls / f_calls:.1f}x the engine calls a second; "
              f"the peer's throttled share {p_throttled / max(p_calls, 1e-9):.0%}, "
              f"its client-visible errors {len(p['errors'])} vs flowgate's {len(f['errors'])}")
    sys.exit(1 if f["errors"] else 0)


if __name__ == "__main__":
    main()
