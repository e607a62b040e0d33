#!/usr/bin/env python3
"""An AWS-faithful proxy in front of moto for the Step Functions API.

moto runs real state machines (execute_state_machine) but is kinder than AWS in ways the
Step Functions engine depends on. This proxy puts back what AWS does and moto does not:

- GetExecutionHistory pages: `maxResults` (default 100, at most 1000; 0 means the default),
  `reverseOrder`, `nextToken` (opaque; a token given with another execution or direction is
  refused with InvalidToken), and `includeExecutionData: false` drops the input and output of
  every event's details. moto ignores all four and always returns the whole history, oldest
  first.
- ListExecutions pages and filters: `maxResults` (default 100, at most 1000; 0 means the
  default; anything else is a ValidationException), `statusFilter` (one of RUNNING, SUCCEEDED,
  FAILED, TIMED_OUT, ABORTED, PENDING_REDRIVE, else a ValidationException), `nextToken` (opaque;
  one given with another state machine or filter is refused with InvalidToken), newest start
  first. moto pages by its own rules: the proxy reads moto's whole listing and pages it itself.
  AWS calls the listing eventually consistent; a scope's `list_lag` (seconds, default 0) shows
  it as it was that long ago (executions started since are missing, ones ended since are still
  RUNNING).
- API throttling: one token bucket per operation, account (here: per scope, below) and region
  (from the request's SigV4 credential scope), with the bucket sizes and refill rates AWS
  publishes for standard workflows (the Step Functions service quotas page, "API action
  throttling"): one table for us-east-1, us-west-2 and eu-west-1, another for the other
  regions; scaled by `--scale` (or a scope's own scale) so that tests reach the limits
  quickly. An empty bucket answers as AWS does: HTTP 400,
  `{"__type": "ThrottlingException", "message": "Rate exceeded"}`.
- Failures moto cannot produce: a stalled endpoint (the request is read and never answered),
  and a dropped answer (the request reaches moto, which acts on it, and the connection is then
  closed without an answer), per operation, for the next N calls.
- Transient read faults: after `skip` more reads (DescribeExecution, GetExecutionHistory,
  ListExecutions, DescribeStateMachineForExecution) the next one answers HTTP 503
  `ServiceUnavailable`, once (the engine conformance suite puts one at every read position).
- Calls are counted per operation (answered, throttled), so tests and the benchmark can hold
  the engine to its API budget.

Scopes: an endpoint URL of `http://proxy/scope/<name>` sends every call of that client to scope
`<name>`: its own buckets, counters, stalls and drops (an account of its own), so concurrent
tests do not share a budget. Requests to `/` are scope `default`.

Control (JSON):
  POST /_proxy/scopes/<name>   {"scale": 0.05, "stall": {"DescribeExecution": 1},
                                "drop": {"StartExecution": 1}, "buckets": {"Op": [size, refill]},
                                "page_cap": 100, "list_lag": 2, "list_cache": 1}   (history and
                                execution list pages hold at most page_cap entries, fewer than
                                asked, as a paged API may answer; `buckets` apply in every
                                region; `list_cache` reuses moto's listing of a state machine
                                for that many seconds: a listing at most that stale, within
                                AWS's eventual consistency, and moto's CPU spared for benchmarks
                                that list thousands of executions several times a second)
  POST /_proxy/scopes/<name>/drop/<Operation>   one more dropped answer, the rest kept
  POST /_proxy/scopes/<name>/read_fault   {"skip": n} fails the read after the next n reads
                                          (replacing what was armed); {"skip": null} disarms
  GET  /_proxy/scopes/<name>   {"calls": {op: n}, "seconds": {op: time spent answering},
                                "throttled": {op: n}, "stalled": ..., "dropped": ...}

Shortcuts that remain (each is kinder than AWS or simply absent):
- Bucket sizes and refill rates are the published defaults, read from the Step Functions quotas
  page; raised quotas and AWS's right to change them are not modelled. Operations the proxy
  has no bucket for (CreateStateMachine, StartSyncExecution, ...) are never throttled.
- A nextToken does not expire (AWS: 24 hours). Whether AWS refuses a ListExecutions token used
  with another statusFilter is not documented ("keep all other arguments unchanged"): the
  proxy refuses it.
- ListExecutions with `mapRunArn` or `redriveFilter` is moto's own (unpaged by the proxy), and
  a version or alias ARN in `stateMachineArn` goes to moto as it is (AWS lists the executions
  started through that version or alias).
- The listing's eventual consistency is a fixed lag, and none unless a scope sets `list_lag`;
  AWS publishes no bound.
- StartExecution on a version or alias ARN starts the unqualified machine (moto answers those
  with HTTP 500): the execution ARN is right, the definition is the latest one, and an unknown
  version or alias is not refused.
- Non-Step-Functions calls (SQS for the test fixtures' queues) pass through uncounted.
"""

import argparse
import base64
import http.client
import json
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

# (bucket size, refill per second): the published defaults for standard workflows in
# us-east-1, us-west-2 and eu-west-1 ...
LARGE_REGIONS = ("us-east-1", "us-west-2", "eu-west-1")
BUCKETS = {
    "StartExecution": (1300, 300),
    "DescribeExecution": (300, 15),
    "GetExecutionHistory": (400, 20),
    "StopExecution": (1000, 200),
    "ListExecutions": (200, 5),
    "SendTaskSuccess": (3000, 500),
    "SendTaskFailure": (3000, 500),
    "SendTaskHeartbeat": (3000, 500),
    "DescribeStateMachine": (200, 20),
    "RedriveExecution": (1300, 300),
}
# ... and in every other region.
OTHER_REGION_BUCKETS = {
    "StartExecution": (800, 150),
    "DescribeExecution": (250, 10),
    "GetExecutionHistory": (400, 20),
    "StopExecution": (500, 25),
    "ListExecutions": (100, 2),
    "SendTaskSuccess": (1500, 300),
    "SendTaskFailure": (1500, 300),
    "SendTaskHeartbeat": (1500, 300),
    "DescribeStateMachine": (200, 20),
    "RedriveExecution": (800, 150),
}

# The calls that only read: a transient fault on one of them must never change a result.
READS = ("DescribeExecution", "GetExecutionHistory", "ListExecutions",
         "DescribeStateMachineForExecution")

HISTORY_DEFAULT_PAGE = 100
HISTORY_MAX_PAGE = 1000
LIST_DEFAULT_PAGE = 100
LIST_MAX_PAGE = 1000
EXECUTION_STATUSES = ("RUNNING", "SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED", "PENDING_REDRIVE")


class Bucket:
    def __init__(self, size, refill):
        self.size = float(size)
        self.refill = float(refill)
        self.tokens = float(size)
        self.at = time.monotonic()

    def take(self):
        now = time.monotonic()
        self.tokens = min(self.size, self.tokens + (now - self.at) * self.refill)
        self.at = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


def region_of(authorization):
    """The region of a SigV4 `Authorization` header's credential scope (us-east-1 without one)."""
    marker = "Credential="
    at = (authorization or "").find(marker)
    if at < 0:
        return "us-east-1"
    parts = authorization[at + len(marker):].split(",", 1)[0].split("/")
    return parts[2] if len(parts) >= 5 else "us-east-1"


class Scope:
    def __init__(self, scale, buckets=None):
        self.scale = scale
        self.overrides = dict(buckets or {})
        self.buckets = {}
        self.calls = {}
        self.seconds = {}
        self.throttled = {}
        self.stall = {}
        self.drop = {}
        self.page_cap = None
        self.list_lag = 0.0
        self.list_cache = 0.0
        self.listings = {}  # (state machine, status) -> (when read from moto, executions)
        self.read_fault = None  # reads to let through before one fails, or None
        self.stalled = {}
        self.dropped = {}

    def bucket(self, region, op):
        """The bucket of `op` in `region`, made on first use from the region's table."""
        key = (region, op)
        if key not in self.buckets:
            table = BUCKETS if region in LARGE_REGIONS else OTHER_REGION_BUCKETS
            size_refill = self.overrides.get(op) or table.get(op)
            if size_refill is None:
                return None
            size, refill = size_refill
            self.buckets[key] = Bucket(max(1.0, size * self.scale), refill * self.scale)
        return self.buckets[key]

    def report(self):
        return {
            "scale": self.scale,
            "calls": self.calls,
            "seconds": {op: round(t, 3) for op, t in self.seconds.items()},
            "throttled": self.throttled,
            "stalled": self.stalled,
            "dropped": self.dropped,
        }


class State:
    def __init__(self, upstream, scale):
        self.upstream = urlparse(upstream)
        self.scale = scale
        self.lock = threading.Lock()
        self.scopes = {}

    def scope(self, name):
        with self.lock:
            if name not in self.scopes:
                self.scopes[name] = Scope(self.scale)
            return self.scopes[name]

    def configure(self, name, body):
        with self.lock:
            scope = Scope(float(body.get("scale", self.scale)), body.get("buckets"))
            scope.stall = dict(body.get("stall", {}))
            scope.drop = dict(body.get("drop", {}))
            scope.page_cap = body.get("page_cap")
            scope.list_lag = float(body.get("list_lag", 0))
            scope.list_cache = float(body.get("list_cache", 0))
            self.scopes[name] = scope
            return scope.report()

    def admit(self, scope, op, region="us-east-1"):
        """What happens to a call: 'throttle', 'stall', 'drop' or 'forward'."""
        with self.lock:
            scope.calls[op] = scope.calls.get(op, 0) + 1
            if scope.stall.get(op, 0) > 0 or scope.stall.get("*", 0) > 0:
                key = op if scope.stall.get(op, 0) > 0 else "*"
                scope.stall[key] -= 1
                scope.stalled[op] = scope.stalled.get(op, 0) + 1
                return "stall"
            if op in READS and scope.read_fault is not None:
                if scope.read_fault == 0:
                    scope.read_fault = None
                    return "fail"
                scope.read_fault -= 1
            bucket = scope.bucket(region, op)
            if bucket is not None and not bucket.take():
                scope.throttled[op] = scope.throttled.get(op, 0) + 1
                return "throttle"
            if scope.drop.get(op, 0) > 0:
                scope.drop[op] -= 1
                scope.dropped[op] = scope.dropped.get(op, 0) + 1
                return "drop"
            return "forward"


def encode_token(arn, reverse, boundary):
    raw = json.dumps({"a": arn, "r": reverse, "b": boundary}, separators=(",", ":")).encode()
    # AWS tokens are long opaque strings; this one is opaque enough to be treated as such.
    return base64.b64encode(raw).decode()


def decode_token(token, arn, reverse):
    try:
        data = json.loads(base64.b64decode(token.encode(), validate=True))
    except (ValueError, TypeError):
        return None
    if not isinstance(data, dict) or data.get("a") != arn or data.get("r") != reverse:
        return None
    boundary = data.get("b")
    return boundary if isinstance(boundary, int) else None


def encode_list_token(arn, status, boundary):
    raw = json.dumps({"m": arn, "s": status, "k": boundary}, separators=(",", ":")).encode()
    return base64.b64encode(raw).decode()


def decode_list_token(token, arn, status):
    try:
        data = json.loads(base64.b64decode(token.encode(), validate=True))
    except (ValueError, TypeError):
        return None
    if not isinstance(data, dict) or data.get("m") != arn or data.get("s") != status:
        return None
    boundary = data.get("k")
    if not (isinstance(boundary, list) and len(boundary) == 2):
        return None
    return boundary


def epoch(value):
    """A JSON timestamp as moto writes it (epoch seconds, or an ISO 8601 string)."""
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        from datetime import datetime
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return 0.0
    return 0.0


def validation(message):
    return 400, {"__type": "ValidationException", "message": "1 validation error detected: " + message}


def page_executions(request, executions, lag=0.0, page_cap=None, now=None):
    """Applies AWS's ListExecutions rules to moto's whole listing. Returns (status, body)."""
    arn = request.get("stateMachineArn", "")
    size = request.get("maxResults") or LIST_DEFAULT_PAGE
    if not isinstance(size, int) or isinstance(size, bool) or size < 0 or size > LIST_MAX_PAGE:
        return validation("Value at 'maxResults' failed to satisfy constraint: Member must have "
                          "value less than or equal to 1000")
    status = request.get("statusFilter")
    if status is not None and status not in EXECUTION_STATUSES:
        return validation("Value '%s' at 'statusFilter' failed to satisfy constraint: Member must "
                          "satisfy enum value set: [%s]" % (status, ", ".join(EXECUTION_STATUSES)))
    # Eventually consistent: the listing as it was `lag` seconds ago.
    seen_at = (now if now is not None else time.time()) - lag
    view = []
    for e in executions:
        if epoch(e.get("startDate")) > seen_at:
            continue
        if "stopDate" in e and epoch(e["stopDate"]) > seen_at:
            e = {k: v for k, v in e.items() if k != "stopDate"}
            e["status"] = "RUNNING"
        view.append(e)
    if status is not None:
        view = [e for e in view if e.get("status") == status]
    # Newest start first; the ARN breaks ties so that a page boundary is exact.
    key = lambda e: (epoch(e.get("startDate")), e.get("executionArn", ""))
    view.sort(key=key, reverse=True)
    token = request.get("nextToken")
    if token:
        boundary = decode_list_token(token, arn, status)
        if boundary is None:
            return 400, {"__type": "InvalidToken", "message": "Invalid Token: 'Invalid token'"}
        view = [e for e in view if key(e) < (boundary[0], boundary[1])]
    if page_cap:
        size = min(size, page_cap)
    page = view[:size]
    body = {"executions": page}
    if len(view) > size:
        body["nextToken"] = encode_list_token(arn, status, list(key(page[-1])))
    return 200, body


def strip_data(event):
    """includeExecutionData false: no input or output in any event's details."""
    for key, value in event.items():
        if key.endswith("EventDetails") and isinstance(value, dict):
            for field in ("input", "output", "inputDetails", "outputDetails"):
                value.pop(field, None)
    return event


def page_history(request, moto_answer, page_cap=None):
    """Applies AWS's paging to moto's whole, oldest-first history. Returns (status, body).
    `page_cap` (a scope setting) answers fewer events than asked, as a paged API may."""
    events = sorted(moto_answer.get("events", []), key=lambda e: e.get("id", 0))
    arn = request.get("executionArn", "")
    reverse = bool(request.get("reverseOrder", False))
    size = request.get("maxResults") or HISTORY_DEFAULT_PAGE
    if not isinstance(size, int) or size < 0 or size > HISTORY_MAX_PAGE:
        return 400, {
            "__type": "ValidationException",
            "message": "1 validation error detected: Value at 'maxResults' failed to satisfy "
            "constraint: Member must have value less than or equal to 1000",
        }
    if reverse:
        events.reverse()
    token = request.get("nextToken")
    if token:
        boundary = decode_token(token, arn, reverse)
        if boundary is None:
            return 400, {"__type": "InvalidToken", "message": "Invalid Token: 'Invalid token'"}
        events = [e for e in events if (e["id"] < boundary if reverse else e["id"] > boundary)]
    if page_cap:
        size = min(size, page_cap)
    page = events[:size]
    if request.get("includeExecutionData", True) is False:
        page = [strip_data(e) for e in page]
    body = {"events": page}
    if len(events) > size:
        body["nextToken"] = encode_token(arn, reverse, page[-1]["id"])
    return 200, body


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state = None  # set in main

    def log_message(self, fmt, *args):
        sys.stderr.write("%s %s\n" % (self.address_string(), fmt % args))

    def _answer(self, status, body, content_type="application/x-amz-json-1.0", headers=()):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("x-amzn-RequestId", "%032x" % int(time.time_ns()))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _read_body(self):
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _split_scope(self):
        path = self.path
        if path.startswith("/scope/"):
            rest = path[len("/scope/"):]
            name, _, tail = rest.partition("/")
            return name or "default", "/" + tail
        return "default", path

    def _upstream(self, method, path, body):
        up = self.state.upstream
        conn = http.client.HTTPConnection(up.hostname, up.port or 80, timeout=60)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection", "content-length")}
        headers["Host"] = "%s:%s" % (up.hostname, up.port or 80)
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        return resp.status, resp.getheader("Content-Type") or "application/json", data

    def _list_all(self, method, path, request, status=None):
        """moto's whole listing of a state machine's executions (of one status, if given),
        read through moto's own pages. Returns (status, content type, executions or moto's
        error body)."""
        executions, token = [], None
        while True:
            ask = {"stateMachineArn": request.get("stateMachineArn", ""), "maxResults": 1000}
            if status:
                ask["statusFilter"] = status
            if token:
                ask["nextToken"] = token
            status, ctype, data = self._upstream(method, path, json.dumps(ask).encode())
            if status != 200:
                return status, ctype, data
            answer = json.loads(data)
            executions.extend(answer.get("executions", []))
            token = answer.get("nextToken")
            if not token:
                return 200, ctype, executions

    def do_GET(self):
        if self.path.startswith("/_proxy/scopes/"):
            name = self.path[len("/_proxy/scopes/"):]
            scope = self.state.scope(name)
            with self.state.lock:
                report = json.loads(json.dumps(scope.report()))
            return self._answer(200, report, "application/json")
        self._forward("GET", b"")

    def do_POST(self):
        body = self._read_body()
        if self.path.startswith("/_proxy/scopes/") and "/drop/" in self.path:
            # Arm one more dropped answer for an operation, keeping the scope's state.
            name, _, op = self.path[len("/_proxy/scopes/"):].partition("/drop/")
            scope = self.state.scope(name)
            with self.state.lock:
                scope.drop[op] = scope.drop.get(op, 0) + 1
                report = json.loads(json.dumps(scope.report()))
            return self._answer(200, report, "application/json")
        if self.path.startswith("/_proxy/scopes/") and self.path.endswith("/read_fault"):
            name = self.path[len("/_proxy/scopes/"):-len("/read_fault")]
            scope = self.state.scope(name)
            try:
                skip = json.loads(body or b"{}").get("skip")
            except (ValueError, AttributeError):
                return self._answer(400, {"error": "not a JSON object"}, "application/json")
            with self.state.lock:
                scope.read_fault = skip if isinstance(skip, int) and skip >= 0 else None
                report = json.loads(json.dumps(scope.report()))
            return self._answer(200, report, "application/json")
        if self.path.startswith("/_proxy/scopes/"):
            name = self.path[len("/_proxy/scopes/"):]
            try:
                config = json.loads(body or b"{}")
            except ValueError:
                return self._answer(400, {"error": "not JSON"}, "application/json")
            return self._answer(200, self.state.configure(name, config), "application/json")
        self._forward("POST", body)

    def _forward(self, method, body):
        scope_name, path = self._split_scope()
        target = self.headers.get("X-Amz-Target", "")
        if not target.startswith("AWSStepFunctions."):
            status, ctype, data = self._upstream(method, path, body)
            return self._answer(status, data, ctype)
        op = target.split(".", 1)[1]
        scope = self.state.scope(scope_name)
        began = time.monotonic()
        try:
            self._handle(method, path, body, op, scope)
        finally:
            with self.state.lock:
                scope.seconds[op] = scope.seconds.get(op, 0.0) + time.monotonic() - began

    def _handle(self, method, path, body, op, scope):
        verdict = self.state.admit(scope, op, region_of(self.headers.get("Authorization")))
        if verdict == "stall":
            # Accept, never answer: hold the connection until the client gives up.
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:
                time.sleep(0.5)
                try:
                    self.connection.settimeout(0.01)
                    if self.connection.recv(1, socket.MSG_PEEK) == b"":
                        break  # the client hung up
                except socket.timeout:
                    pass
                except OSError:
                    break
            self.close_connection = True
            return
        if verdict == "throttle":
            return self._answer(400, {"__type": "ThrottlingException", "message": "Rate exceeded"})
        if verdict == "fail":
            return self._answer(503, {"__type": "ServiceUnavailable",
                                      "message": "Service is unavailable"})
        try:
            request = json.loads(body or b"{}")
        except ValueError:
            request = {}
        if op == "GetExecutionHistory":
            upstream_request = {k: v for k, v in request.items()
                                if k not in ("maxResults", "reverseOrder", "nextToken")}
            status, ctype, data = self._upstream(method, path, json.dumps(upstream_request).encode())
            if status == 200:
                status, answer = page_history(request, json.loads(data), scope.page_cap)
                data = json.dumps(answer).encode()
        elif op == "ListExecutions" and not (request.get("mapRunArn") or request.get("redriveFilter")):
            # Without a lag, moto can filter (a lag needs every status: ended ones may still show).
            wanted = request.get("statusFilter")
            wanted = wanted if wanted in EXECUTION_STATUSES and not scope.list_lag else None
            key = (request.get("stateMachineArn", ""), wanted)
            cached = scope.listings.get(key) if scope.list_cache else None
            if cached and time.monotonic() - cached[0] < scope.list_cache:
                status, ctype, data = 200, "application/x-amz-json-1.0", cached[1]
            else:
                status, ctype, data = self._list_all(method, path, request, wanted)
                if status == 200 and scope.list_cache:
                    scope.listings[key] = (time.monotonic(), data)
            if status == 200:
                status, answer = page_executions(request, data, scope.list_lag, scope.page_cap)
                data = json.dumps(answer).encode()
        elif op == "StartExecution" and request.get("stateMachineArn", "").count(":") == 7:
            # moto cannot start a version or an alias (HTTP 500): start the machine itself;
            # the execution ARN is the unqualified machine's, as AWS makes it.
            request["stateMachineArn"] = request["stateMachineArn"].rsplit(":", 1)[0]
            status, ctype, data = self._upstream(method, path, json.dumps(request).encode())
        else:
            status, ctype, data = self._upstream(method, path, body)
        if verdict == "drop":
            # moto acted on the call; its answer is lost on the way back.
            self.close_connection = True
            try:
                self.connection.shutdown(2)
            except OSError:
                pass
            return
        self._answer(status, data, ctype)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--upstream", required=True, help="moto's URL")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="multiplies every bucket size and refill rate (default 1: AWS's)")
    args = parser.parse_args()
    Handler.state = State(args.upstream, args.scale)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    print("listening on http://127.0.0.1:%d" % server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
