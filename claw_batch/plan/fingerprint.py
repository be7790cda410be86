"""A job's fingerprint (SPEC §4).

It covers what decides the job's result: the task definition, the rendered prompt, the
system prompt (with placeholders for the date and the daily notes, which change with every
job) and the skills it may read, the model and sampling parameters, the tool set and policy,
the content of its input files and of its upstream outputs. Secrets, timeouts and
concurrency settings are not part of it. Each part is kept, so `claw why` can say which one
changed (claw_batch.plan.uptodate); beside them, parts that only explain (EXPLAINING): the
skills by name, what their list costs, the system prompt without it — so that a new skill
is named as such.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Task fields that do not decide the result: triggers, limits, documentation.
NOT_FINGERPRINTED = frozenset(
    {
        "description",
        "notify",  # where a result is sent: never what it is
        "timeout",
        "budget",
        "schedule",
        "tz",
        "catch_up",
        "watch",
        "done",
        "failed",
        "hook",
        "always",
        "batch",  # how the calls are paid, not what they answer
        "on_error",
        "sandbox",  # how bash runs, not what the job is: like a timeout
        "limits",  # what a bash call may use: like a timeout
    }
)


# Parts kept only to explain a change: the value does not cover them (`system` and `skills`
# do), so that a ledger written before they were kept holds the same value for the same job.
EXPLAINING = frozenset({"skill_files", "context", "skills_tokens", "mcp_called"})
# The part a job's record keeps of the MCP tools it called (mcp.S.T): what `always:` reads.
CALLED = "mcp_called"
SHORT = 12  # hex digits of a skill's digest kept by name: enough to tell it was edited


def digest(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()


@dataclass(frozen=True)
class Fingerprint:
    parts: dict[str, Any]  # name -> digest, or {path: sha256} for files

    @property
    def value(self) -> str:
        return digest({k: v for k, v in self.parts.items() if k not in EXPLAINING})


@dataclass(frozen=True)
class TaskParts:
    """What every job of a task has the same in its fingerprint, computed once per run."""

    digest: str  # of the task definition (task_digest)
    system: str  # the system prompt with placeholders (the real one is built to run)
    skills: Mapping[str, str]  # per offered skill, its files' content
    model: str  # as the clawfile names it: "provider/name" or "name"
    context: str  # the digest of the system prompt with placeholders without the skills list
    skills_tokens: int  # what the skills list adds to the real one (estimated)


def task_digest(task: Mapping[str, Any]) -> str:
    """The part of a task definition that decides its result."""
    return digest({k: v for k, v in task.items() if k not in NOT_FINGERPRINTED})


def fingerprint(
    *,
    task: str,
    prompt: str,
    system: str,
    skills: Mapping[str, str | None],
    model: str,
    tools: Any,
    inputs: Mapping[str, str | None],
    upstream: Mapping[str, str | None],
    context: str,
    skills_tokens: int,
) -> Fingerprint:
    return Fingerprint(
        {
            "task": task,
            "prompt": digest(prompt),
            "system": digest(system),
            "skills": digest(skills),
            "model": model,
            "tools": digest(tools),
            "inputs": dict(sorted(inputs.items())),
            "upstream": dict(sorted(upstream.items())),
            "skill_files": {name: (d or "")[:SHORT] for name, d in sorted(skills.items())},
            "context": context,  # a digest already: one per task, not one per job
            "skills_tokens": skills_tokens,
        }
    )
