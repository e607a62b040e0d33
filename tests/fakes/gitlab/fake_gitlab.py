#!/usr/bin/env python3
"""A fake of the GitLab REST API (v4) whose pipelines really run their .gitlab-ci.yml.

It serves the endpoints flowgate's gitlab-ci engine uses, with the paths, parameters, status
codes, field names, headers and error bodies of GitLab's REST docs and code (doc/api/pipelines.md,
jobs.md, job_artifacts.md, pipeline_triggers.md, projects.md, rest/index.md; lib/api/ci/*.rb):

    GET  /api/v4/user
    GET  /api/v4/projects/:id                            the CI/CD settings below
    PUT  /api/v4/projects/:id                            ci_pipeline_variables_minimum_override_role, ...
    POST /api/v4/projects/:id/pipeline                   ref, variables[], inputs{}   -> 201
    POST /api/v4/projects/:id/trigger/pipeline           token, ref, variables[K], inputs[K]
    GET  /api/v4/projects/:id/pipelines                  name, ref, status, source, sha, scope,
                                                         username, yaml_errors, updated_after/before,
                                                         created_after/before, order_by, sort, page
    GET  /api/v4/projects/:id/pipelines/:pid
    PUT  /api/v4/projects/:id/pipelines/:pid/metadata    name
    GET  /api/v4/projects/:id/pipelines/:pid/variables
    GET  /api/v4/projects/:id/pipelines/:pid/jobs        scope[], include_retried, page, per_page
    POST /api/v4/projects/:id/pipelines/:pid/cancel
    GET  /api/v4/projects/:id/jobs/:job_id
    POST /api/v4/projects/:id/jobs/:job_id/play          job_variables_attributes[], job_inputs{}
    POST /api/v4/projects/:id/jobs/:job_id/cancel
    GET  /api/v4/projects/:id/jobs/:job_id/trace         text/plain
    GET  /api/v4/projects/:id/jobs/:job_id/artifacts/*path   one file of the job's artifacts

`:id` is the numeric project id or the URL-encoded path (`group%2Fproject`). Errors are
`{"message": ...}` (or `{"error": ...}` for a missing parameter, as Grape answers). Every answer
carries `RateLimit-Limit`, `RateLimit-Observed`, `RateLimit-Remaining`, `RateLimit-Reset` and
`RateLimit-ResetTime`; past the limit the answer is 429 `Retry later` with `Retry-After`. Lists
carry `X-Page`, `X-Per-Page`, `X-Next-Page` (empty on the last page), `X-Prev-Page`, `X-Total`,
`X-Total-Pages` and a `Link` header.

    fake_gitlab.py --port PORT --projects DIR --token TOKEN [--trigger-token T] [--rate-limit N]
                   [--pipeline-variables-role ROLE] [--trace-limit BYTES] [--pending-seconds S]
                   --gitlab-ci-local NODE SCRIPT

DIR/<group>/<name>/.gitlab-ci.yml is project `<group>/<name>` (ids 1, 2, ... in sorted path
order, one branch `main`). DIR/<group>/<name>/.fake-project.yml, if present, holds the project's
settings (it is not part of the repository the jobs see):

    ci_pipeline_variables_minimum_override_role: developer   # no_one_allowed | developer |
                                                             # maintainer | owner
    restrict_user_defined_variables: true                    # false: any Developer may
    token_role: maintainer                                   # the token user's role here
    build_timeout: 3600                                      # seconds (project default timeout)
    keep_latest_artifact: true
    variables:                                               # project CI/CD variables
      - {key: DEPLOY_TOKEN, value: "...", masked: true, raw: false}

PIPELINE VARIABLES. As on GitLab.com since 17.7/18.0, every project without a settings file has
`ci_pipeline_variables_minimum_override_role: no_one_allowed` (`--pipeline-variables-role`
changes that default): a pipeline created with variables (API or trigger; a trigger's own
TRIGGER_PAYLOAD does not count) is refused with 400 `{"message": {"base": ["Insufficient
permissions to set pipeline variables"]}}`, and playing a job with `job_variables_attributes`
with 403 `{"message": "403 Forbidden"}` (Ci::PlayBuildService), unless the token's role reaches
the setting (`no_one_allowed` lets no one).

CONFIGURATION (gitlab_config.py). The `spec:inputs` header: types, defaults, options, regex and
GitLab's messages; `$[[ inputs.x | expand_vars | truncate(a,b) | posix_escape ]]` interpolated
node by node into the loaded YAML (a node that is one block keeps the input's type);
`!reference`, `extends`, `default`, `inherit`, `stages`, `variables` (with `expand: false`);
`workflow:name` (inputs, then variables expanded; `CI_PIPELINE_NAME`), `workflow:rules`
("Pipeline filtered out by workflow rules."); job `rules` (`if` with GitLab's expression
language in gitlab_expr.py, `exists`, `changes`, `when`, `allow_failure`, `variables`,
`needs`, `start_in`) and `only`/`except` (refs, variables, changes; default `only: [branches,
tags]`); a pipeline without jobs is refused ("Pipeline will not run for the selected trigger.
..."). A configuration error is a 400 on `POST /pipeline` (GitLab creates it with
`save_on_errors: false`), and a pipeline with `yaml_errors`, status `failed` and
failure_reason `config_error` from the trigger API (which saves it).

HOW JOBS RUN. The fake is GitLab's coordinator; gitlab-ci-local (npm, shell executor) is its
runner. Jobs move as Ci::PipelineProcessing does: `created` until the jobs before them (earlier
stages, or their `needs`) settle, judged with GitLab's composite status (allowed failures pass
with warnings, manual jobs allowed to fail are ignored, a blocking manual job holds what follows);
then `pending` for `--pending-seconds` (a runner picking it up), `waiting_for_resource` while
another job holds its `resource_group`, `preparing` while its checkout is made, `running`; a
`when: delayed` job is `scheduled` for its `start_in`; `when: manual` ones are `manual` until
played. The pipeline's status is GitLab's composite status of its jobs (`canceling` while a job
runs its after_script after a cancel). Each job runs with `gitlab-ci-local <job>` in a fresh
checkout of the project holding the pipeline's resolved definition (job inputs
`${{ job.inputs.x }}` substituted) and the artifacts of the jobs it depends on, with the
predefined CI_* variables, project, pipeline and play variables as `--variable` (which
gitlab-ci-local expands as a runner does: `$$` is `$`; `expand: false` YAML variables stay raw).
Its output becomes the job's log in the runner's format (gitlab_trace.py: sections, colours,
`$ command` lines, masked project variables as `[MASKED]`, the runner's 4 MiB `--trace-limit`
notice). `timeout` (or the project's build_timeout) stops a job with `job_execution_timeout`;
a cancel turns a running job with an after_script into `canceling` while the fake runs its
after_script (the runner's 5-minute cap), then `canceled`. Artifacts (`paths`, `when`,
`expire_in`, default 30 days) expire unless they belong to the newest successful pipeline of
their ref (`keep_latest_artifact`); an expired artifact answers 404.

SHORTCUTS (everything else follows the docs):
- Jobs run on this host in gitlab-ci-local's shell executor, not in containers: `image` and
  `services` are ignored. Not modelled: `include` (refused with a 400 naming the shortcut),
  `trigger` jobs and downstream pipelines, `parallel`/`matrix`, `retry` (and `include_retried`),
  `interruptible` auto-cancel, `workflow:auto_cancel`, `spec:inputs:rules`, `spec:include`,
  `cache`, `environment` and deployments, `dependencies` (a job gets the artifacts of every job
  it depends on), merge-request and push pipelines (so `rules:changes` is always true, as
  GitLab takes it for API, trigger and web pipelines), `artifacts:reports` (a dotenv report must
  also be listed under `paths` to be served by path), `artifacts:exclude`/`name`/`untracked`,
  the artifacts archive download (`/artifacts` as a zip).
- Job inputs (`inputs:` on a job, `${{ job.inputs.x }}`) are substituted as plain text in
  `script`, `before_script`, `after_script` and `artifacts`: no Moa operators or functions. The
  errors of `job_inputs` on play, and the 20-inputs limit, answer in the fake's own words.
- Variables: project CI/CD variables come from the settings file (no groups, instance,
  protected or environment-scoped ones; a masked value is not checked for GitLab's masking
  rules); file-type variables (a trigger's TRIGGER_PAYLOAD) are listed but not given to jobs.
- Authentication: one token (`PRIVATE-TOKEN` or `Authorization: Bearer`) of one user
  (`flowgate-bot`, whose role per project is `token_role`); no scopes, no protected branches.
  One trigger token, owned by the same user. `PUT /projects/:id` changes only the
  pipeline-variables settings.
- Refs: only the branch `main`; `sha` is a fixed fake commit.
- A runner takes a pending job after `--pending-seconds`; `preparing` lasts while the fake makes
  the job's checkout. Job failure_reason: script_failure or job_execution_timeout; a pipeline
  saved with configuration errors has config_error.
- Rate limit: one bucket per token, `--rate-limit` requests per 60 s window (default 10000).
- State is in memory; pipelines are never purged.
- Test hooks under /__fake/, each for one project (`{"project": "group/name"}`), so tests
  running at once never take each other's: `lose_next_create` (the project's next create runs
  but its connection is closed before any answer), `throttle_next` ({"count", "retry_after"}:
  the project's next requests get 429), `fault_next` ({"skip": N, "fault": 429|500|502|503|
  "reset"|"stall", "reads": ["trace", "artifacts", "jobs", "job", "pipeline", "pipelines",
  "variables"], "stall_seconds"}: the project's next N reads of those kinds pass, the one after
  fails so; {"disarm": true} takes it back), `counts` (pipelines created, in all and for the
  project, and the project's requests by kind), `expire_artifacts` ({"job": id}: the job's
  artifacts expire now).
"""

import argparse
import datetime
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

import gitlab_config
from gitlab_config import ConfigError
from gitlab_trace import Trace, go_duration

LOCK = threading.RLock()
STATE = {
    "projects": {},  # id -> {"id", "path", "dir", "settings"}
    "pipelines": {},  # id -> pipeline dict (internal)
    "jobs": {},  # id -> job dict (internal)
    "next_pipeline": 1000,
    "next_job": 5000,
    "lose_next_create": {},  # project path -> creates whose answer is lost
    "throttle": {},  # project path -> {"count", "retry_after"}
    "faults": {},  # project path -> {"count", "fault", "reads", "stall_seconds"}
    "created_by_project": {},  # project path -> pipelines created
    "requests": {},  # project path -> {kind: count}
    "resource_groups": {},  # (project id, group) -> job id holding it
    "rate": {},  # token -> [window_start, count]
    "created": 0,
}
ARGS = None
USER = {"id": 7, "username": "flowgate-bot", "name": "flowgate bot", "state": "active"}
ROLES = {"guest": 10, "reporter": 20, "developer": 30, "maintainer": 40, "owner": 50}
OVERRIDE_ROLES = ("no_one_allowed", "developer", "maintainer", "owner")
COMPLETED = ("success", "failed", "canceled", "skipped")
CANCELABLE = ("created", "waiting_for_resource", "preparing", "pending", "running", "scheduled", "manual")
AFTER_SCRIPT_TIMEOUT = 300


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


def base_error(*messages):
    return ApiError(400, {"message": {"base": list(messages)}})


# ---------------------------------------------------------------- projects and permissions

def load_settings(project_dir):
    settings = {
        "ci_pipeline_variables_minimum_override_role": ARGS.pipeline_variables_role,
        "restrict_user_defined_variables": True,
        "token_role": "maintainer",
        "build_timeout": 3600,
        "keep_latest_artifact": True,
        "variables": [],
    }
    path = pathlib.Path(project_dir, ".fake-project.yml")
    if path.exists():
        settings.update(yaml.safe_load(path.read_text()) or {})
    return settings


def can_set_pipeline_variables(project):
    """`set_pipeline_variables` (ProjectPolicy): without the restriction any Developer may; with
    it the token's role must reach the minimum override role, and `no_one_allowed` lets no one."""
    s = project["settings"]
    role = ROLES.get(s["token_role"], 0)
    if not s["restrict_user_defined_variables"]:
        return role >= ROLES["developer"]
    minimum = s["ci_pipeline_variables_minimum_override_role"]
    if minimum == "no_one_allowed":
        return False
    return role >= ROLES[minimum]


def project_variables(project):
    return [v for v in project["settings"].get("variables") or []]


def masked_values(project):
    return [str(v["value"]) for v in project_variables(project) if v.get("masked")]


def project_json(project):
    s = project["settings"]
    name = project["path"].split("/")[-1]
    return {
        "id": project["id"], "name": name, "path": name, "path_with_namespace": project["path"],
        "name_with_namespace": project["path"].replace("/", " / "), "default_branch": "main",
        "web_url": f"{ARGS.public_url}/{project['path']}",
        "ci_pipeline_variables_minimum_override_role": s["ci_pipeline_variables_minimum_override_role"],
        "restrict_user_defined_variables": s["restrict_user_defined_variables"],
        "build_timeout": s["build_timeout"], "keep_latest_artifact": s["keep_latest_artifact"],
        "permissions": {"project_access": {"access_level": ROLES.get(s["token_role"], 0)}},
    }


# ---------------------------------------------------------------- GitLab's composite status

def composite(jobs, dag=False):
    """Gitlab::Ci::Status::Composite over `jobs` (dicts with status and allow_failure)."""
    seen = set()
    for j in jobs:
        s = j["status"]
        if j["allow_failure"] and s in ("failed", "canceled"):
            seen.add("success_with_warnings")
        elif j["allow_failure"] and s == "manual":
            seen.add("ignored")
        else:
            seen.add(s)
    if not seen:
        return None

    def only(*names):
        return bool(seen) and seen <= set(names)

    def any_of(*names):
        return bool(seen & set(names))

    if dag and any_of("skipped", "ignored"):
        return "skipped"
    if dag and not only("success", "failed", "canceled", "skipped", "success_with_warnings"):
        return "pending"
    if only("skipped", "ignored"):
        return "skipped"
    if only("success", "skipped", "success_with_warnings", "ignored"):
        return "success"
    if only("created", "success_with_warnings", "ignored"):
        return "created"
    if only("preparing", "success_with_warnings", "ignored"):
        return "preparing"
    if only("canceled", "success", "skipped", "success_with_warnings", "ignored"):
        return "canceled"
    if only("pending", "created", "skipped", "success_with_warnings", "ignored"):
        return "pending"
    if any_of("canceling"):
        return "canceling"
    if any_of("running", "pending"):
        return "running"
    if any_of("waiting_for_resource"):
        return "waiting_for_resource"
    if any_of("manual"):
        return "manual"
    if any_of("scheduled"):
        return "scheduled"
    if any_of("preparing"):
        return "preparing"
    if any_of("created"):
        return "running"
    return "failed"


def pipeline_jobs(p):
    return [STATE["jobs"][i] for i in p["job_ids"]]


def touch(p):
    if p["yaml_errors"]:
        return
    status = composite(pipeline_jobs(p)) or "skipped"
    if status != p["status"]:
        p["status"] = status
        p["updated_at"] = now()
        if status in ("running", "canceling") and not p["started_at"]:
            p["started_at"] = now()
        p["finished_at"] = now() if status in COMPLETED else None


# ---------------------------------------------------------------- creating pipelines

def predefined(project, p, source):
    return {
        "CI": "true", "GITLAB_CI": "true", "CI_SERVER_URL": ARGS.public_url,
        "CI_PIPELINE_ID": str(p["id"]), "CI_PIPELINE_IID": str(p["iid"]),
        "CI_PIPELINE_SOURCE": source, "CI_PROJECT_ID": str(project["id"]),
        "CI_PROJECT_PATH": project["path"], "CI_PROJECT_NAME": project["path"].split("/")[-1],
        "CI_PROJECT_NAMESPACE": project["path"].rsplit("/", 1)[0], "CI_DEFAULT_BRANCH": "main",
        "CI_COMMIT_SHA": p["sha"], "CI_COMMIT_REF_NAME": p["ref"], "CI_COMMIT_BRANCH": p["ref"],
        "CI_COMMIT_REF_SLUG": re.sub(r"[^a-z0-9]", "-", p["ref"].lower())[:63],
        "CI_COMMIT_TITLE": "fake commit", "GITLAB_USER_LOGIN": USER["username"],
        **({"CI_PIPELINE_TRIGGERED": "true"} if source == "trigger" else {}),
    }


def parse_variables(variables, trigger):
    if trigger and isinstance(variables, dict):
        variables = [{"key": k, "value": v} for k, v in variables.items()]
    elif isinstance(variables, dict):  # variables[0][key]=... form encoding
        variables = [variables[k] for k in sorted(variables)]
    clean = []
    for v in variables or []:
        if not isinstance(v, dict):
            raise ApiError(400, {"error": "variables is invalid"})
        key = v.get("key")
        if not isinstance(key, str) or not re.fullmatch(r"[A-Za-z0-9_]+", key):
            raise base_error("Variables key can contain only letters, digits and '_'.")
        kind = v.get("variable_type", "env_var")
        if kind not in ("env_var", "file"):
            raise ApiError(400, {"error": "variables[variable_type] does not have a valid value"})
        clean.append({"variable_type": kind, "key": key, "value": str(v.get("value", "")), "raw": False})
    keys = [v["key"] for v in clean]
    dupes = sorted({k for k in keys if keys.count(k) > 1})
    if dupes:
        raise base_error(f"Duplicate variable name{'s' if len(dupes) > 1 else ''}: {', '.join(dupes)}")
    return clean


def new_pipeline(project, ref, source, variables, inputs):
    with LOCK:
        STATE["next_pipeline"] += 1
        pid = STATE["next_pipeline"]
        iid = 1 + sum(1 for p in STATE["pipelines"].values() if p["project_id"] == project["id"])
    return {"id": pid, "iid": iid, "project_id": project["id"], "sha": "a" * 40, "ref": ref,
            "status": "created", "source": source, "created_at": now(), "updated_at": now(),
            "started_at": None, "finished_at": None, "variables": variables, "job_ids": [],
            "config": {}, "name": None, "yaml_errors": None, "inputs": inputs or {},
            "global_variables": {}, "stages": [], "user": USER["username"], "scheduler": False}


def create_pipeline(project, body, trigger):
    """POST /pipeline or /trigger/pipeline: GitLab's Ci::CreatePipelineService chain."""
    ref = body.get("ref")
    if not ref:
        raise ApiError(400, {"error": "ref is missing"})
    if ref != "main":
        raise base_error("Reference not found")
    variables = parse_variables(body.get("variables"), trigger)
    inputs = body.get("inputs")
    if inputs is None:
        inputs = {}
    if not isinstance(inputs, dict):
        raise ApiError(400, {"error": "inputs is invalid"})
    if variables and not can_set_pipeline_variables(project):
        raise base_error("Insufficient permissions to set pipeline variables")
    source = "trigger" if trigger else "api"
    if trigger:
        payload = {k: v for k, v in body.items() if k != "token"}
        variables = variables + [{"variable_type": "file", "key": "TRIGGER_PAYLOAD",
                                  "value": json.dumps(payload), "raw": False}]
    p = new_pipeline(project, ref, source, variables, inputs)
    scope = predefined(project, p, source)
    scope.update({str(v["key"]): str(v["value"]) for v in project_variables(project)})
    scope.update({v["key"]: v["value"] for v in variables})
    text = (pathlib.Path(project["dir"]) / ".gitlab-ci.yml").read_text()
    try:
        config = gitlab_config.parse(text, inputs, scope, masked_values(project))
    except ConfigError as e:
        if not trigger:
            raise base_error(*e.messages)
        # The trigger API saves a pipeline that has configuration errors (save_on_errors).
        p["status"], p["yaml_errors"] = "failed", ", ".join(e.messages)
        p["failure_reason"], p["finished_at"] = "config_error", now()
        return register(project, p)
    try:
        seeded = gitlab_config.evaluate(config, scope, project["dir"], source, ref)
    except ConfigError as e:
        refusal = e.messages[0].startswith(("Pipeline filtered out", "Pipeline will not run"))
        if not trigger or refusal:
            raise base_error(*e.messages)
        p["status"], p["yaml_errors"] = "failed", ", ".join(e.messages)
        p["failure_reason"], p["finished_at"] = "config_error", now()
        return register(project, p)
    p["config"], p["name"], p["stages"] = config, seeded.name, seeded.stages
    p["global_variables"] = seeded.global_variables
    jobs = [new_job(seed, p) for seed in seeded.jobs]
    p["job_ids"] = [j["id"] for j in jobs]
    with LOCK:
        for j in jobs:
            STATE["jobs"][j["id"]] = j
    return register(project, p)


def register(project, p):
    with LOCK:
        STATE["pipelines"][p["id"]] = p
        STATE["created"] += 1
        by = STATE["created_by_project"]
        by[project["path"]] = by.get(project["path"], 0) + 1
        if p["job_ids"]:
            start_scheduler(p)
    return p


def new_job(seed, p):
    with LOCK:
        STATE["next_job"] += 1
        jid = STATE["next_job"]
    return {**seed, "id": jid, "status": "created", "created_at": now(), "queued_at": None,
            "started_at": None, "finished_at": None, "scheduled_at": None, "trace": None,
            "pipeline_id": p["id"], "project_id": p["project_id"], "proc": None, "play_vars": [],
            "input_values": {k: v.get("default") for k, v in seed["inputs"].items()},
            "artifacts_files": {}, "artifacts_expire_at": None, "failure_reason": None,
            "user": USER["username"], "cancel_mode": None, "timed_out": False}


# ---------------------------------------------------------------- moving jobs along

def start_scheduler(p):
    with LOCK:
        if p["scheduler"]:
            return
        p["scheduler"] = True
    threading.Thread(target=schedule, args=(p["id"],), daemon=True).start()


def prior_status(j, jobs):
    if j["needs"] is not None:
        names = {n["job"] for n in j["needs"]}
        return composite([d for d in jobs if d["name"] in names], dag=True)
    return composite([d for d in jobs if d["stage_idx"] < j["stage_idx"]])


def process(j, jobs):
    """Ci::ProcessBuildService: what a created job becomes, given the jobs before it."""
    prior = prior_status(j, jobs) or "success"
    dag = j["needs"] is not None
    valid = {"on_success": ["success"] if dag else ["success", "skipped"],
             "manual": ["success"] if dag else ["success", "skipped"],
             "delayed": ["success"] if dag else ["success", "skipped"],
             "on_failure": ["failed"], "always": ["success", "failed", "skipped"]}[j["when"]]
    if prior in valid:
        if j["when"] == "manual":
            j["status"] = "manual"
        elif j["when"] == "delayed":
            j["status"] = "scheduled"
            j["scheduled_at"] = now() + datetime.timedelta(seconds=gitlab_config.duration(j["start_in"]) or 0)
        else:
            j["status"] = "pending"
            j["queued_at"] = time.time()
    elif prior in COMPLETED:
        j["status"] = "skipped"
        j["finished_at"] = now()


def schedule(pid):
    """Moves one pipeline's jobs along until nothing more can happen by itself."""
    while True:
        with LOCK:
            p = STATE["pipelines"][pid]
            jobs = pipeline_jobs(p)
            for j in jobs:
                if j["status"] == "created":
                    process(j, jobs)
                elif j["status"] == "scheduled" and j["scheduled_at"] <= now():
                    j["status"], j["queued_at"] = "pending", time.time()
                elif j["status"] == "pending" and time.time() - j["queued_at"] >= ARGS.pending_seconds:
                    assign_runner(j, p)
                elif j["status"] == "waiting_for_resource":
                    assign_runner(j, p)
            touch(p)
            busy = any(j["status"] in ("created", "pending", "waiting_for_resource", "preparing",
                                       "running", "scheduled", "canceling") for j in jobs)
            if not busy:
                p["scheduler"] = False
                return
        time.sleep(0.05)


def assign_runner(j, p):
    group = j["resource_group"]
    if group:
        key = (p["project_id"], group)
        holder = STATE["resource_groups"].get(key)
        if holder not in (None, j["id"]) and STATE["jobs"][holder]["status"] not in COMPLETED:
            j["status"] = "waiting_for_resource"
            return
        STATE["resource_groups"][key] = j["id"]
    j["status"] = "preparing"
    threading.Thread(target=run_job, args=(j["id"],), daemon=True).start()


# ---------------------------------------------------------------- the runner

PREDEFINED_IGNORED = ("CI_PIPELINE_ID", "CI_PIPELINE_IID", "CI_PIPELINE_SOURCE", "CI_JOB_ID",
                      "CI_PROJECT_ID", "CI_PROJECT_PATH", "CI_COMMIT_SHA", "GITLAB_USER_LOGIN",
                      "CI_SERVER_URL", "CI_PIPELINE_NAME", "CI_COMMIT_REF_NAME", "CI_COMMIT_BRANCH",
                      "CI_DEFAULT_BRANCH", "CI_PROJECT_NAME", "CI_PROJECT_NAMESPACE",
                      "CI_COMMIT_REF_SLUG", "CI_COMMIT_TITLE", "CI_JOB_NAME")
JOB_INPUT = re.compile(r"\$\{\{\s*job\.inputs\.([A-Za-z0-9_-]+)\s*\}\}")


def job_definition(p, j):
    """The configuration gitlab-ci-local runs for one job: GitLab has already decided which jobs
    exist and when they run, so the job keeps only what a runner executes."""
    config = {k: v for k, v in p["config"].items() if k not in ("workflow", "include", "spec")}
    for name in list(config):
        if name.startswith(".") or name in gitlab_config.GLOBAL_KEYS:
            continue
        if name != j["name"]:
            del config[name]
    spec = {k: v for k, v in j["spec"].items() if k not in (
        "rules", "only", "except", "when", "needs", "start_in", "timeout", "resource_group",
        "inputs", "extends", "dependencies", "retry", "interruptible", "environment", "inherit")}
    spec["variables"] = {k: ({"value": v["value"], "expand": False} if not v["expand"] else v["value"])
                         for k, v in j["variables"].items()}
    config["variables"] = {k: ({"value": v["value"], "expand": False} if not v["expand"] else v["value"])
                           for k, v in j["visible_globals"].items()}

    def inputs_in(node):
        if isinstance(node, str):
            return JOB_INPUT.sub(lambda m: _job_input_text(j, m.group(1)), node)
        if isinstance(node, list):
            return [inputs_in(x) for x in node]
        if isinstance(node, dict):
            return {k: inputs_in(v) for k, v in node.items()}
        return node
    for key in ("script", "before_script", "after_script", "artifacts"):
        if key in spec:
            spec[key] = inputs_in(spec[key])
    config[j["name"]] = spec
    for key in [k for k in config if k.startswith(".")]:
        del config[key]
    return config


def _job_input_text(j, name):
    v = j["input_values"].get(name, "")
    if isinstance(v, str):
        return v
    return json.dumps(v)


def job_workspace(j, p, project):
    """A fresh checkout of the project for one job, as a runner makes one: the project files
    (a git repository, which gitlab-ci-local needs), the job's definition and the artifacts of
    the jobs it depends on."""
    ws = tempfile.mkdtemp(prefix=f"fake-gitlab-job-{j['id']}-")
    shutil.copytree(project["dir"], ws, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns(".fake-project.yml"))
    pathlib.Path(ws, ".gitlab-ci.yml").write_text(yaml.safe_dump(job_definition(p, j), sort_keys=False,
                                                                 allow_unicode=True))
    with LOCK:
        jobs = pipeline_jobs(p)
        if j["needs"] is not None:
            wanted = {n["job"] for n in j["needs"] if n["artifacts"]}
            deps = [d for d in jobs if d["name"] in wanted]
        else:
            deps = [d for d in jobs if d["stage_idx"] < j["stage_idx"]]
        artifacts = [(rel, data) for d in deps if not expired(d) for rel, data in d["artifacts_files"].items()]
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


def job_variables(j, p, project):
    """The variables a runner gets for the job, lowest precedence first (predefined, project,
    pipeline, then the play's)."""
    variables = predefined(project, p, p["source"])
    variables.update({"CI_JOB_ID": str(j["id"]), "CI_JOB_NAME": j["name"],
                      "CI_JOB_STAGE": j["stage"], "CI_PIPELINE_NAME": p["name"] or ""})
    variables.update({str(v["key"]): str(v["value"]) for v in project_variables(project)})
    variables.update({v["key"]: v["value"] for v in p["variables"] if v["variable_type"] == "env_var"})
    variables.update({v["key"]: v["value"] for v in j["play_vars"]})
    return variables


def job_timeout(j, project):
    t = gitlab_config.duration(j["timeout"]) if j["timeout"] else None
    return t or int(project["settings"]["build_timeout"])


def run_job(jid):
    with LOCK:
        j = STATE["jobs"][jid]
        p = STATE["pipelines"][j["pipeline_id"]]
        project = STATE["projects"][p["project_id"]]
        if j["status"] != "preparing":
            return
        variables = job_variables(j, p, project)
        j["trace"] = Trace(ARGS.trace_limit, masked_values(project))
    ws = job_workspace(j, p, project)
    with LOCK:
        if j["status"] != "preparing":  # cancelled while its checkout was made
            shutil.rmtree(ws, ignore_errors=True)
            return
        j["status"] = "running"
        j["started_at"] = now()
        touch(p)
    trace = j["trace"]
    trace.header()
    trace.section_start("prepare_executor", 'Preparing the "shell" executor')
    trace.write("Using Shell (bash) executor...\n")
    trace.section_end("prepare_executor")
    trace.section_start("step_script", 'Executing "step_script" stage of the job script')
    cmd = ARGS.gitlab_ci_local + [
        "--home", os.path.join(ws, ".gcl-home"), "--force-shell-executor",
        "--no-artifacts-to-source", "--no-json-schema-validation", "--max-job-name-padding", "0",
        "--no-color", "--ignore-predefined-vars", ",".join(PREDEFINED_IGNORED),
    ]
    for k, v in variables.items():
        cmd += ["--variable", f"{k}={v}"]
    cmd.append(j["name"])
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "TMPDIR")}
    env["HOME"] = ws
    # gitlab-ci-local (node) writes its output asynchronously to a pipe and exits before a
    # pipe has taken all of it: the end of a long log would be lost. Into a file, node writes
    # synchronously; the fake follows the file as it grows.
    out_dir = tempfile.mkdtemp(prefix=f"fake-gitlab-out-{j['id']}-")
    out_path = os.path.join(out_dir, "output")
    with open(out_path, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=ws, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    with LOCK:
        j["proc"] = proc
        j["ws"] = ws
    limit = job_timeout(j, project)
    timer = threading.Timer(limit, time_out, args=(jid,))
    timer.daemon = True
    timer.start()
    # gitlab-ci-local prints each script line as "<job> $ line" and its output as
    # "<job> > text": the trace is those, as a runner's trace shows them.
    prefix_out, prefix_cmd = f"{j['name']} > ", f"{j['name']} $ "
    finished = re.compile(re.escape(j["name"]) + r" finished in .*(?:FAIL|WARN) (\d+)")
    script_code, runner_log = None, []

    def take(raw):
        nonlocal script_code
        line = raw.decode("utf-8", "replace")
        if line.startswith(prefix_out):
            trace.write(line[len(prefix_out):])
        elif line.startswith(prefix_cmd):
            trace.command(line[len(prefix_cmd):].rstrip("\n"))
        elif m := finished.search(line[:500]):
            script_code = int(m.group(1))
        else:
            runner_log.append(line)  # gitlab-ci-local's own chatter: kept for a failure

    pending = b""
    with open(out_path, "rb") as reader:
        while True:
            chunk = reader.read(1 << 16)
            if not chunk:
                if proc.poll() is not None:
                    chunk = reader.read()
                    if not chunk:
                        break
                else:
                    time.sleep(0.05)
                    continue
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for raw in lines:
                take(raw + b"\n")
    if pending:
        take(pending)
    shutil.rmtree(out_dir, ignore_errors=True)
    code = proc.wait()
    timer.cancel()
    if script_code is not None:
        code = script_code
    try:
        finish(j, p, project, ws, code, runner_log, variables, script_code is not None)
    finally:
        shutil.rmtree(ws, ignore_errors=True)
        with LOCK:
            if j["resource_group"]:
                STATE["resource_groups"].pop((p["project_id"], j["resource_group"]), None)


def finish(j, p, project, ws, code, runner_log, variables, script_seen):
    trace = j["trace"]
    with LOCK:
        j["proc"] = None
        mode = j["cancel_mode"]
    if mode is not None or j["timed_out"]:
        trace.section_end("step_script")
        if j["spec"].get("after_script") and (mode == "canceling" or j["timed_out"]):
            run_after_script(j, ws, variables)
        with LOCK:
            if j["timed_out"] and mode is None:
                trace.failed(f"execution took longer than {go_duration(job_timeout(j, project))} seconds")
                j["status"], j["failure_reason"] = "failed", "job_execution_timeout"
            else:
                j["status"] = "canceled"
            j["finished_at"] = now()
            touch(p)
        return
    trace.section_end("step_script")
    ok = code == 0
    when = (j["artifacts"] or {}).get("when", "on_success")
    collected = {}
    if when == "always" or (when == "on_success") == ok:
        root = pathlib.Path(ws, ".gitlab-ci-local", "artifacts", j["name"])
        for f in root.rglob("*"):
            if f.is_file():
                collected[str(f.relative_to(root))] = f.read_bytes()
    with LOCK:
        if collected:
            j["artifacts_files"].update(collected)
            expire = gitlab_config.duration((j["artifacts"] or {}).get("expire_in", "30 days"))
            j["artifacts_expire_at"] = now() + datetime.timedelta(seconds=expire) if expire else None
            trace.section_start("upload_artifacts_on_success" if ok else "upload_artifacts_on_failure",
                                "Uploading artifacts for successful job" if ok else "Uploading artifacts for failed job")
            trace.write(f"Uploading artifacts...\n{len(collected)} files uploaded\n")
            trace.section_end("upload_artifacts_on_success" if ok else "upload_artifacts_on_failure")
        if ok:
            trace.succeeded()
            j["status"] = "success"
        else:
            if not script_seen:  # the runner itself failed: say why, as a runner would
                sys.stderr.write(f"gitlab-ci-local failed on job {j['id']}:\n" + "".join(runner_log[-20:]))
                trace.write("".join(runner_log[-5:]))
            trace.failed(f"exit code {code}")
            j["status"] = "failed"
            j["failure_reason"] = "script_failure"
            if code in j["exit_codes"]:
                j["allow_failure"] = True
        j["finished_at"] = now()
        touch(p)


def run_after_script(j, ws, variables):
    """The runner's after_script after a cancel or a timeout: a new shell in the job's
    checkout with the job's variables, for at most five minutes."""
    trace = j["trace"]
    trace.section_start("after_script", "Running after_script")
    trace.write("Running after script...\n")
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "TMPDIR")}
    env.update({k: v for k, v in variables.items()})
    for k, v in j["variables"].items():
        env.setdefault(k, v["value"])
    env["HOME"] = ws
    env["CI_JOB_STATUS"] = "canceled" if j["cancel_mode"] else "failed"
    deadline = time.time() + ARGS.after_script_timeout
    lines = gitlab_config._flatten(j["spec"].get("after_script"), "after_script", j["name"])
    for line in lines:
        trace.command(line)
        left = deadline - time.time()
        if left <= 0:
            break
        proc = subprocess.Popen(["bash", "-c", line], cwd=ws, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True)
        with LOCK:
            j["after_proc"] = proc
        try:
            out, _ = proc.communicate(timeout=left)
            trace.write(out.decode("utf-8", "replace"))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            trace.write("WARNING: after_script failed, but job will continue unaffected: execution took longer than "
                        f"{go_duration(ARGS.after_script_timeout)} seconds\n")
            break
    trace.section_end("after_script")


def time_out(jid):
    with LOCK:
        j = STATE["jobs"][jid]
        if j["status"] != "running":
            return
        j["timed_out"] = True
        kill(j)


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


def cancel_job(j):
    """Ci::Build#cancel: a running job with an after_script goes `canceling` while the runner
    runs it; anything else not finished is `canceled` at once."""
    if j["status"] == "running":
        j["cancel_mode"] = "canceling" if j["spec"].get("after_script") else "canceled"
        j["status"] = j["cancel_mode"]
        kill(j)
    elif j["status"] == "preparing":
        j["cancel_mode"] = "canceled"
        j["status"] = "canceled"
        j["finished_at"] = now()
    elif j["status"] in CANCELABLE:
        j["status"] = "canceled"
        j["finished_at"] = now()


def expired(j):
    at = j["artifacts_expire_at"]
    if at is None or at > now():
        return False
    p = STATE["pipelines"][j["pipeline_id"]]
    project = STATE["projects"][p["project_id"]]
    if project["settings"]["keep_latest_artifact"]:
        newest = max((q["id"] for q in STATE["pipelines"].values()
                      if q["project_id"] == p["project_id"] and q["ref"] == p["ref"] and q["status"] == "success"),
                     default=None)
        if newest == p["id"]:
            return False
    return True


# ---------------------------------------------------------------- JSON shapes

def user_json():
    return {**USER, "avatar_url": None, "web_url": f"{ARGS.public_url}/{USER['username']}"}


def pipeline_json(p, full=True):
    project = STATE["projects"][p["project_id"]]
    base = {
        "id": p["id"], "iid": p["iid"], "project_id": p["project_id"], "sha": p["sha"],
        "ref": p["ref"], "status": p["status"], "source": p["source"],
        "created_at": iso(p["created_at"]), "updated_at": iso(p["updated_at"]),
        "web_url": f"{ARGS.public_url}/{project['path']}/-/pipelines/{p['id']}", "name": p["name"],
    }
    if full:
        dur = None
        if p["started_at"] and p["finished_at"]:
            dur = int((p["finished_at"] - p["started_at"]).total_seconds())
        base.update({
            "before_sha": "0" * 40, "tag": False, "yaml_errors": p["yaml_errors"], "user": user_json(),
            "started_at": iso(p["started_at"]), "finished_at": iso(p["finished_at"]),
            "committed_at": None, "duration": dur, "queued_duration": 0, "coverage": None,
            "detailed_status": {"icon": f"status_{p['status']}", "text": p["status"],
                                "label": p["status"], "group": p["status"], "tooltip": p["status"],
                                "has_details": True,
                                "details_path": f"/{project['path']}/-/pipelines/{p['id']}"},
        })
    return base


def job_json(j):
    p = STATE["pipelines"][j["pipeline_id"]]
    project = STATE["projects"][j["project_id"]]
    dur = None
    if j["started_at"]:
        dur = ((j["finished_at"] or now()) - j["started_at"]).total_seconds()
    files = j["artifacts_files"] if not expired(j) else {}
    trace_size = j["trace"].size() if j["trace"] else 0
    artifacts = []
    if files:
        artifacts.append({"file_type": "archive", "size": sum(len(v) for v in files.values()),
                          "filename": "artifacts.zip", "file_format": "zip"})
    if trace_size:
        artifacts.append({"file_type": "trace", "size": trace_size, "filename": "job.log", "file_format": None})
    return {
        "id": j["id"], "name": j["name"], "stage": j["stage"], "status": j["status"],
        "ref": p["ref"], "tag": False, "coverage": None, "allow_failure": j["allow_failure"],
        "created_at": iso(j["created_at"]), "started_at": iso(j["started_at"]),
        "finished_at": iso(j["finished_at"]), "erased_at": None, "duration": dur,
        "queued_duration": 0, "user": user_json(),
        "commit": {"id": p["sha"], "short_id": p["sha"][:8], "title": "fake commit"},
        "pipeline": pipeline_json(p, full=False),
        "web_url": f"{ARGS.public_url}/{project['path']}/-/jobs/{j['id']}",
        "artifacts": artifacts,
        "artifacts_expire_at": iso(j["artifacts_expire_at"]) if j["artifacts_files"] else None,
        "tag_list": [], "runner": None, "failure_reason": j["failure_reason"], "archived": False,
        "when": j["when"],
    }


# ---------------------------------------------------------------- HTTP

class Handled(Exception):
    """An answer already sent (a 429 or an injected fault)."""


READ_KINDS = (
    (re.compile(r"^pipelines$"), "pipelines"),
    (re.compile(r"^pipelines/\d+$"), "pipeline"),
    (re.compile(r"^pipelines/\d+/jobs$"), "jobs"),
    (re.compile(r"^pipelines/\d+/variables$"), "variables"),
    (re.compile(r"^jobs/\d+$"), "job"),
    (re.compile(r"^jobs/\d+/trace$"), "trace"),
    (re.compile(r"^jobs/\d+/artifacts/.+$"), "artifacts"),
)


def request_kind(method, rest):
    tail = "/".join(rest)
    for rx, kind in READ_KINDS:
        if rx.match(tail):
            return kind if method == "GET" else f"{method} {kind}"
    return f"{method} {tail.split('/')[0] if tail else ''}"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # one line per request, without the query
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

    def do_PUT(self):
        self.handle_any("PUT")

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
                return self.trigger(project, self.body())
            self.authenticate()
            if parts == ["user"] and method == "GET":
                return self.send(200, user_json())
            if len(parts) < 2 or parts[0] != "projects":
                raise not_found("404 Not Found")
            project = find_project(parts[1])
            rest = parts[2:]
            self.count(project, request_kind(method, rest))
            if method == "GET":
                self.inject_fault(project, request_kind(method, rest))
            return self.route(method, project, rest, query)
        except Handled:
            pass
        except ApiError as e:
            self.send(e.status, e.body)
        except (BrokenPipeError, ConnectionResetError):
            pass
        except Exception as e:  # a bug in the fake
            import traceback
            traceback.print_exc()
            print(f"500 on {self.path}: {e!r}", flush=True)
            self.send(500, {"message": "500 Internal Server Error"})

    def count(self, project, kind):
        with LOCK:
            counts = STATE["requests"].setdefault(project["path"], {})
            counts[kind] = counts.get(kind, 0) + 1

    def inject_fault(self, project, kind):
        with LOCK:
            fault = STATE["faults"].get(project["path"])
            if not fault or kind not in fault["reads"]:
                return
            if fault["skip"] > 0:
                fault["skip"] -= 1
                return
            del STATE["faults"][project["path"]]
            what, stall = fault["fault"], fault["stall_seconds"]
        if what == "reset":
            self.close_connection = True
            self.connection.shutdown(2)
            raise Handled()
        if what == "stall":
            time.sleep(stall)
            self.close_connection = True
            self.connection.shutdown(2)
            raise Handled()
        status = int(what)
        if status == 429:
            self.throttled(1)
        body = {500: "500 Internal Server Error", 502: "502 Bad Gateway", 503: "503 Service Unavailable"}
        self.send(status, {"message": body.get(status, str(status))})
        raise Handled()

    def route(self, method, project, rest, query):
        with LOCK:
            if not rest:
                if method == "GET":
                    return self.send(200, project_json(project))
                if method == "PUT":
                    return self.edit_project(project, self.body())
            if method == "POST" and rest == ["pipeline"]:
                body = self.body()
                p = create_pipeline(project, {**query, **body}, trigger=False)
                return self.created(project, p)
            if method == "GET" and rest == ["pipelines"]:
                return self.list_pipelines(project, query)
            if rest[0] == "pipelines" and len(rest) >= 2:
                p = find_pipeline(project, rest[1])
                if method == "GET" and len(rest) == 2:
                    return self.send(200, pipeline_json(p))
                if method == "GET" and rest[2:] == ["variables"]:
                    return self.send(200, [{k: v[k] for k in ("variable_type", "key", "value")} for v in p["variables"]])
                if method == "GET" and rest[2:] == ["jobs"]:
                    scope = query.get("scope") or []
                    scope = scope if isinstance(scope, list) else [scope]
                    jobs = [j for j in pipeline_jobs(p) if not scope or j["status"] in scope]
                    jobs.sort(key=lambda j: -j["id"])
                    return self.paged([job_json(j) for j in jobs], query)
                if method == "POST" and rest[2:] == ["cancel"]:
                    for j in pipeline_jobs(p):
                        cancel_job(j)
                    touch(p)
                    start_scheduler(p)
                    return self.send(200, pipeline_json(p))
                if method == "PUT" and rest[2:] == ["metadata"]:
                    name = self.body().get("name")
                    if not isinstance(name, str) or not name:
                        raise ApiError(400, {"error": "name is missing"})
                    if len(name) > 255:
                        raise ApiError(400, {"message": "400 Bad request - Failed to update pipeline - Name is too long (maximum is 255 characters)"})
                    p["name"] = name
                    p["updated_at"] = now()
                    return self.send(200, pipeline_json(p))
            if rest[0] == "jobs" and len(rest) >= 2:
                j = find_job(project, rest[1])
                if method == "GET" and len(rest) == 2:
                    return self.send(200, job_json(j))
                if method == "GET" and rest[2:] == ["trace"]:
                    data = j["trace"].bytes() if j["trace"] else b""
                    return self.send(200, data, content_type="text/plain")
                if method == "GET" and len(rest) >= 4 and rest[2] == "artifacts":
                    name = "/".join(rest[3:])
                    if expired(j) or name not in j["artifacts_files"]:
                        raise not_found("404 Not Found")
                    return self.send(200, j["artifacts_files"][name], content_type="application/octet-stream")
                if method == "POST" and rest[2:] == ["play"]:
                    return self.play(project, j, self.body())
                if method == "POST" and rest[2:] == ["cancel"]:
                    cancel_job(j)
                    touch(STATE["pipelines"][j["pipeline_id"]])
                    return self.send(201, job_json(j))
        raise not_found("404 Not Found")

    def created(self, project, p):
        with LOCK:
            if STATE["lose_next_create"].get(project["path"], 0) > 0:
                STATE["lose_next_create"][project["path"]] -= 1
                self.close_connection = True
                self.connection.shutdown(2)
                return None
        return self.send(201, pipeline_json(p))

    def trigger(self, project, body):
        token = body.get("token") or ""
        if not ARGS.trigger_token or token != ARGS.trigger_token:
            raise ApiError(404, {"message": "404 Not Found"})
        self.count(project, "POST trigger")
        with LOCK:
            p = create_pipeline(project, body, trigger=True)
        return self.created(project, p)

    def edit_project(self, project, body):
        s = project["settings"]
        role = ROLES.get(s["token_role"], 0)
        if role < ROLES["maintainer"]:
            raise ApiError(403, {"message": "403 Forbidden"})
        if "ci_pipeline_variables_minimum_override_role" in body:
            value = body["ci_pipeline_variables_minimum_override_role"]
            if value not in OVERRIDE_ROLES:
                raise ApiError(400, {"error": "ci_pipeline_variables_minimum_override_role does not have a valid value"})
            if (value in ("owner", "no_one_allowed") or s["ci_pipeline_variables_minimum_override_role"]
                    in ("owner", "no_one_allowed")) and role < ROLES["owner"]:
                raise ApiError(400, {"message": {"ci_pipeline_variables_minimum_override_role": [
                    "Changing ci_pipeline_variables_minimum_override_role to or from owner or no_one_allowed "
                    "is only allowed for the Owner role"]}})
            s["ci_pipeline_variables_minimum_override_role"] = value
        if "restrict_user_defined_variables" in body:
            s["restrict_user_defined_variables"] = body["restrict_user_defined_variables"] in (True, "true")
        return self.send(200, project_json(project))

    def play(self, project, j, body):
        if j["status"] != "manual":
            raise ApiError(400, {"message": "400 Bad request - Unplayable Job"})
        attrs = body.get("job_variables_attributes") or []
        if isinstance(attrs, dict):
            attrs = [attrs[k] for k in sorted(attrs)]
        clean = []
        for a in attrs:
            if not isinstance(a, dict) or not a.get("key"):
                raise ApiError(400, {"error": "job_variables_attributes[key] is missing"})
            if "value" not in a:
                raise ApiError(400, {"error": "job_variables_attributes[value] is missing"})
            clean.append({"key": str(a["key"]), "value": str(a["value"])})
        if clean and not can_set_pipeline_variables(project):
            raise ApiError(403, {"message": "403 Forbidden"})
        given = body.get("job_inputs") or {}
        if not isinstance(given, dict):
            raise ApiError(400, {"error": "job_inputs is invalid"})
        unknown = [k for k in given if k not in j["inputs"]]
        if unknown:
            raise ApiError(400, {"message": f"400 Bad request - Unknown job inputs: {', '.join(unknown)}"})
        values = dict(j["input_values"])
        for k, v in given.items():
            try:
                values[k] = gitlab_config._check_input(k, {**j["inputs"][k]}, v)
            except ConfigError as e:
                raise ApiError(400, {"message": f"400 Bad request - {'; '.join(e.messages)}"})
        j["input_values"] = values
        j["play_vars"] = clean
        j["status"] = "pending"
        j["queued_at"] = time.time()
        j["user"] = USER["username"]
        p = STATE["pipelines"][j["pipeline_id"]]
        touch(p)
        start_scheduler(p)
        return self.send(200, job_json(j))

    def list_pipelines(self, project, query):
        ps = [p for p in STATE["pipelines"].values() if p["project_id"] == project["id"]]
        for field in ("ref", "status", "source", "sha"):
            if query.get(field):
                ps = [p for p in ps if p[field] == query[field]]
        if query.get("name"):
            ps = [p for p in ps if p["name"] == query["name"]]
        if query.get("username") and query["username"] != USER["username"]:
            ps = []
        if "yaml_errors" in query:
            want = str(query["yaml_errors"]).lower() in ("true", "1")
            ps = [p for p in ps if bool(p["yaml_errors"]) == want]
        scope = query.get("scope")
        if scope:
            groups = {"running": ("running",), "pending": ("pending",),
                      "finished": ("success", "failed", "canceled")}
            if scope in groups:
                ps = [p for p in ps if p["status"] in groups[scope]]
            elif scope == "branches":
                newest = {}
                for p in ps:
                    newest[p["ref"]] = max(newest.get(p["ref"], 0), p["id"])
                ps = [p for p in ps if newest.get(p["ref"]) == p["id"]]
            elif scope == "tags":
                ps = []
            else:
                raise ApiError(400, {"error": "scope does not have a valid value"})
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
            if name in ("lose_next_create", "throttle_next", "fault_next") and project not in {
                    p["path"] for p in STATE["projects"].values()}:
                raise ApiError(400, {"error": f"{name} needs the project it applies to"})
            if name == "lose_next_create":
                STATE["lose_next_create"][project] = STATE["lose_next_create"].get(project, 0) + 1
            elif name == "throttle_next":
                STATE["throttle"][project] = {"count": int(body.get("count", 1)),
                                              "retry_after": int(body.get("retry_after", 1))}
            elif name == "fault_next":
                if body.get("disarm"):
                    STATE["faults"].pop(project, None)
                else:
                    fault = str(body.get("fault", 503))
                    if fault not in ("429", "500", "502", "503", "reset", "stall"):
                        raise ApiError(400, {"error": f"unknown fault {fault}"})
                    STATE["faults"][project] = {
                        "skip": int(body.get("skip", 0)), "fault": fault,
                        "reads": list(body.get("reads") or ["trace", "artifacts", "jobs", "job", "pipeline",
                                                            "pipelines", "variables"]),
                        "stall_seconds": float(body.get("stall_seconds", 10))}
            elif name == "expire_artifacts":
                j = STATE["jobs"].get(int(body.get("job", 0)))
                if not j:
                    raise not_found()
                j["artifacts_expire_at"] = now() - datetime.timedelta(seconds=1)
            elif name != "counts":
                raise not_found()
            return self.send(200, {"pipelines_created": STATE["created"],
                                   "project_pipelines_created": STATE["created_by_project"].get(project, 0),
                                   "project_requests": STATE["requests"].get(project, {}),
                                   "fault_armed": project in STATE["faults"]})


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
    ap.add_argument("--pipeline-variables-role", default="no_one_allowed", choices=OVERRIDE_ROLES,
                    help="ci_pipeline_variables_minimum_override_role of projects without a settings file")
    ap.add_argument("--trace-limit", type=int, default=4 * 1024 * 1024,
                    help="the runner's output_limit, in bytes (gitlab-runner's default: 4 MiB)")
    ap.add_argument("--pending-seconds", type=float, default=0.3,
                    help="how long a job stays pending before the fake's runner picks it up")
    ap.add_argument("--after-script-timeout", type=float, default=AFTER_SCRIPT_TIMEOUT)
    ap.add_argument("--gitlab-ci-local", required=True, nargs="+",
                    help="the command that runs gitlab-ci-local (e.g. NODE .../gitlab-ci-local/dist/index.js)")
    ARGS = ap.parse_args()
    ARGS.public_url = f"http://127.0.0.1:{ARGS.port}"
    root = pathlib.Path(ARGS.projects)
    found = sorted(str(f.parent.relative_to(root)) for f in root.glob("*/*/.gitlab-ci.yml"))
    for i, path in enumerate(found, 1):
        STATE["projects"][i] = {"id": i, "path": path, "dir": str(root / path),
                                "settings": load_settings(root / path)}
    server = ThreadingHTTPServer(("127.0.0.1", ARGS.port), Handler)
    server.daemon_threads = True
    print(f"fake GitLab on {ARGS.public_url} with projects {found}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
