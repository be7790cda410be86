"""The example project's MCP server: the team's glossary, looked up read-only.

A stdio server (the SDK's MCPServer, once FastMCP): claw starts it from the project root,
in the same sandbox as bash, and offers its tools to a task that names them, e.g.
`tools: [read, mcp.glossary.lookup]`. It reads the file its command names and nothing else,
needs no network and no environment, and changes nothing: `read_only: true` in its entry
keeps its tools with a job that has read outside content. See the README, "MCP servers".

Try it by hand: `claw mcp list glossary`.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

ENTRY = re.compile(r"^- \*\*(?P<term>[^*]+)\*\*: (?P<meaning>.+)$")
READ_ONLY = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)

server = MCPServer("glossary", instructions="The team's glossary: what its terms mean.")


def glossary() -> dict[str, str]:
    """Term (lower case) -> meaning, from the file named on the command line: read on each
    call, so an edit of the glossary is seen without a restart."""
    path = Path(sys.argv[1] if len(sys.argv) > 1 else "servers/glossary.md")
    found = (ENTRY.match(line) for line in path.read_text(encoding="utf-8").splitlines())
    return {m["term"].strip().lower(): m["meaning"].strip() for m in found if m}


@server.tool(annotations=READ_ONLY)
def lookup(term: str) -> str:
    """What a term of the team's glossary means (case does not matter)."""
    terms = glossary()
    meaning = terms.get(term.strip().lower())
    if meaning is None:
        return f"{term!r} is not in the glossary (it has: {', '.join(sorted(terms))})"
    return meaning


@server.tool(annotations=READ_ONLY)
def terms() -> list[str]:
    """Every term the glossary explains, sorted."""
    return sorted(glossary())


if __name__ == "__main__":
    server.run()  # stdio: claw speaks to it on its standard input and output
