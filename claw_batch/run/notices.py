"""What a run sends (`notify:`), and when: one notice per task per run, made when the task's
last job of the run ends from its jobs' results in this run, sent on a thread of its own so
that no job waits for it, and waited for before the run's close-out. A task whose jobs were
all up to date sends nothing; `changed` compares against the last notice the ledger says was
delivered (claw_batch.store.deliveries). Sending never changes a job's result nor the exit
code: a delivery that failed is recorded and said once."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shlex
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from claw_batch.clock import now_for_run
from claw_batch.config import Clawfile, Delivery, Project
from claw_batch.notify.notice import (
    EXCERPT_BYTES,
    EXCERPT_LINES,
    FAILURES_SHOWN,
    Failure,
    Notice,
)
from claw_batch.plan.jobs import Job
from claw_batch.run.results import JobResult
from claw_batch.store.deliveries import MODULUS, Deliveries, DeliveryRow, answer_digest
from claw_batch.store.state import State

if TYPE_CHECKING:
    from claw_batch.notify.send import Sent

RAN = frozenset({"ok", "failed", "limit", "interrupted"})
WORST = ("interrupted", "failed", "limit", "ok")  # a task's status: the worst of its jobs'


class Send(Protocol):
    """claw_batch.notify.send.send: what a run and `claw notify test` send through."""

    def __call__(
        self,
        delivery: Delivery,
        notice: Notice,
        *,
        environ: Mapping[str, str],
        redact: Callable[[str], str],
        sleep: Callable[[float], None] | None = None,
        project: Path | None = None,
    ) -> Sent: ...


def default_send() -> Send:
    from claw_batch.notify.send import send

    return send


def delivery_id(delivery: Delivery) -> str:
    """The delivery by its definition (where it goes, not when): the same across runs while
    the clawfile says the same. A digest: a literal webhook URL is not in it."""
    where = {
        "kind": delivery.kind,
        "url": delivery.url,
        "url_env": delivery.url_env,
        "format": delivery.format,
        "to": delivery.to,
        "sender": delivery.sender,
        "smtp": None if delivery.smtp is None else vars(delivery.smtp),
        "attach": delivery.attach,
        "command": delivery.command,
    }
    return hashlib.sha256(json.dumps(where, sort_keys=True).encode()).hexdigest()[:16]


def notify_secrets(config: Clawfile, environ: Mapping[str, str]) -> list[str]:
    """What the run's Redactor must hide of `notify:`: literal webhook URLs, and the values of
    the variables that url_env, user_env and password_env name."""
    found: list[str] = []
    deliveries = {d for task in config.tasks.values() for d in task.notify}
    for d in deliveries:
        names = [d.url_env, *((d.smtp.user_env, d.smtp.password_env) if d.smtp else ())]
        found += [environ[n] for n in names if n and environ.get(n)]
        if d.url:
            found.append(d.url)
    return found


def fired(delivery: Delivery, status: str, changed: bool) -> str | None:
    """The event that fires `delivery` for a task that ended `status` (None: none does)."""
    if status in delivery.on or "always" in delivery.on:
        return status
    return "changed" if changed and "changed" in delivery.on else None


@dataclass
class Tally:
    """One task's jobs in this run, as they end: what its notice needs and nothing more (a
    fan-out of 100,000 jobs keeps one excerpt, not 100,000 texts)."""

    jobs: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)
    first: JobResult | None = None  # the first job that ran (its item, its reason)
    output: str | None = None
    text: str = ""  # the quoted output's text (the first job that ended ok)
    tainted: bool = False  # the quoted output's job read outside content
    tokens: int = 0
    cost: float | None = 0.0
    started: float = float("inf")  # monotonic
    # Whether a `changed` delivery reads the outputs' digest: else neither is kept
    compares: bool = False
    digest: int = 0  # of the outputs' content, whatever order the jobs end in
    ran: set[str] = field(default_factory=set)  # the items that ended ok (names, no texts)
    oks: int = 0
    failed: int = 0

    def add(self, r: JobResult, tainted: bool) -> None:
        self.jobs += 1
        self.counts[r.status] = self.counts.get(r.status, 0) + 1
        self.first = self.first or r
        self.started = min(self.started, time.monotonic() - r.duration_s)
        self.tokens += r.tokens
        if r.tokens and (r.cost_usd is None or self.cost is None):
            self.cost = None
        elif self.cost is not None and r.cost_usd:
            self.cost += r.cost_usd
        if r.status == "ok":
            self.oks += 1
            if self.compares:
                self.ran.add(r.job.item or "")
                self.digest = (self.digest + answer_digest(r.job.item or "", r.text)) % MODULUS
            if self.output is None and not self.text:
                self.output, self.text, self.tainted = r.output, r.text, tainted
        else:
            self.failed += 1  # counted; the first FAILURES_SHOWN kept
            if len(self.failures) < FAILURES_SHOWN:
                self.failures.append(Failure(r.job.item or "", r.status, r.reason, r.error))

    @property
    def status(self) -> str:
        return next(s for s in WORST if self.counts.get(s))

    @property
    def digest_hex(self) -> str:
        return f"{self.digest:064x}" if self.oks else ""


class Notices:
    """A run's notices: `took` each result as it arrives, `task_done` as the scheduler says a
    task ended, `wait` before the close-out."""

    def __init__(
        self,
        project: Project,
        state: State | None,
        run_id: str,
        *,
        redact: Callable[[str], str],
        environ: Mapping[str, str],
        warn: Callable[[str], None],
        say: Callable[[str], None],
        enabled: bool = True,
        dry_run: bool = False,
        send: Send | None = None,
    ) -> None:
        self.project = project
        self.run_id = run_id
        self.redact = redact
        self.environ = environ
        self.warn = warn
        self.say = say
        self.dry_run = dry_run
        self.send = send
        config = project.config
        self.enabled = enabled and any(t.notify for t in config.tasks.values())
        self.ledger = Deliveries(state) if state is not None and self.enabled else None
        self._tallies: dict[str, Tally] = {}
        self._outside: set[Job] = set()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._recording = threading.Lock()
        self._closed = False  # a Ctrl-C stopped the wait: nothing more is recorded

    def read_outside(self, job: Job) -> None:
        if self.enabled:
            with self._lock:
                self._outside.add(job)

    def took(self, r: JobResult) -> None:
        """A job's result, before the run drops its text."""
        deliveries = self.project.config.tasks[r.job.task].notify if self.enabled else ()
        if not deliveries:
            return
        with self._lock:
            tainted = r.job in self._outside
            self._outside.discard(r.job)
        if self.dry_run:
            if r.status == "would-run":
                self._tallies.setdefault(r.job.task, Tally()).jobs += 1
            return
        if r.status in RAN:
            compares = any("changed" in d.on for d in deliveries)
            self._tallies.setdefault(r.job.task, Tally(compares=compares)).add(r, tainted)

    def task_done(self, task: str) -> None:
        """The task's last job of the run ended: its notice made, and sent (or, in a dry
        run, said). Nothing here stops the run: a ledger that cannot be read is said."""
        tally = self._tallies.pop(task, None)
        if tally is None or not tally.jobs:  # all up to date, skipped, or not ours
            return
        try:
            self._task_done(task, tally)
        except Exception as e:  # the run's jobs go on whatever the sending does
            self.warn(f"claw: warning: {task}: notify: {self.redact(str(e))}")

    def _task_done(self, task: str, tally: Tally) -> None:
        deliveries = self.project.config.tasks[task].notify
        if self.dry_run:
            self._preview(task, tally.jobs, deliveries)
            return
        status = tally.status
        if status == "interrupted":
            return
        notice = self.notice(task, tally)
        digest = self._digest(task, tally)
        todo = []
        for d in deliveries:
            ident = delivery_id(d)
            last = self.ledger.last_delivered(task, ident) if self.ledger else None
            changed = bool(tally.oks) and last != digest
            event = fired(d, status, changed)
            if event is not None:
                todo.append((d, ident, dataclasses.replace(notice, event=event)))
        if todo:
            thread = threading.Thread(
                target=self._send_all,
                args=(task, todo, digest),
                name=f"claw-notify-{task}",
                daemon=True,  # a Ctrl-C's exit never waits for a hung server
            )
            self._threads.append(thread)
            thread.start()

    def _digest(self, task: str, tally: Tally) -> str:
        """Of every item's current output, for `changed`: this run's answers and, for a fan-out's
        items that did not run (or did not end ok), their recorded ones. The ledger is read only
        when a delivery asks for `changed`."""
        if not tally.oks or not tally.compares:
            return ""
        if self.ledger is None:
            return tally.digest_hex
        return f"{self.ledger.outputs_digest(task, tally.ran, tally.digest):064x}"

    def notice(self, task: str, tally: Tally) -> Notice:
        first = tally.first
        assert first is not None
        one = tally.jobs == 1
        item = first.job.item if one and first.job.item else None
        shown = f"{task}[{item}]" if item else task
        more = tally.failed - len(tally.failures)
        failures = tuple(tally.failures)
        reason = first.reason if one else failures[0].reason if failures else None
        excerpt, cut = _excerpt(self.redact(tally.text))
        return Notice(
            task=task,
            event=tally.status,
            status=tally.status,
            run_id=self.run_id,
            project=self.project.root.name,
            jobs=tally.jobs,
            counts=dict(tally.counts),
            failures=tuple(_redacted(f, self.redact) for f in failures),
            more_failures=more,
            item=item,
            reason=self.redact(reason) if reason else None,
            output=tally.output,
            excerpt=excerpt,
            excerpt_cut=cut,
            tokens=tally.tokens,
            cost_usd=tally.cost,
            duration_s=round(max(0.0, time.monotonic() - tally.started), 3),
            tainted=tally.tainted,
            show=f"claw show {shlex.quote(shown)}",
        )

    def _preview(self, task: str, jobs: int, deliveries: Iterable[Delivery]) -> None:
        from claw_batch.notify.send import preview

        sample = Notice(task, "ok", "ok", "", self.project.root.name, jobs)
        for d in deliveries:
            self.say(f"claw: {task}: would notify on {', '.join(d.on)}: {preview(d, sample)}")

    def _send_all(self, task: str, todo: list[tuple[Delivery, str, Notice]], digest: str) -> None:
        send = self.send or default_send()
        for delivery, ident, notice in todo:
            try:
                sent = send(
                    delivery,
                    notice,
                    environ=self.environ,
                    redact=self.redact,
                    project=self.project.root,  # told to a command target
                )
            except Exception as e:  # a bug in a target: the run goes on, the ledger says so
                from claw_batch.notify.send import Sent

                sent = Sent(delivery.target, False, 1, self.redact(f"{type(e).__name__}: {e}"))
            self._record(task, delivery, ident, notice.event, sent, digest)

    def _record(
        self, task: str, delivery: Delivery, ident: str, event: str, sent: Sent, digest: str
    ) -> None:
        with self._recording:
            if self._closed:
                return
            if not sent.ok:
                tries = f"{sent.attempts} attempt{'s' * (sent.attempts != 1)}"
                self.warn(
                    f"claw: warning: {task}: notify {delivery.target} failed after {tries}: "
                    f"{sent.error or 'no reason given'}"
                )
            if self.ledger is None:
                return
            row = DeliveryRow(
                self.run_id,
                task,
                ident,
                delivery.target,
                event,
                sent.ok,
                sent.attempts,
                sent.error,
                now_for_run(self.environ).isoformat(),
                digest,
            )
            try:
                self.ledger.add(row)
            except Exception as e:  # a full disk: said, never the run's failure
                self.warn(f"claw: warning: {task}: the ledger of sends: {e}")

    def end(self, *, interrupted: bool) -> None:
        """Before the run's close-out: the sends waited for (each bounded by its timeout ×
        attempts), unless the run was interrupted."""
        if interrupted:
            self.stop()
        else:
            self.wait()

    def stop(self) -> None:
        """The run was interrupted: what is still being sent is neither waited for nor
        recorded."""
        with self._recording:
            self._closed = True

    def wait(self) -> None:
        """Every send started, ended: each is bounded by its timeout × attempts. A Ctrl-C
        stops waiting, and what was not sent by then is not recorded."""
        try:
            for thread in self._threads:
                while thread.is_alive():
                    thread.join(0.1)
        except BaseException:
            self.stop()
            raise


def _excerpt(text: str) -> tuple[str, bool]:
    """The output's first lines, at most EXCERPT_BYTES of them; whether that is not all."""
    lines = text.splitlines(keepends=True)
    shown = "".join(lines[:EXCERPT_LINES])
    data = shown.encode()
    if len(data) > EXCERPT_BYTES:
        shown = data[:EXCERPT_BYTES].decode(errors="ignore")
    return shown, shown != text


def _redacted(f: Failure, redact: Callable[[str], str]) -> Failure:
    return Failure(
        f.item,
        f.status,
        redact(f.reason) if f.reason else None,
        redact(f.error) if f.error else None,
    )
