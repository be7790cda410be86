"""Jobs on N threads in dependency order: a task's jobs start once every task it depends on
has finished (its fan-out is expanded then, when the upstream's files exist); jobs of one
task, and of independent tasks, run side by side."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from claw_batch import baton, cancel
from claw_batch.plan.jobs import Job
from claw_batch.run.results import JobResult

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor
    from queue import SimpleQueue

# Jobs of batch tasks (`batch: true`, --batch) that run at once, whatever -j says: they mostly
# wait for their batch, and -j of them would make small batches. Each is a thread.
BATCH_JOBS = 1000

# How a job ended: its result, or what it raised.
Ended = tuple[JobResult | None, BaseException | None]


class Scheduler:
    def __init__(
        self,
        *,
        jobs: int,
        upstream: Callable[[str], tuple[str, ...]],
        expand: Callable[[str], Sequence[Job]],
        check: Callable[[Job], JobResult | Callable[[], JobResult]],
        # A task's jobs settled at once when none of them need run (the quick check of a
        # whole task); False: each is checked in turn.
        settle_all: Callable[[str, Sequence[Job]], bool],
        on_result: Callable[[JobResult], bool],  # True: start no more jobs
        on_task_done: Callable[[str], None],
        # Writes what the jobs that ended left for later (run.record): called when no job
        # starts, as a job that starts writes it with its own start.
        flush: Callable[[], None] = lambda: None,
        # Whether a task's calls go through a Batch API: its jobs run BATCH_JOBS at a time,
        # beside the -j others.
        batched: Callable[[str], bool] = lambda name: False,
        batch_jobs: int = 0,
    ) -> None:
        self.jobs = max(1, jobs)
        self.batched = batched
        self.batch_jobs = batch_jobs
        self._batch_running = 0
        self.upstream = upstream
        self.expand = expand
        self.check = check  # a result (up to date, skipped…), or the work to do on a thread
        self.settle_all = settle_all
        self.on_result = on_result
        self.on_task_done = on_task_done
        self.flush = flush
        self._waiting: list[str] = []
        self._done: set[str] = set()
        self._remaining: dict[str, int] = {}
        # Jobs in the order they are checked; a task's come in as one entry (settle_all)
        self._queue: deque[Job | tuple[str, Sequence[Job]]] = deque()
        self._running: set[Job] = set()
        # Every job started says how it ended in _ends, then puts itself on _ended.
        self._ends: dict[Job, Ended] = {}
        self._ended: SimpleQueue[Job] | None = None
        self._stopping = False
        self._pool: ThreadPoolExecutor | None = None  # started with the first job to run

    def run(self, tasks: list[str]) -> None:
        self._waiting = list(tasks)
        try:
            with baton.held():  # the scheduler takes turns with the jobs' threads
                self._loop()
        except BaseException:
            # Ctrl-C, or a job that stops the run: the others notice and end quickly
            baton.let_go()  # had a Ctrl-C cut the hand-over short, the jobs still need it
            cancel.cancel()
            self._drain()
            raise
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)

    def _loop(self) -> None:
        while True:
            if not self._fill():
                self.flush()
            if not self._running:
                return
            # A queue the jobs report to as they end, not concurrent.futures.wait: that
            # takes every running future's lock twice per call, and is called once a job
            # ends: at -j 200, 2,000 jobs cost ~800,000 lock operations.
            from queue import Empty  # imported by _start

            ended = self._ended
            assert ended is not None  # made by _start, which started the running jobs
            try:
                with baton.released():
                    first = ended.get(timeout=cancel.POLL)
            except Empty:
                continue
            self._finish(first)
            while not ended.empty():  # those that ended meanwhile, before filling
                self._finish(ended.get())

    def _start(self, job: Job, work: Callable[[], JobResult]) -> None:
        if self._pool is None or self._ended is None:
            from concurrent.futures import ThreadPoolExecutor
            from queue import SimpleQueue

            size = self.jobs + self.batch_jobs
            self._pool = ThreadPoolExecutor(size, thread_name_prefix="claw-job")
            self._ended = SimpleQueue()
        # The job reports itself (`_in_turn`): a Ctrl-C between handing it to the pool and
        # noting it here, or while the scheduler takes the turn back after learning that it
        # ended, cannot lose its result (_drain reads _ends).
        self._pool.submit(_in_turn, job, work, self._ends, self._ended)
        self._running.add(job)
        self._batch_running += self.batch_jobs > 0 and self.batched(job.task)

    def _fill(self) -> bool:
        """Start jobs while there are free slots; a job that need not run (up to date,
        skipped) is settled here at once, which may release its dependents. True when a
        job started."""
        started = False
        self._release()
        queue, check = self._queue, self.check
        while queue and not self._stopping and self._free(queue[0]):
            job = queue.popleft()
            if isinstance(job, tuple):  # a task's jobs, where the first of them would start
                name, jobs = job
                if self.settle_all(name, jobs):
                    self._remaining[name] = 0
                    self._task_done(name)
                    self._release()
                else:
                    queue.extendleft(reversed(jobs))  # each checked in turn
                continue
            work = check(job)
            if not isinstance(work, JobResult):
                self._start(job, work)
                started = True
                baton.pass_on()  # the job sends its first request before the next is checked
            elif self._settle(job, work):  # its task is done: tasks waiting on it may start
                self._release()
        return started

    def _free(self, entry: Job | tuple[str, Sequence[Job]]) -> bool:
        """Whether a job of the entry's task may start: a slot of its kind is free."""
        name = entry[0] if isinstance(entry, tuple) else entry.task
        if self.batch_jobs and self.batched(name):
            return self._batch_running < self.batch_jobs
        return len(self._running) - self._batch_running < self.jobs

    def _finish(self, job: Job) -> None:
        result, error = self._ends.pop(job)
        self._running.discard(job)
        self._batch_running -= self.batch_jobs > 0 and self.batched(job.task)
        if error is not None:
            raise error
        assert result is not None
        self._settle(job, result)

    def _settle(self, job: Job, result: JobResult) -> bool:
        """True when it was its task's last job."""
        if self.on_result(result):
            self._stopping = True
        left = self._remaining[job.task] = self._remaining[job.task] - 1
        if left:
            return False
        self._task_done(job.task)
        return True

    def _release(self) -> None:
        """Queue the jobs of every waiting task whose upstream tasks are all done."""
        progress = True
        while progress:
            progress = False
            for name in list(self._waiting):
                if all(u in self._done for u in self.upstream(name)):
                    self._waiting.remove(name)
                    jobs = self.expand(name)
                    self._remaining[name] = len(jobs)
                    if jobs:
                        self._queue.append((name, jobs))  # checked together first (_fill)
                    else:
                        self._task_done(name)
                        progress = True

    def _task_done(self, name: str) -> None:
        self.flush()  # its jobs' records before what follows a task (its daily note entry)
        self._done.add(name)
        self.on_task_done(name)

    def _drain(self) -> None:
        """Wait for every job started and report those not reported yet; a second error is
        the first's echo."""
        if self._pool is None or self._ended is None:
            return
        self._pool.shutdown(wait=True)
        while self._ends:
            _, (result, _) = self._ends.popitem()
            if result is not None:  # None: it raised, and the error in flight is the one to say
                self.on_result(result)
        self._running.clear()
        self._batch_running = 0


def _in_turn(
    job: Job, work: Callable[[], JobResult], ends: dict[Job, Ended], ended: SimpleQueue[Job]
) -> None:
    """A job on its thread, taking turns with the other jobs (see `baton`); it says how it
    ended, whatever happens."""
    try:
        with baton.held():
            ends[job] = (work(), None)
    except BaseException as error:
        ends[job] = (None, error)
    ended.put(job)
