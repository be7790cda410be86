"""A job's sandbox, made at its first command. Most jobs run none (their tools only read):
they do not import bubblewrap and what it starts commands with (ctypes for the id-mapped
mount, the seccomp filter, the mount plan, the ceilings: ~6 ms before a run's first request)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from claw_batch.sandbox.command import Command, Sandbox


class Deferred:
    def __init__(self, name: str, make: Callable[[], Sandbox]) -> None:
        self.name = name
        self._make = make

    @functools.cached_property
    def _sandbox(self) -> Sandbox:
        return self._make()

    def wrap(
        self, command: Command, *, cwd: Path, seconds: float
    ) -> AbstractContextManager[Command]:
        return self._sandbox.wrap(command, cwd=cwd, seconds=seconds)
