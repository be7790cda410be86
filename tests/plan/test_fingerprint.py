"""A job's fingerprint: its value, and the parts `claw why` reads."""

from __future__ import annotations

from typing import Any

from claw_batch.plan.fingerprint import fingerprint
from claw_batch.plan.uptodate import explain

JOB: dict[str, Any] = {
    "task": "t",
    "prompt": "p",
    "system": "s",
    "model": "m@None",
    "tools": "x",
    "inputs": {"in.md": "h"},
    "upstream": {},
}


def test_the_skills_kept_by_name_leave_the_value_a_ledger_holds() -> None:
    """The value this job had before its skills were kept by name, which ledgers written
    then hold: upgrading claw reruns nothing, whatever the parts now keep beside it."""
    fp = fingerprint(**JOB, skills={"pdf": "a", "docx": "b"}, context="c", skills_tokens=5)
    assert fp.value == "f00db94d732793de0733150631bff80cb796b14e28d5a4a009cadd296f5ca7e4"
    assert fp.parts["skill_files"] == {"docx": "b", "pdf": "a"}


def test_a_last_success_from_an_older_ledger_is_explained_as_before() -> None:
    new = fingerprint(**JOB, skills={"pdf": "a"}, context="c", skills_tokens=5)
    old = {**new.parts, "system": "before", "skills": "a digest of other skills"}
    del old["skill_files"], old["context"], old["skills_tokens"]
    assert explain(old, new.parts) == [
        "context (workspace files or skills list) changed",
        "skill files changed",
    ]
