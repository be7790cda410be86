"""Fingerprints and the up-to-date check (SPEC §4).

A job's fingerprint covers what decides its result: the task definition, the rendered
prompt, the system prompt (with placeholders for the date and the daily notes, which change
with every job) and the skills it may read, the model and sampling parameters, the tool set
and policy, the content of its input files and of its upstream outputs. Secrets, timeouts
and concurrency settings are not part of it. Each part is kept, so `claw why` can say which
one changed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from claw_batch.store.state import Done

# Task fields that do not decide the result: triggers, limits, documentation.
NOT_FINGERPRINTED = frozenset(
    {
        "description",
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
        "on_error",
        "sandbox",  # how bash runs, not what the job is: like a timeout
        "limits",  # what a bash call may use: like a timeout
    }
)


def digest(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()


@dataclass(frozen=True)
class Fingerprint:
    parts: dict[str, Any]  # name -> digest, or {path: sha256} for files

    @property
    def value(self) -> str:
        return digest(self.parts)


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
        }
    )


# How a reason for not running says that an output edited by hand is kept.
KEPT = "was modified by hand; kept (-B overwrites it)"


@dataclass(frozen=True)
class Decision:
    run: bool
    reasons: tuple[str, ...]  # why it runs; or, when it does not, what the user should know
    modified: tuple[str, ...] = ()  # outputs edited by hand since claw wrote them

    @property
    def status(self) -> str:
        if self.run:
            return "run"
        return "modified" if self.modified else "up-to-date"


def decide(
    done: Done | None,
    fp: Fingerprint,
    outputs_now: Mapping[str, str | None],
    *,
    force: bool = False,
    always: bool = False,
) -> Decision:
    """Whether a job must run. `outputs_now` maps each output recorded at its last success
    to the file's current hash (None when missing)."""
    if force:
        return Decision(True, ("forced (-B)",))
    if always:
        return Decision(True, ("always: true",))
    if done is None:
        return Decision(True, ("never ran (or did not finish)",))
    missing = [p for p, h in outputs_now.items() if h is None]
    modified = tuple(p for p, h in outputs_now.items() if h is not None and h != done.outputs[p])
    changes = explain(done.parts, fp.parts) if done.fingerprint != fp.value else []
    if modified:
        kept = [f"output {p} {KEPT}" for p in modified]
        return Decision(False, (*kept, *changes), modified)
    reasons = [f"output {p} is missing" for p in missing] + changes
    return Decision(bool(reasons), tuple(reasons))


def explain(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    reasons = []
    for name, label in (
        ("task", "task definition"),
        ("prompt", "prompt"),
        ("system", "context (workspace files or skills list)"),
        ("skills", "skill files"),
        ("tools", "tools or permissions"),
    ):
        if old.get(name) != new.get(name):
            reasons.append(f"{label} changed")
    if old.get("model") != new.get("model"):
        reasons.append(f"model changed ({old.get('model')} -> {new.get('model')})")
    reasons += _files("input", old.get("inputs", {}), new.get("inputs", {}))
    reasons += _files("upstream output", old.get("upstream", {}), new.get("upstream", {}))
    return reasons or ["fingerprint changed"]


def _files(kind: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    out = []
    for path in sorted(old.keys() | new.keys()):
        if path not in old:
            out.append(f"{kind} {path} added")
        elif path not in new or new[path] is None:
            out.append(f"{kind} {path} removed")
        elif old[path] != new[path]:
            out.append(f"{kind} {path} changed")
    return out
