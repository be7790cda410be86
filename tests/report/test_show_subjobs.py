"""`claw show` follows a `delegate` event only to a transcript inside .claw/runs/: whatever a
transcript says, no other file of the project (or of the machine) is read and printed."""

from __future__ import annotations

from pathlib import Path

from helpers import claw, make_project

from claw_batch.safety.redact import Redactor
from claw_batch.store.transcript import Transcript

RUN = "20261122-230500-a1b2c3"


def test_a_delegate_event_naming_a_file_outside_the_runs_is_not_followed(
    tmp_path: Path,
) -> None:
    root = make_project(
        tmp_path / "p",
        """
        version: 1
        tasks:
          lead:
            prompt: hi
        """,
        {"notes/secret.jsonl": '{"type": "user", "content": "the secret note"}\n'},
    )
    t = Transcript(root / ".claw" / "runs" / RUN / "lead.jsonl", Redactor([]))
    t.event("start", job="lead")
    for i, where in enumerate(("notes/secret.jsonl", str(root / "notes/secret.jsonl"), "/etc")):
        t.event("delegate", task=None, job=f"lead<{i:08x}>", status="ok", transcript=where)
    t.event("delegate", task=None, job="lead<0000000f>", status="ok", transcript=None)
    gone = ".claw/runs/20261121-100000-000000/lead<0000000e>.jsonl"
    t.event("delegate", task=None, job="lead<0000000e>", status="up to date", transcript=gone)
    t.event("end", status="ok", seconds=1.0)
    t.close()
    shown = claw(root, "show", RUN)
    assert shown.exit_code == 0, shown.stderr
    assert shown.stdout.splitlines()[1:] == [
        "== lead",
        "      ↳ sub-job lead<00000000>: ok",
        "      ↳ sub-job lead<00000001>: ok",
        "      ↳ sub-job lead<00000002>: ok",
        "      ↳ sub-job lead<0000000f>: ok",
        "      ↳ sub-job lead<0000000e>: up to date",
        f"        (its transcript {gone} is no longer kept)",
        "== ok (1.0 s)",
        "",
    ]
