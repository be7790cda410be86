from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import threading
import time
from pathlib import Path

import pytest

from claw_batch.errors import ToolError
from claw_batch.safety.paths import Policy
from claw_batch.safety.redact import Redactor
from claw_batch.safety.untrusted import fence
from claw_batch.taint.jobtaint import JobTaint
from claw_batch.tools.base import ToolContext
from claw_batch.tools.registry import TOOLS


@pytest.fixture
def root(tmp_path: Path) -> Path:
    proj = tmp_path / "proj"
    proj.mkdir()
    return proj.resolve()


TODAY = dt.date(2026, 11, 22)


def context(root: Path, workspace: str = "workspace", untrusted: str | None = None) -> ToolContext:
    # No write globs at all: remember writes MEMORY.md regardless of the task's write policy.
    deadline = time.monotonic() + 60
    return ToolContext(
        root=root,
        policy=Policy(root),
        env={},
        deadline=deadline,
        workspace=workspace,
        today=TODAY,
        taint=JobTaint(sources=(untrusted,) if untrusted else ()),
    )


def call(root: Path, name: str, *, untrusted: str | None = None, **args: object) -> str:
    return TOOLS[name].invoke(context(root, untrusted=untrusted), json.dumps(args))


def fails(root: Path, name: str, *, untrusted: str | None = None, **args: object) -> str:
    with pytest.raises(ToolError) as e:
        call(root, name, untrusted=untrusted, **args)
    return str(e.value)


def memory(root: Path) -> str:
    return (root / "workspace" / "MEMORY.md").read_text()


def put(root: Path, rel: str, content: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)
    return path


# --- remember ------------------------------------------------------------------------------------


def test_remember_spec() -> None:
    spec = TOOLS["remember"].spec()
    assert spec.parameters["required"] == ["text"]
    assert spec.parameters["properties"]["key"]["type"] == "string"
    assert spec.parameters["properties"]["key"] == {
        "description": "a stable name, e.g. release-day",
        "type": "string",
    }  # its rule is checked on the call (test_remember_invalid_key), not sent every time


def test_remember_creates_memory_md(root: Path) -> None:
    assert call(root, "remember", text="The user prefers metric units") == "remembered the fact"
    assert memory(root) == "# Memory\n\n- The user prefers metric units\n"


def test_remember_creates_it_in_the_configured_workspace(root: Path) -> None:
    ctx = context(root, workspace="home/agent")
    assert TOOLS["remember"].invoke(ctx, '{"text": "x", "key": "k"}') == "remembered k"
    assert (root / "home/agent/MEMORY.md").read_text() == "# Memory\n\n- k: x\n"


def test_remember_appends(root: Path) -> None:
    put(root, "workspace/MEMORY.md", "# Memory\n\nFacts about the project.\n\n- one\n\n\n")
    call(root, "remember", text="two")
    call(root, "remember", text="three", key="third")
    assert memory(root) == "# Memory\n\nFacts about the project.\n\n- one\n- two\n- third: three\n"


def test_remember_after_a_paragraph_starts_a_list(root: Path) -> None:
    put(root, "workspace/MEMORY.md", "# Memory\nHand-written notes.")
    call(root, "remember", text="a fact")
    assert memory(root) == "# Memory\nHand-written notes.\n\n- a fact\n"


def test_remember_replaces_by_key_anywhere(root: Path) -> None:
    put(
        root,
        "workspace/MEMORY.md",
        "# Memory\n\n## Releases\n\n  - release-day: Friday\n- release-days: plural\n\n"
        "## People\n\n- owner: Ana\n",
    )
    done = call(root, "remember", text="Thursday", key="Release-Day")
    assert done == "remembered release-day (replaced the previous fact)"
    assert memory(root) == (
        "# Memory\n\n## Releases\n\n  - release-day: Thursday\n- release-days: plural\n\n"
        "## People\n\n- owner: Ana\n"
    )


def test_remember_matches_keys_regardless_of_case_and_bullet(root: Path) -> None:
    put(root, "workspace/MEMORY.md", "# Memory\n\n* Owner : Ana\n- x\n- owner: Bob\n")
    assert call(root, "remember", text="Eve", key="owner") == (
        "remembered owner (replaced 2 previous facts)"
    )
    assert memory(root) == "# Memory\n\n- owner: Eve\n- x\n"


def test_remember_same_key_same_text_changes_nothing(root: Path) -> None:
    path = put(root, "workspace/MEMORY.md", "# Memory\n\n- owner: Ana\n")
    os.utime(path, (1, 1))
    done = call(root, "remember", text="Ana", key="owner")
    assert done == "owner is already remembered with this text; nothing changed"
    assert path.stat().st_mtime == 1


def test_remember_suppresses_a_duplicate_fact(root: Path) -> None:
    call(root, "remember", text="Deploys happen on Fridays")
    assert call(root, "remember", text="  Deploys happen\non Fridays ") == (
        "already remembered; nothing changed"
    )
    assert memory(root) == "# Memory\n\n- Deploys happen on Fridays\n"


def test_remember_collapses_newlines(root: Path) -> None:
    call(root, "remember", text="line one\nline two\r\n\n  line three\u2028four", key="multi")
    assert memory(root) == "# Memory\n\n- multi: line one line two line three four\n"


def test_remember_invalid_key(root: Path) -> None:
    message = (
        "invalid arguments for remember: key: Value error, a key is 1 to 64 letters, digits, "
        "'.', '_' or '-', starting with a letter or digit, e.g. release-day"
    )
    assert fails(root, "remember", text="x", key="-bad key") == message
    assert fails(root, "remember", text="x", key="k" * 65) == message
    assert not (root / "workspace").exists()


def test_remember_text_bounds(root: Path) -> None:
    assert fails(root, "remember", text="x" * 501) == (
        "text is too long (501 characters, limit 500); remember one short fact per call"
    )
    assert fails(root, "remember", text=" \n ") == "text is empty; give the fact to remember"
    assert not (root / "workspace").exists()
    call(root, "remember", text="y" * 500)
    assert memory(root) == "# Memory\n\n- " + "y" * 500 + "\n"


def test_remember_refuses_a_memory_md_outside_the_project(root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere.md"
    outside.write_text("# theirs\n")
    (root / "workspace").mkdir()
    (root / "workspace" / "MEMORY.md").symlink_to(outside)
    assert fails(root, "remember", text="x") == (
        f"refused: workspace/MEMORY.md resolves to {outside.resolve()}, outside the project "
        f"root {root}"
    )
    assert outside.read_text() == "# theirs\n"


def test_remember_refuses_a_workspace_outside_the_project(root: Path, tmp_path: Path) -> None:
    (tmp_path / "other").mkdir()
    (root / "workspace").symlink_to(tmp_path / "other")
    assert fails(root, "remember", text="x").startswith("refused: workspace/MEMORY.md resolves to")
    assert list((tmp_path / "other").iterdir()) == []


def test_remember_follows_a_symlink_inside_the_project(root: Path) -> None:
    target = put(root, "notes/memory.md", "# Memory\n")
    (root / "workspace").mkdir()
    (root / "workspace" / "MEMORY.md").symlink_to(target)
    call(root, "remember", text="kept as a link")
    assert (root / "workspace" / "MEMORY.md").is_symlink()
    assert target.read_text() == "# Memory\n\n- kept as a link\n"


def test_remember_refuses_a_directory(root: Path) -> None:
    (root / "workspace" / "MEMORY.md").mkdir(parents=True)
    assert fails(root, "remember", text="x") == (
        "workspace/MEMORY.md is a directory; MEMORY.md must be a file"
    )


# --- remember: the cap and the archive -----------------------------------------------------------

# claw_batch.memory.memoryfile.CAP: the system prompt shows MEMORY.md whole up to this
CAP = 6000
ARCHIVE = "workspace/memory/archive/2026-11.md"


def fact(n: int) -> str:
    """A 99-character fact line: `- fNN: aaa…`."""
    return f"- f{n:02d}: " + "a" * 92


def archive(root: Path) -> str:
    return (root / ARCHIVE).read_text()


def test_remember_moves_the_oldest_fact_to_the_archive_at_the_cap(root: Path) -> None:
    facts = [fact(n) for n in range(59)]
    put(root, "workspace/MEMORY.md", "# Memory\n\n" + "\n".join(facts) + "\n")  # 5,909 chars
    assert call(root, "remember", key="f59", text="a" * 92) == (
        "remembered f59; to keep workspace/MEMORY.md within 6,000 characters, moved 1 older fact "
        "to workspace/memory/archive/2026-11.md (memory_search finds them there): f00"
    )
    assert memory(root) == "# Memory\n\n" + "\n".join([*facts[1:], fact(59)]) + "\n"
    assert len(memory(root).strip()) <= CAP
    assert archive(root) == f"# Memory archive 2026-11\n\n## 2026-11-22\n\n{facts[0]}\n"


def test_remember_under_the_cap_archives_nothing(root: Path) -> None:
    put(root, "workspace/MEMORY.md", "# Memory\n\n" + "\n".join(fact(n) for n in range(58)) + "\n")
    assert call(root, "remember", key="f58", text="a" * 92) == "remembered f58"
    assert len(memory(root).strip()) == 5909
    assert not (root / "workspace/memory/archive").exists()


HAND_WRITTEN = (
    "# Memory\n\n"
    "Kept by hand; the agent adds facts below.\n\n"
    "## Releases\n\n"
    "- release-day: Friday\n"
    "- freeze: Wednesday 18:00\n"
    "  (moved from Tuesday in March)\n"
    "  - except before holidays\n\n"
    "## People\n\n"
    "- owner: Ana\n\n"
    "```sh\n- not a fact: inside a code block\n```\n\n"
    "{padding}\n"
)


def hand_written(padding: int) -> str:
    return HAND_WRITTEN.replace("{padding}", "p" * padding)


def test_remember_archives_only_facts_and_keeps_headings_and_paragraphs(root: Path) -> None:
    put(root, "workspace/MEMORY.md", hand_written(5780))
    assert call(root, "remember", text="Ana prefers short summaries", key="style") == (
        "remembered style; to keep workspace/MEMORY.md within 6,000 characters, moved 2 older "
        "facts to workspace/memory/archive/2026-11.md (memory_search finds them there): "
        "release-day, freeze"
    )
    assert memory(root) == (
        "# Memory\n\n"
        "Kept by hand; the agent adds facts below.\n\n"
        "## Releases\n\n"
        "## People\n\n"
        "- owner: Ana\n\n"
        "```sh\n- not a fact: inside a code block\n```\n\n"
        f"{'p' * 5780}\n\n"
        "- style: Ana prefers short summaries\n"
    )
    assert len(memory(root).strip()) <= CAP
    assert archive(root) == (
        "# Memory archive 2026-11\n\n"
        "## 2026-11-22, from Releases\n\n"
        "- release-day: Friday\n"
        "- freeze: Wednesday 18:00\n"
        "  (moved from Tuesday in March)\n"
        "  - except before holidays\n"
    )


def test_remember_appends_to_the_archive_and_continues_its_last_group(root: Path) -> None:
    put(root, ARCHIVE, "# Memory archive 2026-11\n\n## 2026-11-02\n\n- old: kept as it was\n")
    put(root, "workspace/MEMORY.md", "# Memory\n\n" + "\n".join(fact(n) for n in range(59)) + "\n")
    call(root, "remember", key="f59", text="a" * 92)
    call(root, "remember", key="f60", text="a" * 92)
    assert archive(root) == (
        "# Memory archive 2026-11\n\n## 2026-11-02\n\n- old: kept as it was\n\n"
        f"## 2026-11-22\n\n{fact(0)}\n{fact(1)}\n"
    )


def test_remember_replaces_in_place_and_never_archives_the_fact_it_wrote(root: Path) -> None:
    facts = [fact(n) for n in range(59)]
    put(root, "workspace/MEMORY.md", "# Memory\n\n" + "\n".join(facts) + "\n")
    assert call(root, "remember", key="f00", text="b" * 300) == (
        "remembered f00 (replaced the previous fact); to keep workspace/MEMORY.md within 6,000 "
        "characters, moved 2 older facts to workspace/memory/archive/2026-11.md (memory_search "
        "finds them there): f01, f02"
    )
    assert memory(root) == "# Memory\n\n" + "\n".join(["- f00: " + "b" * 300, *facts[3:]]) + "\n"
    assert archive(root) == f"# Memory archive 2026-11\n\n## 2026-11-22\n\n{facts[1]}\n{facts[2]}\n"


def test_remember_archives_facts_from_untrusted_runs_first(root: Path) -> None:
    facts = [fact(n) for n in range(59)]
    facts[30] = "- u30: from a watched file (from untrusted inbox/a.txt)"
    put(root, "workspace/MEMORY.md", "# Memory\n\n" + "\n".join(facts) + "\n")
    done = call(root, "remember", key="f59", text="a" * 150)
    assert done.endswith("(memory_search finds them there): u30")
    assert "u30" not in memory(root)
    assert archive(root).endswith("\n- u30: from a watched file (from untrusted inbox/a.txt)\n")


def test_remember_names_a_keyless_archived_fact_by_its_start(root: Path) -> None:
    facts = ["- " + "The deploy script lives in scripts and " + "z" * 60] + [
        fact(n) for n in range(1, 59)
    ]
    put(root, "workspace/MEMORY.md", "# Memory\n\n" + "\n".join(facts) + "\n")
    done = call(root, "remember", key="f59", text="a" * 92)
    assert done.endswith("finds them there): 'The deploy script lives in scripts and…'")


def test_remember_when_hand_written_text_alone_is_over_the_cap(root: Path) -> None:
    put(root, "workspace/MEMORY.md", hand_written(5990))
    before = memory(root)
    assert call(root, "remember", text="one more", key="more") == (
        "remembered more; note: workspace/MEMORY.md is 6,252 characters, over the 6,000 the "
        "system prompt shows whole, and its headings and paragraphs alone are too long for facts "
        "to be moved out: shorten them"
    )
    assert memory(root) == before + "\n- more: one more\n"
    assert not (root / "workspace/memory/archive").exists()


def test_remember_loses_no_fact_and_stays_within_the_cap(root: Path) -> None:
    for n in range(150):
        call(root, "remember", key=f"k{n}", text=f"fact number {n} " + "w" * (n % 90 + 1))
        assert len(memory(root).strip()) <= CAP
    kept = [ln for ln in memory(root).splitlines() if ln.startswith("- ")]
    moved = [ln for ln in archive(root).splitlines() if ln.startswith("- ")]
    assert sorted(kept + moved) == sorted(
        f"- k{n}: fact number {n} " + "w" * (n % 90 + 1) for n in range(150)
    )
    assert kept[-1] == "- k149: fact number 149 " + "w" * 60
    assert moved[0].startswith("- k0: ")  # the oldest went first


def test_concurrent_remembers_lose_no_fact(root: Path) -> None:
    def worker(first: int) -> None:
        for n in range(first, first + 40):
            call(root, "remember", key=f"t{n}", text="x" * 120)

    threads = [threading.Thread(target=worker, args=(i * 40,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    facts = [ln for ln in (memory(root) + archive(root)).splitlines() if ln.startswith("- ")]
    assert sorted(facts) == sorted(f"- t{n}: " + "x" * 120 for n in range(160))


def test_remember_refuses_an_archive_outside_the_project(root: Path, tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    put(root, "workspace/MEMORY.md", "# Memory\n\n" + "\n".join(fact(n) for n in range(59)) + "\n")
    before = memory(root)
    (root / "workspace/memory").mkdir()
    (root / "workspace/memory/archive").symlink_to(tmp_path / "elsewhere")
    assert fails(root, "remember", key="f59", text="a" * 92) == (
        f"refused: {ARCHIVE} resolves to {(tmp_path / 'elsewhere/2026-11.md').resolve()}, "
        f"outside the project root {root}"
    )
    assert memory(root) == before
    assert list((tmp_path / "elsewhere").iterdir()) == []


# --- remember in a job that reads untrusted content ---------------------------------------------


def test_remember_marks_facts_from_untrusted_content(root: Path) -> None:
    assert call(root, "remember", untrusted="inbox/a.txt", key="vendor", text="Acme") == (
        "remembered vendor"
    )
    call(root, "remember", untrusted="inbox/b.txt", text="Invoices come monthly")
    assert memory(root) == (
        "# Memory\n\n- vendor: Acme (from untrusted inbox/a.txt)\n"
        "- Invoices come monthly (from untrusted inbox/b.txt)\n"
    )


def test_remember_redacts_the_source_it_marks_a_fact_with(root: Path) -> None:
    """The mark names a dropped file, whose name its sender chose: redacted with the fact."""
    key = "ghp_" + "a1" * 18
    ctx = dataclasses.replace(context(root, untrusted=f"inbox/{key}.txt"), redact=Redactor())
    TOOLS["remember"].invoke(ctx, json.dumps({"text": "Invoices come monthly"}))
    assert memory(root) == (
        "# Memory\n\n- Invoices come monthly (from untrusted inbox/[REDACTED].txt)\n"
    )


def test_untrusted_content_cannot_replace_a_trusted_fact(root: Path) -> None:
    put(root, "workspace/MEMORY.md", "# Memory\n\n- owner: Ana\n")
    assert fails(root, "remember", untrusted="inbox/a.txt", key="Owner", text="Mallory") == (
        "refused: owner was not remembered from untrusted content, and this job reads "
        "untrusted content (inbox/a.txt): remember it under another key"
    )
    assert memory(root) == "# Memory\n\n- owner: Ana\n"


def test_untrusted_content_may_replace_an_untrusted_fact(root: Path) -> None:
    call(root, "remember", untrusted="inbox/a.txt", key="vendor", text="Acme")
    assert call(root, "remember", untrusted="inbox/b.txt", key="vendor", text="Acme Ltd") == (
        "remembered vendor (replaced the previous fact)"
    )
    assert memory(root) == "# Memory\n\n- vendor: Acme Ltd (from untrusted inbox/b.txt)\n"
    assert call(root, "remember", key="vendor", text="Acme GmbH") == (
        "remembered vendor (replaced the previous fact)"
    )
    assert memory(root) == "# Memory\n\n- vendor: Acme GmbH\n"


# --- memory_search (the tool; ranking is tests/test_recall.py's) ---------------------------------


@pytest.fixture
def notes(root: Path) -> Path:
    put(
        root,
        "workspace/MEMORY.md",
        "# Memory\n\n- release-day: Friday\n- the deploy script is scripts/ship.sh\n",
    )
    put(root, "workspace/memory/2026-11-01.md", "# 2026-11-01\n\n> deploy failed on staging\n")
    put(root, "workspace/memory/2026-11-21.md", "# 2026-11-21\n\n> deploy went fine\n")
    return root


def test_search_output(notes: Path) -> None:
    assert call(notes, "memory_search", query="DEPLOY") == (
        "workspace/MEMORY.md:4 [fact] - the deploy script is scripts/ship.sh\n"
        "workspace/memory/2026-11-21.md:3 [text]\n"
        "  1- # 2026-11-21\n"
        "  3: > deploy went fine\n"
        "workspace/memory/2026-11-01.md:3 [text]\n"
        "  1- # 2026-11-01\n"
        "  3: > deploy failed on staging"
    )


def test_search_limit(notes: Path) -> None:
    assert call(notes, "memory_search", query="deploy", limit=1) == (
        "workspace/MEMORY.md:4 [fact] - the deploy script is scripts/ship.sh\n"
        "[2 more matches not shown; raise limit or add words]"
    )
    assert fails(notes, "memory_search", query="deploy", limit=0) == (
        "invalid arguments for memory_search: limit: Input should be greater than or equal to 1"
    )
    assert fails(notes, "memory_search", query="deploy", limit=51) == (
        "invalid arguments for memory_search: limit: Input should be less than or equal to 50"
    )


def test_search_no_match(notes: Path) -> None:
    assert call(notes, "memory_search", query="  kubernetes\thelm ") == (
        "no memory matches 'kubernetes helm'"
    )


def test_search_without_any_memory(root: Path) -> None:
    assert call(root, "memory_search", query="anything") == "no memory matches 'anything'"


def test_search_empty_query(notes: Path) -> None:
    assert fails(notes, "memory_search", query=" \n") == (
        "query is empty; give one or more words to look for"
    )


def test_search_takes_regex_metacharacters_literally(root: Path) -> None:
    put(
        root,
        "workspace/MEMORY.md",
        "- c++ (v2) costs $5 [sic]\n- axb\n- cxx\n- a|b\n- #tag & ~x -y\n- back\\slash\n",
    )
    assert call(root, "memory_search", query="a.b c++ $5 (v2) [sic]") == (
        "workspace/MEMORY.md:1 [fact] - c++ (v2) costs $5 [sic]"
    )
    assert call(root, "memory_search", query="a|b") == "workspace/MEMORY.md:4 [fact] - a|b"
    assert call(root, "memory_search", query="#tag") == "workspace/MEMORY.md:5 [tag] - #tag & ~x -y"
    assert call(root, "memory_search", query="&") == "workspace/MEMORY.md:5 [fact] - #tag & ~x -y"
    assert call(root, "memory_search", query="\\sl") == "workspace/MEMORY.md:6 [fact] - back\\slash"
    assert call(root, "memory_search", query=".*") == "no memory matches '.*'"
    # as `claw memory search`: a word matches where a word starts, not inside one
    assert call(root, "memory_search", query="ack") == "no memory matches 'ack'"


def test_search_skips_notes_outside_the_project(root: Path, tmp_path: Path) -> None:
    put(tmp_path, "secret/2024-01-01.md", "deploy key: hunter2\n")
    (root / "workspace").mkdir()
    (root / "workspace" / "memory").symlink_to(tmp_path / "secret")
    assert call(root, "memory_search", query="deploy") == "no memory matches 'deploy'"
    (root / "workspace" / "memory").unlink()
    put(root, "workspace/MEMORY.md", "- deploy on Friday\n")
    (root / "workspace" / "memory").mkdir()
    (root / "workspace" / "memory" / "2024-01-02.md").symlink_to(tmp_path / "secret/2024-01-01.md")
    assert call(root, "memory_search", query="deploy") == (
        "workspace/MEMORY.md:1 [fact] - deploy on Friday"
    )


def test_search_finds_what_remember_wrote_and_archived(root: Path) -> None:
    put(root, "workspace/MEMORY.md", "# Memory\n\n" + "\n".join(fact(n) for n in range(59)) + "\n")
    call(root, "remember", text="Ana prefers short summaries, " + "x" * 70, key="style")
    assert call(root, "memory_search", query="summaries") == (
        "workspace/MEMORY.md:61 [fact] - style: Ana prefers short summaries, " + "x" * 70
    )
    assert call(root, "memory_search", query="f00") == (
        "workspace/memory/archive/2026-11.md:5 [key] " + fact(0)
    )


def test_search_shows_the_untrusted_marker_fenced_and_taints_the_searcher(root: Path) -> None:
    """A fact a tainted job remembered is outside content: found, it is fenced, and the job
    that found it is tainted (claw_batch.taint.jobtaint)."""
    call(root, "remember", key="owner", text="Ana")
    call(root, "remember", untrusted="inbox/a.txt", key="vendor", text="Acme")
    ctx = context(root)
    found = TOOLS["memory_search"].invoke(ctx, json.dumps({"query": "vendor"}))
    assert found == fence(
        "workspace/MEMORY.md:4 [key] - vendor: Acme (from untrusted inbox/a.txt)",
        "workspace/MEMORY.md",
    )
    assert ctx.taint.source == "workspace/MEMORY.md"
    assert call(root, "memory_search", query="owner") == "workspace/MEMORY.md:3 [key] - owner: Ana"
