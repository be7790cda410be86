"""`claw validate` beyond the clawfile itself: tool permissions and skills."""

from __future__ import annotations

from pathlib import Path

from helpers import claw, make_project

from claw_batch.skills.skill import discover, parse_skill


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
        "claw: clawfile.yaml:6: tasks.a.skills[0]: unknown skill 'plain-reprot' "
        "(did you mean 'plain-report'?)\n"
    )


def test_each_problem_of_a_clawfile_is_a_line_that_starts_claw(tmp_path: Path) -> None:
    # Only the first of several problems used to say `claw:`; the others looked like output.
    root = make_project(
        tmp_path,
        """
        version: 1
        tasks:
          a:
            prompt: hi
            temperature: -1
          b:
            prompt: hi
            needs: [c]
        """,
    )
    expected = (
        "claw: clawfile.yaml:5: tasks.a.temperature: must be at least 0, got -1\n"
        "claw: clawfile.yaml:8: tasks.b.needs[0]: unknown task 'c' (known: a, b)\n"
    )
    for command in ("validate", "run", "list"):
        r = claw(root, command)
        assert (command, r.exit_code, r.stderr) == (command, 2, expected)


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


def test_validate_reports_what_the_template_sandbox_refuses(tmp_path: Path) -> None:
    """Found before any run where the template names it; what it builds at render time the
    sandbox refuses then (tests/test_render.py)."""
    root = make_project(
        tmp_path,
        """
        version: 1
        tasks:
          a:
            prompt: prompts/a.md
          b:
            prompt: "{{ inputs|nosuchfilter }}"
          c:
            prompt: "{{ " + "(" * 2000 + "1" + ")" * 2000 + " }}"
        """.replace('" + "(" * 2000 + "1" + ")" * 2000 + "', "(" * 2000 + "1" + ")" * 2000),
        {
            "prompts/a.md": (
                "{{ cycler.__init__.__globals__.os }}\n"
                "{{ '{0.__class__}'.format(task) }} {{ inputs.append(1) }}\n"
                "{{ needs['__dict__'] }}\n"
            )
        },
    )
    r = claw(root, "validate")
    sandbox = (
        "they run in Jinja's sandbox, which refuses attributes that start with '_' "
        "and methods that change a list or a dict"
    )
    assert (r.exit_code, r.stderr) == (
        2,
        "claw: clawfile.yaml:6: tasks.b.prompt: template error: No filter named 'nosuchfilter'.\n"
        "claw: clawfile.yaml:8: tasks.c.prompt: the template is nested too deeply "
        "(brackets or blocks)\n"
        f"claw: prompts/a.md:1: templates may not use '__globals__': {sandbox}\n"
        f"claw: prompts/a.md:1: templates may not use '__init__': {sandbox}\n"
        f"claw: prompts/a.md:2: templates may not use '__class__': {sandbox}\n"
        f"claw: prompts/a.md:2: templates may not use 'append': {sandbox}\n"
        f"claw: prompts/a.md:3: templates may not use '__dict__': {sandbox}\n",
    )


def test_an_included_template_that_cannot_be_read_is_an_error(tmp_path: Path) -> None:
    """A literal include must be a file a run can read (an `ignore missing` one need not
    exist): a missing one, one outside the project, a FIFO — said at validate, not at run."""
    root = make_project(
        tmp_path / "p",
        """
        version: 1
        tasks:
          a:
            prompt: prompts/a.md
          b:
            prompt: "{% include 'prompts/gone.md' ignore missing %}{% include '../x.md' %}"
        """,
        {
            "prompts/a.md": "{% include 'prompts/part.md' %}\n",
            "prompts/part.md": "{% include 'prompts/no.md' %}",
        },
    )
    (tmp_path / "x.md").write_text("outside\n")
    r = claw(root, "validate")
    assert r.exit_code == 2
    assert r.stderr.splitlines() == [
        f"claw: clawfile.yaml: included template '../x.md': refused reading ../x.md: it "
        f"resolves to {tmp_path.resolve()}/x.md, outside the project root {root.resolve()}; "
        "use paths inside the project",
        "claw: prompts/part.md: included template 'prompts/no.md': no such file or directory: "
        "prompts/no.md",
    ]


def test_an_unclosed_quote_is_reported_on_the_line_it_opens(tmp_path: Path) -> None:
    # PyYAML marks where it gave up — the end of the file, or past the next quote, which
    # closed the string lines later — not the line that lacks its quote.
    opened = 'version: 1\ntasks:\n  a:\n    prompt: hi\n    description: "Summarise\n  b:\n'
    root = make_project(tmp_path / "end", opened + "    prompt: go\n")
    r = claw(root, "validate")
    assert (r.exit_code, r.stderr) == (
        2,
        "claw: clawfile.yaml:5: the quoted string that starts here is never closed; "
        "add the closing quote\n",
    )
    root = make_project(tmp_path / "next", opened + '    prompt: "go"\n')
    r = claw(root, "validate")
    assert (r.exit_code, r.stderr) == (
        2,
        "claw: clawfile.yaml:5: the quoted string that starts here runs on to the quote on "
        "line 7 (expected <block end>, but found '<scalar>'); close it on line 5\n",
    )
