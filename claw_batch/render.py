"""Prompt templates: Jinja2 with StrictUndefined."""

from __future__ import annotations

# Every name a prompt template may use (SPEC §3). `claw validate` refuses any other.
TEMPLATE_VARIABLES = frozenset(
    {"task", "today", "now", "item", "inputs", "needs", "files", "git", "read", "glob"}
)
