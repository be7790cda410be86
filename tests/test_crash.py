"""Crash safety (SPEC §4): a real `claw run` process killed at many different moments.

Each trial runs `python -m claw_batch run` (-j 1 or -j 3) against its own fake server on its
own project: a fan-out of 12 items (each job one tool call, then a final answer) and a digest
that reads their outputs through an implicit edge; fresh, or complete and run again with -B.
The process gets its signal at one moment: when the N-th model request arrives (in flight) or
a few milliseconds after it (a tool, an answer on its way, the next job's start), when an
output's temp file is created (a write cut short), or when an output is renamed into place
(before its success is recorded; seen through inotify). After a SIGKILL:

1. no torn output: an output that exists has a full text. A kill during a write leaves
   atomic.py's temp file (`.NAME.claw-PID-XXXXXXXX.tmp`) next to the output, which the
   digest's `out/*.md` does not match, so it is never taken for an output; the next run
   removes it;
2. no job is marked done without its outputs: every `done` row's outputs exist with the
   recorded sha256; a job the killed run started is done only if that run recorded it ok;
3. the next run redoes exactly the jobs that were not done (after -B, plus the digest when
   its old row outlived a ticket that changed) and pays one model request per step of those
   only, less the steps the killed run paid for, which the call cache replays; then every
   output is complete, no temp file is left, and a third run is all up to date with no
   request;
4. the lock died with the killed process: the next run starts at once.

SIGINT: exit 130, finished jobs kept, running ones recorded as interrupted, lock released,
and the same rerun. Moments come from a seeded RNG; no assertion depends on timing. Processes
run two at a time (their Python start-up is most of the cost). `pytest -s` prints what each
moment hit.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import os
import random
import re
import select
import signal
import sqlite3
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAI, Reply, call, error, text, tool_calls
from helpers import claw, make_project

from claw_batch.plan.jobs import glob_files
from claw_batch.run.lock import ProjectLock, lock_path

pytestmark = pytest.mark.skipif(
    not (sys.platform.startswith("linux") and hasattr(os, "pidfd_open")),
    reason="uses Linux pidfds and inotify",
)

NOW = "2026-11-22T23:05:00+01:00"  # the date is in the system prompt: pin it
SEED = 20261122
ITEMS = tuple(f"inbox/{i:02d}.txt" for i in range(12))
CLAWFILE = """
    version: 1
    model: fake-model
    tasks:
      tickets:
        foreach: "inbox/*.txt"
        prompt: "Ticket for {{ item.path }}"
        output: "out/{{ item.stem }}.md"
        tools: [read]
      digest:
        prompt: "Digest the tickets"
        inputs: ["out/*.md"]
        output: digest.md
        tools: [read]
"""
Job = tuple[str, str]  # (task, item); item "" for a task without fan-out
DIGEST: Job = ("digest", "")
ALL_JOBS: frozenset[Job] = frozenset({*(("tickets", i) for i in ITEMS), DIGEST})
OUTPUT = {
    **{("tickets", i): f"out/{Path(i).stem}.md" for i in ITEMS},
    DIGEST: "digest.md",
}
STEPS = 2  # model requests per job: a tool call, then the final answer
REQUESTS = STEPS * len(ALL_JOBS)  # of a run from scratch
TEMP = re.compile(r"\.(?P<name>.+)\.claw-[0-9]+-[0-9a-f]{8}\.tmp")  # what atomic.py writes first


def full_text(job: Job, generation: int = 2) -> str:
    """What the fake model answers for a job, and so what its output must hold, whole.
    Generation 1 answers the complete run that a `-B` trial starts from; 2 everything else."""
    what = job[1] or "the digest"
    return f"answer {generation} for {what}\n" * 50


def job_of(body: dict[str, Any]) -> Job:
    prompt = body["messages"][1]["content"]
    if prompt == "Digest the tickets":
        return DIGEST
    item = prompt.removeprefix("Ticket for ")
    assert item in ITEMS, prompt
    return ("tickets", item)


@dataclass(frozen=True)
class Moment:
    """Signal the run when the `n`-th event of a kind happens, at once or `delay` s later.

    Kinds: "request", a model request reaches the server (at once: before it is answered);
    "temp", atomic.py creates the temp file of an output; "output", an output is renamed
    into place (seen through inotify, so the signal lands a little later)."""

    signum: int
    jobs: int  # -j
    on: str
    n: int
    delay: float | None = None
    force: bool = False  # the run is `-B` over a complete project (generation 1 outputs)

    @property
    def in_flight(self) -> bool:
        """The signal comes while request `n` waits for its answer."""
        return self.on == "request" and self.delay is None

    def __str__(self) -> str:
        what = {"request": "model request", "temp": "output temp file", "output": "output"}
        when = f"{what[self.on]} {self.n}"
        if self.delay is not None:
            when = f"{self.delay * 1000:.1f} ms after {when}"
        force = " -B" if self.force else ""
        return f"{signal.Signals(self.signum).name} -j {self.jobs}{force} at {when}"


IN_FLIGHT = (1, 12, REQUESTS - 1, REQUESTS)  # the last two are the digest's


def kill_moments() -> list[Moment]:
    """14 SIGKILLs, at -j 1 and -j 3: while a spread of model requests is in flight; at
    random small delays after a random request (a tool, the final answer on its way, an
    output write, the success record, the next job's start); as an output's temp file
    appears (a write cut short) and as an output is renamed into place (the window before
    its success is recorded); late (the last answer, the run's own bookkeeping, perhaps
    after the process exited); and three `-B` runs over a complete project, where a job
    killed after it started must lose its old `done` row (last: they need a first run)."""
    rng = random.Random(SEED)
    kill = signal.SIGKILL
    moments = [Moment(kill, (1, 3)[i % 2], "request", n) for i, n in enumerate(IN_FLIGHT)]
    for i in range(2):
        n, delay = rng.randint(1, REQUESTS), rng.uniform(0.0, 0.03)
        moments.append(Moment(kill, (3, 1)[i % 2], "request", n, delay))
    moments += [
        Moment(kill, 3, "temp", rng.randint(1, len(ALL_JOBS) - 1)),
        Moment(kill, 1, "temp", len(ALL_JOBS)),  # the digest's
        Moment(kill, 3, "output", rng.randint(1, len(ALL_JOBS) - 1)),
        Moment(kill, 1, "output", len(ALL_JOBS)),
        Moment(kill, 3, "request", REQUESTS, rng.uniform(0.0, 0.15)),
        Moment(kill, 3, "request", rng.randint(1, REQUESTS), force=True),
        Moment(kill, 1, "temp", rng.randint(1, len(ALL_JOBS)), force=True),
        Moment(kill, 3, "output", rng.randint(1, len(ALL_JOBS)), force=True),
    ]
    return moments


INTERRUPT_MOMENTS = [
    Moment(signal.SIGINT, 3, "request", 1),  # the first jobs are starting
    Moment(signal.SIGINT, 3, "output", 5),  # a job has written its output: it finishes
    Moment(signal.SIGINT, 1, "request", REQUESTS - 1),  # every ticket done, the digest running
]


class Trigger:
    """The fake model's script, and the signal at the moment: counted on the server's
    requests and on inotify events where outputs go. The signal goes through a pidfd, so
    it can never reach another process that reused the pid."""

    def __init__(self, moment: Moment, root: Path) -> None:
        self.moment = moment
        self.root = root
        self.generation = 1
        self.requests: list[Job] = []  # in arrival order
        self.fired_at: Job | None = None  # the job whose request or output was the moment
        self.counts = {"request": 0, "temp": 0, "output": 0}  # of the run to signal
        self.missed = False  # the process had exited before the signal
        self.cut_short = 0  # requests that arrived without their body
        self._lock = threading.Lock()
        self._pidfd: int | None = None
        self._timer: threading.Timer | None = None
        self._sent = threading.Event()
        self._inotify: Inotify | None = None
        self._stop = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="crash-inotify", daemon=True)

    def arm(self, watched: list[Path]) -> None:
        """Before the process starts: watch, count from zero, answer generation 2."""
        self._inotify = Inotify(watched)
        with self._lock:
            self.counts = dict.fromkeys(self.counts, 0)
            self.generation = 2

    def attach(self, pid: int) -> None:
        with self._lock:
            self._pidfd = os.pidfd_open(pid)
        self._watcher.start()

    def detach(self) -> None:
        self._stop.set()
        if self._watcher.is_alive():
            self._watcher.join()
        if self._inotify is not None:
            self._inotify.close()
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
            if self._pidfd is not None:
                os.close(self._pidfd)
                self._pidfd = None

    def send(self) -> None:
        with self._lock:
            if self._pidfd is None:
                return
            try:
                signal.pidfd_send_signal(self._pidfd, self.moment.signum)
            except ProcessLookupError:
                self.missed = True
            finally:
                self._sent.set()

    def catch_up(self) -> None:
        """The run must not get far past a file moment before the watcher (which a loaded
        machine may delay) has sent the signal: a request made once the n-th output is on
        disk waits for it. (A fresh project: outputs appear only by those renames.)"""
        if self.moment.on == "request" or self.moment.force or self._sent.is_set():
            return
        with self._lock:
            if self._pidfd is None:
                return
        if sum((self.root / output).exists() for output in OUTPUT.values()) >= self.moment.n:
            self._sent.wait(10)

    def event(self, kind: str, job: Job) -> bool:
        """Count an event; True when it is the moment (the signal is sent or timed)."""
        with self._lock:
            self.counts[kind] += 1
            if self.fired_at is not None or self._pidfd is None:
                return False
            if (kind, self.counts[kind]) != (self.moment.on, self.moment.n):
                return False
            self.fired_at = job
            if self.moment.delay is not None:
                self._timer = threading.Timer(self.moment.delay, self.send)
                self._timer.start()
                return True
        self.send()
        return True

    def _watch(self) -> None:
        assert self._inotify is not None
        job_of_file = {Path(output).name: job for job, output in OUTPUT.items()}
        while not self._stop.is_set():
            for mask, name in self._inotify.read(timeout=0.05):
                temp = TEMP.fullmatch(name)
                if mask & IN_CREATE and temp and temp["name"] in job_of_file:
                    self.event("temp", job_of_file[temp["name"]])
                elif mask & IN_MOVED_TO and name in job_of_file:
                    self.event("output", job_of_file[name])

    def __call__(self, body: dict[str, Any]) -> Reply:
        if "messages" not in body:  # its sender was killed while sending it
            with self._lock:
                self.cut_short += 1
            return error(400, "request cut short")
        job = job_of(body)
        with self._lock:
            self.requests.append(job)
        self.catch_up()
        fired = self.event("request", job)
        if any(m["role"] == "tool" for m in body["messages"]):
            reply = text(full_text(job, self.generation))
        else:
            path = job[1] or OUTPUT[("tickets", ITEMS[0])]
            reply = tool_calls(call("read", {"path": path}))
        # A Ctrl-C must find this request still waiting for its answer.
        stall = 20.0 if fired and self.moment.in_flight else 0.0
        return Reply(message=reply.message, usage=reply.usage, stall=stall)


IN_CREATE = 0x100
IN_MOVED_TO = 0x80
EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len; then the name


class Inotify:
    """Linux inotify through ctypes: IN_CREATE and IN_MOVED_TO in some directories."""

    def __init__(self, directories: list[Path]) -> None:
        self._libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self._libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        for directory in directories:
            path = os.fsencode(directory)
            if self._libc.inotify_add_watch(self.fd, path, IN_CREATE | IN_MOVED_TO) < 0:
                os.close(self.fd)
                raise OSError(ctypes.get_errno(), f"inotify_add_watch {directory}")

    def read(self, timeout: float) -> list[tuple[int, str]]:
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return []
        try:
            data = os.read(self.fd, 1 << 16)
        except BlockingIOError:
            return []
        events, offset = [], 0
        while offset < len(data):
            _, mask, _, size = EVENT.unpack_from(data, offset)
            offset += EVENT.size
            name = data[offset : offset + size].rstrip(b"\0")
            offset += size
            events.append((mask, os.fsdecode(name)))
        return events

    def close(self) -> None:
        os.close(self.fd)


@dataclass
class Trial:
    moment: Moment
    root: Path
    server: FakeOpenAI
    trigger: Trigger
    before: dict[Job, str] = field(default_factory=dict)  # -B: the done rows' run ids
    returncode: int = 0
    stdout: str = ""
    stderr: str = ""
    notes: dict[str, object] = field(default_factory=dict)  # what the moment hit, for -s

    @property
    def env(self) -> dict[str, str]:
        return {"OPENAI_BASE_URL": self.server.base_url, "OPENAI_API_KEY": "sk-x", "CLAW_NOW": NOW}


def prepare_trial(root: Path, moment: Moment) -> Trial:
    """The project and its server; for `-B`, a complete first run (in this process)."""
    make_project(root, CLAWFILE, {item: f"item {item}\n" for item in ITEMS})
    (root / "out").mkdir()  # watched from the start
    server = FakeOpenAI().start()
    trial = Trial(moment, root, server, Trigger(moment, root))
    server.handler = trial.trigger
    if moment.force:
        r = claw(root, "run", "--json", "-j", "3", env=trial.env)
        assert r.exit_code == 0, r.stderr
        trial.before = {job: run_id for job, (_, run_id) in done_rows(root).items()}
        assert set(trial.before) == ALL_JOBS
    return trial


def start_trial(trial: Trial, base_env: dict[str, str]) -> Trial:
    """Run `claw run` in a real process until the signal ends it (a worker thread's job)."""
    m = trial.moment
    force = ["-B"] if m.force else []
    try:
        trial.trigger.arm([trial.root, trial.root / "out"])
        proc = subprocess.Popen(
            [sys.executable, "-m", "claw_batch", "run", "--json", "-j", str(m.jobs), *force],
            cwd=trial.root,
            env={**base_env, **trial.env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            trial.trigger.attach(proc.pid)
            trial.stdout, trial.stderr = proc.communicate(timeout=45)
        except BaseException:
            proc.kill()
            proc.communicate()
            raise
        finally:
            trial.trigger.detach()
    except BaseException:
        trial.server.stop()
        raise
    trial.returncode = proc.returncode
    return trial


def run_trials(tmp_path: Path, moments: list[Moment], check: Callable[[Trial], None]) -> None:
    """Processes two at a time (their Python start-up is most of the cost); preparations,
    checks and the in-process reruns one at a time in this thread, in order."""
    base_env = dict(os.environ)  # claw() below edits os.environ while workers start processes
    trials: list[Trial] = []
    with ThreadPoolExecutor(2, thread_name_prefix="crash-trial") as pool:
        futures = []
        try:
            for n, moment in enumerate(moments):
                trial = prepare_trial(tmp_path / f"t{n:02d}", moment)
                trials.append(trial)
                futures.append(pool.submit(start_trial, trial, base_env))
            for future in futures:
                trial = future.result()
                # shown with a failure: which trial, for reproduction
                print(f"checking {trial.root.name}: {trial.moment} (seed {SEED})")
                started = time.perf_counter()
                check(trial)
                trial.notes["check_s"] = round(time.perf_counter() - started, 2)
        finally:
            pool.shutdown(cancel_futures=True)
            for trial in trials:
                trial.server.stop()
    report(trials)


def report(trials: list[Trial]) -> None:
    """What each moment hit (pytest -s shows it)."""
    for t in trials:
        hits = ", ".join(f"{k}={v}" for k, v in t.notes.items())
        print(f"{t.root.name} {t.moment}: exit {t.returncode}; {hits}")


# --- reading the project after the signal ----------------------------------------------------


@contextlib.contextmanager
def database(root: Path) -> Iterator[sqlite3.Connection]:
    db = sqlite3.connect(root / ".claw" / "state.db")
    try:
        yield db
    finally:
        db.close()


def done_rows(root: Path) -> dict[Job, tuple[dict[str, str], str]]:
    """The `done` table: job -> (its outputs {path: sha256}, the run that wrote the row)."""
    with database(root) as db:
        rows = db.execute("SELECT task, item, outputs, run_id FROM done").fetchall()
    return {(task, item): (json.loads(outputs), run) for task, item, outputs, run in rows}


def job_rows(root: Path, run_id: str) -> dict[Job, str]:
    with database(root) as db:
        rows = db.execute("SELECT task, item, status FROM jobs WHERE run_id = ?", (run_id,))
        return {(task, item): status for task, item, status in rows.fetchall()}


def last_run(root: Path) -> tuple[str, str, int | None]:
    """The run that was signalled: (id, status, exit code)."""
    with database(root) as db:
        ((run_id, status, code),) = db.execute(
            "SELECT id, status, exit_code FROM runs ORDER BY rowid DESC LIMIT 1"
        )
    return str(run_id), str(status), code


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def check_outputs(trial: Trial, *, all_there: bool) -> set[str]:
    """Invariant 1. Every output that exists holds a full text; the only other files where
    outputs go are atomic.py's temp files, which the digest's `out/*.md` does not match.
    Returns the temp files found."""
    root = trial.root
    generations = (1, 2) if trial.moment.force else (2,)
    temps: set[str] = set()
    expected = {OUTPUT[job]: job for job in ALL_JOBS}
    present = set()
    for directory in (root, root / "out"):
        for path in directory.iterdir():
            rel = path.relative_to(root).as_posix()
            if path.is_dir() or rel == "clawfile.yaml":
                continue
            if rel in expected:
                whole = {full_text(expected[rel], g) for g in generations}
                assert path.read_text() in whole, f"torn output {rel}"
                present.add(rel)
                continue
            temp = TEMP.fullmatch(path.name)
            assert temp, f"unexpected file {rel}"
            assert temp["name"] in {Path(o).name for o in expected}, rel
            temps.add(rel)
    assert glob_files(root, "out/*.md") == sorted(p for p in present if p.startswith("out/"))
    if all_there:
        assert present == set(expected)
    return temps


def check_done(trial: Trial, replayed: frozenset[Job] = frozenset()) -> dict[Job, str]:
    """Invariant 2: a `done` row exists only with its outputs on disk, as recorded, and only
    for a job its run recorded as ok. Returns job -> the run that did it. `replayed`: jobs
    whose answer the call cache gave again, as the run that paid for it had it (a digest
    redone for a ticket it does not read asks what it asked then)."""
    done = done_rows(trial.root)
    for job, (outputs, run_id) in done.items():
        assert job in ALL_JOBS
        assert set(outputs) == {OUTPUT[job]}, f"{job} done without its output recorded"
        for rel, digest in outputs.items():
            path = trial.root / rel
            assert path.is_file(), f"{job} marked done but {rel} is missing"
            assert sha256(path) == digest, f"{job} marked done but {rel} differs"
            generation = 1 if trial.before.get(job) == run_id else 2
            texts = {full_text(job, g) for g in (1, 2)} if job in replayed else set()
            assert path.read_text() in texts | {full_text(job, generation)}
        assert job_rows(trial.root, run_id)[job] == "ok"
    return {job: run_id for job, (_, run_id) in done.items()}


def check_lock_free(trial: Trial) -> None:
    """Invariant 4: the lock died with its holder. Raises Locked otherwise."""
    with ProjectLock(trial.root):
        pass


def check_rerun(trial: Trial, done: dict[Job, str]) -> None:
    """Invariant 3: the next run redoes exactly the jobs that were not done, paying only for
    them; then everything is complete, and a third run does nothing.

    After a `-B` run, the digest is also redone when its `done` row is the first run's and a
    ticket was not: that ticket's output will change (generation 2), so the digest's inputs
    do."""
    restarted = {job for job in ALL_JOBS if trial.before.get(job) != done.get(job)}
    expected = ALL_JOBS - set(done)
    if trial.before and DIGEST not in restarted and restarted:
        expected |= {DIGEST}
    before = len(trial.trigger.requests)
    r = claw(trial.root, "run", "--json", "-j", str(trial.moment.jobs), env=trial.env)
    assert r.exit_code == 0, r.stderr
    summary = json.loads(r.stdout)
    statuses = {(j["task"], j["item"] or ""): j["status"] for j in summary["jobs"]}
    assert set(statuses) == ALL_JOBS
    redone = {job for job, status in statuses.items() if status == "ok"}
    kept = {job for job, status in statuses.items() if status == "up-to-date"}
    assert redone == expected, "the rerun did not redo exactly the unfinished jobs"
    assert kept == ALL_JOBS - expected
    # The turns the killed run paid for are replayed from the call cache (15 tokens a turn)
    saved = {(j["task"], j["item"] or ""): j["saved_tokens"] // 15 for j in summary["jobs"]}
    paid = len(trial.trigger.requests) - before
    assert paid + sum(saved.values()) == STEPS * len(redone)
    assert not check_outputs(trial, all_there=True), "a killed write's temp file outlived the rerun"
    after = check_done(trial, frozenset(job for job, turns in saved.items() if turns == STEPS))
    assert set(after) == ALL_JOBS
    assert {job for job in ALL_JOBS if after[job] != done.get(job)} == redone

    before = len(trial.trigger.requests)
    r = claw(trial.root, "run", "--json", "-j", str(trial.moment.jobs), env=trial.env)
    assert r.exit_code == 0, r.stderr
    assert {j["status"] for j in json.loads(r.stdout)["jobs"]} == {"up-to-date"}
    assert len(trial.trigger.requests) == before


def check_killed(trial: Trial) -> None:
    m, fired = trial.moment, trial.trigger.fired_at
    assert fired is not None, f"the moment never came\n{trial.stderr}"
    if m.in_flight:
        assert trial.returncode == -signal.SIGKILL, trial.stderr
    else:  # a signal after an event may come after the end of the run
        assert trial.returncode in (-signal.SIGKILL, 0), trial.stderr
    temps = check_outputs(trial, all_there=False)
    done = check_done(trial)
    run_id, status, _ = last_run(trial.root)
    jobs = job_rows(trial.root, run_id)
    assert set(jobs.values()) <= {"ok", "running"}, jobs
    for job in ALL_JOBS:
        if job in jobs:  # started by the killed run: its old row went in the same transaction
            assert done.get(job) == (run_id if jobs[job] == "ok" else None), job
        else:  # not started: as it was
            assert done.get(job) == trial.before.get(job), job
    running = {job for job, s in jobs.items() if s == "running"}
    if m.in_flight:  # killed while this job waited for the model: it is not done
        assert fired in running
        assert status == "running"
    if trial.returncode == 0:
        assert status == "ok"
        assert set(done) == ALL_JOBS
    written = [
        job
        for job in running
        if (trial.root / OUTPUT[job]).exists()
        and (trial.root / OUTPUT[job]).read_text() == full_text(job, 2)
    ]
    if trial.trigger.cut_short:
        trial.notes["requests_cut_short"] = trial.trigger.cut_short
    trial.notes.update(
        done=len(done),
        running=len(running),
        output_written_not_recorded=len(written),
        temps=sorted(temps),
        run=status,
    )
    check_lock_free(trial)
    check_rerun(trial, done)


def check_interrupted(trial: Trial) -> None:
    m, fired = trial.moment, trial.trigger.fired_at
    assert fired is not None, f"the moment never came\n{trial.stderr}"
    assert trial.returncode == 130, trial.stderr
    assert trial.stderr.splitlines()[-1] == "claw: interrupted"
    run_id, status, exit_code = last_run(trial.root)
    assert (status, exit_code) == ("interrupted", 130)
    jobs = job_rows(trial.root, run_id)
    assert set(jobs.values()) <= {"ok", "interrupted"}, jobs  # none left "running"
    interrupted = {job for job, s in jobs.items() if s == "interrupted"}
    reported = {(j["task"], j["item"] or ""): j["status"] for j in json.loads(trial.stdout)["jobs"]}
    assert reported == jobs
    assert not check_outputs(trial, all_there=False)  # no write was cut short
    done = check_done(trial)
    assert set(done) == {job for job, s in jobs.items() if s == "ok"}  # finished results kept
    if m.in_flight:  # it was waiting for its answer
        assert fired in interrupted
        assert not (trial.root / OUTPUT[fired]).exists()
    else:  # its output was on disk: it finished
        assert fired in done
    assert lock_path(trial.root).read_bytes() == b""  # released, label and all
    check_lock_free(trial)
    trial.notes.update(done=len(done), interrupted=len(interrupted))
    check_rerun(trial, done)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_kill_9_at_many_moments(tmp_path: Path) -> None:
    run_trials(tmp_path, kill_moments(), check_killed)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_ctrl_c_at_several_moments(tmp_path: Path) -> None:
    run_trials(tmp_path, INTERRUPT_MOMENTS, check_interrupted)


def test_an_output_is_durable_before_the_ledger_records_its_job_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The power-cut half of crash safety, which a kill -9 cannot show (the page cache
    outlives the process): a job's output is renamed into its folder, the folder fsynced,
    and only then is the job done in the ledger. The folder's fsyncs are grouped (the jobs
    that end together share one), so each is watched: what the folder held when it
    returned, and which jobs another reader of the ledger saw done at that moment."""
    root = tmp_path / "p"
    make_project(root, CLAWFILE, {item: f"item {item}\n" for item in ITEMS})
    out = str(root / "out")
    seen: list[tuple[set[str], set[str]]] = []  # per fsync of out/: its files, the done items
    real_fsync = os.fsync

    def watched_fsync(fd: int) -> None:
        real_fsync(fd)
        if os.readlink(f"/proc/self/fd/{fd}") == out:
            ledger = sqlite3.connect(f"file:{root / '.claw/state.db'}?mode=ro", uri=True)
            with contextlib.closing(ledger):
                done = {item for (item,) in ledger.execute("SELECT item FROM done")}
            seen.append((set(os.listdir(out)), done))

    monkeypatch.setattr(os, "fsync", watched_fsync)
    with FakeOpenAI() as srv:
        srv.enqueue(*[text("ticket done")] * len(ITEMS), text("digest done"))
        env = {"OPENAI_BASE_URL": srv.base_url, "OPENAI_API_KEY": "sk-x", "CLAW_NOW": NOW}
        r = claw(root, "run", "-j", "4", "tickets", env=env)
    assert r.exit_code == 0, r.stderr
    assert seen, "the outputs' folder was never fsynced"
    for item in ITEMS:
        name = f"{Path(item).stem}.md"
        synced_first = [done for files, done in seen if name in files]
        assert synced_first and item not in synced_first[0], (
            f"{item}: recorded done before its output's rename was made durable"
        )
