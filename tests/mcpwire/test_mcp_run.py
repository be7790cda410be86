"""MCP tools in `claw run`: offered under SERVER__TOOL, their arguments checked, their
results fenced and tainting, the servers gone when the run ends, the fingerprint over their
entries and schemas — against a real stdio server (servers/notes.py) and the fake endpoint."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI, call, text, tool_calls
from helpers import HANG, Result, claw_process, since
from helpers import make_project as make_bare_project

NOTES = Path(__file__).parent / "servers" / "notes.py"
SCRIPT = "servers/notes.py"  # in the project: the sandbox sees the project, not the tests
NOW = "2026-11-22T23:05:00+01:00"


def make_project(root: Path, text: str, files: dict[str, str] | None = None) -> Path:
    """A project with the notes server's script in it."""
    return make_bare_project(root, text, {SCRIPT: NOTES.read_text(), **(files or {})})


def clawfile(
    tools: str = "[read, mcp.notes.lookup]",
    extra: str = "",
    *,
    notes: str = SCRIPT,
    other: str = SCRIPT,
    other_keys: str = "",
) -> str:
    return f"""
        version: 1
        model: fake-model
        mcp_servers:
          notes: {{command: [{sys.executable}, {notes}]}}
          other: {{command: [{sys.executable}, {other}]{other_keys}}}
        tasks:
          ask:
            description: Asks the notes
            prompt: "What is k?"
            output: out/answer.md
            tools: {tools}
{extra}
    """


@pytest.fixture
def env(server: FakeOpenAI) -> dict[str, str]:
    return {
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": "sk-test-0123456789abcdef0123",
        "CLAW_NOW": NOW,
    }


def claw(root: Path, *args: str, env: dict[str, str]) -> Result:
    """`claw` in a child process: a real stderr for the servers, real process ends."""
    done = claw_process(root, *args, env=env)
    return Result(done.returncode, done.stdout, done.stderr)


def tagged(tag: str) -> set[int]:
    """The processes whose command line holds `tag`: a server's and its sandbox's."""
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                line = Path(f"/proc/{entry}/cmdline").read_bytes()
                state = Path(f"/proc/{entry}/status").read_text()
            except OSError:
                continue
            if tag.encode() in line and "State:\tZ" not in state:  # a zombie has ended
                found.add(int(entry))
    return found


def gone(tag: str) -> bool:
    """Whether every process of the server tagged `tag` ends: at once, or within HANG
    seconds."""
    started = time.monotonic()
    while tagged(tag) and since(started) < HANG:
        time.sleep(0.05)
    return not tagged(tag)


def tag_of(tmp_path: Path) -> str:
    """A mark for the notes server's command line, unique to the test."""
    return f"notes-{tmp_path.name}-{os.getpid()}"


def events(root: Path) -> list[dict[str, object]]:
    (run_dir,) = sorted((root / ".claw/runs").iterdir())[-1:]
    return [json.loads(line) for line in (run_dir / "ask.jsonl").read_text().splitlines()]


def tool_results(request: dict[str, object]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]  # type: ignore[index, union-attr]


def test_a_task_is_offered_exactly_the_mcp_tools_it_names_and_calls_one(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    root = make_project(tmp_path / "p", clawfile())
    server.enqueue(tool_calls(call("notes__lookup", {"key": "k"})), text("k is v"))
    r = claw(root, "run", env=env)
    assert r.exit_code == 0, r.stderr
    first, second = server.requests
    offered = {t["function"]["name"]: t["function"] for t in first["tools"]}
    assert set(offered) == {"read", "notes__lookup"}
    assert "notes" in offered["notes__lookup"]["description"]
    assert offered["notes__lookup"]["parameters"]["required"] == ["key"]
    (result,) = tool_results(second)
    assert "value of k" in result and "<untrusted" in result  # fenced: outside content
    shown = [e for e in events(root) if e["type"] == "tool_result"]
    assert shown[0]["server"] == "notes" and shown[0]["tool"] == "lookup"
    assert (root / ".claw/mcp/catalog.json").is_file()


def test_invalid_arguments_are_a_tool_error_the_model_sees(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    root = make_project(tmp_path / "p", clawfile())
    server.enqueue(tool_calls(call("notes__lookup", {"kee": 1})), text("sorry"))
    r = claw(root, "run", env=env)
    assert r.exit_code == 0, r.stderr
    (result,) = tool_results(server.requests[1])
    assert result.startswith("error: invalid arguments for notes__lookup")
    assert "'key' is a required property" in result


def test_a_server_error_reply_is_the_tool_s_error_result(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    root = make_project(tmp_path / "p", clawfile("[mcp.notes.*]"))
    server.enqueue(tool_calls(call("notes__broken", {})), text("it broke"))
    r = claw(root, "run", env=env)
    assert r.exit_code == 0, r.stderr
    (result,) = tool_results(server.requests[1])
    assert result.startswith("error: notes: broken answered with an error")


def test_no_server_process_outlives_the_run(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    tag = tag_of(tmp_path)
    root = make_project(
        tmp_path / "p", clawfile("[mcp.notes.pid]", notes=f"{SCRIPT}, --tag, {tag}")
    )
    server.enqueue(tool_calls(call("notes__pid", {})), text("done"))
    r = claw(root, "run", env=env)
    assert r.exit_code == 0, r.stderr
    (result,) = tool_results(server.requests[1])
    assert len(result.strip().splitlines()[-1]) >= 32  # the server answered: it ran
    assert gone(tag)


def test_a_pattern_that_matches_no_tool_fails_the_run_naming_what_there_is(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    root = make_project(tmp_path / "p", clawfile("[mcp.notes.nope*]"))
    r = claw(root, "run", env=env)
    assert r.exit_code == 2, r.stderr
    assert "tasks.ask.tools: mcp.notes.nope* matches no tool" in r.stderr
    assert "lookup, injected, broken, pid" in r.stderr
    assert not server.requests


def ledger(root: Path, query: str) -> list[tuple[object, ...]]:
    import sqlite3

    with sqlite3.connect(root / ".claw/state.db") as db:
        return db.execute(query).fetchall()


def test_an_injection_in_a_tool_result_arrives_fenced_taints_the_job_and_its_output(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    extra = "            permissions: {write: [out/**]}"
    root = make_project(tmp_path / "p", clawfile("[read, write, mcp.notes.injected]", extra))
    server.enqueue(
        tool_calls(call("notes__injected", {})),
        tool_calls(call("write", {"path": "out/pwned.txt", "content": "owned"})),  # it obeys
        text("done"),
    )
    r = claw(root, "run", env=env)
    assert r.exit_code == 0, r.stderr
    injected, refused = tool_results(server.requests[1]) + tool_results(server.requests[2])[1:]
    assert injected.count("<untrusted-data") == 1 and "ignore previous" in injected
    assert refused.startswith("error: refused: write: this job read outside content")
    assert "MCP notes: injected" in refused
    assert not (root / "out/pwned.txt").exists()
    rows = ledger(root, "SELECT path, source FROM tainted")
    assert rows == [("out/answer.md", "MCP notes: injected")]


def test_a_read_only_server_s_tools_stay_with_a_tainted_job_others_are_withheld(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    tools = "[mcp.notes.injected, mcp.other.lookup, mcp.notes.lookup]"
    root = make_project(tmp_path / "p", clawfile(tools, other_keys=", read_only: true"))
    server.enqueue(
        tool_calls(call("notes__injected", {})),
        tool_calls(call("other__lookup", {"key": "a"}), call("notes__lookup", {"key": "b"})),
        text("done"),
    )
    r = claw(root, "run", env=env)
    assert r.exit_code == 0, r.stderr
    other, notes = tool_results(server.requests[2])[1:]
    assert "value of a" in other  # `other` is read_only: true
    assert notes.startswith("error: refused: notes__lookup")


def test_untrusted_allow_grants_an_mcp_tool_to_a_tainted_job(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    extra = "            untrusted: {allow: [mcp.notes.lookup]}"
    root = make_project(tmp_path / "p", clawfile("[mcp.notes.injected, mcp.notes.lookup]", extra))
    server.enqueue(
        tool_calls(call("notes__injected", {})),
        tool_calls(call("notes__lookup", {"key": "a"})),
        text("done"),
    )
    r = claw(root, "run", env=env)
    assert r.exit_code == 0, r.stderr
    assert "value of a" in tool_results(server.requests[2])[1]


def test_up_to_date_without_starting_a_server_and_not_after_its_entry_or_schema_changes(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    root = make_project(tmp_path / "p", clawfile())
    server.handler = lambda _: text("k is v")
    assert claw(root, "run", env=env).exit_code == 0
    (root / "no-notes-server").touch()  # a server that started now would fail the run
    r = claw(root, "run", env=env)
    assert r.exit_code == 0 and "up to date" in r.stderr, r.stderr
    # another server's entry changes: this task is still up to date
    make_project(root, clawfile(other=f"{SCRIPT}, -x"))
    r = claw(root, "run", env=env)
    assert r.exit_code == 0 and "up to date" in r.stderr, r.stderr
    # its own entry changes, and with it the tool's schema: it runs again
    (root / "no-notes-server").unlink()
    make_project(root, clawfile(notes=f"{SCRIPT}, --v2", other=f"{SCRIPT}, -x"))
    r = claw(root, "plan", env=env)
    assert "tools or permissions changed" in r.stdout, r.stdout + r.stderr
    catalog = json.loads((root / ".claw/mcp/catalog.json").read_text())
    lookup = next(t for t in catalog["servers"]["notes"]["tools"] if t["name"] == "lookup")
    assert lookup["schema"]["required"] == ["key", "section"]


def test_always_names_tools_whose_answers_change_a_job_that_called_one_runs_again(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    extra = "            always: [mcp.notes.pid]"
    root = make_project(tmp_path / "p", clawfile("[mcp.notes.lookup, mcp.notes.pid]", extra))
    server.enqueue(tool_calls(call("notes__pid", {})), text("pid said"))
    assert claw(root, "run", env=env).exit_code == 0
    r = claw(root, "plan", env=env)
    assert "always: its last run called mcp.notes.pid" in r.stdout, r.stdout
    server.enqueue(tool_calls(call("notes__lookup", {"key": "k"})), text("k is v"))
    r = claw(root, "run", "--no-cache", env=env)
    assert r.exit_code == 0 and "ok ask" in r.stderr, r.stderr
    r = claw(root, "run", env=env)  # the last run called no such tool: up to date
    assert r.exit_code == 0 and "up to date" in r.stderr, r.stderr
    assert len(server.requests) == 4


def test_always_takes_true_false_or_mcp_tool_patterns(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    root = make_project(tmp_path / "p", clawfile(extra="            always: [read]"))
    r = claw(root, "validate", env=env)
    assert r.exit_code == 2
    assert "tasks.ask.always" in r.stderr and "MCP tools (mcp.SERVER.TOOL)" in r.stderr


def test_record_then_replay_answers_mcp_calls_and_lists_from_the_cassette_starting_no_server(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    root = make_project(tmp_path / "p", clawfile())
    script = root / SCRIPT
    key = env["OPENAI_API_KEY"]
    server.enqueue(tool_calls(call("notes__lookup", {"key": key})), text("k is v"))
    r = claw(root, "run", "--record", env=env)
    assert r.exit_code == 0, r.stderr
    recorded = (root / "cassettes/mcp/notes.json").read_text()
    assert "value of [REDACTED" in recorded or key not in recorded
    assert key not in recorded and '"lookup"' in recorded
    script.rename(tmp_path / "gone.py")  # replaying starts no server: its command is missing
    (root / "out/answer.md").unlink()
    offline = {"OPENAI_API_KEY": key, "CLAW_NOW": env["CLAW_NOW"]}
    r = claw(root, "run", "--replay", env=offline)
    assert r.exit_code == 0, r.stderr
    assert (root / "out/answer.md").read_text() == "k is v\n"
    assert len(server.requests) == 2


def test_a_replayed_mcp_call_not_in_the_cassette_fails_the_run_like_a_missing_reply(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    root = make_project(tmp_path / "p", clawfile())
    server.enqueue(tool_calls(call("notes__lookup", {"key": "a"})), text("a is v"))
    assert claw(root, "run", "--record", env=env).exit_code == 0
    cassette = root / "cassettes/mcp/notes.json"
    document = json.loads(cassette.read_text())
    assert len(document.pop("calls")) == 1  # the call's result is lost; the tool list stays
    cassette.write_text(json.dumps(document))
    (root / "out/answer.md").unlink()
    r = claw(root, "run", "--replay", env=env)
    assert r.exit_code == 2, r.stderr
    assert "no recorded result for job 'ask''s MCP call notes: lookup" in r.stderr


def test_show_and_the_report_name_an_mcp_call_s_server(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    root = make_project(tmp_path / "p", clawfile(extra="            max_steps: 1"))
    server.enqueue(tool_calls(call("notes__lookup", {"key": "k"})))
    r = claw(root, "run", env=env)
    assert r.exit_code == 3, r.stderr  # max_steps: the job ends after its one call
    shown = claw(root, "show", "last", env=env).stdout
    assert 'notes: lookup(key="k")' in shown
    assert "→ notes: lookup: <untrusted-data" in shown
    (tool_call,) = next(e for e in events(root) if e["type"] == "assistant")["tool_calls"]  # type: ignore[index]
    assert tool_call["server"] == "notes" and tool_call["tool"] == "lookup"
    r = claw(root, "report", "-o", str(tmp_path / "report.html"), env=env)
    assert r.exit_code == 0, r.stderr
    assert "notes: lookup(key=&quot;k&quot;)" in (tmp_path / "report.html").read_text()


def test_validate_says_mcp_results_can_taint_a_task_and_which_of_its_tools_stay(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    tools = "[read, mcp.notes.lookup, mcp.other.*]"
    root = make_project(tmp_path / "p", clawfile(tools, other_keys=", read_only: true"))
    r = claw(root, "validate", env=env)
    assert r.exit_code == 0, r.stderr
    said = r.stdout + r.stderr
    assert "ask: the results of its MCP tools (mcp.notes, mcp.other)" in said, said
    assert "(withheld: mcp.notes.lookup)" in said, said


MCP_CODE = (
    "mcp",
    "anyio",
    "httpx2",
    "claw_batch.mcp.hub",
    "claw_batch.mcp.catalog",
    "claw_batch.tools.mcptool",
)


def test_a_run_of_a_task_without_mcp_tools_imports_no_mcp_code(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    from test_startup import loaded

    extra = """
          plain:
            description: No MCP
            prompt: "hi"
            output: out/hi.md"""
    root = make_project(tmp_path / "p", clawfile(extra=extra))
    assert loaded(root, ["list"], {}, ()) == []  # the clawfile's cache
    server.enqueue(text("hi"))
    assert loaded(root, ["run", "-q", "plain"], env, MCP_CODE) == []
    assert (root / "out/hi.md").read_text() == "hi\n"
    server.enqueue(tool_calls(call("notes__lookup", {"key": "k"})), text("k is v"))
    assert set(loaded(root, ["run", "-q", "ask"], env, MCP_CODE)) >= {"mcp", "claw_batch.mcp.hub"}
    # Up to date, it reads the tool lists from the catalog: no hub, no event loop, no SDK.
    assert loaded(root, ["run", "-q", "ask"], env, (*MCP_CODE[:4], "asyncio")) == []


def test_a_tool_whose_name_cannot_be_a_function_name_is_skipped_with_a_warning(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    root = make_project(
        tmp_path / "p", clawfile("[mcp.notes.*]", notes=f"{SCRIPT}, --name-with-dots")
    )
    server.enqueue(text("fine"))
    r = claw(root, "run", env=env)
    assert r.exit_code == 0, r.stderr
    assert "MCP server 'notes''s tool 'odd.name' is not offered" in r.stderr
    offered = {t["function"]["name"] for t in server.requests[0]["tools"]}
    assert offered == {"notes__lookup", "notes__injected", "notes__broken", "notes__pid"}


def test_a_refused_mcp_tool_says_how_to_grant_it_by_its_clawfile_name(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    root = make_project(tmp_path / "p", clawfile("[mcp.notes.injected, mcp.notes.lookup]"))
    server.enqueue(
        tool_calls(call("notes__injected", {})),
        tool_calls(call("notes__lookup", {"key": "a"})),
        text("done"),
    )
    assert claw(root, "run", env=env).exit_code == 0
    refused = tool_results(server.requests[2])[1]
    assert refused.endswith("untrusted: {allow: [mcp.notes.lookup]}")


def test_an_mcp_server_s_header_values_are_redacted_from_what_a_run_writes(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    body = clawfile().replace(
        "        tasks:",
        "          tracker: {url: 'http://127.0.0.1:9/mcp',"
        " headers_env: {Authorization: TRACKER_HEADER}}\n"
        "        tasks:",
    )
    root = make_project(tmp_path / "p", body)
    header = "plainvalue-of-the-tracker-header"
    server.enqueue(text(f"the header is {header}"))
    r = claw(root, "run", env={**env, "TRACKER_HEADER": header})
    assert r.exit_code == 0, r.stderr
    written = (root / "out/answer.md").read_text()
    assert header not in written and "REDACTED" in written
