"""The Lambda emulator's own behaviour, with a scripted runtime (tests/fakes/lambda/runtime_script.py)
in place of flowgate: the invocation headers, the deadline and the sandbox reset after it, one
invocation at a time per sandbox, the 6 MB buffered limit (413 to the runtime, 502 to the URL's
caller), the streaming protocol (prelude, 8 NUL bytes, chunks), SigV4 at the Function URL, the
Invoke API's error objects, sandboxes frozen between invocations (--freeze), and nothing of a
sandbox left when the emulator stops.

    python3 -m unittest tests/fakes/lambda/test_emulator.py     (scripts/test runs it)

The signing proxy needs botocore (scripts/test uses .venv-deploy's Python, which has it).
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import threading
import time
import unittest
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ARN = "arn:aws:sts::123456789012:assumed-role/mcp-client/session-1"


class Emulator:
    def __init__(self, *extra: str, timeout: float = 3.0) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "emulator.py"), "--task-root", HERE,
             "--bootstrap", os.path.join(HERE, "runtime_script.py"), "--timeout", str(timeout),
             "--iam-user", f"AKIDTEST1:secret-one:{ARN}",
             "--iam-user", "AKIDTEST2:secret-two:arn:aws:iam::123456789012:user/other",
             "--exit-with-stdin", *extra],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert self.proc.stdout is not None
        self.urls = json.loads(self.proc.stdout.readline())

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(10)

    def invoke(self, event: dict) -> tuple[int, dict, bytes]:
        req = urllib.request.Request(
            self.urls["invoke_api"] + "/2015-03-31/functions/flowgate/invocations",
            data=json.dumps(event).encode(), method="POST")
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, dict(r.headers), r.read()

    def wait_idle(self) -> None:
        """Returns once no sandbox is busy (within 10 s)."""
        deadline = time.time() + 10
        while self.state()["busy"] and time.time() < deadline:
            time.sleep(0.02)

    def state(self) -> dict:
        with urllib.request.urlopen(self.urls["invoke_api"] + "/_emulator/state") as r:
            return json.loads(r.read())

    def url_call(self, body: dict, signed: bool = True, sign_as: str | None = None):
        base = self.urls["signing_proxy" if signed else "function_url"]
        host, port = base.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        headers = {"content-type": "application/json"}
        if sign_as:
            headers["x-emulator-sign-as"] = sign_as
        conn.request("POST", "/mcp?x=1", body=json.dumps(body), headers=headers)
        return conn.getresponse()


class BufferedMode(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.emu = Emulator()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.emu.close()

    def test_invocation_headers_and_deadline(self) -> None:
        before = time.time() * 1000
        status, _, body = self.emu.invoke({"do": "echo"})
        self.assertEqual(status, 200)
        seen = json.loads(body)
        deadline = int(seen["headers"]["lambda-runtime-deadline-ms"])
        self.assertTrue(before + 2500 <= deadline <= time.time() * 1000 + 3000, deadline - before)
        self.assertIn("lambda-runtime-aws-request-id", seen["headers"])
        self.assertTrue(seen["headers"]["lambda-runtime-invoked-function-arn"].endswith(":function:flowgate"))
        self.assertTrue(seen["headers"]["lambda-runtime-trace-id"].startswith("Root=1-"))
        self.assertNotIn("lambda-runtime-client-context", seen["headers"])
        self.assertEqual(seen["env"]["AWS_LAMBDA_FUNCTION_NAME"], "flowgate")
        self.assertNotIn("HOME", seen["env"], "the environment is Lambda's, not the caller's")

    def test_one_invocation_at_a_time_per_sandbox(self) -> None:
        results = []

        def call() -> None:
            results.append(json.loads(self.emu.invoke({"do": "hold", "seconds": 1})[2]))

        threads = [threading.Thread(target=call) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertTrue(all(r["concurrent"] == 1 for r in results), results)
        self.assertEqual(len({r["pid"] for r in results}), 3, "three sandboxes, three processes")

    def test_oversized_buffered_answer(self) -> None:
        # Both invocations must reach the same sandbox (the first idle one): a sandbox stays
        # busy a moment after its answer went out, so wait until every sandbox is idle.
        self.emu.wait_idle()
        _, headers, body = self.emu.invoke({"do": "big", "bytes": 6_291_600})
        self.assertEqual(json.loads(body)["errorType"], "Function.ResponseSizeTooLarge")
        self.assertEqual(headers.get("X-Amz-Function-Error"), "Unhandled")
        # What the runtime was told, which the script reports on its next invocation.
        self.emu.wait_idle()
        _, _, body = self.emu.invoke({"do": "last_post"})
        last = json.loads(body)
        self.assertEqual(last["status"], 413, last)
        self.assertEqual(json.loads(last["body"])["errorType"], "RequestEntityTooLarge")
        r = self.emu.url_call({"do": "big", "bytes": 6_291_600})
        self.assertEqual(r.status, 502)
        self.assertEqual(r.read(), b"Internal Server Error")

    def test_function_url_sigv4_and_event(self) -> None:
        r = self.emu.url_call({"do": "echo"}, signed=False)
        self.assertEqual(r.status, 403)
        self.assertEqual(json.loads(r.read()), {"Message": "Forbidden"})
        r = self.emu.url_call({"do": "echo"})
        self.assertEqual(r.status, 200)
        event = json.loads(r.read())["event"]
        self.assertEqual(event["version"], "2.0")
        self.assertEqual(event["rawPath"], "/mcp")
        self.assertEqual(event["rawQueryString"], "x=1")
        self.assertEqual(event["requestContext"]["authorizer"]["iam"]["userArn"], ARN)
        self.assertEqual(event["requestContext"]["http"]["method"], "POST")
        self.assertFalse(event["isBase64Encoded"])
        r = self.emu.url_call({"do": "echo"}, sign_as="other")
        self.assertEqual(json.loads(r.read())["event"]["requestContext"]["authorizer"]["iam"]["userArn"],
                         "arn:aws:iam::123456789012:user/other")

    def test_http_response_mapping(self) -> None:
        r = self.emu.url_call({"do": "http", "status": 201, "body": "created"})
        self.assertEqual(r.status, 201)
        self.assertEqual(r.getheader("x-custom"), "yes")
        self.assertEqual(r.read(), b"created")


class TimeoutResetsTheSandbox(unittest.TestCase):
    def test_timeout_kills_the_runtime_and_memory_does_not_survive(self) -> None:
        emu = Emulator("--max-sandboxes", "1")
        try:
            emu.invoke({"do": "remember", "value": "x"})
            _, _, body = emu.invoke({"do": "recall"})
            self.assertEqual(json.loads(body)["value"], "x", "a warm sandbox keeps its process")
            before = emu.state()
            _, headers, body = emu.invoke({"do": "sleep", "seconds": 10})
            self.assertEqual(headers.get("X-Amz-Function-Error"), "Unhandled")
            error = json.loads(body)
            self.assertEqual(error["errorType"], "Sandbox.Timedout")
            self.assertIn("Task timed out after 3.00 seconds", error["errorMessage"])
            after = emu.state()
            self.assertEqual(after["timeouts"], before["timeouts"] + 1)
            self.assertEqual(after["kills"], before["kills"] + 1)
            _, _, body = emu.invoke({"do": "recall"})
            self.assertIsNone(json.loads(body)["value"], "a fresh process after the timeout")
            self.assertEqual(emu.state()["inits"], before["inits"] + 1)
        finally:
            emu.close()


def running(pid: int) -> bool:
    """Whether `pid` is a process that has not ended (a zombie has)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class StoppingShutsTheSandboxesDown(unittest.TestCase):
    def test_no_process_or_folder_of_a_sandbox_outlives_the_emulator(self) -> None:
        emu = Emulator()
        try:
            _, _, body = emu.invoke({"do": "detach"})
            detached = json.loads(body)
            self.assertTrue(all(running(pid) for pid in detached["pids"]), "the detached processes run")
            self.assertTrue(os.path.isdir(detached["tmp"]))
        finally:
            emu.close()
        deadline = time.time() + 5
        while any(running(pid) for pid in detached["pids"]) and time.time() < deadline:
            time.sleep(0.05)
        for pid in detached["pids"]:
            self.assertFalse(running(pid), f"a process in a session of its own was left running ({pid})")
        self.assertFalse(os.path.exists(detached["tmp"]), "the sandbox's /tmp was left behind")


class StreamingMode(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.emu = Emulator("--invoke-mode", "RESPONSE_STREAM")

    @classmethod
    def tearDownClass(cls) -> None:
        cls.emu.close()

    def test_prelude_and_chunks_arrive_as_sent(self) -> None:
        started = time.monotonic()
        r = self.emu.url_call({"do": "stream", "chunks": ["one\n", "two\n"], "pause": 1.0})
        self.assertEqual(r.status, 202)
        self.assertEqual(r.getheader("content-type"), "text/event-stream")
        first = r.read1(100)
        self.assertEqual(first, b"one\n")
        self.assertLess(time.monotonic() - started, 0.9, "the first chunk came before the pause")
        self.assertEqual(r.read(), b"two\n")

    def test_a_stream_past_the_deadline_is_cut(self) -> None:
        r = self.emu.url_call({"do": "stream", "chunks": ["a", "b"], "pause": 10})
        self.assertEqual(r.status, 202)
        with self.assertRaises(http.client.IncompleteRead):
            r.read()

    def test_a_buffered_answer_in_streaming_mode_is_relayed_raw(self) -> None:
        r = self.emu.url_call({"do": "http", "status": 201, "body": "created"})
        self.assertEqual(r.status, 200)
        self.assertEqual(json.loads(r.read())["statusCode"], 201)


class Freezing(unittest.TestCase):
    """With --freeze, nothing of the runtime runs between invocations; without it, it does."""

    def ticks_while_idle(self, *extra: str) -> int:
        emu = Emulator(*extra)
        try:
            first = json.loads(emu.invoke({"do": "ticks"})[2])["ticks"]
            time.sleep(1.5)
            second = json.loads(emu.invoke({"do": "ticks"})[2])["ticks"]
            self.assertEqual(emu.state()["freezes"] > 0, "--freeze" in extra)
            return second - first
        finally:
            emu.close()

    def test_a_frozen_sandbox_does_nothing_between_invocations(self) -> None:
        self.assertLessEqual(self.ticks_while_idle("--freeze"), 2)
        self.assertGreaterEqual(self.ticks_while_idle(), 10)


if __name__ == "__main__":
    unittest.main()
