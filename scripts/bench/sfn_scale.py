#!/usr/bin/env python3
"""Many flowgate instances on one Step Functions account, as Lambda runs them: throttling,
client errors and how soon clients see ends, per phase of a fleet that grows and shrinks.

EXECUTIONS Step Functions executions keep running on moto behind tests/fakes/aws/sfn_proxy.py
(AWS's published bucket sizes and refill rates, us-east-1: GetExecutionHistory 20/s,
ListExecutions 5/s, StartExecution 300/s), each waiting a random MIN to MAX seconds and
replaced by a new one the moment it ends. Clients start them as tasks (`tools/call`) and poll
`tasks/get` honouring `pollIntervalMs`, as the SDKs do. Every request goes to one of the
instances alive at that moment, picked at random (a load balancer).

The fleet runs PHASES (default 1:90,40:180,5:120: one instance for 90 s, forty for 180 s,
five for 120 s). Each instance is a flowgate process that lives a random LIFE_MIN to LIFE_MAX
seconds (default 90 to 240: Lambda keeps an execution environment a few minutes) and is then
replaced by a new process; when a phase needs fewer, the oldest go. An instance leaving is
first taken out of the load balancer, then stopped two seconds later (as Lambda stops sending
requests to an environment before it freezes it).

Each MODE runs the whole schedule on an account (proxy scope) and state machine of its own:

* adaptive: BINARY with no setting (each instance finds its share from throttling);
* today: BEFORE (flowgate before the adaptive limiter) with no setting: each instance plans
  for the whole account;
* static: BEFORE with FLOWGATE_STEPFUNCTIONS_QUOTA_SHARE set for the peak (1/40).

Reported per phase (calls counted over its second half, once converged; ends by when they
happened, from WARMUP s into the phase): engine calls a second per operation against the refill
rates, throttled calls (share of all calls), client-visible errors (JSON-RPC errors, failed
calls, requests no instance answered), the delay from each end to the first poll that showed
it (p50/p95/max, ends never seen), the pollIntervalMs advertised (median), polls a second.

    .venv-moto/bin/python scripts/bench/sfn_scale.py [--executions 1000] [--phases 1:90,40:180,5:120]
        [--modes adaptive,today,static] [--binary BINARY] [--before OLD_BINARY]
        [--life 90:240] [--durations 60:300]

Needs moto in .venv-moto (scripts/test installs it) and debug or release flowgate binaries.
Loopback only; everything it starts is stopped at the end.
"""

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error

import boto3

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sfn_poll import (DEFINITION, LATE, ROOT, Scheduler, epoch, free_port,  # noqa: E402
                      http_json, mcp, percentile, proxy_report, proxy_scope, wait_port)

REFILL = {"GetExecutionHistory": 20.0, "ListExecutions": 5.0, "StartExecution": 300.0,
          "DescribeExecution": 15.0}
HANDLE_KEYS = "b1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8"
# Ends counted from this long into a phase (the fleet has just changed).
WARMUP = 15.0
# Ends in the run's last TAIL seconds are not counted (no time left to see them).
TAIL = 30.0
# How long an instance taken out of the load balancer keeps answering what it has.
DRAIN = 2.0


class Fleet:
    """The flowgate processes of one mode, and the load balancer in front of them."""

    def __init__(self, binary, manifest, env, life, rng):
        self.binary, self.manifest, self.env, self.life, self.rng = binary, manifest, env, life, rng
        self.lock = threading.Lock()
        self.live = []      # [(url, process, dies_at, born_at)] in the load balancer
        self.leaving = []   # [(process, stop_at)]
        self.stopped = []   # stopped, not yet reaped
        self.target = 0
        self.spawned = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def spawn(self):
        port = free_port()
        proc = subprocess.Popen([self.binary, "serve", "--listen", f"127.0.0.1:{port}",
                                 "--manifest", self.manifest],
                                env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(port)
        now = time.monotonic()
        self.spawned += 1
        return (f"http://127.0.0.1:{port}/mcp", proc, now + self.rng.uniform(*self.life), now)

    def retire(self, entry):
        self.leaving.append((entry[1], time.monotonic() + DRAIN))

    def step(self):
        now = time.monotonic()
        with self.lock:
            expired = [e for e in self.live if e[2] <= now]
            self.live = [e for e in self.live if e[2] > now]
            for e in expired:
                self.retire(e)
            extra = len(self.live) - self.target
            if extra > 0:
                self.live.sort(key=lambda e: e[3])
                for e in self.live[:extra]:
                    self.retire(e)
                self.live = self.live[extra:]
            missing = self.target - len(self.live)
        # New instances start outside the lock (each waits for its port).
        for _ in range(max(0, missing)):
            entry = self.spawn()
            with self.lock:
                self.live.append(entry)
        still = []
        for proc, stop_at in self.leaving:
            if stop_at <= now:
                proc.send_signal(signal.SIGTERM)
                self.stopped.append(proc)
            else:
                still.append((proc, stop_at))
        self.leaving = still
        self.stopped = [p for p in self.stopped if p.poll() is None]

    def run(self):
        while not self.stop.is_set():
            self.step()
            time.sleep(0.1)

    def pick(self):
        """An instance for a request; while none is up (the only one was replaced), the request
        waits for the new one, as a request waits for a Lambda cold start."""
        deadline = time.monotonic() + 30
        while True:
            with self.lock:
                if self.live:
                    return self.rng.choice(self.live)[0]
            if time.monotonic() > deadline:
                return None
            time.sleep(0.05)

    def size(self):
        with self.lock:
            return len(self.live)

    def shutdown(self):
        self.stop.set()
        self.thread.join(timeout=5)
        procs = [e[1] for e in self.live] + [p for p, _ in self.leaving] + self.stopped
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        # Reap the ones stopped earlier.
        return procs


class Record:
    """What the clients saw: ends and when polls showed them, errors, intervals, per phase."""

    def __init__(self):
        self.lock = threading.Lock()
        self.ends = {}       # task -> (end as the engine recorded it, first poll showing it)
        self.planned = {}    # task -> planned end (wall clock)
        self.errors = []     # (wall clock, text)
        self.polls = []      # wall clock of each poll answered
        self.intervals = []  # (wall clock, pollIntervalMs)
        self.late = []       # (wall clock, seconds a poll came after it was due)

    def error(self, text):
        with self.lock:
            self.errors.append((time.time(), text))


def run_mode(mode, binary, share, proxy, moto_admin, work, args, phases):
    scope = f"scale-{mode}"
    endpoint = proxy_scope(proxy, scope)
    http_json(f"{proxy}/_proxy/scopes/{scope}", {"list_cache": args.list_cache})
    arn = moto_admin.create_state_machine(
        name=f"scale-{mode}-{random.getrandbits(32):08x}", definition=json.dumps(DEFINITION),
        roleArn="arn:aws:iam::123456789012:role/bench")["stateMachineArn"]
    manifest = os.path.join(work, f"{mode}.yaml")
    with open(manifest, "w") as f:
        f.write("tools:\n  - name: job\n    task: required\n    poll_interval_ms: 1000\n"
                f"    target: {{engine: stepfunctions, state_machine_arn: \"{arn}\", endpoint_url: \"{endpoint}\"}}\n")
    env = dict(os.environ, FLOWGATE_STATE_DIR=work, FLOWGATE_LOG="error", FLOWGATE_HANDLE_KEYS=HANDLE_KEYS)
    env.pop("FLOWGATE_STEPFUNCTIONS_QUOTA_SHARE", None)
    if share is not None:
        env["FLOWGATE_STEPFUNCTIONS_QUOTA_SHARE"] = str(share)
    rng = random.Random(11)
    fleet = Fleet(binary, manifest, env, args.life, rng)
    fleet.target = phases[0][0]
    fleet.step()
    fleet.thread.start()
    record = Record()
    total = sum(seconds for _, seconds in phases)
    sched = Scheduler(workers=args.workers, until=time.monotonic() + total)

    def call(method, params, name):
        url = fleet.pick()
        if url is None:
            raise OSError("no instance in the load balancer")
        return mcp(url, method, params, name)

    def start_one(_key=None):
        seconds = rng.randint(*args.durations)
        try:
            answer = call("tools/call", {"name": "job", "arguments": {"seconds": seconds}}, "job")
            if "error" in answer:
                record.error(f"start: {answer['error'].get('message')}")
                sched.at(time.monotonic() + 1.0, start_one, None)
                return
            result = answer["result"]
            task = result["taskId"]
        except (urllib.error.URLError, OSError, ValueError, KeyError) as e:
            record.error(f"start: {e!r}")
            sched.at(time.monotonic() + 1.0, start_one, None)
            return
        with record.lock:
            record.planned[task] = time.time() + seconds
        sched.at(time.monotonic() + result.get("pollIntervalMs", 1000) / 1000.0, poll, task)
        sched.at(time.monotonic() + seconds, start_one, None)

    def poll(task):
        interval = 1000
        try:
            answer = call("tasks/get", {"taskId": task}, task)
            now = time.time()
            with record.lock:
                record.polls.append(now)
                record.late.append((now, getattr(LATE, "value", 0.0)))
            if "error" in answer:
                record.error(f"poll: {answer['error'].get('message', 'error')}")
            else:
                result = answer["result"]
                status = result.get("status")
                interval = result.get("pollIntervalMs", 1000)
                with record.lock:
                    record.intervals.append((now, interval))
                if status == "completed":
                    if result.get("result", {}).get("isError"):
                        record.error("the execution failed")
                    with record.lock:
                        record.ends.setdefault(task, (epoch(result["lastUpdatedAt"]), now))
                    return
                if status not in ("working", "input_required"):
                    record.error(f"status {status}")
        except (urllib.error.URLError, OSError, ValueError, KeyError) as e:
            record.error(f"poll: {e!r}")
        sched.at(time.monotonic() + interval / 1000.0, poll, task)

    # Phase boundaries and the proxy's counts at each phase's start, middle and end.
    marks = []

    def conductor():
        t = time.monotonic()
        for i, (instances, seconds) in enumerate(phases):
            fleet.target = instances
            began_wall = time.time()
            start = proxy_report(proxy, scope)
            time.sleep(seconds / 2)
            middle = proxy_report(proxy, scope)
            mid_at = time.monotonic()
            time.sleep(max(0.0, t + seconds - time.monotonic()))
            end = proxy_report(proxy, scope)
            marks.append({"instances": instances, "began": began_wall, "ended": time.time(),
                          "start": start, "middle": middle, "end": end,
                          "window": time.monotonic() - mid_at, "seconds": seconds,
                          "spawned": fleet.spawned})
            t += seconds
            print(f"  [{mode}] phase {i + 1}: {instances} instances done; {fleet.spawned} started so far",
                  flush=True)

    print(f"[{mode}] starting {args.executions} executions through {fleet.size()} instance(s) ...", flush=True)
    t_start = time.monotonic()
    import concurrent.futures
    with concurrent.futures.ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(lambda _: start_one(), range(args.executions)))
    print(f"[{mode}] started in {time.monotonic() - t_start:.0f} s; running the phases", flush=True)
    # The schedule starts now (the starts above belong to the first phase).
    sched.until = time.monotonic() + total
    c = threading.Thread(target=conductor, daemon=True)
    c.start()
    try:
        sched.run()
        c.join(timeout=30)
    finally:
        fleet.shutdown()
    return summarize(mode, record, marks)


def delta(a, b, key, op):
    return b[key].get(op, 0) - a[key].get(op, 0)


def summarize(mode, record, marks):
    out = []
    run_end = marks[-1]["ended"] if marks else time.time()
    for m in marks:
        ops = sorted(set(m["end"]["calls"]) | set(m["end"]["throttled"]))
        calls, throttled_all, made_all = {}, 0, 0
        for op in ops:
            made = delta(m["middle"], m["end"], "calls", op)
            throttled = delta(m["middle"], m["end"], "throttled", op)
            calls[op] = ((made - throttled) / m["window"], throttled, made)
            throttled_all += throttled
            made_all += made
        whole_throttled = sum(delta(m["start"], m["end"], "throttled", op) for op in ops)
        whole_made = sum(delta(m["start"], m["end"], "calls", op) for op in ops)
        lo, hi = m["began"] + WARMUP, min(m["ended"], run_end - TAIL)
        with record.lock:
            ended = [t for t, end in record.planned.items() if lo <= end <= hi]
            delays = sorted(max(0.0, record.ends[t][1] - record.ends[t][0]) for t in ended if t in record.ends)
            unseen = len([t for t in ended if t not in record.ends])
            errors = [e for at, e in record.errors if m["began"] <= at < m["ended"]]
            intervals = sorted(iv for at, iv in record.intervals if m["began"] + m["seconds"] / 2 <= at < m["ended"])
            polls = len([at for at in record.polls if m["began"] <= at < m["ended"]])
            late = sorted(l for at, l in record.late if m["began"] <= at < m["ended"])
        out.append({"instances": m["instances"], "calls": calls, "throttled": throttled_all,
                    "made": made_all, "whole_throttled": whole_throttled, "whole_made": whole_made,
                    "delays": delays, "unseen": unseen, "errors": errors, "intervals": intervals,
                    "polls_per_s": polls / m["seconds"], "late": late, "spawned": m["spawned"]})
    return out


def report(mode, phases):
    print(f"\n{mode}")
    for i, p in enumerate(phases):
        d = p["delays"]
        iv = p["intervals"]
        share = 100.0 * p["throttled"] / max(1, p["made"])
        whole = 100.0 * p["whole_throttled"] / max(1, p["whole_made"])
        print(f"  phase {i + 1}, {p['instances']} instance(s) ({p['spawned']} started by its end):")
        print(f"    end -> first poll showing it: p50 {percentile(d, 50):.1f} s, p95 {percentile(d, 95):.1f} s, "
              f"max {(d[-1] if d else float('nan')):.1f} s over {len(d)} ends; never seen: {p['unseen']}")
        print(f"    throttled: {p['throttled']} of {p['made']} calls ({share:.2f}%) in the second half; "
              f"{p['whole_throttled']} of {p['whole_made']} ({whole:.2f}%) over the phase")
        print(f"    client-visible errors: {len(p['errors'])}" + (f" (e.g. {p['errors'][0]})" if p["errors"] else ""))
        print(f"    polls: {p['polls_per_s']:.0f}/s, made p50 {percentile(p['late'], 50) * 1000:.0f} ms, "
              f"p95 {percentile(p['late'], 95) * 1000:.0f} ms after they were due; "
              f"pollIntervalMs median {iv[len(iv) // 2] if iv else '-'}")
        print(f"    {'operation':22}{'answered/s':>11}{'refill/s':>10}{'throttled':>11}")
        for op, (rate, throttled, made) in p["calls"].items():
            refill = REFILL.get(op)
            print(f"    {op:22}{rate:>11.2f}{(f'{refill:.0f}' if refill else '-'):>10}{throttled:>11}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--executions", type=int, default=1000)
    parser.add_argument("--phases", default="1:90,40:180,5:120",
                        help="INSTANCES:SECONDS,... (default 1:90,40:180,5:120)")
    parser.add_argument("--modes", default="adaptive,today,static")
    parser.add_argument("--binary", default=os.path.join(
        os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "debug", "flowgate"))
    parser.add_argument("--before", help="flowgate before the adaptive limiter (modes today, static)")
    parser.add_argument("--life", default="90:240", help="MIN:MAX seconds an instance lives")
    parser.add_argument("--durations", default="60:300", help="MIN:MAX seconds an execution runs")
    parser.add_argument("--workers", type=int, default=96, help="client threads")
    parser.add_argument("--list-cache", type=float, default=1.0,
                        help="seconds the proxy reuses moto's listing (moto's CPU; default 1)")
    parser.add_argument("--json", help="write the figures to this file too")
    args = parser.parse_args()
    phases = [tuple(int(x) for x in p.split(":")) for p in args.phases.split(",")]
    args.life = tuple(float(x) for x in args.life.split(":"))
    args.durations = tuple(int(x) for x in args.durations.split(":"))
    modes = args.modes.split(",")
    peak = max(n for n, _ in phases)
    plan = {"adaptive": (args.binary, None), "today": (args.before, None),
            "static": (args.before, 1.0 / peak)}
    for mode in modes:
        if mode not in plan:
            sys.exit(f"unknown mode {mode}")
        if not plan[mode][0] or not os.path.exists(plan[mode][0]):
            sys.exit(f"mode {mode} needs a flowgate binary (--binary, --before)")
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")
    work = tempfile.mkdtemp(prefix="sfn-scale-")
    os.chmod(work, 0o700)
    procs, results = [], []
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
        for mode in modes:
            binary, share = plan[mode]
            results.append((mode, share, run_mode(mode, binary, share, proxy, admin, work, args, phases)))
            for mode_, share_, r in results[-1:]:
                report(f"{mode_}" + (f" (share {share_:g})" if share_ else ""), r)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
    print("\n== all modes")
    for mode, share, r in results:
        report(f"{mode}" + (f" (share {share:g})" if share else ""), r)
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{"mode": m, "share": s, "phases": [dict(p, delays=p["delays"], late=None) for p in r]}
                       for m, s, r in results], f)


if __name__ == "__main__":
    main()
