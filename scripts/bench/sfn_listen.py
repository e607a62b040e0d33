#!/usr/bin/env python3
"""A thousand `subscriptions/listen` streams on one Step Functions account, inside its quota.

Starts LISTENERS Step Functions executions (moto, real state machines) as tasks through one
flowgate instance, every engine call going through tests/fakes/aws/sfn_proxy.py with AWS's
published bucket sizes and refill rates (as scripts/bench/sfn_poll.py does), then opens one
`subscriptions/listen` stream per task (one principal, so the hold cap is raised to fit) and
makes no other request: every status the clients learn is pushed. Each execution waits a random
20 s to SECONDS - 40 s.

Reported: how many listeners were acknowledged with their task and got its completion pushed;
the delay from each execution's end (the `lastUpdatedAt` the final push carries, the engine's
stop time) to the push's arrival (p50/p95/max); engine calls a second per operation over the
second half of the run against the refill rates; throttled answers over the whole run; errors.
Exits non-zero on any throttled call, error or missed completion.

    .venv-moto/bin/python scripts/bench/sfn_listen.py [LISTENERS] [SECONDS] [FLOWGATE_BINARY]

Defaults: 1000 listeners, 150 s, $CARGO_TARGET_DIR/debug/flowgate. Loopback only; everything
it starts is stopped at the end.
"""

import argparse
import concurrent.futures
import http.client
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sfn_poll  # noqa: E402  (the proxy, moto and MCP helpers)
from sfn_poll import META, REFILL, ROOT, epoch, free_port, http_json, mcp, percentile, wait_port  # noqa: E402

import boto3  # noqa: E402


def listen(url, task, seen, errors):
    """One listener: the stream for `task`, read to its end."""
    body = json.dumps({"jsonrpc": "2.0", "id": f"l-{task[-8:]}", "method": "subscriptions/listen",
                       "params": {"_meta": META, "notifications": {"taskIds": [task]}}}).encode()
    target = url.split("/", 3)
    host, port = target[2].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=600)
    try:
        conn.request("POST", "/" + target[3], body=body, headers={
            "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "subscriptions/listen"})
        response = conn.getresponse()
        if response.status != 200 or not response.getheader("content-type", "").startswith("text/event-stream"):
            errors.append(f"HTTP {response.status}: {response.read()[:200]!r}")
            return
        acknowledged = False
        for raw in response:
            line = raw.decode().strip()
            if not line.startswith("data:"):
                continue
            message = json.loads(line[5:])
            method = message.get("method")
            if method == "notifications/subscriptions/acknowledged":
                acknowledged = message["params"]["notifications"].get("taskIds") == [task]
                if not acknowledged:
                    errors.append(f"acknowledged {message['params']}")
            elif method == "notifications/tasks" and message["params"]["status"] in ("completed", "failed", "cancelled"):
                seen[task] = (epoch(message["params"]["lastUpdatedAt"]), time.time(), message["params"]["status"])
            elif "error" in message:
                errors.append(message["error"].get("message", "error"))
            elif "result" in message:
                if task not in seen:
                    errors.append("the stream ended before the task did")
                return
        errors.append("the stream was cut")
    except (OSError, http.client.HTTPException, ValueError) as e:
        errors.append(repr(e))
    finally:
        conn.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("listeners", nargs="?", type=int, default=1000)
    parser.add_argument("seconds", nargs="?", type=int, default=150)
    parser.add_argument("binary", nargs="?", default=os.path.join(
        os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "debug", "flowgate"))
    args = parser.parse_args()
    if args.seconds < 80:
        sys.exit("SECONDS must be at least 80")
    work = tempfile.mkdtemp(prefix="sfn-listen-")
    os.chmod(work, 0o700)
    procs = []
    try:
        moto_port, proxy_port, port = free_port(), free_port(), free_port()
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
        arn = admin.create_state_machine(name="bench-listen", definition=json.dumps(sfn_poll.DEFINITION),
                                         roleArn="arn:aws:iam::123456789012:role/bench")["stateMachineArn"]
        endpoint = sfn_poll.proxy_scope(proxy, "listen")
        manifest = os.path.join(work, "listen.yaml")
        with open(manifest, "w") as f:
            f.write("tools:\n  - name: job\n    task: required\n    poll_interval_ms: 1000\n"
                    f"    target: {{engine: stepfunctions, state_machine_arn: \"{arn}\", endpoint_url: \"{endpoint}\"}}\n")
        env = dict(os.environ, FLOWGATE_STATE_DIR=work, FLOWGATE_LOG="error",
                   FLOWGATE_HANDLE_KEYS="b1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8",
                   FLOWGATE_MAX_HOLDS_PER_CALLER=str(args.listeners + 10))
        procs.append(subprocess.Popen([args.binary, "serve", "--listen", f"127.0.0.1:{port}", "--manifest", manifest],
                                      env=env, stdout=subprocess.DEVNULL))
        wait_port(port)
        url = f"http://127.0.0.1:{port}/mcp"
        rng = random.Random(7)
        t0 = time.time()
        planned = {}
        errors = []

        def start(_):
            seconds = rng.randint(20, args.seconds - 40)
            try:
                task = mcp(url, "tools/call", {"name": "job", "arguments": {"seconds": seconds}}, "job")["result"]["taskId"]
            except Exception as e:  # noqa: BLE001 (reported)
                errors.append(f"start: {e!r}")
                return None
            planned[task] = time.time() + seconds
            return task

        print(f"starting {args.listeners} executions ...", flush=True)
        with concurrent.futures.ThreadPoolExecutor(max_workers=16) as pool:
            tasks = [t for t in pool.map(start, range(args.listeners)) if t]
        print(f"{len(tasks)} started in {time.time() - t0:.0f} s; opening {len(tasks)} listeners ...", flush=True)
        seen = {}
        threading.stack_size(256 * 1024)
        threads = [threading.Thread(target=listen, args=(url, task, seen, errors), daemon=True) for task in tasks]
        for thread in threads:
            thread.start()
        deadline = t0 + args.seconds
        half = t0 + args.seconds / 2
        before = None
        while time.time() < deadline and any(t.is_alive() for t in threads):
            if before is None and time.time() >= half:
                before, before_at = sfn_poll.proxy_report(proxy, "listen"), time.monotonic()
            time.sleep(0.5)
        after, after_at = sfn_poll.proxy_report(proxy, "listen"), time.monotonic()
        if before is None:
            before, before_at = {"calls": {}, "throttled": {}}, after_at - 1
        delays = sorted(max(0.0, at - end) for end, at, _ in seen.values())
        print(f"\n{len(tasks)} listeners, one principal, one flowgate, one account ({args.seconds} s run)")
        print(f"  completions pushed: {len(seen)} of {len(tasks)}; statuses: "
              f"{sorted(set(s for _, _, s in seen.values()))}")
        print(f"  engine end -> push received: p50 {percentile(delays, 50):.1f} s, p95 {percentile(delays, 95):.1f} s, "
              f"max {(delays[-1] if delays else float('nan')):.1f} s")
        window = after_at - before_at
        print(f"  engine calls (the last {window:.0f} s):")
        print(f"    {'operation':22}{'calls/s':>9}{'refill/s':>10}{'throttled/s':>13}")
        for op, (calls, throttled) in sfn_poll.rates(before, after, window).items():
            refill = REFILL.get(op)
            print(f"    {op:22}{calls:>9.2f}{(f'{refill:.0f}' if refill else '-'):>10}{throttled:>13.2f}")
        total, throttled = sum(after["calls"].values()), sum(after["throttled"].values())
        print(f"  whole run: {total} engine calls, {throttled} throttled")
        print(f"  errors: {len(errors)}" + (f" (e.g. {errors[0]})" if errors else ""))
        sys.exit(1 if throttled or errors or len(seen) < len(tasks) else 0)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


if __name__ == "__main__":
    main()
