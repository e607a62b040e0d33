#!/usr/bin/env python3
"""Cold start and idle memory of flowgate, side by side with a peer (FastMCP + fastmcp-tasks).

Cold start = process start to the first answered MCP request:
  * HTTP mode (Cloud Run): spawn, then POST tools/list until it answers 200;
  * Lambda mode: spawn with AWS_LAMBDA_RUNTIME_API pointing at a local Runtime API that has a
    Function URL event with tools/list waiting; stop when the function posts its response.
Idle memory = VmRSS one second after the first answer.

    scripts/bench/coldstart.py [RUNS] [FLOWGATE_BINARY] [PEER_PYTHON]

Only loopback traffic; every run is bounded and stops by itself.
"""

import http.server
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 15
BIN = sys.argv[2] if len(sys.argv) > 2 else "target/release/flowgate"
PEER_PY = sys.argv[3] if len(sys.argv) > 3 else ".venv-bench/bin/python"
KEY = "b1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8"
META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "coldstart", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}
BODY = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": META}})
HEADERS = {
    "content-type": "application/json",
    "accept": "application/json, text/event-stream",
    "mcp-protocol-version": "2026-07-28",
    "mcp-method": "tools/list",
}


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def first_answer_http(cmd, port, env):
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = start + 30
        while time.perf_counter() < deadline:
            try:
                req = urllib.request.Request(f"http://127.0.0.1:{port}/mcp", data=BODY.encode(), headers=HEADERS)
                with urllib.request.urlopen(req, timeout=2) as r:
                    if r.status == 200:
                        elapsed = time.perf_counter() - start
                        time.sleep(1)
                        return elapsed, rss_kb(proc.pid)
            except OSError:
                time.sleep(0.002)
        raise SystemExit(f"no answer from {cmd[0]} within 30 s")
    finally:
        proc.kill()
        proc.wait()


class Runtime(http.server.BaseHTTPRequestHandler):
    event = None
    answered = None

    def log_message(self, *args):
        pass

    def do_GET(self):
        if Runtime.event is None:
            time.sleep(30)
            return
        body = json.dumps(Runtime.event).encode()
        Runtime.event = None
        self.send_response(200)
        self.send_header("lambda-runtime-aws-request-id", "cold-1")
        self.send_header("lambda-runtime-deadline-ms", str(int(time.time() * 1000) + 30000))
        self.send_header("lambda-runtime-invoked-function-arn", "arn:aws:lambda:us-east-1:123456789012:function:flowgate")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        length = int(self.headers.get("content-length", 0))
        self.rfile.read(length)
        self.send_response(202)
        self.send_header("content-length", "0")
        self.end_headers()
        Runtime.answered.set()


def first_answer_lambda(env):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Runtime)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    Runtime.answered = threading.Event()
    Runtime.event = {
        "version": "2.0", "routeKey": "$default", "rawPath": "/mcp", "rawQueryString": "",
        "headers": {**HEADERS, "host": "abc.lambda-url.us-east-1.on.aws"},
        "requestContext": {"accountId": "anonymous", "apiId": "abc", "domainName": "abc.lambda-url.us-east-1.on.aws",
                           "http": {"method": "POST", "path": "/mcp", "protocol": "HTTP/1.1", "sourceIp": "127.0.0.1", "userAgent": "cold"},
                           "requestId": "cold-1", "routeKey": "$default", "stage": "$default", "time": "02/Dec/2026:10:00:00 +0000", "timeEpoch": 0},
        "body": BODY, "isBase64Encoded": False,
    }
    env = dict(env, AWS_LAMBDA_RUNTIME_API=f"127.0.0.1:{server.server_address[1]}", AWS_LAMBDA_FUNCTION_NAME="flowgate",
               AWS_LAMBDA_FUNCTION_VERSION="1", AWS_LAMBDA_FUNCTION_MEMORY_SIZE="256", FLOWGATE_ALLOWED_HOSTS="*")
    start = time.perf_counter()
    proc = subprocess.Popen([BIN, "serve"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        if not Runtime.answered.wait(30):
            raise SystemExit("the function did not answer within 30 s")
        elapsed = time.perf_counter() - start
        time.sleep(1)
        return elapsed, rss_kb(proc.pid)
    finally:
        proc.kill()
        proc.wait()
        server.shutdown()


def summary(name, samples):
    times = [t * 1000 for t, _ in samples]
    rss = [r / 1024 for _, r in samples]
    return {"name": name, "p50_ms": statistics.median(times), "max_ms": max(times), "idle_rss_mb": statistics.median(rss)}


def main():
    state = tempfile.mkdtemp()
    base = dict(os.environ, FLOWGATE_HANDLE_KEYS=KEY, FLOWGATE_STATE_DIR=state, FLOWGATE_LOG="error")
    base.pop("FLOWGATE_LISTEN", None)
    rows = []
    http_runs = []
    for _ in range(RUNS):
        port = free_port()
        http_runs.append(first_answer_http([BIN, "serve", "--listen", f"127.0.0.1:{port}"], port, base))
    rows.append(summary("flowgate (HTTP)", http_runs))
    rows.append(summary("flowgate (Lambda)", [first_answer_lambda(base) for _ in range(RUNS)]))
    if os.path.exists(PEER_PY):
        peer = []
        for _ in range(max(3, RUNS // 3)):
            port = free_port()
            peer.append(first_answer_http([PEER_PY, "scripts/bench/peer_fastmcp.py", str(port)], port, dict(os.environ)))
        rows.append(summary("fastmcp-tasks (HTTP)", peer))
    print(f"{'':22}{'cold start p50 ms':>18}{'max ms':>9}{'idle RSS MB':>13}")
    for r in rows:
        print(f"{r['name']:22}{r['p50_ms']:>18.1f}{r['max_ms']:>9.1f}{r['idle_rss_mb']:>13.1f}")
    if len(rows) == 3:
        f, p = rows[0], rows[2]
        print(f"\nflowgate / fastmcp-tasks: cold start {p['p50_ms'] / f['p50_ms']:.0f}x faster, "
              f"idle RSS {p['idle_rss_mb'] / f['idle_rss_mb']:.1f}x smaller")


if __name__ == "__main__":
    main()
