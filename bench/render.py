"""What rendering costs a fan-out job: its output path (`out/{{ item.stem }}.md`) and a prompt
that prints the item, loops over 20 inputs and reads the item's file, rendered for 10,000
items through claw's own `render()` (the sandboxed, bounded environment), and, for scale,
through a plain `jinja2.Environment` and Jinja's `ImmutableSandboxedEnvironment` with the
same options and no bounds. Interleaved, --runs times each; templates are compiled once, as
in a run. A no-op run renders nothing (bench/noop.py): this is the cost of a job that runs.

    python bench/render.py [--items 10000] [--runs 5]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _common import machine, median, table, use_repo

use_repo()

import jinja2  # noqa: E402
from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: E402

from claw_batch.plan import render  # noqa: E402

PATH = "out/{{ item.stem }}.md"
PROMPT = (
    "Summarise {{ item.path }} ({{ item.stem }}) for {{ task }} on {{ today }}.\n"
    "{% for f in inputs %}- {{ f }}\n{% endfor %}{{ read(item.path) }}\n"
)
INPUTS = [f"notes/{i}.md" for i in range(20)]

Renderer = Callable[[render.Item], None]


def claw_renderer(root: Path) -> Renderer:
    def one(item: render.Item) -> None:
        render.render(PATH, "clawfile.yaml:tasks.t", {"item": item}, root=root)
        variables = {"item": item, "task": "t", "today": "2026-11-24", "inputs": INPUTS}
        render.render(PROMPT, "prompts/t.md", variables, root=root)

    return one


def jinja_renderer(root: Path, environment: type[jinja2.Environment]) -> Renderer:
    env = environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    path, prompt = env.from_string(PATH), env.from_string(PROMPT)
    read = render.helpers(root)["read"]

    def one(item: render.Item) -> None:
        path.render(item=item)
        prompt.render(item=item, task="t", today="2026-11-24", inputs=INPUTS, read=read)

    return one


def timed(one: Renderer, items: int) -> float:
    start = time.perf_counter()
    for i in range(items):
        one(render.Item.of(f"notes/{i % 20}.md"))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="claw-bench-render-"))
    (root / "notes").mkdir()
    for i in range(20):
        (root / f"notes/{i}.md").write_text(f"note {i}\n" * 20)
    renderers = {
        "plain jinja2.Environment": jinja_renderer(root, jinja2.Environment),
        "ImmutableSandboxedEnvironment": jinja_renderer(root, ImmutableSandboxedEnvironment),
        "claw: render() (sandboxed, bounded)": claw_renderer(root),
    }
    times: dict[str, list[float]] = {name: [] for name in renderers}
    for one in renderers.values():
        timed(one, 1)  # compile
    for _ in range(args.runs):
        for name, one in renderers.items():
            times[name].append(timed(one, args.items))
    print(machine())
    print()
    rows = [
        (name, f"{median(t):.3f}", f"{min(t):.3f}", f"{median(t) / args.items * 1e6:.1f}")
        for name, t in times.items()
    ]
    print(table(("renderer", "median s", "min s", "µs per item (median)"), rows))


if __name__ == "__main__":
    main()
