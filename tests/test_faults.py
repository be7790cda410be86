"""Faults a run survives (issue 7, item 5), each through `claw run` against real servers,
real sockets and real filesystems:

- an endpoint that hangs (never accepts, accepts and never answers, stalls mid-body or
  mid-stream, trickles a byte a second) fails its job at the job's timeout, the run's other
  jobs are unaffected and no thread is left on the hung connection;
- a 429 storm or a 5xx burst across -j 8 is waited out together (one breaker per endpoint):
  the requests it costs are bounded, the jobs resume after it, and the deadline still wins;
- a refused key (401) or account (insufficient_quota) fails fast, every other job at once
  with the same message, and the key appears in no output;
- a full disk while writing an output, a transcript, the daily note or the ledger;
- a corrupt `.claw/state.db` is moved aside and every job runs again.
"""

from __future__ import annotations

import contextlib
import email.utils
import json
import os
import select
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai  # noqa: F401  # see PRELOADED
import pytest
from fake_openai import FakeOpenAI, Reply, error, text
from helpers import HANG, claw, make_project

NOW = "2026-11-22T23:05:00+01:00"
TIMEOUT = 2  # the hung job's timeout, seconds
# What a slow, busy machine may add to it: a `claw run` process took TIMEOUT + 11.6 s on a
# 2-core machine under load. The endpoints below hang until the test ends and the storm lasts
# an hour, so a run held up by them never ends at all: the margin can be as wide as a hang.
MARGIN = HANG
# claw imports openai at its first model call, inside the jobs' time: on a busy machine that
# alone can outlast the stuck job's TIMEOUT, which then fails before it ever connects. These
# tests import it first (a `claw run` process too, through PRELOADED).
PRELOADED = "import openai, sys; from claw_batch.cli import main; sys.argv[0] = 'claw'; main()"
KEY = "sk-faults-PLANTED-0123456789abcdefXYZ"  # distinctive: found by a byte search anywhere


# --- a hung endpoint ------------------------------------------------------------------------


class Stubborn:
    """An endpoint that misbehaves the same way on every connection:

    unaccepted  the port listens but never accepts (the kernel completes the handshake)
    silent      accepts, reads the request, never answers
    mid-body    answers the headers and half a JSON body, then nothing
    mid-stream  answers an event stream's headers and its first chunk, then nothing
    trickle     answers the headers, then the body a byte a second

    `hangups` counts the connections whose client hung up: what a thread left reading a
    hung socket never does."""

    BODY = json.dumps({"id": "x", "choices": [{"message": {"content": "late"}}]}).encode()

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.server = socket.create_server(("127.0.0.1", 0), backlog=64)
        self.connections = 0
        self.hangups = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.getsockname()[1]}/v1"

    def __enter__(self) -> Stubborn:
        if self.mode != "unaccepted":
            self._spawn(self._accept)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=5)
        self.server.close()

    def wait_for_hangups(self, n: int, within: float = MARGIN) -> int:
        if self.mode == "unaccepted":  # never accepted: take them now, and read to the end
            self.server.settimeout(0.1)
            with contextlib.suppress(OSError):
                while True:
                    conn, _ = self.server.accept()
                    self._count_connection()
                    self._spawn(self._serve, conn)
        give_up = time.monotonic() + within
        while self.hangups < n and time.monotonic() < give_up:
            time.sleep(0.05)
        return self.hangups

    def _spawn(self, target: Any, *args: Any) -> None:
        t = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(t)
        t.start()

    def _count_connection(self) -> None:
        with self._lock:
            self.connections += 1

    def _accept(self) -> None:
        self.server.settimeout(0.1)
        while not self._stop.is_set():
            try:
                conn, _ = self.server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self._count_connection()
            self._spawn(self._serve, conn)

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            conn.setblocking(False)
            pending = self._reply() if self.mode != "unaccepted" else b""
            burst = self.mode != "trickle"
            while not self._stop.is_set():
                readable, _, _ = select.select([conn], [], [], 1.0 if not burst else 0.1)
                try:
                    if readable and not conn.recv(65536):
                        with self._lock:
                            self.hangups += 1
                        return
                    if pending:
                        size = len(pending) if burst else 1
                        sent = conn.send(pending[:size])
                        pending = pending[sent:]
                except OSError:  # reset by the client: a hang-up too
                    with self._lock:
                        self.hangups += 1
                    return

    def _reply(self) -> bytes:
        if self.mode == "silent":
            return b""
        if self.mode == "mid-stream":
            chunk = {"choices": [{"index": 0, "delta": {"content": "hel"}}]}
            head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"
            return head + b"data: " + json.dumps(chunk).encode() + b"\n\n"
        head = (
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(self.BODY)}\r\n\r\n"
        ).encode()
        if self.mode == "mid-body":
            return head + self.BODY[: len(self.BODY) // 2]
        return head + self.BODY  # trickle: sent a byte a second


def hung_project(root: Path, stuck_url: str, *, stream: bool = False) -> Path:
    """Task `stuck` calls the hung endpoint (timeout 2 s); `a` and `b` call the working one."""
    return make_project(
        root,
        f"""
        version: 1
        model: fake-model
        providers:
          stuck: {{base_url: "{stuck_url}", stream: {str(stream).lower()}}}
        tasks:
          stuck: {{prompt: "Hang", model: stuck/fake-model, timeout: {TIMEOUT}, output: stuck.md}}
          a: {{prompt: "Say a", output: a.md}}
          b: {{prompt: "Say b", output: b.md}}
        """,
    )


@pytest.fixture
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Through a proxy, calls run on threads a job gives up on, which keep reading a hung
    connection until the provider's request timeout (see openai_compat): not what is tested."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


def busy_threads(before: set[threading.Thread]) -> list[str]:
    """Threads started since `before` that are still inside a model call."""
    frames = sys._current_frames()
    busy = []
    for thread in threading.enumerate():
        frame = frames.get(thread.ident or 0)
        if thread in before or frame is None:
            continue
        files = []
        while frame is not None:
            files.append(frame.f_code.co_filename)
            frame = frame.f_back
        ours = any(part in f for f in files for part in ("httpcore2", "openai", "claw_batch"))
        idle = any(f.endswith("callthreads.py") for f in files[:3])  # waiting for work
        if ours and not idle:
            busy.append(f"{thread.name}: {files[0]}")
    return busy


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mode", "stream"),
    [
        ("unaccepted", False),
        ("silent", False),
        ("mid-body", False),
        ("mid-stream", True),
        ("trickle", False),
    ],
)
@pytest.mark.usefixtures("no_proxy")
def test_a_hung_endpoint_fails_its_job_at_its_timeout(
    tmp_path: Path, mode: str, stream: bool
) -> None:
    with Stubborn(mode) as stuck, FakeOpenAI() as srv:
        srv.handler = lambda body: text(f"done: {body['messages'][1]['content']}")
        root = hung_project(tmp_path / "p", stuck.base_url, stream=stream)
        before = set(threading.enumerate())
        started = time.monotonic()
        r = claw(root, "run", "-j", "3", "--json", env={"OPENAI_BASE_URL": srv.base_url})
        took = time.monotonic() - started
        jobs = {j["task"]: j for j in json.loads(r.stdout)["jobs"]}
        assert r.exit_code == 3, r.stderr
        assert (jobs["stuck"]["status"], jobs["stuck"]["error"]) == (
            "limit",
            "timeout: the model call did not finish before the job's deadline",
        )
        assert [jobs[t]["status"] for t in "ab"] == ["ok", "ok"]
        assert (root / "a.md").read_text() == "done: Say a\n"
        assert not (root / "stuck.md").exists()
        assert TIMEOUT <= took < TIMEOUT + MARGIN
        assert busy_threads(before) == []
        # Its connection was closed, not left to a thread that still waits on it.
        assert stuck.wait_for_hangups(1) == stuck.connections >= 1


@pytest.mark.slow
@pytest.mark.usefixtures("no_proxy")
def test_a_hung_endpoint_does_not_keep_the_process_alive(tmp_path: Path) -> None:
    with Stubborn("silent") as stuck, FakeOpenAI() as srv:
        srv.handler = lambda body: text("done")
        root = hung_project(tmp_path / "p", stuck.base_url)
        started = time.monotonic()
        env = {"OPENAI_BASE_URL": srv.base_url}
        r = subprocess.run(
            [sys.executable, "-c", PRELOADED, "run", "-j", "3", "--json"],
            cwd=root,
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=TIMEOUT + MARGIN + 5,
        )
        assert time.monotonic() - started < TIMEOUT + MARGIN
        assert r.returncode == 3, r.stderr
        jobs = {j["task"]: (j["status"], j["error"]) for j in json.loads(r.stdout)["jobs"]}
        assert jobs == {
            "stuck": ("limit", "timeout: the model call did not finish before the job's deadline"),
            "a": ("ok", None),
            "b": ("ok", None),
        }
        assert stuck.wait_for_hangups(1) == stuck.connections == 1


# --- a 429 storm, a 5xx burst ---------------------------------------------------------------

JOBS = 8
STORM = 3.0  # seconds the endpoint refuses every request


def fanout(root: Path, n: int = JOBS, timeout: float = 120) -> Path:
    return make_project(
        root,
        f"""
        version: 1
        model: fake-model
        tasks:
          t:
            foreach: "inbox/*.txt"
            prompt: "Handle {{{{ item.path }}}}"
            output: "out/{{{{ item.stem }}}}.md"
            timeout: {timeout}
        """,
        {f"inbox/{i:02}.txt": f"item {i}\n" for i in range(n)},
    )


class Storm:
    """Answers `refusal()` to every request for `seconds` after the first one, then works;
    counts the requests that came during the storm."""

    def __init__(self, seconds: float, refusal: Any) -> None:
        self.seconds = seconds
        self.refusal = refusal
        self.started: float | None = None
        self.during = 0
        self.after = 0
        self.lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Reply:
        with self.lock:
            now = time.monotonic()
            self.started = self.started or now
            if now - self.started < self.seconds:
                self.during += 1
                return self.refusal()  # type: ignore[no-any-return]
            self.after += 1
        return text(f"done: {body['messages'][1]['content']}")


def limited(**headers: str) -> Reply:
    body = {"error": {"message": "Rate limit reached", "type": "requests", "code": None}}
    return Reply(status=429, body=body, headers=headers)


def run_storm(root: Path, storm: Storm) -> tuple[int, dict[str, Any]]:
    with FakeOpenAI() as srv:
        srv.handler = storm
        env = {"OPENAI_BASE_URL": srv.base_url, "OPENAI_API_KEY": KEY, "CLAW_NOW": NOW}
        r = claw(root, "run", "-j", str(JOBS), "--json", env=env)
    return r.exit_code, json.loads(r.stdout)


def retry_after_seconds() -> Reply:
    return limited(**{"Retry-After": "1"})


def retry_after_date() -> Reply:  # whole seconds: 2 s from now is a wait of 1 to 2 s
    return limited(**{"Retry-After": email.utils.formatdate(time.time() + 2, usegmt=True)})


def retry_after_ms() -> Reply:
    return limited(**{"retry-after-ms": "500"})


def overloaded() -> Reply:  # no Retry-After: the breaker's backoff, 0.5 to 1 s, then more
    return error(503, "The engine is currently overloaded")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("refusal", "wait"),
    [(retry_after_seconds, 1.0), (retry_after_date, 1.0), (retry_after_ms, 0.5), (overloaded, 0.5)],
)
def test_a_storm_across_parallel_jobs_is_waited_out_together(
    tmp_path: Path, refusal: Any, wait: float
) -> None:
    storm = Storm(STORM, refusal)
    code, summary = run_storm(fanout(tmp_path / "p"), storm)
    assert code == 0, summary
    assert [j["status"] for j in summary["jobs"]] == ["ok"] * JOBS
    # Those in flight when it began, then one probe per wait: not every job retrying alone.
    assert storm.during <= JOBS + STORM / wait + 2
    assert storm.after == JOBS


@pytest.mark.slow
def test_the_deadline_wins_over_a_storm(tmp_path: Path) -> None:
    storm = Storm(3600, retry_after_seconds)
    started = time.monotonic()
    code, summary = run_storm(fanout(tmp_path / "p", timeout=TIMEOUT), storm)
    assert code == 3
    # A job gives up at once when the wait the endpoint asks for would pass its deadline.
    assert time.monotonic() - started < TIMEOUT + MARGIN
    assert [j["status"] for j in summary["jobs"]] == ["limit"] * JOBS
    assert all(j["error"].startswith("timeout: ") for j in summary["jobs"]), summary
    assert storm.during <= JOBS + TIMEOUT / 1.0 + 2  # one probe a second at most


# --- a refused key or account ---------------------------------------------------------------

REFUSALS = {
    "401": (
        error(401, f"Incorrect API key provided: {KEY}.", code="invalid_api_key"),
        "HTTP 401: Incorrect API key provided: [REDACTED].; check the API key in "
        "$OPENAI_API_KEY / the provider's api_key_env",
    ),
    "insufficient_quota": (
        error(429, f"You exceeded your current quota (key {KEY}).", code="insufficient_quota"),
        "HTTP 429: You exceeded your current quota (key [REDACTED]).; the account is out of "
        "quota; check billing with the provider or use another provider",
    ),
}


@pytest.mark.parametrize("kind", REFUSALS)
def test_a_refused_key_fails_every_job_at_once_and_is_never_shown(
    tmp_path: Path, kind: str
) -> None:
    refusal, detail = REFUSALS[kind]
    root = fanout(tmp_path / "p", n=12)
    with FakeOpenAI() as srv:
        srv.handler = lambda body: refusal
        env = {"OPENAI_BASE_URL": srv.base_url, "OPENAI_API_KEY": KEY, "CLAW_NOW": NOW}
        r = claw(root, "run", "-j", "4", "-k", "--json", env=env)
        requests = len(srv.requests)
        message = f"model 'fake-model' at {srv.base_url}: {detail}"
    assert r.exit_code == 1
    jobs = json.loads(r.stdout)["jobs"]
    assert [(j["status"], j["error"]) for j in jobs] == [("failed", message)] * 12
    assert requests <= 4  # those in flight when the first refusal came back; none after it
    assert_key_nowhere(root, r.stdout, r.stderr)


def assert_key_nowhere(root: Path, *texts: str) -> None:
    for t in texts:
        assert KEY not in t
    for path in root.rglob("*"):  # outputs, transcripts, summary.json, the daily note, state.db
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path


# --- a full disk ----------------------------------------------------------------------------


class SmallDisk:
    """A tmpfs of `size` bytes mounted on `where` (root may mount; CI runs as root), that
    `fill` fills to the last page and `free` empties again."""

    def __init__(self, where: Path, size: int) -> None:
        self.where = where
        where.mkdir(parents=True, exist_ok=True)
        saved = [(p.relative_to(where), p.read_bytes()) for p in where.rglob("*") if p.is_file()]
        mount = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size},mode=755", "tmpfs", str(where)],
            capture_output=True,
            text=True,
        )
        if mount.returncode != 0:
            reason = f"cannot mount a tmpfs for a real full disk: {mount.stderr.strip()}"
            if os.environ.get("CI"):  # a guarantee CI cannot test is a failure, not a skip
                pytest.fail(reason)
            pytest.skip(reason)
        for rel, data in saved:  # what was there, now on the small disk
            (where / rel).parent.mkdir(parents=True, exist_ok=True)
            (where / rel).write_bytes(data)

    def fill(self) -> None:
        fd = os.open(self.where / ".filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * 4096)
        finally:
            os.close(fd)

    def free(self) -> None:
        (self.where / ".filler").unlink(missing_ok=True)

    def unmount(self) -> None:
        subprocess.run(["umount", "-l", str(self.where)], check=False)


@pytest.fixture
def small_disk() -> Iterator[Any]:
    disks: list[SmallDisk] = []

    def mount(where: Path, size: int = 64 * 1024) -> SmallDisk:
        disks.append(SmallDisk(where, size))
        return disks[-1]

    yield mount
    for disk in reversed(disks):
        disk.unmount()


DISK_CLAWFILE = """
    version: 1
    model: fake-model
    tasks:
      t: {prompt: "Write it", output: out/a.md}
"""
NOTE = "workspace/memory/2026-11-22.md"


def disk_run(root: Path, *args: str, reply: Any = None) -> tuple[Any, int]:
    """`claw run --json` against a fake model; (the result, the requests it made)."""
    with FakeOpenAI() as srv:
        srv.handler = reply or (lambda body: text("new answer"))
        env = {"OPENAI_BASE_URL": srv.base_url, "CLAW_NOW": NOW}
        r = claw(root, "run", "--json", *args, env=env)
        return r, len(srv.requests)


def done_rows(root: Path) -> list[tuple[str, str]]:
    with contextlib.closing(sqlite3.connect(root / ".claw/state.db")) as db:
        return db.execute("SELECT task, item FROM done").fetchall()


def assert_clean_failure(r: Any) -> dict[str, Any]:
    """Exit 1, the error said once, no traceback."""
    assert "unexpected error" not in r.stderr and "Traceback" not in r.stderr, r.stderr
    summary: dict[str, Any] = json.loads(r.stdout)
    assert summary["exit_code"] == r.exit_code == 1
    return summary


def test_disk_full_writing_an_output(tmp_path: Path, small_disk: Any) -> None:
    root = make_project(tmp_path / "p", DISK_CLAWFILE, {"out/a.md": "old answer\n"})
    disk = small_disk(root / "out")
    disk.fill()
    r, _ = disk_run(root)
    summary = assert_clean_failure(r)
    [job] = summary["jobs"]
    assert (job["status"], job["error"]) == ("failed", "output out/a.md: No space left on device")
    assert (root / "out/a.md").read_text() == "old answer\n"
    assert sorted(p.name for p in (root / "out").iterdir()) == [".filler", "a.md"]  # no temp
    assert done_rows(root) == []
    disk.free()
    r, requests = disk_run(root)
    assert (r.exit_code, requests) == (0, 1)  # the next run redoes it
    assert (root / "out/a.md").read_text() == "new answer\n"
    assert done_rows(root) == [("t", "")]


def test_disk_full_writing_a_transcript(tmp_path: Path, small_disk: Any) -> None:
    root = make_project(tmp_path / "p", DISK_CLAWFILE, {"out/a.md": "old answer\n"})
    disk = small_disk(root / ".claw/runs")
    disk.fill()
    r, requests = disk_run(root)
    summary = assert_clean_failure(r)
    [job] = summary["jobs"]
    transcript = root / job["transcript"]
    assert (job["status"], job["error"]) == (
        "failed",
        f"transcript {transcript}: No space left on device",
    )
    assert requests == 0  # it failed before the model was called
    assert transcript.read_bytes() == b""  # no torn line
    assert (root / "out/a.md").read_text() == "old answer\n"
    assert done_rows(root) == []
    disk.free()
    r, requests = disk_run(root)
    assert (r.exit_code, requests) == (0, 1)
    assert done_rows(root) == [("t", "")]


def test_disk_full_while_a_job_runs_leaves_it_not_done(tmp_path: Path, small_disk: Any) -> None:
    """The disk fills while the model answers: the transcript's last lines cannot be written
    after the output was. The output is whole; the job is not done."""
    root = make_project(tmp_path / "p", DISK_CLAWFILE, {"out/a.md": "old answer\n"})
    disk = small_disk(root / ".claw/runs")

    answer = "new answer\n" * 1000  # more than a page: its transcript line needs a new one

    def fill_then_answer(body: dict[str, Any]) -> Reply:
        disk.fill()
        return text(answer)

    r, requests = disk_run(root, reply=fill_then_answer)
    summary = assert_clean_failure(r)
    [job] = summary["jobs"]
    transcript = root / job["transcript"]
    assert (job["status"], job["error"]) == (
        "failed",
        f"transcript {transcript}: No space left on device",
    )
    assert (root / "out/a.md").read_text() == answer
    # The last lines did not fit; those before them are whole.
    lines = transcript.read_text().splitlines()
    assert [json.loads(line)["type"] for line in lines] == ["start", "system", "user"]
    assert done_rows(root) == []
    disk.free()
    r, requests = disk_run(root)
    assert (r.exit_code, requests) == (0, 1)


def test_disk_full_writing_the_daily_note(tmp_path: Path, small_disk: Any) -> None:
    old_note = "# 2026-11-22\n\n### 09:00 t · ok · 1.0 s · 15 tokens\n> the morning's answer\n\n"
    # Its page has room for the first few bytes of an entry, not for all of it.
    old_note += "x" * (4096 - len(old_note.encode()) - 12) + "\n\n"
    root = make_project(tmp_path / "p", DISK_CLAWFILE, {NOTE: old_note})
    disk = small_disk(root / "workspace/memory")
    disk.fill()
    r, _ = disk_run(root)
    summary = assert_clean_failure(r)
    assert summary["error"] == f"daily note {NOTE}: No space left on device"
    assert (root / NOTE).read_text() == old_note  # no half entry
    # The job's output and record are whole: it is done, and the note is what failed.
    assert [j["status"] for j in summary["jobs"]] == ["ok"]
    assert (root / "out/a.md").read_text() == "new answer\n"


def test_disk_full_writing_the_ledger(tmp_path: Path, small_disk: Any) -> None:
    root = make_project(tmp_path / "p", DISK_CLAWFILE)
    claw_dir = small_disk(root / ".claw", size=1024 * 1024)
    small_disk(
        root / ".claw/runs", size=1024 * 1024
    )  # transcripts elsewhere: only the ledger fills
    r, _ = disk_run(root)
    assert r.exit_code == 0, r.stderr
    assert done_rows(root) == [("t", "")]

    def fill_then_answer(body: dict[str, Any]) -> Reply:
        claw_dir.fill()
        return text("new answer")

    # --no-cache: the call cache, on the same disk, would give back the space its files
    # took when it turns itself off for the full disk, and the ledger would then fit.
    r, _ = disk_run(root, "-B", "--no-cache", reply=fill_then_answer)
    summary = assert_clean_failure(r)
    assert summary["error"] == "ledger .claw/state.db: No space left on device"
    assert (root / "out/a.md").read_text() == "new answer\n"  # written before the ledger failed
    claw_dir.free()
    assert done_rows(root) == []  # forgotten when it started: the next run redoes it
    r, requests = disk_run(root)
    assert (r.exit_code, requests) == (0, 1)
    assert done_rows(root) == [("t", "")]


def test_disk_full_before_the_run(tmp_path: Path, small_disk: Any) -> None:
    root = make_project(tmp_path / "p", DISK_CLAWFILE, {"out/a.md": "old answer\n"})
    claw_dir = small_disk(root / ".claw", size=1024 * 1024)
    r, _ = disk_run(root)
    assert r.exit_code == 0, r.stderr
    claw_dir.fill()
    r, requests = disk_run(root, "-B")
    summary = assert_clean_failure(r)
    assert summary["error"] == "ledger .claw/state.db: disk I/O error (No space left on device)"
    assert (requests, summary["jobs"]) == (0, [])  # nothing ran
    assert (root / "out/a.md").read_text() == "new answer\n"
    claw_dir.free()
    assert done_rows(root) == [("t", "")]  # as it was


# --- a corrupt ledger -----------------------------------------------------------------------

CORRUPT_CLAWFILE = """
    version: 1
    model: fake-model
    tasks:
      t:
        foreach: "inbox/*.txt"
        prompt: "Handle {{ item.path }}"
        output: "out/{{ item.stem }}.md"
"""


def garbage(db: Path) -> None:
    db.write_bytes(b"this is not a database, just bytes \x00\xff" * 300)


def truncated(db: Path) -> None:
    data = db.read_bytes()
    db.write_bytes(data[: len(data) // 2])


def last_page_lost(db: Path) -> None:
    data = db.read_bytes()
    db.write_bytes(data[:-4096])


def page_damaged(db: Path, table: str = "done") -> dict[str, int]:
    """Bytes of a table's first page overwritten (bit rot, a bad copy)."""
    with contextlib.closing(sqlite3.connect(db)) as ledger:
        size = ledger.execute("PRAGMA page_size").fetchone()[0]
        sql = "SELECT rootpage FROM sqlite_master WHERE name = ?"
        [root] = ledger.execute(sql, (table,)).fetchone()
    with open(db, "r+b") as f:
        f.seek((root - 1) * size)
        f.write(b"\xa5" * size)
    return {"page": root}


def page_damaged_mtime_kept(db: Path) -> None:
    """The same, its mtime put back (as `cp -p`, rsync or `touch -r` leave a file): a run
    that skips the page check of a ledger unchanged since its last clean close (ledgerfile)
    must not take it for unchanged."""
    before = db.stat()
    page_damaged(db)
    os.utime(db, ns=(before.st_atime_ns, before.st_mtime_ns))


def wrong_schema(db: Path) -> None:
    db.unlink()
    with contextlib.closing(sqlite3.connect(db)) as other:
        other.execute("CREATE TABLE jobs (id INTEGER PRIMARY KEY, payload BLOB)")
        other.commit()


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        (garbage, "file is not a database"),
        (truncated, "database disk image is malformed"),
        (last_page_lost, "database disk image is malformed"),
        (page_damaged, "database disk image is malformed"),
        (page_damaged_mtime_kept, "database disk image is malformed"),
        (
            wrong_schema,
            "its table jobs has no column duration_s, item, output, reason, run_id, "
            "started, status, task",
        ),
    ],
    ids=["garbage", "truncated", "last-page-lost", "page-damaged", "mtime-kept", "wrong-schema"],
)
def test_a_corrupt_ledger_is_moved_aside_and_every_job_runs_again(
    tmp_path: Path, damage: Any, why: str
) -> None:
    files = {f"inbox/{i:02}.txt": f"item {i}\n" * 200 for i in range(30)}  # a ledger of pages
    root = make_project(tmp_path / "p", CORRUPT_CLAWFILE, files)
    r, requests = disk_run(root)
    assert (r.exit_code, requests) == (0, 30)
    db = root / ".claw/state.db"
    damage(db)
    damaged = db.read_bytes()
    r, requests = disk_run(root)
    assert r.exit_code == 0, r.stderr
    [aside] = (root / ".claw").glob("state.db.corrupt-*")
    assert r.stderr.startswith(
        f"claw: ledger .claw/state.db was corrupt ({why}): moved it to .claw/{aside.name} and "
        "started a new one; every job runs again\n"
    )
    assert aside.read_bytes() == damaged
    assert requests == 30
    assert len(done_rows(root)) == 30
    r, requests = disk_run(root)
    assert (r.exit_code, requests) == (0, 0)  # and the new ledger holds


def test_damage_found_during_a_run_is_moved_aside_by_the_next(tmp_path: Path) -> None:
    """A run checks the pages of the tables it reads whole, not of the whole history: damage
    in the history is found when a run writes there; the next run checks every page."""
    files = {f"inbox/{i:02}.txt": f"item {i}\n" * 200 for i in range(30)}
    root = make_project(tmp_path / "p", CORRUPT_CLAWFILE, files)
    assert disk_run(root)[0].exit_code == 0
    (root / "inbox/00.txt").write_text("changed\n")  # one job to run: its row goes in `jobs`
    page = page_damaged(root / ".claw/state.db", "jobs")["page"]
    r, requests = disk_run(root)
    assert_clean_failure(r)
    assert json.loads(r.stdout)["error"] == (
        "ledger .claw/state.db is corrupt (database disk image is malformed); the next "
        "`claw run` moves it aside and runs every job again"
    )
    assert requests == 0
    r, requests = disk_run(root)
    assert r.exit_code == 0, r.stderr
    [aside] = (root / ".claw").glob("state.db.corrupt-*")
    assert r.stderr.startswith(
        f"claw: ledger .claw/state.db was corrupt (quick check: Page {page}: btreeInitPage() "
        f"returns error code 11): moved it to .claw/{aside.name} and started a new one; every "
        "job runs again\n"
    )
    assert requests == 30
    assert not (root / ".claw/state.db.suspect").exists()


def test_garbage_beside_the_ledger_is_not_corruption(tmp_path: Path) -> None:
    """A WAL or shared-memory file that is not one (a crash, a bad copy): SQLite ignores
    the one and rebuilds the other; the ledger is kept."""
    files = {f"inbox/{i:02}.txt": f"item {i}\n" for i in range(3)}
    root = make_project(tmp_path / "p", CORRUPT_CLAWFILE, files)
    assert disk_run(root)[0].exit_code == 0
    for suffix in ("-wal", "-shm"):
        (root / f".claw/state.db{suffix}").write_bytes(b"\xde\xad\xbe\xef" * 8192)
    r, requests = disk_run(root)
    assert (r.exit_code, requests) == (0, 0), r.stderr  # all up to date
    assert list((root / ".claw").glob("state.db.corrupt-*")) == []


def test_a_dry_run_over_a_corrupt_ledger_moves_nothing(tmp_path: Path) -> None:
    files = {f"inbox/{i:02}.txt": f"item {i}\n" for i in range(3)}
    root = make_project(tmp_path / "p", CORRUPT_CLAWFILE, files)
    assert disk_run(root)[0].exit_code == 0
    garbage(root / ".claw/state.db")
    before = {p.name: p.read_bytes() for p in (root / ".claw").iterdir() if p.is_file()}
    r = claw(root, "run", "-n", "--json")
    assert r.exit_code == 0
    assert r.stderr.startswith(
        "claw: ledger .claw/state.db is corrupt (file is not a database); the next `claw run` "
        "moves it aside and runs every job again\n"
    )
    assert [j["status"] for j in json.loads(r.stdout)["jobs"]] == ["would-run"] * 3
    after = {p.name: p.read_bytes() for p in (root / ".claw").iterdir() if p.is_file()}
    assert after == before


def test_claw_log_over_a_corrupt_ledger_says_so(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", DISK_CLAWFILE)
    assert disk_run(root)[0].exit_code == 0
    garbage(root / ".claw/state.db")
    r = claw(root, "log")
    assert (r.exit_code, r.stderr) == (1, "claw: ledger .claw/state.db: file is not a database\n")


def test_a_ledger_write_that_meets_a_full_disk_midway(tmp_path: Path, small_disk: Any) -> None:
    """Big enough to spill out of SQLite's cache before COMMIT: the full disk is met by a
    statement inside the transaction, and is said the same way; nothing of it is kept."""
    from claw_batch.errors import ClawError
    from claw_batch.store import filehash
    from claw_batch.store.state import State

    disk = small_disk(tmp_path / ".claw", size=1024 * 1024)
    state = State(tmp_path / ".claw/state.db")
    disk.fill()
    entries = {f"inbox/{n:06}.txt": (n, n, n, n, "f" * 64) for n in range(100_000)}
    with pytest.raises(ClawError) as e:
        filehash.save_entries(state, entries)
    assert str(e.value) == "ledger .claw/state.db: No space left on device"
    disk.free()
    assert filehash.entries(state) == {}
    state.close()
