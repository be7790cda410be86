"""Jobs on N threads in dependency order: a task's jobs start once every task it depends on
has finished (its fan-out is expanded then, when the upstream's files exist); jobs of one
task, and of independent tasks, run side by side."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from claw_batch import cancel
from claw_batch.plan.jobs import Job
from claw_batch.run.results import JobResult

if TYPE_CHECKING:
    from concurrent.futures import Future, ThreadPoolExecutor
    from queue import SimpleQueue


class Scheduler:
    def __init__(
        self,
        *,
        jobs: int,
        upstream: Callable[[str], tuple[str, ...]],
        expand: Callable[[str], list[Job]],
        check: Callable[[Job], JobResult | Callable[[], JobResult]],
        # A task's jobs settled at once when none of them need run (the quick check of a
        # whole task); False: each is checked in turn.
        settle_all: Callable[[str, list[Job]], bool],
        on_result: Callable[[JobResult], bool],  # True: start no more jobs
        on_task_done: Callable[[str], None],
    ) -> None:
        self.jobs = max(1, jobs)
        self.upstream = upstream
        self.expand = expand
        self.check = check  # a result (up to date, skipped…), or the work to do on a thread
        self.settle_all = settle_all
        self.on_result = on_result
        self.on_task_done = on_task_done
        self._waiting: list[str] = []
        self._done: set[str] = set()
        self._remaining: dict[str, int] = {}
        # Jobs in the order they are checked; a task's come in as one entry (settle_all)
        self._queue: deque[Job | tuple[str, list[Job]]] = deque()
        self._running: dict[Future[JobResult], Job] = {}
        self._ended: SimpleQueue[Future[JobResult]] | None = None  # futures, as they end
        self._stopping = False
        self._pool: ThreadPoolExecutor | None = None  # started with the first job to run

    def run(self, tasks: list[str]) -> None:
        self._waiting = list(tasks)
        try:
            self._loop()
        except BaseException:
            # Ctrl-C, or a job that stops the run: the others notice and end quickly
            cancel.cancel()
            self._drain()
            raise
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)

    def _loop(self) -> None:
        while True:
            self._fill()
            if not self._running:
                return
            # A queue the jobs' futures report to as they end, not concurrent.futures.wait:
            # that takes every running future's lock twice per call, and is called once a
            # job ends: at -j 200, 2,000 jobs cost ~800,000 lock operations.
            from queue import Empty  # imported by _submit

            ended = self._ended
            assert ended is not None  # made by _submit, which made the running futures
            try:
                future = ended.get(timeout=cancel.POLL)
            except Empty:
                continue
            self._finish(future)
            while not ended.empty():  # those that ended meanwhile, before filling
                self._finish(ended.get())

    def _submit(self, work: Callable[[], JobResult]) -> Future[JobResult]:
        if self._pool is None or self._ended is None:
            from concurrent.futures import ThreadPoolExecutor
            from queue import SimpleQueue

            self._pool = ThreadPoolExecutor(self.jobs, thread_name_prefix="claw-job")
            self._ended = SimpleQueue()
        future = self._pool.submit(work)
        future.add_done_callback(self._ended.put)
        return future

    def _fill(self) -> None:
        """Start jobs while there are free slots; a job that need not run (up to date,
        skipped) is settled here at once, which may release its dependents."""
        self._release()
        queue, running, check = self._queue, self._running, self.check
        while queue and not self._stopping and len(running) < self.jobs:
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
                running[self._submit(work)] = job
            elif self._settle(job, work):  # its task is done: tasks waiting on it may start
                self._release()

    def _finish(self, future: Future[JobResult]) -> None:
        job = self._running.pop(future)
        self._settle(job, future.result())

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
        self._done.add(name)
        self.on_task_done(name)

    def _drain(self) -> None:
        """Wait for the running jobs and report them; a second error is the first's echo."""
        for future in list(self._running):
            try:
                outcome = future.result()
            except BaseException:  # the error in flight is the one to report
                continue
            self._running.pop(future, None)
            self.on_result(outcome)
