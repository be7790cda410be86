"""Each MCP server's tools as it lists them (names, descriptions, input schemas), fetched once
and kept in `.claw/mcp/catalog.json`, keyed by a digest of the server's entry in the
clawfile: an entry that changes is listed again, and one that did not starts no server to
prepare a job (`claw plan`, the up-to-date check).

Nothing a job's tools or a server can write reaches `.claw/`; a file that cannot be read is
as if empty (the servers are asked again).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from claw_batch.config import McpServer
from claw_batch.mcp.remote import RemoteTool
from claw_batch.safety.atomic import write_atomic

CATALOG = Path(".claw") / "mcp" / "catalog.json"
VERSION = 1


def entry_digest(entry: McpServer) -> str:
    """What the entry is: its definition as the clawfile holds it (env names, not values)."""
    text = json.dumps(dict(entry.definition), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


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
        self.path = root / CATALOG
        self.write = write  # False: never written (a dry run through a `.claw` link)
        self._lock = threading.Lock()
        self._data: dict[str, Any] | None = None

    def tools(
        self, server: str, entry: McpServer, fetch: Callable[[], tuple[RemoteTool, ...]]
    ) -> tuple[RemoteTool, ...]:
        """The server's tools: as kept while its entry is the same, else `fetch`ed and kept."""
        key = entry_digest(entry)
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
