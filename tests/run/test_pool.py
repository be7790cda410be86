"""-j: independent jobs side by side, providers throttled, failures and Ctrl-C honoured."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAI, Reply, text
from helpers import claw, make_project

from claw_batch.plan.jobs import Job
from claw_batch.run.pool import Scheduler
from claw_batch.run.results import JobResult, not_run

NOW = "2026-11-22T23:05:00+01:00"


class Gauge:
    """A handler that answers after a pause and remembers how many calls overlapped."""

    def __init__(self, pause: float, fail: str = "") -> None:
        self.pause = pause
        self.fail = fail
        self.now = 0
        self.most = 0
        self.lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Reply:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
        time.sleep(self.pause)
        with self.lock:
            self.now -= 1
        prompt = body["messages"][1]["content"]
        return text("" if self.fail and self.fail in prompt else f"done: {prompt}")


def fanout(root: Path, n: int, provider: str = "") -> Path:
    files = {f"inbox/{i:02}.txt": f"item {i}\n" for i in range(n)}
    slow = "providers: {slow: {base_url: 'http://127.0.0.1:9/v1', max_concurrency: 2}}"
    return make_project(
        root,
        f"""
        version: 1
        model: {provider}fake-model
        {slow if provider else ""}
        tasks:
          t:
            foreach: "inbox/*.txt"
            prompt: "Handle {{{{ item.path }}}}"
            output: "out/{{{{ item.stem }}}}.md"
    """,
        files,
    )


def test_jobs_run_side_by_side(tmp_path: Path) -> None:
    root = fanout(tmp_path / "p", 8)
    gauge = Gauge(0.3)
    with FakeOpenAI() as srv:
        srv.handler = gauge
        env = {"OPENAI_BASE_URL": srv.base_url, "CLAW_NOW": NOW}
        r = claw(root, "run", "-j", "8", "-q", env=env)
    assert r.exit_code == 0, r.stderr
    assert gauge.most >= 4  # calls overlapped (all 8 do unless the machine is very busy)
    assert len(list((root / "out").iterdir())) == 8


def test_provider_max_concurrency_is_a_ceiling(tmp_path: Path) -> None:
    root = fanout(tmp_path / "p", 6, provider="slow/")
    gauge = Gauge(0.2)
    with FakeOpenAI() as srv:
        srv.handler = gauge
        clawfile = root / "clawfile.yaml"
        clawfile.write_text(clawfile.read_text().replace("http://127.0.0.1:9/v1", srv.base_url))
        r = claw(root, "run", "-j", "6", "-q", env={"CLAW_NOW": NOW})
    assert r.exit_code == 0, r.stderr
    assert gauge.most == 2


def test_without_k_no_new_jobs_start_after_a_failure(tmp_path: Path) -> None:
    root = fanout(tmp_path / "p", 6)
    with FakeOpenAI() as srv:
        srv.handler = Gauge(0.1, fail="inbox/00.txt")  # an empty answer fails the job
        env = {"OPENAI_BASE_URL": srv.base_url, "CLAW_NOW": NOW}
        r = claw(root, "run", "-j", "2", "--json", env=env)
        assert r.exit_code == 1
        ran = json.loads(r.stdout)["jobs"]
        assert len(ran) < 6  # the two running finished; nothing new started
        r = claw(root, "run", "-j", "2", "-k", "--json", env=env)
    statuses = sorted(j["status"] for j in json.loads(r.stdout)["jobs"])
    assert statuses.count("failed") == 1 and "ok" in statuses


def test_ctrl_c_just_after_a_job_was_handed_to_the_pool_still_reports_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The job is running when Ctrl-C reaches the scheduler, before it noted the job: the
    job's result must still be said (its row is in the ledger: the summary must show it)."""
    real_submit = ThreadPoolExecutor.submit

    def submit_then_ctrl_c(self: ThreadPoolExecutor, *args: Any) -> Any:
        real_submit(self, *args)
        raise KeyboardInterrupt

    monkeypatch.setattr(ThreadPoolExecutor, "submit", submit_then_ctrl_c)
    reported: list[JobResult] = []
    job = Job("t", "a.txt")
    scheduler = Scheduler(
        jobs=2,
        upstream=lambda name: (),
        expand=lambda name: [job],
        check=lambda j: lambda: not_run(j, "ok", ()),
        on_result=lambda result: reported.append(result) and False,
        settle_all=lambda name, jobs: False,
        on_task_done=lambda name: None,
    )
    with pytest.raises(KeyboardInterrupt):
        scheduler.run(["t"])
    assert [r.job for r in reported] == [job]


def test_the_scheduler_flushes_the_ledger_when_no_job_starts_and_before_a_task_is_done() -> None:
    """What the jobs that ended left for later (run.record) goes with the next job's start:
    the scheduler writes it itself only when no job starts, and before a task's end is said
    (its daily note entry comes after its jobs' records)."""
    said: list[str] = []
    jobs = [Job("t", f"{i}.txt") for i in range(3)]
    scheduler = Scheduler(
        jobs=1,
        upstream=lambda name: (),
        expand=lambda name: list(jobs),
        check=lambda j: lambda: not_run(j, "ok", ()),
        on_result=lambda result: said.append(f"result {result.job.item}") and False,
        settle_all=lambda name, jobs: False,
        on_task_done=lambda name: said.append(f"done {name}"),
        flush=lambda: said.append("flush"),
    )
    scheduler.run(["t"])
    assert said == ["result 0.txt", "result 1.txt", "result 2.txt", "flush", "done t", "flush"]
