"""A well-behaved server with a crash and a hang on demand (see README.md)."""

from __future__ import annotations

import os
import sys
import time

from mcp.server.mcpserver import MCPServer

server = MCPServer("tools")


@server.tool()
def echo(text: str) -> str:
    """Say the text back."""
    return text


@server.tool()
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@server.tool()
def pid() -> int:
    """The server's process id (as the host sees it when unsandboxed)."""
    return os.getpid()


@server.tool()
def crash(code: int = 3) -> str:
    """Exit at once, mid-call, with this status."""
    print(f"tools: crashing on purpose with status {code}", file=sys.stderr, flush=True)
    os._exit(code)


@server.tool()
def hang() -> str:
    """Never answer (after a line on stderr, for a test to see the call has begun)."""
    print("tools: hanging on purpose", file=sys.stderr, flush=True)
    while True:
        time.sleep(3600)


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        token = os.environ.get("TOOLS_TOKEN")
        if token:
            _run_http_with_auth(int(sys.argv[2]), token)
        else:
            server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
        return
    server.run()


def _run_http_with_auth(port: int, token: str) -> None:
    import uvicorn
    from starlette.responses import PlainTextResponse

    app = server.streamable_http_app()

    async def guarded(scope, receive, send):  # type: ignore[no-untyped-def]
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            if headers.get(b"authorization") != f"Bearer {token}".encode():
                await PlainTextResponse("unauthorized", 401)(scope, receive, send)
                return
        await app(scope, receive, send)

    uvicorn.run(guarded, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
