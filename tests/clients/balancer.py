"""Drives three flowgate instances behind nginx with the Python `mcp` 2.x + `fastmcp-tasks` client.

Run by scripts/balancer, which starts the instances (shared handle keys and state folder, each
with its own log and metrics port) and nginx in front of them:

    python tests/clients/balancer.py --round-robin URL --by-name URL --pid-dir DIR \
        NAME=HOST:PORT=METRICS_URL=LOG ...

Nothing but the balancer routes: the client knows one URL. nginx names the instance that
served each answer in `X-Flowgate-Upstream`, which the client records (an httpx event hook on
the client's own HTTP client); the instances' own audit logs and metrics are what the checks
hold to.

- Round robin: one task is started through one instance, polled through all three, answered
  (tasks/update) through a second and cancelled through the third. Round robin sends each
  request to the next instance in turn, so the client picks its moment: it answers after a
  poll that the starting instance served, and cancels after one that the answering instance
  served. Then the task reads `cancelled` through every instance and the command's process is
  gone.
- `hash $http_mcp_name consistent`: a task's requests carry its id in `Mcp-Name` (SEP-2663;
  the request models below declare `taskId` as their name parameter, the SDK's own mechanism
  for it), and every one of them reaches the same instance.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import fastmcp_tasks  # noqa: F401  (the import registers the tasks client extension on every Client)
import httpx2
import mcp_types
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport
from fastmcp_tasks import call_tool_task
from fastmcp_tasks.client_models import (
    CancelTaskRequest,
    CancelTaskRequestParams,
    ClientGetTaskResult,
    GetTaskRequest,
    GetTaskRequestParams,
    UpdateTaskRequest,
    UpdateTaskRequestParams,
)

TOOL = "approve_then_work"
UPSTREAM = "x-flowgate-upstream"
# Bounds on waiting for a state, so that a broken run fails instead of hanging; none of them is
# a speed requirement.
STATE_WAIT_S = 60.0
POLL_S = 0.1


def check(condition: bool, what: str) -> None:
    if not condition:
        raise AssertionError(what)


# The same requests, declaring `taskId` as the name the SDK mirrors into `Mcp-Name`, as SEP-2663
# asks of tasks/get, tasks/update and tasks/cancel.
class NamedGetTaskRequest(GetTaskRequest):
    name_param: ClassVar[str | None] = "taskId"


class NamedUpdateTaskRequest(UpdateTaskRequest):
    name_param: ClassVar[str | None] = "taskId"


class NamedCancelTaskRequest(CancelTaskRequest):
    name_param: ClassVar[str | None] = "taskId"


@dataclass
class Instance:
    name: str
    upstream: str
    metrics_url: str
    log: Path

    def metrics(self) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        """This instance's samples, by metric name and labels."""
        with urllib.request.urlopen(self.metrics_url, timeout=10) as answer:
            text = answer.read().decode()
        out = {}
        for line in text.splitlines():
            m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)", line)
            if not m or line.startswith("#"):
                continue
            labels = frozenset(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
            out[(m.group(1), labels)] = float(m.group(3))
        return out

    def audit(self) -> list[dict[str, Any]]:
        """The audit events this instance logged (JSON lines, target flowgate::audit)."""
        events = []
        for line in self.log.read_text().splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get("target") != "flowgate::audit":
                continue
            fields = dict(entry.get("fields") or {})
            fields.update({k: v for k, v in entry.items() if k not in ("fields", "span", "spans")})
            events.append(fields)
        return events


def counter(samples: dict, name: str, **labels: str) -> float:
    """The sum of a counter's samples whose labels include `labels`."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= set(ls))


@dataclass
class Recorder:
    """The method and serving instance of every answer the client received."""

    by_upstream: dict[str, str]
    seen: list[tuple[str, str]] = field(default_factory=list)

    async def on_response(self, response: httpx2.Response) -> None:
        method = response.request.headers.get("mcp-method", "?")
        upstream = response.headers.get(UPSTREAM, "")
        self.seen.append((method, self.by_upstream.get(upstream, f"unknown upstream {upstream!r}")))

    def last(self, method: str) -> str:
        """The instance that served the last answer, which must be to `method`."""
        check(bool(self.seen), f"no answer recorded for {method}")
        seen_method, instance = self.seen[-1]
        check(seen_method == method, f"the last answer recorded was to {seen_method}, not {method}")
        return instance


def client_for(url: str, recorder: Recorder) -> Client:
    def factory(**kwargs: Any) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(event_hooks={"response": [recorder.on_response]}, **kwargs)

    return Client(StreamableHttpTransport(url, httpx_client_factory=factory), timeout=30)


class Driver:
    """Sends the task requests one at a time and notes which instance served each."""

    def __init__(self, client: Client, recorder: Recorder, named: bool) -> None:
        self.client = client
        self.recorder = recorder
        self.named = named
        self.polls: Counter[str] = Counter()

    async def get(self, task_id: str) -> tuple[ClientGetTaskResult, str]:
        kind = NamedGetTaskRequest if self.named else GetTaskRequest
        result = await self.client.session.send_request(
            kind(params=GetTaskRequestParams(task_id=task_id)), ClientGetTaskResult
        )
        instance = self.recorder.last("tasks/get")
        self.polls[instance] += 1
        return result, instance

    async def poll_until(self, task_id: str, what: str, ready: Any, served_by: str | None = None) -> ClientGetTaskResult:
        """Polls until `ready(task)`, and, with `served_by`, until that instance served the poll."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + STATE_WAIT_S
        while True:
            task, instance = await self.get(task_id)
            if ready(task) and (served_by is None or instance == served_by):
                return task
            check(task.status not in ("completed", "failed") or ready(task), f"waiting for {what}, the task is {task.status}: {task!r}")
            check(loop.time() < deadline, f"no {what} within {STATE_WAIT_S:.0f} s; last seen {task.status}")
            await asyncio.sleep(POLL_S)

    async def update(self, task_id: str, key: str) -> str:
        kind = NamedUpdateTaskRequest if self.named else UpdateTaskRequest
        answer = {"action": "accept", "content": {"confirm": True}}
        await self.client.session.send_request(
            kind(params=UpdateTaskRequestParams(task_id=task_id, input_responses={key: answer})), mcp_types.Result
        )
        return self.recorder.last("tasks/update")

    async def cancel(self, task_id: str) -> str:
        kind = NamedCancelTaskRequest if self.named else CancelTaskRequest
        await self.client.session.send_request(kind(params=CancelTaskRequestParams(task_id=task_id)), mcp_types.Result)
        return self.recorder.last("tasks/cancel")


async def start(client: Client, recorder: Recorder, label: str) -> tuple[str, str]:
    """tools/call through the balancer: (task id, the instance that started it)."""
    task = await call_tool_task(client, TOOL, {"label": label}, timeout=30)
    check(task.create_result.result_type == "task", f"{TOOL} did not answer with a task")
    return task.task_id, recorder.last("tools/call")


async def wait_process_gone(pid_dir: Path, label: str) -> int:
    """The pid the command recorded after the approval, once no such process is left."""
    pid = int((pid_dir / f"{label}.pid").read_text().strip())
    loop = asyncio.get_running_loop()
    deadline = loop.time() + STATE_WAIT_S
    while Path(f"/proc/{pid}").exists():
        status = Path(f"/proc/{pid}/status")
        try:
            if re.search(r"^State:\s+Z", status.read_text(), re.M):
                break  # ended, waiting only to be reaped
        except OSError:
            break
        check(loop.time() < deadline, f"the command's process {pid} still runs {STATE_WAIT_S:.0f} s after the cancel")
        await asyncio.sleep(POLL_S)
    return pid


def snapshot(instances: list[Instance]) -> dict[str, dict]:
    return {i.name: i.metrics() for i in instances}


def delta(before: dict, after: dict, name: str, **labels: str) -> float:
    return counter(after, name, **labels) - counter(before, name, **labels)


def audit_for(instances: list[Instance], execution: str) -> dict[str, list[str]]:
    """For each instance, the audit events it logged for `execution`, in order."""
    return {i.name: [e.get("event") for e in i.audit() if e.get("execution") == execution] for i in instances}


def execution_of(instances: list[Instance], started_on: str, label_count: int) -> str:
    """The execution the `started_on` instance logged as its `label_count`-th start of the tool."""
    (instance,) = [i for i in instances if i.name == started_on]
    starts = [e for e in instance.audit() if e.get("event") == "started" and e.get("tool") == TOOL]
    check(len(starts) >= label_count, f"instance {started_on} logged {len(starts)} starts, expected {label_count}")
    execution = starts[label_count - 1].get("execution")
    check(isinstance(execution, str) and execution != "", f"the started event names no execution: {starts[label_count - 1]!r}")
    return execution


def input_key(task: ClientGetTaskResult) -> str:
    requests = task.input_requests or {}
    check(len(requests) == 1, f"expected one question, got {requests!r}")
    (key, request), = requests.items()
    check(request.get("method") == "elicitation/create", f"the question is not an elicitation: {request!r}")
    return key


async def round_robin(url: str, instances: list[Instance], pid_dir: Path) -> None:
    by_upstream = {i.upstream: i.name for i in instances}
    recorder = Recorder(by_upstream)
    before = snapshot(instances)
    async with client_for(url, recorder) as client:
        driver = Driver(client, recorder, named=False)
        task_id, started_on = await start(client, recorder, "rr")
        # Answer right after a poll the starting instance served: round robin then sends the
        # answer to another one.
        parked = await driver.poll_until(task_id, "the question", lambda t: t.status == "input_required", served_by=started_on)
        answered_on = await driver.update(task_id, input_key(parked))
        check(answered_on != started_on, f"tasks/update reached {answered_on}, the instance that started the task")
        await driver.poll_until(
            task_id, "the work after the approval",
            lambda t: t.status == "working" and t.status_message == "working after the approval",
            served_by=answered_on,
        )
        cancelled_on = await driver.cancel(task_id)
        check(cancelled_on not in (started_on, answered_on),
              f"tasks/cancel reached {cancelled_on}; the task was started on {started_on} and answered on {answered_on}")
        # Every instance, in turn, reads it cancelled.
        readers: set[str] = set()
        deadline = asyncio.get_running_loop().time() + STATE_WAIT_S
        while readers != {i.name for i in instances}:
            task, instance = await driver.get(task_id)
            check(task.status in ("working", "cancelled"), f"after tasks/cancel the task is {task.status}")
            if task.status == "cancelled":
                readers.add(instance)
            check(asyncio.get_running_loop().time() < deadline, f"only {sorted(readers)} read the task cancelled")
            await asyncio.sleep(POLL_S)
    pid = await wait_process_gone(pid_dir, "rr")
    after = snapshot(instances)

    # What each instance says it did.
    execution = execution_of(instances, started_on, 1)
    events = audit_for(instances, execution)
    for i in instances:
        want = {started_on: ["started"], answered_on: ["answered"], cancelled_on: ["cancelled"]}[i.name]
        got = [e for e in events[i.name] if e != "finished"]
        check(got == want, f"instance {i.name} logged {got} for the execution, expected {want}")
        for name, value in (("flowgate_tasks_started_total", i.name == started_on),
                            ("flowgate_tasks_answered_total", i.name == answered_on)):
            n = delta(before[i.name], after[i.name], name, tool=TOOL)
            check(n == int(value), f"instance {i.name}: {name} grew by {n}, expected {int(value)}")
        n = delta(before[i.name], after[i.name], "flowgate_tasks_cancelled_total", tool=TOOL, reason="client")
        check(n == int(i.name == cancelled_on), f"instance {i.name}: {n} client cancels counted")
        gets = delta(before[i.name], after[i.name], "flowgate_tasks_get_total", tool=TOOL)
        check(gets == driver.polls[i.name] and gets > 0,
              f"instance {i.name} counted {gets} tasks/get; the balancer sent it {driver.polls[i.name]}")
    polls = ", ".join(f"{name} {driver.polls[name]}" for name in sorted(driver.polls))
    print(f"ok  round robin: started on {started_on}, polled on all three ({polls}), answered on {answered_on}, "
          f"cancelled on {cancelled_on}; each instance's audit log and metrics agree; the command (pid {pid}) ended")


async def by_mcp_name(url: str, instances: list[Instance], pid_dir: Path, tasks: int) -> None:
    by_upstream = {i.upstream: i.name for i in instances}
    recorder = Recorder(by_upstream)
    before = snapshot(instances)
    homes: dict[str, str] = {}
    expected_gets: Counter[str] = Counter()
    async with client_for(url, recorder) as client:
        driver = Driver(client, recorder, named=True)
        for n in range(tasks):
            label = f"hash-{n}"
            driver.polls.clear()
            mark = len(recorder.seen)
            task_id, _ = await start(client, recorder, label)
            parked = await driver.poll_until(task_id, "the question", lambda t: t.status == "input_required")
            await driver.update(task_id, input_key(parked))
            await driver.poll_until(task_id, "the work after the approval",
                                    lambda t: t.status_message == "working after the approval")
            await driver.cancel(task_id)
            await driver.poll_until(task_id, "the cancellation", lambda t: t.status == "cancelled")
            await wait_process_gone(pid_dir, label)
            served = {instance for method, instance in recorder.seen[mark:] if method.startswith("tasks/")}
            check(len(served) == 1, f"task {label}'s requests reached {sorted(served)}, not one instance")
            (home,) = served
            homes[label] = home
            expected_gets[home] += sum(driver.polls.values())
    after = snapshot(instances)
    for i in instances:
        gets = delta(before[i.name], after[i.name], "flowgate_tasks_get_total", tool=TOOL)
        check(gets == expected_gets[i.name], f"instance {i.name} counted {gets} tasks/get, expected {expected_gets[i.name]}")
        for name, labels in (("flowgate_tasks_answered_total", {}), ("flowgate_tasks_cancelled_total", {"reason": "client"})):
            n = delta(before[i.name], after[i.name], name, tool=TOOL, **labels)
            want = sum(1 for home in homes.values() if home == i.name)
            check(n == want, f"instance {i.name}: {name} grew by {n}, expected {want}")
    spread = ", ".join(f"{label} on {home}" for label, home in homes.items())
    print(f"ok  hash $http_mcp_name: each task's tasks/get, tasks/update and tasks/cancel reached one instance "
          f"({spread}), as the instances' counts confirm")


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--round-robin", required=True)
    parser.add_argument("--by-name", required=True)
    parser.add_argument("--pid-dir", required=True, type=Path)
    parser.add_argument("instances", nargs=3, help="NAME=HOST:PORT=METRICS_URL=LOG")
    args = parser.parse_args()
    instances = []
    for spec in args.instances:
        name, upstream, metrics_url, log = spec.split("=", 3)
        instances.append(Instance(name, upstream, metrics_url, Path(log)))
    await round_robin(args.round_robin, instances, args.pid_dir)
    await by_mcp_name(args.by_name, instances, args.pid_dir, tasks=3)


if __name__ == "__main__":
    asyncio.run(main())
