"""What a server answers, as claw keeps it: its tools, a call's reply, a failure. A leaf: an
up-to-date run reads the tool lists from the catalog without importing the hub (asyncio) or
the SDK."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from claw_batch.config import McpServer
from claw_batch.errors import ToolError


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
    """A server that cannot be started, reached or kept: `message` says which and why in
    claw's own words; `said` is the server's own text about it (a JSON-RPC error's message,
    the last lines of its stderr), "" when it said nothing. Whoever shows `said` to a model
    treats it as the server's (fenced, tainting). `str()` is both, for a person."""

    def __init__(self, message: str, said: str = "") -> None:
        self.message, self.said = message, said
        super().__init__(f"{message}; the server said:\n{said}" if said else message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.message, self.said))


def header_secrets(servers: Mapping[str, McpServer], environ: Mapping[str, str]) -> Iterator[str]:
    """The values of the servers' headers (`headers_env`), to be redacted wherever they could
    be written; of a value with a scheme (`Bearer TOKEN`), the credential alone too, since a
    server may echo it without the scheme."""
    for name in sorted({v for entry in servers.values() for v in entry.headers_env.values()}):
        value = environ.get(name)
        if value:
            yield value
            scheme, _, credential = value.partition(" ")
            if scheme and len(credential.strip()) >= 8:
                yield credential.strip()
