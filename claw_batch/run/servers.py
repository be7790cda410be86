"""The run's MCP servers, as its jobs use them: each server's tool list (from the catalog in
`.claw/mcp/`, or the server when the catalog lacks it), and its tools' calls — through one
hub (claw_batch.mcp.hub) made at the first use and closed when the run ends, whatever ends
it. With `--record` the lists and the results go to the cassettes too; with `--replay` they
come from there, and no server starts.

A run that uses no server imports none of this.
"""

from __future__ import annotations

import contextlib
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
    from claw_batch.taint.ledger import TaintedFiles
    from claw_batch.taint.watch import Key


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
        self._files: TaintedFiles | None = None  # the run's ledger of outside content
        self._run_id = ""
        self._unavailable: dict[str, str] = {}  # servers that could not list their tools: why
        self._seen: dict[str, dict[str, Key]] = {}  # per server, its write dirs last looked at

    @property
    def servers(self) -> Mapping[str, Any]:
        return self.project.config.mcp_servers

    def digest(self, server: str) -> str:
        """What the server is, for the fingerprint: its entry and its code in the project."""
        return self._catalogue().key(server, self.servers[server])

    def tools(self, server: str) -> tuple[RemoteTool, ...]:
        """The server's tools as it lists them."""
        from claw_batch.mcp import catalog as catalogs

        if self.mode.replay:
            found = catalogs.tools_of(self._cassettes().catalog(server))
            listed = None if found is None else catalogs.scrubbed_tools(found, self.redact)
            if listed is None:
                raise ServerUnavailable(
                    f"the recorded tool list of MCP server {server!r} is unreadable"
                )
            return listed
        entry = self.servers[server]
        failed = self._unavailable.get(server)
        if failed is not None:  # said once: each job of its tasks fails with it, unstarted
            raise ServerUnavailable(failed)
        try:
            tools = self._catalogue().tools(server, entry, lambda: self._listed(server))
        except ServerUnavailable as e:
            self._unavailable[server] = str(e)
            raise
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
        self._mark_unseen(server)  # what it wrote since it was last looked at
        try:
            reply = self.hub().call(server, tool, arguments, timeout=timeout)
        finally:
            self._look(server)
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
                self._look()  # before any server starts
            return self._hub

    def close(self) -> None:
        """Stop every server the run started (idempotent)."""
        with self._lock:
            hub, self._hub, self.closed = self._hub, None, True
        if hub is not None:
            try:
                hub.close()
            finally:
                self._mark_unseen()

    def policies(self) -> dict[str, Policy]:
        """Per server, where it may write: what the tasks that use it may write (their write
        globs; not their outputs' folders: claw writes a job's output, the server does not),
        nothing for a `read_only` one; the protected and control paths stay protected."""
        from claw_batch.safety import control
        from claw_batch.safety.paths import Policy

        config = self.project.config
        ctl = control.of(self.project, self.mode.cassettes)
        return {
            server: Policy(
                self.project.root,
                write_globs=self._write_globs(server),
                protected=ctl.never,
                control=ctl.paths,
                untrusted=config.untrusted,
            )
            for server in self.servers
        }

    def dirs(self, server: str) -> tuple[str, ...]:
        """The directories the server may write ("" is the project root): what claw looks at
        for what it wrote (claw_batch.tools.mcptool, and `close`)."""
        from claw_batch.sandbox.bubblewrap import write_dirs

        return write_dirs(self._write_globs(server), ())

    def _write_globs(self, server: str) -> tuple[str, ...]:
        config = self.project.config
        if config.mcp_servers[server].read_only:
            return ()
        users = [t for t in config.tasks.values() if server in names.servers(t.tool_names)]
        return tuple(dict.fromkeys(g for t in users for g in t.permissions.write))

    def ledger(self, files: TaintedFiles, run_id: str) -> None:
        """Where the files the servers write are marked as outside content (the run's)."""
        self._files, self._run_id = files, run_id

    def _look(self, server: str | None = None) -> None:
        """What the servers' write directories hold now (one server's: after its call, whose
        changes the calling job has marked), to find what they wrote between calls at `close`."""
        from claw_batch.taint import watch

        if self._files is None:
            return
        root = str(self.project.root)
        for name in self.servers if server is None else (server,):
            if self.dirs(name):
                self._seen[name] = watch.walk(root, self.dirs(name))

    def _mark_unseen(self, server: str | None = None) -> None:
        """Before a server's call, and after the servers ended: every file in a server's
        write directories that changed since it was last looked at, and is not outside
        content already, is marked as such (a server may write between calls, as it starts;
        claw cannot tell it from a job writing there then, so it counts as the server's)."""
        from claw_batch.taint import watch
        from claw_batch.taint.ledger import Writer

        files, root = self._files, str(self.project.root)
        if files is None:
            return
        for name, before in list(self._seen.items()):
            if server is not None and name != server:
                continue
            writer = Writer(f"mcp.{name}", "", self._run_id)
            after = watch.walk(root, self.dirs(name))
            for rel in sorted(r for r, key in after.items() if before.get(r) != key):
                if files.tainted(rel):
                    continue
                # One that cannot be marked (a full disk) cannot be said to anyone now.
                with contextlib.suppress(Exception):
                    files.mark_file(rel, f"MCP server {name!r}", writer)

    def _listed(self, server: str) -> tuple[RemoteTool, ...]:
        from claw_batch.mcp.catalog import scrubbed_tools
        from claw_batch.mcp.remote import ServerFailure

        try:
            listed = self.hub().tools(server)
        except ServerFailure as e:
            raise ServerUnavailable(str(e)) from None
        # Before the catalog keeps it, a cassette records it or the model is offered it.
        return scrubbed_tools(listed, self.redact)

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
