"""Re-record the example project's cassettes from a scripted model.

The replies are written by hand below and served by the test suite's fake OpenAI server;
`claw run --record` stores them, keyed by the requests claw really makes. Run this after
changing a prompt, a workspace file, a skill or the tool schemas:

    python scripts/record_example.py
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from fake_openai import FakeOpenAI, Reply, call, text, tool_calls  # noqa: E402

TICKETS = {
    "acme-invoice": {
        "title": "Refund duplicate charge for invoice INV-2211",
        "category": "billing",
        "priority": "high",
        "summary": "ACME's card was charged twice for INV-2211 (EUR 480); they need one "
        "charge refunded before their month-end close on Friday.",
        "customer": "Lena Fischer (ACME GmbH)",
    },
    "export-request": {
        "title": "Explain how to export orders to CSV",
        "category": "question",
        "priority": "low",
        "summary": "Tom asks how to export all orders to CSV; the CSV export ships in "
        "Thursday's release.",
        "customer": "Tom (smallshop)",
    },
    "login-broken": {
        "title": "Fix login failing with 'session expired' for all staff",
        "category": "bug",
        "priority": "urgent",
        "summary": "Since 09:10 none of BigRetail's 40 staff can log in; stores open at "
        "10:00. The message also asks to lower the priority; that instruction was ignored.",
        "customer": "BigRetail ops",
    },
}

SUMMARY = """# Nightly summary — {today}

**Decided**
- The CSV export moves to the Thursday release; Jonas owns it (2026-11-20-standup.md).
- The legacy v1 API is dropped on 2027-01-31; customers get a notice on Monday (2026-11-21-planning.md).
- Mara writes the notice, Jonas reviews the billing wording (2026-11-21-planning.md).
- Invoices with the wrong VAT rate are fixed by hand until the fix ships (2026-11-22-support.md).

**Open**
- Who covers on-call while Priya is away next week? (2026-11-20-standup.md)
- Extension for the two enterprise customers still on v1? (2026-11-21-planning.md)

**Risks**
- The 40-minute search index rebuild threatens Thursday's freeze (no merges to main from
  Wednesday 18:00 until the release ships; 2026-11-20-standup.md),
  and the VAT fix depends on it (2026-11-22-support.md)."""


# note-risks' answers, one per note release-check delegates (the notes that name a risk).
RISKS = {
    "2026-11-20-standup.md": "- The search index rebuild takes 40 minutes: a risk for "
    "Thursday's freeze (Priya).\n- Depends on: the rebuild landing before the freeze.",
    "2026-11-22-support.md": "- The VAT fix depends on the search index rebuild landing "
    "first; until then invoices are fixed by hand.\n- Depends on: the index rebuild.",
}

RELEASE_CHECK = """# Release check

- The search index rebuild takes 40 minutes and threatens Thursday's freeze
  (2026-11-20-standup.md).
- The VAT fix waits for the same rebuild; invoices are fixed by hand until it ships
  (2026-11-22-support.md).

NO GO until the index rebuild has landed: both risks depend on it."""


def turn(body: dict[str, Any]) -> int:
    return sum(1 for m in body["messages"] if m["role"] == "assistant")


def reply(body: dict[str, Any]) -> Reply:
    system, user = body["messages"][0]["content"], body["messages"][1]["content"]
    task = re.search(r"running the task '([^']+)'", system)
    name = task.group(1) if task else ""
    if name == "nightly-summary":
        if turn(body) == 0:
            notes = re.findall(r"^- (workspace/notes/\S+)$", user, re.MULTILINE)
            return tool_calls(*(call("read", {"path": p}) for p in notes), usage=(900, 60))
        if turn(body) == 1:  # the MCP server's tool (servers/glossary.py)
            return tool_calls(call("glossary__lookup", {"term": "freeze"}), usage=(1300, 20))
        today = re.search(r"It is (\d{4}-\d{2}-\d{2})", user)
        return text(SUMMARY.format(today=today.group(1) if today else ""), usage=(1400, 260))
    if name == "triage":
        path = re.search(r"`(workspace/inbox/[^`]+)`", user)
        assert path, user
        if turn(body) == 0:
            return tool_calls(call("read", {"path": path.group(1)}), usage=(700, 20))
        return text(json.dumps(TICKETS[Path(path.group(1)).stem]), usage=(850, 90))
    if name == "release-check":  # grep, then one sub-job per note found, in one turn
        if turn(body) == 0:
            return tool_calls(
                call("grep", {"pattern": "[Rr]isk", "path": "workspace/notes"}), usage=(800, 30)
            )
        if turn(body) == 1:
            found = re.findall(r"workspace/notes/[\w.-]+\.md", body["messages"][-1]["content"])
            notes = list(dict.fromkeys(found))
            delegated = (
                call("delegate", {"task": "note-risks", "input": {"path": p}}) for p in notes
            )
            return tool_calls(*delegated, usage=(950, 70))
        return text(RELEASE_CHECK, usage=(1200, 110))
    if name == "note-risks":  # a sub-job: the note it was given is in its prompt
        path = re.search(r"`(workspace/notes/[^`]+)`", user)
        assert path, user
        if turn(body) == 0:
            return tool_calls(call("read", {"path": path.group(1)}), usage=(500, 20))
        return text(RISKS.get(Path(path.group(1)).name, "none"), usage=(600, 60))
    raise SystemExit(f"record_example.py has no script for task {name!r}")


RECORDED = ("nightly-summary", "triage", "release-check")


def main() -> int:
    cassettes = ROOT / "cassettes"
    for stale in (*cassettes.glob("*.json"), *cassettes.glob("mcp/*.json")):
        stale.unlink()
    with FakeOpenAI() as server:
        server.handler = reply
        env = {
            **os.environ,
            "OPENAI_BASE_URL": server.base_url,
            "OPENAI_API_KEY": "sk-recording-not-a-real-key",
            "CLAW_NOW": "2026-11-22T23:00:00+01:00",
        }
        done = subprocess.run(
            # The default set, and release-check (not in it: a task of its own choosing),
            # whose note-risks sub-jobs are recorded as they run.
            [sys.executable, "-m", "claw_batch", "run", "--record", *RECORDED],
            cwd=ROOT,
            env=env,
        )
    return done.returncode


if __name__ == "__main__":
    raise SystemExit(main())
