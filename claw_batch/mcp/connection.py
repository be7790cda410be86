"""One MCP server as the hub holds it: its current life (a start, the handshake, the session,
its end), started again once after a crash, and the words it leaves when it dies.

Everything here runs on the hub's event loop (claw_batch.mcp.hub).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from claw_batch.config import McpServer
from claw_batch.errors import ToolError
from claw_batch.mcp.remote import RemoteTool, Reply, ServerFailure

if TYPE_CHECKING:
    from mcp.client.session import ClientSession

    from claw_batch.mcp.hub import Hub
    from claw_batch.mcp.stdio import Server

RESTARTS = 1  # a server that dies is started again this many times
DEATH_SECONDS = 10.0  # after its output ends, how long to wait for a server's exit status


@dataclass
class Life:
    """One start of a server: its session from the handshake to its end."""

    session: ClientSession | None = None
    server: Server | None = None
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    over: asyncio.Event = field(default_factory=asyncio.Event)  # its holder has returned
    death: str | None = None  # why it ended, when it was not stopped (claw's words)
    said: str = ""  # the server's own last words then (its stderr's tail), redacted
    handshake_until: float | None = None  # (anyio's clock) when its handshake times out


class Connection:
    """One server: its current life, held by a task of the hub's loop, and its deaths."""

    def __init__(self, name: str, entry: McpServer, hub: Hub) -> None:
        self.name, self.entry, self.hub = name, entry, hub
        self.tools: tuple[RemoteTool, ...] = ()
        self.life: Life | None = None
        self.lock = asyncio.Lock()
        self.broken: ServerFailure | None = None  # it cannot be (re)started: why
        self.deaths = 0
        self.holders: set[asyncio.Task[None]] = set()
        self.closing = False

    async def session(self) -> tuple[ClientSession, Life]:
        """The live session, starting (or restarting) the server when it has none."""
        async with self.lock:
            life = self.life
            if life is not None and life.session is not None and not life.over.is_set():
                return life.session, life
            if self.broken is not None:
                raise ServerFailure(self.broken.message, self.broken.said)
            if self.closing:
                raise ServerFailure(f"MCP server {self.name!r} has been stopped")
            life = self.life = Life()
            started: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            holder = asyncio.ensure_future(self._hold(life, started))
            self.holders.add(holder)
            holder.add_done_callback(self.holders.discard)
            try:
                await asyncio.shield(started)
            except ServerFailure as e:
                self.broken = e
                raise
            assert life.session is not None
            return life.session, life

    async def call(self, tool: str, arguments: dict[str, Any]) -> Reply:
        session, life = await self.session()
        called = asyncio.ensure_future(session.call_tool(tool, arguments))
        await _first(called, asyncio.ensure_future(life.over.wait()))
        if called.done() and not called.cancelled() and called.exception() is None:
            result = called.result()
            return Reply(_text(result.content), bool(result.is_error))
        if life.server is not None and life.server.ended.is_set():  # it died: wait for why
            import anyio

            with anyio.move_on_after(DEATH_SECONDS):
                await life.over.wait()
        if life.over.is_set() and not life.stop.is_set():
            raise ServerFailure(self._crashed(tool, life), life.said)
        error = called.exception() if called.done() and not called.cancelled() else None
        failed = f"MCP server {self.name!r}: {tool} failed"
        if error is None:
            raise ServerFailure(failed)
        from mcp.shared.exceptions import MCPError

        if isinstance(error, MCPError):  # a JSON-RPC error: its message is the server's
            said = self.hub.redact(error.message)
            raise ServerFailure(f"{failed} (JSON-RPC error {error.code})", said)
        raise ServerFailure(f"{failed}: {type(error).__name__}", self.hub.redact(str(error)))

    def _crashed(self, tool: str, life: Life) -> str:
        said = f"MCP server {self.name!r} crashed during {tool}: {life.death or 'it ended'}"
        if self.broken is not None:
            return f"{said}; it is not started again (it crashed {self.deaths} times)"
        return f"{said}; it is started again for the next call"

    async def _hold(self, life: Life, started: asyncio.Future[None]) -> None:
        import anyio

        entry = self.entry
        up = False
        try:
            from mcp.client.session import ClientSession  # a broken SDK: "did not start"

            async with self._transport(life) as (read, write), ClientSession(read, write) as s:
                life.handshake_until = anyio.current_time() + entry.startup_timeout
                with anyio.fail_after(entry.startup_timeout):
                    await s.initialize()
                    listed = await s.list_tools()
                redact = self.hub.redact  # a server may echo a header's value or an env: one
                self.tools = tuple(
                    RemoteTool(
                        redact(t.name), redact(t.description or ""), redact.deep(t.input_schema)
                    )
                    for t in listed.tools
                )
                life.session = s
                if life.server is not None:
                    life.server.find_leader()
                started.set_result(None)
                up = True
                await self._until_stopped_or_dead(life)
        except ToolError as e:  # ServerFailure, confine.Refused
            _fail(started, e if isinstance(e, ServerFailure) else ServerFailure(str(e)))
        except Exception as e:
            until = life.handshake_until
            if not up and until is not None and anyio.current_time() >= until:
                _fail(started, self._said(life, self.no_handshake(), True))
            # what the SDK says may quote the server (a JSON-RPC error, a reply it refused)
            _fail(started, self._said(life, f"did not start: {type(e).__name__}", why=str(e)))
        finally:
            life.session = None
            if up and not life.stop.is_set():
                self._died(life)
            if not started.done():
                _fail(started, self._said(life, "did not start"))
            if life.server is not None:
                life.server.log.close()
            life.over.set()

    def no_handshake(self) -> str:
        return f"did not answer its handshake within {self.entry.startup_timeout:g} s"

    def _said(self, life: Life, what: str, stopped: bool = False, why: str = "") -> ServerFailure:
        """`what` went wrong (and its exit status, when it ended on its own, not `stopped` by
        claw), with the server's own words apart: `why` (what the SDK said) and the last
        lines of its stderr."""
        server = life.server
        code = server.process.returncode if server is not None else None
        if server is not None and code is not None and not stopped:
            what = f"did not start: it {server.died(code)}"
        words = [w for w in (why, server.log.tail() if server is not None else "") if w]
        redact = self.hub.redact
        return ServerFailure(redact(f"MCP server {self.name!r} {what}"), redact("\n".join(words)))

    async def _until_stopped_or_dead(self, life: Life) -> None:
        server = life.server
        if server is None:  # HTTP: the session ends when the hub stops it
            await life.stop.wait()
            return
        await _first(
            asyncio.ensure_future(life.stop.wait()), asyncio.ensure_future(server.ended.wait())
        )
        if not life.stop.is_set():
            life.death = self.hub.redact(server.died(await server.status()))
            life.said = self.hub.redact(server.log.tail())

    def _died(self, life: Life) -> None:
        self.deaths += 1
        death = life.death or "it ended"
        if life.server is not None:
            life.server.log.note(f"the server ended: {death}")
        if self.deaths > RESTARTS:
            self.broken = ServerFailure(
                f"MCP server {self.name!r} crashed {self.deaths} times and is not started "
                f"again; the last time it {death}",
                life.said,
            )

    def _transport(self, life: Life) -> contextlib.AbstractAsyncContextManager[Any]:
        if self.entry.url is not None:
            return self._http()
        return self._stdio(life)

    @contextlib.asynccontextmanager
    async def _stdio(self, life: Life) -> AsyncIterator[Any]:
        from claw_batch.mcp import confine, errlog, stdio

        hub = self.hub
        path = errlog.log_path(hub.root, self.name) if hub.logs else None
        log = errlog.ErrLog(path, errlog.shown_path(self.name), redact=hub.redact)
        policy = hub.policies.get(self.name)
        with confine.command(
            self.name,
            self.entry,
            hub.root,
            policy=policy,
            environ=hub.env,
            secrets=hub.secrets,
        ) as (command, notes):
            for note in notes:
                hub.note(note)
            log.note(f"starting: {' '.join(self.entry.command)}")
            try:
                life.server = await stdio.spawn(command, cwd=hub.root, log=log)
            except OSError as e:
                log.close()
                raise ServerFailure(
                    f"MCP server {self.name!r} did not start: {self.entry.command[0]}: "
                    f"{e.strerror or e}"
                ) from None
        async with stdio.streams(life.server) as pair:
            yield pair

    @contextlib.asynccontextmanager
    async def _http(self) -> AsyncIterator[Any]:
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        assert self.entry.url is not None
        headers = {}
        for header, var in self.entry.headers_env.items():
            if var not in self.hub.env:
                raise ServerFailure(
                    f"MCP server {self.name!r}: headers_env: {header} comes from the "
                    f"environment variable {var}, which is not set; export it"
                )
            headers[header] = self.hub.env[var]
        client = httpx2.AsyncClient(headers=headers, timeout=self.entry.timeout)
        async with client, streamable_http_client(self.entry.url, http_client=client) as pair:
            yield pair


async def _first(*tasks: asyncio.Future[Any]) -> None:
    """Wait until one of the tasks is done; the others are cancelled and awaited (their
    outcomes stay readable on them)."""
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _fail(future: asyncio.Future[None], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)
        future.exception()  # retrieved: never "exception was never retrieved"


def _text(content: Any) -> str:
    """A tool result's content blocks as text: text as is, anything else named."""
    parts = []
    for block in content:
        kind = getattr(block, "type", "?")
        parts.append(block.text if kind == "text" else f"[{kind} content not shown]")
    return "\n".join(parts)
