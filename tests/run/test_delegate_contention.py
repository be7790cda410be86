"""Sub-jobs that contend, through `claw run`: crossed ad-hoc delegations (each sub-job asks
for the other's prompt while the other runs) end with one refused as a cycle instead of both
waiting until the deadline; a turn of many delegate calls runs on at most -j threads."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAI, Reply, call, text, tool_calls
from helpers import claw, make_project

KEY = "sk-test-0123456789abcdef0123"
NOW = "2026-11-22T23:05:00+01:00"


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as srv:
        yield srv


@pytest.fixture
def env(server: FakeOpenAI) -> dict[str, str]:
    return {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": KEY, "CLAW_NOW": NOW}


def user(body: dict[str, Any]) -> str:
    return str(body["messages"][1]["content"])


def results(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


LEAD = """
    version: 1
    model: fake-model
    tasks:
      lead:
        prompt: "Lead."
        tools: [read, delegate]
        output: out/lead.md
        timeout: 60
"""


def test_crossed_ad_hoc_delegations_are_refused_as_a_cycle_not_waited_for(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    """lead runs ad-hoc P1 and P2 together; both have started (a barrier) before either asks
    for the other: the second to ask is refused, the first then finds the other's answer."""
    root = make_project(tmp_path / "p", LEAD)
    both = threading.Barrier(2, timeout=10)
    lock = threading.Lock()
    first: list[str] = []

    def handle(body: dict[str, Any]) -> Reply:
        got, who = results(body), user(body)
        with lock:
            top = who in ("P1", "P2") and not got and len(first) < 2
            if top:
                first.append(who)
        if top:  # both hold their own sub-job before either delegates
            with contextlib.suppress(threading.BrokenBarrierError):
                both.wait()
        if who.startswith("Lead"):
            if got:
                return text("lead: " + " | ".join(got))
            ask = [call("delegate", {"prompt": p}, id=p) for p in ("P1", "P2")]
            return tool_calls(*ask)
        if got:
            return text(f"{who} done after [{got[0]}]")
        other = "P2" if who == "P1" else "P1"
        return tool_calls(call("delegate", {"prompt": other}, id=f"x{who}"))

    server.handler = handle
    r = claw(root, "run", "-j", "4", "lead", env=env)
    assert r.exit_code == 0, r.stderr
    assert not both.broken
    answer = (root / "out/lead.md").read_text()
    assert "waiting for it would never end; do this part yourself" in answer, answer


def test_a_turns_delegate_calls_hold_at_most_j_threads(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    root = make_project(tmp_path / "p", LEAD)
    peak = [0]

    def handle(body: dict[str, Any]) -> Reply:
        who = user(body)
        if who.startswith("Lead"):
            if results(body):
                return text("done")
            return tool_calls(
                *(call("delegate", {"prompt": f"P{n}", "tools": ["read"]}, id=f"c{n}")
                  for n in range(60))
            )  # fmt: skip
        waiting = sum(t.name.startswith("claw-call-delegate") for t in threading.enumerate())
        peak[0] = max(peak[0], waiting)
        return text(f"{who} ok")

    server.handler = handle
    r = claw(root, "run", "-j", "2", "lead", env=env)
    assert r.exit_code == 0, r.stderr
    assert len(server.requests) == 1 + 60 + 1
    assert 1 <= peak[0] <= 2, f"{peak[0]} delegate threads alive at once at -j 2"
