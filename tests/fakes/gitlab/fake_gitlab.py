#!/usr/bin/env python3
"""A fake of the GitLab REST API (v4) whose pipelines really run their .gitlab-ci.yml.

It serves the endpoints flowgate's gitlab-ci engine uses, with the paths, parameters, status
codes, field names and headers of GitLab's REST docs (doc/api/pipelines.md, jobs.md,
job_artifacts.md, pipeline_triggers.md, rest/index.md for pagination and errors, and the
rate-limit headers of user/gitlab_com and security/rate_limits):

    POST /api/v4/projects/:id/pipeline                   ref, variables[], inputs{}   -> 201
    POST /api/v4/projects/:id/trigger/pipeline           token, ref, variables[K], inputs[K]
    GET  /api/v4/projects/:id/pipelines                  ref, status, source, updated_after,
                                                         order_by, sort, page, per_page
    GET  /api/v4/projects/:id/pipelines/:pid
    GET  /api/v4/projects/:id/pipelines/:pid/variables
    GET  /api/v4/projects/:id/pipelines/:pid/jobs        scope[], page, per_page
    POST /api/v4/projects/:id/pipelines/:pid/cancel
    GET  /api/v4/projects/:id/jobs/:job_id
    POST /api/v4/projects/:id/jobs/:job_id/play          job_variables_attributes[]
    POST /api/v4/projects/:id/jobs/:job_id/cancel
    GET  /api/v4/projects/:id/jobs/:job_id/trace         text/plain
    GET  /api/v4/projects/:id/jobs/:job_id/artifacts/*path   one file of the job's artifacts

`:id` is the numeric project id or the URL-encoded path (`group%2Fproject`). Errors are
`{"message": ...}` (or `{"error": ...}` for a missing parameter, as Grape answers). Every answer
carries `RateLimit-Limit`, `RateLimit-Observed`, `RateLimit-Remaining`, `RateLimit-Reset`
(epoch seconds) and `RateLimit-ResetTime`; past the limit the answer is 429 `Retry later`
with `Retry-After`. Lists carry `X-Page`, `X-Per-Page`, `X-Next-Page` (empty on the last page),
`X-Prev-Page`, `X-Total`, `X-Total-Pages` and a `Link` header.

    fake_gitlab.py --port PORT --projects DIR --token TOKEN [--trigger-token T] [--rate-limit N]

DIR/<group>/<name>/.gitlab-ci.yml is project `<group>/<name>`; ids are 1, 2, ... in sorted
path order; every project has the one branch `main`.

HOW JOBS RUN. The fake is GitLab's coordinator; gitlab-ci-local (npm, shell executor) is its
runner. The fake reads `stages`, `when`, `allow_failure` (manual jobs default to true, as in
GitLab; `allow_failure: false` makes a manual job blocking and the pipeline `manual`) and
`needs` to decide which job runs when, and applies `spec: inputs` headers
(`$[[ inputs.NAME ]]`, types, defaults, options). Each job then runs with
`gitlab-ci-local <job>` in a fresh checkout of the project (a git repository) holding the
pipeline's definition and the artifacts of the jobs it depends on (earlier stages, or its
`needs`), with the pipeline's variables, the play's job variables and the fake's predefined
CI_* ids: gitlab-ci-local runs `variables`, `before_script`, `script`, `after_script` and
collects `artifacts: paths`, as a runner would. Its output is the job's trace.

SHORTCUTS (everything else follows the docs):
- Jobs run on this host in gitlab-ci-local's shell executor (`--force-shell-executor`), not in
  containers: `image` and `services` are ignored. The fake's scheduling ignores `rules`,
  `only/except`, `trigger`, `parallel`, `retry`, `timeout` and `resource_group` (a job with
  `rules` is always in the pipeline; gitlab-ci-local may still skip it when it runs).
- Artifacts: only `artifacts:paths`; no archive download (`/artifacts` as a zip), no
  `reports` (a dotenv report must also be listed under `paths` to be served by path).
- Authentication: one personal/project token (`PRIVATE-TOKEN` or `Authorization: Bearer`),
  one user (`flowgate-bot`); no scopes, roles or protected branches. Trigger tokens: one.
- Refs: only the branch `main`; `sha` is a fixed fake commit; no merge-request pipelines.
- Rate limit: one bucket per token, `--rate-limit` requests per 60 s window (default 10000).
- Pipeline statuses produced: created, pending, running, manual, success, failed, canceling,
  canceled, skipped. Never: waiting_for_resource, preparing, scheduled. Job failure_reason is
  `script_failure` only.
- State is in memory; pipelines are never purged (a job's checkout is removed when it ends).
- Traces: a runner's header, `$ <line>` before each script line, the output, and GitLab's
  `ERROR: Job failed: exit code N` (N as gitlab-ci-local reports the script's); no section
  markers, no colours, no timestamps.
- Every job's `user` is `flowgate-bot` (a play "from the UI" is the same API call); pipeline
  `name` is always null; `detailed_status` is minimal; no `yaml_errors` pipelines (a broken
  file is a 400 on create, as GitLab answers for `base` errors).
- Pipeline list filters: ref, status, source, sha, username, created/updated_after/before;
  order_by id/status/ref/updated_at/user_id; no keyset pagination.
- Test hooks under /__fake/, each for one project (`{"project": "group/name"}`), so tests
  running at once never take each other's: `lose_next_create` (the project's next create runs
  but its connection is closed before any answer), `throttle_next` ({"count", "retry_after"}:
  the project's next requests get 429), `counts` (pipelines created, in all and for the
  project).
"""

import argparse
import datetime
import fnmatch
import glob
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import yaml

LOCK = threading.RLock()
STATE = {
    "projects": {},  # id -> {"id", "path", "dir"}
    "pipelines": {},  # id -> pipeline dict (internal)
    "jobs": {},  # id -> job dict (internal)
    "next_pipeline": 1000,
    "next_job": 5000,
    "lose_next_create": {},  # project path -> creates whose answer is lost
    "throttle": {},  # project path -> {"count", "retry_after"}
    "created_by_project": {},  # project path -> pipelines created
    "rate": {},  # token -> [window_start, count]
    "created": 0,
}
ARGS = None
RESERVED = {"stages", "variables", "default", "workflow", "include", "image", "services",
            "before_script", "after_script", "cache", "spec", "pages"}
ACTIVE = ("created", "pending", "running", "waiting_for_resource", "preparing", "scheduled")


def now():
    return datetime.datetime.now(datetime.timezone.utc)


def iso(t):
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z" if t else None


class ApiError(Exception):
    def __init__(self, status, body):
        super().__init__(str(body))
        self.status = status
        self.body = body


def not_found(what="404 Not found"):
    return ApiError(404, {"message": what})


# ---------------------------------------------------------------- pipeline definition

def load_definition(project, inputs):
    """Reads .gitlab-ci.yml, applies `spec: inputs`, returns (config, error message or None)."""
    text = (pathlib.Path(project["dir"]) / ".gitlab-ci.yml").read_text()
    docs = text.split("\n---\n", 1)
    given = dict(inputs or {})
    if len(docs) == 2 and "spec" in (yaml.safe_load(docs[0]) or {}):
        spec = (yaml.safe_load(docs[0]) or {}).get("spec", {}).get("inputs", {}) or {}
        body = docs[1]
        for name in given:
            if name not in spec:
                return None, f"unknown input arguments: {name}"
        values = {}
        for name, decl in spec.items():
            decl = decl or {}
            if name in given:
                value = given[name]
            elif "default" in decl:
                value = decl["default"]
            else:
                return None, f"`{name}` input: required value has not been provided"
            kind = decl.get("type", "string")
            if kind == "number" and not isinstance(value, (int, float)):
                return None, f"`{name}` input: provided value is not a number"
            if kind == "boolean" and not isinstance(value, bool):
                return None, f"`{name}` input: provided value is not a boolean"
            if "options" in decl and value not in decl["options"]:
                return None, f"`{name}` input: `{value}` cannot be used because it is not in the list of allowed options"
            values[name] = value

        def sub(m):
            v = values.get(m.group(1))
            if isinstance(v, bool):
                return "true" if v else "false"
            return str(v) if v is not None else ""

        body = re.sub(r"\$\[\[\s*inputs\.([A-Za-z0-9_-]+)\s*\]\]", sub, body)
        return yaml.safe_load(body) or {}, None
    if given:
        return None, "Given inputs not defined in the `spec` section of the included configuration file"
    return yaml.safe_load(text) or {}, None


def as_lines(v):
    if v is None:
        return []
    return [str(x) for x in (v if isinstance(v, list) else [v])]


def build_jobs(config, pipeline):
    stages = config.get("stages") or ["build", "test", "deploy"]
    stages = [".pre"] + [s for s in stages if s not in (".pre", ".post")] + [".post"]
    default = config.get("default") or {}
    jobs = []
    for name, spec in config.items():
        if name in RESERVED or name.startswith(".") or not isinstance(spec, dict):
            continue
        if "script" not in spec:
            continue
        for key in ("before_script", "script", "after_script"):
            lines = spec.get(key)
            lines = [] if lines is None else [lines] if isinstance(lines, str) else lines
            if not isinstance(lines, list) or not all(isinstance(x, (str, list)) for x in lines):
                # YAML reads `- echo "a: b"` as a mapping; GitLab refuses the pipeline.
                raise ApiError(400, {"message": {"base": [f"jobs:{name}:{key} config should be a string or a nested array of strings up to 10 levels deep"]}})
        when = spec.get("when", "on_success")
        if when == "never":
            continue
        stage = spec.get("stage", "test")
        if stage not in stages:
            raise ApiError(400, {"message": {"base": [f"{name} job: chosen stage {stage} does not exist; available stages are {', '.join(stages)}"]}})
        allow = spec.get("allow_failure", when == "manual")
        if isinstance(allow, dict):
            allow = True
        needs = spec.get("needs")
        if needs is not None:
            needs = [n["job"] if isinstance(n, dict) else n for n in needs]
        with LOCK:
            STATE["next_job"] += 1
            jid = STATE["next_job"]
        job = {
            "id": jid, "name": name, "stage": stage, "stage_idx": stages.index(stage),
            "when": when, "allow_failure": bool(allow), "needs": needs,
            "script": as_lines(spec.get("before_script", config.get("before_script", default.get("before_script"))))
            + as_lines(spec.get("script")),
            "after_script": as_lines(spec.get("after_script", config.get("after_script", default.get("after_script")))),
            "variables": {**{k: str(v if not isinstance(v, dict) else v.get("value", "")) for k, v in (config.get("variables") or {}).items()},
                          **{k: str(v if not isinstance(v, dict) else v.get("value", "")) for k, v in (spec.get("variables") or {}).items()}},
            "artifact_paths": as_lines((spec.get("artifacts") or {}).get("paths")),
            "status": "created", "created_at": now(), "started_at": None, "finished_at": None,
            "trace": "", "pipeline_id": pipeline["id"], "project_id": pipeline["project_id"],
            "proc": None, "play_vars": [], "artifacts": {}, "failure_reason": None,
            "user": "flowgate-bot",
        }
        jobs.append(job)
    names = {j["name"] for j in jobs}
    for j in jobs:
        for n in j["needs"] or []:
            if n not in names:
                raise ApiError(400, {"message": {"base": [f"'{j['name']}' job needs '{n}' job, but '{n}' does not exist in the pipeline"]}})
    return jobs


# ---------------------------------------------------------------- running

def deps_of(job, jobs):
    if job["needs"] is not None:
        return [j for j in jobs if j["name"] in job["needs"]]
    return [j for j in jobs if j["stage_idx"] < job["stage_idx"]]


def settled(dep):
    """Whether a dependency no longer holds its dependants back."""
    if dep["status"] in ("success", "failed", "canceled", "skipped"):
        return True
    return dep["status"] == "manual" and dep["allow_failure"]


def dep_failed(dep):
    return (dep["status"] == "failed" and not dep["allow_failure"]) or dep["status"] == "canceled"


def pipeline_status(p):
    jobs = [STATE["jobs"][i] for i in p["job_ids"]]
    if p["cancel_requested"]:
        if any(j["status"] in ("running",) for j in jobs):
            return "canceling"
        return "canceled"
    states = [j["status"] for j in jobs]
    if any(s in ("running",) for s in states):
        return "running"
    if any(s == "pending" for s in states):
        return "pending" if not any(j["started_at"] for j in jobs) else "running"
    if any(s == "created" for s in states):
        blocking = [j for j in jobs if j["status"] == "manual" and not j["allow_failure"]]
        if blocking:
            return "manual"
        return "running" if any(j["started_at"] for j in jobs) else "created"
    if any(j["status"] == "manual" and not j["allow_failure"] for j in jobs):
        return "manual"
    if any(s == "failed" and not j["allow_failure"] for s, j in zip(states, jobs)):
        return "failed"
    if any(s == "canceled" for s in states):
        return "canceled"
    if jobs and all(s in ("skipped", "manual") for s in states) and not any(s == "manual" for s in states):
        return "skipped"
    if any(s == "success" for s in states) or any(s == "manual" for s in states):
        return "success"
    return "skipped"


def touch(p):
    status = pipeline_status(p)
    if status != p["status"]:
        p["status"] = status
        p["updated_at"] = now()
        if status == "running" and not p["started_at"]:
            p["started_at"] = now()
        if status in ("success", "failed", "canceled", "skipped", "manual"):
            p["finished_at"] = now() if status != "manual" else None


def scheduler(pid):
    """Moves one pipeline's jobs along until it ends (artifacts are kept in memory)."""
    schedule(pid)


def schedule(pid):
    while True:
        with LOCK:
            p = STATE["pipelines"][pid]
            jobs = [STATE["jobs"][i] for i in p["job_ids"]]
            if p["cancel_requested"]:
                for j in jobs:
                    if j["status"] in ("created", "pending", "manual"):
                        j["status"] = "canceled"
                        j["finished_at"] = now()
                touch(p)
                if p["status"] == "canceled":
                    return
            else:
                for j in jobs:
                    if j["status"] != "created":
                        continue
                    deps = deps_of(j, jobs)
                    if not all(settled(d) for d in deps):
                        continue
                    failed = any(dep_failed(d) for d in deps)
                    if j["when"] == "manual":
                        j["status"] = "skipped" if failed else "manual"
                    elif j["when"] == "always" or (j["when"] == "on_failure") == failed:
                        j["status"] = "pending"
                        threading.Thread(target=run_job, args=(j["id"],), daemon=True).start()
                    else:
                        j["status"] = "skipped"
                    j["updated"] = now()
                touch(p)
                if p["status"] in ("success", "failed", "canceled", "skipped") and not any(
                        j["status"] in ("created", "pending", "running") for j in jobs):
                    return
        time.sleep(0.05)


# Predefined variables the fake sets itself, so they name its pipeline and job (gitlab-ci-local
# would otherwise make up its own).
PREDEFINED = ("CI_PIPELINE_ID", "CI_PIPELINE_IID", "CI_PIPELINE_SOURCE", "CI_JOB_ID",
              "CI_PROJECT_ID", "CI_PROJECT_PATH", "CI_COMMIT_SHA", "GITLAB_USER_LOGIN",
              "CI_SERVER_URL")


def job_workspace(j, p, project):
    """A fresh checkout of the project for one job, as a runner makes one: the project files
    (a git repository, which gitlab-ci-local needs), the pipeline's definition with its inputs
    applied, and the artifacts of the jobs it depends on."""
    ws = tempfile.mkdtemp(prefix=f"fake-gitlab-job-{j['id']}-")
    shutil.copytree(project["dir"], ws, dirs_exist_ok=True)
    pathlib.Path(ws, ".gitlab-ci.yml").write_text(yaml.safe_dump(p["config"], sort_keys=False))
    with LOCK:
        jobs = [STATE["jobs"][i] for i in p["job_ids"]]
        deps = [d for d in deps_of(j, jobs) if d["status"] == "success"]
        artifacts = [(rel, data) for d in deps for rel, data in d["artifacts"].items()]
    for rel, data in artifacts:
        target = pathlib.Path(ws, rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    git_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": ws,
               "GIT_AUTHOR_NAME": "flowgate-bot", "GIT_AUTHOR_EMAIL": "bot@example.invalid",
               "GIT_COMMITTER_NAME": "flowgate-bot", "GIT_COMMITTER_EMAIL": "bot@example.invalid"}
    for cmd in (["git", "init", "-q", "-b", "main"], ["git", "add", "-A"],
                ["git", "commit", "-q", "-m", "pipeline"],
                ["git", "config", "user.email", "bot@example.invalid"],
                ["git", "config", "user.name", "flowgate-bot"],
                ["git", "remote", "add", "origin", f"{ARGS.public_url}/{project['path']}.git"],
                ["git", "update-ref", "refs/remotes/origin/main", "HEAD"],
                ["git", "symbolic-ref", "refs/remotes/origin/HEAD", "refs/remotes/origin/main"]):
        subprocess.run(cmd, cwd=ws, env=git_env, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    return ws


def run_job(jid):
    with LOCK:
        j = STATE["jobs"][jid]
        p = STATE["pipelines"][j["pipeline_id"]]
        project = STATE["projects"][p["project_id"]]
        if j["status"] != "pending":
            return
        variables = {
            "CI_PIPELINE_ID": str(p["id"]), "CI_PIPELINE_IID": str(p["iid"]),
            "CI_PIPELINE_SOURCE": p["source"], "CI_JOB_ID": str(jid),
            "CI_PROJECT_ID": str(project["id"]), "CI_PROJECT_PATH": project["path"],
            "CI_COMMIT_SHA": p["sha"], "GITLAB_USER_LOGIN": "flowgate-bot",
            "CI_SERVER_URL": ARGS.public_url,
        }
        variables.update({v["key"]: v["value"] for v in p["variables"]})
        variables.update({v["key"]: v["value"] for v in j["play_vars"]})
        j["status"] = "running"
        j["started_at"] = now()
        j["trace"] = ("Running with gitlab-runner 17.0.0 (fake: gitlab-ci-local)\n"
                      "  on fake-shell-runner, shell executor\n")
        touch(p)
    ws = job_workspace(j, p, project)
    cmd = ARGS.gitlab_ci_local + [
        "--home", os.path.join(ws, ".gcl-home"), "--force-shell-executor",
        "--no-artifacts-to-source", "--ignore-predefined-vars", ",".join(PREDEFINED),
    ]
    for k, v in variables.items():
        cmd += ["--variable", f"{k}={v}"]
    cmd.append(j["name"])
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "TMPDIR")}
    env["HOME"] = ws
    prefix_out, prefix_cmd = f"{j['name']} > ", f"{j['name']} $ "
    proc = subprocess.Popen(cmd, cwd=ws, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    with LOCK:
        j["proc"] = proc
    # gitlab-ci-local prints each script line as "<job> $ line" and its output as
    # "<job> > text": the trace is those, as a runner's trace shows them.
    script_code = None
    runner_log = []
    # "<job> finished in 19 ms  FAIL 3" (WARN for a job allowed to fail, which gitlab-ci-local
    # then leaves out of its own exit status).
    finished = re.compile(re.escape(j["name"]) + r" finished in .*(?:FAIL|WARN) (\d+)")
    for raw in proc.stdout:
        line = raw.decode("utf-8", "replace")
        if m := finished.search(line):
            script_code = int(m.group(1))
            continue
        if line.startswith(prefix_out):
            line = line[len(prefix_out):]
        elif line.startswith(prefix_cmd):
            line = "$ " + line[len(prefix_cmd):]
        else:
            runner_log.append(line)  # gitlab-ci-local's own chatter: kept for a failure
            continue
        with LOCK:
            j["trace"] += line
    code = proc.wait()
    if script_code is not None:
        code = script_code
    try:
        with LOCK:
            j["proc"] = None
            if j["status"] == "canceled" or p["cancel_requested"]:
                j["status"] = "canceled"
                j["finished_at"] = now()
                touch(p)
                return
        collected = {}
        if code == 0:
            root = pathlib.Path(ws, ".gitlab-ci-local", "artifacts", j["name"])
            for f in root.rglob("*"):
                if f.is_file():
                    collected[str(f.relative_to(root))] = f.read_bytes()
        with LOCK:
            if code == 0:
                j["artifacts"].update(collected)
                j["trace"] += "Job succeeded\n"
                j["status"] = "success"
            else:
                if script_code is None:  # the runner itself failed: say why, as a runner would
                    sys.stderr.write(f"gitlab-ci-local failed on job {jid}:\n" + "".join(runner_log[-20:]))
                    j["trace"] += "".join(runner_log[-5:])
                j["trace"] += f"ERROR: Job failed: exit code {code}\n"
                j["status"] = "failed"
                j["failure_reason"] = "script_failure"
            j["finished_at"] = now()
            touch(p)
    finally:
        shutil.rmtree(ws, ignore_errors=True)


def kill(j):
    proc = j.get("proc")
    if proc is not None and proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass

        def hard():
            time.sleep(2)
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        threading.Thread(target=hard, daemon=True).start()


# ---------------------------------------------------------------- JSON shapes

def user_json():
    return {"id": 7, "username": "flowgate-bot", "name": "flowgate bot", "state": "active",
            "avatar_url": None, "web_url": f"{ARGS.public_url}/flowgate-bot"}


def pipeline_json(p, full=True):
    project = STATE["projects"][p["project_id"]]
    base = {
        "id": p["id"], "iid": p["iid"], "project_id": p["project_id"], "sha": p["sha"],
        "ref": p["ref"], "status": p["status"], "source": p["source"],
        "created_at": iso(p["created_at"]), "updated_at": iso(p["updated_at"]),
        "web_url": f"{ARGS.public_url}/{project['path']}/-/pipelines/{p['id']}", "name": None,
    }
    if full:
        dur = None
        if p["started_at"] and p["finished_at"]:
            dur = int((p["finished_at"] - p["started_at"]).total_seconds())
        base.update({
            "before_sha": "0" * 40, "tag": False, "yaml_errors": None, "user": user_json(),
            "started_at": iso(p["started_at"]), "finished_at": iso(p["finished_at"]),
            "committed_at": None, "duration": dur, "queued_duration": 0, "coverage": None,
            "detailed_status": {"icon": f"status_{p['status']}", "text": p["status"],
                                "label": p["status"], "group": p["status"]},
        })
    return base


def job_json(j):
    p = STATE["pipelines"][j["pipeline_id"]]
    project = STATE["projects"][j["project_id"]]
    dur = None
    if j["started_at"]:
        dur = ((j["finished_at"] or now()) - j["started_at"]).total_seconds()
    return {
        "id": j["id"], "name": j["name"], "stage": j["stage"], "status": j["status"],
        "ref": p["ref"], "tag": False, "coverage": None, "allow_failure": j["allow_failure"],
        "created_at": iso(j["created_at"]), "started_at": iso(j["started_at"]),
        "finished_at": iso(j["finished_at"]), "erased_at": None, "duration": dur,
        "queued_duration": 0, "user": user_json(),
        "commit": {"id": p["sha"], "short_id": p["sha"][:8], "title": "fake commit"},
        "pipeline": pipeline_json(p, full=False),
        "web_url": f"{ARGS.public_url}/{project['path']}/-/jobs/{j['id']}",
        "artifacts": [{"file_type": "archive", "size": sum(len(v) for v in j["artifacts"].values()),
                       "filename": "artifacts.zip", "file_format": "zip"}] if j["artifacts"] else [],
        "artifacts_expire_at": None, "tag_list": [], "runner": None,
        "failure_reason": j["failure_reason"], "archived": False,
    }


# ---------------------------------------------------------------- HTTP

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # quiet; the log file gets one line per request
        print(self.command, self.path.split("?")[0], fmt % args if "%" in fmt else "", flush=True)

    def send(self, status, body, headers=None, content_type="application/json"):
        data = body if isinstance(body, bytes) else (
            body.encode() if isinstance(body, str) else json.dumps(body).encode())
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        for k, v in getattr(self, "rate_headers", {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        ctype = self.headers.get("Content-Type", "")
        if not raw:
            return {}
        if "json" in ctype:
            try:
                v = json.loads(raw)
            except ValueError:
                raise ApiError(400, {"error": "The provided content-type 'application/json' is not supported."})
            if not isinstance(v, dict):
                raise ApiError(400, {"error": "body must be an object"})
            return v
        return form_to_dict(urllib.parse.parse_qsl(raw.decode(), keep_blank_values=True))

    def do_GET(self):
        self.handle_any("GET")

    def do_POST(self):
        self.handle_any("POST")

    def handle_any(self, method):
        url = urllib.parse.urlsplit(self.path)
        path = url.path
        query = form_to_dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
        try:
            if path.startswith("/__fake/"):
                return self.fake_hook(path[len("/__fake/"):])
            if not path.startswith("/api/v4/"):
                raise not_found()
            self.rate_limit()
            parts = [urllib.parse.unquote(s) for s in path[len("/api/v4/"):].split("/")]
            if len(parts) >= 4 and parts[0] == "projects" and parts[2] == "trigger" and parts[3] == "pipeline":
                project = find_project(parts[1])
                return self.create(project, self.body(), trigger=True)
            self.authenticate()
            if len(parts) < 3 or parts[0] != "projects":
                raise not_found("404 Not Found")
            project = find_project(parts[1])
            rest = parts[2:]
            with LOCK:
                return self.route(method, project, rest, query)
        except Handled:
            pass
        except ApiError as e:
            self.send(e.status, e.body)
        except (BrokenPipeError, ConnectionResetError):
            pass
        except Exception as e:  # a bug in the fake, or a .gitlab-ci.yml it cannot read
            print(f"500 on {self.path}: {e!r}", flush=True)
            self.send(500, {"message": "500 Internal Server Error"})

    def route(self, method, project, rest, query):
        if method == "POST" and rest == ["pipeline"]:
            return self.create(project, self.body(), trigger=False)
        if method == "GET" and rest == ["pipelines"]:
            return self.list_pipelines(project, query)
        if rest[0] == "pipelines" and len(rest) >= 2:
            p = find_pipeline(project, rest[1])
            if method == "GET" and len(rest) == 2:
                return self.send(200, pipeline_json(p))
            if method == "GET" and rest[2:] == ["variables"]:
                return self.send(200, [dict(v) for v in p["variables"]])
            if method == "GET" and rest[2:] == ["jobs"]:
                scope = query.get("scope") or []
                scope = scope if isinstance(scope, list) else [scope]
                jobs = [STATE["jobs"][i] for i in p["job_ids"]]
                jobs = [j for j in jobs if not scope or j["status"] in scope]
                jobs.sort(key=lambda j: -j["id"])
                return self.paged([job_json(j) for j in jobs], query)
            if method == "POST" and rest[2:] == ["cancel"]:
                if p["status"] in ACTIVE + ("manual",):
                    p["cancel_requested"] = True
                    for j in (STATE["jobs"][i] for i in p["job_ids"]):
                        if j["status"] == "running":
                            kill(j)
                    touch(p)
                return self.send(200, pipeline_json(p))
        if rest[0] == "jobs" and len(rest) >= 2:
            j = find_job(project, rest[1])
            if method == "GET" and len(rest) == 2:
                return self.send(200, job_json(j))
            if method == "GET" and rest[2:] == ["trace"]:
                return self.send(200, j["trace"], content_type="text/plain")
            if method == "GET" and len(rest) >= 4 and rest[2] == "artifacts":
                name = "/".join(rest[3:])
                if name not in j["artifacts"]:
                    raise not_found("404 Not Found")
                return self.send(200, j["artifacts"][name], content_type="application/octet-stream")
            if method == "POST" and rest[2:] == ["play"]:
                return self.play(j, self.body())
            if method == "POST" and rest[2:] == ["cancel"]:
                if j["status"] in ("created", "pending", "running", "manual"):
                    kill(j)
                    j["status"] = "canceled"
                    j["finished_at"] = now()
                    touch(STATE["pipelines"][j["pipeline_id"]])
                return self.send(201, job_json(j))
        raise not_found("404 Not Found")

    def play(self, j, body):
        if j["status"] != "manual":
            raise ApiError(400, {"message": "400 Bad request - Unplayable Job"})
        attrs = body.get("job_variables_attributes") or []
        if isinstance(attrs, dict):
            attrs = [attrs[k] for k in sorted(attrs)]
        clean = []
        for a in attrs:
            if not isinstance(a, dict) or not a.get("key"):
                raise ApiError(400, {"message": {"job_variables_attributes": ["key can't be blank"]}})
            clean.append({"key": str(a["key"]), "value": str(a.get("value", ""))})
        j["play_vars"] = clean
        j["status"] = "pending"
        j["user"] = "flowgate-bot"
        touch(STATE["pipelines"][j["pipeline_id"]])
        threading.Thread(target=run_job, args=(j["id"],), daemon=True).start()
        return self.send(200, job_json(j))

    def create(self, project, body, trigger):
        if trigger:
            token = body.get("token") or ""
            if not ARGS.trigger_token or token != ARGS.trigger_token:
                raise ApiError(404, {"message": "404 Not Found"})
        else:
            self.authenticate()
        ref = body.get("ref")
        if not ref:
            raise ApiError(400, {"error": "ref is missing"})
        if ref != "main":
            raise ApiError(400, {"message": {"base": ["Reference not found"]}})
        variables = body.get("variables") or []
        if trigger and isinstance(variables, dict):
            variables = [{"key": k, "value": v} for k, v in variables.items()]
        if isinstance(variables, dict):
            variables = [variables[k] for k in sorted(variables)]
        clean = []
        for v in variables:
            if not isinstance(v, dict) or not isinstance(v.get("key"), str) or not re.fullmatch(r"[A-Za-z0-9_]+", v["key"]):
                raise ApiError(400, {"message": {"base": ["Variables key can contain only letters, digits and '_'."]}})
            clean.append({"variable_type": v.get("variable_type", "env_var"), "key": v["key"],
                          "value": str(v.get("value", ""))})
        inputs = body.get("inputs") or {}
        if not isinstance(inputs, dict):
            raise ApiError(400, {"error": "inputs is invalid"})
        with LOCK:
            config, err = load_definition(project, inputs)
            if err:
                raise ApiError(400, {"message": {"base": [err]}})
            STATE["next_pipeline"] += 1
            pid = STATE["next_pipeline"]
            iid = 1 + sum(1 for p in STATE["pipelines"].values() if p["project_id"] == project["id"])
            p = {"id": pid, "iid": iid, "project_id": project["id"], "sha": "a" * 40, "ref": ref,
                 "status": "created", "source": "trigger" if trigger else "api",
                 "created_at": now(), "updated_at": now(), "started_at": None, "finished_at": None,
                 "variables": clean, "job_ids": [], "cancel_requested": False, "config": config}
            jobs = build_jobs(config, p)
            if not jobs:
                raise ApiError(400, {"message": {"base": ["Pipeline will not run for the selected trigger. The rules configuration prevented any jobs from being added to the pipeline."]}})
            for j in jobs:
                STATE["jobs"][j["id"]] = j
            p["job_ids"] = [j["id"] for j in jobs]
            STATE["pipelines"][pid] = p
            STATE["created"] += 1
            by = STATE["created_by_project"]
            by[project["path"]] = by.get(project["path"], 0) + 1
            threading.Thread(target=scheduler, args=(pid,), daemon=True).start()
            if STATE["lose_next_create"].get(project["path"], 0) > 0:
                STATE["lose_next_create"][project["path"]] -= 1
                self.close_connection = True
                self.connection.shutdown(2)
                return None
            return self.send(201, pipeline_json(p))

    def list_pipelines(self, project, query):
        ps = [p for p in STATE["pipelines"].values() if p["project_id"] == project["id"]]
        for field in ("ref", "status", "source", "sha"):
            if query.get(field):
                ps = [p for p in ps if p[field] == query[field]]
        if query.get("username") and query["username"] != "flowgate-bot":
            ps = []
        for field, cmp in (("updated_after", lambda a, b: a > b), ("updated_before", lambda a, b: a < b),
                           ("created_after", lambda a, b: a > b), ("created_before", lambda a, b: a < b)):
            if query.get(field):
                try:
                    t = datetime.datetime.fromisoformat(query[field].replace("Z", "+00:00"))
                except ValueError:
                    raise ApiError(400, {"error": f"{field} is invalid"})
                key = "updated_at" if field.startswith("updated") else "created_at"
                ps = [p for p in ps if cmp(p[key], t)]
        order = query.get("order_by", "id")
        if order not in ("id", "status", "ref", "updated_at", "user_id"):
            raise ApiError(400, {"error": "order_by does not have a valid value"})
        sort = query.get("sort", "desc")
        if sort not in ("asc", "desc"):
            raise ApiError(400, {"error": "sort does not have a valid value"})
        ps.sort(key=lambda p: p["id"] if order in ("id", "user_id") else (p[order], p["id"]),
                reverse=sort == "desc")
        return self.paged([pipeline_json(p, full=False) for p in ps], query)

    def paged(self, items, query):
        try:
            page = max(1, int(query.get("page", 1)))
            per_page = min(100, max(1, int(query.get("per_page", 20))))
        except ValueError:
            raise ApiError(400, {"error": "page is invalid"})
        total_pages = max(1, -(-len(items) // per_page))
        chunk = items[(page - 1) * per_page: page * per_page]
        base = f"{ARGS.public_url}{self.path.split('?')[0]}"

        def link(n, rel):
            q = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(self.path).query))
            q.update({"page": str(n), "per_page": str(per_page)})
            return f'<{base}?{urllib.parse.urlencode(q)}>; rel="{rel}"'

        links = []
        if page > 1:
            links.append(link(page - 1, "prev"))
        if page < total_pages:
            links.append(link(page + 1, "next"))
        links += [link(1, "first"), link(total_pages, "last")]
        headers = {
            "X-Page": str(page), "X-Per-Page": str(per_page), "X-Total": str(len(items)),
            "X-Total-Pages": str(total_pages),
            "X-Next-Page": str(page + 1) if page < total_pages else "",
            "X-Prev-Page": str(page - 1) if page > 1 else "", "Link": ", ".join(links),
        }
        return self.send(200, chunk, headers)

    def authenticate(self):
        token = self.headers.get("PRIVATE-TOKEN")
        auth = self.headers.get("Authorization", "")
        if not token and auth.lower().startswith("bearer "):
            token = auth[7:]
        if token != ARGS.token:
            raise ApiError(401, {"message": "401 Unauthorized"})

    def rate_limit(self):
        key = self.headers.get("PRIVATE-TOKEN") or self.headers.get("Authorization") or self.client_address[0]
        with LOCK:
            t = time.time()
            window = STATE["rate"].setdefault(key, [t, 0])
            if t - window[0] >= 60:
                window[0], window[1] = t, 0
            window[1] += 1
            reset = int(window[0] + 60)
            limit = ARGS.rate_limit
            self.rate_headers = {
                "RateLimit-Name": "throttle_authenticated_api", "RateLimit-Limit": str(limit),
                "RateLimit-Observed": str(window[1]),
                "RateLimit-Remaining": str(max(0, limit - window[1])),
                "RateLimit-Reset": str(reset),
                "RateLimit-ResetTime": datetime.datetime.fromtimestamp(reset, datetime.timezone.utc).strftime("%a, %d %b %Y %H:%M:%S GMT"),
            }
            throttle = STATE["throttle"].get(self.project_path(), {"count": 0})
            if throttle["count"] > 0:
                throttle["count"] -= 1
                self.rate_headers["RateLimit-Remaining"] = "0"
                self.throttled(throttle["retry_after"])
            if window[1] > limit:
                self.throttled(max(1, reset - int(t)))

    def project_path(self):
        """The path of the project this request names, if any (for the test hooks)."""
        parts = urllib.parse.urlsplit(self.path).path.split("/")
        if len(parts) > 4 and parts[1:4] == ["api", "v4", "projects"]:
            try:
                return find_project(urllib.parse.unquote(parts[4]))["path"]
            except ApiError:
                return None
        return None

    def throttled(self, retry_after):
        self.send(429, "Retry later\n", {"Retry-After": str(retry_after)}, content_type="text/plain")
        raise Handled()

    def fake_hook(self, name):
        """Test hooks, each for one project (so that tests running at once do not take each
        other's): `{"project": "group/name", ...}`."""
        body = self.body() or {}
        project = body.get("project")
        with LOCK:
            if name in ("lose_next_create", "throttle_next") and project not in {
                    p["path"] for p in STATE["projects"].values()}:
                raise ApiError(400, {"error": f"{name} needs the project it applies to"})
            if name == "lose_next_create":
                STATE["lose_next_create"][project] = STATE["lose_next_create"].get(project, 0) + 1
            elif name == "throttle_next":
                STATE["throttle"][project] = {"count": int(body.get("count", 1)),
                                              "retry_after": int(body.get("retry_after", 1))}
            elif name != "counts":
                raise not_found()
            return self.send(200, {"pipelines_created": STATE["created"],
                                   "project_pipelines_created": STATE["created_by_project"].get(project, 0)})


class Handled(Exception):
    """An answer already sent (a 429)."""


def form_to_dict(pairs):
    """Rails-style form keys: a[b]=1, a[]=1, variables[][key]=K, inputs[name]=v."""
    out = {}
    for k, v in pairs:
        m = re.match(r"^([^\[]+)((?:\[[^\]]*\])*)$", k)
        if not m:
            continue
        head, rest = m.group(1), re.findall(r"\[([^\]]*)\]", m.group(2))
        if not rest:
            out[head] = v
        elif rest == [""]:
            out.setdefault(head, []).append(v)
        elif rest[0] == "" and len(rest) == 2:
            lst = out.setdefault(head, [])
            if not lst or rest[1] in lst[-1]:
                lst.append({})
            lst[-1][rest[1]] = v
        else:
            out.setdefault(head, {})[rest[0]] = v
    return out


def find_project(ident):
    for p in STATE["projects"].values():
        if ident == str(p["id"]) or ident == p["path"]:
            return p
    raise not_found("404 Project Not Found")


def find_pipeline(project, ident):
    p = STATE["pipelines"].get(int(ident)) if ident.isdigit() else None
    if not p or p["project_id"] != project["id"]:
        raise not_found("404 Not found")
    return p


def find_job(project, ident):
    j = STATE["jobs"].get(int(ident)) if ident.isdigit() else None
    if not j or j["project_id"] != project["id"]:
        raise not_found("404 Not found")
    return j


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--projects", required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--trigger-token", default="")
    ap.add_argument("--rate-limit", type=int, default=10000)
    ap.add_argument("--gitlab-ci-local", required=True, nargs="+",
                    help="the command that runs gitlab-ci-local (e.g. NODE .../gitlab-ci-local/dist/index.js)")
    ARGS = ap.parse_args()
    ARGS.public_url = f"http://127.0.0.1:{ARGS.port}"
    root = pathlib.Path(ARGS.projects)
    found = sorted(str(f.parent.relative_to(root)) for f in root.glob("*/*/.gitlab-ci.yml"))
    for i, path in enumerate(found, 1):
        STATE["projects"][i] = {"id": i, "path": path, "dir": str(root / path)}
    server = ThreadingHTTPServer(("127.0.0.1", ARGS.port), Handler)
    server.daemon_threads = True
    print(f"fake GitLab on {ARGS.public_url} with projects {found}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
