"""The tools a model may call. Names live here so that validating a clawfile stays cheap;
the implementations are in `claw_batch.tools.registry` (TOOLS)."""

TOOL_NAMES = ("read", "write", "edit", "bash", "grep", "ls", "find", "remember", "memory_search")
DEFAULT_TOOLS = ("read", "grep", "ls", "find")
# What a job that has read outside content (a watch task's, any tainted job's) may use; a
# watch task takes only these from `defaults:`. More only when its task grants it, in
# `untrusted: {allow: [...]}` (claw_batch.taint).
READ_ONLY_TOOLS = ("read", "grep", "ls", "find", "memory_search")
GRANTABLE_TOOLS = ("write", "edit", "bash", "remember")
