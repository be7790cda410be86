"""Model calls through a provider's Batch API (`batch: true`, `claw run --batch`): half the
price, for work that can wait.

`BatchLLM` is an LLM like any other: each job runs its tool loop on its own thread, and
`complete` hands the request to a collector and waits. The collector gathers the requests of
every job waiting (it submits once none came for QUIET seconds, or a file is full: at most
MAX_REQUESTS lines and MAX_BYTES bytes), uploads them as one JSONL file, creates the batch,
polls it (backing off to MAX_POLL seconds) and, once it is over, completes each waiting call
with its line's reply. A multi-turn job thus proceeds in rounds: its tools run locally between
two batches, beside the other jobs'.

Crash-safe through the journal (claw_batch.store.batches): a request whose custom_id (a
digest of the request, `custom_id`) is in a batch still in flight re-attaches to it; a reply
already downloaded is handed over without a call. A batch that expired or was cancelled has
its missing lines submitted again; a line that failed with a status waiting may fix (429,
5xx) goes again, up to ATTEMPTS times; any other failed line fails its job with the
provider's words. A line missing from a completed batch's output (or not one: see
llm.batchoutput) goes again too, up to ATTEMPTS times, then fails naming the output file. A
run stopped while it waits (Ctrl-C, --batch-wait) leaves the batch running, and says so: it
is paid for, and the next run picks up its results.

A batch is paid once: the create (POST /batches) is never retried blind — after a create
whose answer was lost, the provider's batches are looked at for one made from the file
first — and a file whose create outcome is unknown stays journalled for the next run.
"""

from __future__ import annotations

import functools
import json
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from claw_batch import baton, cancel
from claw_batch.errors import LimitExceeded, ModelError
from claw_batch.figures import duration
from claw_batch.llm import batchlines
from claw_batch.llm.batchapi import BatchAPI, BatchState, Gone, Unreachable
from claw_batch.llm.batchlines import Call, chunks, custom_id
from claw_batch.llm.batchoutput import read_lines
from claw_batch.llm.messages import ChatRequest, Completion
from claw_batch.llm.replyjson import completion_from_json, completion_json, redacted

if TYPE_CHECKING:
    from claw_batch.llm.endpoints import EndpointSpec
    from claw_batch.store.batches import Journal

T = TypeVar("T")
QUIET = 0.5  # seconds without a new request before the waiting ones are submitted
FIRST_POLL = 1.0  # seconds before a batch is first looked at
MAX_POLL = 60.0  # seconds between two looks at a batch, at most
HEARTBEAT = 600.0  # seconds after which a batch's progress is said again, changed or not
ATTEMPTS = 3  # times a line that failed with a retryable status is submitted
OVER = frozenset({"completed", "expired", "cancelled", "failed"})
RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})


@dataclass(frozen=True)
class BatchRun:
    """What batch endpoints need of the run."""

    # The journal of an endpoint's batches in the run's ledger, by its base URL (the run
    # layer opens it: claw_batch.store.batches); None: a run without a ledger.
    journal: Callable[[str], Journal] | None
    run_id: str
    say: Callable[[str], None]  # a line for the user
    wait_until: float | None = None  # time.monotonic() after which no call waits (--batch-wait)
    wait_said: str = ""  # the --batch-wait as typed, for messages
    again: str = "claw run"  # what picks up the results: `claw run --batch` for a --batch run


@dataclass(eq=False)
class _Batch:
    """A batch in flight that calls of this run wait for."""

    file_id: str
    batch_id: str | None
    calls: dict[str, list[Call]]
    started: float = field(default_factory=time.monotonic)
    next_poll: float = 0.0
    interval: float = FIRST_POLL
    shown: tuple[str, int, int] = ("", -1, -1)  # status and counts last said
    said: float = 0.0  # when


class _Unknown(ModelError):
    """A create whose outcome is unknown: the batch may exist (and be paid for)."""


class BatchLLM:
    def __init__(
        self,
        spec: EndpointSpec,
        key: str | None,
        run: BatchRun | None,
        *,
        redact: Callable[[str], str],
    ) -> None:
        self.spec = spec
        self.api = BatchAPI(spec, key)
        self.run = run or BatchRun(None, "", lambda line: None)
        opened = self.run.journal
        self.journal = opened(self.api.shown) if opened is not None else None
        self.redact = redact
        self._cond = threading.Condition()
        self._pending: list[Call] = []
        self._last = 0.0  # when the last request came
        self._flight: dict[str, _Batch] = {}  # by input file id
        self._thread: threading.Thread | None = None
        self._step = threading.Lock()  # held by the collector while it submits (never polls)
        self._closed = False
        self._jlock = threading.Lock()  # the journal's writes; none once the run closes it
        self._detached = False

    def complete(self, request: ChatRequest, *, deadline: float) -> Completion:
        """The reply to `request` through a batch; `deadline` does not bound the wait (a
        batch takes up to 24 hours), --batch-wait does."""
        call = Call(custom_id(request), request)
        with self._cond:
            found = self.journal.find(call.cid) if self.journal is not None else None
            if found is not None and found.completion is not None:  # kept till the job ends
                return completion_from_json(json.loads(found.completion))
            if found is not None:  # in a batch of an earlier run: wait for it, never again
                batch = self._flight.get(found.input_file_id)
                if batch is None:
                    batch = self._flight[found.input_file_id] = _Batch(
                        found.input_file_id, found.batch_id, {}
                    )
                    self.run.say(
                        f"claw: re-attached to batch {found.batch_id or found.input_file_id} "
                        "(submitted by an earlier run)"
                    )
                batch.calls.setdefault(call.cid, []).append(call)
            else:
                self._pending.append(call)
                self._last = time.monotonic()
            self._start()
            self._cond.notify_all()
        return self._wait(call)

    def close(self, settled: Collection[str] = ()) -> None:
        """The run is over: stop. What its jobs asked for and is not submitted yet (the run
        stopped waiting: --batch-wait) is submitted now, so that the next run finds it; an
        upload in progress is journalled first. A poll in progress is not waited for: it
        writes nothing once this returns. Ctrl-C waits for no upload. `settled`: the jobs
        whose results are recorded, whose replies the journal drops. Then say which batches
        are left running, paid for."""
        interrupted = cancel.cancelled()
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            flush, self._pending = ([] if interrupted else self._pending), []
        try:
            if not interrupted:
                with self._step:
                    if flush:
                        self._flush(flush)
        finally:
            with self._jlock:
                if self.journal is not None and settled and not self._detached:
                    self.journal.settled(settled)
                self._detached = True
            self.api.close()  # a poll still in flight fails, and is not said
        with self._cond:
            left = [b for b in self._flight.values() if b.batch_id is not None]
        for batch in left:
            self.run.say(
                f"claw: batch {batch.batch_id} is left running at {self.api.shown} (it is paid "
                f"for): `{self.run.again}` again picks up its results"
            )

    def _flush(self, calls: list[Call]) -> None:
        try:
            self._submit(calls)
        except Exception as exc:  # nobody waits for these calls any more: said here
            n = len({c.cid for c in calls})
            self.run.say(
                f"claw: could not submit the run's last {n} request{'s' * (n > 1)} to "
                f"{self.api.shown}: {exc}; `{self.run.again}` again asks for them"
            )

    def _check_wait(self) -> None:
        until = self.run.wait_until
        if until is not None and time.monotonic() >= until:
            raise LimitExceeded(
                f"batch-wait: the run waited {self.run.wait_said} for its batches; they go on "
                f"at the provider, and `{self.run.again}` again picks up their results"
            )

    def _wait(self, call: Call) -> Completion:
        try:
            with baton.released():
                while not call.done.wait(cancel.POLL):
                    cancel.check()
                    self._check_wait()
        except LimitExceeded:  # --batch-wait: submitted all the same (close), for the next run
            with self._cond:
                call.abandoned = True
            raise
        except BaseException:
            with self._cond:  # Ctrl-C: not submitted yet, never; a reply that comes is kept
                call.abandoned = True
                if call in self._pending:
                    self._pending.remove(call)
            raise
        if call.error is not None:
            raise call.error
        assert call.completion is not None
        return call.completion

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._collect, name="claw-batch", daemon=True)
            self._thread.start()

    def _collect(self) -> None:
        while True:
            with self._cond:
                if self._closed:
                    return
                now = time.monotonic()
                if not self._due(now):
                    self._cond.wait(self._sleep(now))
                    continue
            with self._step:  # work is taken under it: close() finds none half done
                with self._cond:
                    if self._closed:  # close() took what was pending
                        return
                    submit: list[Call] = []
                    if self._submit_due(time.monotonic()):
                        submit, self._pending = self._pending, []
                if submit:
                    self._guarded(submit, functools.partial(self._submit, submit))
            with self._cond:  # polled without the step: close() never waits for a poll
                now = time.monotonic()
                polls = [b for b in self._flight.values() if b.next_poll <= now]
            for batch in polls:
                if self._closed:
                    return
                calls = [c for cs in batch.calls.values() for c in cs]
                self._guarded(calls, functools.partial(self._poll, batch))

    def _due(self, now: float) -> bool:
        """Whether there is work: requests to submit, or a batch to look at."""
        return self._submit_due(now) or any(b.next_poll <= now for b in self._flight.values())

    def _submit_due(self, now: float) -> bool:
        return bool(self._pending) and (now - self._last >= QUIET or self._full())

    def _sleep(self, now: float) -> float:
        times = [b.next_poll - now for b in self._flight.values()]
        if self._pending:
            times.append(self._last + QUIET - now)
        return max(0.01, min(times, default=1.0))

    def _full(self) -> bool:
        return len(self._pending) >= batchlines.MAX_REQUESTS

    def _guarded(self, calls: list[Call], step: Callable[[], None]) -> None:
        """A step that failed fails the calls it was for, never the collector."""
        try:
            step()
        except Exception as exc:  # a bug or a refusal: said by the jobs that wait
            self._fail(calls, exc)
        except BaseException as exc:
            self._fail(calls, exc)
            raise

    def _fail(self, calls: list[Call], exc: BaseException) -> None:
        for call in calls:
            if not call.done.is_set():
                call.answer(None, exc)
        with self._cond:
            for key, batch in list(self._flight.items()):
                if all(c.done.is_set() for cs in batch.calls.values() for c in cs):
                    del self._flight[key]

    def _record(self, write: Callable[[Journal], None]) -> None:
        """A write to the journal, unless the run closed it (a poll that ends late)."""
        with self._jlock:
            if self.journal is not None and not self._detached:
                write(self.journal)

    def _submit(self, calls: list[Call]) -> None:
        for chunk in chunks(calls):
            self._submit_file(chunk)

    def _submit_file(self, calls: dict[str, list[Call]]) -> None:
        data = b"".join(cs[0].line() for cs in calls.values())
        file_id = self._retried(lambda: self.api.upload(data))
        jobs = [(cid, cs[0].request.job) for cid, cs in calls.items()]
        self._record(lambda j: j.submitted(file_id, self.run.run_id, jobs))
        batch = _Batch(file_id, None, calls)
        try:
            self._create(batch)
        except _Unknown:  # perhaps made: journalled, the next run looks for it
            raise
        except Exception:  # refused: no batch was made of the file
            self._record(lambda j: j.forget(file_id))
            raise
        with self._cond:
            self._flight[file_id] = batch
        self.run.say(
            f"claw: batch {batch.batch_id}: {len(calls)} request{'s' * (len(calls) > 1)} "
            f"submitted to {self.spec.provider} ({self.api.shown})"
        )

    def _create(self, batch: _Batch) -> None:
        """The batch made of `batch`'s file. A create whose answer is lost may have made it:
        the provider's batches are looked at before another create, so that a file is never
        two batches (two bills); _Unknown when they cannot be."""
        state: BatchState | None = None
        for attempt in range(1, ATTEMPTS + 1):
            try:
                state = self.api.create(batch.file_id)
                break
            except Unreachable as exc:
                lost = exc
            with self._cond:
                self._cond.wait(FIRST_POLL * 2**attempt)
            try:
                state = self.api.made_from(batch.file_id)
            except Unreachable:
                break  # not known whether it was made: never created again blind
            except Gone:
                pass
            except ModelError:  # a provider that does not list its batches
                pass
            if state is not None:
                break
        if state is None:
            raise _Unknown(
                f"provider '{self.spec.provider}' at {self.api.shown}: the batch of file "
                f"{batch.file_id} may have been made ({lost}): `{self.run.again}` again "
                "looks for it before creating it"
            )
        batch.batch_id = state.id
        self._record(lambda j: j.created(batch.file_id, state.id, state.status))
        batch.next_poll = time.monotonic() + batch.interval

    def _retried(self, fn: Callable[[], T]) -> T:
        """`fn`, tried again a few times while the endpoint does not answer."""
        for attempt in range(1, ATTEMPTS + 1):
            try:
                return fn()
            except Unreachable as exc:
                if attempt == ATTEMPTS:
                    raise ModelError(
                        f"provider '{self.spec.provider}' at {self.api.shown}: could not "
                        f"{exc} after {attempt} attempts; the endpoint is down or "
                        "overloaded, try again later"
                    ) from None
                with self._cond:
                    self._cond.wait(FIRST_POLL * 2**attempt)
        raise AssertionError("unreachable")

    def _poll(self, batch: _Batch) -> None:
        if batch.batch_id is None:  # uploaded by a run killed before it knew the batch's id
            try:
                made = self.api.made_from(batch.file_id)  # created, if the reply was lost
            except Unreachable as exc:
                self._later(batch, f"claw: {exc}; trying again")
                return
            except ModelError:  # a provider that does not list its batches
                made = None
            if made is None:
                try:
                    self._create(batch)
                except _Unknown:
                    raise
                except ModelError as exc:  # refused for good (the file is gone): anew
                    self._record(lambda j: j.forget(batch.file_id))
                    self._resubmit(batch, batch.calls, f"not created: {exc}")
                return
            batch.batch_id = made.id
            self._record(lambda j: j.created(batch.file_id, made.id, made.status))
        try:
            state = self.api.retrieve(batch.batch_id)
        except Unreachable as exc:
            self._later(batch, f"claw: batch {batch.batch_id}: {exc}; trying again")
            return
        except Gone:  # the provider no longer knows it: its requests go again, a few times
            self._resubmit(batch, self._counted(batch.calls, None, "unknown to the provider"))
            return
        self._show(batch, state)
        if state.status not in OVER:
            self._record(lambda j: j.status(batch.file_id, state.status))
            self._later(batch)
            return
        self._finish(batch, state)

    def _later(self, batch: _Batch, said: str | None = None) -> None:
        if said:
            self.run.say(said)
        batch.interval = min(batch.interval * 1.5, MAX_POLL)
        batch.next_poll = time.monotonic() + batch.interval

    def _show(self, batch: _Batch, state: BatchState) -> None:
        shown = (state.status, state.completed, state.failed)
        now = time.monotonic()
        if shown == batch.shown and now - batch.said < HEARTBEAT:
            return
        batch.shown, batch.said = shown, now
        elapsed = round(now - batch.started)
        self.run.say(
            f"claw: batch {state.id}: {state.status}, {state.completed + state.failed}/"
            f"{state.total} done{f' ({state.failed} failed)' if state.failed else ''}, "
            f"{duration(elapsed)} elapsed"
        )

    def _finish(self, batch: _Batch, state: BatchState) -> None:
        replies: dict[str, Completion] = {}
        failed: dict[str, tuple[int, str]] = {}  # custom_id -> status, what the provider said
        for file_id in (state.output_file_id, state.error_file_id):
            if file_id:
                data = self._retried(functools.partial(self.api.content, file_id))
                read_lines(data, replies, failed, self.redact)
        # Kept redacted, as every sink is: a reply may echo a key the prompt showed.
        kept = {
            cid: json.dumps(redacted(completion_json(c), self.redact)) for cid, c in replies.items()
        }
        self._record(lambda j: j.finished(batch.file_id, kept, state.status))
        with self._cond:  # a job that stops waiting meanwhile is not answered
            self._flight.pop(batch.file_id, None)
            self._deliver(batch, state, replies, failed)

    def _deliver(
        self,
        batch: _Batch,
        state: BatchState,
        replies: dict[str, Completion],
        failed: dict[str, tuple[int, str]],
    ) -> None:
        """Each waiting call's reply or error; what has no reply goes again. A reply nobody
        waits for any longer stays in the journal for the next run."""
        again: dict[str, list[Call]] = {}
        missing: dict[str, list[Call]] = {}
        for cid, waiting in batch.calls.items():
            calls = [c for c in waiting if not c.abandoned]
            if not calls:
                continue
            if cid in replies:
                for call in calls:
                    call.answer(replies[cid])
            elif state.status == "failed":
                error = ModelError(
                    f"provider '{self.spec.provider}' at {self.api.shown} refused batch "
                    f"{state.id}: {self.redact(state.errors) or 'no reason given'}"
                )
                for call in calls:
                    call.answer(None, error)
            elif cid in failed:
                if self._retry(calls, *failed[cid]):
                    again[cid] = calls
            elif state.status in ("expired", "cancelled"):  # never ran: again, freely
                again[cid] = calls
            else:  # no reply (or none claw can read) in a completed batch's output
                missing[cid] = calls
        where = f"output file {state.output_file_id}" if state.output_file_id else "output"
        again |= self._counted(missing, state.id, f"no reply in its {where}")
        if again:
            self._resubmit(batch, again, state.status)

    def _counted(
        self, calls: dict[str, list[Call]], batch_id: str | None, why: str
    ) -> dict[str, list[Call]]:
        """Of calls whose batch gave them no reply, those that go again; the others, tried
        ATTEMPTS times, fail saying `why`."""
        again: dict[str, list[Call]] = {}
        for cid, cs in calls.items():
            attempts = max(c.attempts for c in cs) + 1
            for call in cs:
                call.attempts = attempts
            if attempts < ATTEMPTS:
                again[cid] = cs
                continue
            error = ModelError(
                f"model {cs[0].request.model!r} at {self.api.shown} (batch"
                f"{f' {batch_id}' if batch_id else ''}): {why}, after {attempts} attempts; "
                "look at the batch at the provider, or run without --batch / `batch: true`"
            )
            for call in cs:
                call.answer(None, error)
        return again

    def _retry(self, calls: list[Call], status: int, said: str) -> bool:
        """Whether a failed line goes again; if not, its calls fail with the provider's words."""
        attempts = max(c.attempts for c in calls) + 1
        for call in calls:
            call.attempts = attempts
        if status in RETRY_STATUSES and attempts < ATTEMPTS:
            return True
        model = calls[0].request.model
        tail = f" after {attempts} attempts" if status in RETRY_STATUSES else ""
        error = ModelError(
            f"model {model!r} at {self.api.shown} (batch): HTTP {status}: {said}{tail}"
        )
        for call in calls:
            call.answer(None, error)
        return False

    def _resubmit(self, batch: _Batch, calls: dict[str, list[Call]], status: str = "") -> None:
        with self._cond:
            self._flight.pop(batch.file_id, None)
            for cs in calls.values():
                self._pending.extend(cs)
            self._last = time.monotonic() - QUIET  # at once
            self._cond.notify_all()
        if not calls:
            return
        why = f" ({status})" if status else ""
        self.run.say(
            f"claw: batch {batch.batch_id or batch.file_id}{why}: {len(calls)} request"
            f"{'s' * (len(calls) > 1)} without a reply submitted again"
        )
