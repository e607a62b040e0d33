"""An MCP client reaching flowgate on an AWS_IAM Lambda Function URL through mcp-proxy-for-aws,
as docs/remote-clients.md tells Claude Code, VS Code or Cursor users to: the client starts the
proxy over stdio, and the proxy signs every HTTP request with SigV4 (service lambda) using the
AWS credentials in its environment.

    python sigv4_proxy.py PROXY URL AKID SECRET

Checks: an unsigned request to the URL is refused (403); through the proxy with the right key,
tools/list lists `greet` and a call returns its text; with a wrong secret nothing gets through.
Exits non-zero on any failure.
"""

import asyncio
import os
import sys
import tempfile
import urllib.error
import urllib.request

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def proxy_params(proxy: str, url: str, akid: str, secret: str, home: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=proxy,
        args=[url, "--service", "lambda", "--region", "us-east-1", "--disable-telemetry",
              "--retries", "0", "--timeout", "60"],
        # Only what the proxy needs: no credentials of this machine's user reach it.
        env={"AWS_ACCESS_KEY_ID": akid, "AWS_SECRET_ACCESS_KEY": secret,
             "AWS_REGION": "us-east-1", "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
             "HOME": home, "AWS_EC2_METADATA_DISABLED": "true",
             "AWS_CONFIG_FILE": os.path.join(home, "none"),
             "AWS_SHARED_CREDENTIALS_FILE": os.path.join(home, "none")})


async def signed_flow(proxy: str, url: str, akid: str, secret: str, home: str) -> None:
    async with stdio_client(proxy_params(proxy, url, akid, secret, home)) as (read, write):
        async with ClientSession(read, write) as session:
            await asyncio.wait_for(session.initialize(), 60)
            tools = await asyncio.wait_for(session.list_tools(), 60)
            names = [t.name for t in tools.tools]
            assert "greet" in names, names
            print(f"ok  tools/list through mcp-proxy-for-aws (SigV4): {names}")
            result = await asyncio.wait_for(session.call_tool("greet", {"name": "sigv4"}), 120)
            text = " ".join(c.text for c in result.content if getattr(c, "text", None))
            assert not result.isError and "hello sigv4" in text, result
            print(f"ok  tools/call through mcp-proxy-for-aws: {text!r}")


async def refused_flow(proxy: str, url: str, akid: str, home: str) -> None:
    try:
        # The proxy's own report of the 403 (a traceback) is expected: kept off the output.
        with open(os.devnull, "w") as quiet:
            async with stdio_client(proxy_params(proxy, url, akid, "not-the-secret", home),
                                    errlog=quiet) as (read, write):
                async with ClientSession(read, write) as session:
                    await asyncio.wait_for(session.initialize(), 60)
                    tools = await asyncio.wait_for(session.list_tools(), 60)
    except Exception as e:  # the proxy reports the 403, or exits: either way nothing got through
        print(f"ok  a wrong secret is refused ({type(e).__name__})")
        return
    raise AssertionError(f"a wrong secret got through: {tools}")


def unsigned_is_refused(url: str) -> None:
    request = urllib.request.Request(
        url, method="POST", data=b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}',
        headers={"content-type": "application/json", "accept": "application/json, text/event-stream"})
    try:
        urllib.request.urlopen(request, timeout=30)
    except urllib.error.HTTPError as e:
        assert e.code == 403, e.code
        print("ok  an unsigned request is refused with 403")
        return
    raise AssertionError("an unsigned request got through")


def main() -> None:
    proxy, url, akid, secret = sys.argv[1:5]
    unsigned_is_refused(url)
    with tempfile.TemporaryDirectory() as home:
        asyncio.run(signed_flow(proxy, url, akid, secret, home))
        asyncio.run(refused_flow(proxy, url, akid, home))


main()
