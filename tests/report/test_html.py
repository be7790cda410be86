"""`claw report`: the period's ledger as one self-contained HTML page."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import sqlite3
import struct
import subprocess
import zlib
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI, Reply, call, text, tool_calls
from helpers import claw, make_project
from syrupy.assertion import SnapshotAssertion
from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode

from claw_batch import figures
from claw_batch.report import html as htmlreport
from claw_batch.report.charts import lanes
from claw_batch.report.data import JobSpan, Period, RunSpan, gather, total

CLAWFILE = """
    version: 1
    model: fake-model
    prices:
      fake-model: {input: 2.0, output: 8.0}   # USD per million tokens; unpriced-model has none
    tasks:
      notes:
        prompt: "Summarise"
        output: notes.md
        tools: []
      tickets:
        foreach: "inbox/*.txt"
        prompt: "Ticket {{ item.path }}"
        output: "tickets/{{ item.stem }}.md"
        tools: []
      digest:
        needs: [tickets]
        prompt: "Digest"
        output: digest.md
        tools: []
      lookup:
        prompt: "Look it up"
        output: lookup.md
        tools: [read]
        max_steps: 1
        model: unpriced-model
"""
FIRST = "2026-11-20T23:00:00+01:00"
SECOND = "2026-11-22T07:30:00+01:00"
IDLE = "2026-11-22T08:00:00+01:00"
NOW = "2026-11-22T09:00:00+01:00"
HOSTILE = "<img src=x onerror=alert(1)> let me look"
RUN_ID = re.compile(r"\b(\d{8}-\d{6})-[0-9a-f]{6}\b")


def reply(body: dict[str, object]) -> Reply:
    prompt = str(body["messages"][1]["content"])  # type: ignore[index]
    if "b.txt" in prompt:
        return text("")  # an empty answer fails the job
    if "Look it up" in prompt:  # a tool call with max_steps 1: the job hits its limit
        return tool_calls(call("read", {"path": "notes.md"}), content=HOSTILE, usage=(120, 30))
    return text("done", usage=(400, 100), cached=100)


def build_ledger(root: Path) -> None:
    """Three runs: two days apart (the second with a new inbox file), then one that finds
    everything up to date. Jobs then get fixed durations (their command lines, the ones a
    user would have typed) (and the first run's jobs start one
    after another, as with -j 1; the second's keep the pinned clock's one start, as jobs
    running at once). Costs are claw's own: fake-model is priced, lookup's model is not."""
    make_project(root, CLAWFILE, {"inbox/a.txt": "A\n", "inbox/b.txt": "B\n"})
    with FakeOpenAI() as server:
        server.handler = reply
        env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-x"}
        assert claw(root, "run", "-k", env={**env, "CLAW_NOW": FIRST}).exit_code == 1
        (root / "inbox" / "c.txt").write_text("C\n")
        assert claw(root, "run", "-k", env={**env, "CLAW_NOW": SECOND}).exit_code == 1
        assert claw(root, "run", "notes", env={**env, "CLAW_NOW": IDLE}).exit_code == 0
    db = sqlite3.connect(root / ".claw" / "state.db")
    with db:  # in-process runs record pytest's command line
        db.execute("UPDATE runs SET argv = 'claw run -k' WHERE started IN (?, ?)", (FIRST, SECOND))
        db.execute("UPDATE runs SET argv = 'claw run notes' WHERE started = ?", (IDLE,))
        durations = {"notes": 4.0, "tickets": 2.5, "lookup": 1.25, "digest": 3.0}
        for task, seconds in durations.items():
            db.execute("UPDATE jobs SET duration_s = ? WHERE task = ?", (seconds, task))
        first = db.execute("SELECT id FROM runs WHERE started = ?", (FIRST,)).fetchone()[0]
        jobs = db.execute(
            "SELECT rowid, duration_s FROM jobs WHERE run_id = ? ORDER BY rowid", (first,)
        ).fetchall()
        at = dt.datetime.fromisoformat(FIRST)
        for rowid, seconds in jobs:
            db.execute("UPDATE jobs SET started = ? WHERE rowid = ?", (at.isoformat(), rowid))
            at += dt.timedelta(seconds=seconds)
        db.execute("UPDATE runs SET finished = ? WHERE id = ?", (at.isoformat(), first))
    db.close()


def period_of(root: Path, days: int = 7) -> Period:
    now = dt.datetime.fromisoformat(NOW)
    return gather(root, now - dt.timedelta(days=days), now)


def outline(period: Period) -> list[str]:
    """Each run and its jobs as lines: what the timeline draws."""
    lines = []
    for run in period.runs:
        lines.append(f"{run.started.isoformat()} {run.status} {run.argv}")
        lines += [
            f"  {j.status} {j.name} {j.started.time() if j.started else '-'} {j.duration_s} "
            f"{j.tokens} {j.cost_usd}"
            for j in run.jobs
        ]
    return lines


def test_the_period_holds_its_runs_and_their_jobs(tmp_path: Path) -> None:
    root = tmp_path / "p"
    build_ledger(root)
    assert outline(period_of(root)) == [
        "2026-11-22T08:00:00+01:00 ok claw run notes",
        "2026-11-22T07:30:00+01:00 failed claw run -k",
        "  failed tickets[inbox/b.txt] 07:30:00 2.5 15 6e-05",
        "  ok tickets[inbox/c.txt] 07:30:00 2.5 500 0.0016",
        "  limit lookup 07:30:00 1.25 150 None",
        "  skipped digest - 0 0 None",
        "2026-11-20T23:00:00+01:00 failed claw run -k",
        "  ok notes 23:00:00 4.0 500 0.0016",
        "  ok tickets[inbox/a.txt] 23:00:04 2.5 500 0.0016",
        "  failed tickets[inbox/b.txt] 23:00:06.500000 2.5 15 6e-05",
        "  limit lookup 23:00:09 1.25 150 None",
        "  skipped digest - 0 0 None",
    ]
    assert outline(period_of(root, days=1))[0] == "2026-11-22T08:00:00+01:00 ok claw run notes"
    assert len(period_of(root, days=1).runs) == 2


def test_tokens_and_known_costs_add_up_per_task_and_day(tmp_path: Path) -> None:
    root = tmp_path / "p"
    build_ledger(root)
    period = period_of(root)
    cells = period.by_task_and_day()
    assert [  # tasks with the most tokens first
        f"{task} {day} {c.jobs} jobs, {c.tokens} tokens ({c.cached_tokens} cached), "
        f"${c.cost_usd:.5f} for {c.priced_jobs}, {c.unpriced_tokens} tokens unpriced"
        for task, days in cells.items()
        for day, c in days.items()
    ] == [
        "tickets 2026-11-20 2 jobs, 515 tokens (100 cached), $0.00166 for 2, 0 tokens unpriced",
        "tickets 2026-11-22 2 jobs, 515 tokens (100 cached), $0.00166 for 2, 0 tokens unpriced",
        "notes 2026-11-20 1 jobs, 500 tokens (100 cached), $0.00160 for 1, 0 tokens unpriced",
        "lookup 2026-11-20 1 jobs, 150 tokens (0 cached), $0.00000 for 0, 150 tokens unpriced",
        "lookup 2026-11-22 1 jobs, 150 tokens (0 cached), $0.00000 for 0, 150 tokens unpriced",
    ]
    whole = total(c for days in cells.values() for c in days.values())
    assert (whole.jobs, whole.tokens, round(whole.cost_usd, 6), whole.unpriced_jobs) == (
        7,
        1830,
        0.00492,
        2,
    )
    nov20, nov22 = dt.date(2026, 11, 20), dt.date(2026, 11, 22)
    assert period.days == [nov20, dt.date(2026, 11, 21), nov22]
    assert period.status_counts() == {"ok": 3, "failed": 2, "limit": 2, "skipped": 2}
    assert [(j.run_id, j.name) for j in period.failures] == [
        (period.runs[1].id, "tickets[inbox/b.txt]"),
        (period.runs[1].id, "lookup"),
        (period.runs[2].id, "tickets[inbox/b.txt]"),
        (period.runs[2].id, "lookup"),
    ]


class HTMLSnapshot(SingleFileSnapshotExtension):
    file_extension = "html"
    _write_mode = WriteMode.TEXT


def normalised(page: str, root: Path) -> str:
    page = page.replace(str(root), "/root")
    page = RUN_ID.sub(r"\1-xxxxxx", page)  # a run id's random part
    page = re.sub(r"\[system prompt: \d+ characters\]", "[system prompt: N characters]", page)
    return re.sub(r"== (\w+) \(\d+(\.\d+)? s\)", r"== \1 (D s)", page)


def test_the_page(tmp_path: Path, snapshot: SnapshotAssertion) -> None:
    root = tmp_path / "p"
    build_ledger(root)
    shown = claw(root, "report", env={"CLAW_NOW": NOW})
    assert (shown.exit_code, shown.stderr) == (0, "")
    path = root / ".claw" / "report.html"
    assert shown.stdout == f"{path}\n"
    page = path.read_text()
    assert (
        "<script" not in page
        and "<link" not in page
        and "src=" not in page.replace("&lt;img src=x", "")
    )
    assert "http" not in page  # nothing fetched: no scripts, fonts, styles or images
    assert "&lt;img src=x onerror=alert(1)&gt; let me look" in page  # model output, escaped
    assert normalised(page, root) == snapshot(extension_class=HTMLSnapshot)


def test_links_to_transcripts_are_relative_to_the_page(tmp_path: Path) -> None:
    root = tmp_path / "p"
    build_ledger(root)
    elsewhere = tmp_path / "reports" / "today.html"
    elsewhere.parent.mkdir()
    shown = claw(root, "report", "-o", str(elsewhere), "--since", "1d", env={"CLAW_NOW": NOW})
    assert shown.stdout == f"{elsewhere}\n"
    links = re.findall(r'href="([^"]+)"', elsewhere.read_text())
    assert [RUN_ID.sub(r"\1-<run-id>", link) for link in links] == [
        "../p/.claw/runs/20261122-073000-<run-id>/tickets%5Binbox_b.txt%5D-b4c98c31.jsonl",
        "../p/.claw/runs/20261122-073000-<run-id>/lookup.jsonl",
    ]
    assert all(
        (elsewhere.parent / link.replace("%5B", "[").replace("%5D", "]")).is_file()
        for link in links
    )


def test_a_period_without_runs_is_a_page_that_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = make_project(tmp_path / "p", CLAWFILE)
    monkeypatch.chdir(tmp_path)
    shown = claw(root, "report", "-o", "r.html", env={"CLAW_NOW": NOW})
    assert (shown.exit_code, shown.stdout) == (0, f"{tmp_path / 'r.html'}\n")
    body = (tmp_path / "r.html").read_text().partition("<body>")[2]
    assert body == (
        "<header><h1>claw report · p</h1>"
        '<p class="sub">2026-11-15 09:00 → 2026-11-22 09:00 (UTC+0100)</p></header>\n'
        '<p class="empty">No runs in this period.</p>\n</body></html>\n'
    )
    assert not (root / ".claw" / "state.db").exists()  # read, never created


def test_a_bad_span_is_a_usage_error(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", CLAWFILE)
    shown = claw(root, "report", "--since", "yesterday")
    assert (shown.exit_code, shown.stderr) == (
        2,
        "claw: --since 'yesterday': use e.g. 12h, 7d, 2w or 2026-11-22\n",
    )
    assert not (root / ".claw" / "report.html").exists()


def test_an_output_whose_folder_is_missing_is_refused(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", CLAWFILE)
    missing = tmp_path / "nowhere" / "r.html"
    shown = claw(root, "report", "-o", str(missing), env={"CLAW_NOW": NOW})
    assert (shown.exit_code, shown.stdout, shown.stderr) == (
        2,
        "",
        f"claw: -o {missing}: there is no folder {missing.parent}; create it first\n",
    )
    assert not missing.parent.exists()


def test_an_output_through_a_file_is_refused(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", CLAWFILE)
    (tmp_path / "notes.txt").write_text("a file\n")
    through = tmp_path / "notes.txt" / "r.html"
    shown = claw(root, "report", "-o", str(through), env={"CLAW_NOW": NOW})
    assert (shown.exit_code, shown.stdout, shown.stderr) == (
        2,
        "",
        f"claw: -o {through}: {tmp_path / 'notes.txt'} is a file, not a folder\n",
    )


def test_the_default_output_makes_its_folder(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", CLAWFILE)
    shown = claw(root, "report", env={"CLAW_NOW": NOW})
    page = root / ".claw" / "report.html"
    assert (shown.exit_code, shown.stdout) == (0, f"{page}\n")
    assert page.is_file()


def job(name: str, start: float, seconds: float, status: str = "ok") -> JobSpan:
    at = dt.datetime.fromisoformat(NOW) + dt.timedelta(seconds=start)
    return JobSpan("r1", name, "", status, None, at, seconds)


def test_jobs_running_at_once_sit_on_lanes_of_their_own() -> None:
    jobs = (job("a", 0, 5), job("b", 1, 2), job("c", 3, 7), job("d", 5, 1), job("e", 10, 0))
    run = RunSpan("r1", dt.datetime.fromisoformat(NOW), None, "ok", "claw run", jobs)
    placed = [
        (j.task, round(left, 3), round(width, 3), lane) for j, left, width, lane in lanes(run)
    ]
    assert placed == [
        ("a", 0.0, 0.5, 0),
        ("b", 0.1, 0.2, 1),
        ("c", 0.3, 0.7, 1),
        ("d", 0.5, 0.1, 0),
        ("e", 0.994, 0.006, 0),  # no time at all is still a visible sliver, inside the row
    ]


def test_figures_read_at_a_glance() -> None:
    assert [figures.usd(x) for x in (0, 0.00042, 0.5, 12.345, 1234.5)] == [
        "$0",
        "$0.0004",
        "$0.5000",
        "$12.35",
        "$1,234.50",
    ]
    assert [figures.duration(s) for s in (0.25, 59.94, 61, 3725)] == [
        "0.2 s",
        "59.9 s",
        "1 min 1 s",
        "1 h 2 min",
    ]
    assert [figures.short(n) for n in (0, 950, 1500, 2_000_000)] == ["0", "950", "1.5k", "2M"]
    assert [figures.nice_step(v) for v in (0, 0.9, 1, 1.1, 295, 0.001325, 9)] == [
        1.0,
        1.0,
        1.0,
        1.5,
        300.0,
        0.0015,
        10.0,
    ]


ALLOWED_TAGS = {
    "html", "head", "meta", "title", "style", "body", "header", "h1", "h2", "p", "section",
    "div", "span", "b", "details", "summary", "pre", "a", "svg", "line", "text", "tspan",
    "rect", "ul", "li", "table", "thead", "tbody", "tr", "th", "td",
}  # fmt: skip


class Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.attributes: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.attributes.update(name for name, _ in attrs)


def test_nothing_from_the_ledger_becomes_markup(tmp_path: Path) -> None:
    """Task names, items, statuses, errors, command lines and transcripts are untrusted."""
    evil = '"><script>alert(1)</script><img src=x onerror=alert(2)>'
    transcript = tmp_path / ".claw" / "runs" / "r1" / "t.jsonl"
    transcript.parent.mkdir(parents=True)
    transcript.write_text(json.dumps({"type": "assistant", "step": 1, "content": evil}) + "\n")
    at = dt.datetime.fromisoformat(NOW)
    bad = JobSpan(
        "r1", evil, evil, "failed", evil, at, 1, 10, 5, 0, 0.5, evil, ".claw/runs/r1/t.jsonl"
    )
    odd = JobSpan("r1", "t", "", evil, None, at, 1)
    outside = JobSpan("r1", "t", "x", "failed", None, at, 1, transcript="../../etc/passwd")
    skipped = JobSpan("r1", evil, "", "skipped", evil, None, 0)
    run = RunSpan("r1", at, at, evil, evil, (bad, odd, outside, skipped))
    period = Period(at - dt.timedelta(days=1), at, (run,))
    page = htmlreport.render(period, root=tmp_path, out=tmp_path / "report.html")
    parsed = Tags()
    parsed.feed(page)
    assert parsed.tags <= ALLOWED_TAGS
    assert parsed.attributes <= {
        "lang", "charset", "name", "content", "class", "style", "title", "href", "viewbox",
        "role", "aria-label", "x", "y", "x1", "x2", "y1", "y2", "width", "height", "fill",
        "text-anchor", "dy",
    }  # fmt: skip
    assert "<script" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "/etc/passwd" not in page  # a transcript path outside .claw/runs is not followed


CHROMIUM = Path("/usr/bin/chromium")
HEADLESS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--hide-scrollbars",
    "--force-color-profile=srgb",
    "--force-device-scale-factor=1",
)
PAINTED = {  # colours the page paints, and what in it paints them
    (0x3A, 0x9A, 0x5B): "ok bars",
    (0xD6, 0x45, 0x45): "failed bars",
    (0xE0, 0x95, 0x2A): "limit bars",
    (0x4E, 0x79, 0xA7): "the first task's chart segments",
    (0xF2, 0x8E, 0x2B): "the second task's chart segments",
}


class Classes(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        classes = dict(attrs).get("class") or ""
        self.found += [f"{tag}.{name}" for name in classes.split()]


@pytest.mark.slow
@pytest.mark.skipif(
    not CHROMIUM.exists() and not os.environ.get("CI"),
    reason="needs Debian's chromium at /usr/bin/chromium (apt-get install chromium; CI does)",
)
def test_the_page_shows_in_chromium(tmp_path: Path) -> None:
    root = tmp_path / "p"
    build_ledger(root)
    assert claw(root, "report", env={"CLAW_NOW": NOW}).exit_code == 0
    url = (root / ".claw" / "report.html").as_uri()
    profile = f"--user-data-dir={tmp_path / 'chromium'}"

    dom = chromium(profile, "--dump-dom", url)
    parsed = Classes()
    parsed.feed(dom)
    seen = Counter(parsed.found)
    assert {
        name: seen[name]
        for name in ("div.bar", "div.s-ok", "div.s-failed", "div.s-limit", "rect.segment")
    } == {"div.bar": 7, "div.s-ok": 3, "div.s-failed": 2, "div.s-limit": 2, "rect.segment": 8}
    assert (seen["details.failure"], seen["pre.transcript"], seen["svg.chart"]) == (4, 4, 2)
    assert dom.count("the model's final answer was empty") >= 2

    png = tmp_path / "page.png"
    chromium(profile, f"--screenshot={png}", "--window-size=1200,1400", url)
    pixels = Counter(png_pixels(png.read_bytes()))
    missing = [what for colour, what in PAINTED.items() if pixels[colour] < 200]
    assert missing == [], f"not painted: {missing}"


def chromium(*args: str) -> str:
    done = subprocess.run(
        [str(CHROMIUM), *HEADLESS, *args], capture_output=True, text=True, timeout=50
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def png_pixels(data: bytes) -> list[tuple[int, int, int]]:
    """The RGB pixels of an 8-bit, non-interlaced RGB or RGBA PNG (what Chromium writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    chunks, at = {}, 8
    while at < len(data):
        (size,) = struct.unpack(">I", data[at : at + 4])
        kind = data[at + 4 : at + 8]
        chunks[kind] = chunks.get(kind, b"") + data[at + 8 : at + 8 + size]
        at += 12 + size
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", chunks[b"IHDR"])
    assert (depth, colour in (2, 6), interlace) == (8, True, 0)
    step = 3 if colour == 2 else 4
    raw = zlib.decompress(chunks[b"IDAT"])
    stride = width * step
    previous = bytearray(stride)
    pixels = []
    for y in range(height):
        line = raw[y * (stride + 1) : (y + 1) * (stride + 1)]
        row = unfilter(line[0], bytearray(line[1:]), previous, step)
        pixels += [tuple(row[x : x + 3]) for x in range(0, stride, step)]
        previous = row
    return pixels  # type: ignore[return-value]


def unfilter(kind: int, row: bytearray, above: bytearray, step: int) -> bytearray:
    for i in range(len(row)):
        left = row[i - step] if i >= step else 0
        up, corner = above[i], above[i - step] if i >= step else 0
        if kind == 1:
            row[i] = (row[i] + left) & 0xFF
        elif kind == 2:
            row[i] = (row[i] + up) & 0xFF
        elif kind == 3:
            row[i] = (row[i] + (left + up) // 2) & 0xFF
        elif kind == 4:
            p = left + up - corner
            guess = min(
                (abs(p - left), 0, left), (abs(p - up), 1, up), (abs(p - corner), 2, corner)
            )
            row[i] = (row[i] + guess[2]) & 0xFF
    return row


def test_a_corrupt_ledger_is_said_not_thrown(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", "version: 1\ntasks:\n  t: {prompt: hi}\n")
    (root / ".claw").mkdir()
    (root / ".claw" / "state.db").write_bytes(b"garbage " * 512)
    result = claw(root, "report")
    assert result.exit_code == 1  # as claw log says it; the next claw run sets it aside
    assert result.stderr == "claw: ledger .claw/state.db: file is not a database\n"


SCHEDULED = """
    version: 1
    model: fake-model
    tasks:
      notes:
        prompt: "Summarise"
        output: notes.md
        tools: []
      nightly:
        prompt: "Nightly"
        output: nightly.md
        schedule: "0 23 * * *"
        tz: Europe/Berlin
        tools: []
"""


def test_the_report_tells_cron_runs_from_runs_by_hand(tmp_path: Path) -> None:
    """Each run says what started it and the command as typed; a filter above the timeline
    shows the runs of one trigger (CSS only: the page has no scripts). Issue 16, point 10."""
    root = make_project(tmp_path / "p", SCHEDULED)
    with FakeOpenAI() as server:
        server.handler = lambda body: text("done")
        env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-x"}
        assert claw(root, "run", "notes", env={**env, "CLAW_NOW": FIRST}).exit_code == 0
        night = "2026-11-21T23:00:00+01:00"
        assert claw(root, "run", "--due", env={**env, "CLAW_NOW": night}).exit_code == 0
    shown = claw(root, "report", env={"CLAW_NOW": NOW})
    assert shown.exit_code == 0, shown.stderr
    page = (root / ".claw" / "report.html").read_text().replace(str(root), "/p")
    rows = re.findall(
        r'<div class="run t-(\w+)"><div class="run-label"><span class="time">([^<]*)</span> '
        r'<span class="chip s-ok">ok</span> <span class="chip by">([^<]*)</span>'
        r'<div class="argv" title="[^"]*">([^<]*)</div>',
        page,
    )
    assert rows == [
        ("cron", "2026-11-21 23:00", "cron", "claw run -C /p --due"),
        ("hand", "2026-11-20 23:00", "by hand", "claw run -C /p notes"),
    ]
    filters = re.findall(r'<label for="by-(\w+)">([^<]*)</label>', page)
    assert filters == [("all", "all 2"), ("hand", "by hand 1"), ("cron", "cron 1")]
    assert '<input type="radio" name="by" id="by-cron">' in page


CHECKED = """
    version: 1
    model: fake-model
    tasks:
      review:
        prompt: "Review: {{ read('app.py') }}"
        check: true
        tools: []
"""


def test_a_remembered_verdict_is_one_entry_not_a_failure_each_time(tmp_path: Path) -> None:
    """A check failed once, then its verdict was given again twice without a model call: one
    failure (with its transcript), and one entry saying the verdict was remembered 2×."""
    root = make_project(tmp_path / "p", CHECKED, {"app.py": "breakpoint()\n"})
    verdict = json.dumps({"ok": False, "summary": "a leftover", "findings": ["drop it"]})
    with FakeOpenAI() as server:
        server.handler = lambda body: text(verdict)
        env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-x"}
        for at in ("08:00", "08:10", "08:20"):
            when = {"CLAW_NOW": f"2026-11-22T{at}:00+01:00"}
            assert claw(root, "run", env={**env, **when}).exit_code == 1
        assert len(server.requests) == 1
    assert claw(root, "report", env={"CLAW_NOW": NOW}).exit_code == 0
    page = (root / ".claw" / "report.html").read_text()
    section = re.search(r"<section><h2>Failures.*?</section>", page, re.DOTALL)
    assert section is not None
    shown = re.sub(
        r'<pre class="transcript">.*?</pre>', "<pre>…</pre>", section[0], flags=re.DOTALL
    )
    first = RUN_ID.search(shown)
    assert first is not None and first[1] == "20261122-080000"
    assert RUN_ID.sub(r"\1-<id>", shown) == (
        "<section><h2>Failures (1, and 1 remembered)</h2>\n"
        '<details class="failure"><summary><span class="chip s-failed">failed</span> '
        '<b>review</b> <span class="dim">2026-11-22 08:00 · run 20261122-080000-<id></span>'
        '<div class="why">a leftover</div></summary><p>Transcript: <a href="runs/'
        '20261122-080000-<id>/review.jsonl">.claw/runs/20261122-080000-<id>/review.jsonl</a>'
        "</p><pre>…</pre></details>\n"
        '<details class="failure"><summary><span class="chip s-failed">failed</span> '
        '<b>review</b> <span class="dim">remembered 2×, verdict of run 20261122-080000-<id>'
        ' · last 2026-11-22 08:20</span><div class="why">a leftover</div></summary>'
        '<p>Transcript: <a href="runs/20261122-080000-<id>/review.jsonl">'
        ".claw/runs/20261122-080000-<id>/review.jsonl</a></p></details>\n"
        "</section>"
    )
    totals = page.partition('<section class="totals">')[2].partition("</section>")[0]
    chips = re.findall(r'<span class="chip [^"]+">(\d+ [a-z]+)</span>', totals)
    assert chips == ["1 failed", "2 remembered"]
    assert "<td>review</td><td>3</td><td>1</td>" in page  # the per-task table's failed column
    tooltips = re.findall(r'title="(review · [^"]*)"', RUN_ID.sub(r"\1-<id>", page))
    remembered = "review · failed, remembered (verdict of run 20261122-080000-<id>) · 0.0 s · "
    assert tooltips[:2] == [remembered + "0 tokens · $0"] * 2  # no model call: nothing spent
    assert tooltips[2].startswith("review · failed (check failed) · ")  # the run that failed
