"""End to end: the `claw` CLI against a real HTTP server speaking the OpenAI wire format."""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI, call, error, hang, text, tool_calls
from helpers import HANG, claw, make_project

SIMPLE = """
    version: 1
    model: fake-model
    tasks:
      summary:
        description: Summarise the notes
        prompt: "Summarise {{ inputs | join(', ') }} for {{ today }}."
        inputs: ["notes/*.md"]
        output: "reports/{{ today }}.md"
"""

NOW = "2026-11-22T23:05:00+01:00"


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as srv:
        yield srv


@pytest.fixture
def env(server: FakeOpenAI) -> dict[str, str]:
    return {
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": "sk-test-0123456789abcdef0123",
        "CLAW_NOW": NOW,
    }


def test_run_writes_output_note_transcript_and_ledger(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    root = make_project(tmp_path / "p", SIMPLE, {"notes/a.md": "Decided: ship it.\n"})
    server.enqueue(
        tool_calls(call("read", {"path": "notes/a.md"}), call("ls", {"path": "notes"})),
        text("# Summary\n- ship it (notes/a.md)", usage=(120, 30)),
    )
    r = claw(root, "run", "summary", env=env)
    assert r.exit_code == 0, r.stderr
    assert (root / "reports/2026-11-22.md").read_text() == "# Summary\n- ship it (notes/a.md)\n"
    assert re.fullmatch(
        r"start summary\nok summary \(\d+\.\d s, 165 tokens → reports/2026-11-22.md\)\n",
        r.stderr,
    ), r.stderr
    note = (root / "workspace/memory/2026-11-22.md").read_text()
    assert "summary · ok" in note and "> # Summary" in note
    # the model saw the system prompt, the rendered prompt and both tool results
    first, second = server.requests
    assert first["model"] == "fake-model"
    assert first["messages"][1]["content"] == "Summarise notes/a.md for 2026-11-22."
    assert "## AGENTS.md\n# Agents\nBe brief." in first["messages"][0]["content"]
    assert {t["function"]["name"] for t in first["tools"]} == {"read", "grep", "ls", "find"}
    results = [m["content"] for m in second["messages"] if m["role"] == "tool"]
    assert "Decided: ship it." in results[0] and "a.md" in results[1]
    (run_dir,) = (root / ".claw/runs").iterdir()
    lines = (run_dir / "summary.jsonl").read_text().splitlines()
    kinds = [json.loads(line)["type"] for line in lines]
    assert kinds == [
        "start",
        "system",
        "user",
        "assistant",
        "tool_result",
        "tool_result",
        "assistant",
        "end",
    ]
    db = sqlite3.connect(root / ".claw/state.db")
    assert db.execute("SELECT status, exit_code FROM runs").fetchall() == [("ok", 0)]
    assert db.execute("SELECT task, status, prompt_tokens FROM jobs").fetchall() == [
        ("summary", "ok", 130)
    ]
    assert db.execute("SELECT COUNT(*) FROM calls").fetchone() == (2,)


def test_streaming_provider_with_tool_calls(tmp_path: Path, server: FakeOpenAI) -> None:
    root = make_project(
        tmp_path / "p",
        f"""
        version: 1
        model: fake/streamer
        providers:
          fake:
            base_url: {server.base_url}
            api_key_env: FAKE_KEY
            stream: true
        tasks:
          t:
            prompt: Count the notes.
            output: out.txt
    """,
        {"notes/a.md": "x\n"},
    )
    server.enqueue(tool_calls(call("find", {"pattern": "**/*.md"})), text("There is one note."))
    r = claw(root, "run", "t", env={"FAKE_KEY": "fake-key-abcdefgh", "CLAW_NOW": NOW})
    assert r.exit_code == 0, r.stderr
    assert (root / "out.txt").read_text() == "There is one note.\n"
    assert all(req["stream"] is True for req in server.requests)
    assert server.requests[0]["model"] == "streamer"
    assert "notes/a.md" in server.requests[1]["messages"][-1]["content"]


SCHEMA_TASK = """
    version: 1
    tasks:
      triage:
        foreach: "inbox/*.txt"
        prompt: "Triage {{ item.path }} ({{ item.stem }})."
        output: "tickets/{{ item.stem }}.json"
        tools: [read]
        schema:
          type: object
          required: [priority]
          properties: {priority: {enum: [low, high]}}
"""


def test_schema_answer_gets_one_correction(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    root = make_project(tmp_path / "p", SCHEMA_TASK, {"inbox/a.txt": "help"})
    server.enqueue(text('{"priority": "meh"}'), text('```json\n{"priority": "high"}\n```'))
    r = claw(root, "run", env=env)
    assert r.exit_code == 0, r.stderr
    assert json.loads((root / "tickets/a.json").read_text()) == {"priority": "high"}
    correction = server.requests[1]["messages"][-1]["content"]
    assert correction == (
        "Your final answer does not match the schema: at priority: 'meh' is not one of "
        "['low', 'high']. Reply with only the corrected JSON document."
    )
    assert "Triage inbox/a.txt (a)." in server.requests[0]["messages"][1]["content"]


def test_schema_answer_invalid_twice_fails(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    root = make_project(tmp_path / "p", SCHEMA_TASK, {"inbox/a.txt": "help"})
    server.enqueue(text("not json"), text("still not json"))
    r = claw(root, "run", "--json", env=env)
    assert r.exit_code == 1
    assert not (root / "tickets").exists()
    (job,) = json.loads(r.stdout)["jobs"]
    assert job["status"] == "failed"
    assert job["error"].startswith("Your final answer is not valid JSON")


CHECK_TASK = """
    version: 1
    tasks:
      review:
        prompt: Review the change.
        check: true
"""


def test_failed_check_exits_1_and_prints_findings(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    root = make_project(tmp_path / "p", CHECK_TASK)
    verdict = {
        "ok": False,
        "summary": "a secret is committed",
        "findings": [{"file": "app.py", "line": 3, "message": "API key in code"}, "no tests"],
    }
    server.enqueue(text(json.dumps(verdict)))
    r = claw(root, "run", "review", env=env)
    assert r.exit_code == 1
    lines = r.stderr.splitlines()
    assert lines[1].startswith("failed review (") and lines[1].endswith("): a secret is committed")
    assert lines[2:] == ["    - app.py:3: API key in code", "    - no tests"]


def test_passing_check_exits_0(tmp_path: Path, server: FakeOpenAI, env: dict[str, str]) -> None:
    root = make_project(tmp_path / "p", CHECK_TASK)
    server.enqueue(text('{"ok": true, "summary": "fine", "findings": []}'))
    assert claw(root, "run", "review", env=env).exit_code == 0


def test_max_steps_exits_3(tmp_path: Path, server: FakeOpenAI, env: dict[str, str]) -> None:
    root = make_project(
        tmp_path / "p",
        """
        version: 1
        tasks:
          t: {prompt: go, max_steps: 2}
    """,
    )
    server.enqueue(tool_calls(call("ls", {})), tool_calls(call("ls", {"path": "workspace"})))
    r = claw(root, "run", "t", env=env)
    assert r.exit_code == 3
    assert "limit t (" in r.stderr and "max_steps: no final answer after 2" in r.stderr


def test_hung_endpoint_ends_within_the_timeout(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    root = make_project(
        tmp_path / "p",
        """
        version: 1
        tasks:
          t: {prompt: go, timeout: 2}
    """,
    )
    # Imported now, or on a busy machine the job's timeout may pass while claw imports it.
    import openai  # noqa: F401

    server.enqueue(hang(HANG))
    r = claw(root, "run", "t", env=env)
    assert server.hanging == 1  # the run ended while the reply still hangs
    assert r.exit_code == 3
    assert "timeout: the model call did not finish before the job's deadline" in r.stderr


def test_unauthorised_fails_fast_without_printing_the_key(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    root = make_project(tmp_path / "p", SIMPLE)
    server.enqueue(error(401, "Incorrect API key provided: sk-test-0123456789abcdef0123"))
    r = claw(root, "run", env=env)
    assert r.exit_code == 1
    assert len(server.requests) == 1
    assert "401" in r.stderr
    assert env["OPENAI_API_KEY"] not in r.stderr
    for path in (root / ".claw").rglob("*.jsonl"):
        assert env["OPENAI_API_KEY"] not in path.read_text()
    assert env["OPENAI_API_KEY"] not in (root / "workspace/memory/2026-11-22.md").read_text()


def test_secrets_are_redacted_from_transcripts_and_notes(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    secret = env["OPENAI_API_KEY"]
    root = make_project(tmp_path / "p", SIMPLE, {"notes/leak.md": f"key={secret}\n"})
    server.enqueue(
        tool_calls(call("read", {"path": "notes/leak.md"})), text(f"The key is {secret}")
    )
    r = claw(root, "run", env=env)
    assert r.exit_code == 0
    (transcript,) = (root / ".claw/runs").rglob("*.jsonl")
    assert secret not in transcript.read_text()
    assert "[REDACTED]" in transcript.read_text()
    assert secret not in (root / "workspace/memory/2026-11-22.md").read_text()


def test_json_envelope(tmp_path: Path, server: FakeOpenAI, env: dict[str, str]) -> None:
    root = make_project(tmp_path / "p", SIMPLE)
    server.enqueue(text("done", usage=(7, 3)))
    r = claw(root, "run", "--json", "-q", env=env)
    assert r.exit_code == 0
    doc = json.loads(r.stdout)
    (job,) = doc["jobs"]
    assert {k: job[k] for k in ("task", "item", "status", "tokens", "output", "error")} == {
        "task": "summary",
        "item": None,
        "status": "ok",
        "tokens": 10,
        "output": "reports/2026-11-22.md",
        "error": None,
    }
    assert doc["totals"]["jobs"] == 1 and doc["totals"]["ok"] == 1
    assert r.stderr == ""


def test_bad_clawfile_exits_2_and_writes_nothing(tmp_path: Path, env: dict[str, str]) -> None:
    root = make_project(
        tmp_path / "p",
        """
        version: 1
        tasks:
          t: {prompt: go, tools: [read, bsh]}
    """,
    )
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    r = claw(root, "run", env=env)
    assert r.exit_code == 2
    assert r.stderr.startswith("claw: clawfile.yaml:3: tasks.t.tools[1]: unknown tool 'bsh'")
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before


def test_unknown_task_exits_2(tmp_path: Path, env: dict[str, str]) -> None:
    root = make_project(tmp_path / "p", SIMPLE)
    r = claw(root, "run", "nope", env=env)
    assert (r.exit_code, r.stderr) == (2, "claw: unknown task 'nope' (tasks: summary)\n")
    assert not (root / ".claw").exists()


def test_record_then_replay_offline(tmp_path: Path, env: dict[str, str]) -> None:
    root = make_project(tmp_path / "p", SIMPLE, {"notes/a.md": "x\n"})
    with FakeOpenAI() as srv:
        srv.enqueue(tool_calls(call("read", {"path": "notes/a.md"})), text("recorded answer"))
        recorded = claw(root, "run", "--record", env={**env, "OPENAI_BASE_URL": srv.base_url})
    assert recorded.exit_code == 0, recorded.stderr
    assert (root / "cassettes/summary.json").is_file()
    (root / "reports/2026-11-22.md").unlink()
    # another day, and the server is gone: replay must not need either
    offline = {"CLAW_NOW": "2027-01-05T08:00:00+01:00", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}
    replayed = claw(root, "run", "--replay", env=offline)
    assert replayed.exit_code == 0, replayed.stderr
    assert (root / "reports/2027-01-05.md").read_text() == "recorded answer\n"


def test_replay_of_an_unrecorded_request_exits_2(tmp_path: Path, env: dict[str, str]) -> None:
    root = make_project(tmp_path / "p", SIMPLE, {"notes/a.md": "x\n"})
    with FakeOpenAI() as srv:
        srv.enqueue(text("recorded answer"))
        claw(root, "run", "--record", env={**env, "OPENAI_BASE_URL": srv.base_url})
    (root / "notes/b.md").write_text("new\n")  # the rendered prompt now differs
    r = claw(root, "run", "--replay", env={"CLAW_NOW": NOW})
    assert r.exit_code == 2
    assert "summary" in r.stderr and "messages[1].content" in r.stderr
    db = sqlite3.connect(root / ".claw/state.db")
    runs = db.execute("SELECT status, exit_code FROM runs ORDER BY rowid").fetchall()
    assert runs == [("ok", 0), ("error", 2)]
    jobs = db.execute("SELECT status, reason FROM jobs ORDER BY rowid").fetchall()
    assert jobs == [("ok", None), ("error", "ReplayMismatch")]
    db.close()


def test_list_validate_show(tmp_path: Path, server: FakeOpenAI, env: dict[str, str]) -> None:
    root = make_project(tmp_path / "p", SIMPLE)
    r = claw(root, "list")
    assert (r.exit_code, r.stdout) == (0, "summary  never ran      Summarise the notes\n")
    r = claw(root, "validate")
    assert (r.exit_code, r.stderr) == (0, "clawfile.yaml: ok (1 task, 1 skill)\n")  # claw's memory
    server.enqueue(tool_calls(call("ls", {})), text("all done"))
    assert claw(root, "run", env=env).exit_code == 0
    assert claw(root, "list", env={"CLAW_NOW": NOW}).stdout == (
        "summary  up to date     Summarise the notes\n"
    )
    shown = claw(root, "show", "last").stdout
    assert "== summary" in shown and "  ls()" in shown and "all done" in shown
    assert "[system prompt:" in shown


def test_init_scaffolds_a_valid_project(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from claw_batch.cli import main

    r = CliRunner().invoke(main, ["init", str(tmp_path / "new")])
    assert r.exit_code == 0
    assert (tmp_path / "new/clawfile.yaml").is_file()
    assert ".claw/" in (tmp_path / "new/.gitignore").read_text()
    assert claw(tmp_path / "new", "validate").exit_code == 0
    again = CliRunner().invoke(main, ["init", str(tmp_path / "new")])
    assert "kept" in again.stderr


def test_init_shows_the_choice_of_skills(tmp_path: Path) -> None:
    """What `skills:` means, in the clawfile a user starts from, true to what runs."""
    from click.testing import CliRunner

    from claw_batch.cli import main

    assert CliRunner().invoke(main, ["init", str(tmp_path / "new")]).exit_code == 0
    clawfile = (tmp_path / "new/clawfile.yaml").read_text()
    assert clawfile.endswith(
        "    tools: [read, grep, ls, find]\n"
        "    # The skills this task is offered; each adds a line to the prompt of every model "
        "call.\n"
        "    # Without skills: a task is offered every skill found (workspace/skills, skills/,\n"
        "    # ~/.config/claw/skills, built-in); [] offers none. `claw skills check` shows the "
        "cost.\n"
        "    skills: [plain-summary]\n"
    )
    assert claw(tmp_path / "new", "validate").exit_code == 0
    check = CliRunner().invoke(main, ["skills", "check", "-C", str(tmp_path / "new")])
    assert check.exit_code == 0
    assert "  summary  ~" in check.stdout
    assert " tokens  plain-summary (skills: [plain-summary])\n" in check.stdout


def test_template_error_at_run_time_exits_2_and_is_recorded(
    tmp_path: Path, env: dict[str, str]
) -> None:
    root = make_project(
        tmp_path / "p",
        """
        version: 1
        tasks:
          t: {prompt: "{{ read('missing.md') }}", output: out.md}
    """,
    )
    r = claw(root, "run", "--json", env=env)
    assert r.exit_code == 2
    assert (
        r.stderr.splitlines()[-1].startswith(
            "claw: clawfile.yaml:tasks.t.prompt: refused: missing.md"
        )
        or "missing.md" in r.stderr.splitlines()[-1]
    )
    doc = json.loads(r.stdout)
    assert doc["exit_code"] == 2 and "missing.md" in doc["error"]
    db = sqlite3.connect(root / ".claw/state.db")
    assert db.execute("SELECT status, exit_code FROM runs").fetchall() == [("error", 2)]
    assert db.execute("SELECT status FROM jobs").fetchall() == []  # it failed before starting
    db.close()


def test_output_that_is_a_directory_fails_the_job(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    root = make_project(
        tmp_path / "p",
        """
        version: 1
        tasks:
          t: {prompt: go, output: notes, permissions: {write: ["notes/**"]}}
    """,
        {"notes/keep.md": "kept\n"},
    )
    server.enqueue(text("answer"))
    r = claw(root, "run", env=env)
    assert r.exit_code == 1
    assert "output notes:" in r.stderr
    assert (root / "notes/keep.md").read_text() == "kept\n"


def test_json_when_there_is_nothing_to_run(tmp_path: Path) -> None:
    root = make_project(
        tmp_path / "p",
        """
        version: 1
        tasks:
          t: {prompt: "{{ item.path }}", foreach: "inbox/*.txt"}
    """,
    )
    r = claw(root, "run", "--json")
    assert r.exit_code == 0
    assert json.loads(r.stdout)["jobs"] == []
    assert r.stderr == "claw: nothing to run\n"


def test_missing_directory_for_C_is_a_usage_error(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from claw_batch.cli import main

    r = CliRunner().invoke(main, ["run", "-C", str(tmp_path / "typo")])
    assert r.exit_code == 2
    assert "does not exist" in r.stderr


def test_show_takes_run_names_not_paths(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", SIMPLE)
    r = claw(root, "show", "../../etc")
    assert (r.exit_code, r.stderr) == (
        2,
        "claw: no run '../../etc' in .claw/runs/ (try `claw show last`)\n",
    )
