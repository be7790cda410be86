"""`claw validate` beyond the clawfile itself: tool permissions and skills."""

from __future__ import annotations

from pathlib import Path

from helpers import claw, make_project

from claw_batch.skills import discover, parse_skill


def test_bash_without_permission_and_unknown_skill(tmp_path: Path) -> None:
    root = make_project(
        tmp_path,
        """
        version: 1
        tasks:
          a:
            prompt: hi
            tools: [read, bash]
            skills: [plain-reprot]
        """,
        {"skills/plain-report/SKILL.md": "---\nname: plain-report\ndescription: Plain.\n---\n"},
    )
    r = claw(root, "validate")
    assert r.exit_code == 2
    assert r.stderr == (
        "claw: clawfile.yaml:5: tasks.a.tools: bash needs permissions.bash: "
        "a list of command patterns, or true\n"
        "clawfile.yaml:6: tasks.a.skills[0]: unknown skill 'plain-reprot' "
        "(did you mean 'plain-report'?)\n"
    )


def test_invalid_skill_file_fails_validate(tmp_path: Path) -> None:
    root = make_project(
        tmp_path,
        "version: 1\ntasks:\n  a: {prompt: hi}\n",
        {"skills/broken/SKILL.md": "# no front matter\n"},
    )
    r = claw(root, "validate")
    assert (r.exit_code, r.stderr) == (
        2,
        "claw: skills/broken/SKILL.md: not a valid skill: no front matter: it must start "
        "with a --- block holding name and description\n",
    )


def test_unquoted_colon_in_description_is_read(tmp_path: Path) -> None:
    skill = tmp_path / "skills/style/SKILL.md"
    skill.parent.mkdir(parents=True)
    skill.write_text("---\nname: style\ndescription: House style: short lines.\n---\nBody\n")
    parsed = parse_skill(skill)
    assert parsed is not None
    assert (parsed.name, parsed.description) == ("style", "House style: short lines.")


def test_workspace_skill_shadows_project_skill(tmp_path: Path) -> None:
    for base, text in (("workspace/skills", "Workspace."), ("skills", "Project.")):
        path = tmp_path / base / "style/SKILL.md"
        path.parent.mkdir(parents=True)
        path.write_text(f"---\nname: style\ndescription: {text}\n---\n")
    (found,) = discover([tmp_path / "workspace/skills", tmp_path / "skills"])
    assert found.description == "Workspace."
