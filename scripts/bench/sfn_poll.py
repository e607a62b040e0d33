#!/usr/bin/env python3
"""Step Functions polling within AWS's API quota: how late a client learns that its execution
ended, flowgate against a hand-rolled poller.

Keeps EXECUTIONS Step Functions executions running (moto, real state machines) for SECONDS,
every call going through tests/fakes/aws/sfn_proxy.py with AWS's published bucket sizes and
refill rates (us-east-1: GetExecutionHistory refills 20/s, DescribeExecution 15/s,
ListExecutions 5/s). Each execution waits a random 10 s to 10 + 3 x SECONDS s (its input says
how long), so executions end all through the run; each one that ends is replaced by a new one
at once, so EXECUTIONS keep running.

Each side has an account (proxy scope) and a state machine of its own, and runs in turn:

* flowgate: executions started as tasks (`tools/call`) through one flowgate instance; clients
  poll `tasks/get` honouring the `pollIntervalMs` each answer carries.
* flowgate before (with --before BINARY): the same with another flowgate binary, to compare.
* the peer: what people hand-roll today, a status tool that calls DescribeExecution and
  GetExecutionHistory (newest 100 events) for every running execution once a second.

With --instances N, the flowgate side runs N processes on the one account, each told to take
1/N of its quota (--share S tells them S instead); calls and polls go to them in turn.

Reported for each side: the delay from each execution's end (its closing event's time, as the
engine recorded it) to the first poll that showed it, as p50/p95/max over the executions that
ended between 10 s into the run and TAIL s before its end (so that every side had TAIL s to
see them), and how many of those were never seen; engine calls a second per operation over
the second half of the run against the refill rates; throttled answers; client-visible
errors; the pollIntervalMs flowgate settled on.

    .venv-moto/bin/python scripts/bench/sfn_poll.py [EXECUTIONS] [SECONDS] [FLOWGATE_BINARY]
        [--before OTHER_FLOWGATE_BINARY] [--no-peer] [--instances N [--share S]]

Defaults: 500 executions, 75 s, $CARGO_TARGET_DIR/debug/flowgate (else target/debug/flowgate).
Needs moto in .venv-moto (scripts/test installs it). Loopback only; everything it starts is
stopped at the end, and each side is bounded by SECONDS plus its start-up (a minute or so).
"""

import argparse
import concurrent.futures
import heapq
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime

import boto3
import botocore.config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Ends counted: from WARMUP s into the run to TAIL s before its end.
WARMUP = 10.0
TAIL = 35.0
# The steady state for call rates: the second half of the run.
STEADY_FROM = 0.5
REFILL = {"GetExecutionHistory": 20.0, "DescribeExecution": 15.0, "ListExecutions": 5.0,
          "StartExecution": 300.0}
META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "sfn-poll-bench", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
}
DEFINITION = {"StartAt": "Wait", "States": {"Wait": {"Type": "Wait", "SecondsPath": "$.seconds", "End": True}}}

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


CONNECTIONS = threading.local()


def mcp(url, method, params, name=None):
    """One MCP request over this thread's kept-alive connection (as an HTTP client library
    would keep one), opened again after any failure."""
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": method,
    }
    if name:
        headers["Mcp-Name"] = name
    params = dict(params, _meta=META)
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()
    target = urllib.parse.urlsplit(url)
    if not hasattr(CONNECTIONS, "by_url"):
        CONNECTIONS.by_url = {}
    conn = CONNECTIONS.by_url.get(url)
    if conn is None:
        conn = http.client.HTTPConnection(target.hostname, target.port, timeout=30)
        CONNECTIONS.by_url[url] = conn
    try:
        conn.request("POST", target.path, body=body, headers=headers)
        response = conn.getresponse()
        data = response.read()
    except (OSError, http.client.HTTPException):
        conn.close()
        CONNECTIONS.by_url.pop(url, None)
        raise
    if response.status != 200:
        raise OSError(f"HTTP {response.status}: {data[:200]!r}")
    return json.loads(data)


def epoch(rfc3339):
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


# How late the job running on this thread started.
LATE = threading.local()


class Scheduler:
    """Runs `job(key)` for many keys, each when it falls due, on a bounded pool of threads."""

    def __init__(self, workers, until):
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers)
        self.until = until
        self.heap = []
        self.lock = threading.Lock()
        self.seq = 0

    def at(self, when, job, key):
        with self.lock:
            self.seq += 1
            heapq.heappush(self.heap, (when, self.seq, job, key))

    @staticmethod
    def guarded(job, key, due):
        LATE.value = max(0.0, time.monotonic() - due)
        try:
            job(key)
        except Exception:  # a bug in the benchmark itself: say so, loudly
            import traceback
            traceback.print_exc()

    def run(self):
        while time.monotonic() < self.until:
            with self.lock:
                due = self.heap[0][0] if self.heap else None
            if due is None or due > time.monotonic():
                time.sleep(0.005)
                continue
            with self.lock:
                _, _, job, key = heapq.heappop(self.heap)
            self.pool.submit(self.guarded, job, key, due)
        self.pool.shutdown(wait=True, cancel_futures=True)


class Side:
    """One side's bookkeeping: the executions it keeps running and what its polls saw."""

    def __init__(self, seconds):
        self.seconds = seconds
        self.lock = threading.Lock()
        self.planned = {}   # key -> planned end (wall clock)
        self.seen = {}      # key -> (end as the engine recorded it, first poll that showed it)
        self.errors = []
        self.polls = 0
        self.latencies = []  # seconds a poll took to answer
        self.lateness = []   # seconds a poll came after it was due
        self.intervals = {}
        self.rng = random.Random(7)
        self.t0 = None

    def duration(self):
        """Whole seconds: a Wait state's SecondsPath must hold a positive integer."""
        with self.lock:
            return self.rng.randint(10, 10 + 3 * self.seconds)

    def error(self, text):
        with self.lock:
            self.errors.append(text)

    def ended(self, key, end, seen_at):
        with self.lock:
            self.seen.setdefault(key, (end, seen_at))

    def delays(self):
        """Delays of the ends in the counted window, and how many of them were never seen."""
        lo, hi = self.t0 + WARMUP, self.t0 + self.seconds - TAIL
        counted = [k for k, end in self.planned.items() if lo <= end <= hi]
        delays = sorted(max(0.0, self.seen[k][1] - self.seen[k][0]) for k in counted if k in self.seen)
        return delays, len(counted) - len(delays)


def percentile(values, p):
    if not values:
        return float("nan")
    return values[min(len(values) - 1, int(round(p / 100.0 * (len(values) - 1))))]


def proxy_scope(proxy, name):
    http_json(f"{proxy}/_proxy/scopes/{name}", {})
    return f"{proxy}/scope/{name}"


def proxy_report(proxy, name):
    return http_json(f"{proxy}/_proxy/scopes/{name}")


def run_side(proxy, scope, seconds, executions, start_one):
    """Keeps `executions` running for `seconds`: `start_one(side, sched)` starts one (and
    schedules its polls and its replacement), `poll` polls. Returns the side and the scope's
    call counts at the start and the end of the steady window."""
    side = Side(seconds)
    sched = Scheduler(workers=64, until=time.monotonic() + seconds)
    side.t0 = time.time()
    snapshot = {}

    def snap():
        time.sleep(seconds * STEADY_FROM)
        snapshot["before"] = proxy_report(proxy, scope)
        snapshot["at"] = time.monotonic()

    # The first executions start at once (16 at a time), the way a burst of calls arrives.
    with concurrent.futures.ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(lambda _: start_one(side, sched), range(executions)))
    threading.Thread(target=snap, daemon=True).start()
    sched.run()
    after = proxy_report(proxy, scope)
    window = time.monotonic() - snapshot["at"]
    return side, snapshot["before"], after, window


def rates(before, after, seconds):
    ops = set(after["calls"]) | set(after["throttled"])
    out = {}
    for op in sorted(ops):
        calls = after["calls"].get(op, 0) - before["calls"].get(op, 0)
        throttled = after["throttled"].get(op, 0) - before["throttled"].get(op, 0)
        out[op] = (calls / seconds, throttled / seconds)
    return out


def run_flowgate(binary, proxy, arn, work, scope, seconds, executions, instances=1, share=None):
    """One side through `instances` flowgate processes on one account (the proxy scope), each
    taking `share` of its quota (1/instances unless given); calls and polls go to them in
    turn, as a load balancer would send them."""
    endpoint = proxy_scope(proxy, scope)
    manifest = os.path.join(work, f"{scope}.yaml")
    with open(manifest, "w") as f:
        f.write("tools:\n  - name: job\n    task: required\n    poll_interval_ms: 1000\n"
                f"    target: {{engine: stepfunctions, state_machine_arn: \"{arn}\", endpoint_url: \"{endpoint}\"}}\n")
    env = dict(os.environ, FLOWGATE_STATE_DIR=work, FLOWGATE_LOG="error",
               FLOWGATE_HANDLE_KEYS="b1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8",
               FLOWGATE_STEPFUNCTIONS_QUOTA_SHARE=str(share if share is not None else 1.0 / instances))
    ports = [free_port() for _ in range(instances)]
    servers = [subprocess.Popen([binary, "serve", "--listen", f"127.0.0.1:{port}", "--manifest", manifest],
                                env=env, stdout=subprocess.DEVNULL) for port in ports]
    urls = [f"http://127.0.0.1:{port}/mcp" for port in ports]
    turn = iter(range(1 << 62))
    turn_lock = threading.Lock()

    def next_url():
        with turn_lock:
            return urls[next(turn) % len(urls)]

    try:
        for port in ports:
            wait_port(port)

        def start_one(side, sched):
            seconds_ = side.duration()
            try:
                result = mcp(next_url(), "tools/call", {"name": "job", "arguments": {"seconds": seconds_}}, "job")["result"]
                task = result["taskId"]
            except (urllib.error.URLError, OSError, ValueError, KeyError) as e:
                side.error(f"start: {e!r}")
                return
            now = time.time()
            with side.lock:
                side.planned[task] = now + seconds_
            sched.at(time.monotonic() + result.get("pollIntervalMs", 1000) / 1000.0, poll_job(side, sched), task)
            # Its replacement starts when it ends.
            sched.at(time.monotonic() + seconds_, lambda _: start_one(side, sched), task)

        def poll_job(side, sched):
            def poll(task):
                interval = 1000
                try:
                    asked = time.monotonic()
                    answer = mcp(next_url(), "tasks/get", {"taskId": task}, task)
                    with side.lock:
                        side.polls += 1
                        side.latencies.append(time.monotonic() - asked)
                        side.lateness.append(getattr(LATE, "value", 0.0))
                    if "error" in answer:
                        side.error(answer["error"].get("message", "error"))
                    else:
                        result = answer["result"]
                        status = result.get("status")
                        interval = result.get("pollIntervalMs", 1000)
                        with side.lock:
                            side.intervals[task] = interval
                        if status == "completed":
                            if result.get("result", {}).get("isError"):
                                side.error("the execution failed")
                            side.ended(task, epoch(result["lastUpdatedAt"]), time.time())
                            return
                        if status not in ("working", "input_required"):
                            side.error(f"status {status}")
                except (urllib.error.URLError, OSError, ValueError, KeyError) as e:
                    side.error(repr(e))
                sched.at(time.monotonic() + interval / 1000.0, poll, task)
            return poll

        side, before, after, window = run_side(proxy, scope, seconds, executions, start_one)
        return summary(side, before, after, window)
    finally:
        for server in servers:
            server.send_signal(signal.SIGTERM)
        for server in servers:
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()


def run_peer(proxy, arn, seconds, executions):
    endpoint = proxy_scope(proxy, "peer")
    client = boto3.client("stepfunctions", endpoint_url=endpoint, region_name="us-east-1",
                          config=botocore.config.Config(retries={"max_attempts": 1},
                                                        max_pool_connections=64))

    def start_one(side, sched):
        seconds_ = side.duration()
        try:
            execution = client.start_execution(stateMachineArn=arn, name=f"peer-{random.getrandbits(64):016x}",
                                               input=json.dumps({"seconds": seconds_}))["executionArn"]
        except Exception as e:  # the hand-rolled tool surfaces every failure
            side.error(f"start: {type(e).__name__}")
            return
        with side.lock:
            side.planned[execution] = time.time() + seconds_
        sched.at(time.monotonic() + 1.0, poll, (side, sched, execution))
        sched.at(time.monotonic() + seconds_, lambda _: start_one(side, sched), execution)

    def poll(key):
        side, sched, execution = key
        try:
            asked = time.monotonic()
            with side.lock:
                side.polls += 1
                side.lateness.append(getattr(LATE, "value", 0.0))
            d = client.describe_execution(executionArn=execution)
            client.get_execution_history(executionArn=execution, reverseOrder=True, maxResults=100)
            with side.lock:
                side.latencies.append(time.monotonic() - asked)
            if d["status"] != "RUNNING":
                if d["status"] != "SUCCEEDED":
                    side.error(f"the execution ended {d['status']}")
                side.ended(execution, d["stopDate"].timestamp(), time.time())
                return
        except Exception as e:
            side.error(type(e).__name__)
        sched.at(time.monotonic() + 1.0, poll, key)

    side, before, after, window = run_side(proxy, "peer", seconds, executions, start_one)
    return summary(side, before, after, window)


def summary(side, before, after, window):
    delays, unseen = side.delays()
    return {
        "delays": delays,
        "unseen": unseen,
        "errors": side.errors,
        "polls_per_s": side.polls / side.seconds,
        "latencies": sorted(side.latencies),
        "lateness": sorted(side.lateness),
        "proxy_seconds": after.get("seconds", {}),
        "proxy_calls": after.get("calls", {}),
        "rates": rates(before, after, window),
        "window": window,
        "whole_run_calls": sum(after["calls"].values()),
        "whole_run_throttled": sum(after["throttled"].values()),
        "intervals": sorted(side.intervals.values()),
    }


def report(name, r):
    print(f"\n{name}")
    d = r["delays"]
    print(f"  end -> first poll showing it: p50 {percentile(d, 50):.1f} s, p95 {percentile(d, 95):.1f} s, "
          f"max {(d[-1] if d else float('nan')):.1f} s over {len(d)} ends; never seen: {r['unseen']}")
    lat, late = r["latencies"], r["lateness"]
    print(f"  polls the clients made: {r['polls_per_s']:.0f}/s, answered in p50 {percentile(lat, 50) * 1000:.0f} ms, "
          f"p95 {percentile(lat, 95) * 1000:.0f} ms; made p50 {percentile(late, 50) * 1000:.0f} ms, "
          f"p95 {percentile(late, 95) * 1000:.0f} ms after they were due")
    slow = {op: r["proxy_seconds"][op] / n for op, n in r["proxy_calls"].items() if n and op in r["proxy_seconds"]}
    if slow:
        print("  the proxy's mean answer time: " + ", ".join(f"{op} {t * 1000:.0f} ms" for op, t in sorted(slow.items())))
    print(f"  engine calls (the last {r['window']:.0f} s):")
    print(f"    {'operation':22}{'calls/s':>9}{'refill/s':>10}{'throttled/s':>13}")
    for op, (calls, throttled) in r["rates"].items():
        refill = REFILL.get(op)
        print(f"    {op:22}{calls:>9.2f}{(f'{refill:.0f}' if refill else '-'):>10}{throttled:>13.2f}")
    print(f"  whole run: {r['whole_run_calls']} calls, {r['whole_run_throttled']} throttled")
    print(f"  client-visible errors: {len(r['errors'])}" +
          (f" (e.g. {r['errors'][0]})" if r["errors"] else ""))
    if r["intervals"]:
        iv = r["intervals"]
        print(f"  pollIntervalMs last advertised: median {iv[len(iv) // 2]}, min {iv[0]}, max {iv[-1]}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("executions", nargs="?", type=int, default=500)
    parser.add_argument("seconds", nargs="?", type=int, default=75)
    parser.add_argument("binary", nargs="?", default=os.path.join(
        os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "debug", "flowgate"))
    parser.add_argument("--before", help="another flowgate binary to measure the same way first")
    parser.add_argument("--no-peer", action="store_true", help="leave the hand-rolled poller out")
    parser.add_argument("--instances", type=int, default=1,
                        help="flowgate processes sharing the account (each gets 1/N of the quota)")
    parser.add_argument("--share", type=float,
                        help="the quota share each instance is told (default 1/instances)")
    args = parser.parse_args()
    if args.seconds <= WARMUP + TAIL:
        sys.exit(f"SECONDS must exceed {WARMUP + TAIL:.0f}: ends are counted from {WARMUP:.0f} s in to {TAIL:.0f} s before the end")
    for binary in filter(None, [args.binary, args.before]):
        if not os.path.exists(binary):
            sys.exit(f"{binary} does not exist: build it (cargo build -p flowgate) or pass its path")
    work = tempfile.mkdtemp(prefix="sfn-poll-")
    os.chmod(work, 0o700)
    procs = []
    results = []
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

        def machine(name):
            return admin.create_state_machine(name=name, definition=json.dumps(DEFINITION),
                                              roleArn="arn:aws:iam::123456789012:role/bench")["stateMachineArn"]

        what = f"{args.executions} running executions for {args.seconds} s through the proxy"
        if args.before:
            print(f"flowgate before ({args.before}): {what} ...", flush=True)
            results.append(("flowgate before", run_flowgate(args.before, proxy, machine("bench-before"), work,
                                                            "before", args.seconds, args.executions)))
        print(f"flowgate ({args.binary}): {what} ...", flush=True)
        name = "flowgate" if args.instances == 1 else \
            f"flowgate, {args.instances} instances, each with a share of {args.share or 1.0 / args.instances:g}"
        results.append((name, run_flowgate(args.binary, proxy, machine("bench-flowgate"), work, "flowgate",
                                           args.seconds, args.executions, args.instances, args.share)))
        if not args.no_peer:
            print(f"peer: {what} ...", flush=True)
            results.append(("peer: DescribeExecution + GetExecutionHistory every second",
                            run_peer(proxy, machine("bench-peer"), args.seconds, args.executions)))
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
    for side_name, r in results:
        report(side_name, r)
    flowgate = dict(results)[name]
    sys.exit(1 if flowgate["errors"] or flowgate["whole_run_throttled"] else 0)


if __name__ == "__main__":
    main()
