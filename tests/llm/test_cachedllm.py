"""llm.callcache at its seam: a fake inner LLM (no HTTP), a real store in a temporary folder."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from claw_batch.errors import LimitExceeded
from claw_batch.llm.callcache import CachedLLM, CallStore, cacheable, endpoint_identity
from claw_batch.llm.messages import ChatRequest, Completion, Message, Usage

ANSWER = Completion(Message("assistant", "hello"), Usage(10, 5, 0), "stop", "m")


class Gate:
    """An LLM that answers once it is let through, and counts its calls."""

    def __init__(self, reply: Completion = ANSWER) -> None:
        self.reply = reply
        self.calls = 0
        self.entered = threading.Event()
        self.through = threading.Event()

    def complete(self, request: ChatRequest, *, deadline: float) -> Completion:
        self.calls += 1
        self.entered.set()
        self.through.wait(30)
        return self.reply


def request(job: str = "j", text: str = "hi") -> ChatRequest:
    return ChatRequest("m", (Message("system", "s"), Message("user", text)), job=job)


def cached(tmp_path: Path, inner: Gate) -> CachedLLM:
    store = CallStore(tmp_path / "cache")
    return CachedLLM(inner, store, endpoint="openai:x", day="2026-11-22", redact=str)


def test_a_request_in_flight_is_made_once_for_its_twin(tmp_path: Path) -> None:
    inner = Gate()
    llm = cached(tmp_path, inner)
    first: list[Completion] = []
    leader = threading.Thread(
        target=lambda: first.append(llm.complete(request("a"), deadline=1e12))
    )
    leader.start()
    assert inner.entered.wait(30)
    follower: list[Completion] = []
    twin = threading.Thread(
        target=lambda: follower.append(llm.complete(request("b"), deadline=1e12))
    )
    twin.start()
    inner.through.set()
    leader.join(30)
    twin.join(30)
    assert inner.calls == 1
    assert (first[0].replayed, follower[0].replayed) == (False, True)
    assert follower[0].message.content == "hello"


def test_a_twin_whose_deadline_passes_while_it_waits_hits_its_timeout(tmp_path: Path) -> None:
    inner = Gate()
    llm = cached(tmp_path, inner)
    leader = threading.Thread(target=lambda: llm.complete(request("a"), deadline=1e12))
    leader.start()
    try:
        assert inner.entered.wait(30)
        with pytest.raises(LimitExceeded, match="timeout"):
            llm.complete(request("b"), deadline=time.monotonic() - 1)
    finally:
        inner.through.set()
        leader.join(30)


@pytest.mark.parametrize(
    ("reply", "kept"),
    [
        (ANSWER, True),
        (Completion(Message("assistant", "cut"), Usage(), "length", "m"), False),
        (Completion(Message("assistant", "no"), Usage(), "content_filter", "m"), False),
        (Completion(Message("assistant", "  "), Usage(), "stop", "m"), False),
        (Completion(Message("assistant", None), Usage(), "stop", "m"), False),
    ],
)
def test_only_complete_answers_are_kept(tmp_path: Path, reply: Completion, kept: bool) -> None:
    assert cacheable(reply) is kept
    inner = Gate(reply)
    inner.through.set()
    llm = cached(tmp_path, inner)
    llm.complete(request(), deadline=1e12)
    again = cached(tmp_path, inner)  # another run: the journal is read when the cache opens
    llm.store.close()
    assert again.complete(request("k"), deadline=1e12).replayed is kept


def test_the_endpoint_in_the_key_has_no_credentials() -> None:
    assert endpoint_identity("https://user:sk-secret@api.example.com:8443/v1/?api-key=x") == (
        "openai:https://api.example.com:8443/v1"
    )
    assert endpoint_identity(None) == "openai:default"


def test_a_long_run_folds_its_journal_into_the_database_as_it_goes(tmp_path: Path) -> None:
    inner = Gate()
    inner.through.set()
    llm = cached(tmp_path, inner)
    llm.store.fold_every = 3
    for n in range(7):
        llm.complete(request(f"j{n}", f"question {n}"), deadline=1e12)
    journal = next((tmp_path / "cache").glob("journal-*.jsonl"))
    assert len(journal.read_text().splitlines()) == 1  # 6 folded, the 7th waits for the end
    for n in range(7):  # every reply found, folded or not
        assert llm.complete(request(f"k{n}", f"question {n}"), deadline=1e12).replayed
    assert inner.calls == 7
