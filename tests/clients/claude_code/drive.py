"""Drives the Claude Code CLI against flowgate, as a person runs it, with a scripted model.

Run by scripts/claude-code, which installs the CLI, starts flowgate (tests/clients/claude_code/
tools.yaml, plus Step Functions tools on moto when it runs) and the scripted model
(model_server.py), and writes the scratch HOME this reads:

    python drive.py --claude BIN --work DIR --mcp-url URL --metrics-url URL --server-log FILE
                    --model-record FILE --flowgate-bin BIN --manifest FILE [--moto-url URL] [--only NAME]

Claude Code finds flowgate the way docs/clients.md says a person configures it (`claude mcp add
--transport http --scope project flowgate URL`, which writes the project's `.mcp.json`), checked
with `claude mcp list`; the local-scope and stdio forms of `claude mcp add` are checked too, in
another folder. Then:

- print mode (`claude -p`, which calls tools without the tasks extension): the tool's
  synchronous result is the answer, on the local engine and on Step Functions; a
  `task: required` tool's -32021 reaches the model as the tool's error; a call longer than
  MCP_TOOL_TIMEOUT is given up by Claude Code and stopped by flowgate;
- interactive mode, in a tmux pane: a call becomes a task (Claude Code moves it to the
  background), is polled with `tasks/get`, is not cancelled, and its result reaches the model
  (the scripted model's next request carries it, and its answer shows in the pane);
- an approval: the workflow's question appears as Claude Code's dialog; accepting runs the
  deploy; "answer later" (Esc) leaves the task waiting for input, still polled, and the
  answer given later from the task panel (a decline) reaches the run, which does not deploy;
  a question set aside is answered by another client (`tasks/update`), and Claude Code sees
  the task complete;
- stopping a background task from the task panel (`x`) and by the model's TaskStop tool:
  flowgate gets `tasks/cancel` and the execution ends (the local process is gone; the Step
  Functions execution is ABORTED).

Every step is also checked from flowgate's side (its Prometheus metrics and audit log) and in
Claude Code's own MCP log. Each wait polls for the state it means, with a deadline; any
failure raises (with the pane, the MCP log's tail and what flowgate counted) and the process
exits non-zero.
"""

from __future__ import annotations

import argparse
import base64
import glob
import json
import os
import re
import shlex
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")
SERVER = "flowgate"
# Claude Code's own limit for a task id it accepts (its MCP log calls a longer one "a malformed
# task handle" and cancels the task).
CLAUDE_CODE_TASK_ID_LIMIT = 128


class Failure(Exception):
    pass


def check(condition: bool, what: str) -> None:
    if not condition:
        raise Failure(what)


def text_of(content: Any) -> str:
    """The text of a message's content: a string, or its text blocks and tool results' text."""
    if isinstance(content, str):
        return content
    parts = []
    for block in content or []:
        if isinstance(block, dict) and block.get("type") == "text":
            parts.append(block.get("text", ""))
        elif isinstance(block, dict) and block.get("type") == "tool_result":
            parts.append(text_of(block.get("content")))
    return "\n".join(parts)


def wait_for(probe: Callable[[], T | None], what: str, timeout: float, on_timeout: Callable[[], str] = lambda: "") -> T:
    """Polls `probe` until it returns something true (a match, a non-empty text, True), or fails
    after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise Failure(f"waited {timeout:.0f}s for {what}\n{on_timeout()}")
        time.sleep(0.2)


class Context:
    def __init__(self, args: argparse.Namespace) -> None:
        self.claude = args.claude
        self.work = Path(args.work)
        self.home = self.work / "home"
        self.project = self.work / "project"
        self.markers = self.work / "markers"
        self.mcp_url = args.mcp_url
        self.metrics_url = args.metrics_url
        self.server_log = Path(args.server_log)
        self.model_record = Path(args.model_record)
        self.moto_url = args.moto_url
        self.flowgate_bin = args.flowgate_bin
        self.manifest = args.manifest
        self.env = dict(os.environ)
        for name in ("ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "HOME"):
            check(name in self.env, f"{name} is not set")
        # A tmux server of its own, its socket in the work folder (removed with it).
        self.tmux_socket = str(self.work / "tmux.sock")
        self.pane_started = False
        self.longest_id = 0
        self.last_task_id = ""

    # --- flowgate's side -------------------------------------------------------------------

    def metric(self, name: str, **labels: str) -> float:
        """The sum of a metric's series whose labels include `labels` (0 when none)."""
        with urllib.request.urlopen(self.metrics_url, timeout=5) as response:
            text = response.read().decode()
        total = 0.0
        for line in text.splitlines():
            if not line.startswith(name + "{") and not line.startswith(name + " "):
                continue
            series, _, value = line.rpartition(" ")
            found = dict(re.findall(r'(\w+)="([^"]*)"', series))
            if all(found.get(k) == v for k, v in labels.items()):
                total += float(value)
        return total

    def audit(self) -> list[dict[str, str]]:
        """flowgate's audit lines so far, each as its fields."""
        events = []
        for line in self.server_log.read_text(errors="replace").splitlines():
            if "flowgate::audit" in line:
                events.append(dict(re.findall(r"(\w+)=(\S+)", line.split("flowgate::audit", 1)[1])))
        return events

    def audit_of(self, execution: str) -> list[str]:
        return [e["event"] for e in self.audit() if e.get("execution") == execution]

    def started_execution(self, tool: str, before: int) -> str:
        """The execution of the first `started` audit line for `tool` after the first `before` lines."""
        def probe() -> str | None:
            for e in self.audit()[before:]:
                if e.get("event") == "started" and e.get("tool") == tool:
                    return e.get("execution")
            return None
        return wait_for(probe, f"flowgate's audit line for the start of {tool}", 30, self.diagnostics)

    def flowgate_counts(self) -> str:
        lines = []
        try:
            with urllib.request.urlopen(self.metrics_url, timeout=5) as response:
                for line in response.read().decode().splitlines():
                    if line.startswith(("flowgate_mcp_requests_total", "flowgate_tasks_")):
                        lines.append("  " + line)
        except OSError as e:
            lines.append(f"  (metrics unreadable: {e})")
        return "flowgate's counts:\n" + "\n".join(lines)

    # --- Claude Code's side ----------------------------------------------------------------

    def mcp_log(self) -> list[dict[str, Any]]:
        """Claude Code's MCP log for flowgate (every session's, oldest first)."""
        entries = []
        pattern = str(self.home / ".cache" / "claude-cli-nodejs" / "*" / f"mcp-logs-{SERVER}" / "*.jsonl")
        for path in sorted(glob.glob(pattern)):
            for line in Path(path).read_text(errors="replace").splitlines():
                try:
                    entries.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
        return entries

    def mcp_log_text(self) -> str:
        return "\n".join(str(e.get("debug") or e.get("error") or "") for e in self.mcp_log())

    def model_requests(self) -> list[dict[str, Any]]:
        if not self.model_record.exists():
            return []
        return [json.loads(line)["body"] for line in self.model_record.read_text().splitlines() if line.strip()]

    def model_saw(self, needle: str) -> bool:
        """Whether a request to the model carried `needle` in its last user turn."""
        for body in self.model_requests():
            users = [m for m in body.get("messages") or [] if m.get("role") == "user"]
            if users and needle in text_of(users[-1].get("content")):
                return True
        return False

    def run(self, argv: list[str], cwd: Path, timeout: float = 120,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, cwd=cwd, env={**self.env, **(env or {})}, capture_output=True, text=True,
                              timeout=timeout)

    # --- the tmux pane ---------------------------------------------------------------------

    def tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-S", self.tmux_socket, *args], check=True, capture_output=True,
                              text=True, timeout=10).stdout

    def start_pane(self) -> None:
        keep = ["HOME", "PATH", "TERM", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "DISABLE_AUTOUPDATER",
                "DISABLE_TELEMETRY", "DISABLE_ERROR_REPORTING", "ENABLE_TOOL_SEARCH", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"]
        env = {k: self.env[k] for k in keep if k in self.env}
        env.setdefault("TERM", "xterm-256color")
        lists = self.metric("flowgate_mcp_requests_total", method="tools/list")
        command = "exec env " + " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()) + " " + shlex.quote(self.claude)
        self.tmux("-f", "/dev/null", "new-session", "-d", "-s", "cc", "-x", "220", "-y", "60",
                  "-c", str(self.project), command)
        self.pane_started = True
        self.wait_pane(r"❯", "Claude Code's prompt", 60)
        # Claude Code connects to MCP servers in the background: a prompt sent before flowgate's
        # tools are listed goes to the model without them.
        wait_for(lambda: self.metric("flowgate_mcp_requests_total", method="tools/list") > lists,
                 "Claude Code to list flowgate's tools", 60, self.diagnostics)

    def stop_pane(self) -> None:
        if self.pane_started:
            subprocess.run(["tmux", "-S", self.tmux_socket, "kill-server"], capture_output=True, timeout=10)

    def pane(self) -> str:
        try:
            return self.tmux("capture-pane", "-p", "-J", "-t", "cc", "-S", "-3000")
        except subprocess.CalledProcessError as e:
            return f"(the pane is gone: {e.stderr})"

    def wait_pane(self, pattern: str, what: str, timeout: float, before: str = "") -> re.Match[str]:
        """Waits until `pattern` matches more often in the pane than in `before` (an earlier capture).

        Counting, not an offset: Claude Code prints above its prompt and status line, which stay
        at the bottom of the screen, and redraws dialogs and panels in place.
        """
        seen = len(re.findall(pattern, before))

        def probe() -> re.Match[str] | None:
            found = list(re.finditer(pattern, self.pane()))
            return found[-1] if len(found) > seen else None

        return wait_for(probe, f"{what} (/{pattern}/ in the pane)", timeout, self.diagnostics)

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", "cc", *keys)

    def press(self, key: str, shows: str | None = None, what: str = "", gone: str | None = None,
              timeout: float = 15) -> None:
        """Presses `key` until the pane shows one more match of `shows` than before (or no longer
        contains `gone`), pressing it again after 2 s without the change. Claude Code's terminal
        UI can drop a key that arrives right after the render it acts on, before its key handler
        has caught up with that render; a key that took effect changes the pane within
        milliseconds, so a second press never follows one that worked."""
        before = self.pane()
        seen = len(re.findall(shows, before)) if shows else 0

        def done() -> bool:
            text = self.pane()
            if shows is not None:
                return len(re.findall(shows, text)) > seen
            return gone is not None and re.search(gone, text) is None

        deadline = time.monotonic() + timeout
        while True:
            self.keys(key)
            retry = time.monotonic() + 2
            while time.monotonic() < retry:
                if done():
                    return
                time.sleep(0.1)
            if time.monotonic() > deadline:
                raise Failure(f"pressed {key} for {timeout:.0f}s without {what}\n{self.diagnostics()}")

    def prompt(self, text: str) -> str:
        """Types `text` and submits it; returns the pane as it was before, for waits on what follows."""
        before = self.pane()
        self.tmux("send-keys", "-t", "cc", "-l", text)
        self.wait_pane(re.escape(text[-20:]), "the typed prompt", 10, before)
        self.keys("Enter")
        return before

    def diagnostics(self) -> str:
        pane = self.pane() if self.pane_started else "(no pane)"
        log = [l for l in self.mcp_log_text().splitlines() if l != "No token data found"]
        return ("--- the pane (last 40 lines):\n" + "\n".join([l for l in pane.splitlines() if l.strip()][-40:])
                + "\n--- Claude Code's MCP log (last 15 lines):\n" + "\n".join(log[-15:])
                + "\n--- " + self.flowgate_counts())


# --- the flows ------------------------------------------------------------------------------


def configure(ctx: Context) -> None:
    """The documented configuration, run as documented: `claude mcp add` then `claude mcp list`."""
    added = ctx.run([ctx.claude, "mcp", "add", "--transport", "http", "--scope", "project",
                     SERVER, ctx.mcp_url], ctx.project)
    check(added.returncode == 0, f"claude mcp add failed: {added.stdout}{added.stderr}")
    written = json.loads((ctx.project / ".mcp.json").read_text())
    check(written == {"mcpServers": {SERVER: {"type": "http", "url": ctx.mcp_url}}},
          f"claude mcp add wrote an unexpected .mcp.json: {written}")
    listed = ctx.run([ctx.claude, "mcp", "list"], ctx.project)
    check(listed.returncode == 0 and re.search(rf"^{SERVER}: {re.escape(ctx.mcp_url)} \(HTTP\) - . Connected",
                                               listed.stdout, re.M) is not None,
          f"claude mcp list does not show flowgate connected:\n{listed.stdout}{listed.stderr}")
    # The user-scope form too (what `claude mcp add` without --scope does: local to this
    # project, private to the user), in a folder of its own.
    other = ctx.work / "other-project"
    other.mkdir(exist_ok=True)
    added = ctx.run([ctx.claude, "mcp", "add", "--transport", "http", SERVER, ctx.mcp_url], other)
    check(added.returncode == 0, f"claude mcp add (local scope) failed: {added.stdout}{added.stderr}")
    got = ctx.run([ctx.claude, "mcp", "get", SERVER], other)
    check(got.returncode == 0 and "Connected" in got.stdout and ctx.mcp_url in got.stdout,
          f"claude mcp get does not show flowgate connected:\n{got.stdout}{got.stderr}")
    # flowgate on stdio, started by Claude Code itself, with its handle keys in a file.
    keys = ctx.work / "handle-keys"
    keys.write_text("k1:" + base64.b64encode(os.urandom(32)).decode())
    keys.chmod(0o600)
    added = ctx.run([ctx.claude, "mcp", "add", "--transport", "stdio", f"{SERVER}-stdio",
                     "-e", f"FLOWGATE_HANDLE_KEYS_FILE={keys}", "-e", f"CC_MARKERS={ctx.markers}", "--", ctx.flowgate_bin, "serve", "--stdio", "--manifest", ctx.manifest], other)
    check(added.returncode == 0, f"claude mcp add (stdio) failed: {added.stdout}{added.stderr}")
    listed = ctx.run([ctx.claude, "mcp", "list"], other)
    check(listed.returncode == 0 and re.search(rf"^{SERVER}-stdio: .* - . Connected", listed.stdout, re.M) is not None
          and re.search(rf"^{SERVER}: {re.escape(ctx.mcp_url)} \(HTTP\) - . Connected", listed.stdout, re.M) is not None,
          f"claude mcp list does not show flowgate (HTTP and stdio) connected:\n{listed.stdout}{listed.stderr}")
    print(f"ok  claude mcp add (HTTP, project and local scope; stdio) and claude mcp list/get: all connected")


def lambda_iam(ctx: Context, url: str, proxy: str, akid: str, secret: str) -> None:
    """docs/remote-clients.md's recipe as a person runs it: Claude Code reaches flowgate on an
    AWS_IAM Lambda Function URL (the Lambda emulator, checking every SigV4 signature) through
    mcp-proxy-for-aws, added with `claude mcp add ... -- mcp-proxy-for-aws URL --service lambda`;
    `claude mcp list` shows it connected and a print-mode call gets the tool's result."""
    folder = ctx.work / "lambda-project"
    folder.mkdir(exist_ok=True)
    name = f"{SERVER}-lambda"
    # The key in the server's environment, as `-e AWS_PROFILE=...` would name a profile; nothing
    # of this machine's AWS configuration reaches the proxy.
    added = ctx.run([ctx.claude, "mcp", "add", name,
                     "-e", f"AWS_ACCESS_KEY_ID={akid}", "-e", f"AWS_SECRET_ACCESS_KEY={secret}",
                     "-e", f"AWS_CONFIG_FILE={ctx.work / 'no-aws-config'}",
                     "-e", f"AWS_SHARED_CREDENTIALS_FILE={ctx.work / 'no-aws-config'}",
                     "-e", "AWS_EC2_METADATA_DISABLED=true",
                     # A real Function URL names its region in its host name, which the proxy
                     # reads; the emulator's 127.0.0.1 does not, so the region is said here.
                     "-e", "AWS_REGION=us-east-1",
                     "--", proxy, url, "--service", "lambda", "--region", "us-east-1"], folder)
    check(added.returncode == 0, f"claude mcp add (mcp-proxy-for-aws) failed: {added.stdout}{added.stderr}")
    listed = ctx.run([ctx.claude, "mcp", "list"], folder, timeout=180)
    check(listed.returncode == 0 and re.search(rf"^{name}: .* - . Connected", listed.stdout, re.M) is not None,
          f"claude mcp list does not show flowgate on Lambda (IAM) connected:\n{listed.stdout}{listed.stderr}")
    prompt = f'CALL mcp__{name}__quick_report {{"days": 3}}'
    # Print mode waits MCP_CONNECT_TIMEOUT_MS (5 s by default; without MCP_CONNECTION_NONBLOCKING
    # =false it may not wait at all) for its MCP servers, then asks the model without the ones not
    # connected yet. The proxy (Python, botocore) takes longer than 5 s to start on a busy machine
    # (8 s seen), and the call is what this flow tests, so it is given the time.
    done = ctx.run([ctx.claude, "-p", prompt, "--output-format", "json", "--allowedTools", f"mcp__{name}"],
                   folder, timeout=180, env={"MCP_CONNECTION_NONBLOCKING": "false", "MCP_CONNECT_TIMEOUT_MS": "60000"})
    check(done.returncode == 0, f"claude -p through mcp-proxy-for-aws failed ({done.returncode}): {done.stdout}{done.stderr}")
    answer = json.loads(done.stdout)
    expected = "TOOL RESULT: Quick report for 3 days is ready"
    check(answer.get("result") == expected,
          f"claude -p through mcp-proxy-for-aws answered {answer.get('result')!r}, not {expected!r}")
    print("ok  Lambda (AWS_IAM Function URL) through mcp-proxy-for-aws: claude mcp add, listed connected, "
          "a print-mode call signed with SigV4 got the tool's result")


def print_mode(ctx: Context, tool: str, arguments: dict[str, Any], expected: str) -> None:
    """`claude -p`: no tasks extension, so flowgate answers synchronously and that is the answer."""
    before = len(ctx.audit())
    gets_before = ctx.metric("flowgate_tasks_get_total", tool=tool)
    prompt = f"CALL mcp__{SERVER}__{tool} {json.dumps(arguments)}"
    started = time.monotonic()
    done = ctx.run([ctx.claude, "-p", prompt, "--output-format", "json"], ctx.project, timeout=180)
    took = time.monotonic() - started
    check(done.returncode == 0, f"claude -p failed ({done.returncode}): {done.stdout}{done.stderr}")
    answer = json.loads(done.stdout)
    check(answer.get("is_error") is False, f"claude -p answered an error: {answer}")
    check(answer.get("result") == f"TOOL RESULT: {expected}",
          f"claude -p answered {answer.get('result')!r}, not the tool's result {expected!r}")
    execution = ctx.started_execution(tool, before)
    check(ctx.metric("flowgate_tasks_get_total", tool=tool) == gets_before,
          "flowgate was polled with tasks/get for a print-mode call (it should have answered synchronously)")
    check("finished" in ctx.audit_of(execution), f"flowgate's audit has no end for {execution}: {ctx.audit_of(execution)}")
    print(f"ok  print mode, {tool}: the answer is the tool's synchronous result {expected!r} ({took:.1f}s)")


def print_mode_needs_tasks(ctx: Context) -> None:
    """`claude -p` and a `task: required` tool: flowgate refuses the call (-32021) and starts nothing."""
    before = len(ctx.audit())
    done = ctx.run([ctx.claude, "-p", f'CALL mcp__{SERVER}__long_report {{"days": 1}}', "--output-format", "json"],
                   ctx.project, timeout=180)
    check(done.returncode == 0, f"claude -p failed ({done.returncode}): {done.stdout}{done.stderr}")
    answer = json.loads(done.stdout).get("result")
    check(answer == "TOOL RESULT: Missing required client capability",
          f"claude -p answered {answer!r} for a task: required tool")
    events = [e for e in ctx.audit()[before:] if e.get("tool") == "long_report"]
    check([(e.get("event"), e.get("reason")) for e in events] == [("refused", "tasks_required")],
          f"flowgate's audit for the refused call: {events}")
    print("ok  print mode, long_report (task: required): -32021 reached the model as the tool's error; nothing started")


def print_mode_timeout(ctx: Context) -> None:
    """`claude -p` gives up on a synchronous call after MCP_TOOL_TIMEOUT (60 s by default, the
    HTTP request's own limit); flowgate sees the caller hang up and stops the execution."""
    before = len(ctx.audit())
    started = time.monotonic()
    done = ctx.run([ctx.claude, "-p", f'CALL mcp__{SERVER}__quick_report {{"days": 1, "seconds": 30}}',
                    "--output-format", "json"], ctx.project, timeout=180, env={"MCP_TOOL_TIMEOUT": "2000"})
    took = time.monotonic() - started
    check(done.returncode == 0, f"claude -p failed ({done.returncode}): {done.stdout}{done.stderr}")
    answer = json.loads(done.stdout).get("result")
    check(answer == f'TOOL RESULT: MCP server "{SERVER}" tool "quick_report" timed out after 2s',
          f"claude -p answered {answer!r} for a call longer than MCP_TOOL_TIMEOUT")
    execution = ctx.started_execution("quick_report", before)
    wait_for(lambda: [e.get("reason") for e in ctx.audit() if e.get("execution") == execution
                      and e.get("event") == "cancelled"] == ["hung_up"],
             "flowgate to stop the execution whose caller hung up", 15, ctx.diagnostics)
    print(f"ok  print mode, a call longer than MCP_TOOL_TIMEOUT=2000: Claude Code gave up after {took:.1f}s "
          "and flowgate stopped the execution (hung_up)")


def background_task(ctx: Context, tool: str, arguments: dict[str, Any]) -> tuple[str, str, str]:
    """Calls `tool` in the pane; waits until Claude Code has moved its task to the background.

    Returns Claude Code's own task id, flowgate's execution, and the pane as it was before the call
    (flowgate's task id is kept in `ctx.last_task_id`).
    Claude Code shows flowgate's task id in its tool result; it must be one Claude Code accepts.
    """
    before = len(ctx.audit())
    log_before = len(ctx.mcp_log())
    mark = ctx.prompt(f"CALL mcp__{SERVER}__{tool} {json.dumps(arguments)}")

    def moved() -> re.Match[str] | None:
        text = ctx.pane()
        if text.count("TOOL NOT OFFERED") > mark.count("TOOL NOT OFFERED"):
            raise Failure(f"the model was not offered {tool}\n{ctx.diagnostics()}")
        refused = [e for e in ctx.mcp_log()[log_before:] if "malformed task handle" in json.dumps(e)]
        if refused:
            raise Failure(f"Claude Code refused flowgate's task for {tool}: "
                          f"{refused[0].get('debug') or refused[0].get('error')}\n{ctx.diagnostics()}")
        pattern = (rf'MCP tool "{SERVER}/{tool}" started server-side task (\S+)\. It was moved to the '
                   r"background as task (\w+)")
        found = list(re.finditer(pattern, text))
        return found[-1] if len(found) > len(re.findall(pattern, mark)) else None

    found = wait_for(moved, f"Claude Code to move {tool}'s task to the background", 60, ctx.diagnostics)
    server_task, local_task = found.group(1), found.group(2)
    # Claude Code's own log says the same: a task, in the background.
    logged = f"Tool '{tool}' returned task {server_task} (working); backgrounded as {local_task}"
    wait_for(lambda: logged in ctx.mcp_log_text(), f"Claude Code's MCP log line {logged!r}", 10, ctx.diagnostics)
    check(len(server_task) <= CLAUDE_CODE_TASK_ID_LIMIT, f"flowgate's task id is {len(server_task)} characters")
    ctx.longest_id = max(ctx.longest_id, len(server_task))
    ctx.last_task_id = server_task
    execution = ctx.started_execution(tool, before)
    return local_task, execution, mark


def task_to_result(ctx: Context, tool: str, arguments: dict[str, Any], expected: str) -> None:
    """Interactive: the call is a task, polled to its end, not cancelled; the result reaches the model."""
    gets = ctx.metric("flowgate_tasks_get_total", tool=tool)
    cancels = ctx.metric("flowgate_tasks_cancelled_total", tool=tool)
    cancel_requests = ctx.metric("flowgate_mcp_requests_total", method="tasks/cancel")
    started = time.monotonic()
    _, execution, mark = background_task(ctx, tool, arguments)
    ctx.wait_pane(rf"\({SERVER}/{tool}\) completed", f"Claude Code's notice that {tool}'s task completed", 90, mark)
    wait_for(lambda: ctx.model_saw(f"<status>completed</status>") and ctx.model_saw(expected),
             f"the model to receive {tool}'s result {expected!r}", 30, ctx.diagnostics)
    ctx.wait_pane(rf"TASK completed: {re.escape(expected)}", "the model's answer quoting the result", 30, mark)
    took = time.monotonic() - started
    polls = ctx.metric("flowgate_tasks_get_total", tool=tool) - gets
    check(polls >= 2, f"flowgate answered {polls:.0f} tasks/get for {tool}: the task was not polled")
    check(ctx.metric("flowgate_tasks_cancelled_total", tool=tool) == cancels, f"{tool}'s task was cancelled")
    check(ctx.metric("flowgate_mcp_requests_total", method="tasks/cancel") == cancel_requests,
          "Claude Code sent tasks/cancel")
    events = ctx.audit_of(execution)
    check(events[:1] == ["started"] and "finished" in events and "cancelled" not in events,
          f"flowgate's audit for {execution}: {events}")
    finished = [e for e in ctx.audit() if e.get("execution") == execution and e.get("event") == "finished"]
    check(finished[0].get("status") == "completed", f"{tool} finished {finished[0].get('status')}")
    print(f"ok  interactive, {tool}: a background task, {polls:.0f} tasks/get polls, no cancel, "
          f"result {expected!r} reached the model ({took:.1f}s)")


def approval_accepted(ctx: Context) -> None:
    """The question appears as Claude Code's dialog; accepting runs the deploy."""
    marker = ctx.markers / "web"
    _, execution, mark = background_task(ctx, "approve_deploy", {"service": "web", "marker": "web"})
    ctx.wait_pane(rf"MCP server .{SERVER}. requests your input", "Claude Code's dialog for the question", 30, mark)
    ctx.wait_pane(r"Deploy web to production\?", "the workflow's question in the dialog", 5, mark)
    check(ctx.audit_of(execution) == ["started"], f"the approval moved on before an answer: {ctx.audit_of(execution)}")
    check(not marker.exists(), "the deploy ran before it was approved")
    ctx.press("Space", shows=r"confirm: ☒", what="the ticked box")  # tick `confirm`
    ctx.press("Down", shows=r"❯ Accept", what="Accept selected")
    ctx.press("Enter", gone=r"Deploy web to production\?", what="the dialog closed")
    wait_for(lambda: "Elicitation response: action=accept mode=form" in ctx.mcp_log_text(),
             "Claude Code's MCP log line for the accepted form", 10, ctx.diagnostics)
    ctx.wait_pane(rf"\({SERVER}/approve_deploy\) completed", "the approval's task completed", 60, mark)
    check(marker.read_text() == "deployed", f"the deploy's marker says {marker.read_text()!r}")
    wait_for(lambda: ctx.model_saw("Deployed web"), "the model to receive 'Deployed web'", 30, ctx.diagnostics)
    events = ctx.audit_of(execution)
    check(events[:3] == ["started", "answered", "finished"], f"flowgate's audit for the approval: {events}")
    print("ok  approval: the question appeared as Claude Code's dialog; Accept (confirm ticked) reached the run, "
          "which deployed; 'Deployed web' reached the model")


def approval_later_declined(ctx: Context) -> None:
    """Esc ("answer later") leaves the task waiting and polled; a later decline does not deploy."""
    marker = ctx.markers / "db"
    _, execution, mark = background_task(ctx, "approve_deploy", {"service": "db", "marker": "db"})
    ctx.wait_pane(r"Deploy db to production\?", "the dialog for the second approval", 30, mark)
    ctx.press("Escape", gone=r"Deploy db to production\?", what="the dialog set aside")
    ctx.wait_pane(r"1 MCP task · needs your input", "the status line saying a task needs input", 10, mark)
    gets = ctx.metric("flowgate_tasks_get_total", tool="approve_deploy")
    wait_for(lambda: ctx.metric("flowgate_tasks_get_total", tool="approve_deploy") >= gets + 3,
             "Claude Code to keep polling the waiting task", 30, ctx.diagnostics)
    check(ctx.audit_of(execution) == ["started"], f"the waiting task was ended: {ctx.audit_of(execution)}")
    check(not marker.exists(), "the run went on without an answer")
    # Later, from the task panel: Down focuses the background tasks, Enter opens the task.
    ctx.press("Down", shows=r"enter to view tasks", what="the task line focused")
    ctx.press("Enter", shows=r"Status:\s+input required", what="the task panel saying input is required")
    ctx.wait_pane(r"Enter to answer", "the panel offering to answer", 5)
    ctx.press("Enter", shows=r"Deploy db to production\?", what="the dialog again")
    ctx.press("Down", shows=r"❯ Accept", what="Accept selected")
    ctx.press("Right", shows=r"❯ Decline", what="Decline selected")
    ctx.press("Enter", gone=r"Deploy db to production\?", what="the dialog closed")
    wait_for(lambda: "Elicitation response: action=decline" in ctx.mcp_log_text(),
             "Claude Code's MCP log line for the declined form", 10, ctx.diagnostics)
    ctx.wait_pane(rf"\({SERVER}/approve_deploy\) failed", "the declined approval's task ended", 60, mark)
    check(marker.read_text() == "declined", f"the declined deploy's marker says {marker.read_text()!r}")
    events = ctx.audit_of(execution)
    check(events[:3] == ["started", "answered", "finished"], f"flowgate's audit for the declined approval: {events}")
    wait_for(lambda: ctx.model_saw("<status>failed</status>"), "the model to hear the task failed", 30, ctx.diagnostics)
    print("ok  approval answered later: Esc left the task input_required and polled (not ended); from the task "
          "panel, Decline reached the run, which did not deploy")


def mcp_request(ctx: Context, method: str, name: str, params: dict[str, Any]) -> dict[str, Any]:
    """One 2026-07-28 request with the tasks extension, as another client (docs/protocol.md's curl)."""
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "another-client", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}}
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": dict(params, _meta=meta)}).encode()
    request = urllib.request.Request(ctx.mcp_url, data=body, method="POST", headers={
        "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": method, "Mcp-Name": name})
    with urllib.request.urlopen(request, timeout=30) as response:
        answer = json.loads(response.read())
    check("result" in answer, f"{method} answered {answer}")
    return answer["result"]


def approval_answered_elsewhere(ctx: Context) -> None:
    """A question set aside in Claude Code is answered by another client: Claude Code sees the end."""
    marker = ctx.markers / "cache"
    _, execution, mark = background_task(ctx, "approve_deploy", {"service": "cache", "marker": "cache"})
    task_id = ctx.last_task_id
    ctx.wait_pane(r"Deploy cache to production\?", "the dialog for the third approval", 30, mark)
    ctx.press("Escape", gone=r"Deploy cache to production\?", what="the dialog set aside")
    ctx.wait_pane(r"1 MCP task · needs your input", "the status line saying a task needs input", 10, mark)
    task = mcp_request(ctx, "tasks/get", task_id, {"taskId": task_id})
    check(task.get("status") == "input_required", f"the task set aside is {task.get('status')}, not input_required")
    questions = task.get("inputRequests") or {}
    check(len(questions) == 1, f"the task set aside asks {questions}")
    key = next(iter(questions))
    mcp_request(ctx, "tasks/update", task_id,
                {"taskId": task_id, "inputResponses": {key: {"action": "accept", "content": {"confirm": True}}}})
    ctx.wait_pane(rf"\({SERVER}/approve_deploy\) completed", "Claude Code's notice that the task completed", 60, mark)
    check(marker.read_text() == "deployed", f"the deploy's marker says {marker.read_text()!r}")
    wait_for(lambda: ctx.model_saw("Deployed cache"), "the model to receive 'Deployed cache'", 30, ctx.diagnostics)
    events = ctx.audit_of(execution)
    check(events[:3] == ["started", "answered", "finished"], f"flowgate's audit for the approval: {events}")
    wait_for(lambda: "needs your input" not in ctx.pane(), "the status line to drop 'needs your input'", 15,
             ctx.diagnostics)
    print("ok  approval set aside in Claude Code (input_required) and answered by another client with "
          "tasks/update: the run deployed, Claude Code saw the task complete and the model got 'Deployed cache'")


def stop_from_panel(ctx: Context) -> None:
    """The person stops the background task in the task panel (`x`): tasks/cancel; the process ends."""
    marker = ctx.markers / "endless"
    cancels = ctx.metric("flowgate_mcp_requests_total", method="tasks/cancel")
    _, execution, mark = background_task(ctx, "endless_job", {"marker": "endless"})
    pid = int(wait_for(lambda: marker.exists() and marker.read_text().strip(), "the run's process id", 30,
                       ctx.diagnostics))  # the shell creates the file before it writes the id: wait for the id
    check(process_alive(pid), "the endless run is not running")
    ctx.press("Down", shows=r"enter to view tasks", what="the task line focused")
    ctx.press("Enter", shows=r"x to stop", what="the task panel")
    ctx.press("x", gone=r"x to stop", what="the task stopped")
    # The panel goes back to its list, now empty.
    ctx.wait_pane(r"No tasks currently running", "the panel's empty list", 10, mark)
    wait_for(lambda: ctx.metric("flowgate_mcp_requests_total", method="tasks/cancel", outcome="ok") > cancels,
             "flowgate to answer tasks/cancel", 15, ctx.diagnostics)
    wait_for(lambda: not process_alive(pid), f"the run's process {pid} to end", 15, ctx.diagnostics)
    check("cancelled" in ctx.audit_of(execution), f"flowgate's audit for the stopped run: {ctx.audit_of(execution)}")
    ctx.press("Escape", gone=r"No tasks currently running", what="the panel closed")
    print(f"ok  stop from the task panel (down, Enter, x): flowgate got tasks/cancel and the run's process {pid} ended")


def stop_by_model(ctx: Context, tool: str, arguments: dict[str, Any], execution_ended: Callable[[str], bool]) -> None:
    """The model stops the background task with Claude Code's TaskStop tool."""
    cancels = ctx.metric("flowgate_mcp_requests_total", method="tasks/cancel")
    local_task, execution, mark = background_task(ctx, tool, arguments)
    ctx.prompt(f'CALL TaskStop {{"task_id": "{local_task}"}}')
    wait_for(lambda: ctx.metric("flowgate_mcp_requests_total", method="tasks/cancel", outcome="ok") > cancels,
             "flowgate to answer tasks/cancel", 30, ctx.diagnostics)
    wait_for(lambda: "cancelled" in ctx.audit_of(execution), "flowgate's audit line for the cancel", 15, ctx.diagnostics)
    wait_for(lambda: execution_ended(execution), f"the execution {execution} to end", 30, ctx.diagnostics)
    print(f"ok  stop by the model (TaskStop {local_task}): flowgate got tasks/cancel and {tool}'s execution ended")


def process_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def sfn_status(moto_url: str, execution: str) -> str:
    import boto3  # the moto venv's; only the Step Functions flows need it

    sfn = boto3.client("stepfunctions", endpoint_url=moto_url, region_name="us-east-1",
                       aws_access_key_id="test", aws_secret_access_key="test")
    return sfn.describe_execution(executionArn=execution)["status"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claude", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--mcp-url", required=True)
    parser.add_argument("--metrics-url", required=True)
    parser.add_argument("--server-log", required=True)
    parser.add_argument("--model-record", required=True)
    parser.add_argument("--moto-url")
    parser.add_argument("--flowgate-bin", required=True, help="for the stdio configuration")
    parser.add_argument("--manifest", required=True, help="a local-engine manifest, for the stdio configuration")
    parser.add_argument("--lambda-url", help="flowgate on an AWS_IAM Function URL (the Lambda emulator); "
                        "its IAM key comes in CC_LAMBDA_KEY (AKID:SECRET)")
    parser.add_argument("--lambda-proxy", help="mcp-proxy-for-aws")
    parser.add_argument("--only", help="run only the flows whose names contain this (and the configuration)")
    args = parser.parse_args()
    ctx = Context(args)
    ctx.project.mkdir(parents=True, exist_ok=True)
    ctx.markers.mkdir(parents=True, exist_ok=True)
    moto = ctx.moto_url
    flows: list[tuple[str, Callable[[], None]]] = [
        ("configure", lambda: configure(ctx)),
        ("print local", lambda: print_mode(ctx, "quick_report", {"days": 2}, "Quick report for 2 days is ready")),
        ("print local task required", lambda: print_mode_needs_tasks(ctx)),
        ("print local timeout", lambda: print_mode_timeout(ctx)),
    ]
    if moto:
        flows.append(("print stepfunctions", lambda: print_mode(
            ctx, "etl", {"name": "print"}, '{"greeting":"hello print","waited":1}')))
    if args.lambda_url and args.lambda_proxy:
        akid, _, secret = os.environ.get("CC_LAMBDA_KEY", "").partition(":")
        flows.append(("print lambda iam", lambda: lambda_iam(ctx, args.lambda_url, args.lambda_proxy, akid, secret)))
    flows += [
        ("interactive start", ctx.start_pane),
        ("interactive local", lambda: task_to_result(ctx, "long_report", {"days": 4, "seconds": 3},
                                                     "Report for 4 days is ready")),
    ]
    if moto:
        flows.append(("interactive stepfunctions", lambda: task_to_result(
            ctx, "etl", {"name": "pane"}, '{"greeting":"hello pane","waited":1}')))
    flows += [
        ("interactive approval", lambda: approval_accepted(ctx)),
        ("interactive approval later", lambda: approval_later_declined(ctx)),
        ("interactive approval elsewhere", lambda: approval_answered_elsewhere(ctx)),
        ("interactive stop panel", lambda: stop_from_panel(ctx)),
    ]
    if moto:
        flows.append(("interactive stop stepfunctions", lambda: stop_by_model(
            ctx, "etl_long", {"name": "stop"}, lambda arn: sfn_status(moto, arn) == "ABORTED")))
    if args.only:
        wanted = [name for name, _ in flows if args.only in name]
        interactive = any(name.startswith("interactive") for name in wanted)
        flows = [(n, f) for n, f in flows
                 if n in wanted or n == "configure" or (n == "interactive start" and interactive)]
    try:
        for _, flow in flows:
            flow()
        if ctx.longest_id:
            print(f"ok  flowgate's longest task id in these flows: {ctx.longest_id} characters "
                  f"(Claude Code accepts up to {CLAUDE_CODE_TASK_ID_LIMIT})")
    except Failure as e:
        print(f"FAILED: {e}", file=sys.stderr)
        sys.exit(1)
    finally:
        ctx.stop_pane()


if __name__ == "__main__":
    main()
