"""A task's notice made from its jobs' results (run/notices.py), without a model: which
status it reports and which deliveries fire, what a large fan-out keeps, and what an
interrupted task sends (nothing)."""

from __future__ import annotations

from pathlib import Path

from helpers import make_project
from sendfake import FakeSend

from claw_batch.clawfile.load import load_project
from claw_batch.llm.usage import Usage
from claw_batch.notify.notice import FAILURES_SHOWN
from claw_batch.plan.jobs import Job
from claw_batch.run.notices import Notices
from claw_batch.run.results import JobResult, Status

CLAWFILE = """
version: 1
model: fake-model
tasks:
  review:
    foreach: "tickets/*.md"
    prompt: "Review {{ item }}."
    notify:
      - {on: [failed], webhook: "https://hooks.example.org/failed"}
      - {on: [limit], webhook: "https://hooks.example.org/limit"}
      - {on: [ok], webhook: "https://hooks.example.org/ok"}
"""


def notices(tmp_path: Path, send: FakeSend) -> Notices:
    project = load_project(make_project(tmp_path / "p", CLAWFILE), cache="off")
    return Notices(
        project,
        None,
        "20261122-230500-abcdef",
        redact=lambda s: s.replace("s3cr3t", "[REDACTED]"),
        environ={},
        warn=lambda s: None,
        say=lambda s: None,
        send=send,
    )


def result(item: str, status: Status, text: str = "", error: str | None = None) -> JobResult:
    usage = Usage(10, 5)
    return JobResult(Job("review", item), status, error, 1.0, usage, None, error, "", text=text)


def sent_to(tmp_path: Path, statuses: list[Status]) -> list[tuple[str, str, str]]:
    send = FakeSend()
    n = notices(tmp_path, send)
    for i, status in enumerate(statuses):
        n.took(result(f"tickets/{i}.md", status, "fine" if status == "ok" else ""))
    n.task_done("review")
    n.wait()
    return [(d.url or "", notice.status, notice.event) for d, notice in send.sent]


def test_the_status_is_the_worst_of_the_jobs_and_fires_its_deliveries(tmp_path: Path) -> None:
    hooks = "https://hooks.example.org/"
    assert sent_to(tmp_path / "1", ["ok", "ok"]) == [(hooks + "ok", "ok", "ok")]
    assert sent_to(tmp_path / "2", ["ok", "limit"]) == [(hooks + "limit", "limit", "limit")]
    assert sent_to(tmp_path / "3", ["limit", "failed", "ok"]) == [
        (hooks + "failed", "failed", "failed")
    ]


def test_an_interrupted_task_or_one_with_nothing_run_sends_nothing(tmp_path: Path) -> None:
    assert sent_to(tmp_path / "1", ["ok", "interrupted"]) == []
    assert sent_to(tmp_path / "2", ["up-to-date", "skipped"]) == []


def test_a_large_fan_out_keeps_the_first_failures_and_counts_the_rest(tmp_path: Path) -> None:
    send = FakeSend()
    n = notices(tmp_path, send)
    for i in range(1000):
        ok = i % 10 == 0
        text = f"answer {i} with s3cr3t" if ok else ""
        n.took(result(f"tickets/{i}.md", "ok" if ok else "failed", text, f"boom {i} s3cr3t"))
    n.task_done("review")
    n.wait()
    [(_, notice)] = send.sent
    assert notice.jobs == 1000 and dict(notice.counts) == {"ok": 100, "failed": 900}
    assert len(notice.failures) == FAILURES_SHOWN and notice.more_failures == 900 - FAILURES_SHOWN
    assert notice.failures[0].error == "boom 1 [REDACTED]"
    assert (
        notice.excerpt == "answer 0 with [REDACTED]"
        and not notice.excerpt_cut
        and notice.tokens == 15_000
    )
    assert notice.item is None and notice.show == "claw show review"
