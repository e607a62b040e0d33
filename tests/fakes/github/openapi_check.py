#!/usr/bin/env python3
"""Holds the GitHub fake to GitHub's published OpenAPI description: drives a running fake
through every operation flowgate uses and checks each answer against the description's
schema for that operation and status (required fields, types, enums, nullability).

    npm install @octokit/openapi          # GitHub's description, generated/api.github.com.json
    fake_github.py --port 0 --token T ... # a fake, as scripts/test starts it
    openapi_check.py --spec node_modules/@octokit/openapi/generated/api.github.com.json \
                     --fake http://127.0.0.1:PORT --token T

Prints one line per answer checked and exits non-zero when any answer breaks its schema.
"""

import argparse
import json
import sys
import time
import urllib.error
import urllib.request

SPEC = {}


def resolve(schema):
    while isinstance(schema, dict) and "$ref" in schema:
        name = schema["$ref"].split("/")
        node = SPEC
        for part in name[1:]:
            node = node[part]
        schema = node
    return schema


def problems(value, schema, path="$"):
    """What `value` breaks of `schema` (an OpenAPI 3.0 schema), as messages."""
    schema = resolve(schema)
    if not isinstance(schema, dict) or not schema:
        return []
    if "allOf" in schema:
        return [p for s in schema["allOf"] for p in problems(value, s, path)]
    for key in ("anyOf", "oneOf"):
        if key in schema:
            options = [problems(value, s, path) for s in schema[key]]
            if any(not o for o in options):
                return []
            return [f"{path}: matches none of {key}: " + "; ".join(o[0] for o in options if o)]
    if value is None:
        nullable = schema.get("nullable") or schema.get("type") == "null" or \
            (isinstance(schema.get("type"), list) and "null" in schema["type"])
        return [] if nullable else [f"{path}: null where the description says {schema.get('type')}"]
    kinds = schema.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds] if kinds else []
    checks = {"object": lambda v: isinstance(v, dict), "array": lambda v: isinstance(v, list),
              "string": lambda v: isinstance(v, str), "boolean": lambda v: isinstance(v, bool),
              "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
              "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
              "null": lambda v: v is None}
    if kinds and not any(checks.get(k, lambda v: True)(value) for k in kinds):
        return [f"{path}: {type(value).__name__} where the description says {'/'.join(kinds)}"]
    out = []
    if "enum" in schema and value not in schema["enum"] and not (value is None and None in schema["enum"]):
        out.append(f"{path}: {value!r} is not one of {schema['enum']}")
    if isinstance(value, dict):
        for name in schema.get("required", []):
            if name not in value:
                out.append(f"{path}: lacks the required field {name!r}")
        for name, sub in (schema.get("properties") or {}).items():
            if name in value:
                out += problems(value[name], sub, f"{path}.{name}")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value[:5]):
            out += problems(item, schema["items"], f"{path}[{i}]")
    return out


def operation(method, template):
    return SPEC["paths"][template][method.lower()]


def call(fake, token, method, path, body=None):
    req = urllib.request.Request(fake + path, method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Authorization": f"Bearer {token}",
                                          "Accept": "application/vnd.github+json",
                                          "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req) as r:
            data = r.read()
            return r.status, (json.loads(data) if data else None)
    except urllib.error.HTTPError as e:
        data = e.read()
        return e.code, (json.loads(data) if data else None)


FAILED = []


def check(fake, token, method, template, path, body=None, want=None):
    status, answer = call(fake, token, method, path, body)
    responses = operation(method, template)["responses"]
    spec = responses.get(str(status))
    if spec is None and status >= 400:
        # GitHub describes few error answers per operation; every one is a basic-error body.
        spec = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/basic-error"}}}}
    if spec is None:
        FAILED.append(f"{method} {template}: status {status} is not in the description")
        print(f"FAIL {method} {path} -> {status} (not described)")
        return status, answer
    schema = (spec.get("content") or {}).get("application/json", {}).get("schema")
    found = problems(answer, schema) if schema is not None else []
    if want is not None and status != want:
        found.append(f"status {status}, wanted {want}")
    print(("ok  " if not found else "FAIL") + f" {method} {path} -> {status}")
    for p in found:
        print(f"     {p}")
        FAILED.append(f"{method} {template}: {p}")
    return status, answer


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--spec", required=True)
    p.add_argument("--fake", required=True)
    p.add_argument("--token", required=True)
    p.add_argument("--repo", default=f"acme/openapi-{int(time.time())}")
    a = p.parse_args()
    with open(a.spec) as f:
        SPEC.update(json.load(f))
    fake, token = a.fake.rstrip("/"), a.token
    R = f"/repos/{a.repo}"
    W = "/repos/{owner}/{repo}/actions/workflows/{workflow_id}"
    RUN = "/repos/{owner}/{repo}/actions/runs/{run_id}"

    check(fake, token, "GET", "/repos/{owner}/{repo}", R, want=200)
    check(fake, token, "POST", W + "/dispatches", f"{R}/actions/workflows/nodispatch.yml/dispatches",
          {"ref": "main"}, want=422)
    check(fake, token, "POST", W + "/dispatches", f"{R}/actions/workflows/greet.yml/dispatches",
          {"ref": "nope", "inputs": {"flowgate_call": "x", "name": "x"}}, want=422)
    check(fake, token, "POST", W + "/dispatches", f"{R}/actions/workflows/missing.yml/dispatches",
          {"ref": "main"}, want=404)
    check(fake, token + "-readonly", "POST", W + "/dispatches",
          f"{R}/actions/workflows/greet.yml/dispatches", {"ref": "main", "inputs": {"name": "x"}}, want=403)
    _, d = check(fake, token, "POST", W + "/dispatches", f"{R}/actions/workflows/greet.yml/dispatches",
                 {"ref": "main", "inputs": {"flowgate_call": "fg-openapi", "name": "Oa"},
                  "return_run_details": True}, want=200)
    run = d["workflow_run_id"]
    _, d = check(fake, token, "POST", W + "/dispatches", f"{R}/actions/workflows/deploy.yml/dispatches",
                 {"ref": "main", "inputs": {"flowgate_call": "fg-openapi-2", "target": "approvals"},
                  "return_run_details": True}, want=200)
    held = d["workflow_run_id"]
    check(fake, token, "POST", W + "/dispatches", f"{R}/actions/workflows/deploy.yml/dispatches",
          {"ref": "main", "inputs": {"flowgate_call": "fg-openapi-3", "target": "production"}}, want=204)
    for _ in range(200):
        _, r = call(fake, token, "GET", f"{R}/actions/runs/{run}")
        _, h = call(fake, token, "GET", f"{R}/actions/runs/{held}")
        if r["status"] == "completed" and h["status"] == "waiting":
            break
        time.sleep(0.2)
    check(fake, token, "GET", RUN, f"{R}/actions/runs/{run}", want=200)
    check(fake, token, "GET", RUN, f"{R}/actions/runs/999", want=404)
    check(fake, token, "GET", W + "/runs", f"{R}/actions/workflows/greet.yml/runs?event=workflow_dispatch"
          f"&created=%3E%3D2020-01-01T00%3A00%3A00Z&per_page=100", want=200)
    _, jobs = check(fake, token, "GET", RUN + "/jobs", f"{R}/actions/runs/{run}/jobs?filter=latest", want=200)
    check(fake, token, "GET", RUN + "/artifacts", f"{R}/actions/runs/{run}/artifacts?name=result", want=200)
    check(fake, token, "GET", RUN + "/approvals", f"{R}/actions/runs/{run}/approvals", want=200)
    check(fake, token, "GET", RUN + "/pending_deployments", f"{R}/actions/runs/{held}/pending_deployments",
          want=200)
    _, pending = call(fake, token, "GET", f"{R}/actions/runs/{held}/pending_deployments")
    env_id = pending[0]["environment"]["id"] if pending else 0
    check(fake, token, "POST", RUN + "/pending_deployments", f"{R}/actions/runs/{held}/pending_deployments",
          {"environment_ids": [env_id], "state": "approved", "comment": "x"}, want=422)
    check(fake, token, "GET", "/repos/{owner}/{repo}/environments/{environment_name}/deployment_protection_rules",
          f"{R}/environments/gated/deployment_protection_rules", want=200)
    check(fake, token, "POST", RUN + "/cancel", f"{R}/actions/runs/{held}/cancel", want=202)
    check(fake, token, "POST", RUN + "/cancel", f"{R}/actions/runs/{run}/cancel", want=409)
    check(fake, token, "POST", RUN + "/force-cancel", f"{R}/actions/runs/{run}/force-cancel", want=409)
    job = jobs["jobs"][0]["id"] if jobs and jobs.get("jobs") else 0
    req = urllib.request.Request(f"{fake}{R}/actions/jobs/{job}/logs",
                                 headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req) as r:  # follows the 302 to the text
        text_ok = r.status == 200 and r.headers.get("Content-Type", "").startswith("text/plain")
    print(("ok  " if text_ok else "FAIL") + f" GET .../jobs/{job}/logs -> 302 -> text")
    if not text_ok:
        FAILED.append("job logs: not a 302 to plain text")
    if FAILED:
        print(f"\n{len(FAILED)} answers break GitHub's description", file=sys.stderr)
        sys.exit(1)
    print("\nevery answer matches GitHub's description")


if __name__ == "__main__":
    main()
