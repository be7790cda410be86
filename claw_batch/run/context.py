"""What the jobs of one run share: the values fixed when it starts (RunContext), and what
it learns as it goes (RunCache)."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from claw_batch import globs
from claw_batch.config import Project
from claw_batch.llm.endpoints import Models
from claw_batch.plan.fingerprint import TaskParts
from claw_batch.plan.render import Upstream, joined
from claw_batch.safety.control import Control
from claw_batch.skills.skill import Skill

if TYPE_CHECKING:
    from claw_batch.agent.budget import Spend
    from claw_batch.run.prepare import TaskSame
    from claw_batch.run.servers import RunServers
    from claw_batch.taint.ledger import TaintedFiles


@dataclass(frozen=True)
class RunContext:
    """What every job of one run shares, fixed when the run starts."""

    project: Project
    models: Models
    now: dt.datetime
    env: Mapping[str, str]  # the scrubbed environment for tool processes
    files: tuple[str, ...] = ()
    model_override: str | None = None
    skills: tuple[Skill, ...] = ()  # discovered once per run
    spend: Spend | None = None  # what the run's jobs may spend (None: a dry run)
    redact: Callable[[str], str] = str  # the run's Redactor
    tainted: TaintedFiles | None = None  # which files are outside content (None: the globs)
    force: bool = False  # -B: a fresh answer, nothing replayed from the call cache
    servers: RunServers | None = None  # its MCP servers, when a task uses one
    warn: Callable[[str], None] = lambda _: None  # a warning said once, on the terminal

    @property
    def workspace(self) -> str:
        return self.project.config.workspace

    def outside(self, rel: str) -> bool:
        """Whether a project file is outside content: watched, or written by a tainted job."""
        if self.tainted is not None:
            return self.tainted.outside(rel)
        return any(globs.match(g, rel) for g in self.project.config.untrusted)


class RunCache:
    """What a run learns as it goes: what each task produced, which the tasks that need it
    read (their templates its results as `needs.X`, their fingerprints its outputs' hashes);
    and what is the same for every job of a task, computed once. Jobs end on threads (-j):
    what they produced is added under a lock. What no task reads is not kept: a fan-out of
    100,000 jobs that nothing needs would hold every output's hash and every answer."""

    def __init__(self, readers: Callable[[str], Sequence[str]]) -> None:
        self.readers = readers  # the tasks after a task that read what it produced
        self.upstream: dict[str, Upstream] = {}  # task -> what `needs.<task>` shows
        self._outputs: dict[str, dict[str, str | None]] = {}  # task -> its outputs' hashes
        self._parts: dict[str, TaskParts] = {}
        self._same: dict[str, TaskSame] = {}
        self._control: Control | None = None  # the project's control paths, once read
        self._lock = threading.Lock()

    def produced(
        self,
        task: str,
        outputs: Mapping[str, str | None],
        output: str | None,
        text: str,
        tainted: str | None,
    ) -> None:
        """A job of `task` made `text` (written to `output`) and left `outputs` with these
        hashes; `tainted`: the outside content it read (its text is shown fenced)."""
        if not self.readers(task):
            return
        with self._lock:
            self._outputs.setdefault(task, {}).update(outputs)
            self.upstream[task] = joined(self.upstream.get(task), output, text, tainted)

    def outputs_of(self, tasks: Iterable[str]) -> dict[str, str | None]:
        """The outputs of these tasks and their hashes, as their jobs left them."""
        out: dict[str, str | None] = {}
        with self._lock:
            for name in tasks:
                out.update(self._outputs.get(name, {}))
        return out

    def parts(self, task: str, compute: Callable[[], TaskParts]) -> TaskParts:
        if task not in self._parts:
            self._parts[task] = compute()
        return self._parts[task]

    def same(self, task: str, compute: Callable[[], TaskSame]) -> TaskSame:
        """What every job of the task is offered and granted, computed once."""
        if task not in self._same:
            self._same[task] = compute()
        return self._same[task]

    def control(self, compute: Callable[[], Control]) -> Control:
        if self._control is None:
            self._control = compute()
        return self._control
