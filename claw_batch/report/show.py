"""`claw show`: a transcript, readable."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from claw_batch.clock import shown_iso
from claw_batch.errors import UsageError
from claw_batch.figures import count
from claw_batch.store import history
from claw_batch.store.state import State
from claw_batch.store.transcript import read_events

RESULT_LINES = 12
RESULT_CHARS = 1_500


def run_dir(root: Path, run_id: str) -> Path:
    runs = root / ".claw" / "runs"
    known = {p.name for p in runs.iterdir() if p.is_dir()} if runs.is_dir() else set()
    if run_id == "last":
        run_id = _last_run(root) or ""
        if run_id not in known:
            raise UsageError("no runs yet in .claw/runs/")
    if run_id not in known:  # a name, never a path: `show ../../x` reads nothing
        raise UsageError(f"no run '{run_id}' in .claw/runs/ (try `claw show last`)")
    return runs / run_id


def _last_run(root: Path) -> str | None:
    db = root / ".claw" / "state.db"
    if not db.exists():
        return None
    state = State(db)
    try:
        return state.last_run_id()
    finally:
        state.close()


def transcripts(directory: Path, task: str | None) -> list[Path]:
    paths = sorted(directory.glob("*.jsonl"))
    if task is not None:
        paths = [p for p in paths if p.stem == task or p.stem.startswith(task + "[")]
        if not paths:
            raise UsageError(f"task '{task}' did not run in {directory.name}")
    return paths


def clip(text: str) -> str:
    lines = text.splitlines()
    shown = "\n".join(lines[:RESULT_LINES])[:RESULT_CHARS]
    hidden = len(text) - len(shown)
    return shown + (f"\n… ({hidden} more characters)" if hidden > 0 else "")


def indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line for line in text.splitlines())


def render_event(e: Mapping[str, Any]) -> Iterator[str]:
    kind = e.get("type")
    if kind == "start":
        yield f"== {e.get('job')}"
    elif kind == "system":
        yield f"[system prompt: {len(e.get('content', ''))} characters]"
    elif kind == "user":
        yield "user:\n" + indent(str(e.get("content", "")).strip())
    elif kind == "assistant":
        yield from _assistant(e)
    elif kind == "tool_result":
        mark = "→" if e.get("ok") else "✗"
        yield indent(f"{mark} " + clip(str(e.get("content", ""))), "      ")
    elif kind == "correction":
        yield "claw: " + str(e.get("message", ""))
    elif kind == "unsandboxed":
        yield "      ! ran without a sandbox (the task says sandbox: none)"
    elif kind == "end":
        status = e.get("status")
        error = f": {e['error']}" if e.get("error") else ""
        yield f"== {status} ({e.get('seconds', 0)} s){error}\n"


def _assistant(e: Mapping[str, Any]) -> Iterator[str]:
    usage = e.get("usage", {})
    tokens = usage.get("prompt", 0) + usage.get("completion", 0)
    cost = e.get("cost_usd")
    spent = f", ${cost:.4f}" if isinstance(cost, (int, float)) else ""
    yield f"assistant (step {e.get('step')}, {count(tokens, 'token')}{spent}):"
    if e.get("content"):
        yield indent(str(e["content"]).strip())
    for call in e.get("tool_calls", []):
        yield f"  {call['name']}({_args(call['arguments'])})"
    if e.get("parsed_from_content"):  # the server left them in the text (llm.toolmarkup)
        yield f"  (tool calls parsed from content: {e['parsed_from_content']})"


def _args(raw: str) -> str:
    try:
        parsed = json.loads(raw)
    except (ValueError, RecursionError):
        return raw
    if not isinstance(parsed, dict):
        return raw
    return ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)[:80]}" for k, v in parsed.items())


def show(root: Path, run_id: str, task: str | None) -> str:
    directory = run_dir(root, run_id)
    out = [f"run {directory.name}", *_started(root, directory.name)]
    for path in transcripts(directory, task):
        for event in read_events(path):
            out.extend(render_event(event))
    return "\n".join(out)


def _started(root: Path, run_id: str) -> list[str]:
    """`started 2026-11-23 23:00 by cron: claw run --due`, as the ledger has it; nothing
    when it does not (a ledger moved aside, or unreadable: the transcripts are still read)."""
    try:
        found = history.runs(root / ".claw" / "state.db", run_id=run_id, limit=1)
    except sqlite3.DatabaseError:
        return []
    return [f"started {shown_iso(r.started)} by {r.trigger}: {r.command}" for r in found]
