"""The tainted-files ledger as a cluster's job sees it on its worker: the coordinator's rows
as the job was shipped (read-only), the staged files' working-tree copies as the coordinator
found them (no git on a worker), and what the job marks and clears collected rather than
written — the coordinator applies them to the real ledger before the job's files land
(claw_batch.run.apply)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from claw_batch.taint.ledger import Row, TaintedFiles, Writer


@dataclass(frozen=True)
class Mark:
    """A file the job left holding outside content (`source`), as the job wrote it."""

    rel: str
    sha256: str
    source: str


class TaintView(TaintedFiles):
    """TaintedFiles with no ledger behind it: `rows` as shipped, marks and clears kept."""

    def __init__(
        self,
        rows: Mapping[str, tuple[str, str]],
        untrusted: tuple[str, ...],
        hash_file: Callable[[str], str | None],
        root: str | None = None,
        *,
        staged: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(None, untrusted, hash_file, root)
        self._rows = {rel: Row(sha, source) for rel, (sha, source) in rows.items()}
        # The working-tree copies of staged files, as the coordinator found them (path ->
        # the copy's sha256): outside content while they hold those bytes, as locally.
        self.staged_copies = dict(staged or {})
        self._blobs = {}
        self.marks: dict[str, Mark] = {}  # path -> its last mark
        self.cleared: set[str] = set()

    def outside(self, rel: str) -> bool:
        return super().outside(rel) or self._staged_copy(rel)

    def any_outside(self, rels: Iterable[str]) -> bool:
        rels = list(rels)
        return super().any_outside(rels) or any(self._staged_copy(rel) for rel in rels)

    def _staged_copy(self, rel: str) -> bool:
        sha = self.staged_copies.get(rel)
        if sha is None:
            return False
        try:
            return self.hash_file(rel) == sha
        except OSError:  # unreadable now: what it holds may still be that
            return True

    def mark(
        self, rel: str, sha256: str, source: str, writer: Writer, blobs: tuple[str, ...] = ()
    ) -> None:
        super().mark(rel, sha256, source, writer, blobs)
        self.marks[rel] = Mark(rel, sha256, source)
        self.cleared.discard(rel)

    def clear(self, rel: str) -> None:
        super().clear(rel)
        self.marks.pop(rel, None)
        self.cleared.add(rel)


def shipped_rows(files: TaintedFiles) -> dict[str, tuple[str, str]]:
    """The coordinator's rows, as a job ships them."""
    return {rel: (row.sha256, row.source) for rel, row in files.rows.items()}
