#!/usr/bin/env python3
"""A scripted custom runtime for test_emulator.py: it polls the Runtime API as a `bootstrap` does
and does what each event says ({"do": ...}), so the emulator's side of the protocol is observable.
Events from the Function URL carry the instruction in their body."""

import http.client
import json
import os
import subprocess
import threading
import time

host, port = os.environ["AWS_LAMBDA_RUNTIME_API"].split(":")
memory = {"value": None, "last_post": None}
active = {"n": 0}
# A background thread counting 100 ms ticks: it runs between invocations unless the sandbox is
# frozen.
ticks = {"n": 0}


def tick():
    while True:
        time.sleep(0.1)
        ticks["n"] += 1


threading.Thread(target=tick, daemon=True).start()


def api(method, path, body=b"", headers=None):
    conn = http.client.HTTPConnection(host, int(port), timeout=900)
    conn.request(method, "/2018-06-01/runtime" + path, body=body, headers=headers or {})
    r = conn.getresponse()
    return r.status, dict((k.lower(), v) for k, v in r.getheaders()), r.read()


def respond(request_id, payload: bytes):
    status, _, body = api("POST", f"/invocation/{request_id}/response", payload)
    memory["last_post"] = {"status": status, "body": body.decode()}


def stream(request_id, prelude: dict, chunks, pause):
    conn = http.client.HTTPConnection(host, int(port), timeout=900)
    conn.putrequest("POST", f"/2018-06-01/runtime/invocation/{request_id}/response")
    conn.putheader("Lambda-Runtime-Function-Response-Mode", "streaming")
    conn.putheader("Transfer-Encoding", "chunked")
    conn.putheader("Content-Type", "application/vnd.awslambda.http-integration-response")
    conn.endheaders()

    def send(data: bytes):
        conn.send(f"{len(data):x}\r\n".encode() + data + b"\r\n")

    send(json.dumps(prelude).encode() + b"\0" * 8)
    for i, c in enumerate(chunks):
        if i:
            time.sleep(pause)
        send(c.encode())
    conn.send(b"0\r\n\r\n")
    conn.getresponse().read()


while True:
    status, headers, body = api("GET", "/invocation/next")
    request_id = headers["lambda-runtime-aws-request-id"]
    event = json.loads(body)
    if event.get("version") == "2.0" and "body" in event:
        wrapper, event = event, json.loads(event["body"])
    else:
        wrapper = None
    active["n"] += 1
    do = event.get("do")
    if do == "ticks":
        answer = {"ticks": ticks["n"]}
    elif do == "echo":
        answer = {"headers": headers, "env": dict(os.environ), "event": wrapper}
    elif do == "detach":
        # A process in a session of its own, working in the sandbox's /tmp (as flowgate's local
        # engine starts a run's supervisor): the runtime's process group does not hold it.
        # One works in the folder; the other only names it in its environment, as a run's
        # command names its run folder.
        quiet = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        inside = subprocess.Popen(["sleep", "300"], cwd=os.environ["TMPDIR"], start_new_session=True, **quiet)
        named = subprocess.Popen(["sleep", "301"], cwd="/", start_new_session=True, **quiet,
                                 env={"RUN_DIR": os.path.join(os.environ["TMPDIR"], "runs", "1")})
        answer = {"pids": [inside.pid, named.pid], "tmp": os.environ["TMPDIR"]}
    elif do == "remember":
        memory["value"] = event["value"]
        answer = {}
    elif do == "recall":
        answer = {"value": memory["value"]}
    elif do in ("sleep", "hold"):
        time.sleep(event["seconds"])
        answer = {"concurrent": active["n"], "pid": os.getpid()}
    elif do == "big":
        answer = {"x": "a" * event["bytes"]}
    elif do == "last_post":
        answer = memory["last_post"]
    elif do == "http":
        answer = {"statusCode": event["status"], "headers": {"x-custom": "yes", "content-type": "text/plain"},
                  "body": event["body"], "isBase64Encoded": False}
    elif do == "stream":
        stream(request_id, {"statusCode": 202, "headers": {"content-type": "text/event-stream"}, "cookies": []},
               event["chunks"], event["pause"])
        active["n"] -= 1
        continue
    else:
        answer = {"unknown": do}
    active["n"] -= 1
    respond(request_id, json.dumps(answer).encode())
