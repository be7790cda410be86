"""No sink holds a secret: a real `claw run` whose model echoes keys, through every place claw
writes or prints.

The model (a streaming fake endpoint) splits each key across two SSE deltas, puts them in a
tool call's JSON arguments and in a failing tool call, and in its final answer; an endpoint
error quotes one. Then every sink is read back — transcripts, the run's summary, the ledger
(every table), the daily note, the output, the cassette, what `claw run -v --json`, `claw log`
and `claw show` print — and no key, nor either half of one, is in any of them.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAI, Reply, error, raw_stream
from helpers import claw, make_project

from claw_batch.safety.redact import Redactor
from claw_batch.terminal.crash import save_traceback

NOW = "2026-11-22T23:05:00+01:00"
# The provider's key: its variable's name says nothing secret, so only the clawfile makes it
# known; with characters JSON escapes. Its halves are what a split stream delta would hold.
KEY_HALVES = ('loc-"Q7xV\\9pLm-HALFONE', "HALFTWO-Zr4w8")
KEY = "".join(KEY_HALVES)
# Known by its variable's name alone; not ASCII.
TOKEN_HALVES = ("tök-ünï-HALFTHREE", "HALFFOUR-ß81")
TOKEN = "".join(TOKEN_HALVES)
AWS = ("AKIAABCDEFG", "HIJKLMNOP")  # no one's value: redacted by its shape
PIECES = (*KEY_HALVES, *TOKEN_HALVES)

CLAWFILE = """
    version: 1
    model: local/m
    providers:
      local:
        base_url: {url}
        api_key_env: MY_LLM
        stream: true
    tasks:
      echo:
        prompt: Tell me the keys.
        output: out/answer.md
        tools: [read, write]
        permissions: {{write: ["out/**"]}}
      broken:
        prompt: Fail.
        output: out/broken.md
"""


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return {"id": "c1", "object": "chat.completion.chunk", "model": "m", "choices": [choice]}


def streamed_text(*pieces: str) -> Reply:
    return raw_stream(*(chunk({"content": p}) for p in pieces), chunk({}, "stop"))


def streamed_calls(*calls: tuple[str, str, str]) -> Reply:
    """Tool calls whose JSON arguments arrive in pieces, each split at a key's middle."""
    chunks = []
    for index, (name, first, second) in enumerate(calls):
        head = {"index": index, "id": f"call_{index}", "type": "function"}
        chunks.append(chunk({"tool_calls": [{**head, "function": {"name": name}}]}))
        for piece in (first, second):
            chunks.append(
                chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
            )
    return raw_stream(*chunks, chunk({}, "tool_calls"))


def split_json(args: dict[str, str], at: str) -> tuple[str, str]:
    """`args` as JSON, cut right after `at` (which JSON may escape)."""
    text = json.dumps(args)
    cut = text.index(json.dumps(at)[1:-1]) + len(json.dumps(at)[1:-1])
    return text[:cut], text[cut:]


def sinks(root: Path) -> Iterator[tuple[str, str]]:
    """Every file claw wrote, as text, and the ledger's every row."""
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.suffix in (".jsonl", ".json", ".md"):
            yield str(path.relative_to(root)), path.read_text(encoding="utf-8")
    with sqlite3.connect(root / ".claw" / "state.db") as db:
        yield "state.db", "\n".join(db.iterdump())


@pytest.fixture
def project(tmp_path: Path) -> Iterator[tuple[Path, FakeOpenAI, dict[str, str]]]:
    with FakeOpenAI() as server:
        root = make_project(tmp_path / "p", CLAWFILE.format(url=server.base_url))
        env = {"MY_LLM": KEY, "DEPLOY_TOKEN": TOKEN, "CLAW_NOW": NOW}
        yield root, server, env


def test_no_sink_holds_a_key_even_split_across_stream_chunks(
    project: tuple[Path, FakeOpenAI, dict[str, str]],
) -> None:
    root, server, env = project
    server.enqueue(
        streamed_calls(
            (
                "write",
                *split_json({"path": "out/keys.md", "content": f"{KEY} {TOKEN}"}, KEY_HALVES[0]),
            ),
            ("read", *split_json({"path": f"out/{TOKEN}.md"}, TOKEN_HALVES[0])),
        ),
        streamed_text(
            f"The key is {KEY_HALVES[0]}",
            f"{KEY_HALVES[1]}, the token {TOKEN_HALVES[0]}",
            f"{TOKEN_HALVES[1]}, and {AWS[0]}",
            f"{AWS[1]}.",
        ),
        error(400, f"bad request from {KEY} ({TOKEN})"),
    )
    run = claw(root, "run", "echo", "-v", "--json", "--record", env=env)
    assert run.exit_code == 0, run.stderr
    failed = claw(root, "run", "broken", env=env)
    assert failed.exit_code == 1
    run_id = json.loads(run.stdout)["run_id"]
    printed = {
        "claw run -v --json (stdout)": run.stdout,
        "claw run -v --json (stderr)": run.stderr,
        "claw run broken (stderr)": failed.stderr,
        "claw log": claw(root, "log", env=env).stdout,
        "claw show": claw(root, "show", run_id, env=env).stdout,
    }
    seen = {**dict(sinks(root)), **printed}
    seen.pop("out/keys.md")  # the model's own file, written with the write tool: see below
    assert {
        "out/answer.md",
        "cassettes/echo.json",
        f".claw/runs/{run_id}/summary.json",
        "workspace/memory/2026-11-22.md",
        "state.db",
    } <= set(seen)
    leaks = {name: [p for p in (*PIECES, *AWS) if p in text] for name, text in seen.items()}
    assert {name: found for name, found in leaks.items() if found} == {}
    # What was said is still there, each key where it was.
    assert (root / "out/answer.md").read_text() == (
        "The key is [REDACTED], the token [REDACTED], and [REDACTED].\n"
    )
    assert "error: no such file or directory: out/[REDACTED].md" in run.stderr
    assert "bad request from [REDACTED] ([REDACTED])" in failed.stderr
    # The model's own files hold what it wrote: a file of the project it could read anyway.
    assert (root / "out/keys.md").read_text() == f"{KEY} {TOKEN}"


def test_a_saved_traceback_holds_no_declared_or_environment_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DEPLOY_TOKEN", TOKEN)
    Redactor([KEY])  # what a run does with its providers' keys
    try:
        raise RuntimeError(f"connect failed with {KEY} / {TOKEN} / {''.join(AWS)}")
    except RuntimeError as e:
        saved = save_traceback(e)
    try:
        text = saved.read_text()
    finally:
        saved.unlink()
    assert "RuntimeError: connect failed with [REDACTED] / [REDACTED] / [REDACTED]" in text
    assert not any(p in text for p in (*PIECES, *AWS)), text
    assert sys.exc_info() == (None, None, None)


def test_a_key_on_the_command_line_is_not_kept_in_the_ledger(tmp_path: Path) -> None:
    """runs.argv records the command line; a key typed into it (`--model` is not a place
    for one, but people paste) is redacted like everything else the ledger keeps."""
    import sqlite3

    from fake_openai import FakeOpenAI, text
    from helpers import claw, make_project

    key = "sk-proj-Zx81aQw0cmdline7Kd92hsl"
    root = make_project(tmp_path / "p", "version: 1\nmodel: m\ntasks:\n  t: {prompt: hi}\n")
    with FakeOpenAI() as server:
        server.enqueue(text("done"))
        env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": key}
        claw(root, "run", "--model", key, env=env)
    db = sqlite3.connect(root / ".claw" / "state.db")
    (argv,) = db.execute("SELECT argv FROM runs").fetchone()
    db.close()
    assert key not in argv and argv == f"claw run -C {root} --model [REDACTED]"


def test_remember_keeps_no_key_in_memory(tmp_path: Path) -> None:
    """MEMORY.md goes into every later system prompt: a key a model remembers is redacted."""
    from fake_openai import FakeOpenAI, call, text, tool_calls
    from helpers import claw, make_project

    key = "sk-proj-Rm81aQw0memory7Kd92hsl"
    clawfile = "version: 1\nmodel: m\ntasks:\n  t: {prompt: hi, tools: [remember]}\n"
    root = make_project(tmp_path / "p", clawfile)
    with FakeOpenAI() as server:
        server.enqueue(
            tool_calls(call("remember", {"key": "api", "text": f"the key is {key}"})),
            text("done"),
        )
        env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": key}
        assert claw(root, "run", env=env).exit_code == 0
    memory = (root / "workspace" / "MEMORY.md").read_text()
    assert key not in memory and "- api: the key is " in memory


# Credentials in the project's files, as a checkout and a deploy leave them: redacted by
# their names, not their shapes (none of them is a key shape claw knows).
GIT_BASIC = "eC1hY2Nlc3MtdG9rZW46bG93ZXJjYXNlLWJhc2lj"
ENV_FILES = {
    ".git/config": (
        '[remote "origin"]\n\turl = https://github.com/mara/site\n'
        f'[http "https://github.com/"]\n\textraheader = AUTHORIZATION: basic {GIT_BASIC}\n'
    ),
    ".env": "DB_HOST=db\nDB_PASSWORD=Hunter2-env-pw\nexport API_KEY='k3y with space'\nTOKEN=\n",
    "deploy.yaml": "deploy:\n  user: mara\n  password: yaml-pw-77\n",
}
FILE_SECRETS = (GIT_BASIC, "Hunter2-env-pw", "k3y with space", "yaml-pw-77")


def test_credentials_read_from_files_reach_no_sink(tmp_path: Path) -> None:
    """The model reads the files (the tool results go into the transcript), quotes each
    credential in its answer (the output, the ledger, the daily note) and remembers one."""
    from fake_openai import FakeOpenAI, call, text, tool_calls

    clawfile = (
        "version: 1\nmodel: m\ntasks:\n  t:\n    prompt: Check the deploy settings.\n"
        "    output: out/report.md\n    tools: [read, remember]\n"
    )
    root = make_project(tmp_path / "p", clawfile, ENV_FILES)
    answer = (
        f"git sends authorization: basic {GIT_BASIC}\n"
        "DB_PASSWORD=Hunter2-env-pw\nAPI_KEY='k3y with space'\npassword: yaml-pw-77\n"
    )
    with FakeOpenAI() as server:
        server.enqueue(
            tool_calls(*(call("read", {"path": rel}) for rel in ENV_FILES)),
            tool_calls(call("remember", {"key": "deploy", "text": "password: yaml-pw-77"})),
            text(answer),
        )
        env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-x", "CLAW_NOW": NOW}
        run = claw(root, "run", "--json", env=env)
    assert run.exit_code == 0, run.stderr
    seen = {name: text for name, text in sinks(root) if not name.startswith(tuple(ENV_FILES))}
    assert {"out/report.md", "workspace/MEMORY.md", "state.db"} <= set(seen)
    assert any(name.endswith(".jsonl") for name in seen)
    leaks = {name: [s for s in FILE_SECRETS if s in text] for name, text in seen.items()}
    assert {name: found for name, found in leaks.items() if found} == {}
    assert (root / "out/report.md").read_text() == (
        "git sends authorization: basic [REDACTED]\n"
        "DB_PASSWORD=[REDACTED]\nAPI_KEY='[REDACTED]'\npassword: [REDACTED]\n"
    )


def test_remember_checks_key_and_text_before_it_changes_them(tmp_path: Path) -> None:
    """remember lower-cases a key and joins a text's lines: a secret lower-cased or with its
    whitespace changed is no longer the value or shape the redactor knows, so each is checked
    as it came. A key that is a secret is refused (masked, it would be every such fact's key)."""
    from fake_openai import FakeOpenAI, call, text, tool_calls

    from claw_batch.store.transcript import read_events

    declared = "Dpl0y-Token-MixedCase"  # DEPLOY_TOKEN's value: known by the variable's name
    aws = "AKIAABCDEFGHIJKLMNOP"  # known by its shape, which lower case is not
    spaced = "two  spaces\tand a tab"  # DB_PASSWORD's value, whitespace and all
    clawfile = "version: 1\nmodel: m\ntasks:\n  t: {prompt: hi, tools: [remember]}\n"
    root = make_project(tmp_path / "p", clawfile)
    with FakeOpenAI() as server:
        server.enqueue(
            tool_calls(
                call("remember", {"key": declared, "text": "the deploy token"}),
                call("remember", {"key": aws, "text": "the aws key id"}),
                call("remember", {"key": "db", "text": f"the password is {spaced}"}),
            ),
            text("done"),
        )
        env = {
            "OPENAI_BASE_URL": server.base_url,
            "OPENAI_API_KEY": "sk-x",
            "DEPLOY_TOKEN": declared,
            "DB_PASSWORD": spaced,
            "CLAW_NOW": NOW,
        }
        assert claw(root, "run", env=env).exit_code == 0
    memory = (root / "workspace" / "MEMORY.md").read_text()
    assert memory == "- key: value\n- db: the password is [REDACTED]\n"
    (transcript,) = (root / ".claw" / "runs").glob("*/t.jsonl")
    results = [e["content"] for e in read_events(transcript) if e["type"] == "tool_result"]
    refused = (
        "error: refused: the key looks like a secret (a credential's value or shape), and "
        "MEMORY.md goes into every later prompt: name the fact in plain words, e.g. release-day"
    )
    assert results == [refused, refused, "remembered db"]
