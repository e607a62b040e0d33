"""A scripted "model" speaking the Anthropic Messages API, for driving Claude Code without a model.

Claude Code reaches it through ANTHROPIC_BASE_URL (any ANTHROPIC_API_KEY will do). It answers
`POST /v1/messages` (streamed as SSE when the request says `"stream": true`, else one JSON
message) and plays what the conversation's last user turn asks for, so the test steers it
through the prompts it types:

- a user turn whose text holds `CALL <tool> <json>` (the tool's full name, e.g.
  `mcp__flowgate__long_report`, and its arguments as one JSON object) is answered with a
  `tool_use` block for that tool with those arguments;
- a user turn that carries a `tool_result` is answered with the text `TOOL RESULT: <what the
  tool returned>`, so the answer Claude Code prints (and the record below) show what reached
  the model;
- a user turn that carries Claude Code's notice of a background task's end
  (`<task-notification>` ... `<status>S</status>` ... `<result>R</result>`) is answered
  `TASK S: R` (the result, or the summary when there is none);
  when the request offers tools but not that one, the answer is `TOOL NOT OFFERED: <tool>`;
- anything else (Claude Code's side requests too: titles, summaries) is answered `OK`.

Every request is appended to the record file (one JSON object a line: path, the request body)
before it is answered: the test reads it to assert what reached the model. Standard library
only.

    python model_server.py --port 0 --record FILE     # prints "listening on http://127.0.0.1:PORT"
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CALL = re.compile(r"CALL\s+(\S+)\s+(\{.*\})", re.S)
MODEL = "claude-scripted-1"
ids = itertools.count(1)
record_lock = threading.Lock()


def text_of(content: Any) -> str:
    """The text of a message's content (a string, or blocks of which text and tool results count)."""
    if isinstance(content, str):
        return content
    parts = []
    for block in content or []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            parts.append(block.get("text", ""))
        elif block.get("type") == "tool_result":
            parts.append(text_of(block.get("content")))
    return "\n".join(parts)


def reply_for(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The content blocks the script answers this request with."""
    messages = body.get("messages") or []
    last = next((m for m in reversed(messages) if m.get("role") == "user"), None)
    if last is None:
        return [{"type": "text", "text": "OK"}]
    content = last.get("content")
    blocks = content if isinstance(content, list) else []
    results = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]
    if results:
        return [{"type": "text", "text": "TOOL RESULT: " + "\n".join(text_of(b.get("content")) for b in results)}]
    text = text_of(content)
    if "<task-notification>" in text:
        status = re.search(r"<status>(.*?)</status>", text, re.S)
        result = re.search(r"<result>(.*?)</result>", text, re.S) or re.search(r"<summary>(.*?)</summary>", text, re.S)
        return [{"type": "text", "text": "TASK {}: {}".format(status.group(1).strip() if status else "?",
                                                             result.group(1).strip() if result else "")}]
    # The instruction is the last CALL in the turn's text (Claude Code may add reminders around it).
    calls = CALL.findall(text)
    if calls:
        name, arguments = calls[-1]
        try:
            parsed = json.loads(arguments)
        except json.JSONDecodeError:
            return [{"type": "text", "text": f"bad arguments in CALL: {arguments}"}]
        offered = {t.get("name") for t in body.get("tools") or []}
        if name in offered:
            return [{"type": "tool_use", "id": f"toolu_scripted_{next(ids):04d}", "name": name, "input": parsed}]
        if offered:
            # The conversation's request, without the tool: say so, for the test to fail on.
            return [{"type": "text", "text": f"TOOL NOT OFFERED: {name}"}]
        # A side request (a title, a summary: no tools at all) gets plain text.
    return [{"type": "text", "text": "OK"}]


def message(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
    return {
        "id": f"msg_scripted_{next(ids):04d}",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": blocks,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 10},
    }


def sse_events(blocks: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    whole = message(blocks)
    start = dict(whole, content=[], stop_reason=None)
    events: list[tuple[str, dict[str, Any]]] = [("message_start", {"type": "message_start", "message": start})]
    for index, block in enumerate(blocks):
        if block["type"] == "text":
            events.append(("content_block_start", {"type": "content_block_start", "index": index,
                                                   "content_block": {"type": "text", "text": ""}}))
            events.append(("content_block_delta", {"type": "content_block_delta", "index": index,
                                                   "delta": {"type": "text_delta", "text": block["text"]}}))
        else:
            events.append(("content_block_start", {"type": "content_block_start", "index": index,
                                                   "content_block": dict(block, input={})}))
            events.append(("content_block_delta", {"type": "content_block_delta", "index": index,
                                                   "delta": {"type": "input_json_delta",
                                                             "partial_json": json.dumps(block["input"])}}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(("message_delta", {"type": "message_delta",
                                     "delta": {"stop_reason": whole["stop_reason"], "stop_sequence": None},
                                     "usage": {"output_tokens": 10}}))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    record: str = ""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
        sys.stderr.write("model: " + (format % args) + "\n")

    def send_json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_HEAD(self) -> None:  # noqa: N802 (the base class's name)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:  # noqa: N802
        self.send_json(200, {"data": [{"id": MODEL, "type": "model", "display_name": MODEL}], "has_more": False})

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            self.send_json(400, {"type": "error", "error": {"type": "invalid_request_error", "message": "not JSON"}})
            return
        path = self.path.split("?", 1)[0]
        with record_lock, open(self.record, "a", encoding="utf-8") as f:
            f.write(json.dumps({"path": path, "body": body}) + "\n")
        if path.endswith("/count_tokens"):
            self.send_json(200, {"input_tokens": 10})
            return
        if not path.endswith("/messages"):
            self.send_json(404, {"type": "error", "error": {"type": "not_found_error", "message": path}})
            return
        blocks = reply_for(body)
        if not body.get("stream"):
            self.send_json(200, message(blocks))
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        for event, data in sse_events(blocks):
            self.wfile.write(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())
        self.wfile.flush()
        self.close_connection = True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--record", required=True, help="append every request here (JSON lines)")
    args = parser.parse_args()
    Handler.record = args.record
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    print(f"listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
