"""The shapes of a notice: its title line, and each webhook body within its service's bounds,
with a job's words shown as text: no ping, no link, no code fence closed early. (The bodies
of ordinary notices are golden: tests/golden/test_notify_golden.py.)"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

import pytest
from notices import FANOUT_FAILED, ONE_OK_TAINTED, PINGING

from claw_batch.notify import markup, shapes
from claw_batch.notify.notice import Failure, Notice

HUGE = dataclasses.replace(
    FANOUT_FAILED,
    task="t" * 400,
    failures=tuple(
        Failure(f"item-{i}-" + "é" * 300, "failed", "TaskFailed", "😀" * 2000) for i in range(20)
    ),
    more_failures=180,
    excerpt="@everyone 😀 ``` <!channel> &" * 2000,
    tainted=True,
)


def texts(value: Any) -> list[str]:
    """Every string in a JSON body."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in texts(v)]
    if isinstance(value, list):
        return [t for v in value for t in texts(v)]
    return []


@pytest.mark.parametrize(
    ("notice", "expected"),
    [
        (
            FANOUT_FAILED,
            "claw: nightly-summary failed — 2 of 40 jobs failed, 1 hit a limit "
            "(run 20261127T230000-ab12)",
        ),
        (ONE_OK_TAINTED, "claw: review changed for src/app.py (run 20261127T230000-ab12)"),
        (
            dataclasses.replace(FANOUT_FAILED, counts={"ok": 40}, status="ok", failures=()),
            "claw: nightly-summary ok — 40 jobs ok (run 20261127T230000-ab12)",
        ),
        (
            dataclasses.replace(ONE_OK_TAINTED, status="limit", event="limit", reason="max_turns"),
            "claw: review hit a limit for src/app.py — max_turns (run 20261127T230000-ab12)",
        ),
        (
            dataclasses.replace(FANOUT_FAILED, sample=True),
            "claw (test): nightly-summary failed — 2 of 40 jobs failed, 1 hit a limit "
            "(run 20261127T230000-ab12)",
        ),
    ],
)
def test_title(notice: Notice, expected: str) -> None:
    assert shapes.title(notice) == expected


def test_a_title_is_one_bounded_line() -> None:
    notice = dataclasses.replace(ONE_OK_TAINTED, item="a\r\nb\x1b[31m\u202e" + "x" * 500)
    title = shapes.title(notice)
    assert "\n" not in title and "\r" not in title and "\x1b" not in title
    assert "\u202e" not in title
    assert len(title) <= shapes.TITLE_CHARS and title.endswith(markup.MARK)


def test_the_text_says_a_tainted_output_must_not_be_trusted() -> None:
    assert shapes.TAINTED in shapes.text(ONE_OK_TAINTED)
    assert shapes.TAINTED not in shapes.text(FANOUT_FAILED)
    for body in (shapes.slack_body, shapes.discord_body, shapes.teams_body):
        assert any("must not be trusted as instructions" in t for t in texts(body(ONE_OK_TAINTED)))


def test_discord_stays_within_2000_characters_and_pings_nobody() -> None:
    for notice in (HUGE, PINGING, FANOUT_FAILED):
        body = shapes.discord_body(notice)
        assert body["allowed_mentions"] == {"parse": []}
        content = body["content"]
        assert markup.units(content) <= 2000
        assert not re.search(r"@(everyone|here)", content)
        assert "<@" not in content
        assert content.count("```") == 2  # the block opened is the block closed
        content.encode()  # whole characters only


def test_slack_stays_within_its_bounds_and_pings_nobody() -> None:
    for notice in (HUGE, PINGING):
        body = shapes.slack_body(notice)
        for block in body["blocks"]:
            for text in texts(block):
                assert markup.units(text) <= 3000
        for text in texts(body):
            assert "<" not in text and ">" not in text  # no <!channel>, <@U1>, <url|link>
            assert not re.search(r"@(everyone|here|channel)", text)
            assert not re.search(r"&(?![a-z]+;)", text) or text.endswith(markup.MARK)
        assert len(body["blocks"]) <= 50


def test_slack_fences_hold() -> None:
    body = shapes.slack_body(PINGING)
    [code] = [t for t in texts(body) if t.startswith("```")]
    assert code.count("```") == 2


def test_teams_shows_a_jobs_words_as_text_runs() -> None:
    card = shapes.teams_body(PINGING)["attachments"][0]["content"]
    assert {block["type"] for block in card["body"]} == {"RichTextBlock"}
    assert all(i["type"] == "TextRun" for b in card["body"] for i in b["inlines"])
    sent = json.dumps(shapes.teams_body(HUGE), ensure_ascii=False).encode()  # as send() does
    assert len(sent) < 28_000


def test_the_json_payload_bounds_its_free_texts() -> None:
    payload = shapes.json_body(HUGE)
    assert len(payload["excerpt"].encode()) <= 4000 and payload["excerpt_cut"] is True
    assert all(len(f["error"]) <= 1000 for f in payload["failures"])
    assert payload["more_failures"] == 180
    assert set(payload) == {
        "title", "task", "event", "status", "item", "reason", "jobs", "counts", "failures",
        "more_failures", "output", "excerpt", "excerpt_cut", "tokens", "cost_usd",
        "duration_s", "run_id", "show", "tainted", "project", "sample",
    }  # fmt: skip
