#!/usr/bin/env python3
"""A Lambda emulator for flowgate's tests: the Runtime API a custom runtime (`bootstrap`) polls,
the sandboxes that run it, a Function URL in front, and the Invoke API, behaving as Lambda does.

    python3 tests/fakes/lambda/emulator.py --task-root DIR [--timeout 30] \
        [--invoke-mode BUFFERED|RESPONSE_STREAM] [--auth-type AWS_IAM|NONE] \
        [--iam-user AKID:SECRET:ARN ...] [--env NAME=VALUE ...] [--pass-env NAME ...]

It prints one JSON line on stdout once listening:
    {"function_url": "http://127.0.0.1:P1", "invoke_api": "http://127.0.0.1:P2",
     "signing_proxy": "http://127.0.0.1:P3" (when --iam-user is given), "host": "<url-id>.lambda-url..."}

What it does as Lambda does (AWS Lambda Developer Guide: "Using the Lambda runtime API",
"Response streaming", "Invoking Lambda function URLs", "Lambda quotas"):

- Runtime API 2018-06-01 per sandbox, on its own port (`AWS_LAMBDA_RUNTIME_API`):
  `GET /runtime/invocation/next` blocks until an invocation, answering the event with
  `Lambda-Runtime-Aws-Request-Id`, `Lambda-Runtime-Deadline-Ms` (delivery time + the function
  timeout, Unix ms), `Lambda-Runtime-Invoked-Function-Arn`, `Lambda-Runtime-Trace-Id`
  (`Root=1-...;Parent=...;Sampled=0`); `Lambda-Runtime-Client-Context` and
  `Lambda-Runtime-Cognito-Identity` only when the invoke carries them (never for URLs).
  `POST /runtime/invocation/{id}/response` (202), `.../error` (202), `/runtime/init/error`.
  An unknown or expired request id is 400 `InvalidRequestID`; a second answer to one invocation
  is 403 `InvalidStateTransition`; a buffered answer over 6,291,556 bytes is 413
  `RequestEntityTooLarge` ("Exceeded maximum allowed payload size (6291556 bytes).") and the
  invocation fails with `Function.ResponseSizeTooLarge`.
- Streaming answers: `Lambda-Runtime-Function-Response-Mode: streaming` with a chunked body;
  with content type `application/vnd.awslambda.http-integration-response` the body starts with
  a JSON prelude (statusCode, headers, cookies) and 8 NUL bytes, then the HTTP body. Mid-stream
  errors come as the `Lambda-Runtime-Function-Error-Type`/`-Body` trailers (lambda_runtime
  1.x writes them as a last body chunk in trailer syntax; that is recognised too). At most
  200 MB are streamed (then the stream is cut and the invocation fails); the first 6 MB go
  uncapped, the rest at most 2 MB/s.
- Sandboxes: one invocation at a time each; a new concurrent invocation gets another sandbox
  (a cold start: the runtime process is started, and init ends at its first `/next`), up to
  `--max-sandboxes` (then 429 TooManyRequestsException / "Rate Exceeded."). When an invocation
  passes its deadline the sandbox's process group is killed (SIGKILL) and the sandbox is reset:
  its next invocation starts a fresh process, so nothing in process memory survives. A runtime
  that exits mid-invocation fails it with `Runtime.ExitError` and is reset the same way. Init
  has Lambda's 10 s limit.
- The environment is Lambda's: only the reserved variables (AWS_LAMBDA_RUNTIME_API,
  AWS_LAMBDA_FUNCTION_NAME/VERSION/MEMORY_SIZE, AWS_LAMBDA_LOG_GROUP_NAME/STREAM_NAME,
  AWS_REGION, AWS_DEFAULT_REGION, _HANDLER, LAMBDA_TASK_ROOT, LAMBDA_RUNTIME_DIR, TZ, LANG,
  PATH, LD_LIBRARY_PATH, AWS_LAMBDA_INITIALIZATION_TYPE) plus the function's configured
  variables (`--env`) and, standing for the execution role's credentials, `--pass-env` ones.
  The working directory is the task root.
- Function URL front (payload format 2.0): `version`, `routeKey` `$default`, `rawPath`,
  `rawQueryString`, `cookies` (taken out of `headers`), `headers` (lower-case, repeated ones
  joined with commas), `queryStringParameters`, `requestContext` (accountId, apiId = the url-id,
  authorizer.iam for AWS_IAM, domainName, domainPrefix, http.{method,path,protocol,sourceIp,
  userAgent}, requestId, routeKey, stage, time, timeEpoch), `body` (base64 unless textual) and
  `isBase64Encoded`; Lambda's x-amzn-trace-id and x-forwarded-{for,proto,port} headers added.
  AWS_IAM: a SigV4 signature (service `lambda`) is checked against the configured users'
  secrets, with the 5-minute clock skew; unsigned or wrong is 403 `{"Message":"Forbidden"}`.
  BUFFERED: the function's JSON answer is mapped as the guide says (an object with statusCode
  is an HTTP response; other JSON is a 200 application/json body). RESPONSE_STREAM: the stream
  is relayed as it comes (chunked); a function answering buffered in this mode has its raw JSON
  answer relayed as the body, as Lambda does. A failed, timed-out or oversized invocation is
  502 "Internal Server Error"; a request over 6 MB is 413.
- Invoke API: `POST /2015-03-31/functions/{name}/invocations` with any event (API Gateway's,
  ALB's): 200 with the answer, or 200 + `X-Amz-Function-Error: Unhandled` and Lambda's error
  object (`Sandbox.Timedout` "Task timed out after N.NN seconds", `Function.ResponseSizeTooLarge`,
  `Runtime.ExitError`, or the runtime's own error).

Shortcuts (what it does not do as Lambda does):
- No isolation: the runtime runs as this user with the host's filesystem; /var/task is not a
  read-only mount (the task root is the working directory and `LAMBDA_TASK_ROOT`; a configured
  variable's leading `/var/task` is replaced by the task root) and /tmp is a per-sandbox folder
  named by TMPDIR (and substituted for a leading `/tmp` the same way). No memory limit.
- Sandboxes are frozen between invocations only with `--freeze` (as Lambda freezes them: once
  the runtime asks `/next` with no invocation waiting, until its next one): without it a
  process's background threads keep running. Freezing stops the runtime's process group
  (SIGSTOP, SIGCONT), not a cgroup: a process that started a session of its own keeps running.
  Idle sandboxes are not reclaimed except by `POST /_emulator/reset`. When the emulator
  stops, each sandbox is shut down: its processes (also those in sessions of their own that
  name its /tmp folder in their command line or environment, or work in it) are killed and
  the folder removed.
- Init: no 10 s retry inside the invoke's timeout (an init over 10 s fails the invocation),
  no SnapStart, no extensions API, no Telemetry/Logs API; logs go to this process's stderr.
- The Function URL checks SigV4 in the Authorization header only (no presigned query strings),
  knows no resource policy (every configured user may invoke), and has no CORS configuration.
  The exact wording of Function URL error bodies other than 403 is not documented; these are
  what deployments are commonly seen to answer.
- The Invoke API is not authenticated and knows only RequestResponse invocations.
- The streaming bandwidth cap is applied per chunk (sleeping), not shaped on the wire.

Control (tests): `GET /_emulator/state` on the Invoke API port answers counts (inits, timeouts,
kills, invocations, throttles, sandboxes, busy); `POST /_emulator/reset`
kills every sandbox (a new deployment: the next invocations start cold).
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import hashlib
import hmac
import http.client
import http.server
import json
import os
import queue
import secrets
import shutil
import signal
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

BUFFERED_LIMIT = 6_291_556  # bytes, what Lambda's error message names for 6 MB
REQUEST_LIMIT = 6_291_456
STREAM_LIMIT = 200 * 1024 * 1024
STREAM_UNCAPPED = 6 * 1024 * 1024
STREAM_RATE = 2 * 1024 * 1024  # bytes per second past the uncapped part
INIT_LIMIT = 10.0
PRELUDE_TYPE = "application/vnd.awslambda.http-integration-response"
DELIMITER = b"\0" * 8
ACCOUNT = "123456789012"
REGION = "us-east-1"
TEXTUAL = ("text/", "application/json", "application/xml", "application/javascript",
           "application/x-www-form-urlencoded", "application/ld+json", "application/yaml")


def log(*parts: object) -> None:
    print("[lambda]", *parts, file=sys.stderr, flush=True)


class Outcome:
    """How an invocation ended: a buffered payload, a stream, or an error object."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.payload: bytes | None = None
        self.error: dict | None = None
        self.error_kind = ""  # "function" (runtime posted /error) or "platform"
        # Streaming: chunks of the response body as they arrive; None ends the stream.
        self.stream: queue.Queue | None = None
        self.stream_started = threading.Event()
        self.content_type = ""

    def fail(self, error_type: str, message: str, kind: str = "platform") -> None:
        if self.done.is_set():
            return
        self.error = {"errorType": error_type, "errorMessage": message}
        self.error_kind = kind
        if self.stream is not None:
            self.stream.put(None)
        self.stream_started.set()
        self.done.set()


class Invocation:
    def __init__(self, event: bytes, headers: dict[str, str]) -> None:
        self.request_id = str(_uuid())
        self.event = event
        self.extra_headers = headers
        self.outcome = Outcome()
        self.deadline_ms = 0
        self.delivered = threading.Event()
        self.answered = False


def _uuid() -> str:
    h = secrets.token_hex(16)
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


class Sandbox:
    """One execution environment: a runtime process, its Runtime API, one invocation at a time."""

    def __init__(self, service: "LambdaService", number: int) -> None:
        self.service = service
        self.number = number
        self.lock = threading.Lock()
        self.busy = False
        self.process: subprocess.Popen | None = None
        self.generation = 0
        self.pending: queue.Queue[Invocation] = queue.Queue()
        self.current: Invocation | None = None
        self.ready = threading.Event()  # the runtime called /next (init done)
        self.tmp = tempfile.mkdtemp(prefix=f"lambda-sandbox-{number}-")
        self.server = _Server(("127.0.0.1", 0), _runtime_handler(self))
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"

    # -- lifecycle -----------------------------------------------------------------------------

    def start_process(self) -> None:
        svc = self.service
        self.generation += 1
        self.pending = queue.Queue()
        self.ready.clear()
        env = {
            "AWS_LAMBDA_RUNTIME_API": self.address,
            "AWS_LAMBDA_FUNCTION_NAME": svc.name,
            "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(svc.memory),
            "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{svc.name}",
            "AWS_LAMBDA_LOG_STREAM_NAME": f"{dt.date.today():%Y/%m/%d}/[$LATEST]{secrets.token_hex(16)}",
            "AWS_LAMBDA_INITIALIZATION_TYPE": "on-demand",
            "AWS_REGION": REGION,
            "AWS_DEFAULT_REGION": REGION,
            "_HANDLER": "bootstrap",
            "LAMBDA_TASK_ROOT": svc.task_root,
            "LAMBDA_RUNTIME_DIR": svc.task_root,
            "TZ": ":UTC",
            "LANG": "en_US.UTF-8",
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "LD_LIBRARY_PATH": "/lib64:/usr/lib64",
            "TMPDIR": self.tmp,
        }
        for name in svc.pass_env:
            if name in os.environ:
                env[name] = os.environ[name]
        for name, value in svc.env.items():
            env[name] = self._localize(value)
        log(f"sandbox {self.number}: INIT_START (process {self.generation})")
        self.process = subprocess.Popen(
            [svc.bootstrap], cwd=svc.task_root, env=env, stdin=subprocess.DEVNULL,
            stdout=sys.stderr, stderr=sys.stderr, start_new_session=True)
        svc.count("inits")
        threading.Thread(target=self._watch, args=(self.process, self.generation), daemon=True).start()

    def _localize(self, value: str) -> str:
        for prefix, local in (("/var/task", self.service.task_root), ("/tmp", self.tmp)):
            if value == prefix or value.startswith(prefix + "/"):
                return local + value[len(prefix):]
        return value

    def _watch(self, process: subprocess.Popen, generation: int) -> None:
        code = process.wait()
        with self.lock:
            if generation != self.generation:
                return
            current = self.current
            self.process = None
        log(f"sandbox {self.number}: runtime exited ({code})")
        if current is not None:
            current.outcome.fail("Runtime.ExitError",
                                 f"RequestId: {current.request_id} Error: Runtime exited with error: exit status {code}")
        self.ready.set()  # wake a waiting init

    def freeze_if_idle(self) -> bool:
        """Freezes the runtime (--freeze) when no invocation waits for it; whether it did."""
        process = self.process
        if not self.service.freeze or process is None or not self.pending.empty():
            return False
        try:
            os.killpg(process.pid, signal.SIGSTOP)
        except ProcessLookupError:
            return False
        self.service.count("freezes")
        return True

    def thaw(self) -> None:
        process = self.process
        if process is not None:
            try:
                os.killpg(process.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass

    def kill(self, why: str) -> None:
        with self.lock:
            process = self.process
            self.process = None
            self.generation += 1
            self.current = None
        if process is not None and process.poll() is None:
            log(f"sandbox {self.number}: killing the runtime ({why})")
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()
            self.service.count("kills")
        # Whatever the runtime was blocked on is gone with it: its /next waits on a queue no
        # invocation will reach.
        self.pending = queue.Queue()

    def destroy(self) -> None:
        """Ends the environment, as Lambda does when it shuts one down: the runtime, every
        process still at work in its /tmp (one that started a session of its own escapes
        `kill`'s process group: found by its command line, environment or working directory
        naming the folder), and the folder itself."""
        self.kill("shut down")
        folder = self.tmp.encode()
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) == os.getpid():
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmdline = f.read()
                with open(f"/proc/{pid}/environ", "rb") as f:
                    environ = f.read()
                cwd = os.readlink(f"/proc/{pid}/cwd")
            except OSError:
                continue
            if folder in cmdline or folder in environ or cwd == self.tmp or cwd.startswith(self.tmp + "/"):
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- invoking ------------------------------------------------------------------------------

    def invoke(self, invocation: Invocation) -> None:
        """Runs one invocation to its outcome (the caller holds this sandbox as busy)."""
        if self.process is None or self.process.poll() is not None:
            self.start_process()
            if not self.ready.wait(INIT_LIMIT) or self.process is None:
                self.kill("init failed or timed out")
                invocation.outcome.fail("Runtime.Unknown" if self.process else "Runtime.ExitError",
                                        f"RequestId: {invocation.request_id} Error: the runtime failed to initialize")
                return
        with self.lock:
            self.current = invocation
        self.pending.put(invocation)
        timeout = self.service.timeout
        if invocation.delivered.wait(timeout):
            # The deadline the runtime was given, to the millisecond.
            remaining = invocation.deadline_ms / 1000 - time.time()
            finished = invocation.outcome.done.wait(max(remaining, 0))
        else:
            finished = invocation.outcome.done.is_set()
        if not finished:
            self.service.count("timeouts")
            log(f"sandbox {self.number}: {invocation.request_id} Task timed out after {timeout:.2f} seconds")
            self.kill("timeout")
            invocation.outcome.fail("Sandbox.Timedout",
                                    f"RequestId: {invocation.request_id} Error: Task timed out after {timeout:.2f} seconds")
        with self.lock:
            if self.current is invocation:
                self.current = None


def _runtime_handler(sandbox: Sandbox):
    class RuntimeApi(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:  # quiet
            pass

        def _send(self, status: int, body: dict | None = None, headers: dict | None = None,
                  raw: bytes | None = None) -> None:
            data = raw if raw is not None else (json.dumps(body).encode() if body is not None else b"")
            self.send_response(status)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            if raw is None:
                self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path.rstrip("/") != "/2018-06-01/runtime/invocation/next":
                return self._send(404, {"errorType": "NotFound", "errorMessage": "not found"})
            generation = sandbox.generation
            pending = sandbox.pending
            # The invoke phase is over: with --freeze, nothing of the runtime runs until the
            # next invocation is handed over.
            frozen = sandbox.freeze_if_idle()
            sandbox.ready.set()
            while True:
                try:
                    inv = pending.get(timeout=1.0)
                    break
                except queue.Empty:
                    if generation != sandbox.generation:
                        # This runtime was killed; its connection dies with it.
                        self.close_connection = True
                        return
            if frozen:
                sandbox.thaw()
            now = time.time()
            inv.deadline_ms = int((now + sandbox.service.timeout) * 1000)
            inv.delivered.set()
            headers = {
                "Lambda-Runtime-Aws-Request-Id": inv.request_id,
                "Lambda-Runtime-Deadline-Ms": str(inv.deadline_ms),
                "Lambda-Runtime-Invoked-Function-Arn":
                    f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{sandbox.service.name}",
                "Lambda-Runtime-Trace-Id":
                    f"Root=1-{int(now):08x}-{secrets.token_hex(12)};Parent={secrets.token_hex(8)};Sampled=0",
                "Content-Type": "application/json",
            }
            headers.update(inv.extra_headers)
            log(f"sandbox {sandbox.number}: START RequestId: {inv.request_id} Version: $LATEST")
            self._send(200, headers=headers, raw=inv.event)

        def do_POST(self) -> None:
            parts = self.path.strip("/").split("/")
            if parts[:3] == ["2018-06-01", "runtime", "init"] and parts[3:] == ["error"]:
                body = self._read_body_fully()
                log(f"sandbox {sandbox.number}: init error: {body[:500]!r}")
                self._send(202, {"status": "OK"})
                return
            if len(parts) != 5 or parts[:3] != ["2018-06-01", "runtime", "invocation"] \
                    or parts[4] not in ("response", "error"):
                self._read_body_fully()
                return self._send(404, {"errorType": "NotFound", "errorMessage": "not found"})
            request_id, kind = parts[3], parts[4]
            inv = sandbox.current
            if inv is None or inv.request_id != request_id:
                self._read_body_fully()
                return self._send(400, {"errorType": "InvalidRequestID",
                                        "errorMessage": "Invalid request ID"})
            if inv.answered:
                self._read_body_fully()
                return self._send(403, {"errorType": "InvalidStateTransition",
                                        "errorMessage": "State transition from Ready to InvocationResponse failed for runtime."})
            inv.answered = True
            if kind == "error":
                body = self._read_body_fully()
                try:
                    err = json.loads(body)
                except ValueError:
                    err = {"errorMessage": body.decode(errors="replace"), "errorType": "Unknown"}
                inv.outcome.fail(err.get("errorType") or
                                 self.headers.get("Lambda-Runtime-Function-Error-Type", "Unknown"),
                                 err.get("errorMessage", ""), kind="function")
                self._send(202, {"status": "OK"})
                return
            if self.headers.get("Lambda-Runtime-Function-Response-Mode", "").lower() == "streaming":
                return self._stream(inv)
            body = self._read_body_fully()
            if len(body) > BUFFERED_LIMIT:
                inv.outcome.fail("Function.ResponseSizeTooLarge",
                                 f"Response payload size exceeded maximum allowed payload size ({BUFFERED_LIMIT} bytes).")
                return self._send(413, {"errorType": "RequestEntityTooLarge",
                                        "errorMessage": f"Exceeded maximum allowed payload size ({BUFFERED_LIMIT} bytes)."})
            inv.outcome.payload = body
            inv.outcome.stream_started.set()
            inv.outcome.done.set()
            log(f"sandbox {sandbox.number}: END RequestId: {inv.request_id} ({len(body)} bytes)")
            self._send(202, {"status": "OK"})

        def _stream(self, inv: Invocation) -> None:
            out = inv.outcome
            out.stream = queue.Queue()
            out.content_type = self.headers.get("Content-Type", "application/octet-stream")
            out.stream_started.set()
            total = 0
            started = time.monotonic()
            trailers: dict[str, str] = {}
            chunked = "chunked" in self.headers.get("Transfer-Encoding", "").lower()
            try:
                for chunk in (self._chunks(trailers) if chunked else [self._read_body_fully()]):
                    if out.done.is_set():
                        break
                    marker = b"Lambda-Runtime-Function-Error-Type:"
                    if chunk.startswith(marker):
                        for line in chunk.decode(errors="replace").split("\r\n"):
                            if ":" in line:
                                k, v = line.split(":", 1)
                                trailers[k.strip().lower()] = v.strip()
                        continue
                    total += len(chunk)
                    if total > STREAM_LIMIT:
                        out.fail("Function.ResponseSizeTooLarge",
                                 f"Response payload size exceeded maximum allowed payload size ({STREAM_LIMIT} bytes).")
                        break
                    if total > STREAM_UNCAPPED:
                        # Past the uncapped part, at most STREAM_RATE bytes a second.
                        due = started + (total - STREAM_UNCAPPED) / STREAM_RATE
                        pause = due - time.monotonic()
                        if pause > 0:
                            time.sleep(pause)
                    out.stream.put(chunk)
            except (OSError, ValueError) as e:
                log(f"sandbox {sandbox.number}: stream broke: {e}")
                trailers.setdefault("lambda-runtime-function-error-type", "Runtime.StreamError")
            if "lambda-runtime-function-error-type" in trailers and not out.done.is_set():
                body = trailers.get("lambda-runtime-function-error-body", "")
                try:
                    body = base64.b64decode(body).decode(errors="replace")
                except ValueError:
                    pass
                out.fail(trailers["lambda-runtime-function-error-type"], body, kind="function")
            elif not out.done.is_set():
                out.stream.put(None)
                out.done.set()
                log(f"sandbox {sandbox.number}: END RequestId: {inv.request_id} (streamed {total} bytes)")
            try:
                self._send(202, {"status": "OK"})
            except OSError:
                pass

        def _chunks(self, trailers: dict[str, str]):
            while True:
                line = self.rfile.readline(65537)
                if not line:
                    raise ValueError("the stream ended without its last chunk")
                size = int(line.split(b";")[0].strip(), 16)
                if size == 0:
                    while True:
                        t = self.rfile.readline(65537)
                        if t in (b"\r\n", b"\n", b""):
                            return
                        if b":" in t:
                            k, v = t.decode(errors="replace").split(":", 1)
                            trailers[k.strip().lower()] = v.strip()
                data = self.rfile.read(size)
                self.rfile.readline()
                yield data

        def _read_body_fully(self) -> bytes:
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                return b"".join(self._chunks({}))
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

    return RuntimeApi


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request, client_address) -> None:
        # A killed runtime's or a departed client's connection: nothing to report.
        if not isinstance(sys.exc_info()[1], (ConnectionError, BrokenPipeError, TimeoutError)):
            super().handle_error(request, client_address)


class LambdaService:
    """The function: its configuration, its sandboxes and the counters tests read."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.name = args.function_name
        self.task_root = os.path.abspath(args.task_root)
        self.bootstrap = os.path.join(self.task_root, "bootstrap") if not args.bootstrap else os.path.abspath(args.bootstrap)
        self.timeout = float(args.timeout)
        self.memory = args.memory
        self.max_sandboxes = args.max_sandboxes
        self.env = dict(e.split("=", 1) for e in args.env)
        self.pass_env = list(args.pass_env)
        self.freeze = bool(args.freeze)
        self.lock = threading.Lock()
        self.sandboxes: list[Sandbox] = []
        self.counters = {"inits": 0, "timeouts": 0, "kills": 0, "invocations": 0,
                         "throttles": 0, "freezes": 0}

    def count(self, name: str, n: int = 1) -> None:
        with self.lock:
            self.counters[name] += n

    def state(self) -> dict:
        with self.lock:
            return dict(self.counters, sandboxes=len(self.sandboxes),
                        busy=sum(1 for s in self.sandboxes if s.busy))

    def reset(self) -> None:
        with self.lock:
            sandboxes = list(self.sandboxes)
        for s in sandboxes:
            s.kill("reset")

    def shut_down(self) -> None:
        with self.lock:
            sandboxes = list(self.sandboxes)
        for s in sandboxes:
            s.destroy()

    def _acquire(self) -> Sandbox | None:
        with self.lock:
            for s in self.sandboxes:
                if not s.busy:
                    s.busy = True
                    return s
            if len(self.sandboxes) >= self.max_sandboxes:
                self.counters["throttles"] += 1
                return None
            s = Sandbox(self, len(self.sandboxes) + 1)
            s.busy = True
            self.sandboxes.append(s)
            return s

    def invoke(self, event: bytes, headers: dict[str, str] | None = None) -> Invocation | None:
        """Starts an invocation on a free sandbox; None when throttled. The outcome fills in
        while the sandbox runs it (in a thread of its own, so a stream can be relayed)."""
        sandbox = self._acquire()
        if sandbox is None:
            return None
        self.count("invocations")
        inv = Invocation(event, headers or {})

        def run() -> None:
            try:
                sandbox.invoke(inv)
            finally:
                with self.lock:
                    sandbox.busy = False

        threading.Thread(target=run, daemon=True).start()
        return inv


# -- SigV4 (verification) ---------------------------------------------------------------------

def _sign(key: bytes, msg: str) -> bytes:
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def verify_sigv4(method: str, path: str, query: str, headers: dict[str, list[str]], body: bytes,
                 users: dict[str, tuple[str, str]]) -> tuple[str, str] | None:
    """The (access key, ARN) of the user whose SigV4 signature this request carries, or None."""
    auth = (headers.get("authorization") or [""])[0]
    if not auth.startswith("AWS4-HMAC-SHA256 "):
        return None
    fields = {}
    for part in auth[len("AWS4-HMAC-SHA256 "):].split(","):
        if "=" in part:
            k, v = part.strip().split("=", 1)
            fields[k] = v
    try:
        akid, date, region, service, terminal = fields["Credential"].split("/")
        signed = fields["SignedHeaders"].split(";")
        signature = fields["Signature"]
    except (KeyError, ValueError):
        return None
    if akid not in users or service != "lambda" or terminal != "aws4_request" or "host" not in signed:
        return None
    amz_date = (headers.get("x-amz-date") or [""])[0]
    try:
        when = dt.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.timezone.utc)
    except ValueError:
        return None
    if abs((dt.datetime.now(dt.timezone.utc) - when).total_seconds()) > 300 or not amz_date.startswith(date):
        return None
    canonical_headers = "".join(
        f"{h}:{','.join(' '.join(v.split()) for v in headers.get(h, []))}\n" for h in signed)
    pairs = sorted(
        (urllib.parse.quote(urllib.parse.unquote(k), safe="-_.~"),
         urllib.parse.quote(urllib.parse.unquote(v), safe="-_.~"))
        for k, _, v in (p.partition("=") for p in query.split("&") if p))
    canonical_query = "&".join(f"{k}={v}" for k, v in pairs)
    payload_hash = (headers.get("x-amz-content-sha256") or [hashlib.sha256(body).hexdigest()])[0]
    if payload_hash != "UNSIGNED-PAYLOAD" and payload_hash != hashlib.sha256(body).hexdigest():
        return None
    # Services other than S3 sign the path as sent, URI-encoded once more.
    canonical_path = urllib.parse.quote(path or "/", safe="/~")
    canonical = "\n".join([method, canonical_path, canonical_query, canonical_headers,
                           ";".join(signed), payload_hash])
    scope = f"{date}/{region}/{service}/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                         hashlib.sha256(canonical.encode()).hexdigest()])
    secret, arn = users[akid]
    key = _sign(("AWS4" + secret).encode(), date)
    for step in (region, service, "aws4_request"):
        key = _sign(key, step)
    expected = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, signature):
        return None
    return akid, arn


# -- the Function URL front -------------------------------------------------------------------

def _function_url_handler(service: LambdaService, opts: argparse.Namespace):
    host = opts.host
    url_id = host.split(".")[0]
    users = opts.users

    class FunctionUrl(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None: self._handle()
        def do_POST(self) -> None: self._handle()
        def do_DELETE(self) -> None: self._handle()
        def do_PUT(self) -> None: self._handle()
        def do_PATCH(self) -> None: self._handle()
        def do_OPTIONS(self) -> None: self._handle()
        def do_HEAD(self) -> None: self._handle()

        def _plain(self, status: int, body: bytes, ctype: str = "application/json",
                   extra: dict | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("x-amzn-RequestId", _uuid())
            for k, v in (extra or {}).items():
                self.send_header(k, v)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                body = b""
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass
                        break
                    body += self.rfile.read(size)
                    self.rfile.readline()
            else:
                body = self.rfile.read(length) if length else b""
            headers: dict[str, list[str]] = {}
            for k, v in self.headers.items():
                headers.setdefault(k.lower(), []).append(v)
            split = urllib.parse.urlsplit(self.path)
            caller = None
            if opts.auth_type == "AWS_IAM":
                caller = verify_sigv4(self.command, split.path, split.query, headers, body, users)
                if caller is None:
                    return self._plain(403, b'{"Message":"Forbidden"}',
                                       extra={"x-amzn-ErrorType": "AccessDeniedException"})
            event = self._event(split, headers, body, caller)
            raw = json.dumps(event).encode()
            if len(raw) > REQUEST_LIMIT:
                return self._plain(413, json.dumps({"Message": f"Request must be smaller than {REQUEST_LIMIT} bytes for the InvokeFunction operation"}).encode())
            inv = service.invoke(raw)
            if inv is None:
                return self._plain(429, b'{"Message":"Rate Exceeded."}',
                                   extra={"x-amzn-ErrorType": "TooManyRequestsException"})
            out = inv.outcome
            if opts.invoke_mode == "RESPONSE_STREAM":
                return self._relay_stream(out)
            out.done.wait()
            if out.error is not None or out.payload is None:
                return self._bad_gateway(out)
            return self._buffered(out.payload)

        def _bad_gateway(self, out: Outcome) -> None:
            log(f"function URL: 502 ({(out.error or {}).get('errorType')}: {(out.error or {}).get('errorMessage', '')[:200]})")
            self._plain(502, b"Internal Server Error", ctype="application/json",
                        extra={"x-amzn-ErrorType": "InternalFailure"} if out.error_kind == "platform" else None)

        def _event(self, split, headers: dict[str, list[str]], body: bytes, caller) -> dict:
            now = dt.datetime.now(dt.timezone.utc)
            cookies = []
            for c in headers.pop("cookie", []):
                cookies.extend(x.strip() for x in c.split(";") if x.strip())
            trace = f"Root=1-{int(now.timestamp()):08x}-{secrets.token_hex(12)}"
            headers["x-amzn-trace-id"] = [trace]
            headers["x-forwarded-for"] = [self.client_address[0]]
            headers["x-forwarded-proto"] = ["https"]
            headers["x-forwarded-port"] = ["443"]
            flat = {k: ",".join(v) for k, v in headers.items()}
            query: dict[str, list[str]] = {}
            for k, v in urllib.parse.parse_qsl(split.query, keep_blank_values=True):
                query.setdefault(k, []).append(v)
            ctype = flat.get("content-type", "")
            textual = not body or (ctype.startswith(TEXTUAL) and _is_utf8(body))
            authorizer = None
            if caller is not None:
                akid, arn = caller
                session = arn.rsplit("/", 1)[-1]
                authorizer = {"iam": {
                    "accessKey": akid,
                    "accountId": arn.split(":")[4],
                    "callerId": f"AROA{hashlib.sha256(arn.encode()).hexdigest()[:17].upper()}:{session}",
                    "cognitoIdentity": None,
                    "principalOrgId": None,
                    "userArn": arn,
                    "userId": f"AROA{hashlib.sha256(arn.encode()).hexdigest()[:17].upper()}:{session}",
                }}
            event = {
                "version": "2.0",
                "routeKey": "$default",
                "rawPath": split.path,
                "rawQueryString": split.query,
                "headers": flat,
                "requestContext": {
                    "accountId": ACCOUNT if caller is None else caller[1].split(":")[4],
                    "apiId": url_id,
                    "domainName": host,
                    "domainPrefix": url_id,
                    "http": {
                        "method": self.command,
                        "path": split.path,
                        "protocol": "HTTP/1.1",
                        "sourceIp": self.client_address[0],
                        "userAgent": flat.get("user-agent", ""),
                    },
                    "requestId": _uuid(),
                    "routeKey": "$default",
                    "stage": "$default",
                    "time": now.strftime("%d/%b/%Y:%H:%M:%S +0000"),
                    "timeEpoch": int(now.timestamp() * 1000),
                },
                "isBase64Encoded": not textual,
            }
            if authorizer is not None:
                event["requestContext"]["authorizer"] = authorizer
            if cookies:
                event["cookies"] = cookies
            if query:
                event["queryStringParameters"] = {k: ",".join(v) for k, v in query.items()}
            if body:
                event["body"] = body.decode() if textual else base64.b64encode(body).decode()
            return event

        def _buffered(self, payload: bytes) -> None:
            try:
                answer = json.loads(payload)
            except ValueError:
                return self._bad_gateway(Outcome())
            if not isinstance(answer, dict) or "statusCode" not in answer:
                return self._plain(200, payload)
            status = int(answer.get("statusCode") or 200)
            body = answer.get("body") or ""
            data = base64.b64decode(body) if answer.get("isBase64Encoded") else (
                body.encode() if isinstance(body, str) else json.dumps(body).encode())
            self.send_response(status)
            seen = set()
            for k, v in (answer.get("headers") or {}).items():
                if k.lower() in ("content-length", "transfer-encoding", "connection"):
                    continue
                seen.add(k.lower())
                self.send_header(k, str(v))
            for k, vs in (answer.get("multiValueHeaders") or {}).items():
                if k.lower() in seen or k.lower() in ("content-length", "transfer-encoding", "connection"):
                    continue
                for v in vs:
                    self.send_header(k, str(v))
            for c in answer.get("cookies") or []:
                self.send_header("Set-Cookie", c)
            if "content-type" not in seen:
                self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def _relay_stream(self, out: Outcome) -> None:
            out.stream_started.wait()
            if out.stream is None:
                if out.error is not None or out.payload is None:
                    return self._bad_gateway(out)
                # A buffered answer in streaming mode: Lambda streams the payload as it is.
                return self._plain(200, out.payload, ctype="application/octet-stream")
            buffer = b""
            prelude = None
            status, header_list = 200, [("Content-Type", out.content_type)]
            if out.content_type.split(";")[0].strip() == PRELUDE_TYPE:
                while DELIMITER not in buffer:
                    chunk = out.stream.get()
                    if chunk is None:
                        return self._bad_gateway(out)
                    buffer += chunk
                head, _, buffer = buffer.partition(DELIMITER)
                try:
                    prelude = json.loads(head)
                except ValueError:
                    return self._bad_gateway(out)
                status = int(prelude.get("statusCode") or 200)
                header_list = [(k, str(v)) for k, v in (prelude.get("headers") or {}).items()
                               if k.lower() not in ("content-length", "transfer-encoding", "connection")]
                header_list += [("Set-Cookie", c) for c in prelude.get("cookies") or []]
            self.send_response(status)
            for k, v in header_list:
                self.send_header(k, v)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                if buffer:
                    self._chunk(buffer)
                while True:
                    chunk = out.stream.get()
                    if chunk is None:
                        break
                    if chunk:
                        self._chunk(chunk)
                if out.error is not None:
                    # Cut mid-stream (timeout, size, runtime error): no last chunk, as a dropped
                    # connection looks to the client.
                    log(f"function URL: stream cut ({out.error.get('errorType')})")
                    self.close_connection = True
                    return
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except OSError:
                self.close_connection = True

        def _chunk(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

    return FunctionUrl


def _is_utf8(b: bytes) -> bool:
    try:
        b.decode()
        return True
    except UnicodeDecodeError:
        return False


# -- the Invoke API and the control endpoints ------------------------------------------------

def _invoke_api_handler(service: LambdaService):
    class InvokeApi(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _send(self, status: int, body: bytes, headers: dict | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path == "/_emulator/state":
                return self._send(200, json.dumps(service.state()).encode())
            self._send(404, b'{"Message":"not found"}')

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            if self.path == "/_emulator/reset":
                service.reset()
                return self._send(200, b"{}")
            parts = self.path.split("?")[0].strip("/").split("/")
            if len(parts) != 4 or parts[0] != "2015-03-31" or parts[1] != "functions" \
                    or parts[3] != "invocations":
                return self._send(404, b'{"Message":"not found"}')
            if parts[2] != service.name:
                return self._send(404, json.dumps({"Type": "User", "Message": f"Function not found: arn:aws:lambda:{REGION}:{ACCOUNT}:function:{parts[2]}"}).encode(),
                                  {"x-amzn-ErrorType": "ResourceNotFoundException"})
            if len(body) > REQUEST_LIMIT:
                return self._send(413, json.dumps({"Type": "User", "message": f"Request must be smaller than {REQUEST_LIMIT} bytes for the InvokeFunction operation"}).encode(),
                                  {"x-amzn-ErrorType": "RequestTooLargeException"})
            inv = service.invoke(body)
            if inv is None:
                return self._send(429, json.dumps({"Type": "User", "message": "Rate Exceeded.", "Reason": "ReservedFunctionConcurrentInvocationLimitExceeded"}).encode(),
                                  {"x-amzn-ErrorType": "TooManyRequestsException"})
            out = inv.outcome
            out.done.wait()
            headers = {"X-Amz-Executed-Version": "$LATEST", "x-amzn-RequestId": inv.request_id}
            if out.error is not None:
                headers["X-Amz-Function-Error"] = "Unhandled"
                return self._send(200, json.dumps(out.error).encode(), headers)
            if out.payload is None:
                # A streamed answer to a buffered Invoke: Lambda answers the concatenation.
                chunks = []
                while out.stream is not None:
                    c = out.stream.get()
                    if c is None:
                        break
                    chunks.append(c)
                return self._send(200, b"".join(chunks), headers)
            self._send(200, out.payload, headers)

    return InvokeApi


# -- the signing proxy (what aws-sigv4-proxy or mcp-proxy-for-aws are to real clients) -------

def _signing_proxy_handler(target_port: int, host: str, users: dict[str, tuple[str, str]],
                           default_akid: str):
    from botocore.auth import SigV4Auth  # an independent SigV4 implementation
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    by_name = {arn.rsplit("/", 1)[-1]: akid for akid, (_, arn) in users.items()}

    class Proxy(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None: self._forward()
        def do_POST(self) -> None: self._forward()
        def do_DELETE(self) -> None: self._forward()

        def _forward(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            as_name = self.headers.get("x-emulator-sign-as")
            akid = by_name.get(as_name, default_akid) if as_name else default_akid
            secret, _ = users[akid]
            headers = {k: v for k, v in self.headers.items()
                       if k.lower() not in ("host", "connection", "content-length",
                                            "x-emulator-sign-as", "accept-encoding",
                                            "transfer-encoding", "keep-alive")}
            headers["Host"] = host
            request = AWSRequest(method=self.command, url=f"https://{host}{self.path}",
                                 data=body, headers=headers)
            SigV4Auth(Credentials(akid, secret), "lambda", REGION).add_auth(request)
            conn = http.client.HTTPConnection("127.0.0.1", target_port, timeout=900)
            conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
            for k, v in request.headers.items():
                conn.putheader(k, v)
            conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body)
            resp = conn.getresponse()
            self.send_response(resp.status)
            streamed = resp.getheader("Transfer-Encoding", "").lower() == "chunked"
            for k, v in resp.getheaders():
                if k.lower() in ("transfer-encoding", "connection", "content-length", "server", "date"):
                    continue
                self.send_header(k, v)
            if streamed:
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    while True:
                        data = resp.read1(65536)
                        if not data:
                            break
                        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                except (http.client.IncompleteRead, OSError):
                    self.close_connection = True  # the function URL cut the stream
            else:
                data = resp.read()
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            conn.close()

    return Proxy


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--task-root", required=True, help="the unzipped deployment package (/var/task)")
    p.add_argument("--bootstrap", help="the runtime to start (default: TASK_ROOT/bootstrap)")
    p.add_argument("--function-name", default="flowgate")
    p.add_argument("--timeout", type=float, default=30.0, help="the function timeout, seconds")
    p.add_argument("--memory", type=int, default=256)
    p.add_argument("--max-sandboxes", type=int, default=8, help="the reserved concurrency")
    p.add_argument("--invoke-mode", choices=["BUFFERED", "RESPONSE_STREAM"], default="BUFFERED")
    p.add_argument("--auth-type", choices=["AWS_IAM", "NONE"], default="AWS_IAM")
    p.add_argument("--iam-user", action="append", default=[],
                   help="AKID:SECRET:ARN of a principal allowed lambda:InvokeFunctionUrl")
    p.add_argument("--env", action="append", default=[], help="NAME=VALUE of the function's environment")
    p.add_argument("--pass-env", action="append", default=[],
                   help="a variable of this process given to the function (role credentials, endpoints)")
    p.add_argument("--host", default="abc123xyz.lambda-url.us-east-1.on.aws")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--freeze", action="store_true",
                   help="freeze each sandbox's runtime between invocations, as Lambda does")
    p.add_argument("--exit-with-stdin", action="store_true",
                   help="stop (and kill every sandbox) when standard input closes: the test that started it is gone")
    opts = p.parse_args()
    opts.users = {}
    for u in opts.iam_user:
        akid, secret, arn = u.split(":", 2)
        opts.users[akid] = (secret, arn)

    service = LambdaService(opts)
    front = _Server(("127.0.0.1", opts.port), _function_url_handler(service, opts))
    api = _Server(("127.0.0.1", 0), _invoke_api_handler(service))
    ready = {"function_url": f"http://127.0.0.1:{front.server_address[1]}",
             "invoke_api": f"http://127.0.0.1:{api.server_address[1]}",
             "host": opts.host}
    servers = [front, api]
    if opts.users:
        proxy = _Server(("127.0.0.1", 0), _signing_proxy_handler(
            front.server_address[1], opts.host, opts.users, next(iter(opts.users))))
        ready["signing_proxy"] = f"http://127.0.0.1:{proxy.server_address[1]}"
        servers.append(proxy)
    for s in servers:
        threading.Thread(target=s.serve_forever, daemon=True).start()

    def stop(*_: object) -> None:
        service.shut_down()
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(json.dumps(ready), flush=True)
    if opts.exit_with_stdin:
        try:
            while sys.stdin.read(1):
                pass
        except (OSError, ValueError):
            pass
        stop()
    threading.Event().wait()

if __name__ == "__main__":
    main()
