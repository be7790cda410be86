"""A job's taint: the outside content it has read, and what that leaves it free to do.

One rule for every job (a watch task's, a hook's, one that reads another job's output): a job
is tainted once outside content reaches its model — a watched or dropped file, a staged diff,
a file a tainted job wrote, the result of a tainted upstream, facts and notes marked as
coming from such jobs. Every such content reaches the model fenced (`untrusted.fence`), and
every fence taints. A tainted job

- may use only the read-only tools (`READ_ONLY_TOOLS`), plus what its own task grants in
  `untrusted: {allow: [...]}` (never a default);
- taints what it writes: its output, every file its write and edit tools write, and, when it
  is granted bash, every file in its write directories that a command made or changed;
- remembers facts marked with what it read, and its daily-note quote never enters a system
  prompt.

An untainted job that changes a tainted file in place (edit, `sed -i`) leaves it tainted: what
it kept of the file is still the outside content. Which files are tainted, and for which
content, the ledger keeps across runs (claw_batch.taintledger).

What a job reads before its model is called (its prompt, its inputs, its fan-out item) is
known when it is prepared: it is offered only the tools it may use. What its tools read taints
it mid-run: from then on a call to any other tool is refused, with the reason, as a tool
error the model sees.
"""

from __future__ import annotations

import hashlib
import os
import stat
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from claw_batch.tools import READ_ONLY_TOOLS
from claw_batch.untrusted import fence

if TYPE_CHECKING:
    from claw_batch.paths import Policy
    from claw_batch.render import Upstream
    from claw_batch.taintledger import TaintedFiles, Writer

READ_ONLY = frozenset(READ_ONLY_TOOLS)
NEVER_WALKED = frozenset({".git", ".claw"})  # runner state, git's: no command writes there


def joined(sources: list[str]) -> str | None:
    """What a mark or a refusal says the job read: the first source, and how many more."""
    if not sources:
        return None
    return sources[0] + (f" and {len(sources) - 1} more" if len(sources) > 1 else "")


class JobTaint:
    """What one job has read from outside so far; its tools and the tool loop ask it."""

    def __init__(
        self,
        *,
        sources: tuple[str, ...] = (),
        files: TaintedFiles | None = None,
        allow: tuple[str, ...] = (),
        tools: tuple[str, ...] = (),
        writer: Writer | None = None,
        bash_dirs: tuple[str, ...] = (),
    ) -> None:
        self.files = files  # None: only the policy's watch globs say what is outside
        self.allow = frozenset(allow)  # the task's `untrusted.allow`
        self.tools = tools  # the task's own tools, to say why one is withheld
        self.writer = writer  # the job, for the ledger's rows (None: nothing recorded)
        self.bash_dirs = bash_dirs  # where its commands may write ("" is the project root)
        self._sources = list(dict.fromkeys(sources))
        self._lock = threading.Lock()

    @property
    def source(self) -> str | None:
        """What the job has read from outside (None: nothing): what marks and refusals say."""
        with self._lock:
            return joined(self._sources)

    def saw(self, source: str) -> None:
        with self._lock:
            if source not in self._sources:
                self._sources.append(source)

    def outside(self, policy: Policy, rel: str) -> bool:
        """Whether a project file is outside content: watched, or written by a tainted job."""
        if self.files is None:
            return policy.is_untrusted(rel)
        return self.files.outside(rel)

    def fenced(self, text: str, source: str) -> str:
        """The text as the model gets outside content; the job is tainted from now on."""
        self.saw(source)
        return fence(text, source)

    def refusal(self, tool: str) -> str | None:
        """Why the job may not call `tool` now; None when it may."""
        source = self.source
        if source is None or tool in READ_ONLY or tool in self.allow:
            return None
        return (
            f"refused: {tool}: this job read outside content ({source}), so it may use only "
            f"read-only tools ({', '.join(READ_ONLY_TOOLS)}); its task can grant more with "
            f"untrusted: {{allow: [{tool}]}}"
        )

    def withheld(self, tool: str) -> bool:
        """Whether the task has `tool` and the taint takes it away."""
        return tool in self.tools and self.refusal(tool) is not None

    @contextmanager
    def writing(self, rel: str, data: bytes, kept: str | None = None) -> Iterator[None]:
        """Around a write of `data` to `rel` by the job or for it (its output): a tainted job's
        content is recorded as tainted before it lands; an untainted job's clears the path.
        `kept`: the file was outside content and the new one keeps some of it (an edit)."""
        source = self.source or kept
        if self.files is None or self.writer is None:
            yield
        elif source is not None:
            self.files.mark(rel, hashlib.sha256(data).hexdigest(), source, self.writer)
            yield
        else:
            yield
            self.files.clear(rel)

    def run(self, tool: str, root: str, invoke: Callable[[], str]) -> str:
        """Call a tool. Around bash: a tainted job's command taints every file it made or
        changed in its write directories; an untainted job's keeps the taint of a tainted
        file it changed in place (`sed -i` does not launder)."""
        files, writer = self.files, self.writer
        if tool != "bash" or files is None or writer is None:
            return invoke()
        source = self.source
        if source is None:
            return _keeping(files, writer, self.bash_dirs, invoke)
        return _tainting(files, writer, source, root, self.bash_dirs, invoke)


def _keeping(
    files: TaintedFiles, writer: Writer, dirs: tuple[str, ...], invoke: Callable[[], str]
) -> str:
    """`invoke`, then the tainted files under `dirs` that it changed are tainted still."""
    kept = files.tainted_under(dirs)
    before = {rel: files.hash_file(rel) for rel in kept}
    try:
        return invoke()
    finally:
        for rel, origin in kept.items():
            if files.hash_file(rel) not in (before[rel], None):
                files.mark_file(rel, origin, writer)


def _tainting(
    files: TaintedFiles,
    writer: Writer,
    source: str,
    root: str,
    dirs: tuple[str, ...],
    invoke: Callable[[], str],
) -> str:
    """`invoke`, then every file under `dirs` that it made or changed is tainted."""
    before = _stat_keys(root, dirs)
    try:
        return invoke()
    finally:
        after = _stat_keys(root, dirs)
        for rel in sorted(rel for rel, key in after.items() if before.get(rel) != key):
            files.mark_file(rel, source, writer)


def holds_marked(workspace: str, rel: str, lines: Iterable[str]) -> bool:
    """Whether lines of a memory file (MEMORY.md, the daily notes, the archive) are outside
    content: facts a tainted job remembered, a daily note's quotes of such a job."""
    if rel != f"{workspace}/MEMORY.md" and not rel.startswith(f"{workspace}/memory/"):
        return False
    from claw_batch.memoryfile import is_untrusted  # only for memory files: it imports skills
    from claw_batch.notes import OUTSIDE

    return any(is_untrusted(line) or line.startswith(OUTSIDE) for line in lines)


def _stat_keys(root: str, dirs: tuple[str, ...]) -> dict[str, tuple[int, int, int]]:
    """Every regular file under the directories (symlinks not followed): its stat key."""
    found: dict[str, tuple[int, int, int]] = {}
    for top in dirs:
        base = os.path.join(root, top) if top else root
        for dirpath, dirnames, filenames in os.walk(base):
            rel_dir = os.path.relpath(dirpath, root)
            if rel_dir == ".":
                dirnames[:] = [d for d in dirnames if d not in NEVER_WALKED]
            for name in filenames:
                try:
                    st = os.lstat(os.path.join(dirpath, name))
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode):
                    rel = name if rel_dir == "." else f"{rel_dir}/{name}"
                    found[rel] = (st.st_mtime_ns, st.st_size, st.st_ino)
    return found


# --- what a template sees -----------------------------------------------------------------------


@dataclass(frozen=True)
class FencedUpstream:
    """`needs.X` of an upstream whose jobs read outside content: its result reaches the
    template fenced, and taints the job that reads it."""

    name: str
    upstream: Upstream
    saw: Callable[[str], None]

    @property
    def output(self) -> str | None:
        return self.upstream.output

    @property
    def result(self) -> str:
        source = f"needs.{self.name}.result"
        self.saw(source)
        return fence(self.upstream.result, source)


def needs_view(upstream: dict[str, Upstream], saw: Callable[[str], None]) -> dict[str, Any]:
    """`needs` for one job's templates: a tainted upstream's result fenced."""
    return {
        name: FencedUpstream(name, up, saw) if up.tainted else up for name, up in upstream.items()
    }
