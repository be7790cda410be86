"""Costs and budgets: every call priced from the API's usage, the ledger, the log and the daily
note say what a run cost, and a job stops before the call that would cross a limit."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAI, call, text, tool_calls
from helpers import claw, make_project

from claw_batch.agent.budget import Cap, JobBudget, Spend
from claw_batch.config import Budget, Clawfile, Price, Task
from claw_batch.errors import LimitExceeded
from claw_batch.llm import prices
from claw_batch.llm.usage import Usage

NOW = "2026-11-24T09:00:00+01:00"


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


def env(server: FakeOpenAI, now: str = NOW) -> dict[str, str]:
    return {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-x", "CLAW_NOW": now}


def ledger(root: Path, sql: str) -> list[tuple[Any, ...]]:
    db = sqlite3.connect(root / ".claw" / "state.db")
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


# --- prices ---------------------------------------------------------------------------------------


def test_the_price_of_a_model() -> None:
    mine = {"local/qwen": Price(0, 0), "gpt-4o": Price(9, 9)}
    assert prices.lookup("gpt-4o-mini") == Price(0.15, 0.60, 0.075)
    assert prices.lookup("gpt-4o-mini-2024-07-18") == Price(0.15, 0.60, 0.075)  # a snapshot
    assert prices.lookup("openrouter/openai/gpt-4o-mini") == Price(0.15, 0.60, 0.075)
    assert prices.lookup("gpt-4o", mine) == Price(9, 9)  # the clawfile corrects the table
    assert prices.lookup("local/qwen", mine) == Price(0, 0)
    assert prices.lookup("local/qwen") is None
    assert prices.lookup("llama3.1:8b") is None  # never a guess


def test_the_cost_of_a_call() -> None:
    price = Price(input=1.0, output=4.0, cached_input=0.5)  # USD per million tokens
    assert prices.cost(Usage(1_000_000, 0, 0), price) == 1.0
    assert prices.cost(Usage(1_000_000, 250_000, 400_000), price) == 0.6 + 0.2 + 1.0
    assert prices.cost(Usage(10, 5, 0), Price(1.0, 4.0)) == pytest.approx(3e-5)
    assert prices.cost(Usage(10, 5, 0), None) is None
    assert prices.total([0.5, 0.25]) == 0.75
    assert prices.total([0.5, None]) is None  # a sum that leaves one out would be wrong


# --- accounting, end to end ---------------------------------------------------------------------

PRICED = """
    version: 1
    model: fake-model
    prices:
      fake-model: {input: 100, output: 400}   # USD per million tokens: 1e-4 and 4e-4 a token
    tasks:
      t:
        prompt: "Do {{ task }}"
        tools: [read]
"""


def test_each_call_job_and_run_is_priced(tmp_path: Path, server: FakeOpenAI) -> None:
    root = make_project(tmp_path / "p", PRICED, {"a.txt": "a\n"})
    server.enqueue(
        tool_calls(call("read", {"path": "a.txt"}), usage=(1_000, 100)),
        text("done", usage=(2_000, 50), cached=1_000),
    )
    result = claw(root, "run", "--json", env=env(server))
    assert result.exit_code == 0, result.stderr
    envelope = json.loads(result.stdout)
    first = 1_000 * 1e-4 + 100 * 4e-4  # 0.14
    second = 2_000 * 1e-4 + 50 * 4e-4  # cached at the input price: the clawfile set none
    assert envelope["jobs"][0]["cost_usd"] == pytest.approx(first + second)
    assert envelope["totals"]["cost_usd"] == pytest.approx(first + second)
    calls = ledger(root, "SELECT step, prompt_tokens, cached_tokens, cost_usd FROM calls")
    assert calls == [(1, 1_000, 0, pytest.approx(first)), (2, 2_000, 1_000, pytest.approx(second))]
    (job,) = ledger(root, "SELECT prompt_tokens, completion_tokens, cost_usd FROM jobs")
    assert job == (3_000, 150, pytest.approx(first + second))
    log = claw(root, "log").stdout
    assert "3,150 tokens, $0.3600" in log.splitlines()[0]
    assert "$0.3600  done" not in log  # the job line shows its output, not the answer
    note = (root / "workspace/memory/2026-11-24.md").read_text()
    assert "· 3,150 tokens · $0.3600\n" in note


def test_an_unknown_price_shows_tokens_only(tmp_path: Path, server: FakeOpenAI) -> None:
    root = make_project(tmp_path / "p", PRICED.replace("fake-model: {", "other: {"))
    server.enqueue(text("done", usage=(100, 10)))
    envelope = json.loads(claw(root, "run", "--json", env=env(server)).stdout)
    assert (envelope["jobs"][0]["cost_usd"], envelope["totals"]["cost_usd"]) == (None, None)
    assert envelope["totals"]["tokens"] == 110
    assert ledger(root, "SELECT cost_usd FROM calls") == [(None,)]
    assert "110 tokens, $?" in claw(root, "log").stdout
    note = (root / "workspace/memory/2026-11-24.md").read_text()
    assert "· 110 tokens\n" in note


# --- budgets ------------------------------------------------------------------------------------


def test_max_usd_stops_the_job_before_the_call_that_would_cross_it(
    tmp_path: Path, server: FakeOpenAI
) -> None:
    clawfile = PRICED + "    budget: {max_usd: 0.20}\n".replace("    budget", "        budget")
    root = make_project(tmp_path / "p", clawfile, {"a.txt": "x" * 4_000})
    server.enqueue(
        tool_calls(call("read", {"path": "a.txt"}), usage=(1_000, 100)),  # $0.14 spent
        text("never asked"),
    )
    result = claw(root, "run", env=env(server))
    assert result.exit_code == 3
    assert len(server.requests) == 1  # the second call, ~1,000 prompt tokens more, was not made
    (status, reason, error, cost) = ledger(
        root, "SELECT status, reason, error, cost_usd FROM jobs"
    )[0]
    assert (status, reason, cost) == ("limit", "budget", pytest.approx(0.14))
    assert error.startswith("budget: the next model call (~$0.1")
    assert error.endswith("would take the job past its budget.max_usd of $0.20 ($0.1400 spent)")
    assert "limit" in claw(root, "log").stdout
    note = (root / "workspace/memory/2026-11-24.md").read_text()
    assert "· limit ·" in note and "> budget: the next model call" in note


def test_per_day_counts_earlier_runs_and_forgets_them_after_a_day(
    tmp_path: Path, server: FakeOpenAI
) -> None:
    clawfile = PRICED.replace("tools: [read]", "tools: []\n        budget: {per_day: 0.25}")
    root = make_project(tmp_path / "p", clawfile)
    server.handler = lambda body: text("done", usage=(1_000, 100))  # $0.14 a call
    assert claw(root, "run", env=env(server)).exit_code == 0
    # 6 hours later, $0.14 of $0.25 spent today: the next prompt (~$0.01) fits; what the
    # model answers is only known afterwards, so this call takes the day to $0.28.
    assert claw(root, "run", "-B", env=env(server, "2026-11-24T15:00:00+01:00")).exit_code == 0
    third = claw(root, "run", "-B", env=env(server, "2026-11-24T18:00:00+01:00"))
    assert third.exit_code == 3
    assert "past tasks.t.budget.per_day of $0.25 ($0.2800 spent in the last 24 hours)" in (
        third.stderr
    )
    assert len(server.requests) == 2
    next_day = "2026-11-25T10:30:00+01:00"  # the first run is more than 24 hours ago
    assert claw(root, "run", "-B", env=env(server, next_day)).exit_code == 0
    assert len(server.requests) == 3


def test_the_clawfile_wide_cap_counts_every_task(tmp_path: Path, server: FakeOpenAI) -> None:
    clawfile = """
        version: 1
        model: fake-model
        prices:
          fake-model: {input: 100, output: 400}
        budget: {per_week: 0.28}
        tasks:
          a: {prompt: "Do a", tools: []}
          b: {prompt: "Do b", tools: [], needs: [a]}
          c: {prompt: "Do c", tools: [], needs: [b]}
    """
    root = make_project(tmp_path / "p", clawfile)
    server.handler = lambda body: text("done", usage=(1_000, 100))  # $0.14 a call
    result = claw(root, "run", "-k", "--json", env=env(server))
    statuses = {j["task"]: j["status"] for j in json.loads(result.stdout)["jobs"]}
    assert statuses == {"a": "ok", "b": "ok", "c": "limit"}
    assert result.exit_code == 3
    assert "past budget.per_week of $0.28 ($0.2800 spent in the last 7 days)" in result.stderr


def test_parallel_jobs_cannot_all_pass_the_same_last_dollar() -> None:
    """Four jobs ask at once with $0.25 left under a cap: the estimate each holds while its
    call is in flight keeps the others out."""
    config = Clawfile(tasks={"t": Task(prompt="x")})
    spend = Spend(config, lambda task, since: 0.75, dt.datetime(2026, 11, 24))
    cap = Cap("budget.per_day", None, 1.0, "24 hours", 0.75)  # $0.75 spent by earlier runs
    jobs = [JobBudget(spend, "t", Price(100, 400), Budget(), [cap]) for _ in range(4)]
    passed = []
    for job in jobs:
        with contextlib.suppress(LimitExceeded):
            job.reserve(Usage(), 1_000)  # ~$0.10 each
            passed.append(job)
    assert len(passed) == 2
    passed[0].settle(Usage(500, 0, 0))  # it cost $0.05, not the $0.10 held
    jobs[2].reserve(Usage(), 400)  # so $0.04 more fits: 0.75 + 0.05 + 0.10 + 0.04
    with pytest.raises(LimitExceeded, match=r"past budget.per_day of \$1.00 \(\$0.9400 spent"):
        jobs[3].reserve(Usage(), 1_000)


def test_a_model_without_a_price_under_a_usd_budget_runs_nothing(
    tmp_path: Path, server: FakeOpenAI
) -> None:
    clawfile = PRICED.replace("tools: [read]", "tools: []\n        budget: {max_usd: 1}")
    root = make_project(tmp_path / "p", clawfile)
    result = claw(root, "run", "--model", "unpriced", env=env(server))
    assert result.exit_code == 2
    assert result.stderr.endswith(
        "claw: task 't' has a budget in USD, and no price is known for model 'unpriced': add "
        "it under prices: in the clawfile (USD per million tokens, e.g. {input: 0.5, output: "
        "1.5}; 0 for a local model)\n"
    )
    assert server.requests == []


def test_plan_shows_the_estimated_prompt_of_each_job(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", PRICED, {"a.txt": "a\n"})
    (line,) = claw(root, "plan").stdout.splitlines()
    words = line.split()
    assert words[:2] == ["run", "t"]
    assert words[2].startswith("~") and words[3] == "tok"
    assert 50 < int(words[2][1:].replace(",", "")) < 1_000


def test_show_gives_each_calls_cost(tmp_path: Path, server: FakeOpenAI) -> None:
    root = make_project(tmp_path / "p", PRICED)
    server.enqueue(text("done", usage=(1_000, 100)))
    assert claw(root, "run", env=env(server)).exit_code == 0
    shown = claw(root, "show", "last").stdout
    assert "assistant (step 1, 1,100 tokens, $0.1400):" in shown
