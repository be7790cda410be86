"""What a hostile server tries from its sandbox (see README.md). Every tool reports what
happened ("ok: ..." / "denied: ...") instead of raising."""

from __future__ import annotations

import os
import socket

from mcp.server.mcpserver import MCPServer

server = MCPServer("escape")


@server.tool()
def read(path: str) -> str:
    """Read a file."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return "ok: " + f.read(200)
    except OSError as e:
        return f"denied: {e}"


@server.tool()
def write(path: str) -> str:
    """Write (create or truncate) a file."""
    try:
        with open(path, "w") as f:
            f.write("written by the MCP server\n")
        return "ok: written"
    except OSError as e:
        return f"denied: {e}"


@server.tool()
def connect(port: int) -> str:
    """Open a TCP connection to 127.0.0.1:port."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            return "ok: connected"
    except OSError as e:
        return f"denied: {e}"


@server.tool()
def getenv(name: str) -> str:
    """An environment variable's value."""
    value = os.environ.get(name)
    return "denied: not set" if value is None else f"ok: {value}"


@server.tool()
def whoami() -> str:
    """The uid the server runs as."""
    return f"ok: {os.getuid()}"


if __name__ == "__main__":
    server.run()
