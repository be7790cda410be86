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
from claw_batch.report.subjobs import DEEPEST, Nest
from claw_batch.safety.onscreen import visible
from claw_batch.store import history

RESULT_LINES = 12
RESULT_CHARS = 1_500


def _folders(root: Path) -> set[str]:
    """The runs with a folder of transcripts: a run whose jobs were all up to date or
    remembered has none (the ledger has it)."""
    runs = root / ".claw" / "runs"
    return {p.name for p in runs.iterdir() if p.is_dir()} if runs.is_dir() else set()


def _last(root: Path, folders: set[str]) -> str:
    """The newest run that ran a job, as `git show` shows the last commit: a run that found
    everything up to date has nothing to show. Without a ledger, the newest folder."""
    try:
        newest = history.last_with_jobs(root / ".claw" / "state.db")
    except sqlite3.DatabaseError:
        newest = None
    if newest is None and not folders:
        raise UsageError("no runs yet in .claw/runs/")
    return newest or max(folders)  # a run id starts with its time


def _ledger_run(root: Path, run_id: str) -> history.RunRow | None:
    """The run as the ledger has it; None when it does not (a ledger moved aside, or
    unreadable: the transcripts are still read)."""
    try:
        found = history.runs(root / ".claw" / "state.db", run_id=run_id, limit=1)
    except sqlite3.DatabaseError:
        return None
    return found[0] if found else None


def transcripts(directory: Path | None, task: str | None) -> list[Path]:
    paths = sorted(directory.glob("*.jsonl")) if directory else []
    if task is not None:
        paths = [p for p in paths if p.stem == task or p.stem.startswith(task + "[")]
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
        said = f"{e['server']}: {e.get('tool', e.get('name'))}: " if e.get("server") else ""
        yield indent(f"{mark} {said}" + clip(str(e.get("content", ""))), "      ")
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
    cached = usage.get("cached", 0)  # of the prompt, served from the provider's prefix cache
    spent = (f", {cached:,} cached" if isinstance(cached, int) and cached else "") + spent
    if e.get("replayed"):  # the call cache answered: what it shows was saved, not spent
        spent = f"{spent}, replayed from the call cache: nothing paid"
    yield f"assistant (step {e.get('step')}, {count(tokens, 'token')}{spent}):"
    if e.get("content"):
        yield indent(str(e["content"]).strip())
    for call in e.get("tool_calls", []):
        yield f"  {_called(call)}({_args(call['arguments'])})"
    if e.get("parsed_from_content"):  # the server left them in the text (llm.toolmarkup)
        yield f"  (tool calls parsed from content: {e['parsed_from_content']})"


def _called(call: Mapping[str, Any]) -> str:
    """A call's tool: its name, or an MCP server's tool as `server: tool` (`git: git_log`)."""
    server = call.get("server")
    return f"{server}: {call.get('tool', call['name'])}" if server else str(call["name"])


def _args(raw: str) -> str:
    try:
        parsed = json.loads(raw)
    except (ValueError, RecursionError):
        return raw
    if not isinstance(parsed, dict):
        return raw
    return ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)[:80]}" for k, v in parsed.items())


def show(root: Path, run_id: str, task: str | None) -> str:
    """The run's transcripts, a sub-job's nested under its parent, and where its remembered
    verdicts' are; a run the ledger has opens without a folder of its own."""
    folders = _folders(root)
    if run_id == "last":
        run_id = _last(root, folders)
    run = _ledger_run(root, run_id)
    if run is None and run_id not in folders:  # a name, never a path: `show ../../x`
        raise UsageError(f"no run '{run_id}' in .claw/runs/ (try `claw show last`)")
    directory = root / ".claw" / "runs" / run_id if run_id in folders else None
    jobs = run.jobs if run else ()
    nest = Nest(root, transcripts(directory, None), jobs)
    paths = nest.selected(task)
    remembered = [j for j in jobs if j.remembered and task in (None, j.task)]
    if task is not None and not paths and not remembered:
        raise UsageError(f"task '{task}' did not run in {run_id}")
    out = [f"run {run_id}"]
    if run is not None:
        out.append(f"started {shown_iso(run.started)} by {run.trigger}: {run.command}")
    nodes = {job.name: job.node for job in jobs if job.node}  # a cluster run's
    for path in paths:
        whose = nest.whose(path)
        if whose is not None:
            out.append(f"({nest.name(path)} is a sub-job of {whose})")
        out.extend(_job(nest, path, nodes, {path}))
    out.extend(line for job in remembered for line in _remembered(job))
    if run is not None and not jobs and not paths:
        up_to_date = ": everything was up to date" if run.status == "ok" else ""
        out.append(f"(no job ran{up_to_date})")
    return visible("\n".join(out))  # the model's text and tool results, the command


NESTED = "        "  # a sub-job's lines, under its parent's tool calls


def _job(nest: Nest, path: Path, nodes: Mapping[str, str | None], seen: set[Path]) -> list[str]:
    """One job's transcript, each sub-job's in it at its `delegate` event."""
    out: list[str] = []
    for event in nest.events(path):
        if event.get("type", event.get("kind")) == "delegate":
            out += _sub_job(nest, event, nodes, seen)
            continue
        lines = list(render_event(event))
        if event.get("type") == "start" and nodes.get(str(event.get("job"))):
            lines[0] += f" on {nodes[str(event.get('job'))]}"
        out.extend(lines)
    return out


def _sub_job(
    nest: Nest, event: Mapping[str, Any], nodes: Mapping[str, str | None], seen: set[Path]
) -> list[str]:
    out = [f"      ↳ sub-job {event.get('job')}: {event.get('status')}"]
    child = nest.delegated(event)
    if child is None:
        return out
    if not child.is_file():
        return [*out, f"{NESTED}(its transcript {event.get('transcript')} is no longer kept)"]
    if len(seen) > DEEPEST or child in seen:
        return out
    text = "\n".join(_job(nest, child, nodes, {*seen, child})).rstrip("\n")
    return out + [NESTED + line if line else line for line in text.split("\n")]


def _remembered(job: history.JobRow) -> list[str]:
    """A failed verdict given again: whose it is, and where its transcript is."""
    head = f"== {job.name}: {job.status}, {job.whose}: {job.error or ''}".rstrip()
    if not job.transcript:  # its run's folder was gone when it was given again
        return [head, f"   the transcript of run {job.remembered} is no longer kept"]
    again = f"claw show {job.remembered} {job.task}"
    return [head, f"   its transcript: {job.transcript} ({again})"]
