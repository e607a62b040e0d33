"""Drives flowgate with the Python `mcp` 1.x client's experimental tasks API (protocol 2025-11-25).

Run by scripts/clients against flowgate serving tests/clients/tools.yaml on the local engine:

    python tests/clients/python_tasks_2025.py http://127.0.0.1:PORT/mcp
    python tests/clients/python_tasks_2025.py --stdio FLOWGATE_BIN MANIFEST   (the same flows on stdio)
    python tests/clients/python_tasks_2025.py FUNCTION_URL/mcp --lambda SECONDS   (flowgate on AWS Lambda)

With `--lambda SECONDS` (flowgate as a Lambda function whose timeout is shorter than SECONDS), a
task that runs SECONDS is also fetched with tasks/result at once: each hold ends before the
invocation's deadline, and the client's own resumable-stream reconnect (GET with Last-Event-ID)
resumes it until the result comes.

Everything goes through the package's own public client API, unmodified: `streamable_http_client`
(or `stdio_client`, which starts `flowgate serve --stdio` with a fresh state folder and key),
`ClientSession.initialize` (which negotiates 2025-11-25), `list_tools` (each tool's
`execution.taskSupport`), `session.experimental`'s `call_tool_as_task`, `get_task`,
`get_task_result` (`tasks/result`), `list_tasks` and `cancel_task`, and the session's
`elicitation_callback`, which answers the question `tasks/result` streams for an approval. Each flow asserts what a user
would see; any failure raises, and the process exits non-zero.
"""

from __future__ import annotations

import asyncio
import base64
import os
import secrets
import sys
import tempfile
import time
import warnings

import mcp.types as types
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import McpError

warnings.filterwarnings("ignore", category=DeprecationWarning)


def check(condition: bool, what: str) -> None:
    if not condition:
        raise AssertionError(what)


def text_of(result: types.CallToolResult) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


async def negotiated(session: ClientSession) -> None:
    init = await session.initialize()
    check(init.protocolVersion == "2025-11-25", f"negotiated {init.protocolVersion}")
    tasks = init.capabilities.tasks
    check(tasks is not None and tasks.requests is not None and tasks.requests.tools is not None,
          f"flowgate declares no tasks.requests.tools.call: {init.capabilities!r}")
    tools = {t.name: t for t in (await session.list_tools()).tools}
    support = {name: (t.execution.taskSupport if t.execution else None) for name, t in tools.items()}
    check(support.get("long_report") == "required", f"taskSupport: {support}")
    print(f"ok  initialized with 2025-11-25; tools and their taskSupport: {support}")


async def long_tool_to_completion(session: ClientSession) -> str:
    started = time.monotonic()
    created = await session.experimental.call_tool_as_task("long_report", {"days": 3, "seconds": 2})
    task_id = created.task.taskId
    check(created.task.status == "working", f"created as {created.task.status}")
    check(created.task.pollInterval is not None, "no pollInterval")
    while True:
        status = await session.experimental.get_task(task_id)
        if status.status in ("completed", "failed", "cancelled"):
            break
        await asyncio.sleep((status.pollInterval or 500) / 1000)
    check(status.status == "completed", f"long_report ended {status.status}: {status.statusMessage}")
    result = await session.experimental.get_task_result(task_id, types.CallToolResult)
    took = time.monotonic() - started
    check(text_of(result) == "Report for 3 days is ready", f"long_report returned {text_of(result)!r}")
    check(took >= 2, f"finished in {took:.2f}s, before its 2 s of work")
    print(f"ok  long tool ran as a task, polled with tasks/get, result through tasks/result in {took:.1f}s")
    return task_id


async def result_blocks_until_done(session: ClientSession) -> None:
    created = await session.experimental.call_tool_as_task("long_report", {"days": 2, "seconds": 2})
    started = time.monotonic()
    result = await session.experimental.get_task_result(created.task.taskId, types.CallToolResult)
    took = time.monotonic() - started
    check(text_of(result) == "Report for 2 days is ready", f"tasks/result returned {text_of(result)!r}")
    check(took >= 1, f"tasks/result answered in {took:.2f}s: it did not wait for the task")
    print(f"ok  tasks/result held the request until the task finished ({took:.1f}s)")


class Approver:
    """The session's elicitation callback: approves, and records each question."""

    def __init__(self) -> None:
        self.questions: list[types.ElicitRequestParams] = []

    async def __call__(self, context, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.questions.append(params)
        return types.ElicitResult(action="accept", content={"confirm": True})


async def approval_through_tasks_result(session: ClientSession, approver: Approver) -> None:
    """The revision's own input path: the task turns input_required; tasks/result streams the
    question as elicitation/create, the session's callback answers it, and the result follows."""
    created = await session.experimental.call_tool_as_task("approve_deploy", {"service": "billing"})
    task_id = created.task.taskId
    for _ in range(100):
        status = await session.experimental.get_task(task_id)
        if status.status == "input_required":
            break
        await asyncio.sleep(0.1)
    check(status.status == "input_required", f"approve_deploy is {status.status}, not input_required")
    result = await session.experimental.get_task_result(task_id, types.CallToolResult)
    check(text_of(result) == "Deployed billing", f"approve_deploy returned {text_of(result)!r}")
    check(len(approver.questions) == 1, f"the callback was asked {len(approver.questions)} times")
    question = approver.questions[0]
    check(question.message == "Deploy billing to production?", f"unexpected question {question.message!r}")
    print(f"ok  approval: tasks/result asked {question.message!r} through elicitation/create; "
          f"the answer was delivered and the tool said {text_of(result)!r}")


async def cancel(session: ClientSession) -> None:
    created = await session.experimental.call_tool_as_task("long_report", {"days": 9, "seconds": 60})
    cancelled = await session.experimental.cancel_task(created.task.taskId)
    check(cancelled.status == "cancelled", f"cancel answered {cancelled.status}")
    for _ in range(50):
        status = await session.experimental.get_task(created.task.taskId)
        if status.status == "cancelled":
            break
        await asyncio.sleep(0.2)
    check(status.status == "cancelled", f"after cancel the task is {status.status}")
    try:
        await session.experimental.cancel_task(created.task.taskId)
    except McpError as e:
        check(e.error.code == -32602, f"cancelling a finished task: {e.error}")
    else:
        raise AssertionError("cancelling a cancelled task was accepted")
    print("ok  cancel: the task is cancelled, and a second cancel is refused with -32602")


async def listed(session: ClientSession, task_id: str) -> None:
    """tasks/list shows the caller's tasks. Its ids are freshly sealed handles (a handle is
    sealed with a random nonce), so the task is found by what tasks/get says of it."""
    mine = await session.experimental.get_task(task_id)
    tasks = (await session.experimental.list_tasks()).tasks
    check(len(tasks) >= 4, f"tasks/list shows {len(tasks)} tasks; this client started 4")
    same = [t for t in tasks if t.createdAt == mine.createdAt and t.status == mine.status]
    check(len(same) == 1, f"tasks/list has {len(same)} tasks like {task_id[:20]}...")
    again = await session.experimental.get_task(same[0].taskId)
    check(again.createdAt == mine.createdAt, "a listed id does not open the same task")
    print(f"ok  tasks/list shows this caller's {len(tasks)} tasks, and its ids open them")


async def forged(session: ClientSession, task_id: str) -> None:
    for bad in [task_id[:-4] + "AAAA", "fg1.nope.x", "not-a-task"]:
        try:
            await session.experimental.get_task(bad)
        except McpError as e:
            check(e.error.code == -32602, f"forged id {bad[:16]}... gave {e.error.code}")
        else:
            raise AssertionError(f"forged id {bad[:16]}... was accepted")
    print("ok  forged task ids refused with -32602")


async def stepfunctions(session: ClientSession) -> None:
    """The same flows against Step Functions tools (moto): `etl` waits 2 s, `etl_long` 600 s."""
    init = await session.initialize()
    check(init.protocolVersion == "2025-11-25", f"negotiated {init.protocolVersion}")
    created = await session.experimental.call_tool_as_task("etl", {"name": "Ada"})
    result = await session.experimental.get_task_result(created.task.taskId, types.CallToolResult)
    check(result.structuredContent == {"greeting": "hello Ada", "waited": 2} or
          "hello Ada" in text_of(result), f"etl returned {result!r}")
    final = await session.experimental.get_task(created.task.taskId)
    check(final.status == "completed", f"etl ended {final.status}")
    print(f"ok  a Step Functions execution ran as a task; tasks/result gave {text_of(result)!r}")
    long = await session.experimental.call_tool_as_task("etl_long", {"name": "Bo"})
    cancelled = await session.experimental.cancel_task(long.task.taskId)
    check(cancelled.status == "cancelled", f"cancel answered {cancelled.status}")
    for _ in range(50):
        status = await session.experimental.get_task(long.task.taskId)
        if status.status == "cancelled":
            break
        await asyncio.sleep(0.2)
    check(status.status == "cancelled", f"after cancel the execution's task is {status.status}")
    print("ok  cancel stopped the Step Functions execution")
    await forged(session, created.task.taskId)


async def outlives_the_function(session: ClientSession, seconds: float) -> None:
    """A task longer than the function's timeout, fetched with tasks/result at once."""
    created = await session.experimental.call_tool_as_task("long_report", {"days": 6, "seconds": seconds})
    started = time.monotonic()
    result = await session.experimental.get_task_result(created.task.taskId, types.CallToolResult)
    took = time.monotonic() - started
    check(text_of(result) == "Report for 6 days is ready", f"tasks/result returned {text_of(result)!r}")
    check(took >= seconds - 1, f"tasks/result answered in {took:.1f}s, before the task's {seconds}s")
    print(f"ok  a {seconds:g}s task outlived the function's timeout: tasks/result resumed until the "
          f"result ({took:.1f}s)")


async def flows(session: ClientSession, approver: Approver) -> None:
    await negotiated(session)
    task_id = await long_tool_to_completion(session)
    await result_blocks_until_done(session)
    await approval_through_tasks_result(session, approver)
    await cancel(session)
    await listed(session, task_id)
    await forged(session, task_id)


async def main(target: str, *rest: str) -> None:
    approver = Approver()
    if target == "--stdio":
        flowgate, manifest = rest[:2]
        with tempfile.TemporaryDirectory() as state:
            env = {
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "HOME": state,
                "FLOWGATE_STATE_DIR": os.path.join(state, "runs"),
                "FLOWGATE_LOG": "warn",
                "FLOWGATE_HANDLE_KEYS": "s1:" + base64.b64encode(secrets.token_bytes(32)).decode(),
            }
            server = StdioServerParameters(
                command=flowgate, args=["serve", "--stdio", "--manifest", manifest], env=env)
            async with stdio_client(server) as (read, write):
                async with ClientSession(read, write, elicitation_callback=approver) as session:
                    await flows(session, approver)
        return
    async with streamable_http_client(target) as (read, write, _):
        async with ClientSession(read, write, elicitation_callback=approver) as session:
            if rest[:1] == ("--stepfunctions",):
                await stepfunctions(session)
                return
            await flows(session, approver)
            if rest[:1] == ("--lambda",):
                await outlives_the_function(session, float(rest[1]))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
