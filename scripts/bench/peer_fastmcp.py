"""The peer for scripts/bench: a FastMCP server with fastmcp-tasks (in-memory task store),
offering the same long-running tool as flowgate's bundled example. Only for benchmarking."""

import asyncio
import sys

from fastmcp import FastMCP
from fastmcp_tasks import TasksExtension

mcp = FastMCP("peer")
mcp.add_extension(TasksExtension())


@mcp.tool(task=True)
async def long_job(steps: int = 5) -> dict:
    """A long-running job that sleeps one second per step."""
    for _ in range(steps):
        await asyncio.sleep(1)
    return {"steps": steps, "finished": True}


if __name__ == "__main__":
    mcp.run(transport="http", host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
