#!/usr/bin/env python3
"""A fake of the Google Cloud Workflows Executions API (v1) whose executions really run.

It serves the REST surface of `workflowexecutions_v1.json` (the discovery document that ships
with PyPI `workflows-emulator`) that flowgate uses, and runs each execution's workflow YAML for
real with `workflows-emulator`'s interpreter in a background thread: executions go ACTIVE ->
SUCCEEDED / FAILED over real time, `sys.sleep` really sleeps, `status.currentSteps` follows the
running step, cancel stops the run, and `events.create_callback_endpoint` /
`events.await_callback` wait for a real HTTP request to the callback URL.

    fake_executions.py --port PORT --workflows DIR     # DIR/<workflow id>.yaml

Shortcuts this fake takes (everything else follows the discovery document):
- Names carry the project NUMBER (as the real API's do), a stable 12-digit number derived from
  the project id; requests may name the project by id or number.
- Any project and location; a workflow is a YAML file named after its id; no workflow
  revisions (workflowRevisionId is fixed at "000001-fake").
- Authentication, for the projects named with `--secure-project ID` (others are anonymous, so
  most tests need no credentials): every API and callback request needs `Authorization: Bearer`
  with a token this fake issued, else 401 UNAUTHENTICATED. Tokens come from the fake's own STS
  token exchange at `POST /v1/token` (an external-account ADC file whose `token_url` points
  here gets one; the subject token is not verified). `GET /fake/seen?project=ID` lists the
  last requests to a secure project with whether their token was good and their
  `x-goog-user-project`. IAM permissions are not checked.
- State is in memory; executions are never purged.
- Backlog: the real service queues executions beyond a workflow's concurrency limit (QUEUED,
  no `startTime` until they start). Here a workflow has no limit until a test sets one:
  `POST /fake/backlog` with `{"workflow": ID, "limit": N}` queues that workflow's executions
  beyond N running ones, and starts queued ones as running ones end (`"limit": null` lifts it).
- UNAVAILABLE is produced only on request: test control `POST /fake/unavailable` with
  `{"execution": NAME, "details": TEXT}` makes that execution read as UNAVAILABLE with
  `stateError` (`{"execution": NAME}` without details restores it).
- Page tokens are opaque base64 (with `+`, `/` and `=` in them, as real ones have) of an offset;
  executions and callbacks come at most two a page (the API may return fewer than pageSize), so
  paging is always exercised.
- `argument` is limited to 32 KiB (the documented limit), checked as UTF-8 bytes; a workflow
  whose YAML does not parse is refused with 400 at create (the real service refuses to deploy
  it, so a create would meet the last revision that did deploy).
- Cancel is cooperative: it takes effect at the next step, inside `sys.sleep`, or while waiting
  on a callback (the interpreter has no other suspension points).
- List filters support `state` and `labels.KEY` equality and `labels.KEY:*` (has) joined by
  AND (a subset of AIP-160);
  orderBy is always `createTime desc`; `view=BASIC` drops the fields the document says it drops.
- `error.stackTrace` has one element, the step that was running (routine and step; no source
  position); `error.context` is the interpreter's message.
- Callbacks: only HTTP callbacks; `availablePayloads` lists payloads received but not yet
  awaited; a callback request's `query` is always empty.
- A test-only control path, `POST /fake/lose-next-create`, makes the next executions.create take
  effect and then drop the connection without an answer (the ambiguous failure a retried create
  must survive). Google has no such path.
- A test-only control path, `POST /fake/read-fault` with `{"project": ID, "skip": N}`, lets the
  next N reads (GETs of executions and callbacks) of that project through and answers the one
  after with 503 UNAVAILABLE, once (`"skip": null` disarms): the transient faults the engine
  conformance suite stages at every read position. Google has no such path.
- The interpreter is workflows-emulator's, with its own documented gaps (no connectors without
  Google credentials).
"""

import argparse
import base64
import hashlib
import contextvars
import json
import pathlib
import queue
import re
import threading
import time
import urllib.parse
import uuid
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import yaml
import workflows_emulator.main as wf_main
import workflows_emulator.lib.sys_utils as wf_sys
from workflows_emulator.render import STANDARD_LIBRARY
from workflows_emulator.utils import WorkflowError

STATES = ["STATE_UNSPECIFIED", "ACTIVE", "SUCCEEDED", "FAILED", "CANCELLED", "UNAVAILABLE", "QUEUED"]
LOG_LEVELS = ["CALL_LOG_LEVEL_UNSPECIFIED", "LOG_ALL_CALLS", "LOG_ERRORS_ONLY", "LOG_NONE"]
BASIC_FIELDS = {"name", "startTime", "endTime", "duration", "state", "workflowRevisionId", "createTime", "labels"}

CURRENT = contextvars.ContextVar("current_execution", default=None)
LOCK = threading.Lock()
EXECUTIONS = {}
BASE_URL = ""
VERBOSE = False
WORKFLOWS_DIR = pathlib.Path(".")


def project_number(project):
    """The project number the real API would put in names for `project` (id or number)."""
    if project.isdigit():
        return project
    return str(10**11 + int(hashlib.sha256(project.encode()).hexdigest(), 16) % (9 * 10**11))


def with_project_number(path):
    """`path` with its `projects/{id}` segment replaced by the project number."""
    return re.sub(r"^(/v1/projects/)([^/]+)", lambda m: m.group(1) + project_number(m.group(2)), path)


class Cancelled(Exception):
    pass


# Set by POST /fake/lose-next-create: the next create happens, and its answer is lost.
LOSE_NEXT_CREATE = False
# Set by POST /fake/read-fault: project number -> reads to let through before one fails.
READ_FAULTS = {}
# --secure-project: project ids (and their numbers) whose requests need a token.
SECURE = set()
# Access tokens /v1/token issued.
TOKENS = set()
# The last requests to secure projects: [{method, path, token_ok, user_project}].
SEEN = []

# Set by POST /fake/backlog: {workflow id: the most executions running at once}.
LIMITS = {}
# Executions waiting for a slot, with their parsed workflow: [(Execution, config)].
BACKLOG = []
ARGUMENT_LIMIT = 32 * 1024
CALLBACKS_PAGE = 2
# Executions a list page holds at most (the API may return fewer than pageSize).
LIST_PAGE = 2


def encode_token(offset):
    """An opaque page token: base64 that always holds '+', '/' and '=' (as Google's do)."""
    return base64.b64encode(b"\xfb\xff\xfe" + str(offset).encode() + b"\xfb").decode()


def decode_token(token):
    if not token:
        return 0
    try:
        raw = base64.b64decode(token.encode(), validate=True)
        if raw[:3] != b"\xfb\xff\xfe" or raw[-1:] != b"\xfb":
            raise ValueError
        return int(raw[3:-1])
    except (ValueError, TypeError):
        raise ValueError("invalid page token")


def running_count(workflow):
    return sum(1 for e in EXECUTIONS.values() if e.workflow == workflow and e.state == "ACTIVE")


def start_queued():
    """Starts queued executions while their workflows have free slots (call with LOCK held)."""
    for item in list(BACKLOG):
        ex, config = item
        limit = LIMITS.get(ex.workflow)
        if limit is None or running_count(ex.workflow) < limit:
            BACKLOG.remove(item)
            ex.state = "ACTIVE"
            ex.start_time = now()
            threading.Thread(target=run, args=(ex, config), daemon=True, name=ex.name).start()


def now():
    return datetime.now(timezone.utc)


def rfc3339(t):
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ") if t else None


class Execution:
    def __init__(self, name, workflow, body):
        self.name = name
        self.workflow = workflow
        self.argument = body.get("argument") or "null"
        self.labels = body.get("labels") or {}
        level = body.get("callLogLevel", 0)
        self.call_log_level = LOG_LEVELS[level] if isinstance(level, int) else level
        self.state = "ACTIVE"
        self.state_error = None  # set with /fake/unavailable: the execution reads as UNAVAILABLE
        self.create_time = now()
        self.start_time = self.create_time
        self.end_time = None
        self.result = None
        self.error = None
        self.steps = []  # [(routine, step)], innermost last
        self.callbacks = {}
        self.cancel = threading.Event()

    def to_json(self, view="FULL", int_enums=False):
        out = {
            "name": self.name,
            "createTime": rfc3339(self.create_time),
            "state": STATES.index(self.state) if int_enums else self.state,
            "workflowRevisionId": "000001-fake",
            "labels": self.labels,
            "argument": self.argument,
            "callLogLevel": LOG_LEVELS.index(self.call_log_level) if int_enums else self.call_log_level,
        }
        if self.start_time:
            out["startTime"] = rfc3339(self.start_time)
        if self.end_time:
            out["endTime"] = rfc3339(self.end_time)
            if self.start_time:  # an execution cancelled while QUEUED never ran
                out["duration"] = f"{(self.end_time - self.start_time).total_seconds():.3f}s"
        if self.result is not None:
            out["result"] = self.result
        if self.error is not None:
            out["error"] = self.error
        if self.state == "ACTIVE" and self.steps:
            routine, step = self.steps[-1]
            out["status"] = {"currentSteps": [{"routine": routine, "step": step}]}
        if self.state_error is not None:
            out = {k: v for k, v in out.items() if k not in ("result", "error", "status")}
            out["state"] = STATES.index("UNAVAILABLE") if int_enums else "UNAVAILABLE"
            out["stateError"] = {"details": self.state_error, "type": "KMS_ERROR"}
        if view == "BASIC":
            out = {k: v for k, v in out.items() if k in BASIC_FIELDS}
        return out


class Callback:
    def __init__(self, execution, method):
        self.id = uuid.uuid4().hex
        self.name = f"{execution.name}/callbacks/{self.id}"
        self.method = method
        self.waiters = 0
        self.payloads = queue.Queue()

    def to_json(self):
        available = [json.dumps(p["http_request"]["body"]) for p in list(self.payloads.queue)]
        return {"name": self.name, "method": self.method, "waiters": str(self.waiters), "availablePayloads": available}


def current():
    ex = CURRENT.get()
    if ex is None:
        raise RuntimeError("no current execution")
    return ex


def check_cancel(ex):
    if ex.cancel.is_set():
        raise Cancelled("the execution was cancelled")


# --- the interpreter, instrumented -------------------------------------------------------

_original_execute_step = wf_main.execute_step


def tracked_execute_step(step_id, config, context):
    ex = CURRENT.get()
    if ex is not None:
        check_cancel(ex)
        with LOCK:
            ex.steps = ex.steps[:-1] + [("main", step_id)] if ex.steps else [("main", step_id)]
    return _original_execute_step(step_id, config, context)


def cancellable_sleep(seconds):
    ex = current()
    if ex.cancel.wait(float(seconds)):
        raise Cancelled("the execution was cancelled")


class Events:
    """`events.*`: HTTP callbacks."""

    @staticmethod
    def create_callback_endpoint(http_callback_method="POST"):
        ex = current()
        cb = Callback(ex, http_callback_method)
        with LOCK:
            ex.callbacks[cb.id] = cb
        return {"url": f"{BASE_URL}/v1/{cb.name}"}

    @staticmethod
    def await_callback(callback, timeout=43200):
        ex = current()
        cb_id = callback["url"].rstrip("/").split("/")[-1]
        cb = ex.callbacks[cb_id]
        with LOCK:
            cb.waiters += 1
        deadline = time.monotonic() + float(timeout)
        try:
            while True:
                check_cancel(ex)
                if time.monotonic() >= deadline:
                    raise WorkflowError(message="Timed out waiting for a callback", tags=["TimeoutError"])
                try:
                    return cb.payloads.get(timeout=0.1)
                except queue.Empty:
                    continue
        finally:
            with LOCK:
                cb.waiters -= 1


wf_main.execute_step = tracked_execute_step
wf_sys.sleep = cancellable_sleep
STANDARD_LIBRARY["events"] = Events


def run(ex, config):
    CURRENT.set(ex)
    try:
        main = config if isinstance(config, dict) else {"main": {"steps": config}}
        params = main.get("main", {}).get("params", [])
        argument = json.loads(ex.argument)
        runtime_params = {params[0]: argument} if params else {}
        result = wf_main.execute_workflow(main, runtime_params)
        with LOCK:
            ex.result = json.dumps(result)
            ex.state = "SUCCEEDED"
    except Cancelled:
        with LOCK:
            ex.state = "CANCELLED"
    except WorkflowError as err:
        payload = err.payload if isinstance(err.payload, (dict, str, list)) else str(err.payload)
        with LOCK:
            ex.error = {"payload": json.dumps(payload), "context": f"RuntimeError: {err}",
                        "stackTrace": stack_trace(ex)}
            ex.state = "FAILED"
    except Exception as err:  # the interpreter's own failures are workflow failures too
        with LOCK:
            ex.error = {"payload": json.dumps({"message": str(err), "tags": [type(err).__name__]}),
                        "context": f"{type(err).__name__}: {err}", "stackTrace": stack_trace(ex)}
            ex.state = "FAILED"
    finally:
        with LOCK:
            if ex.state == "ACTIVE":
                ex.state = "FAILED"
            ex.end_time = now()
            start_queued()


def stack_trace(ex):
    """`error.stackTrace` as the discovery document shapes it: the step that was running."""
    return {"elements": [{"step": step, "routine": routine} for routine, step in ex.steps[-1:]]}


# --- REST ----------------------------------------------------------------------------------

EXEC_COLLECTION = re.compile(r"^/v1/(projects/[^/]+/locations/[^/]+/workflows/([^/]+))/executions$")
EXEC_ONE = re.compile(r"^/v1/(projects/[^/]+/locations/[^/]+/workflows/[^/]+/executions/[^/:]+)(:cancel)?$")
CALLBACKS = re.compile(r"^/v1/(projects/[^/]+/locations/[^/]+/workflows/[^/]+/executions/[^/]+)/callbacks$")
CALLBACK_ONE = re.compile(r"^/v1/(projects/[^/]+/locations/[^/]+/workflows/[^/]+/executions/[^/]+)/callbacks/([^/]+)$")


def matches_filter(ex, expr):
    if not expr:
        return True
    for clause in re.split(r"\s+AND\s+", expr.strip()):
        has = re.match(r'^\s*labels\.([\w\-]+)\s*:\s*\*\s*$', clause)
        if has:  # AIP-160's has operator: the label is present
            if has.group(1) not in ex.labels:
                return False
            continue
        m = re.match(r'^\s*([\w.\-]+)\s*=\s*"?([^"]*)"?\s*$', clause)
        if not m:
            raise ValueError(f"unsupported filter: {clause}")
        field, value = m.groups()
        if field == "state" and ex.state != value:
            return False
        if field.startswith("labels.") and ex.labels.get(field[len("labels."):]) != value:
            return False
    return True


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        if VERBOSE:
            super().log_message(fmt, *args)

    def send_json(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def error(self, status, code, message):
        self.send_json(status, {"error": {"code": status, "message": message, "status": code}})

    def parsed(self):
        url = urllib.parse.urlparse(self.path)
        query = urllib.parse.parse_qs(url.query)
        int_enums = "enum-encoding=int" in urllib.parse.unquote(url.query)
        return with_project_number(urllib.parse.unquote(url.path)), query, int_enums

    def project_of(self, path):
        m = re.match(r"^/v1/projects/([^/]+)/", path)
        return m.group(1) if m else None

    def read_fails(self, path):
        """Counts a read against its project's armed fault: whether this one fails."""
        project = self.project_of(path)
        if project is None:
            return False
        project = project_number(project)
        with LOCK:
            skip = READ_FAULTS.get(project)
            if skip is None:
                return False
            if skip == 0:
                del READ_FAULTS[project]
                return True
            READ_FAULTS[project] = skip - 1
            return False

    def authorized(self, path):
        """False (after answering 401) when `path` is in a secure project without a good token."""
        project = self.project_of(path)
        if project is None or project not in SECURE:
            return True
        auth = self.headers.get("authorization", "")
        token_ok = auth.startswith("Bearer ") and auth[len("Bearer "):] in TOKENS
        with LOCK:
            SEEN.append({"method": self.command, "path": path, "token_ok": token_ok,
                         "user_project": self.headers.get("x-goog-user-project")})
            del SEEN[:-100]
        if not token_ok:
            self.error(401, "UNAUTHENTICATED",
                       "Request had invalid authentication credentials. Expected OAuth 2 access token.")
        return token_ok

    def token_exchange(self):
        """The STS token exchange (RFC 8693) an external-account credential makes."""
        form = urllib.parse.parse_qs(self._raw.decode(errors="replace"))
        grant = form.get("grant_type", [""])[0]
        if grant != "urn:ietf:params:oauth:grant-type:token-exchange" or not form.get("subject_token", [""])[0]:
            return self.send_json(400, {"error": "invalid_request",
                                        "error_description": "a token exchange needs grant_type and subject_token"})
        token = "ya29.fake-" + uuid.uuid4().hex
        with LOCK:
            TOKENS.add(token)
        return self.send_json(200, {"access_token": token, "token_type": "Bearer", "expires_in": 3600,
                                    "issued_token_type": "urn:ietf:params:oauth:token-type:access_token"})

    def read_body(self):
        """Reads this request's JSON body (every request's body is read, so that a kept-alive
        connection stays in step even when a GET carries one); None when it is not JSON."""
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        self._raw = raw
        try:
            self._body = json.loads(raw) if raw.strip() else {}
        except ValueError:
            self._body = None
        return self._body

    def body(self):
        return self._body

    def view(self, query, default):
        v = query.get("view", [default])[0]
        return {"0": default, "1": "BASIC", "2": "FULL"}.get(v, v)

    def do_GET(self):
        self.read_body()
        path, query, int_enums = self.parsed()
        if path == "/fake/seen":
            project = project_number(query.get("project", [""])[0])
            with LOCK:
                seen = [r for r in SEEN if self.project_of(r["path"]) == project]
            return self.send_json(200, {"requests": seen})
        if not self.authorized(path):
            return None
        if self.read_fails(path):
            return self.error(503, "UNAVAILABLE", "The service is currently unavailable.")
        if m := EXEC_COLLECTION.match(path):
            parent = m.group(1)
            with LOCK:
                found = sorted((e for e in EXECUTIONS.values() if e.name.startswith(parent + "/")),
                               key=lambda e: e.create_time, reverse=True)
            try:
                found = [e for e in found if matches_filter(e, query.get("filter", [""])[0])]
            except ValueError as err:
                return self.error(400, "INVALID_ARGUMENT", str(err))
            view = self.view(query, "BASIC")
            size = min(int(query.get("pageSize", ["100"])[0] or 100), 100 if view == "FULL" else 1000) or 100
            size = min(size, LIST_PAGE)
            try:
                start = decode_token(query.get("pageToken", [""])[0])
            except ValueError as err:
                return self.error(400, "INVALID_ARGUMENT", str(err))
            page = found[start:start + size]
            with LOCK:
                out = {"executions": [e.to_json(view, int_enums) for e in page]}
            if start + size < len(found):
                out["nextPageToken"] = encode_token(start + size)
            return self.send_json(200, out)
        if m := CALLBACKS.match(path):
            ex = EXECUTIONS.get(m.group(1))
            if ex is None:
                return self.error(404, "NOT_FOUND", f"execution {m.group(1)} not found")
            try:
                start = decode_token(query.get("pageToken", [""])[0])
            except ValueError as err:
                return self.error(400, "INVALID_ARGUMENT", str(err))
            size = min(int(query.get("pageSize", ["100"])[0] or 100), CALLBACKS_PAGE)
            with LOCK:
                callbacks = [cb.to_json() for cb in ex.callbacks.values()]
            out = {"callbacks": callbacks[start:start + size]}
            if start + size < len(callbacks):
                out["nextPageToken"] = encode_token(start + size)
            return self.send_json(200, out)
        if (m := EXEC_ONE.match(path)) and not m.group(2):
            ex = EXECUTIONS.get(m.group(1))
            if ex is None:
                return self.error(404, "NOT_FOUND", f"execution {m.group(1)} not found")
            with LOCK:
                return self.send_json(200, ex.to_json(self.view(query, "FULL"), int_enums))
        return self.error(404, "NOT_FOUND", f"no route for GET {path}")

    def do_POST(self):
        global LOSE_NEXT_CREATE
        body = self.read_body()
        path, query, int_enums = self.parsed()
        if path == "/v1/token":
            return self.token_exchange()
        if body is None:
            return self.error(400, "INVALID_ARGUMENT", "the body is not JSON")
        if not self.authorized(path):
            return None
        if path == "/fake/lose-next-create":
            LOSE_NEXT_CREATE = True
            return self.send_json(200, {})
        if path == "/fake/read-fault":
            body = self.body()
            project = project_number(str(body.get("project", "")))
            skip = body.get("skip")
            with LOCK:
                if isinstance(skip, int) and skip >= 0:
                    READ_FAULTS[project] = skip
                else:
                    READ_FAULTS.pop(project, None)
            return self.send_json(200, {})
        if path == "/fake/backlog":
            body = self.body()
            with LOCK:
                if body.get("limit") is None:
                    LIMITS.pop(str(body.get("workflow")), None)
                else:
                    LIMITS[str(body.get("workflow"))] = int(body["limit"])
                start_queued()
            return self.send_json(200, {})
        if path == "/fake/unavailable":
            body = self.body()
            name = with_project_number("/v1/" + str(body.get("execution", "")))[len("/v1/"):]
            ex = EXECUTIONS.get(name)
            if ex is None:
                return self.error(404, "NOT_FOUND", f"execution {name} not found")
            with LOCK:
                ex.state_error = body.get("details")
            return self.send_json(200, {})
        if m := EXEC_COLLECTION.match(path):
            parent, workflow = m.group(1), m.group(2)
            source = WORKFLOWS_DIR / f"{workflow}.yaml"
            if not source.is_file():
                return self.error(404, "NOT_FOUND", f"workflow {parent} not found")
            body = self.body()
            labels = body.get("labels") or {}
            if len(labels) > 64 or any(not re.fullmatch(r"[a-z0-9_-]{1,63}", k) or not re.fullmatch(r"[a-z0-9_-]{0,63}", v)
                                       for k, v in labels.items()):
                return self.error(400, "INVALID_ARGUMENT", "labels must be lowercase [a-z0-9_-], at most 63 characters")
            argument = body.get("argument") or "null"
            if len(argument.encode()) > ARGUMENT_LIMIT:
                return self.error(400, "INVALID_ARGUMENT",
                                  f"argument is {len(argument.encode())} bytes; the limit is 32KB")
            try:
                json.loads(argument)
            except ValueError:
                return self.error(400, "INVALID_ARGUMENT", "argument is not valid JSON")
            try:
                config = yaml.safe_load(source.read_text())
            except yaml.YAMLError as err:
                return self.error(400, "FAILED_PRECONDITION", f"workflow {parent} does not parse: {err}")
            ex = Execution(f"{parent}/executions/{uuid.uuid4()}", workflow, body)
            with LOCK:
                EXECUTIONS[ex.name] = ex
                limit = LIMITS.get(workflow)
                if limit is not None and running_count(workflow) > limit:
                    # Over the limit (this one counts as ACTIVE until queued): into the backlog.
                    ex.state = "QUEUED"
                    ex.start_time = None
                    BACKLOG.append((ex, config))
                    queued = True
                else:
                    queued = False
            if not queued:
                threading.Thread(target=run, args=(ex, config), daemon=True, name=ex.name).start()
            if LOSE_NEXT_CREATE:
                LOSE_NEXT_CREATE = False
                self.close_connection = True
                return None
            with LOCK:
                return self.send_json(200, ex.to_json("FULL", int_enums))
        if (m := EXEC_ONE.match(path)) and m.group(2):
            ex = EXECUTIONS.get(m.group(1))
            if ex is None:
                return self.error(404, "NOT_FOUND", f"execution {m.group(1)} not found")
            with LOCK:
                if ex.state == "QUEUED":  # never started: it leaves the backlog cancelled
                    BACKLOG[:] = [item for item in BACKLOG if item[0] is not ex]
                    ex.state = "CANCELLED"
                    ex.end_time = now()
                    return self.send_json(200, ex.to_json("FULL", int_enums))
                if ex.state != "ACTIVE":
                    return self.error(400, "FAILED_PRECONDITION", f"execution is {ex.state}, not ACTIVE")
            ex.cancel.set()
            for _ in range(50):  # a cancel is visible to the next get, as the real API's is
                if ex.end_time:
                    break
                time.sleep(0.02)
            with LOCK:
                return self.send_json(200, ex.to_json("FULL", int_enums))
        return self.callback()

    def do_PUT(self):
        if self.read_body() is None:
            return self.error(400, "INVALID_ARGUMENT", "the body is not JSON")
        if not self.authorized(self.parsed()[0]):
            return None
        return self.callback()

    def callback(self):
        path, _query, _ = self.parsed()
        m = CALLBACK_ONE.match(path)
        if not m:
            return self.error(404, "NOT_FOUND", f"no route for {self.command} {path}")
        ex = EXECUTIONS.get(m.group(1))
        cb = ex.callbacks.get(m.group(2)) if ex else None
        if cb is None:
            return self.error(404, "NOT_FOUND", "callback not found")
        if cb.method != self.command:
            return self.error(405, "INVALID_ARGUMENT", f"callback expects {cb.method}")
        body = self.body()
        cb.payloads.put({
            "http_request": {"body": body, "headers": dict(self.headers), "method": self.command, "query": {}, "url": path},
            "received_time": rfc3339(now()),
            "type": "HTTP",
        })
        return self.send_json(200, {})


def main():
    global BASE_URL, WORKFLOWS_DIR
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--workflows", required=True)
    parser.add_argument("--verbose", action="store_true", help="log every request on stderr")
    parser.add_argument("--secure-project", action="append", default=[],
                        help="a project whose requests need a bearer token from /v1/token")
    args = parser.parse_args()
    for project in args.secure_project:
        SECURE.add(project_number(project))
    global VERBOSE
    VERBOSE = args.verbose
    WORKFLOWS_DIR = pathlib.Path(args.workflows)
    BASE_URL = f"http://127.0.0.1:{args.port}"
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(f"fake workflow executions on {BASE_URL}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
