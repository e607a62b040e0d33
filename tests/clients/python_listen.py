"""Drives flowgate's `subscriptions/listen` with the shipped Python client, `mcp` 2.x.

Run by scripts/clients against flowgate serving a copy of tests/clients/tools.yaml with
FLOWGATE_WATCH=true (the script rewrites the copy, which flowgate reloads):

    python tests/clients/python_listen.py http://127.0.0.1:PORT/mcp /path/to/the/copy.yaml

Everything goes through the package's own public client API, unmodified: `mcp.Client` (which
negotiates 2026-07-28 through `server/discover`), `Client.listen(tools_list_changed=True)` (which
opens the stream and waits for the acknowledgement), and `list_tools`. The flow: the server
advertises `tools.listChanged`; a listener is acknowledged for the tool list; a tool is added to
the manifest; the listener yields `ToolsListChanged` and the client's next `tools/list` has the new
tool; the manifest is put back. Any failure raises, and the process exits non-zero.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from mcp import Client
from mcp.shared.subscriptions import ToolsListChanged

ADDED = """
  - name: added_by_reload
    description: A tool that a manifest reload added.
    input_schema: { type: object }
    target:
      engine: local
      command: ["/bin/sh", "-c", "echo '{}'"]
"""


def check(condition: bool, what: str) -> None:
    if not condition:
        raise AssertionError(what)


async def names(client: Client) -> set[str]:
    listed = await client.list_tools()
    return {tool.name for tool in listed.tools}


async def main(url: str, manifest: Path) -> None:
    original = manifest.read_text()
    async with Client(url) as client:
        capabilities = client.session.server_capabilities if hasattr(client, "session") else None
        tools_capability = getattr(capabilities, "tools", None)
        check(
            tools_capability is not None and tools_capability.list_changed is True,
            f"the server does not advertise tools.listChanged: {capabilities!r}",
        )
        before = await names(client)
        check("added_by_reload" not in before, f"the tool is there before the reload: {before}")
        async with client.listen(tools_list_changed=True) as subscription:
            check(
                subscription.honored.tools_list_changed is True,
                f"the acknowledgement does not honour toolsListChanged: {subscription.honored!r}",
            )
            print("ok  listen acknowledged for the tool list")
            try:
                temporary = manifest.with_suffix(".tmp")
                temporary.write_text(original.rstrip("\n") + "\n" + ADDED)
                temporary.replace(manifest)
                event = await asyncio.wait_for(anext(subscription), timeout=30)
                check(isinstance(event, ToolsListChanged), f"the listener got {event!r}")
                print("ok  the listener got notifications/tools/list_changed after the reload")
                after = await names(client)
                check("added_by_reload" in after, f"tools/list after the change: {sorted(after)}")
                print(f"ok  the client's tools/list now has the added tool ({len(after)} tools)")
            finally:
                temporary = manifest.with_suffix(".tmp")
                temporary.write_text(original)
                temporary.replace(manifest)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2])))
