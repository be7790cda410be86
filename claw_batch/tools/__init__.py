"""The tools a model may call. Names live here so that validating a clawfile stays cheap;
the implementations are in `claw_batch.tools.registry` (TOOLS)."""

TOOL_NAMES = ("read", "write", "edit", "bash", "grep", "ls", "find", "remember", "memory_search")
DEFAULT_TOOLS = ("read", "grep", "ls", "find")
# What a task that reads untrusted content (a watch task) gets from `defaults:`; more (write,
# edit, bash, remember) only when the task itself grants it.
READ_ONLY_TOOLS = ("read", "grep", "ls", "find", "memory_search")
