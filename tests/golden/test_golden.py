"""Golden tests: each directory in cases/ is a small claw project plus the model's scripted
replies, run through the real CLI against a fake OpenAI server. One snapshot per case holds
what the user saw (exit codes, stdout, stderr), what the model saw (the requests), every
file the run created or changed, and each transcript.

A case directory holds the project itself and two harness files that are not copied:
  case.json     {"about": "what it shows", "commands": [["run", "task"], ["show", "last"]]}
                (and optionally "env": {...}, added to the environment of every command)
  replies.json  the model's replies, in order:
                  {"text": "..." | ["line", ...]}       a final answer (lines are joined)
                  {"json": {...}}                         a final answer, as JSON text
                  {"tool_calls": [{"name": "read", "arguments": {...} | "raw text"}],
                   "content": "..."}                      tool calls (content optional)
                  {"error": 503, "message": "...", "retry_after": 0}   an HTTP error
                every reply may add "usage": [prompt_tokens, completion_tokens].

Re-create the snapshots after an intended change with
  python -m pytest tests/golden --snapshot-update
and read the diff: a snapshot is only golden if the behaviour it records is right.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAI, Reply, call, error, text, tool_calls
from helpers import claw
from syrupy.assertion import SnapshotAssertion

CASES = Path(__file__).parent / "cases"
HARNESS_FILES = ("case.json", "replies.json")
NOW = "2026-11-22T23:05:00+01:00"
API_KEY = "sk-golden-0123456789abcdef0123"
RUN_ID = re.compile(r"\b(\d{8}-\d{6})-[0-9a-f]{6}\b")
DURATION_KEYS = frozenset({"t", "seconds", "duration_s"})
DURATION_IN_JSON = re.compile(r'("(?:t|seconds|duration_s)": )-?\d+(?:\.\d+)?')
DURATION_IN_TEXT = re.compile(r"(?<![\w.])\d+\.\d+ s\b")
# `claw show` counts the system prompt's characters, and it holds the project's path.
PROMPT_SIZE = re.compile(r"\[system prompt: \d+ characters\]")
REPLY_KEYS = frozenset(
    {"text", "json", "tool_calls", "content", "error", "message", "retry_after", "usage"}
)


def case_names() -> list[str]:
    return sorted(p.name for p in CASES.iterdir() if (p / "case.json").is_file())


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as srv:
        # Out of script: fail at once (a 5xx would be retried with backoff, slowly).
        srv.handler = lambda body: error(400, "golden: the scripted replies ran out")
        yield srv


@pytest.mark.parametrize("case", case_names())
def test_golden(case: str, tmp_path: Path, server: FakeOpenAI, snapshot: SnapshotAssertion) -> None:
    source = CASES / case
    spec = json.loads((source / "case.json").read_text())
    replies = load_replies(source / "replies.json")
    root = tmp_path / "project"
    shutil.copytree(source, root, ignore=shutil.ignore_patterns(*HARNESS_FILES))
    env = {
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": API_KEY,
        "CLAW_NOW": NOW,
        **spec.get("env", {}),
    }
    server.enqueue(*replies)
    before = snapshot_files(root)
    run_ids: list[str] = []
    commands = []
    for argv in spec["commands"]:
        result = claw(root, *argv, env=env)
        run_ids += new_runs(root, run_ids)
        commands.append((argv, result))
    after = snapshot_files(root)

    assert [p.name for p in tmp_path.iterdir()] == ["project"], "a file was written outside"
    assert len(server.requests) == len(replies), "every scripted reply is used, no more"
    norm = Normaliser(root, tmp_path, server.base_url, run_ids)
    record = {
        "about": spec["about"],
        "commands": [
            {
                "argv": "claw " + " ".join(argv),
                "exit_code": r.exit_code,
                "stdout": norm.text(r.stdout),
                "stderr": norm.text(r.stderr),
            }
            for argv, r in commands
        ],
        "files": {
            norm.text(rel): norm.text(decode(data))
            for rel, data in sorted(after.items())
            if before.get(rel) != data and not is_transcript(rel)
        },
        "transcripts": {
            norm.text(rel): norm.data(parse_jsonl(root / rel))
            for rel in after
            if is_transcript(rel)
        },
        "requests": norm.data(requests_view(server.requests)),
        # Its content is not shown (binary; the state tests' job), but whether a run made it.
        "state_db": (root / ".claw" / "state.db").is_file(),
    }
    deleted = sorted(set(before) - set(after))
    if deleted:
        record["deleted"] = deleted
    assert record == snapshot


def load_replies(path: Path) -> list[Reply]:
    specs = json.loads(path.read_text()) if path.is_file() else []
    return [to_reply(s) for s in specs]


def to_reply(spec: dict[str, Any]) -> Reply:
    unknown = set(spec) - REPLY_KEYS
    assert not unknown, f"unknown keys in a scripted reply: {unknown}"
    usage = tuple(spec.get("usage", (10, 5)))
    if "error" in spec:
        return error(
            spec["error"], spec.get("message", "fake error"), retry_after=spec.get("retry_after")
        )
    if "tool_calls" in spec:
        calls = [call(c["name"], c.get("arguments", {})) for c in spec["tool_calls"]]
        return tool_calls(*calls, content=spec.get("content"), usage=usage)
    if "json" in spec:
        return text(json.dumps(spec["json"]), usage=usage)
    content = spec["text"]
    return text("\n".join(content) if isinstance(content, list) else content, usage=usage)


def snapshot_files(root: Path) -> dict[str, bytes]:
    """Every file of the project but the state database (binary, and its own tests' job)
    and the caches of the validated clawfile, the parsed skills and the model's replies
    (test_configcache's, test_skills' and tests/run/test_callcache's)."""
    caches = (".claw/state.db", ".claw/clawfile.json", ".claw/skills.json", ".claw/cache/")
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.relative_to(root).as_posix().startswith(caches)
    }


def new_runs(root: Path, known: list[str]) -> list[str]:
    runs = root / ".claw" / "runs"
    found = sorted(p.name for p in runs.iterdir()) if runs.is_dir() else []
    return [r for r in found if r not in known]


def is_transcript(rel: str) -> bool:
    return rel.startswith(".claw/runs/") and rel.endswith(".jsonl")


def parse_jsonl(path: Path) -> list[Any]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def decode(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return f"<{len(data)} bytes, not UTF-8>"


def requests_view(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the model was sent. A request that continues the previous conversation shows
    only its new messages, after a count of the ones it repeats."""
    views = []
    previous: list[Any] = []
    for body in requests:
        messages = body["messages"]
        view: dict[str, Any] = {
            "model": body["model"],
            "tools": [t["function"]["name"] for t in body.get("tools", [])],
        }
        if "temperature" in body:
            view["temperature"] = body["temperature"]
        if previous and messages[: len(previous)] == previous:
            view["repeats_previous_messages"] = len(previous)
            view["messages"] = messages[len(previous) :]
        else:
            view["messages"] = messages
        views.append(view)
        previous = messages
    return views


class Normaliser:
    """Replaces what differs from run to run: paths, the server's port, run ids, durations."""

    def __init__(self, root: Path, tmp: Path, base_url: str, run_ids: list[str]) -> None:
        self.replacements = [
            (str(root.resolve()), "<root>"),
            (str(root), "<root>"),
            (str(tmp.resolve()), "<tmp>"),
            (str(tmp), "<tmp>"),
            (base_url, "<base-url>"),
            *((rid, f"{rid[:15]}-<run-{n}>") for n, rid in enumerate(run_ids, 1)),
        ]

    def text(self, s: str) -> str:
        for old, new in self.replacements:
            s = s.replace(old, new)
        s = RUN_ID.sub(r"\1-<run-id>", s)
        s = DURATION_IN_JSON.sub(r'\1"<duration>"', s)
        s = PROMPT_SIZE.sub("[system prompt: <n> characters]", s)
        return DURATION_IN_TEXT.sub("<duration> s", s)

    def data(self, value: Any, key: str | None = None) -> Any:
        if key in DURATION_KEYS and isinstance(value, (int, float)):
            return "<duration>"
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.data(v) for v in value]
        if isinstance(value, dict):
            return {k: self.data(v, k) for k, v in value.items()}
        return value
