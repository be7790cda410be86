"""Agent Skills: validation, precedence, gating, progressive disclosure, `claw skills` — with
real SKILL.md layouts (scripts/, references/, odd front matter) and broken ones."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fake_openai import FakeOpenAI, call, text, tool_calls
from helpers import Result, claw, make_project

import claw_batch
from claw_batch.cli import main
from claw_batch.skills import skill as skills
from claw_batch.skills.skill import parse_skill

MEMORY_DESCRIPTION = "Keep and find facts across runs with remember and memory_search."

CLAWFILE = """
    version: 1
    model: fake-model
    tasks:
      t:
        prompt: "Do {{ task }}"
"""


def skill_md(directory: Path, front: str, body: str = "Body.\n") -> Path:
    path = directory / "SKILL.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"---\n{front.strip()}\n---\n{body}")
    return path


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


def env(server: FakeOpenAI, **more: str) -> dict[str, str]:
    return {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-x", **more}


def system_prompt(request: dict[str, Any]) -> str:
    content: str = request["messages"][0]["content"]
    return content


def skills_cli(root: Path, *args: str) -> Result:
    """`claw skills SUBCOMMAND -C root ...` in-process."""
    sub, *rest = args
    r = CliRunner().invoke(main, ["skills", sub, "-C", str(root), *rest], catch_exceptions=False)
    return Result(r.exit_code, r.stdout, r.stderr)


def skill_lines(request: dict[str, Any]) -> list[str]:
    """The lines of the system prompt's skills list."""
    section = system_prompt(request).split("## Skills", 1)[-1].split("\n\n", 1)[0]
    return [line for line in section.splitlines() if line.startswith("- ")]


# --- validation ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("directory", "front", "problem"),
    [
        (
            "Style",
            "name: Style\ndescription: x",
            "name 'Style' may hold only lowercase letters, "
            "digits and single hyphens inside (a-z, 0-9, -)",
        ),
        (
            "a--b",
            "name: a--b\ndescription: x",
            "name 'a--b' may hold only lowercase letters, "
            "digits and single hyphens inside (a-z, 0-9, -)",
        ),
        (
            "-a",
            "name: -a\ndescription: x",
            "name '-a' may hold only lowercase letters, "
            "digits and single hyphens inside (a-z, 0-9, -)",
        ),
        (
            "style",
            "name: house-style\ndescription: x",
            "name 'house-style' must match its directory, 'style'",
        ),
        ("a" * 65, f"name: {'a' * 65}\ndescription: x", "name is 65 characters long; at most 64"),
        ("style", "description: x", "name is missing: give name: style"),
        (
            "style",
            "name: style",
            "description is missing: say what the skill does and when to use it",
        ),
        (
            "style",
            "name: style\ndescription: ''",
            "description is missing: say what the skill does and when to use it",
        ),
        (
            "style",
            f"name: style\ndescription: {'d' * 1025}",
            "description is 1025 characters long; at most 1024",
        ),
        (
            "style",
            f"name: style\ndescription: x\ncompatibility: {'c' * 501}",
            "compatibility is longer than 500 characters",
        ),
        (
            "style",
            "name: style\ndescription: x\ndisable-model-invocation: sometimes",
            "disable-model-invocation must be true or false, not 'sometimes'",
        ),
        (
            "style",
            "- name: style\n- description: x",
            "its front matter is not a YAML mapping of keys",
        ),
    ],
)
def test_invalid_skills_say_why(tmp_path: Path, directory: str, front: str, problem: str) -> None:
    skill = parse_skill(skill_md(tmp_path / directory, front))
    assert skill.problems == (problem,)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (
            "# Style\nno front matter\n",
            "no front matter: it must start with a --- block holding name and description",
        ),
        (
            "---\nname: style\ndescription: x\n",
            "no front matter: it must start with a --- block holding name and description",
        ),  # never closed
    ],
)
def test_a_skill_without_front_matter(tmp_path: Path, content: str, problem: str) -> None:
    path = tmp_path / "style" / "SKILL.md"
    path.parent.mkdir()
    path.write_text(content)
    assert parse_skill(path).problems == (problem,)


def test_a_real_world_layout_with_odd_front_matter(tmp_path: Path) -> None:
    """An OpenClaw-style skill: CRLF, a BOM, metadata as a JSON string, extra keys, an unquoted
    `: ` in its description, scripts/ and references/ beside SKILL.md."""
    directory = tmp_path / "pdf-tools"
    (directory / "scripts").mkdir(parents=True)
    (directory / "references").mkdir()
    (directory / "scripts" / "split.py").write_text("print('split')\n")
    (directory / "references" / "forms.md").write_text("# Forms\n")
    description = "Work with PDFs: split, merge, fill forms. " + "Long words here. " * 55
    front = (
        "name: pdf-tools\n"
        f"description: {description}\n"
        "homepage: https://example.com/pdf\n"
        "user-invocable: true\n"
        "license: Apache-2.0\n"
        'allowed-tools: "read grep"\n'
        """metadata: '{"openclaw": {"emoji": "📄", "requires": {"bins": ["sh"]}}}'\n"""
    )
    text_ = "\ufeff---\r\n" + front.replace("\n", "\r\n") + "---\r\nUse {baseDir}/scripts.\r\n"
    (directory / "SKILL.md").write_bytes(text_.encode("utf-8"))
    skill = parse_skill(directory / "SKILL.md")
    assert skill.problems == ()
    assert len(skill.description) <= 1024
    assert skill.description.startswith("Work with PDFs: split, merge, fill forms. Long words")
    assert skill.requires.bins == ("sh",)
    assert skill.allowed_tools == ("read", "grep")
    assert skill.warnings == ("unknown front matter keys (ignored): homepage, user-invocable",)
    assert sorted(skills.files(skill)) == ["SKILL.md", "references/forms.md", "scripts/split.py"]


def test_an_unquoted_colon_that_breaks_yaml_is_still_read(tmp_path: Path) -> None:
    skill = parse_skill(skill_md(tmp_path / "style", "name: style\ndescription: Note: a: b"))
    assert (skill.name, skill.description, skill.problems) == ("style", "Note: a: b", ())


# --- precedence and gating -----------------------------------------------------------------------


def test_precedence_workspace_project_user_builtin(tmp_path: Path) -> None:
    root = tmp_path / "p"
    user = Path(os.environ["XDG_CONFIG_HOME"]) / "claw" / "skills"
    for base in (root / "workspace/skills", root / "skills", user):
        skill_md(base / "style", f"name: style\ndescription: from {base.name}")
    skill_md(root / "skills" / "memory", "name: memory\ndescription: the project's memory")
    skill_md(user / "mine", "name: mine\ndescription: a user skill")
    found = {s.name: s for s in skills.discover(skills.skill_dirs(root, "workspace"))}
    assert (found["style"].source, found["style"].description) == ("workspace", "from skills")
    assert found["style"].path == root / "workspace/skills/style/SKILL.md"
    assert found["memory"].source == "project"  # shadows the built-in memory skill
    assert found["mine"].source == "user"


def test_an_invalid_skill_still_shadows_and_is_reported(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", CLAWFILE)
    skill_md(root / "workspace/skills/style", "name: Style\ndescription: broken override")
    skill_md(root / "skills/style", "name: style\ndescription: the good one")
    listed = skills_cli(root, "list", "-q")
    assert listed.exit_code == 0
    assert listed.stdout.splitlines() == [
        "memory  built-in   ok: offered to tasks with the tools memory_search",
        "Style   workspace  invalid: name 'Style' may hold only lowercase letters, digits and "
        "single hyphens inside (a-z, 0-9, -)",
        "style   project    shadowed: by workspace/skills/style/SKILL.md (workspace)",
    ]
    checked = skills_cli(root, "check")
    assert checked.exit_code == 2
    assert checked.stderr == (
        "claw: skills/style/SKILL.md: warning: shadowed: by workspace/skills/style/SKILL.md "
        "(workspace)\n"
        "claw: workspace/skills/style/SKILL.md: name 'Style' may hold only lowercase letters, "
        "digits and single hyphens inside (a-z, 0-9, -)\n"
    )
    validated = claw(root, "validate")
    assert validated.exit_code == 2
    assert "workspace/skills/style/SKILL.md: not a valid skill: name 'Style'" in validated.stderr


GATED = {
    "skills/needs-gh/SKILL.md": """\
        ---
        name: needs-gh
        description: GitHub through the gh CLI
        metadata: {"openclaw": {"requires": {"bins": ["claw-test-no-such-binary"]}}}
        ---
        """,
    "skills/needs-key/SKILL.md": """\
        ---
        name: needs-key
        description: Weather, with a key
        metadata:
          nanobot:
            requires:
              env: [WEATHER_KEY]
        ---
        """,
    "skills/any-shell/SKILL.md": """\
        ---
        name: any-shell
        description: A shell of some kind
        metadata: {"claw": {"requires": {"anyBins": ["claw-test-no-such-binary", "sh"]}}}
        ---
        """,
    "skills/forced/SKILL.md": """\
        ---
        name: forced
        description: Offered whatever it lacks
        metadata: {"openclaw": {"always": true, "requires": {"bins": ["claw-test-missing"]}}}
        ---
        """,
    "skills/other-os/SKILL.md": """\
        ---
        name: other-os
        description: Only on an OS this is not
        metadata: {"openclaw": {"os": ["plan9"]}}
        ---
        """,
    "skills/on-request/SKILL.md": """\
        ---
        name: on-request
        description: Only when a task names it
        disable-model-invocation: true
        ---
        """,
}


def test_unavailable_skills_are_listed_and_not_offered(tmp_path: Path, server: FakeOpenAI) -> None:
    root = make_project(tmp_path / "p", CLAWFILE, GATED)
    listed = skills_cli(root, "list", "-q")
    assert listed.stdout.splitlines() == [
        "any-shell   project    ok",
        "forced      project    ok",
        "memory      built-in   ok: offered to tasks with the tools memory_search",
        "needs-gh    project    unavailable: needs binary 'claw-test-no-such-binary' on PATH",
        "needs-key   project    unavailable: needs environment variable WEATHER_KEY",
        "on-request  project    ok: offered to tasks that name it in skills:",
        "other-os    project    unavailable: needs os plan9 (this is linux)",
    ]
    server.enqueue(text("done"))
    assert claw(root, "run", env=env(server)).exit_code == 0
    assert skill_lines(server.requests[0]) == [
        "- any-shell: A shell of some kind (skills/any-shell/SKILL.md)",
        "- forced: Offered whatever it lacks (skills/forced/SKILL.md)",
    ]
    server.enqueue(text("done"))
    assert claw(root, "run", "-B", env=env(server, WEATHER_KEY="k")).exit_code == 0
    assert "- needs-key: Weather, with a key (skills/needs-key/SKILL.md)" in skill_lines(
        server.requests[1]
    )


def test_a_task_gets_the_skills_it_names_and_hears_of_missing_ones(
    tmp_path: Path, server: FakeOpenAI
) -> None:
    clawfile = (
        CLAWFILE + "        skills: [on-request, needs-gh]\n        tools: [read, memory_search]\n"
    )
    root = make_project(tmp_path / "p", clawfile, GATED)
    server.enqueue(text("done"))
    result = claw(root, "run", env=env(server))
    assert result.exit_code == 0
    assert skill_lines(server.requests[0]) == [
        "- on-request: Only when a task names it (skills/on-request/SKILL.md)",
    ]
    assert (
        "claw: t: skill 'needs-gh' is not offered: it needs binary 'claw-test-no-such-binary' "
        "on PATH\n"
    ) in result.stderr


def test_the_builtin_memory_skill_goes_to_tasks_with_memory_search(
    tmp_path: Path, server: FakeOpenAI
) -> None:
    clawfile = CLAWFILE + "        tools: [read, memory_search]\n"
    root = make_project(tmp_path / "p", clawfile)
    builtin = skills.BUILTIN / "memory"
    server.enqueue(
        tool_calls(call("read", {"path": str(builtin / "SKILL.md")}, "c1")),
        tool_calls(call("read", {"path": str(builtin.parent / "x" / "SKILL.md")}, "c2")),
        text("done"),
    )
    assert claw(root, "run", env=env(server)).exit_code == 0
    assert skill_lines(server.requests[0]) == [
        f"- memory: Keep and find facts across runs with remember and memory_search. "
        f"({builtin}/SKILL.md)"
    ]
    results = [m["content"] for m in server.requests[2]["messages"] if m["role"] == "tool"]
    assert results[0].startswith("---\nname: memory\n")
    assert results[1].startswith("error: refused reading ")  # only the offered skill's folder


# --- progressive disclosure ----------------------------------------------------------------------


def test_the_model_reads_a_user_skill_with_basedir_resolved(
    tmp_path: Path, server: FakeOpenAI
) -> None:
    root = make_project(
        tmp_path / "p",
        CLAWFILE + "        tools: [read, write]\n        permissions: {write: ['**']}\n",
    )
    user = Path(os.environ["XDG_CONFIG_HOME"]) / "claw" / "skills"
    skill_md(user / "mine", "name: mine\ndescription: Mine", "Run {baseDir}/scripts/go.sh\n")
    skill_md(root / "skills" / "ours", "name: ours\ndescription: Ours", "See {baseDir}/ref.md\n")
    (user / "secret.txt").write_text("not for the model")
    server.enqueue(
        tool_calls(
            call("read", {"path": str(user / "mine" / "SKILL.md")}, "c1"),
            call("read", {"path": "skills/ours/SKILL.md"}, "c2"),
            call("read", {"path": str(user / "secret.txt")}, "c3"),
            call("write", {"path": str(user / "mine" / "SKILL.md"), "content": "x"}, "c4"),
        ),
        text("done"),
    )
    assert claw(root, "run", env=env(server)).exit_code == 0
    lines = skill_lines(server.requests[0])
    assert f"- mine: Mine ({user}/mine/SKILL.md)" in lines
    assert "- ours: Ours (skills/ours/SKILL.md)" in lines
    results = {
        m["tool_call_id"]: m["content"]
        for m in server.requests[1]["messages"]
        if m["role"] == "tool"
    }
    assert f"Run {user}/mine/scripts/go.sh" in results["c1"]
    assert "See skills/ours/ref.md" in results["c2"]
    assert results["c3"].startswith("error: refused reading ")
    assert results["c4"].startswith("error: refused writing ")
    assert (user / "mine" / "SKILL.md").read_text().startswith("---\nname: mine")


def test_a_change_anywhere_in_an_offered_skill_reruns_the_job(
    tmp_path: Path, server: FakeOpenAI
) -> None:
    files = {
        "skills/ours/SKILL.md": "---\nname: ours\ndescription: Ours\n---\nSee references.\n",
        "skills/ours/references/terms.md": "# Terms\n",
    }
    root = make_project(tmp_path / "p", CLAWFILE, files)
    for _ in range(2):
        server.enqueue(text("done"))
    assert claw(root, "run", env=env(server)).exit_code == 0
    assert claw(root, "run", env=env(server)).stderr == "1 job up to date\n"
    (root / "skills/ours/references/terms.md").write_text("# Terms\nclaw: a tool\n")
    # The model never reads the skill here, so it is asked the same: --no-cache, to see the
    # job run as the model sees it (the call cache would replay the answer).
    assert claw(root, "run", "--no-cache", env=env(server)).exit_code == 0
    assert len(server.requests) == 2


def test_a_changed_skill_is_read_again_past_the_cache(tmp_path: Path, server: FakeOpenAI) -> None:
    files = {"skills/ours/SKILL.md": "---\nname: ours\ndescription: Before\n---\n"}
    root = make_project(tmp_path / "p", CLAWFILE, files)
    for _ in range(2):
        server.enqueue(text("done"))
    assert claw(root, "run", env=env(server)).exit_code == 0
    cached = json.loads((root / ".claw" / "skills.json").read_text())
    assert any(k.endswith("skills/ours/SKILL.md") for k in cached["skills"])
    path = root / "skills/ours/SKILL.md"
    path.write_text("---\nname: ours\ndescription: After the edit\n---\n")
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    assert claw(root, "run", env=env(server)).exit_code == 0
    assert "- ours: After the edit (skills/ours/SKILL.md)" in skill_lines(server.requests[1])


def test_skills_check_passes_a_clean_project_and_warns(tmp_path: Path) -> None:
    root = make_project(
        tmp_path / "p",
        CLAWFILE,
        {"skills/ours/SKILL.md": "---\nname: ours\ndescription: Ours\nversion: 2\n---\n"},
    )
    result = skills_cli(root, "check")
    assert result.exit_code == 0
    assert result.stderr == (
        "claw: skills/ours/SKILL.md: warning: unknown front matter keys (ignored): version\n"
        "claw: 2 skills found, 2 available, none invalid\n"
    )


def test_skills_list_json(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", CLAWFILE)
    rows = json.loads(skills_cli(root, "list", "--json").stdout)
    assert [(r["name"], r["source"], r["state"]) for r in rows] == [("memory", "built-in", "ok")]
    assert rows[0]["path"].endswith("skills/builtin/memory/SKILL.md")


def test_a_skill_file_that_cannot_be_read(tmp_path: Path) -> None:
    path = tmp_path / "style" / "SKILL.md"
    path.mkdir(parents=True)  # a directory where the file should be
    assert parse_skill(path).problems == ("cannot be read: Is a directory",)


def test_a_project_skill_symlinked_out_of_the_project_opens_nothing(
    tmp_path: Path, server: FakeOpenAI
) -> None:
    outside = tmp_path / "outside"
    skill_md(outside, "name: sneaky\ndescription: Points out", "hi\n")
    (outside / "data.txt").write_text("outside the project")
    root = make_project(tmp_path / "p", CLAWFILE)
    (root / "skills").mkdir()
    (root / "skills" / "sneaky").symlink_to(outside)
    server.enqueue(
        tool_calls(call("read", {"path": str(outside / "data.txt")}, "c1")),
        text("done"),
    )
    assert claw(root, "run", env=env(server)).exit_code == 0
    (result,) = [m["content"] for m in server.requests[1]["messages"] if m["role"] == "tool"]
    assert result.startswith("error: refused reading ")


def test_skills_check_says_what_the_skills_list_costs_each_task(tmp_path: Path) -> None:
    clawfile = """
        version: 1
        model: fake-model
        tasks:
          summary:
            prompt: "Summarise"
          narrow:
            prompt: "Narrow"
            skills: [pdf]
          plain:
            prompt: "Plain"
            skills: []
          recall:
            prompt: "Recall"
            tools: [read, memory_search]
    """
    root = make_project(tmp_path / "p", clawfile)
    skill_md(root / "skills/pdf", "name: pdf\ndescription: Read, split and merge PDF files.")
    skill_md(root / "skills/docx", "name: docx\ndescription: Write Word documents.")
    result = skills_cli(root, "check")
    assert result.exit_code == 0
    assert result.stderr == "claw: 3 skills found, 3 available, none invalid\n"
    # The built-in skill is shown to the model at claw's install location, so recall's count
    # follows where claw is installed: its list, as the system prompt holds it, 4 to a token.
    memory = Path(claw_batch.__file__).parent / "skills/builtin/memory"
    recall = (
        "## Skills (read its SKILL.md before using one)\n"
        "- docx: Write Word documents. (skills/docx/SKILL.md)\n"
        f"- memory: {MEMORY_DESCRIPTION} ({memory}/SKILL.md)\n"
        "- pdf: Read, split and merge PDF files. (skills/pdf/SKILL.md)\n\n"
    )
    assert result.stdout == (
        "The skills list each task's system prompt carries, sent with every model call\n"
        "(tokens estimated at 4 characters a token):\n"
        "  summary  ~40 tokens  docx, pdf (all it can use; it has no skills: key)\n"
        "  narrow   ~27 tokens  pdf (skills: [pdf])\n"
        "  plain      0 tokens  none (skills: [])\n"
        f"  recall   ~{len(recall) // 4} tokens  docx, memory, pdf "
        "(all it can use; it has no skills: key)\n"
        "Give a task fewer with skills: [name, ...] under it in clawfile.yaml, none with "
        "skills: [].\n"
        f"{RERUNS}\n"
    )


RERUNS = "A change to a task's skills reruns its jobs: claw plan '*' lists every task's."


def test_skills_check_points_to_a_plan_of_every_task(tmp_path: Path) -> None:
    """Issue 16 review, point 5: a bare `claw plan` shows only the default tasks; a hook's
    or a schedule's task, whose skills changed too, is missing from it."""
    root = make_project(
        tmp_path / "p",
        """
        version: 1
        model: fake-model
        default: [summary]
        tasks:
          summary: {prompt: Summarise}
          review: {prompt: Review, check: true, hook: pre-commit}
          nightly: {prompt: Nightly, schedule: "0 3 * * *"}
        """,
    )
    checked = skills_cli(root, "check")
    assert (checked.exit_code, checked.stdout.splitlines()[-1]) == (0, RERUNS)
    planned = claw(root, "plan", "*")
    assert planned.exit_code == 0, planned.stderr
    tasks = [line.split()[1] for line in planned.stdout.splitlines()]
    assert tasks == ["summary", "review", "nightly"]
    bare = claw(root, "plan")
    assert [line.split()[1] for line in bare.stdout.splitlines()] == ["summary"]
