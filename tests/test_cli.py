"""The `claw` program itself: its help, and how it exits."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import make_project
from syrupy.assertion import SnapshotAssertion

from claw_batch.cli import COMMANDS, main

WATCHING = """
    version: 1
    model: fake-model
    tasks:
      triage:
        prompt: "Triage {{ read(item.path) }}"
        watch: ["inbox/*.txt"]
        output: "out/{{ item.stem }}.md"
        tools: []
"""

# `python -m claw_batch ARGS`, and then, from an atexit handler (after claw is done, before
# the interpreter's own shutdown), how many objects its last garbage collection will skip.
FROZEN = (
    "import atexit, gc, runpy, sys\n"
    "atexit.register(lambda: print('frozen:', gc.get_freeze_count(), file=sys.stderr))\n"
    "runpy.run_module('claw_batch', run_name='__main__', alter_sys=True)\n"
)


def test_sigterm_to_claw_watch_exits_without_the_interpreters_last_collection(
    tmp_path: Path,
) -> None:
    """Issue 16, point 13: an idle `claw watch` took 1.5-3.5 s to exit after SIGTERM on busy
    cores. Its stop itself takes milliseconds; the time went to the interpreter's shutdown,
    whose last garbage collection walks every object openai and pydantic left (0.18 s of
    CPU on an idle core). claw's entry point freezes them out of it once claw is done."""
    root = make_project(tmp_path / "p", WATCHING, {"inbox/.keep": ""})
    child = subprocess.Popen(
        [sys.executable, "-c", FROZEN, "watch"], cwd=root, stderr=subprocess.PIPE, text=True
    )
    assert child.stderr is not None
    assert "claw watch: triage (inbox/*.txt)" in child.stderr.readline()
    sent = time.monotonic()
    child.send_signal(signal.SIGTERM)
    _, err = child.communicate(timeout=30)
    print(f"exited {time.monotonic() - sent:.3f} s after SIGTERM")  # for -s; not asserted
    assert child.returncode == 0, err
    assert "claw watch: stopped" in err
    frozen = int(err.rpartition("frozen: ")[2])
    assert frozen > 10_000  # claw's and its libraries' objects: a whole heap, not a few


def test_the_claw_command_is_the_entry_point_python_m_runs() -> None:
    pyproject = (Path(__file__).parent.parent / "pyproject.toml").read_text()
    scripts = pyproject.partition("[project.scripts]\n")[2].partition("\n\n")[0]
    assert scripts == 'claw = "claw_batch.cli:entry"'


# --- help ------------------------------------------------------------------------------------

# Every command, as it is typed; the groups (cron, hook, memory, skills) by their subcommands.
LEAVES = [
    ("run",),
    ("plan",),
    ("why",),
    ("list",),
    ("validate",),
    ("show",),
    ("init",),
    ("graph",),
    ("hook", "install"),
    ("hook", "uninstall"),
    ("hook", "run"),
    ("cron", "print"),
    ("schedule",),
    ("log",),
    ("report",),
    ("watch",),
    ("memory", "search"),
    ("skills", "list"),
    ("skills", "check"),
    ("cache", "stats"),
    ("cache", "prune"),
    ("cache", "clear"),
    ("mcp", "list"),
    ("notify", "test"),
]
GROUPS = [("cron",), ("hook",), ("memory",), ("skills",), ("cache",), ("mcp",), ("notify",)]
RUN_JOBS = [("run",), ("hook", "run"), ("watch",), ("schedule",)]  # report jobs as they go
QUIET_ONLY = [("list",), ("validate",), ("hook", "install"), ("hook", "uninstall")]
QUIET_ONLY += [("skills", "list"), ("skills", "check")]
EXAMPLES = [("run",), ("plan",), ("why",), ("hook", "install"), ("cron", "print")]
EXAMPLES += [("watch",), ("log",), ("show",), ("report",), ("memory", "search"), ("init",)]
EXAMPLES += [("graph",), ("schedule",), ("list",), ("validate",), ("skills", "list")]
EXAMPLES += [("skills", "check"), ("hook", "uninstall"), ("hook", "run")]
EXAMPLES += [("cache", "stats"), ("cache", "prune"), ("cache", "clear"), ("mcp", "list")]
EXAMPLES += [("notify", "test")]


def help_of(*words: str) -> str:
    result = CliRunner().invoke(main, [*words, "--help"], prog_name="claw", terminal_width=80)
    assert result.exit_code == 0, result.output
    return result.output


def options_of(*words: str) -> list[str]:
    """The flags the help lists, e.g. ['-C', '-f', '--file', '-h', '--help']."""
    listed = help_of(*words).partition("\nOptions:\n")[2]
    return [
        flag.rstrip(",")
        for line in listed.splitlines()
        if line.startswith("  -")
        for flag in line.split("  ")[1].split()
        if flag.startswith("-")
    ]


@pytest.mark.parametrize("words", LEAVES, ids=" ".join)
def test_verbose_and_quiet_are_offered_only_where_they_do_something(
    words: tuple[str, ...],
) -> None:
    """Issue 16, point 12: -v/--verbose was on commands that run no tools (list, show...)."""
    flags = set(options_of(*words))
    assert ("--verbose" in flags) == (words in RUN_JOBS)
    assert ("--quiet" in flags) == (words in RUN_JOBS or words in QUIET_ONLY)


@pytest.mark.parametrize("words", [("watch",), ("schedule",), ("run",)], ids=" ".join)
def test_jobs_at_a_time_is_documented(words: tuple[str, ...]) -> None:
    """Issue 16, point 12: `claw watch -j` and `claw schedule -j` had no help."""
    assert "  -j, --jobs N  " in help_of(*words)
    assert "Run up to N jobs at a time. [default: 1; x>=1]" in " ".join(help_of(*words).split())


def command_rows(text: str) -> dict[str, str]:
    """name -> description, from the command lists of a group's help (any section)."""
    rows: dict[str, str] = {}
    sections = text.partition("\nOptions:\n")[2].split("\n\n")[1:]
    for section in sections:
        title, *lines = section.splitlines()
        if title.startswith(" ") or not title.endswith(":"):
            continue  # the epilog
        for line in lines:
            if line.startswith("  ") and not line.startswith("   "):
                name, _, description = line.strip().partition(" ")
                rows[name] = description.strip()
    return rows


@pytest.mark.parametrize("words", [(), *GROUPS], ids=lambda w: " ".join(("claw", *w)))
def test_command_lists_give_each_command_its_whole_first_sentence(words: tuple[str, ...]) -> None:
    """Issue 16, point 12: `claw --help` cut descriptions mid-phrase ("Print the task graph:
    every task, or the TASKs (names or..."). Each description is the first line of the
    command's own help, whole, and fits on its line."""
    rows = command_rows(help_of(*words))
    expected = sorted(
        set(
            w[len(words)]
            for w in LEAVES + GROUPS
            if w[: len(words)] == words and len(w) > len(words)
        )
    )
    assert sorted(rows) == expected
    for name, description in rows.items():
        first_line = help_of(*words, name).split("\n\n")[1].strip()
        assert not description.endswith("..."), name
        assert description.removesuffix(".") == first_line.removesuffix("."), name


@pytest.mark.parametrize("words", EXAMPLES, ids=" ".join)
def test_commands_show_how_they_are_called(words: tuple[str, ...]) -> None:
    """Issue 16, point 12: no help had an example. Each example is a whole `claw` command
    line of this command, kept on its own line."""
    text = help_of(*words)
    assert "\n  Examples:\n" in text or "\n  Example:\n" in text
    block = text.split("xample")[1].split(":\n", 1)[1].split("\n\n")[0]
    lines = block.splitlines()
    assert lines
    for line in lines:
        assert line.startswith("    claw " + " ".join(words)), line
        assert len(line) <= 80, line


def test_hook_runs_usage_and_text_name_the_same_argument() -> None:
    """Issue 16 review, point 8: the text said NAME, the usage line {pre-commit|...}."""
    text = help_of("hook", "run")
    assert text.startswith("Usage: claw hook run [OPTIONS] NAME [ARGS]...\n")
    assert "NAME is one of: pre-commit, commit-msg, pre-push." in " ".join(text.split())


def test_claw_help_lists_the_commands_without_importing_them() -> None:
    """The list comes from the table in claw_batch.cli; the modules load when they run."""
    code = (
        "import sys\n"
        "from claw_batch.cli import main\n"
        "try:\n"
        "    main(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('claw_batch.commands.')))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert "Commands" in result.stdout or "Run tasks" in result.stdout
    assert result.stdout.splitlines()[-1] == "[]"


def test_every_command_is_in_the_table() -> None:
    assert sorted(COMMANDS) == sorted({w[0] for w in LEAVES})


def test_claw_help(snapshot: SnapshotAssertion) -> None:
    """The whole of `claw --help`, to be read as a whole when it changes."""
    assert help_of() == snapshot


# --- usage errors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["nosuch"], "claw: 'nosuch' is not a claw command. See 'claw --help'.\n"),
        (
            ["hook", "nosuch"],
            "claw: 'nosuch' is not a claw hook command. See 'claw hook --help'.\n",
        ),
        (["run", "-j", "0"], "claw: run: -j: 0 is not in the range x>=1. See 'claw run -h'.\n"),
        (
            ["hook", "run", "post-merge"],
            "claw: hook run: NAME: 'post-merge' is not one of 'pre-commit', 'commit-msg', "
            "'pre-push'. See 'claw hook run -h'.\n",
        ),
        (["log", "--nosuch"], "claw: log: no such option '--nosuch'. See 'claw log -h'.\n"),
        (
            ["run", "--model"],
            "claw: run: option '--model' requires an argument. See 'claw run -h'.\n",
        ),
    ],
    ids=" ".join,
)
def test_usage_errors_read_like_claws_other_errors(args: list[str], said: str) -> None:
    """Issue 16 review, point 7: click's own errors began `Usage: …` and `Error: …`; every
    error line of claw starts `claw: `, and says where to read more."""
    r = CliRunner().invoke(main, args, prog_name="claw")
    assert (r.exit_code, r.stdout, r.stderr) == (2, "", said)


def test_help_and_version_still_exit_0() -> None:
    for args in (["-h"], ["run", "-h"], ["hook", "--help"], ["--version"]):
        r = CliRunner().invoke(main, args, prog_name="claw")
        assert (r.exit_code, r.stderr) == (0, ""), args
        assert r.stdout
