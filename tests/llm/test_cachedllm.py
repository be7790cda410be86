"""llm.callcache at its seam: a fake inner LLM (no HTTP), a real store in a temporary folder."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest

from claw_batch.errors import LimitExceeded
from claw_batch.llm.callcache import CachedLLM, cacheable, endpoint_identity
from claw_batch.llm.callstore import CallStore, prune
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


def request(job: str = "j", text: str = "hi", temperature: float | None = 0) -> ChatRequest:
    """At temperature 0 by default: the reply is the request's, whichever job asks."""
    messages = (Message("system", "s"), Message("user", text))
    return ChatRequest("m", messages, temperature=temperature, job=job)


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


@pytest.mark.parametrize("temperature", [None, 0.7])
def test_a_sample_is_its_jobs_own_and_twins_are_asked_each(
    tmp_path: Path, temperature: float | None
) -> None:
    inner = Gate()
    inner.through.set()
    llm = cached(tmp_path, inner)
    a = llm.complete(request("a", temperature=temperature), deadline=1e12)
    b = llm.complete(request("b", temperature=temperature), deadline=1e12)
    assert (inner.calls, a.replayed, b.replayed) == (2, False, False)
    assert llm.key(request("a", temperature=temperature)) != llm.key(
        request("b", temperature=temperature)
    )
    again = cached(tmp_path, inner)  # another run: each job replays its own sample
    llm.store.close()
    assert again.complete(request("a", temperature=temperature), deadline=1e12).replayed
    assert inner.calls == 2


def test_peek_answers_what_the_cache_holds_and_complete_does_not_look_twice(
    tmp_path: Path,
) -> None:
    inner = Gate()
    inner.through.set()
    llm = cached(tmp_path, inner)
    asked = request("a")  # the tool loop peeks, then completes, the one request
    assert llm.peek(asked) is None
    looked: list[str] = []
    get = llm.store.get
    llm.store.get = lambda key: looked.append(key) or get(key)  # type: ignore[method-assign]
    assert not llm.complete(asked, deadline=1e12).replayed
    assert looked == []  # the miss peek saw is not looked up again
    found = llm.peek(request("b"))
    assert found is not None and found.replayed and inner.calls == 1


def test_a_reply_with_a_lone_surrogate_is_kept_and_read_back(tmp_path: Path) -> None:
    half = Completion(Message("assistant", "half an emoji: \ud83d end"), Usage(1, 1, 0), "stop")
    inner = Gate(half)
    inner.through.set()
    llm = cached(tmp_path, inner)
    assert not llm.complete(request(), deadline=1e12).replayed
    assert llm.complete(request("k"), deadline=1e12).message.content == half.message.content
    llm.store.close()  # the journal into calls.db
    again = cached(tmp_path, inner)
    replayed = again.complete(request("k2"), deadline=1e12)
    assert replayed.replayed and replayed.message.content == half.message.content


def test_a_reply_that_cannot_be_kept_is_a_warning_and_the_cache_stays_on(tmp_path: Path) -> None:
    warned: list[str] = []
    store = CallStore(tmp_path / "cache", warn=warned.append)
    store.put("k1", {"bad": object()}, 1)
    assert warned and "not kept in the call cache" in warned[0]
    store.put("k2", {"fine": 1}, 1)
    assert store.get("k2") == {"fine": 1}


def test_an_unreadable_entry_is_a_miss_removed_and_the_cache_stays_on(tmp_path: Path) -> None:
    warned: list[str] = []
    store = CallStore(tmp_path / "cache", warn=warned.append)
    store.put("bad", {"a": 1}, 1)
    store.put("good", {"b": 2}, 1)
    store.close()
    with sqlite3.connect(tmp_path / "cache/calls.db") as db:
        db.execute("UPDATE calls SET reply = '{\"message\":' WHERE key = 'bad'")
    db.close()
    store = CallStore(tmp_path / "cache", warn=warned.append)
    assert store.get("bad") is None
    assert store.get("good") == {"b": 2}  # not turned off
    store.close()
    assert warned == []
    with sqlite3.connect(tmp_path / "cache/calls.db") as db:
        assert [k for (k,) in db.execute("SELECT key FROM calls")] == ["good"]
    db.close()


def test_an_entry_stored_again_keeps_its_hits(tmp_path: Path) -> None:
    store = CallStore(tmp_path / "cache")
    store.put("k", {"a": 1}, 7)
    store.close()
    store = CallStore(tmp_path / "cache")
    assert store.get("k") == {"a": 1}
    store.close()  # one hit counted
    store = CallStore(tmp_path / "cache")
    store.put("k", {"a": 2}, 7)  # the same request stored anew (a twin, a journal twice)
    store.close()
    with sqlite3.connect(tmp_path / "cache/calls.db") as db:
        assert db.execute("SELECT hits, reply FROM calls").fetchall() == [(1, '{"a":2}')]
    db.close()


def pages(directory: Path) -> int:
    with sqlite3.connect(directory / "calls.db") as db:
        count: int = db.execute("PRAGMA page_count").fetchone()[0]
    db.close()
    return count


def test_prune_rewrites_the_file_only_when_much_of_it_is_free(tmp_path: Path) -> None:
    store = CallStore(tmp_path / "cache")
    for n in range(100):
        store.put(f"k{n:03}", {"text": "x" * 4000}, 1)
    store.close()
    directory = tmp_path / "cache"
    full = pages(directory)
    assert prune(directory, max_size=int(400_000 * 0.9)) > 0  # a tenth out: no VACUUM
    assert pages(directory) == full
    assert prune(directory, max_size=100_000) > 0  # most of it free: given back
    assert pages(directory) < full / 2
