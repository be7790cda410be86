"""Each MCP server's tools as it lists them (names, descriptions, input schemas), fetched once
and kept in `.claw/mcp/catalog.json`, keyed by a digest of the server's entry in the
clawfile: an entry that changes is listed again, and one that did not starts no server to
prepare a job (`claw plan`, the up-to-date check). The key covers the server's code in the
project too (`server_digest`).

Nothing a job's tools or a server can write reaches `.claw/`; a file that cannot be read is
as if empty (the servers are asked again).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from claw_batch.config import McpServer
from claw_batch.mcp.remote import RemoteTool
from claw_batch.safety.atomic import write_atomic
from claw_batch.safety.untrusted import defuse_tokens, strip_invisible

CATALOG = Path(".claw") / "mcp" / "catalog.json"
VERSION = 1


def entry_digest(entry: McpServer) -> str:
    """What the entry is: its definition as the clawfile holds it (env names, not values)."""
    text = json.dumps(dict(entry.definition), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def server_digest(root: Path, name: str, entry: McpServer) -> str:
    """What the server is: its entry, and the contents of its code in the project (what
    claw_batch.safety.control.server_code protects): editing an in-project server lists its
    tools again, and the fingerprint of the jobs that use it sees a schema that changed."""
    from claw_batch.safety.control import server_code

    h = hashlib.sha256(entry_digest(entry).encode())
    top = os.path.realpath(root)
    for rel in sorted(server_code(Path(top), {name: entry})):
        for path in _files(os.path.join(top, rel)):
            h.update(b"\0" + os.path.relpath(path, top).encode("utf-8", "surrogateescape"))
            try:
                with open(path, "rb") as f:
                    content = hashlib.sha256()
                    while chunk := f.read(1 << 20):
                        content.update(chunk)
                h.update(b"\0" + content.digest())
            except OSError as e:
                h.update(b"\0unreadable " + type(e).__name__.encode())
    return h.hexdigest()


def _files(path: str) -> list[str]:
    """A file, or every file under a folder (its compiled caches aside: a run leaves them)."""
    if not os.path.isdir(path) or os.path.islink(path):
        return [path]
    found = []
    for top, dirs, names in os.walk(path):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        found += [os.path.join(top, n) for n in sorted(names)]
    return found


def scrubbed(value: Any, redact: Callable[[str], str] = str) -> Any:
    """A server's words (a description, a schema), every string in them however deep (keys
    too): the run's secrets redacted (a server may echo a header it was given), invisible
    characters and chat-template tokens taken out — what the model is offered, the catalog
    keeps and a cassette records."""
    if isinstance(value, str):
        return defuse_tokens(strip_invisible(redact(value))[0])[0]
    if isinstance(value, Mapping):
        return {scrubbed(str(k), redact): scrubbed(v, redact) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [scrubbed(v, redact) for v in value]
    return value


def scrubbed_tools(
    tools: tuple[RemoteTool, ...], redact: Callable[[str], str] = str
) -> tuple[RemoteTool, ...]:
    """Each tool's description and schema `scrubbed`; its name as the server calls it."""
    return tuple(
        RemoteTool(t.name, scrubbed(t.description, redact), scrubbed(t.schema, redact))
        for t in tools
    )


def tools_json(tools: tuple[RemoteTool, ...]) -> list[dict[str, Any]]:
    return [{"name": t.name, "description": t.description, "schema": t.schema} for t in tools]


def tools_of(data: object) -> tuple[RemoteTool, ...] | None:
    """The tools of a stored list; None when it is not one."""
    if not isinstance(data, list):
        return None
    try:
        return tuple(
            RemoteTool(str(t["name"]), str(t.get("description") or ""), dict(t["schema"]))
            for t in data
        )
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


class Catalog:
    """The project's catalog file; threads (-j) share it."""

    def __init__(self, root: Path, *, write: bool = True) -> None:
        self.root = root
        self.path = root / CATALOG
        self.write = write  # False: never written (a dry run through a `.claw` link)
        self._lock = threading.Lock()
        self._data: dict[str, Any] | None = None
        self._keys: dict[str, str] = {}

    def key(self, server: str, entry: McpServer) -> str:
        """What the server is (`server_digest`), once per run: its code is read once."""
        with self._lock:
            if server not in self._keys:
                self._keys[server] = server_digest(self.root, server, entry)
            return self._keys[server]

    def tools(
        self, server: str, entry: McpServer, fetch: Callable[[], tuple[RemoteTool, ...]]
    ) -> tuple[RemoteTool, ...]:
        """The server's tools: as kept while it is the same (its entry and code), else
        `fetch`ed and kept."""
        key = self.key(server, entry)
        with self._lock:
            data = self._load()
            kept = data.get(server)
            if isinstance(kept, Mapping) and kept.get("entry") == key:
                tools = tools_of(kept.get("tools"))
                if tools is not None:
                    return tools
        tools = fetch()  # outside the lock: a server that starts slowly holds no other
        with self._lock:
            data = self._load()
            data[server] = {"entry": key, "tools": tools_json(tools)}
            if self.write:
                document = {"version": VERSION, "servers": data}
                text = json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False)
                write_atomic(self.path, text + "\n")
        return tools

    def _load(self) -> dict[str, Any]:
        if self._data is None:
            try:
                document = json.loads(self.path.read_text(encoding="utf-8"))
                servers = document["servers"] if document.get("version") == VERSION else {}
                self._data = dict(servers) if isinstance(servers, dict) else {}
            except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
                self._data = {}
        return self._data
