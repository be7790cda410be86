"""The tainted-files ledger as a cluster's job sees it on its worker: the coordinator's rows
as the job was shipped (read-only), and what the job marks and clears collected rather than
written — the coordinator applies them to the real ledger before the job's files land
(claw_batch.run.apply)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
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
    ) -> None:
        super().__init__(None, untrusted, hash_file, root)
        self._rows = {rel: Row(sha, source) for rel, (sha, source) in rows.items()}
        self._blobs = {}
        self.marks: dict[str, Mark] = {}  # path -> its last mark
        self.cleared: set[str] = set()

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
