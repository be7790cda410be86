"""The run's MCP servers: each started (stdio) or connected to (HTTP) at its first use,
shared by the run's jobs, and stopped by `close()`.

The SDK is asynchronous and claw's jobs are threads: one thread runs an event loop that
holds every server's session; a job's call waits on its future, at most `timeout` seconds.

SKELETON: stdio servers start unsandboxed here; the sandbox, the restart after a crash and
the end of the servers with claw (kill -9 included) come next.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from claw_batch.config import McpServer
from claw_batch.errors import ToolError

if TYPE_CHECKING:
    from mcp.client.session import ClientSession


@dataclass(frozen=True)
class RemoteTool:
    """A tool as its server lists it."""

    name: str
    description: str
    schema: Mapping[str, Any]  # its inputSchema


@dataclass(frozen=True)
class Reply:
    """What a tool call returned, as text for the model."""

    text: str
    is_error: bool = False


class ServerFailure(ToolError):
    """A server that cannot be started, reached or kept: the message says which and why."""


class _Connection:
    """One server's session, held by a task of the hub's loop from start to stop."""

    def __init__(self, name: str, entry: McpServer, root: Path, env: Mapping[str, str]) -> None:
        self.name, self.entry, self.root, self.env = name, entry, root, env
        self.session: ClientSession | None = None
        self.tools: tuple[RemoteTool, ...] = ()
        self.ready = asyncio.Event()
        self.stop = asyncio.Event()
        self.failure: BaseException | None = None

    async def hold(self) -> None:
        from mcp.client.session import ClientSession

        try:
            async with self._transport() as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                listed = await session.list_tools()
                self.tools = tuple(
                    RemoteTool(t.name, t.description or "", dict(t.input_schema))
                    for t in listed.tools
                )
                self.session = session
                self.ready.set()
                await self.stop.wait()
        except BaseException as e:
            self.failure = e
        finally:
            self.session = None
            self.ready.set()

    def _transport(self) -> contextlib.AbstractAsyncContextManager[Any]:
        if self.entry.url is not None:
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            headers = {h: self.env.get(v, "") for h, v in self.entry.headers_env.items()}
            client = httpx2.AsyncClient(headers=headers, timeout=self.entry.timeout)
            return streamable_http_client(self.entry.url, http_client=client)
        import sys

        from mcp.client.stdio import StdioServerParameters, stdio_client

        command, *args = self.entry.command
        env = {k: self.env[k] for k in self.entry.env if k in self.env}
        params = StdioServerParameters(command=command, args=args, env=env, cwd=self.root)
        return stdio_client(params, errlog=sys.stderr)


class Hub:
    def __init__(
        self, root: Path, servers: Mapping[str, McpServer], env: Mapping[str, str]
    ) -> None:
        self.root, self.servers, self.env = root, servers, env
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._connections: dict[str, _Connection] = {}
        self._holders: dict[str, asyncio.Future[None]] = {}

    def tools(self, server: str) -> tuple[RemoteTool, ...]:
        """Its tools, as it lists them; starts it if it is not running."""
        return self._connected(server).tools

    def call(
        self, server: str, tool: str, arguments: Mapping[str, Any], *, timeout: float
    ) -> Reply:
        connection = self._connected(server)
        session = connection.session
        if session is None:
            raise ServerFailure(f"MCP server {server!r} has stopped")
        future = asyncio.run_coroutine_threadsafe(
            session.call_tool(tool, dict(arguments)), self._running_loop()
        )
        try:
            result = future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise ServerFailure(
                f"MCP server {server!r}: {tool} did not answer within {timeout:g} s"
            ) from None
        except Exception as e:
            raise ServerFailure(f"MCP server {server!r}: {tool} failed: {e}") from None
        return Reply(_text(result.content), bool(result.is_error))

    def close(self) -> None:
        """Stop every server (a stdio one's process ends) and the loop."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        for connection in self._connections.values():
            loop.call_soon_threadsafe(connection.stop.set)
        holders = list(self._holders.values())

        async def settle() -> None:
            await asyncio.gather(*holders, return_exceptions=True)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(settle(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="claw-mcp", daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    def _connected(self, server: str) -> _Connection:
        entry = self.servers.get(server)
        if entry is None:
            raise ServerFailure(f"no MCP server {server!r} in mcp_servers:")
        loop = self._running_loop()
        with self._lock:
            connection = self._connections.get(server)
            if connection is None:
                connection = _Connection(server, entry, self.root, self.env)

                async def start(c: _Connection = connection) -> None:
                    await c.hold()

                self._holders[server] = asyncio.run_coroutine_threadsafe(start(), loop)  # type: ignore[assignment]
                self._connections[server] = connection

        async def wait(c: _Connection = connection) -> None:
            await c.ready.wait()

        try:
            asyncio.run_coroutine_threadsafe(wait(), loop).result(entry.startup_timeout)
        except TimeoutError:
            raise ServerFailure(
                f"MCP server {server!r} did not answer its handshake within "
                f"{entry.startup_timeout:g} s"
            ) from None
        if connection.session is None:
            raise ServerFailure(f"MCP server {server!r} did not start: {connection.failure}")
        return connection


def _text(content: Any) -> str:
    """A tool result's content blocks as text: text as is, anything else named."""
    parts = []
    for block in content:
        kind = getattr(block, "type", "?")
        parts.append(block.text if kind == "text" else f"[{kind} content not shown]")
    return "\n".join(parts)
