"""Record model replies to JSON cassettes and replay them offline (`--record`, `--replay`).

One file per task, `<dir>/<task>.json`, pretty-printed so that a re-recording reads as a
diff. A request is looked up by the sha256 of its canonical form: model, messages, tools and
temperature, where the first messages read as `request.key_messages` (with placeholders for
the date, time, daily notes and project location), so that a recording replays on any day.

Cassettes are committed, so every string of a stored request and response goes through
`redact` first, and keys are computed from the redacted request, recording and replaying
alike: a replay with the same secrets at hand finds its recordings.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from claw_batch.errors import ReplayMismatch
from claw_batch.llm.base import LLM
from claw_batch.llm.messages import ChatRequest, Completion
from claw_batch.llm.replyjson import (
    completion_from_json,
    completion_json,
    message_json,
    redacted,
    tools_json,
)
from claw_batch.safety.atomic import write_atomic

VERSION = 1
EXCERPT = 60  # characters of recorded / current text shown around a difference
_ABSENT = object()


def _as_is(text: str) -> str:
    return text


def task_of(job: str) -> str:
    """The cassette a job records to: `triage[workspace/inbox/a.txt]` -> `triage`."""
    name = re.sub(r"[^A-Za-z0-9._-]", "_", job.split("[", 1)[0]).lstrip(".")
    return name or "default"


def canonical_request(request: ChatRequest) -> dict[str, Any]:
    messages = request.key_messages + request.messages[len(request.key_messages) :]
    return {
        "model": request.model,
        "messages": [message_json(m) for m in messages],
        "tools": tools_json(request.tools),
        # 0 from YAML and 0.0 from elsewhere are the same setting.
        "temperature": None if request.temperature is None else float(request.temperature),
    }


def request_key(request: ChatRequest, *, redact: Callable[[str], str] = _as_is) -> str:
    return _key_of(redacted(canonical_request(request), redact))


@dataclass(frozen=True)
class Recording:
    task: str
    key: str
    request: dict[str, Any]  # canonical, as stored
    completion: Completion


class ReplayLLM:
    """Answers from recordings; never touches the network."""

    def __init__(self, directory: Path, *, redact: Callable[[str], str] = _as_is) -> None:
        self.directory = directory
        self._redact = redact
        self._lock = threading.Lock()
        self._recordings: dict[str, list[Recording]] | None = None  # by task
        self._by_key: dict[str, Completion] = {}

    def complete(self, request: ChatRequest, *, deadline: float) -> Completion:
        recordings = self._load()
        canonical = redacted(canonical_request(request), self._redact)
        key = _key_of(canonical)
        task = task_of(request.job)
        for recording in recordings.get(task, ()):
            if recording.key == key:
                return recording.completion
        if key in self._by_key:  # the same request recorded under another task
            return self._by_key[key]
        raise ReplayMismatch(miss_message(request, canonical, recordings, self.directory))

    def _load(self) -> dict[str, list[Recording]]:
        with self._lock:
            if self._recordings is None:
                recordings: dict[str, list[Recording]] = {}
                for path in sorted(self.directory.glob("*.json")):
                    recordings[path.stem] = [
                        Recording(path.stem, key, i["request"], completion_from_json(i["response"]))
                        for key, i in read_cassette(path).items()
                    ]
                self._by_key = {r.key: r.completion for rs in recordings.values() for r in rs}
                self._recordings = recordings
            return self._recordings


class RecordingLLM:
    """Calls `inner` and stores every interaction, replacing an earlier one of the same key."""

    def __init__(
        self, inner: LLM, directory: Path, *, redact: Callable[[str], str] = _as_is
    ) -> None:
        self.inner = inner
        self.directory = directory
        self._redact = redact
        self._lock = threading.Lock()
        self._files: dict[Path, dict[str, dict[str, Any]]] = {}  # interactions by key

    def complete(self, request: ChatRequest, *, deadline: float) -> Completion:
        completion = self.inner.complete(request, deadline=deadline)
        canonical = redacted(canonical_request(request), self._redact)
        key = _key_of(canonical)
        interaction = {
            "key": key,
            "job": self._redact(request.job),
            "request": canonical,
            "response": redacted(completion_json(completion), self._redact),
        }
        path = self.directory / f"{task_of(request.job)}.json"
        with self._lock:
            if path not in self._files:
                self._files[path] = read_cassette(path) if path.exists() else {}
            self._files[path][key] = interaction
            write_cassette(path, list(self._files[path].values()))
        return completion


def read_cassette(path: Path) -> dict[str, dict[str, Any]]:
    """The interactions of a cassette by key, recomputed so that a hand-edited request counts."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("version") != VERSION:
            raise ValueError(f"version {data.get('version')!r}, expected {VERSION}")
        interactions = {_key_of(i["request"]): i for i in data["interactions"]}
        for interaction in interactions.values():
            completion_from_json(interaction["response"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        detail = f"missing key {exc}" if isinstance(exc, KeyError) else str(exc)
        raise ReplayMismatch(
            f"cassette {path} is unreadable ({detail}); fix it, or delete it and record again "
            "with --record"
        ) from None
    return interactions


def write_cassette(path: Path, interactions: list[dict[str, Any]]) -> None:
    document = {"version": VERSION, "interactions": interactions}
    write_atomic(path, json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def miss_message(
    request: ChatRequest,
    canonical: dict[str, Any],
    recordings: dict[str, list[Recording]],
    directory: Path,
) -> str:
    task = task_of(request.job)
    turn = sum(m.role == "assistant" for m in request.messages) + 1
    head = f"no recorded reply for job {request.job!r}, turn {turn}"
    candidates = recordings.get(task) or [r for rs in recordings.values() for r in rs]
    if not candidates:
        return f"{head}: no recordings for task {task!r} in {directory}; record them with --record"
    closest = max(candidates, key=lambda r: _likeness(r.request, canonical))
    lead = "closest" if recordings.get(task) else f"no recordings for task {task!r}; closest"
    where, recorded, now = _first_difference(closest.request, canonical)
    return "\n".join(
        [
            f"{head}, in {directory}",
            f"  {lead} recording (task {closest.task!r}) differs at {where}:",
            f"    recorded: {recorded}",
            f"    now:      {now}",
            "  if the change is intended, record again with --record",
        ]
    )


def _likeness(recorded: dict[str, Any], now: dict[str, Any]) -> tuple[int, int]:
    common = _common_prefix(_compact(recorded), _compact(now))
    return common, -abs(len(recorded.get("messages", [])) - len(now["messages"]))


def _first_difference(recorded: Any, now: Any, path: str = "") -> tuple[str, str, str]:
    if isinstance(recorded, dict) and isinstance(now, dict):
        for key in [*now, *(k for k in recorded if k not in now)]:
            a, b = recorded.get(key, _ABSENT), now.get(key, _ABSENT)
            if a != b:
                return _first_difference(a, b, f"{path}.{key}" if path else key)
    elif isinstance(recorded, list) and isinstance(now, list):
        for i in range(max(len(recorded), len(now))):
            a = recorded[i] if i < len(recorded) else _ABSENT
            b = now[i] if i < len(now) else _ABSENT
            if a != b:
                return _first_difference(a, b, f"{path}[{i}]")
    elif isinstance(recorded, str) and isinstance(now, str):
        i = _common_prefix(recorded, now)
        return f"{path}, character {i + 1}", _excerpt(recorded, i), _excerpt(now, i)
    return path or "the request", _show(recorded), _show(now)


def _common_prefix(a: str, b: str) -> int:
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )


def _excerpt(text: str, at: int) -> str:
    start = max(0, at - EXCERPT // 3)  # the same for both sides, so that they line up
    piece = json.dumps(text[start : start + EXCERPT], ensure_ascii=False)
    return ("..." if start > 0 else "") + piece + ("..." if start + EXCERPT < len(text) else "")


def _show(value: Any) -> str:
    if value is _ABSENT:
        return "(absent)"
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= EXCERPT else text[:EXCERPT] + "..."


def _compact(data: dict[str, Any]) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _key_of(canonical: dict[str, Any]) -> str:
    return hashlib.sha256(_compact(canonical).encode("utf-8")).hexdigest()


class McpCassette:
    """What MCP servers answered, beside the model's replies: `<dir>/mcp/<server>.json` holds
    the server's tool list and its tools' results, each under the job, the tool, its
    arguments and the how-manieth such call of the job it was (a clock's answers differ from
    call to call). Every string is redacted, as the model's are; header values never get here
    (they are not part of the call)."""

    def __init__(self, directory: Path, *, redact: Callable[[str], str] = _as_is) -> None:
        self.directory = directory / "mcp"
        self._redact = redact
        self._lock = threading.Lock()
        self._files: dict[str, dict[str, Any]] = {}
        self._seen: dict[str, int] = {}  # the calls so far, by their key without the count

    def catalog(self, server: str) -> Any:
        """The server's tools as recorded (a JSON list); ReplayMismatch when there are none."""
        with self._lock:
            tools = self._file(server).get("tools")
        if tools is None:
            raise ReplayMismatch(
                f"no recorded tool list of MCP server {server!r} in {self.directory}; record "
                "it with --record"
            )
        return tools

    def record_catalog(self, server: str, tools: Any) -> None:
        with self._lock:
            self._file(server)["tools"] = redacted(tools, self._redact)
            self._save(server)

    def reply(self, job: str, server: str, tool: str, arguments: Any) -> dict[str, Any]:
        """The recorded result of the call; ReplayMismatch when it was not recorded."""
        with self._lock:
            key, shown = self._key(job, server, tool, arguments)
            found = self._file(server).get("calls", {}).get(key)
        if not isinstance(found, dict) or not isinstance(found.get("text"), str):
            raise ReplayMismatch(
                f"no recorded result for job {job!r}'s MCP call {shown} in {self.directory}; "
                "if the change is intended, record again with --record"
            )
        return found

    def record(
        self, job: str, server: str, tool: str, arguments: Any, text: str, is_error: bool
    ) -> None:
        with self._lock:
            key, shown = self._key(job, server, tool, arguments)
            calls = self._file(server).setdefault("calls", {})
            calls[key] = {
                "call": shown,
                "job": self._redact(job),
                "text": self._redact(text),
                "is_error": is_error,
            }
            self._save(server)

    def _key(self, job: str, server: str, tool: str, arguments: Any) -> tuple[str, str]:
        """The call's key (the lock held), and how a message shows it."""
        call = redacted({"job": job, "tool": tool, "arguments": arguments}, self._redact)
        base = _key_of(call)
        n = self._seen.get(base, 0)
        self._seen[base] = n + 1
        shown = f"{server}: {tool}({_compact(call['arguments'])[:EXCERPT]})"
        return _key_of({**call, "n": n}), shown

    def _file(self, server: str) -> dict[str, Any]:
        if server not in self._files:
            path = self.directory / f"{server}.json"
            data: dict[str, Any] = {}
            if path.exists():
                try:
                    data = json.loads(path.read_text(encoding="utf-8"))
                    if data.get("version") != VERSION:
                        raise ValueError(f"version {data.get('version')!r}, expected {VERSION}")
                except (OSError, ValueError, AttributeError, RecursionError) as exc:
                    raise ReplayMismatch(
                        f"cassette {path} is unreadable ({exc}); fix it, or delete it and "
                        "record again with --record"
                    ) from None
            self._files[server] = data
        return self._files[server]

    def _save(self, server: str) -> None:
        document = {**self._files[server], "version": VERSION}
        text = json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
        write_atomic(self.directory / f"{server}.json", text)
