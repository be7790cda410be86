"""The run's MCP servers, as its jobs use them: each server's tool list (from the catalog in
`.claw/mcp/`, or the server when the catalog lacks it), and its tools' calls — through one
hub (claw_batch.mcp.hub) made at the first use and closed when the run ends, whatever ends
it. With `--record` the lists and the results go to the cassettes too; with `--replay` they
come from there, and no server starts.

A run that uses no server imports none of this.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from claw_batch.config import Project
from claw_batch.errors import TaskFailed
from claw_batch.llm.endpoints import Mode
from claw_batch.mcp import names

if TYPE_CHECKING:
    from claw_batch.llm.cassette import McpCassette
    from claw_batch.mcp.catalog import Catalog
    from claw_batch.mcp.hub import Hub
    from claw_batch.mcp.remote import RemoteTool, Reply
    from claw_batch.safety.paths import Policy


class ServerUnavailable(TaskFailed):
    """A server the run needs could not list its tools (it did not start, or answer)."""


class RunServers:
    def __init__(
        self,
        project: Project,
        environ: Mapping[str, str],
        mode: Mode,
        *,
        redact: Callable[[str], str],
        write_catalog: bool = True,
    ) -> None:
        self.project = project
        self.environ = environ
        self.mode = mode
        self.redact = redact
        self.write_catalog = write_catalog
        self._lock = threading.Lock()
        self._hub: Hub | None = None
        self._catalog: Catalog | None = None
        self._cassette: McpCassette | None = None
        self.closed = False

    @property
    def servers(self) -> Mapping[str, Any]:
        return self.project.config.mcp_servers

    def tools(self, server: str) -> tuple[RemoteTool, ...]:
        """The server's tools as it lists them."""
        from claw_batch.mcp import catalog as catalogs

        if self.mode.replay:
            listed = catalogs.tools_of(self._cassettes().catalog(server))
            if listed is None:
                raise ServerUnavailable(
                    f"the recorded tool list of MCP server {server!r} is unreadable"
                )
            return listed
        entry = self.servers[server]
        tools = self._catalogue().tools(server, entry, lambda: self._listed(server))
        if self.mode.record:
            self._cassettes().record_catalog(server, catalogs.tools_json(tools))
        return tools

    def call(
        self, server: str, tool: str, arguments: Mapping[str, Any], *, timeout: float, job: str
    ) -> Reply:
        from claw_batch.mcp.remote import Reply

        if self.mode.replay:
            found = self._cassettes().reply(job, server, tool, dict(arguments))
            return Reply(found["text"], bool(found.get("is_error")))
        reply = self.hub().call(server, tool, arguments, timeout=timeout)
        if self.mode.record:
            self._cassettes().record(job, server, tool, dict(arguments), reply.text, reply.is_error)
        return reply

    def hub(self) -> Hub:
        """The run's hub, made at its first use."""
        with self._lock:
            if self.closed:
                raise TaskFailed("the run has ended: its MCP servers are stopped")
            if self._hub is None:
                from claw_batch.config import provider_keys
                from claw_batch.mcp.hub import Hub

                self._hub = Hub(
                    self.project.root,
                    self.servers,
                    self.environ,
                    policies=self.policies(),
                    secrets=provider_keys(self.project.config),
                )
            return self._hub

    def close(self) -> None:
        """Stop every server the run started (idempotent)."""
        with self._lock:
            hub, self._hub, self.closed = self._hub, None, True
        if hub is not None:
            hub.close()

    def policies(self) -> dict[str, Policy]:
        """Per server, where it may write: what the tasks that use it may write (their write
        globs and outputs); the protected and control paths stay protected."""
        from claw_batch.safety import control
        from claw_batch.safety.paths import Policy

        config = self.project.config
        ctl = control.of(self.project, self.mode.cassettes)
        found: dict[str, Policy] = {}
        for server in self.servers:
            users = [t for t in config.tasks.values() if server in names.servers(t.tool_names)]
            globs = [g for t in users for g in t.permissions.write]
            outputs = [o for t in users for o in (t.output, *t.outputs) if o and "{" not in o]
            found[server] = Policy(
                self.project.root,
                write_globs=tuple(dict.fromkeys(globs)),
                outputs=tuple(dict.fromkeys(outputs)),
                protected=ctl.never,
                control=ctl.paths,
                untrusted=config.untrusted,
            )
        return found

    def _listed(self, server: str) -> tuple[RemoteTool, ...]:
        from claw_batch.mcp.remote import ServerFailure

        try:
            return self.hub().tools(server)
        except ServerFailure as e:
            raise ServerUnavailable(str(e)) from None

    def _catalogue(self) -> Catalog:
        with self._lock:
            if self._catalog is None:
                from claw_batch.mcp.catalog import Catalog

                self._catalog = Catalog(self.project.root, write=self.write_catalog)
            return self._catalog

    def _cassettes(self) -> McpCassette:
        with self._lock:
            if self._cassette is None:
                from claw_batch.llm.cassette import McpCassette

                self._cassette = McpCassette(Path(self.mode.cassettes), redact=self.redact)
            return self._cassette


def uses_servers(project: Project) -> bool:
    """Whether a task of the project names an MCP tool: only then is this made."""
    return bool(project.config.mcp_servers) and any(
        names.is_mcp(t) for task in project.config.tasks.values() for t in task.tool_names
    )
