"""Drives flowgate with the shipped Python client stack: `mcp` 2.x and `fastmcp-tasks`' client extension.

Run by scripts/clients against flowgate serving tests/clients/tools.yaml on the local engine:

    python tests/clients/python_tasks.py http://127.0.0.1:PORT/mcp

Everything goes through the packages' own public client API, unmodified: `fastmcp.Client` (which
negotiates 2026-07-28 through `server/discover` and advertises `io.modelcontextprotocol/tasks`
because importing `fastmcp_tasks` registers its client extension), `call_tool` (which polls
`tasks/get` to the end transparently), `call_tool_task` / `ToolTask` (the explicit handle) and the
package's `tasks/get` request model sent with `ClientSession.send_request`. Each flow asserts what a
user would see; any failure raises, and the process exits non-zero.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import fastmcp_tasks  # noqa: F401  (the import registers the tasks client extension on every Client)
from fastmcp import Client
from fastmcp.exceptions import ToolError
from fastmcp_tasks import call_tool_task
from fastmcp_tasks.client_models import ClientGetTaskResult, GetTaskRequest, GetTaskRequestParams
from mcp.shared.exceptions import MCPError

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"


def check(condition: bool, what: str) -> None:
    if not condition:
        raise AssertionError(what)


def text_of(result: Any) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


class Approver:
    """An elicitation handler that approves and records each question it was asked."""

    def __init__(self) -> None:
        self.questions: list[tuple[str, dict[str, Any]]] = []

    async def __call__(self, message: str, response_type: Any, params: Any, context: Any) -> dict[str, Any]:
        self.questions.append((message, dict(params.requested_schema)))
        return {"confirm": True}


async def long_tool_to_completion(client: Client) -> None:
    """A long `task: required` tool through plain `call_tool`: the extension polls it to the end."""
    started = time.monotonic()
    result = await client.call_tool("long_report", {"days": 7, "seconds": 2}, timeout=60)
    took = time.monotonic() - started
    check(not result.is_error, f"long_report failed: {text_of(result)}")
    check(text_of(result) == "Report for 7 days is ready", f"long_report returned {text_of(result)!r}")
    check(took >= 2, f"long_report finished in {took:.2f}s, before its 2 s of work: it did not run as a task")
    print(f"ok  long tool completed through tasks/get polling in {took:.1f}s: {text_of(result)!r}")


async def approval_through_tasks_update(client: Client, approver: Approver) -> None:
    """An approval: the task parks in input_required; the client answers through tasks/update."""
    task = await call_tool_task(client, "approve_deploy", {"service": "billing"}, timeout=30)
    check(task.create_result.result_type == "task", "approve_deploy did not return a CreateTaskResult")
    parked = await task.wait(state="input_required", timeout=30)
    requests = parked.input_requests or {}
    check(len(requests) == 1, f"expected one input request, got {requests!r}")
    (request,) = requests.values()
    check(request.get("method") == "elicitation/create", f"input request is not an elicitation: {request!r}")
    # result() answers the parked request through the client's elicitation handler and
    # delivers the answer with tasks/update (inputResponses), then polls to the end.
    result = await task.result()
    check(text_of(result) == "Deployed billing", f"approve_deploy returned {text_of(result)!r}")
    check(len(approver.questions) == 1, f"the elicitation handler was asked {len(approver.questions)} times")
    message, schema = approver.questions[0]
    check(message == "Deploy billing to production?", f"unexpected question {message!r}")
    check("confirm" in schema.get("properties", {}), f"unexpected requestedSchema {schema!r}")
    final = await task.status()
    check(final.status == "completed", f"after the answer the task is {final.status}")
    print(f"ok  approval answered through tasks/update: {text_of(result)!r}")


async def cancel(client: Client) -> None:
    """A cancel: tasks/cancel on a running task ends it cancelled, and its result says so."""
    task = await call_tool_task(client, "long_report", {"days": 30, "seconds": 60}, timeout=30)
    running = await task.wait(state="working", timeout=10)
    check(running.task_id == task.task_id, "tasks/get answered for another task")
    started = time.monotonic()
    await task.cancel()
    final = await task.wait(timeout=20)
    check(final.status == "cancelled", f"after tasks/cancel the task is {final.status}")
    check(time.monotonic() - started < 20, "the cancel took as long as the work")
    try:
        await task.result()
    except ToolError as err:
        check("cancelled" in str(err), f"unexpected error for a cancelled task: {err}")
    else:
        raise AssertionError("a cancelled task's result() did not raise")
    print(f"ok  cancel: task {task.task_id[:16]}... is {final.status}")


async def forged_task_id_refused(client: Client) -> None:
    """Forged task ids (made up, or a real one with one character changed) get -32602."""
    task = await call_tool_task(client, "long_report", {"days": 1, "seconds": 0}, timeout=30)
    await task.wait(timeout=30)
    real = task.task_id
    flipped = real[:-2] + ("A" if real[-2] != "A" else "B") + real[-1]
    for forged in ("task-0000000000000000", flipped):
        try:
            await client.session.send_request(
                GetTaskRequest(params=GetTaskRequestParams(task_id=forged)), ClientGetTaskResult
            )
        except MCPError as err:
            check(err.code == -32602, f"forged id {forged[:24]!r} got error {err.code}: {err.message}")
        else:
            raise AssertionError(f"tasks/get answered for forged task id {forged[:24]!r}")
    print("ok  forged task ids refused with -32602")


async def main(url: str) -> None:
    approver = Approver()
    async with Client(url, elicitation_handler=approver, timeout=30) as client:
        check(client.protocol_version == "2026-07-28", f"negotiated {client.protocol_version}, not 2026-07-28")
        tools = {tool.name for tool in await client.list_tools()}
        check({"long_report", "approve_deploy"} <= tools, f"tools/list returned {sorted(tools)}")
        print(f"ok  connected with protocol {client.protocol_version}; tools: {sorted(tools)}")
        await long_tool_to_completion(client)
        await approval_through_tasks_update(client, approver)
        await cancel(client)
        await forged_task_id_refused(client)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python_tasks.py MCP_URL")
    asyncio.run(main(sys.argv[1]))
