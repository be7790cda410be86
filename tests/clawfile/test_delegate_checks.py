"""`claw validate`'s checks of `delegate:` (issue 21 §2): each problem on a line of its own,
with the file's line and the key path, all of them at once, exit 2."""

from __future__ import annotations

from pathlib import Path

from helpers import claw, make_project


def validate(tmp_path: Path, clawfile: str) -> tuple[int, str]:
    root = make_project(tmp_path / "p", clawfile)
    r = claw(root, "validate")
    return r.exit_code, r.stderr


def test_unknown_task_with_a_close_match_and_the_tool_missing(tmp_path: Path) -> None:
    code, said = validate(
        tmp_path,
        """
        version: 1
        tasks:
          review:
            prompt: hi
            tools: [read]
            delegate:
              tasks: [review-fle, nothing-like-it]
          review-file:
            prompt: "Review {{ input.path }}"
        """,
    )
    assert code == 2
    assert said == (
        "claw: clawfile.yaml:6: tasks.review.delegate: delegate: lists tasks this task may "
        "start as sub-jobs, but delegate is not one of its tools: add delegate to tools (read)\n"
        "claw: clawfile.yaml:7: tasks.review.delegate.tasks[0]: unknown task 'review-fle' "
        "(did you mean 'review-file'?)\n"
        "claw: clawfile.yaml:7: tasks.review.delegate.tasks[1]: unknown task "
        "'nothing-like-it' (known: review, review-file)\n"
    )


def test_a_delegation_cycle_is_refused_and_said(tmp_path: Path) -> None:
    code, said = validate(
        tmp_path,
        """
        version: 1
        tasks:
          a:
            prompt: hi
            tools: [delegate]
            delegate: {tasks: [b]}
          b:
            prompt: hi
            tools: [delegate]
            delegate: {tasks: [a]}
          c:
            prompt: hi
            tools: [delegate]
            delegate: {tasks: [c]}
        """,
    )
    assert code == 2
    assert said == (
        "claw: clawfile.yaml:6: tasks.a.delegate.tasks[0]: delegation cycle: a → b → a "
        "(a delegates to b; b delegates to a): each would start the other as a sub-job; "
        "remove one from delegate.tasks\n"
        "claw: clawfile.yaml:14: tasks.c.delegate.tasks[0]: delegation cycle: c → c "
        "(c delegates to c): each would start the other as a sub-job; remove one from "
        "delegate.tasks\n"
    )


def test_delegating_to_a_dependent_is_refused_to_an_upstream_is_fine(tmp_path: Path) -> None:
    code, said = validate(
        tmp_path,
        """
        version: 1
        tasks:
          collect:
            prompt: hi
            output: out/collect.md
          review:
            prompt: hi
            needs: [collect]
            tools: [delegate]
            delegate: {tasks: [collect, report]}
          report:
            prompt: hi
            inputs: ["out/*.md"]
            needs: [review]
        """,
    )
    assert code == 2
    assert said == (
        "claw: clawfile.yaml:10: tasks.review.delegate.tasks[1]: delegation cycle through "
        "needs: review → report → review (review delegates to report; report needs review): "
        "a sub-job would run before a task it depends on has finished; a task may delegate "
        "to the tasks it needs, not to those that need it\n"
    )


def test_a_delegated_task_is_one_job(tmp_path: Path) -> None:
    code, said = validate(
        tmp_path,
        """
        version: 1
        tasks:
          lead:
            prompt: hi
            tools: [delegate]
            delegate:
              tasks: [each, nightly, on-commit]
          each:
            prompt: "{{ item.path }}"
            foreach: "inbox/*.txt"
          nightly:
            prompt: hi
            schedule: "0 23 * * *"
          on-commit:
            prompt: hi
            hook: pre-commit
        """,
    )
    assert code == 2
    lines = said.splitlines()
    assert lines == [
        "claw: clawfile.yaml:7: tasks.lead.delegate.tasks[0]: task 'each' fans out "
        "(foreach: inbox/*.txt): a sub-job is one job its parent waits for; delegate to a "
        "task of its own without foreach:, watch:, schedule:, hook: and batch:",
        "claw: clawfile.yaml:7: tasks.lead.delegate.tasks[1]: task 'nightly' runs on a "
        "schedule (schedule: 0 23 * * *): a sub-job is one job its parent waits for; "
        "delegate to a task of its own without foreach:, watch:, schedule:, hook: and batch:",
        "claw: clawfile.yaml:7: tasks.lead.delegate.tasks[2]: task 'on-commit' runs from a "
        "git hook (hook: pre-commit): a sub-job is one job its parent waits for; delegate "
        "to a task of its own without foreach:, watch:, schedule:, hook: and batch:",
    ]


def test_a_default_delegate_needs_the_tool_in_some_task(tmp_path: Path) -> None:
    taken = """
        version: 1
        defaults:
          delegate: {tasks: [helper]}
        tasks:
          lead:
            prompt: hi
            tools: [read, delegate]
          other:
            prompt: hi
          helper:
            prompt: hi
    """
    assert validate(tmp_path, taken)[0] == 0
    unused = taken.replace("tools: [read, delegate]", "tools: [read]")
    code, said = validate(tmp_path / "2", unused)
    assert (code, said) == (
        2,
        "claw: clawfile.yaml:3: defaults.delegate: delegate: lists tasks this task may start "
        "as sub-jobs, but delegate is not one of its tools: add delegate to tools (read)\n",
    )


def test_a_watch_task_that_delegates_keeps_the_tool_only_when_granted(tmp_path: Path) -> None:
    """As write, edit, bash and remember: listed in a watch task's tools, it is withheld once
    outside content is read, unless `untrusted.allow` grants it (validate says which)."""
    clawfile = """
        version: 1
        tasks:
          inbox:
            prompt: "{{ item.path }}"
            watch: ["inbox/*.txt"]
            tools: [read, delegate]
            delegate: {tasks: [helper]}
          helper:
            prompt: hi
    """
    code, said = validate(tmp_path, clawfile)
    assert code == 0, said
    assert "  inbox: watch 'inbox/*.txt' (withheld: delegate)\n" in said
    assert "helper" not in said  # a tainted inbox job cannot start one
    granted = clawfile.replace(
        "delegate: {", "untrusted: {allow: [delegate]}\n            delegate: {"
    )
    code, said = validate(tmp_path / "2", granted)
    assert code == 0, said
    assert said.splitlines()[1:] == [  # granted, its sub-jobs are tainted too
        "outside content can reach 2 tasks; each keeps only read-only tools unless its "
        "untrusted: {allow: [...]} grants more:",
        "  inbox: watch 'inbox/*.txt' (granted: delegate)",
        "  helper: inbox via delegate",
    ]


def test_a_clawfile_that_delegates_well_is_ok(tmp_path: Path) -> None:
    code, said = validate(
        tmp_path,
        """
        version: 1
        tasks:
          review:
            prompt: hi
            tools: [ls, delegate]
            delegate: {tasks: [review-file], max_depth: 1}
          review-file:
            prompt: "Review {{ input.path }}"
            tools: [read]
        """,
    )
    assert (code, said) == (0, "clawfile.yaml: ok (2 tasks, 1 skill)\n")


def test_input_is_a_known_variable_and_an_output_may_name_any_path_with_it(
    tmp_path: Path,
) -> None:
    """`input` comes from the parent's model: `{{ input.path }}` may hold a '/', so an output
    named with it can clash with any file under its folder."""
    code, said = validate(
        tmp_path,
        """
        version: 1
        tasks:
          review-file:
            prompt: "Review {{ input.path }}"
            output: "reviews/{{ input.name }}.md"
          digest:
            prompt: hi
            output: reviews/week/digest.md
        """,
    )
    assert (code, said) == (
        2,
        "claw: clawfile.yaml:8: tasks.digest.output: tasks 'review-file' and 'digest' both "
        "produce 'reviews/week/digest.md' (review-file's 'reviews/{{ input.name }}.md' can "
        "name it)\n",
    )
