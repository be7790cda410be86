"""claw_batch.memory.search: the stages (key, heading/tag, fact/text), the ranking (kind, recency,
diversity), deduplication and the progressive search, on real files with real ripgrep."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from claw_batch.memory import notefiles
from claw_batch.memory import search as recall

TODAY = dt.date(2026, 11, 22)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    proj = tmp_path / "proj"
    proj.mkdir()
    return proj.resolve()


def put(root: Path, rel: str, content: str) -> None:
    path = root / "workspace" / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)


def note(root: Path, days_ago: int, content: str) -> str:
    name = f"memory/{TODAY - dt.timedelta(days=days_ago)}.md"
    put(root, name, content)
    return f"workspace/{name}"


def search(root: Path, query: str, limit: int = 8) -> recall.Recall:
    return recall.search(root, "workspace", query, limit=limit, today=TODAY)


def shown(root: Path, query: str, limit: int = 8) -> str:
    return recall.render(search(root, query, limit))


def ranked(root: Path, query: str, limit: int = 8) -> list[tuple[str, int, str, float]]:
    return [(h.path, h.line, h.kind, round(h.score, 4)) for h in search(root, query, limit).hits]


# --- the stages ----------------------------------------------------------------------------------


def test_key_hits_then_headings_and_tags_then_text(root: Path) -> None:
    put(root, "MEMORY.md", "# Memory\n\n- release-day: Friday\n- we release on a day off\n")
    note(root, 0, "# notes\n\n## Release day plans\n\nThe release moved; #release-day\n")
    assert shown(root, "release day") == (
        "workspace/MEMORY.md:3 [key] - release-day: Friday\n"
        "workspace/memory/2026-11-22.md:3 [heading] ## Release day plans\n"
        "workspace/memory/2026-11-22.md:5 [tag] The release moved; #release-day\n"
        "workspace/MEMORY.md:4 [fact] - we release on a day off"
    )


def test_a_key_that_is_the_query_beats_one_that_holds_it(root: Path) -> None:
    put(
        root,
        "MEMORY.md",
        "- day-to-ship: all the words\n- ship-day-2: holds it\n- ship-day: is it\n"
        "- ship: one word only\n",
    )
    assert ranked(root, "ship day") == [
        ("workspace/MEMORY.md", 3, "key", 4.0),
        ("workspace/MEMORY.md", 2, "key", 3.2 * 0.6),
        ("workspace/MEMORY.md", 1, "key", 2.4 * 0.36),
        ("workspace/MEMORY.md", 4, "key", 1.0 * 0.216),  # one of the words: half a match
    ]  # (each further hit from MEMORY.md weighed by 0.6 more: diversity)


def test_a_tag_matches_with_or_without_its_hash(root: Path) -> None:
    note(
        root, 0, "paid the invoice #billing\n\n\n\nbilling is Jonas's\n\n\n\nC#billing is no tag\n"
    )
    assert [h.kind for h in search(root, "billing").hits] == ["tag", "text", "text"]
    assert [(h.line, h.kind) for h in search(root, "#billing").hits] == [(1, "tag"), (9, "text")]


def test_daily_note_entries_are_headings(root: Path) -> None:
    path = note(root, 0, "# 2026-11-22\n\n### 09:00 triage · ok · 1.2 s · 300 tokens\n> done\n")
    assert ranked(root, "triage") == [(path, 3, "heading", 2.0)]


def test_text_hits_come_with_context(root: Path) -> None:
    note(root, 0, "one\ntwo\n\nthree deploy\nfour\n\nfive\nsix\n")
    note(root, 1, "deploy at the top\nnext\n")
    assert shown(root, "deploy") == (
        "workspace/memory/2026-11-22.md:4 [text]\n"
        "  2- two\n"
        "  4: three deploy\n"
        "  5- four\n"
        "workspace/memory/2026-11-21.md:1 [text]\n"
        "  1: deploy at the top\n"
        "  2- next"
    )


def test_a_line_shown_in_a_better_hits_context_counts_once(root: Path) -> None:
    note(root, 0, "deploy and rollback\ndeploy\n\n\n\n\ndeploy again, later\n")
    assert [h.line for h in search(root, "deploy rollback").hits] == [1, 7]


def test_identical_lines_count_once(root: Path) -> None:
    put(root, "MEMORY.md", "- release-day: Friday\n")
    note(root, 0, "  - release-day: Friday\n")
    note(root, 1, "deploy went fine\n")
    note(root, 2, "deploy went fine\n")
    assert ranked(root, "release-day fine") == [
        ("workspace/MEMORY.md", 1, "key", 1.0),
        ("workspace/memory/2026-11-21.md", 1, "text", round(0.5 * 0.5 ** (1 / 14), 4)),
    ]


# --- recency and diversity -----------------------------------------------------------------------


def test_daily_notes_decay_with_a_half_life_of_two_weeks(root: Path) -> None:
    a = note(root, 0, "deploy\n")
    b = note(root, 14, "deploy!\n")
    c = note(root, 28, "deploy?\n")
    d = note(root, -3, "deploy (planned)\n")  # a note dated ahead counts as today's
    assert ranked(root, "deploy") == [
        (a, 1, "text", 1.0),
        (d, 1, "text", 1.0),
        (b, 1, "text", 0.5),
        (c, 1, "text", 0.25),
    ]


def test_recency_outweighs_the_kind_of_an_old_hit(root: Path) -> None:
    old = note(root, 60, "## Deploy\n")
    new = note(root, 0, "the deploy went fine\n")
    assert ranked(root, "deploy") == [
        (new, 1, "text", 1.0),
        (old, 1, "heading", round(2 * 0.5 ** (60 / 14), 4)),
    ]


def test_memory_md_does_not_decay_and_the_archive_dates_from_its_month(root: Path) -> None:
    put(root, "MEMORY.md", "- owner: Ana\n")
    put(root, "memory/archive/2026-10.md", "# Memory archive 2026-10\n\n- owner: Bob\n")
    put(root, "memory/archive/2026-11.md", "# Memory archive 2026-11\n\n- owner: Eve\n")
    assert ranked(root, "owner") == [
        ("workspace/MEMORY.md", 1, "key", 4.0),
        ("workspace/memory/archive/2026-11.md", 3, "key", 4.0),
        ("workspace/memory/archive/2026-10.md", 3, "key", round(4 * 0.5 ** (22 / 14), 4)),
    ]


def test_notes_without_a_date_count_as_four_weeks_old(root: Path) -> None:
    put(root, "memory/people.md", "Ana owns the deploy\n")
    put(root, "memory/2026-13-01.md", "deploy in a month that is not\n")
    put(root, "memory/draft.txt", "deploy (not a note)\n")
    assert ranked(root, "deploy") == [
        ("workspace/memory/2026-13-01.md", 1, "text", 0.25),
        ("workspace/memory/people.md", 1, "text", 0.25),
    ]


def test_diversity_a_file_already_shown_counts_less(root: Path) -> None:
    busy = note(root, 0, "deploy one\n\n\n\ndeploy two\n\n\n\ndeploy three\n")
    other = note(root, 3, "deploy elsewhere\n")
    assert ranked(root, "deploy") == [
        (busy, 1, "text", 1.0),
        (other, 1, "text", round(0.5 ** (3 / 14), 4)),
        (busy, 5, "text", 0.6),
        (busy, 9, "text", 0.36),
    ]


def test_more_words_rank_higher(root: Path) -> None:
    one = note(root, 0, "deploy went fine\n")
    two = note(root, 1, "deploy to staging failed\n")
    assert ranked(root, "staging deploy")[0][:2] == (two, 1)
    assert ranked(root, "staging deploy")[1][:2] == (one, 1)


# --- progressive search ---------------------------------------------------------------------------


@pytest.fixture
def many(root: Path) -> Path:
    put(root, "MEMORY.md", "# Memory\n\n- owner: Ana\n")
    for age in range(300):
        body = f"# day {age}\n\n### 09:00 triage · ok\n> deploy number {age}\n"
        note(root, age, body + ("> the old kubernetes cluster\n" if age == 250 else ""))
    return root


def test_a_query_found_in_recent_notes_does_not_search_old_ones(many: Path) -> None:
    found = search(many, "deploy", limit=3)
    assert (found.searched, found.files, found.complete) == (32, 301, False)
    assert [h.path for h in found.hits] == [
        "workspace/memory/2026-11-22.md",
        "workspace/memory/2026-11-21.md",
        "workspace/memory/2026-11-20.md",
    ]
    assert recall.render(found).endswith(
        "[at least 28 more matches not shown; raise limit or add words]"
    )


def test_a_rare_query_searches_every_file(many: Path) -> None:
    found = search(many, "kubernetes")
    assert (found.searched, found.files, found.complete, found.more) == (301, 301, True, 0)
    assert [(h.path, h.line) for h in found.hits] == [("workspace/memory/2026-03-17.md", 5)]


@pytest.mark.parametrize("query", ["deploy", "deploy triage", "number 7", "owner 250"])
def test_progressive_search_ranks_as_a_full_search_does(
    many: Path, monkeypatch: pytest.MonkeyPatch, query: str
) -> None:
    progressive = search(many, query, limit=5).hits
    monkeypatch.setattr(recall, "FIRST_WINDOW", 10_000)
    full = search(many, query, limit=5)
    assert full.complete
    assert progressive == full.hits


def test_a_window_split_across_parallel_ripgrep_calls_finds_the_same(
    many: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole = search(many, "kubernetes deploy", limit=20)
    monkeypatch.setattr(recall, "SPLIT_FROM", 2)
    monkeypatch.setattr(recall.os, "cpu_count", lambda: 3)  # parts of 11, 11 and 10 files
    assert search(many, "kubernetes deploy", limit=20) == whole


def test_files_are_searched_freshest_first(root: Path) -> None:
    put(root, "MEMORY.md", "x\n")
    for name in (
        "2026-11-01.md",
        "2026-11-20.md",
        "2030-01-01.md",
        "people.md",
        "2026-02-30.md",
        "0000-01-01.md",
        ".hidden.md",
        "notes.txt",
    ):
        put(root, f"memory/{name}", "x\n")
    put(root, "memory/archive/2026-10.md", "x\n")
    put(root, "memory/archive/old.md", "x\n")
    (root / "workspace/memory/fifo.md").mkdir()  # neither a directory nor a FIFO is searched
    files = notefiles.list_files(root, "workspace", TODAY)
    days = [f.day for f in files]
    assert days == sorted(days, reverse=True)
    assert sorted((f.day, f.shown.removeprefix("workspace/")) for f in files) == sorted(
        [
            ("9999-12-31", "MEMORY.md"),
            ("2030-01-01", "memory/2030-01-01.md"),
            ("2026-11-20", "memory/2026-11-20.md"),
            ("2026-11-01", "memory/2026-11-01.md"),
            ("2026-10-31", "memory/archive/2026-10.md"),
            ("2026-10-25", "memory/archive/old.md"),
            ("2026-10-25", "memory/people.md"),
            ("2026-02-30", "memory/2026-02-30.md"),
            ("0000-01-01", "memory/0000-01-01.md"),
        ]
    )
    fresh = [round(notefiles.freshness(f.day, TODAY), 4) for f in files]
    assert fresh == [1.0, 1.0, 0.9057, 0.3536, 0.3365, 0.25, 0.25, 0.0, 0.0]


def test_the_query_words(root: Path) -> None:
    assert recall.words("  Deploy\tdeploy STAGING ") == ["deploy", "staging"]
    assert recall.words(" \n ") == []
