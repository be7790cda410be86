"""Make semantics through the CLI: what runs, what is skipped, and why."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAI, echo_prompt
from helpers import claw, make_project

from claw_batch.clawfile.load import load_project
from claw_batch.plan.graph import build
from claw_batch.plan.jobs import Job
from claw_batch.plan.uptodate import Decider
from claw_batch.store.filehash import FileHashes

NOW = "2026-11-22T23:05:00+01:00"

FANOUT = """
    version: 1
    model: fake-model
    tasks:
      tickets:
        foreach: "inbox/*.txt"
        prompt: "Ticket for {{ item.path }}"
        output: "tickets/{{ item.stem }}.txt"
        tools: [read]
      digest:
        needs: [tickets]
        prompt: "Digest of the tickets"
        inputs: ["tickets/*.txt"]
        output: digest.md
"""


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as srv:
        srv.handler = echo_prompt
        yield srv


@pytest.fixture
def env(server: FakeOpenAI) -> dict[str, str]:
    return {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-x", "CLAW_NOW": NOW}


def run(root: Path, env: dict[str, str], *args: str) -> dict[str, str]:
    r = claw(root, "run", "--json", *args, env=env)
    assert r.exit_code == 0, r.stderr
    return {job_name(j): j["status"] for j in json.loads(r.stdout)["jobs"]}


def job_name(j: dict[str, Any]) -> str:
    return f"{j['task']}[{j['item']}]" if j["item"] else j["task"]


def why(root: Path, env: dict[str, str], task: str) -> str:
    r = claw(root, "why", task, env=env)
    assert r.exit_code == 0, r.stderr
    return r.stdout


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path / "p", FANOUT, {"inbox/a.txt": "alpha\n", "inbox/b.txt": "beta\n"})


def test_second_run_calls_no_model(project: Path, server: FakeOpenAI, env: dict[str, str]) -> None:
    assert set(run(project, env).values()) == {"ok"}
    calls = len(server.requests)
    r = claw(project, "run", env=env)
    assert r.exit_code == 0
    assert r.stderr == "3 jobs up to date\n"
    assert len(server.requests) == calls


def test_touching_a_file_reruns_nothing(project: Path, env: dict[str, str]) -> None:
    run(project, env)
    stat = (project / "inbox/a.txt").stat()
    os.utime(project / "inbox/a.txt", ns=(stat.st_atime_ns, stat.st_mtime_ns + 5_000_000_000))
    assert set(run(project, env).values()) == {"up-to-date"}


def test_a_changed_input_reruns_its_job_only(project: Path, env: dict[str, str]) -> None:
    run(project, env)
    (project / "inbox/a.txt").write_text("alpha, changed\n")
    assert why(project, env, "tickets") == (
        "tickets[inbox/a.txt]: would run\n"
        "  - input inbox/a.txt changed\n"
        "tickets[inbox/b.txt]: up to date\n"
        "  - nothing it depends on changed since it last succeeded\n"
    )
    assert run(project, env) == {
        "tickets[inbox/a.txt]": "ok",
        "tickets[inbox/b.txt]": "up-to-date",
        # same prompt, same answer, same bytes: early cutoff keeps the digest
        "digest": "up-to-date",
    }


def test_adding_and_removing_items(project: Path, env: dict[str, str]) -> None:
    run(project, env)
    (project / "inbox/c.txt").write_text("gamma\n")
    statuses = run(project, env)
    assert statuses["tickets[inbox/c.txt]"] == "ok"
    assert statuses["tickets[inbox/a.txt]"] == "up-to-date"
    assert statuses["digest"] == "ok"  # a new ticket is a new input of the digest
    (project / "inbox/c.txt").unlink()
    statuses = run(project, env)
    assert "tickets[inbox/c.txt]" not in statuses


def test_changed_upstream_output_reruns_downstream(project: Path, env: dict[str, str]) -> None:
    run(project, env)
    (project / "clawfile.yaml").write_text(
        (project / "clawfile.yaml").read_text().replace("Ticket for", "A ticket for")
    )
    assert why(project, env, "tickets").count("prompt changed") == 2
    r = claw(project, "run", "--json", env=env)
    (digest,) = [j for j in json.loads(r.stdout)["jobs"] if j["task"] == "digest"]
    assert digest["status"] == "ok"
    assert digest["reasons"] == [
        "input tickets/a.txt changed",
        "input tickets/b.txt changed",
        "upstream output tickets/a.txt changed",
        "upstream output tickets/b.txt changed",
    ]


def test_model_change_and_force(project: Path, env: dict[str, str]) -> None:
    run(project, env)
    statuses = run(project, env, "--model", "other-model", "digest")
    assert statuses["digest"] == "ok"
    assert statuses["tickets[inbox/a.txt]"] == "ok"
    assert set(run(project, env, "-B", "digest").values()) == {"ok"}


def test_hand_edited_output_is_kept_unless_forced(project: Path, env: dict[str, str]) -> None:
    run(project, env)
    (project / "digest.md").write_text("my own digest\n")
    r = claw(project, "run", env=env)
    assert "kept digest: output digest.md was modified by hand; kept (-B overwrites it)" in (
        r.stderr
    )
    assert (project / "digest.md").read_text() == "my own digest\n"
    run(project, env, "-B", "digest")
    assert (project / "digest.md").read_text().startswith("answer to:")


def test_missing_output_reruns(project: Path, env: dict[str, str]) -> None:
    run(project, env)
    (project / "tickets/b.txt").unlink()
    assert why(project, env, "tickets").endswith(
        "tickets[inbox/b.txt]: would run\n  - output tickets/b.txt is missing\n"
    )
    assert run(project, env)["tickets[inbox/b.txt]"] == "ok"


def test_dry_run_calls_nothing_and_writes_nothing(
    project: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    r = claw(project, "plan", env=env)
    assert r.exit_code == 0
    words = r.stdout.splitlines()[0].split()
    assert re.fullmatch(r"~\d+", words.pop(2))  # the first call's estimated prompt
    assert words.pop(2) == "tok"
    assert words == [
        "run",
        "tickets[inbox/a.txt]",
        "never",
        "ran",
        "(or",
        "did",
        "not",
        "finish)",
    ]
    assert not (project / ".claw").exists()
    run(project, env)
    before = {p: p.stat().st_mtime_ns for p in (project / ".claw").rglob("*")}
    (project / "inbox/a.txt").write_text("changed\n")
    r = claw(project, "run", "-n", env=env)
    assert r.exit_code == 0 and "would run tickets[inbox/a.txt]" in r.stderr
    assert {p: p.stat().st_mtime_ns for p in (project / ".claw").rglob("*")} == before
    assert server.requests and len(server.requests) == 3


def test_upstream_that_would_run_shows_in_the_plan(project: Path, env: dict[str, str]) -> None:
    run(project, env)
    (project / "inbox/b.txt").write_text("changed\n")
    lines = claw(project, "plan", env=env).stdout.splitlines()
    assert re.fullmatch(r"run +digest +~\d+ tok  upstream tickets would run", lines[-1])


def test_fanout_over_an_upstream_task_outputs(tmp_path: Path, env: dict[str, str]) -> None:
    """No `needs:`: the implicit edge (foreach matches tickets' outputs) orders the tasks,
    and the fan-out is expanded after its upstream wrote the files."""
    root = make_project(
        tmp_path / "p",
        """
        version: 1
        model: fake-model
        tasks:
          review:
            foreach: "tickets/*.txt"
            prompt: "Review {{ item.path }}"
            output: "reviews/{{ item.stem }}.md"
          tickets:
            foreach: "inbox/*.txt"
            prompt: "Ticket for {{ item.path }}"
            output: "tickets/{{ item.stem }}.txt"
    """,
        {"inbox/a.txt": "alpha\n"},
    )
    assert run(root, env) == {"tickets[inbox/a.txt]": "ok", "review[tickets/a.txt]": "ok"}
    assert (root / "reviews/a.md").read_text() == "answer to: Review tickets/a.txt\n"


def test_one_changed_upstream_file_reruns_only_the_job_that_reads_it(
    tmp_path: Path, env: dict[str, str]
) -> None:
    root = make_project(
        tmp_path / "p",
        """
        version: 1
        model: fake-model
        tasks:
          tickets:
            foreach: "inbox/*.txt"
            prompt: "Ticket for {{ item.path }} {{ read(item.path) }}"
            output: "tickets/{{ item.stem }}.txt"
          review:
            foreach: "tickets/*.txt"
            prompt: "Review {{ item.path }}"
            output: "reviews/{{ item.stem }}.md"
    """,
        {"inbox/a.txt": "alpha\n", "inbox/b.txt": "beta\n", "inbox/c.txt": "gamma\n"},
    )
    run(root, env)
    (root / "inbox/b.txt").write_text("beta, changed\n")
    assert run(root, env) == {
        "tickets[inbox/a.txt]": "up-to-date",
        "tickets[inbox/b.txt]": "ok",
        "tickets[inbox/c.txt]": "up-to-date",
        "review[tickets/a.txt]": "up-to-date",
        "review[tickets/b.txt]": "ok",
        "review[tickets/c.txt]": "up-to-date",
    }


SKILLED = """
    version: 1
    model: fake-model
    tasks:
      summary:
        prompt: "Summarise"
        output: summary.md
      narrow:
        prompt: "Narrow"
        output: narrow.md
        skills: []
"""


def add_skill(root: Path, name: str, description: str, body: str = "Body.\n") -> None:
    path = root / "skills" / name / "SKILL.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"---\nname: {name}\ndescription: {description}\n---\n{body}")


def plan_reasons(root: Path, env: dict[str, str]) -> list[str]:
    """Per line of `claw plan`: its label, job and reasons, without the estimated size."""
    r = claw(root, "plan", env=env)
    assert r.exit_code == 0, r.stderr
    return [re.sub(r" +~[\d,]+ tok ", " ", line) for line in r.stdout.splitlines()]


def system_prompts(server: FakeOpenAI) -> dict[str, str]:
    """The system prompt of each task's first model call, by the task it names."""
    found = {}
    for request in server.requests:
        system = request["messages"][0]["content"]
        found.setdefault(re.search(r"running the task '(\w+)'", system)[1], system)  # type: ignore[index]
    return found


def test_the_plan_says_which_skills_changed_and_what_they_cost(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    root = make_project(tmp_path / "p", SKILLED)
    run(root, env)
    add_skill(root, "pdf", "Read, split and merge PDF files with the scripts beside this file.")
    add_skill(root, "docx", "Write Word documents.")
    assert plan_reasons(root, env) == [
        "run         summary  skills changed: +docx, +pdf (~49 more prompt tokens per model call)",
        "up to date  narrow",
    ]
    assert why(root, env, "summary") == (
        "summary: would run\n"
        "  - skills changed: +docx, +pdf (~49 more prompt tokens per model call)\n"
    )
    server.requests.clear()
    run(root, env)
    system = system_prompts(server)["summary"]
    start = system.index("## Skills")
    listed = system[start : system.index("\n\n## ", start) + 2]  # and the separator after it
    assert len(listed) // 4 == 49  # what the plan said, at 4 characters a token
    (root / "skills/docx").rename(tmp_path / "docx")
    (root / "skills/pdf/SKILL.md").write_text("---\nname: pdf\ndescription: PDFs.\n---\nBody.\n")
    (root / "workspace/SOUL.md").write_text("Calmer.\n")
    assert plan_reasons(root, env) == [
        "run         summary  context (workspace files) changed; skills changed: -docx, pdf "
        "edited (~29 fewer prompt tokens per model call)",
        "run         narrow  context (workspace files) changed",
    ]


class Unprepared:
    """A job the Decider must answer without preparing: asking for it fails the test."""

    @property
    def fingerprint(self) -> Any:
        raise AssertionError("the fingerprint of a job that never succeeded was asked for")

    def output_hash(self, rel: str) -> str | None:
        raise AssertionError("the outputs of a job that never succeeded were hashed")


@pytest.mark.parametrize(
    ("force", "always", "reason"),
    [
        (False, False, "never ran (or did not finish)"),
        (True, False, "forced (-B)"),
        (False, True, "always: true"),
    ],
)
def test_a_job_that_never_succeeded_runs_without_being_prepared(
    project: Path, force: bool, always: bool, reason: str
) -> None:
    # Its reasons need no fingerprint: claw list answers it from the ledger alone.
    if always:
        (project / "clawfile.yaml").write_text(
            (project / "clawfile.yaml").read_text().replace("tools: [read]", "always: true")
        )
    config = load_project(project, None, cache="off").config

    def no_key(task: str) -> Any:
        raise AssertionError("the task key of a job that never succeeded was computed")

    decider = Decider(
        None, FileHashes(None, project), build(config), config.tasks, key=no_key, force=force
    )
    decision = decider.decide(Job("tickets", "inbox/a.txt"), Unprepared())
    assert (decision.run, decision.reasons) == (True, (reason,))
