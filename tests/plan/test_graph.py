from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import claw, make_project

from claw_batch.clawfile.validate import ClawfileModel
from claw_batch.config import Clawfile
from claw_batch.errors import ClawfileError
from claw_batch.globs import match
from claw_batch.plan.graph import Graph, Via, analyse, build, can_match


def config(**tasks: dict[str, Any]) -> Clawfile:
    """A clawfile of these tasks (each with a prompt), validated field by field only: the
    graph's own checks are what is under test."""
    document = {"tasks": {n: {"prompt": "hi", **t} for n, t in tasks.items()}}
    return Clawfile.of(ClawfileModel.model_validate(document).model_dump(mode="json"))


def error(cfg: Clawfile) -> str:
    with pytest.raises(ClawfileError) as exc:
        build(cfg)
    return str(exc.value)


# --- can a glob match what an output template names ----------------------------------------

PATTERNS = [
    "*.md",
    "d/*.md",
    "?.md",
    "a?b",
    "**/*.md",
    "a/**",
    "a/**/b.txt",
    "**",
    "a**b",
    "[ab].txt",
    "[!ab].txt",
    "[!a]",
    "[a-c]1",
    "[]]",
    "[abc",
    "*.{md,txt}",
    "{a,b/**}/x",
    "x{**/a,b}",
    "{x}",
]
PATHS = ["x.md", "d/x.md", "d/e/x.md", "a.md", "ab.md", "a/b", "a/b.txt", "a/x/y/b.txt", "a"]
PATHS += ["axxb", "c.txt", "/", "b1", "]", "[abc", "x.txt", "a/x", "b/c/x", "xa", "xb", "{x}"]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_a_glob_matches_a_static_output_exactly_as_globs_match_does(pattern: str) -> None:
    for path in PATHS:
        assert can_match(pattern, path) == match(pattern, path), path


@pytest.mark.parametrize(
    ("glob", "output", "expected"),
    [
        ("reports/*.md", "reports/{{ today }}.md", True),
        ("reports/2024-*.md", "reports/{{ today }}.md", True),
        ("reports/index.md", "reports/{{ today }}.md", False),  # a date is digits
        ("reports/*.txt", "reports/{{ today }}.md", False),
        ("notes/*.md", "reports/{{ today }}.md", False),
        ("**/*.json", "workspace/tickets/{{ item.stem }}.json", True),
        ("workspace/**", "workspace/tickets/{{ item.stem }}.json", True),
        ("workspace/*", "workspace/tickets/{{ item.stem }}.json", False),
        ("workspace/tickets/*.json", "workspace/tickets/{{item.stem}}.json", True),
        ("out/*/*.md", "out/{{ item.stem }}.md", False),  # a stem stays in one segment
        ("out/*/*.md", "out/{{ item.path }}.md", True),  # a path does not
        ("out/*/*.md", "out/{{ item }}.md", True),
        ("out/x/*.md", "out/{% if true %}x/a{% endif %}.md", True),
        ("out/a.md", "./out/{{ item.name }}", True),
        ("out/{a,b}.md", "out/{{ now }}.md", True),
        ("out/*/*.md", "out/{{ needs.collect.output }}.md", True),
        ("out/*/*.md", "out/{{ today | upper }}.md", False),
        ("out/2024-01-01.md", "out/ {{- today -}} \n.md", True),  # Jinja's trimming
        ("out/x.md", "out/{# a comment #}x.md", True),
    ],
)
def test_a_glob_and_an_output_template(glob: str, output: str, expected: bool) -> None:
    assert can_match(glob, output) == expected


def test_task_in_an_output_is_the_task_name() -> None:
    assert can_match("reports/a.md", "reports/{{ task }}.md", task="a")
    assert not can_match("reports/b.md", "reports/{{ task }}.md", task="a")


# --- edges ------------------------------------------------------------------------------------


def test_foreach_over_another_tasks_templated_outputs() -> None:
    graph = build(
        config(
            triage={
                "foreach": "workspace/inbox/*.txt",
                "output": "workspace/tickets/{{ item.stem }}.json",
            },
            report={"foreach": "workspace/tickets/*.json", "output": "out/{{ item.stem }}.md"},
        )
    )
    assert graph.edges == {"triage": (), "report": ("triage",)}
    assert graph.via("report", "triage") == Via(
        ("foreach",), "workspace/tickets/*.json", "output", "workspace/tickets/{{ item.stem }}.json"
    )
    assert graph.dependents("triage") == ("report",)


def test_inputs_matching_a_dated_output_and_outputs() -> None:
    graph = build(
        config(
            daily={"output": "reports/{{ today }}.md", "outputs": ["data/raw.csv"]},
            weekly={"inputs": ["notes/*.md", "reports/*.md"]},
            stats={"inputs": "data/**/*.csv"},
            other={"inputs": ["reports/*.txt", "notes/**"]},
        )
    )
    assert graph.edges == {"daily": (), "weekly": ("daily",), "stats": ("daily",), "other": ()}
    assert graph.via("weekly", "daily") == Via(
        ("inputs", 1), "reports/*.md", "output", "reports/{{ today }}.md"
    )
    assert graph.via("stats", "daily") == Via(
        ("inputs", 0), "data/**/*.csv", "outputs", "data/raw.csv"
    )


def test_explicit_needs_come_first_and_win_over_an_implicit_edge() -> None:
    graph = build(
        config(
            a={"output": "a.md"},
            b={"output": "b.md"},
            c={"inputs": ["*.md"], "needs": ["b"], "output": "c/x.md"},
        )
    )
    assert graph.upstream("c") == ("b", "a")
    assert graph.via("c", "b") is None
    assert graph.via("c", "a") == Via(("inputs", 0), "*.md", "output", "a.md")


def test_a_task_reading_its_own_output_does_not_depend_on_itself() -> None:
    graph = build(config(journal={"inputs": ["reports/*.md"], "output": "reports/{{ today }}.md"}))
    assert graph.edges == {"journal": ()}
    assert graph.order(["journal"]) == ["journal"]


# --- errors -----------------------------------------------------------------------------------


def test_a_cycle_through_an_implicit_edge() -> None:
    cfg = config(
        a={"needs": ["b"], "output": "a/out.md"},
        b={"inputs": ["a/*.md"], "output": "b/out.md"},
    )
    assert error(cfg) == (
        "tasks.a.needs: dependency cycle: a -> b -> a "
        "(b needs a through inputs 'a/*.md' matching output 'a/out.md')"
    )


def test_a_cycle_of_implicit_edges_only_is_reported_at_the_glob() -> None:
    cfg = config(
        a={"foreach": "b/*.json", "output": "a/{{ item.stem }}.md"},
        b={"inputs": ["x.md", "a/**"], "outputs": ["b/{{ today }}.json"]},
    )
    assert error(cfg) == (
        "tasks.a.foreach: dependency cycle: a -> b -> a "
        "(a needs b through foreach 'b/*.json' matching outputs 'b/{{ today }}.json'; "
        "b needs a through inputs 'a/**' matching output 'a/{{ item.stem }}.md')"
    )


def test_a_cycle_of_needs_only() -> None:
    cfg = config(a={"needs": ["b"]}, b={"needs": ["c"]}, c={"needs": ["a"]})
    assert error(cfg) == "tasks.a.needs: dependency cycle: a -> b -> c -> a"
    assert error(config(a={"needs": "a"})) == "tasks.a.needs: dependency cycle: a -> a"


def test_unknown_needs_are_left_to_clawcheck() -> None:
    assert build(config(a={"needs": ["nope"]})).edges == {"a": ()}


@pytest.mark.parametrize(
    ("a", "b", "message"),
    [
        (
            {"output": "reports/x.md"},
            {"output": "reports/x.md"},
            "tasks.b.output: tasks 'a' and 'b' both produce 'reports/x.md'",
        ),
        (
            {"output": "reports/{{ today }}.md"},
            {"outputs": ["log.txt", "./reports/{{ today }}.md"]},
            "tasks.b.outputs[1]: tasks 'a' and 'b' both produce 'reports/{{ today }}.md' "
            "and './reports/{{ today }}.md', which can name the same file",
        ),
        (
            {"foreach": "in/*.txt", "output": "reports/{{ item.stem }}.md"},
            {"output": "reports/index.md"},
            "tasks.b.output: tasks 'a' and 'b' both produce 'reports/index.md' "
            "(a's 'reports/{{ item.stem }}.md' can name it)",
        ),
        (
            {"foreach": "in/*.txt", "output": "out/{{ item.stem }}.json"},
            {"foreach": "in/*.md", "output": "out/{{ item.name }}"},
            "tasks.b.output: tasks 'a' and 'b' both produce 'out/{{ item.stem }}.json' "
            "and 'out/{{ item.name }}', which can name the same file",
        ),
    ],
)
def test_two_tasks_producing_the_same_file(
    a: dict[str, Any], b: dict[str, Any], message: str
) -> None:
    assert error(config(a=a, b=b)) == message


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("workspace/tickets/{{ item.stem }}.json", "workspace/reports/{{ today }}.md"),
        ("reports/{{ today }}.md", "reports/index.md"),
        ("reports/{{ task }}.md", "reports/{{ task }}.md"),
        ("out/{{ item.stem }}.json", "out/{{ item.stem }}.md"),
        ("out/{{ item.stem }}.md", "out/sub/{{ item.stem }}.md"),
    ],
)
def test_distinct_outputs_are_no_conflict(a: str, b: str) -> None:
    _, problems = analyse(
        config(a={"foreach": "i/*", "output": a}, b={"foreach": "j/*", "output": b})
    )
    assert problems == []


def test_all_problems_at_once() -> None:
    _, problems = analyse(
        config(
            a={"needs": ["b"], "output": "x.md"},
            b={"needs": ["a"], "output": "x.md"},
            c={"outputs": ["x.md"]},
        )
    )
    assert [str(p) for p in problems] == [
        "tasks.a.needs: dependency cycle: a -> b -> a",
        "tasks.b.output: tasks 'a' and 'b' both produce 'x.md'",
        "tasks.c.outputs[0]: tasks 'a' and 'c' both produce 'x.md'",
    ]


# --- order ------------------------------------------------------------------------------------


def diamond() -> Graph:
    return build(
        config(
            report={"needs": ["left", "right"]},
            right={"needs": ["source"]},
            lonely={},
            left={"inputs": ["data/*.csv"]},
            source={"output": "data/{{ today }}.csv"},
        )
    )


def test_order_puts_each_task_after_its_dependencies_and_is_otherwise_file_order() -> None:
    graph = diamond()
    assert graph.order(["report"]) == ["source", "right", "left", "report"]
    assert graph.order(["lonely", "report"]) == ["lonely", "source", "right", "left", "report"]
    assert graph.order(["report", "lonely"]) == graph.order(["lonely", "report"])
    assert graph.order(["left", "left"]) == ["source", "left"]
    assert graph.order(graph.tasks) == ["lonely", "source", "right", "left", "report"]


def test_upstream_and_dependents_are_direct() -> None:
    graph = diamond()
    assert graph.upstream("report") == ("left", "right")
    assert graph.dependents("source") == ("right", "left")
    assert graph.dependents("report") == ()


# --- claw graph -------------------------------------------------------------------------------

CLAWFILE = """
    tasks:
      collect:
        prompt: hi
        output: "notes/{{ today }}.md"
        schedule: "0 6 * * *"
      triage:
        prompt: hi
        foreach: "inbox/*.txt"
        output: "tickets/{{ item.stem }}.json"
        watch: ["inbox/*.txt"]
      summary:
        description: Summarise
        prompt: hi
        needs: [collect]
        inputs: ["tickets/*.json"]
        output: summary.md
      review:
        prompt: hi
        hook: pre-commit
        check: true
"""


def test_dot(tmp_path: Path) -> None:
    result = claw(make_project(tmp_path, CLAWFILE), "graph")
    assert (result.exit_code, result.stderr) == (0, "")
    assert result.stdout == (
        "digraph claw {\n"
        "  rankdir=LR;\n"
        "  node [shape=box];\n"
        '  "collect" [label="collect\\nschedule 0 6 * * *"];\n'
        '  "triage" [label="triage\\nforeach inbox/*.txt\\nwatch inbox/*.txt\\ntainted: watch", '
        "color=red];\n"
        '  "summary" [label="summary\\ntainted: triage", color=red];\n'
        '  "review" [label="review\\nhook pre-commit\\ncheck"];\n'
        '  "collect" -> "summary";\n'
        '  "triage" -> "summary" [style=dashed, label="tickets/*.json"];\n'
        "}\n"
    )


def test_mermaid(tmp_path: Path) -> None:
    result = claw(make_project(tmp_path, CLAWFILE), "graph", "--format", "mermaid")
    assert (result.exit_code, result.stderr) == (0, "")
    assert result.stdout == (
        "flowchart LR\n"
        '  t0["collect<br/>schedule 0 6 * * *"]\n'
        '  t1["triage<br/>foreach inbox/*.txt<br/>watch inbox/*.txt<br/>tainted: watch"]\n'
        '  t2["summary<br/>tainted: triage"]\n'
        '  t3["review<br/>hook pre-commit<br/>check"]\n'
        "  t0 --> t2\n"
        '  t1 -.->|"tickets/*.json"| t2\n'
        "  classDef tainted stroke:#c00,color:#c00\n"
        "  class t1,t2 tainted\n"
    )


def test_named_tasks_and_their_upstream_only(tmp_path: Path) -> None:
    root = make_project(tmp_path, CLAWFILE)
    result = claw(root, "graph", "--format", "mermaid", "sum*")
    assert result.stdout == (
        "flowchart LR\n"
        '  t0["collect<br/>schedule 0 6 * * *"]\n'
        '  t1["triage<br/>foreach inbox/*.txt<br/>watch inbox/*.txt<br/>tainted: watch"]\n'
        '  t2["summary<br/>tainted: triage"]\n'
        "  t0 --> t2\n"
        '  t1 -.->|"tickets/*.json"| t2\n'
        "  classDef tainted stroke:#c00,color:#c00\n"
        "  class t1,t2 tainted\n"
    )
    assert claw(root, "graph", "collect").stdout == (
        "digraph claw {\n"
        "  rankdir=LR;\n"
        "  node [shape=box];\n"
        '  "collect" [label="collect\\nschedule 0 6 * * *"];\n'
        "}\n"
    )


def test_labels_are_escaped(tmp_path: Path) -> None:
    clawfile = """
        tasks:
          a: {prompt: hi, output: 'in/"q"#1.md'}
          b: {prompt: hi, inputs: ['in/"q"#*.md']}
    """
    root = make_project(tmp_path, clawfile)
    assert '  "a" -> "b" [style=dashed, label="in/\\"q\\"#*.md"];\n' in claw(root, "graph").stdout
    mermaid = claw(root, "graph", "--format", "mermaid").stdout
    assert '  t0 -.->|"in/#34;q#34;#35;*.md"| t1\n' in mermaid


def test_errors_exit_2(tmp_path: Path) -> None:
    clawfile = """
        tasks:
          a: {prompt: hi, needs: [b], output: a/out.md}
          b: {prompt: hi, inputs: ["a/*.md"], output: b/out.md}
    """
    root = make_project(tmp_path, clawfile)
    result = claw(root, "graph")
    assert result.exit_code == 2
    assert result.stdout == ""
    # Once clawcheck reports graph problems, the message gains `clawfile.yaml:LINE: `.
    assert result.stderr.startswith("claw: ")
    assert result.stderr.endswith(
        "tasks.a.needs: dependency cycle: a -> b -> a "
        "(b needs a through inputs 'a/*.md' matching output 'a/out.md')\n"
    )
    unknown = claw(make_project(tmp_path / "p", CLAWFILE), "graph", "nope")
    assert unknown.exit_code == 2
    assert unknown.stderr == "claw: unknown task 'nope' (tasks: collect, triage, summary, review)\n"
