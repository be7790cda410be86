"""A run's transcripts as a tree (`claw show`): a sub-job's (`delegate`) under its parent, at
the point of the parent's `delegate` event, from the events themselves and the ledger's
`jobs.parent`; a transcript is only ever read from inside .claw/runs/."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from claw_batch.store.history import JobRow
from claw_batch.store.transcript import read_events

DEEPEST = 5  # delegate.max_depth is at most 5: a deeper chain is not claw's


class Nest:
    def __init__(self, root: Path, paths: Sequence[Path], jobs: Sequence[JobRow]) -> None:
        self.runs = (root / ".claw" / "runs").resolve()
        self.root = root
        self.paths = [p.resolve() for p in paths]
        self._events: dict[Path, list[dict[str, Any]]] = {}
        self.parent: dict[Path, str] = {}  # a sub-job's transcript -> its parent job's name
        self.in_place: set[Path] = set()  # those a parent's `delegate` event names
        for path in self.paths:
            parent = self.name(path)
            for event in self.events(path):
                child = self.delegated(event)
                if child is not None:
                    self.parent.setdefault(child, parent)
                    self.in_place.add(child)
        for job in jobs:  # a sub-job no event names (its parent's transcript is gone)
            child = self._inside(job.transcript) if job.parent else None
            if child is not None and job.parent is not None:
                self.parent.setdefault(child, job.parent)

    def events(self, path: Path) -> list[dict[str, Any]]:
        if path not in self._events:
            self._events[path] = read_events(path) if path.is_file() else []
        return self._events[path]

    def name(self, path: Path) -> str:
        """The job's name as its `start` event gives it (else the file's)."""
        first = next((e for e in self.events(path) if e.get("type") == "start"), {})
        return str(first.get("job") or path.stem)

    def delegated(self, event: Mapping[str, Any]) -> Path | None:
        """The transcript a `delegate` event names; None for another event, or none kept."""
        if event.get("type", event.get("kind")) != "delegate":
            return None
        return self._inside(event.get("transcript"))

    def _inside(self, value: object) -> Path | None:
        if not isinstance(value, str) or not value:
            return None
        path = Path(value)
        path = (path if path.is_absolute() else self.root / path).resolve()
        return path if path.is_relative_to(self.runs) and path.suffix == ".jsonl" else None

    def selected(self, task: str | None) -> list[Path]:
        """What `claw show RUN [TASK]` begins from: each job that is not shown in place
        under a parent shown too. TASK is a task (its jobs, and its sub-jobs, `TASK<…>`)
        or one job's name."""
        if task is None:
            return [p for p in self.paths if p not in self.in_place]
        chosen = [p for p in self.paths if _matches(p.stem, task) or _matches(self.name(p), task)]
        shown = set(chosen)
        return [p for p in chosen if not (p in self.in_place and self._shown_above(p, shown))]

    def _shown_above(self, path: Path, shown: set[Path]) -> bool:
        parent = self.parent.get(path)
        above = [p for p in self.paths if self.name(p) == parent]
        return any(p in shown or self._shown_above(p, shown) for p in above if p != path)

    def whose(self, path: Path) -> str | None:
        return self.parent.get(path)


def _matches(name: str, task: str) -> bool:
    return name == task or name.startswith((task + "[", task + "<"))
