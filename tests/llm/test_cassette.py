from __future__ import annotations

import json
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI, call, text, tool_calls

from claw_batch.errors import ReplayMismatch
from claw_batch.llm.cassette import (
    RecordingLLM,
    ReplayLLM,
    canonical_request,
    request_key,
    task_of,
)
from claw_batch.llm.messages import ChatRequest, Completion, Message, ToolCall, ToolSpec, Usage
from claw_batch.llm.openai_compat import OpenAICompatLLM
from claw_batch.safety.redact import Redactor

# The system prompt as sent, and as replay keys read it (ChatRequest.key_messages).
SYSTEM = "You are claw. Today is {today}.\n## AGENTS.md\nBe brief.\n## MEMORY.md\nShort answers."
KEY_SYSTEM = Message("system", SYSTEM.format(today="<today>"))


def system(today: str = "2024-05-01") -> Message:
    return Message("system", SYSTEM.format(today=today))


JOB = "triage[workspace/inbox/a.txt]"
READ = ToolSpec(
    "read", "Read a file", {"type": "object", "properties": {"path": {"type": "string"}}}
)
TURN1 = ChatRequest(
    model="m",
    messages=(system(), Message("user", "Triage workspace/inbox/a.txt")),
    tools=(READ,),
    temperature=0,
    job=JOB,
    key_messages=(KEY_SYSTEM,),
)
REPLY1 = Completion(
    Message("assistant", None, (ToolCall("call_1", "read", '{"path": "workspace/inbox/a.txt"'),)),
    Usage(100, 10, 64),
    "tool_calls",
    "m-2024-05",
)
TURN2 = replace(
    TURN1,
    messages=(
        *TURN1.messages,
        REPLY1.message,
        Message("tool", "Invoice from ACME, due 2024-06-01", tool_call_id="call_1"),
    ),
)
REPLY2 = Completion(Message("assistant", "Category: invoice ✓"), Usage(150, 5, 0), "stop", "m")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ADMIN_KEY", "OPENAI_CUSTOM_HEADERS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))


class ScriptedLLM:
    """A model behind the LLM Protocol that answers from a list."""

    def __init__(self, *replies: Completion) -> None:
        self.replies = list(replies)
        self.requests: list[ChatRequest] = []

    def complete(self, request: ChatRequest, *, deadline: float) -> Completion:
        self.requests.append(request)
        return self.replies.pop(0)


def record(directory: Path, *pairs: tuple[ChatRequest, Completion]) -> None:
    recorder = RecordingLLM(ScriptedLLM(*(c for _, c in pairs)), directory)
    for request, _ in pairs:
        recorder.complete(request, deadline=time.monotonic() + 10)


def replay(directory: Path, request: ChatRequest) -> Completion:
    return ReplayLLM(directory).complete(request, deadline=time.monotonic() + 10)


def with_message(request: ChatRequest, index: int, message: Message) -> ChatRequest:
    messages = list(request.messages)
    messages[index] = message
    return replace(request, messages=tuple(messages))


def test_record_then_replay_through_the_real_adapter(tmp_path: Path) -> None:
    cassettes = tmp_path / "cassettes"
    with FakeOpenAI() as srv:
        srv.enqueue(
            tool_calls(call("read", {"path": "workspace/inbox/a.txt"}, id="call_1")),
            text("Category: invoice", usage=(150, 5), cached=128),
        )
        recorder = RecordingLLM(OpenAICompatLLM(base_url=srv.base_url, api_key="k"), cassettes)
        live = [recorder.complete(r, deadline=time.monotonic() + 10) for r in (TURN1, TURN2)]
        srv.stop()
        replayer = ReplayLLM(cassettes)
        replayed = [replayer.complete(r, deadline=time.monotonic() + 10) for r in (TURN1, TURN2)]
        assert len(srv.requests) == 2  # replay made no request
    assert replayed == live
    assert live[1] == Completion(
        Message("assistant", "Category: invoice"), Usage(150, 5, 128), "stop", "m"
    )


def test_secrets_never_reach_a_cassette(tmp_path: Path) -> None:
    secret = 'pa55-"word"-1234'  # quotes: escaped once inside arguments, twice in the file
    redact = Redactor([secret])
    asks = replace(TURN1, messages=(system(), Message("user", f"Log in with {secret} please")))
    answer = Completion(
        Message("assistant", f"Using {secret}", (ToolCall("c1", "login", json.dumps([secret])),)),
        Usage(10, 2, 0),
        "tool_calls",
        "m",
    )
    live = RecordingLLM(ScriptedLLM(answer), tmp_path, redact=redact).complete(asks, deadline=0.0)
    assert live == answer  # the run itself goes on with the real reply
    stored = (tmp_path / "triage.json").read_text(encoding="utf-8")
    for form in (secret, json.dumps(secret)[1:-1], json.dumps(json.dumps(secret))[1:-1]):
        assert form not in stored
    interaction = json.loads(stored)["interactions"][0]
    assert interaction["request"]["messages"][1]["content"] == "Log in with [REDACTED] please"
    assert interaction["key"] == request_key(asks, redact=redact) != request_key(asks)
    replayed = ReplayLLM(tmp_path, redact=redact).complete(asks, deadline=0.0)
    assert replayed == Completion(
        Message("assistant", "Using [REDACTED]", (ToolCall("c1", "login", '["[REDACTED]"]'),)),
        Usage(10, 2, 0),
        "tool_calls",
        "m",
    )


def test_cassette_file_format(tmp_path: Path) -> None:
    record(tmp_path, (TURN1, REPLY1), (TURN2, REPLY2))
    assert [p.name for p in tmp_path.iterdir()] == ["triage.json"]
    raw = (tmp_path / "triage.json").read_text(encoding="utf-8")
    assert raw.startswith('{\n  "interactions": [\n    {\n      "job": ')
    assert "✓" in raw  # readable, not \u-escaped
    document = json.loads(raw)
    assert document["version"] == 1
    first = document["interactions"][0]
    assert first == {
        "key": request_key(TURN1),
        "job": JOB,
        "request": canonical_request(TURN1),
        "response": {
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "name": "read",
                        "arguments": '{"path": "workspace/inbox/a.txt"',
                    }
                ],
            },
            "usage": {"prompt_tokens": 100, "completion_tokens": 10, "cached_tokens": 64},
            "finish_reason": "tool_calls",
            "model": "m-2024-05",
        },
    }
    assert [i["key"] for i in document["interactions"]] == [request_key(TURN1), request_key(TURN2)]


def test_completions_round_trip_exactly(tmp_path: Path) -> None:
    record(tmp_path, (TURN1, REPLY1), (TURN2, REPLY2))
    assert replay(tmp_path, TURN1) == REPLY1
    assert replay(tmp_path, TURN2) == REPLY2


def test_reasoning_round_trips_and_counts_in_the_key_only_when_there_is_some(
    tmp_path: Path,
) -> None:
    thinking = replace(REPLY1, message=replace(REPLY1.message, reasoning="Read it first."))
    record(tmp_path, (TURN1, thinking))
    assert replay(tmp_path, TURN1) == thinking
    turn2 = with_message(TURN2, 2, thinking.message)
    assert request_key(turn2) != request_key(TURN2)
    assert canonical_request(turn2)["messages"][2]["reasoning_content"] == "Read it first."
    assert "reasoning_content" not in canonical_request(TURN2)["messages"][2]


def test_recording_the_same_request_again_replaces_it(tmp_path: Path) -> None:
    record(tmp_path, (TURN1, REPLY1), (TURN2, REPLY2))
    record(tmp_path, (TURN1, REPLY2))
    interactions = json.loads((tmp_path / "triage.json").read_text())["interactions"]
    assert [i["key"] for i in interactions] == [request_key(TURN1), request_key(TURN2)]
    assert replay(tmp_path, TURN1) == REPLY2


def test_concurrent_recording_keeps_every_interaction(tmp_path: Path) -> None:
    requests = [ChatRequest("m", (Message("user", f"q{n}"),), job=f"fan[{n}]") for n in range(20)]
    recorder = RecordingLLM(ScriptedLLM(*[REPLY2] * 20), tmp_path)
    threads = [
        threading.Thread(target=recorder.complete, args=(r,), kwargs={"deadline": 0.0})
        for r in requests
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    interactions = json.loads((tmp_path / "fan.json").read_text())["interactions"]
    assert sorted(i["job"] for i in interactions) == sorted(r.job for r in requests)
    assert [p.name for p in tmp_path.iterdir()] == ["fan.json"]  # no temp files left


def test_key_messages_stand_in_so_that_another_day_replays(tmp_path: Path) -> None:
    record(tmp_path, (TURN1, REPLY1))
    tomorrow = replace(TURN1, messages=(system("2024-05-02"), *TURN1.messages[1:]), job="triage[b]")
    assert replay(tmp_path, tomorrow) == REPLY1
    stored = json.loads((tmp_path / "triage.json").read_text())["interactions"][0]["request"]
    assert stored["messages"][0]["content"] == (
        "You are claw. Today is <today>.\n## AGENTS.md\nBe brief.\n## MEMORY.md\nShort answers."
    )


def test_what_is_part_of_the_key() -> None:
    assert request_key(replace(TURN1, job="other")) == request_key(TURN1)
    assert request_key(replace(TURN1, key_messages=())) != request_key(TURN1)  # the date counts
    assert request_key(replace(TURN1, temperature=0.5)) != request_key(TURN1)
    assert request_key(replace(TURN1, model="m2")) != request_key(TURN1)
    assert request_key(replace(TURN2, messages=TURN2.messages[:3])) != request_key(TURN2)


@pytest.mark.parametrize(
    ("job", "task"),
    [
        ("triage", "triage"),
        ("triage[workspace/inbox/a.txt]", "triage"),
        ("", "default"),
        ("nightly summary/x", "nightly_summary_x"),
        ("../escape", "_escape"),
    ],
)
def test_task_file_names(job: str, task: str) -> None:
    assert task_of(job) == task


def test_miss_shows_what_differs_from_the_closest_recording(tmp_path: Path) -> None:
    record(tmp_path, (TURN1, REPLY1), (TURN2, REPLY2))
    changed = with_message(
        TURN2, 3, Message("tool", "Invoice from ACME Corp, due 2024-06-01", tool_call_id="call_1")
    )
    with pytest.raises(ReplayMismatch) as exc:
        replay(tmp_path, changed)
    assert str(exc.value) == (
        f"no recorded reply for job 'triage[workspace/inbox/a.txt]', turn 2, in {tmp_path}\n"
        "  closest recording (task 'triage') differs at messages[3].content, character 18:\n"
        '    recorded: "Invoice from ACME, due 2024-06-01"\n'
        '    now:      "Invoice from ACME Corp, due 2024-06-01"\n'
        "  if the change is intended, record again with --record"
    )


def test_miss_in_a_long_message_shows_an_excerpt(tmp_path: Path) -> None:
    record(tmp_path, (TURN1, REPLY1))
    verbose = Message("system", SYSTEM.format(today="<today>").replace("brief", "verbose"))
    changed = replace(TURN1, key_messages=(verbose,))
    with pytest.raises(ReplayMismatch) as exc:
        replay(tmp_path, changed)
    assert str(exc.value) == (
        f"no recorded reply for job 'triage[workspace/inbox/a.txt]', turn 1, in {tmp_path}\n"
        "  closest recording (task 'triage') differs at messages[0].content, character 49:\n"
        '    recorded: ..."y>.\\n## AGENTS.md\\nBe brief.\\n## MEMORY.md\\nShort answers."\n'
        '    now:      ..."y>.\\n## AGENTS.md\\nBe verbose.\\n## MEMORY.md\\nShort answers."\n'
        "  if the change is intended, record again with --record"
    )


def test_miss_names_the_path_of_a_changed_tool_or_model(tmp_path: Path) -> None:
    record(tmp_path, (TURN1, REPLY1))
    wider = ToolSpec(
        "read", "Read a file", {"type": "object", "properties": {"path": {"type": "array"}}}
    )
    changed = replace(TURN1, tools=(wider,))
    with pytest.raises(
        ReplayMismatch,
        match=r"differs at tools\[0\]\.parameters\.properties\.path\.type, character 1:",
    ):
        replay(tmp_path, changed)
    with pytest.raises(ReplayMismatch) as exc:
        replay(tmp_path, replace(TURN1, tools=()))
    assert str(exc.value).splitlines()[1:4] == [
        "  closest recording (task 'triage') differs at tools[0]:",
        '    recorded: {"description": "Read a file", "name": "read", "parameters":...',
        "    now:      (absent)",
    ]


def test_miss_for_a_task_without_recordings_compares_with_other_tasks(tmp_path: Path) -> None:
    record(tmp_path, (TURN1, REPLY1))
    other = replace(TURN1, messages=(system(), Message("user", "Other")), job="summary")
    with pytest.raises(ReplayMismatch) as exc:
        replay(tmp_path, other)
    assert str(exc.value) == (
        f"no recorded reply for job 'summary', turn 1, in {tmp_path}\n"
        "  no recordings for task 'summary'; closest recording (task 'triage') differs at "
        "messages[1].content, character 1:\n"
        '    recorded: "Triage workspace/inbox/a.txt"\n'
        '    now:      "Other"\n'
        "  if the change is intended, record again with --record"
    )


def test_miss_without_any_recording(tmp_path: Path) -> None:
    with pytest.raises(ReplayMismatch) as exc:
        replay(tmp_path / "cassettes", TURN1)
    assert str(exc.value) == (
        "no recorded reply for job 'triage[workspace/inbox/a.txt]', turn 1: no recordings for "
        f"task 'triage' in {tmp_path / 'cassettes'}; record them with --record"
    )


def test_a_corrupt_cassette_is_named(tmp_path: Path) -> None:
    (tmp_path / "triage.json").write_text('{"version": 1, "interactions": [', encoding="utf-8")
    with pytest.raises(ReplayMismatch) as exc:
        replay(tmp_path, TURN1)
    assert str(exc.value) == (
        f"cassette {tmp_path / 'triage.json'} is unreadable (Expecting value: line 1 column 33 "
        "(char 32)); fix it, or delete it and record again with --record"
    )


def test_a_cassette_with_a_broken_interaction_is_named(tmp_path: Path) -> None:
    document = {"version": 1, "interactions": [{"key": "k", "request": {}, "response": {}}]}
    (tmp_path / "triage.json").write_text(json.dumps(document), encoding="utf-8")
    with pytest.raises(ReplayMismatch) as exc:
        replay(tmp_path, TURN1)
    assert str(exc.value) == (
        f"cassette {tmp_path / 'triage.json'} is unreadable (missing key 'message'); fix it, or "
        "delete it and record again with --record"
    )
