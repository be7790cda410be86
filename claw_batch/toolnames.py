"""The names of the tools a model may call, and which a tainted job keeps: a leaf, so that
reading and validating a clawfile imports no tool (their code is in claw_batch.tools)."""

TOOL_NAMES = (
    "read",
    "write",
    "edit",
    "bash",
    "grep",
    "ls",
    "find",
    "remember",
    "memory_search",
    "delegate",  # sub-jobs (claw_batch.run.delegation); offered only when listed
)
DEFAULT_TOOLS = ("read", "grep", "ls", "find")
# What a job that has read outside content (a watch task's, any tainted job's) may use; a
# watch task takes only these from `defaults:`. More only when its task grants it, in
# `untrusted: {allow: [...]}` (claw_batch.taint.jobtaint).
READ_ONLY_TOOLS = ("read", "grep", "ls", "find", "memory_search")
GRANTABLE_TOOLS = ("write", "edit", "bash", "remember", "delegate")
