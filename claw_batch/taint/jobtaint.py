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

An untainted job's commands are watched (claw_batch.taint.bash): one that reads outside
content (`cat` of a tainted file, a listing of a watched folder, `git diff --cached` while
something is staged) gets its output fenced and taints the job, and so what that call wrote
(a copy); one that renames or links such a file without reading it leaves the new name
tainted. Outside content that lands while the command runs (another job's, under -j: an
output, or the files of a tainted job's command, unmarked until it ends) was not watched:
the command counts as having read it. An untainted job that edits a tainted file in place
leaves it tainted: what it kept of the file is still the outside content. Which files are
tainted, and for which content, the ledger keeps across runs (claw_batch.taint.ledger).

What a job reads before its model is called (its prompt, its inputs, its fan-out item) is
known when it is prepared: it is offered only the tools it may use. What its tools read taints
it mid-run: from then on a call to any other tool is refused, with the reason, as a tool
error the model sees.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

from claw_batch.safety.untrusted import OutsideName, fence
from claw_batch.taint.bash import BashTaint, joined, tainting
from claw_batch.taint.staged import blob_ids
from claw_batch.toolnames import READ_ONLY_TOOLS

if TYPE_CHECKING:
    from claw_batch.plan.render import Upstream
    from claw_batch.safety.paths import Policy
    from claw_batch.taint.ledger import TaintedFiles, Writer

READ_ONLY = frozenset(READ_ONLY_TOOLS)


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
        self._sources = list(dict.fromkeys(sources))
        self._lock = threading.Lock()
        self._bash: BashTaint | None = None  # its commands: when what they write is recorded
        if files is not None and writer is not None:
            self._bash = BashTaint(files, writer, bash_dirs, self.allow, self.saw)

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

    def any_outside(self, policy: Policy, rels: Iterable[str]) -> bool:
        """Whether any of the project files is outside content (a listing's entries)."""
        if self.files is None:
            return any(policy.is_untrusted(rel) for rel in rels)
        return self.files.any_outside(rels)

    def fenced(self, text: str, source: str) -> str:
        """The text as the model gets outside content; the job is tainted from now on."""
        self.saw(source)
        return fence(text, source)

    def refusal(self, tool: str) -> str | None:
        """Why the job may not call `tool` now; None when it may."""
        source = self.source
        if source is None or tool in READ_ONLY or tool in self.allow:
            return None
        server, mcp, remote = tool.partition("__")  # an MCP tool: granted as mcp.S.T
        granted = f"mcp.{server}.{remote}" if mcp else tool
        return (
            f"refused: {tool}: this job read outside content ({source}), so it may use only "
            f"read-only tools ({', '.join(READ_ONLY_TOOLS)}); its task can grant more with "
            f"untrusted: {{allow: [{granted}]}}"
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
            sha256 = hashlib.sha256(data).hexdigest()
            self.files.mark(rel, sha256, source, self.writer, blob_ids(data))
            yield
        else:
            yield
            self.files.clear(rel)

    def run(self, tool: str, root: str, invoke: Callable[[], str]) -> str:
        """Call a tool. Around bash: a tainted job's command taints every file it made or
        changed in its write directories; an untainted job's is watched, and its output
        fenced when it read outside content (claw_batch.taint.bash)."""
        bash = self._bash
        if tool != "bash" or bash is None:
            return invoke()
        source = self.source
        if source is not None:
            return bash.tainted(source, root, invoke)
        output, read = bash.watched(root, invoke)
        return self.fenced(output, read) if read is not None else output

    def server_call(
        self, source: str, root: str, dirs: tuple[str, ...], invoke: Callable[[], str]
    ) -> str:
        """Around an MCP server's call: every file the server made or changed in its write
        directories `dirs` meanwhile is outside content, tainted with `source`, whatever
        this job has read (claw_batch.tools.mcptool)."""
        if self.files is None or self.writer is None or not dirs:
            return invoke()
        return tainting(self.files, self.writer, source, root, dirs, invoke)

    def watching(self) -> AbstractContextManager[None]:
        """Around the command itself (BashTaint.watching)."""
        return self._bash.watching() if self._bash is not None else nullcontext()


def holds_marked(workspace: str, rel: str, lines: Iterable[str]) -> bool:
    """Whether lines of a memory file (MEMORY.md, the daily notes, the archive) are outside
    content: facts a tainted job remembered, a daily note's quotes of such a job."""
    if rel != f"{workspace}/MEMORY.md" and not rel.startswith(f"{workspace}/memory/"):
        return False
    from claw_batch.memory.memoryfile import (
        is_untrusted,  # only for memory files: it imports skills
    )
    from claw_batch.memory.notes import OUTSIDE

    return any(is_untrusted(line) or line.startswith(OUTSIDE) for line in lines)


# --- what a template sees -----------------------------------------------------------------------


class FencedUpstream:
    """`needs.X` of an upstream whose jobs read outside content: its result reaches the
    template fenced, and so does its output's name (a fan-out's is its item's: a dropped
    file's); either taints the job that reads it. Nothing else of it is reachable: the
    sandbox refuses attributes that start with '_'."""

    __slots__ = ("_name", "_saw", "_upstream")

    def __init__(self, name: str, upstream: Upstream, saw: Callable[[str], None]) -> None:
        self._name, self._upstream, self._saw = name, upstream, saw

    def __repr__(self) -> str:  # what `{{ needs.X }}` prints: nothing of the upstream's
        return f"<needs.{self._name}: read outside content; see .result and .output>"

    @property
    def output(self) -> str | None:
        output = self._upstream.output
        if output is None:
            return None
        source = f"needs.{self._name}.output"
        self._saw(source)
        return OutsideName(output, source)

    @property
    def result(self) -> str:
        source = f"needs.{self._name}.result"
        self._saw(source)
        return fence(self._upstream.result, source)


def needs_view(upstream: dict[str, Upstream], saw: Callable[[str], None]) -> dict[str, Any]:
    """`needs` for one job's templates: a tainted upstream's result fenced."""
    return {
        name: FencedUpstream(name, up, saw) if up.tainted else up for name, up in upstream.items()
    }
