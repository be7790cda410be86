"""The run's MCP servers: each started (stdio) or connected to (HTTP) at its first use,
shared by the run's jobs, and stopped by `close()`.

The SDK is asynchronous and claw's jobs are threads: one thread runs an event loop that
holds every server's session; a job's call waits on its future, at most its `timeout` (and
the entry's), so a hung server cannot hold a job past it; a handshake that does not end
within `startup_timeout` ends the server.

A stdio server runs confined as its entry says (claw_batch.mcp.confine), through claw's own
transport (claw_batch.mcp.stdio), so that nothing it starts outlives claw. One that dies is
started again once, at the next call; when it dies again its tools fail with the reason: its
exit status and the last lines of its stderr (all of which is in `.claw/mcp/SERVER.log`).
Header values of an HTTP server come from the environment and are redacted from every
message.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from claw_batch import cancel
from claw_batch.config import McpServer
from claw_batch.mcp.connection import Connection
from claw_batch.mcp.remote import RemoteTool, Reply, ServerFailure, header_secrets
from claw_batch.safety.paths import Policy

if TYPE_CHECKING:
    pass

MARGIN_SECONDS = 10.0  # what a stop may take past a server's own time limits
CLOSE_SECONDS = 30.0


class Hub:
    def __init__(
        self,
        root: Path,
        servers: Mapping[str, McpServer],
        env: Mapping[str, str],
        *,
        policies: Mapping[str, Policy] = {},
        secrets: Collection[str] = ("OPENAI_API_KEY",),
        logs: bool = True,
    ) -> None:
        """`policies`: per stdio server, where it may write (the union of the write policies
        of the tasks that use it); without one it may write nothing. `secrets`: names of
        environment variables no server gets, even when its entry lists them (the providers'
        API keys: config.provider_keys). `logs`: keep each server's stderr in
        .claw/mcp/SERVER.log."""
        from claw_batch.safety.redact import Redactor

        self.root, self.servers, self.env = root, servers, env
        self.policies, self.secrets, self.logs = policies, frozenset(secrets), logs
        given = [env.get(v) for s in servers.values() for v in s.env]
        self.redact = Redactor([*(v for v in given if v), *header_secrets(servers, env)])
        self.notes: list[str] = []  # what the user should know (a key not given to a server)
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._connections: dict[str, Connection] = {}

    def note(self, text: str) -> None:
        with self._lock:
            if text not in self.notes:
                self.notes.append(text)

    def tools(self, server: str) -> tuple[RemoteTool, ...]:
        """Its tools, as it lists them; starts it if it is not running."""
        entry = self._entry(server)
        connection = self._connection(server)
        try:
            self._wait(connection.session(), entry.startup_timeout + MARGIN_SECONDS, server)
        except TimeoutError:
            raise ServerFailure(f"MCP server {server!r} {connection.no_handshake()}") from None
        return connection.tools

    def call(
        self, server: str, tool: str, arguments: Mapping[str, Any], *, timeout: float
    ) -> Reply:
        """Call SERVER's TOOL; ServerFailure when it cannot answer within `timeout` seconds
        (and the entry's own `timeout`), or has died."""
        limit = min(timeout, self._entry(server).timeout)
        connection = self._connection(server)
        try:
            reply: Reply = self._wait(connection.call(tool, dict(arguments)), limit, server)
        except TimeoutError:
            raise ServerFailure(
                f"MCP server {server!r}: {tool} did not answer within {limit:g} s"
            ) from None
        return reply

    def close(self) -> None:
        """Stop every server (a stdio one's process ends) and the loop."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
            connections = list(self._connections.values())
        if loop is None or thread is None:
            return

        async def settle() -> None:
            for c in connections:
                c.closing = True
                if c.life is not None:
                    c.life.stop.set()
                if c.life is None or c.life.session is None:  # starting: no waiting for it
                    for holder in c.holders:
                        holder.cancel()
            holders = [h for c in connections for h in c.holders]
            await asyncio.gather(*holders, return_exceptions=True)
            others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in others:
                task.cancel()
            await asyncio.gather(*others, return_exceptions=True)
            await loop.shutdown_asyncgens()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(settle(), loop).result(CLOSE_SECONDS)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(CLOSE_SECONDS)
        if not thread.is_alive():
            loop.close()

    def _entry(self, server: str) -> McpServer:
        entry = self.servers.get(server)
        if entry is None:
            raise ServerFailure(f"no MCP server {server!r} in mcp_servers:")
        return entry

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                # Servers die with this thread (PR_SET_PDEATHSIG): it lives until close().
                thread = threading.Thread(target=loop.run_forever, name="claw-mcp", daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    def _connection(self, server: str) -> Connection:
        entry = self._entry(server)
        self._running_loop()
        with self._lock:
            connection = self._connections.get(server)
            if connection is None:
                connection = self._connections[server] = Connection(server, entry, self)
            return connection

    def _wait(self, work: Any, seconds: float, server: str) -> Any:
        """Run `work` on the loop; its result, or its ServerFailure; TimeoutError after
        `seconds`, KeyboardInterrupt as soon as the run is cancelled (claw_batch.cancel); in
        both the work is cancelled."""
        loop = self._running_loop()
        future = asyncio.run_coroutine_threadsafe(work, loop)
        deadline = time.monotonic() + seconds
        try:
            while True:
                cancel.check()
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                try:
                    return future.result(min(left, cancel.POLL))
                except TimeoutError:
                    if future.done():  # the work's own
                        raise
                    continue
        except ServerFailure:
            raise
        except BaseException as e:
            future.cancel()
            if isinstance(e, Exception) and not isinstance(e, TimeoutError):  # the SDK's own
                said = self.redact(str(e))
                raise ServerFailure(f"MCP server {server!r}: {type(e).__name__}", said) from None
            raise


__all__ = ["Hub", "RemoteTool", "Reply", "ServerFailure"]
