"""Checks what the MCP Inspector CLI printed (`--format json`) in scripts/clients.

    inspector_check.py tools FILE           the tools/list answer names both tools
    inspector_check.py call FILE SECONDS    long_report (task: required) finished with its result,
                                            no sooner than its 2 s of work
"""

from __future__ import annotations

import json
import sys


def main(argv: list[str]) -> None:
    kind, path = argv[1], argv[2]
    with open(path, encoding="utf-8") as f:
        answer = json.load(f)
    if "result" not in answer:
        sys.exit(f"the Inspector reported an error: {answer!r}")
    result = answer["result"]
    if kind == "tools":
        names = {tool["name"] for tool in result["tools"]}
        if not {"long_report", "approve_deploy"} <= names:
            sys.exit(f"tools/list returned {sorted(names)}")
        print(f"ok  tools/list: {sorted(names)}")
    elif kind == "call":
        took = int(argv[3])
        text = "".join(block.get("text", "") for block in result.get("content", []))
        if result.get("isError") or text != "Report for 5 days is ready":
            sys.exit(f"long_report (task: required) returned {result!r}")
        if took < 2:
            sys.exit(f"long_report finished in {took}s, before its 2 s of work")
        print(f"ok  task tool long_report ran as a task and finished in about {took}s: {text!r}")
    else:
        sys.exit(f"unknown check {kind!r}")


if __name__ == "__main__":
    main(sys.argv)
