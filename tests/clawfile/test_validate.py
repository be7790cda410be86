"""clawfile.yaml loading: every error message is asserted whole (SPEC §2)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from claw_batch.clawfile.load import load_project
from claw_batch.config import Project, find_clawfile, resolve_model
from claw_batch.errors import ClawfileError

TOOLS = "read, write, edit, bash, grep, ls, find, remember, memory_search, delegate"
VARIABLES = "files, git, glob, input, inputs, item, needs, now, read, task, today"


def make_project(root: Path, clawfile: str, files: dict[str, str] | None = None) -> Path:
    (root / "clawfile.yaml").write_text(textwrap.dedent(clawfile).lstrip("\n"), encoding="utf-8")
    for name, text in (files or {}).items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    return root


def load(root: Path, clawfile: str, files: dict[str, str] | None = None) -> Project:
    return load_project(make_project(root, clawfile, files), cache="off")


def error(root: Path, clawfile: str, files: dict[str, str] | None = None) -> str:
    with pytest.raises(ClawfileError) as caught:
        load(root, clawfile, files)
    assert caught.value.exit_code == 2
    return str(caught.value)


# --- YAML problems -------------------------------------------------------------------------


def test_tab_indentation(tmp_path: Path) -> None:
    text = "version: 1\ntasks:\n  a:\n\tprompt: hi\n"
    assert error(tmp_path, text) == (
        "clawfile.yaml:4: tab character used for indentation; YAML needs spaces"
    )


def test_tab_inside_a_block_prompt_is_text(tmp_path: Path) -> None:
    project = load(tmp_path, "tasks:\n  a:\n    prompt: |\n      code:\n      \tindented\n")
    assert project.config.tasks["a"].prompt == "code:\n\tindented\n"


def test_duplicate_key(tmp_path: Path) -> None:
    clawfile = """
        version: 1
        model: gpt-4o-mini
        tasks:
          triage:
            prompt: Triage the inbox.
          summary:
            prompt: Summarise.
            max_steps: 3
          triage:
            prompt: Again.
    """
    assert error(tmp_path, clawfile) == "clawfile.yaml:9: duplicate key 'triage' (first at line 4)"


def test_yaml_syntax_error(tmp_path: Path) -> None:
    assert error(tmp_path, "tasks:\n  a: b: c\n") == (
        "clawfile.yaml:2: mapping values are not allowed here"
    )


def test_empty_file(tmp_path: Path) -> None:
    assert error(tmp_path, "# nothing yet\n") == (
        "clawfile.yaml: the file is empty; declare 'version: 1' and 'tasks:'"
    )


def test_not_a_mapping(tmp_path: Path) -> None:
    assert (
        error(tmp_path, "- a\n- b\n") == "clawfile.yaml:1: expected a mapping of keys, got a list"
    )


def test_unsupported_version(tmp_path: Path) -> None:
    assert error(tmp_path, "version: 2\ntasks:\n  a: {promptt: x}\n") == (
        "clawfile.yaml:1: version: unsupported clawfile version 2; this claw reads version 1"
    )


def test_control_characters_are_refused_where_they_are(tmp_path: Path) -> None:
    for char, code in (("\x00", "0000"), ("\x01", "0001"), ("\x1b", "001B")):
        text = f"version: 1\ntasks:\n  a:\n    prompt: hi{char}\n"
        assert error(tmp_path, text) == (
            f"clawfile.yaml:4: the control character U+{code} is not allowed in a YAML file; "
            f'remove it, or write it as the escape "\\u{code.lower()}" in a double-quoted string'
        )


def test_half_a_surrogate_pair_is_refused(tmp_path: Path) -> None:
    text = 'version: 1\ntasks:\n  a:\n    prompt: hi\n    output: "out/\\ud800.md"\n'
    assert error(tmp_path, text) == (
        "clawfile.yaml:5: \\ud800 is half of a surrogate pair, not a character; remove it"
    )


def test_nesting_deeper_than_the_bound_is_refused(tmp_path: Path) -> None:
    # 5,000 levels: PyYAML's recursive composer would end in a RecursionError.
    deep = "[" * 5000 + "]" * 5000
    text = f"version: 1\ntasks:\n  a:\n    prompt: hi\n    description: {deep}\n"
    assert error(tmp_path, text) == (
        "clawfile.yaml:5: nested more than 50 levels deep; a clawfile needs a few"
    )


def test_an_alias_bomb_is_refused_before_it_expands(tmp_path: Path) -> None:
    # Nine levels of ten aliases: 10**9 values once expanded, which an unbounded loader walks
    # for minutes and gigabytes (past this test's timeout); refused at the 100,001st.
    lines = ["version: 1", "x0: &x0 [" + ", ".join(["v"] * 10) + "]"]
    lines += [f"x{i}: &x{i} [" + ", ".join([f"*x{i - 1}"] * 10) + "]" for i in range(1, 9)]
    lines += ["tasks:", "  a: {prompt: hi, description: *x8}"]
    assert error(tmp_path, "\n".join(lines) + "\n") == (
        "clawfile.yaml:6: the document holds more than 100,000 values once its aliases are "
        "expanded; write the values out instead of nesting aliases (&name / *name)"
    )


def test_an_alias_inside_its_own_anchor_is_refused(tmp_path: Path) -> None:
    text = "version: 1\ntasks:\n  a: &a\n    prompt: hi\n    description: [*a]\n"
    assert error(tmp_path, text) == (
        "clawfile.yaml:5: the alias *a refers to a collection that holds it"
    )


def test_a_clawfile_larger_than_the_bound_is_refused(tmp_path: Path) -> None:
    text = "version: 1\ntasks:\n  a:\n    prompt: " + "x" * 1_000_000 + "\n"
    assert error(tmp_path, text) == (
        "clawfile.yaml: larger than 1,000,000 bytes, more than a clawfile may be; "
        "move long prompts into files (prompt: prompts/NAME.md)"
    )


def test_aliases_and_nesting_within_the_bounds_are_read(tmp_path: Path) -> None:
    schema = "{type: string}"
    for _ in range(20):  # a JSON Schema 42 levels deep, in a clawfile 45 deep
        schema = f"{{type: object, properties: {{x: {schema}}}}}"
    project = load(
        tmp_path,
        f"""
        version: 1
        tasks:
          a: &a {{prompt: hi, max_steps: 3, permissions: {{write: [out/**]}}, schema: {schema}}}
          b: {{<<: *a, prompt: ho, schema: {{type: object}}}}
        """,
    )
    assert project.config.tasks["b"].max_steps == 3
    assert project.config.tasks["b"].permissions.write == ("out/**",)


def test_infinite_numbers_are_refused(tmp_path: Path) -> None:
    # `1e400` is a string to YAML 1.1, which pydantic would read as inf; .inf and .nan are floats.
    clawfile = """
        tasks:
          a:
            prompt: hi
            temperature: 1e400
            timeout: .inf
            budget: {max_usd: .nan}
    """
    assert error(tmp_path, clawfile) == "\n".join(
        [
            "clawfile.yaml:4: tasks.a.temperature: expected a finite number, got '1e400'",
            "clawfile.yaml:5: tasks.a.timeout: expected a finite number, got inf",
            "clawfile.yaml:6: tasks.a.budget.max_usd: expected a finite number, got nan",
        ]
    )


# --- keys and types ------------------------------------------------------------------------


def test_unknown_key_suggests_the_close_one(tmp_path: Path) -> None:
    # No "missing required key 'prompt'" besides: the suggestion already says it.
    clawfile = """
        tasks:
          summary:
            promt: prompts/summary.md
    """
    assert error(tmp_path, clawfile) == (
        "clawfile.yaml:3: tasks.summary: unknown key 'promt' (did you mean 'prompt'?)"
    )


def test_unknown_key_without_a_close_one_lists_the_valid_keys(tmp_path: Path) -> None:
    clawfile = """
        colour: blue
        tasks:
          a: {prompt: hi}
    """
    assert error(tmp_path, clawfile) == (
        "clawfile.yaml:1: unknown key 'colour' (valid keys: version, model, workspace, "
        "providers, defaults, default, tasks, prices, budget, cache, mcp_servers, executor, notify)"
    )


def test_missing_required_keys(tmp_path: Path) -> None:
    assert error(tmp_path, "model: gpt-4o\n") == "clawfile.yaml: missing required key 'tasks'"
    assert error(tmp_path, "tasks:\n  a:\n    description: x\n") == (
        "clawfile.yaml:2: tasks.a: missing required key 'prompt'"
    )


def test_unknown_tool(tmp_path: Path) -> None:
    clawfile = """
        tasks:
          summary:
            prompt: Summarise.
            tools:
              - read
              - grep
              - bsh
    """
    assert error(tmp_path, clawfile) == (
        f"clawfile.yaml:7: tasks.summary.tools[2]: unknown tool 'bsh' (known: {TOOLS})"
    )


def test_wrong_types(tmp_path: Path) -> None:
    clawfile = """
        tasks:
          a:
            prompt: hi
            max_steps: many
            timeout: 0
            catch_up: never
            always: maybe
            hook: post-commit
            permissions:
              bash: 3
            budget: {max_tokens: 1.5}
            inputs: {a: 1}
    """
    assert error(tmp_path, clawfile) == "\n".join(
        [
            "clawfile.yaml:4: tasks.a.max_steps: expected an integer, got 'many'",
            "clawfile.yaml:5: tasks.a.timeout: must be greater than 0, got 0",
            "clawfile.yaml:6: tasks.a.catch_up: expected 'once' or 'skip', got 'never'",
            "clawfile.yaml:7: tasks.a.always: expected true, false or a list of MCP tools "
            "(mcp.SERVER.TOOL), got 'maybe'",
            "clawfile.yaml:8: tasks.a.hook: expected 'pre-commit', 'commit-msg' or 'pre-push', "
            "got 'post-commit'",
            "clawfile.yaml:10: tasks.a.permissions.bash: "
            "expected true, false or a list of command patterns, got 3",
            "clawfile.yaml:11: tasks.a.budget.max_tokens: expected an integer, got 1.5",
            "clawfile.yaml:12: tasks.a.inputs: expected a list, got a mapping",
        ]
    )


def test_invalid_task_name(tmp_path: Path) -> None:
    clawfile = """
        tasks:
          bad name:
            prompt: hi
    """
    assert error(tmp_path, clawfile) == (
        "clawfile.yaml:2: tasks.bad name: invalid name 'bad name': use letters, digits, "
        "'_', '.' and '-', starting with a letter or digit"
    )


def test_bad_cron_expression_and_time_zone(tmp_path: Path) -> None:
    clawfile = """
        tasks:
          nightly:
            prompt: hi
            schedule: "0 25 * * *"
            tz: utc
    """
    assert error(tmp_path, clawfile) == "\n".join(
        [
            "clawfile.yaml:4: tasks.nightly.schedule: '0 25 * * *' is not a valid cron "
            "expression (minute hour day month weekday, e.g. '0 23 * * *' = every day at 23:00)",
            "clawfile.yaml:5: tasks.nightly.tz: unknown time zone 'utc' (did you mean 'UTC'?)",
        ]
    )


# --- secrets -------------------------------------------------------------------------------

SECRET = "sk-proj-Zx81kQ4wLmN2vB7cD9eF0gH3"


def test_literal_api_key_is_refused(tmp_path: Path) -> None:
    clawfile = f"""
        providers:
          local:
            base_url: http://localhost:11434/v1
            api_key: {SECRET}
        tasks:
          a: {{prompt: hi}}
    """
    message = error(tmp_path, clawfile)
    assert message == (
        "clawfile.yaml:4: providers.local: literal API keys are refused: put the key in an "
        "environment variable and name that variable with api_key_env "
        "(e.g. api_key_env: MY_API_KEY)"
    )
    assert "Zx81" not in message


def test_key_pasted_in_api_key_env_is_refused_and_not_echoed(tmp_path: Path) -> None:
    clawfile = f"""
        providers:
          groq:
            base_url: https://api.groq.com/openai/v1
            api_key_env: gsk_Zx81kQ4wLmN2vB7cD9eF0gH3
          openrouter:
            base_url: https://openrouter.ai/api/v1
            api_key_env: {SECRET}
          fine:
            base_url: https://openrouter.ai/api/v1
            api_key_env: OPENROUTER_API_KEY
        tasks:
          a: {{prompt: hi}}
    """
    message = error(tmp_path, clawfile)
    advice = (
        "not the name of an environment variable; put the key in an environment variable "
        "and write its name here, e.g. api_key_env: MY_API_KEY"
    )
    assert message == "\n".join(
        [
            f"clawfile.yaml:4: providers.groq.api_key_env: this looks like an API key "
            f"('gsk…'), {advice}",
            f"clawfile.yaml:7: providers.openrouter.api_key_env: this looks like an API key "
            f"('sk-…'), {advice}",
        ]
    )
    assert "Zx81" not in message


# --- providers -----------------------------------------------------------------------------


def test_providers_need_an_http_base_url_without_credentials(tmp_path: Path) -> None:
    # Without a base_url, local's key would go to OPENAI_BASE_URL or api.openai.com.
    clawfile = """
        providers:
          local:
            api_key_env: OLLAMA_API_KEY
          groq:
            base_url: api.groq.com/openai/v1
          proxy:
            base_url: https://me:hunter2@proxy.example/v1
          openai:
            max_concurrency: 2
        tasks:
          a: {prompt: hi}
    """
    message = error(tmp_path, clawfile)
    assert message == "\n".join(
        [
            "clawfile.yaml:2: providers.local: missing required key 'base_url': the URL of "
            "this provider's OpenAI-compatible API, e.g. base_url: http://localhost:11434/v1 "
            "(only a provider named 'openai' may leave it out, to use OPENAI_BASE_URL or "
            "api.openai.com)",
            "clawfile.yaml:5: providers.groq.base_url: expected an http:// or https:// URL "
            "such as 'http://localhost:11434/v1', got 'api.groq.com/openai/v1'",
            "clawfile.yaml:7: providers.proxy.base_url: credentials in the URL are refused: "
            "put the key in an environment variable and name that variable with api_key_env "
            "(e.g. api_key_env: MY_API_KEY)",
        ]
    )
    assert "hunter2" not in message


# --- paths ---------------------------------------------------------------------------------

INSIDE = "paths are relative to the project root"


def test_paths_must_stay_inside_the_project(tmp_path: Path) -> None:
    clawfile = """
        tasks:
          t:
            prompt: ../p1/prompts/t.md
            inputs: ["notes/*.md", "../p1/notes/*.md"]
            foreach: /etc/*.conf
            watch: "~/inbox/*.txt"
            output: "../reports/{{ today }}.md"
            outputs: ["ok/{{ today }}.md", "/tmp/{{ today }}.json", "out/{{ today }}/../../x"]
            permissions:
              write: ["workspace/**", "workspace/../../**", "{..,notes}/*"]
    """
    leaves = f"leaves the project; {INSIDE} and may not contain '..'"
    assert error(tmp_path, clawfile) == "\n".join(
        [
            f"clawfile.yaml:3: tasks.t.prompt: '../p1/prompts/t.md' {leaves}",
            f"clawfile.yaml:4: tasks.t.inputs[1]: '../p1/notes/*.md' {leaves}",
            f"clawfile.yaml:5: tasks.t.foreach: '/etc/*.conf' is an absolute path; {INSIDE} "
            "and may not start with '/'",
            f"clawfile.yaml:6: tasks.t.watch[0]: '~/inbox/*.txt' starts with '~'; {INSIDE} "
            "and '~' is not expanded",
            f"clawfile.yaml:7: tasks.t.output: '../reports/{{{{ today }}}}.md' {leaves}",
            "clawfile.yaml:8: tasks.t.outputs[1]: '/tmp/{{ today }}.json' is an absolute path; "
            f"{INSIDE} and may not start with '/'",
            f"clawfile.yaml:8: tasks.t.outputs[2]: 'out/{{{{ today }}}}/../../x' {leaves}",
            f"clawfile.yaml:10: tasks.t.permissions.write[1]: 'workspace/../../**' {leaves}",
            f"clawfile.yaml:10: tasks.t.permissions.write[2]: '{{..,notes}}/*' {leaves}",
        ]
    )


def test_paths_with_control_characters_are_refused(tmp_path: Path) -> None:
    # Written as YAML escapes: "\0" in a path was an "embedded null byte" crash of the run.
    clawfile = r"""
        workspace: "work\0"
        tasks:
          t:
            prompt: hi
            output: "out/a\tb.md"
            inputs: ["notes/\x85*.md"]
    """
    assert error(tmp_path, clawfile) == "\n".join(
        [
            "clawfile.yaml:1: workspace: 'work\\x00' holds the control character U+0000, "
            "which a path may not",
            "clawfile.yaml:5: tasks.t.output: 'out/a\\tb.md' holds the control character U+0009, "
            "which a path may not",
            "clawfile.yaml:6: tasks.t.inputs[0]: 'notes/\\x85*.md' holds the control character "
            "U+0085, which a path may not",
        ]
    )


def test_names_and_paths_no_file_system_takes_are_refused(tmp_path: Path) -> None:
    # A 300-byte workspace name was an "unexpected error" (ENAMETOOLONG) in validate and run.
    name, deep = "x" * 300, "a/" * 2100
    clawfile = f"""
        workspace: {name}
        tasks:
          t:
            prompt: hi
            output: out/{name}.md
            inputs: ["{deep}*.md"]
    """
    assert error(tmp_path, clawfile) == "\n".join(
        [
            f"clawfile.yaml:1: workspace: '{'x' * 37}...' has a name of 300 bytes; "
            "a name has at most 255",
            f"clawfile.yaml:5: tasks.t.output: 'out/{'x' * 33}...' has a name of 303 bytes; "
            "a name has at most 255",
            f"clawfile.yaml:6: tasks.t.inputs[0]: '{'a/' * 18}a...' is longer than 4,000 bytes, "
            "more than a path may be",
        ]
    )


def test_a_globstar_inside_a_path_segment_is_refused(tmp_path: Path) -> None:
    # `out/a**` in foreach: was a crash ("'**' can only be an entire path component").
    clawfile = """
        tasks:
          t:
            prompt: hi
            foreach: "out/a**"
            inputs: ["{notes,**}/x.md", "notes/**/*.md", "**"]
    """
    whole = "'**' stands only as a whole segment (e.g. 'notes/**/*.md'), and '*' matches within one"
    assert error(tmp_path, clawfile) == "\n".join(
        [
            f"clawfile.yaml:4: tasks.t.foreach: 'out/a**' has '**' inside a path segment; {whole}",
            "clawfile.yaml:5: tasks.t.inputs[0]: '{notes,**}/x.md' has '**' inside a path "
            f"segment; {whole}",
        ]
    )


def test_a_prompt_file_must_be_inside_the_project(tmp_path: Path) -> None:
    clawfile = """
        defaults:
          inputs: /home/me/notes/*.md
        tasks:
          t:
            prompt: /home/me/prompts/t.md
    """
    assert error(tmp_path, clawfile) == "\n".join(
        [
            "clawfile.yaml:2: defaults.inputs[0]: '/home/me/notes/*.md' is an absolute path; "
            f"{INSIDE} and may not start with '/'",
            "clawfile.yaml:5: tasks.t.prompt: '/home/me/prompts/t.md' is an absolute path; "
            f"{INSIDE} and may not start with '/'",
        ]
    )


def test_templated_and_dotted_paths_inside_the_project(tmp_path: Path) -> None:
    # Only the literal text of a template is checked; `a..b` is a name, not a parent.
    clawfile = """
        workspace: ./work
        tasks:
          t:
            prompt: prompts/t..v2.md
            inputs: "./notes/a..b/*.md"
            output: "{{ today }}/{{ task }}.md"
            outputs: ["reports/{{ now.strftime('%Y/%m') }}/index.md"]
    """
    task = load(tmp_path, clawfile, {"prompts/t..v2.md": "hi\n"}).config.tasks["t"]
    assert (task.output, task.inputs) == ("{{ today }}/{{ task }}.md", ("./notes/a..b/*.md",))


@pytest.mark.parametrize(
    ("workspace", "message"),
    [
        (
            ".claw",
            "'.claw' is in .claw/, which tools may never write; "
            "use a directory of its own, such as 'workspace'",
        ),
        (
            "./.git/ws",
            "'./.git/ws' is in .git/, which tools may never write; "
            "use a directory of its own, such as 'workspace'",
        ),
        ("../shared", f"'../shared' leaves the project; {INSIDE} and may not contain '..'"),
        ("/srv/ws", f"'/srv/ws' is an absolute path; {INSIDE} and may not start with '/'"),
        ("~/ws", f"'~/ws' starts with '~'; {INSIDE} and '~' is not expanded"),
    ],
)
def test_workspace_must_be_a_directory_of_the_project(
    tmp_path: Path, workspace: str, message: str
) -> None:
    clawfile = f"workspace: {workspace}\ntasks:\n  a: {{prompt: hi}}\n"
    assert error(tmp_path, clawfile) == f"clawfile.yaml:1: workspace: {message}"


# --- budgets in USD --------------------------------------------------------------------------


def test_a_usd_budget_needs_the_price_of_its_model(tmp_path: Path) -> None:
    # A limit in USD over a model of unknown price would cap nothing: refused, never ignored.
    clawfile = """
        model: local/qwen
        providers:
          local: {base_url: "http://127.0.0.1:11434/v1"}
        budget: {per_day: 5}
        prices:
          priced: {input: 0, output: 0}
        tasks:
          a:
            prompt: hi
            budget: {max_tokens: 1000, max_usd: 0.5}
          b: {prompt: hi, model: gpt-4o-mini}
          c: {prompt: hi, model: local/priced}
          d: {prompt: hi}
    """
    advice = (
        "so {key} would cap nothing: add it under prices:, in USD per million tokens, e.g. "
        "prices: {{local/qwen: {{input: 0.5, output: 1.5}}}} (0 for a local model)"
    )
    assert error(tmp_path, clawfile) == "\n".join(
        [
            "clawfile.yaml:4: budget.per_day: no price is known for model 'local/qwen' "
            "(task 'd'), " + advice.format(key="per_day"),
            "clawfile.yaml:10: tasks.a.budget.max_usd: no price is known for model 'local/qwen' "
            "(task 'a'), " + advice.format(key="max_usd"),
        ]
    )
    priced = clawfile.replace("priced: {", "qwen: {input: 0, output: 0}\n          priced: {")
    tasks = load(tmp_path, priced).config
    assert tasks.budget is not None and tasks.budget.per_day == 5
    assert tasks.prices["qwen"].input == 0


def test_a_token_budget_is_valid_and_can_be_a_default(tmp_path: Path) -> None:
    clawfile = "defaults:\n  budget: {max_tokens: 5000}\nprices: {}\ntasks:\n  a: {prompt: hi}\n"
    budget = load(tmp_path, clawfile).config.tasks["a"].budget
    assert budget is not None and budget.max_tokens == 5000


# --- references between tasks --------------------------------------------------------------


def test_dependency_cycle(tmp_path: Path) -> None:
    clawfile = """
        tasks:
          a:
            prompt: hi
            needs: [b]
          b:
            prompt: hi
            needs: [c]
          c:
            prompt: hi
            needs: a
    """
    assert (
        error(tmp_path, clawfile)
        == "clawfile.yaml:4: tasks.a.needs: dependency cycle: a -> b -> c -> a"
    )


def test_task_that_needs_itself(tmp_path: Path) -> None:
    assert error(tmp_path, "tasks:\n  a:\n    prompt: hi\n    needs: a\n") == (
        "clawfile.yaml:4: tasks.a.needs: dependency cycle: a -> a"
    )


def test_unknown_needs(tmp_path: Path) -> None:
    clawfile = """
        tasks:
          collect:
            prompt: hi
          summary:
            prompt: hi
            needs: [colect, nope]
    """
    assert error(tmp_path, clawfile) == "\n".join(
        [
            "clawfile.yaml:6: tasks.summary.needs[0]: unknown task 'colect' "
            "(did you mean 'collect'?)",
            "clawfile.yaml:6: tasks.summary.needs[1]: unknown task 'nope' "
            "(known: collect, summary)",
        ]
    )


def test_unknown_default(tmp_path: Path) -> None:
    clawfile = """
        default:
          - summary
          - report
        tasks:
          summary: {prompt: hi}
          collect: {prompt: hi}
    """
    assert error(tmp_path, clawfile) == (
        "clawfile.yaml:3: default[1]: unknown task 'report' (known: summary, collect)"
    )


# --- templates -----------------------------------------------------------------------------


def test_missing_prompt_file(tmp_path: Path) -> None:
    clawfile = """
        tasks:
          x:
            description: Something
            prompt: prompts/nope.md
    """
    assert error(tmp_path, clawfile) == (
        "clawfile.yaml:4: tasks.x.prompt: prompt file 'prompts/nope.md' not found"
    )


def test_undefined_variable_in_a_prompt_file(tmp_path: Path) -> None:
    files = {"prompts/summary.md": "# Summary\n\nNotes of {{ todya }}:\n{{ inputs }}\n"}
    assert error(tmp_path, "tasks:\n  s:\n    prompt: prompts/summary.md\n", files) == (
        f"prompts/summary.md:3: undefined template variable 'todya' (known: {VARIABLES})"
    )


def test_undefined_variable_in_an_inline_prompt(tmp_path: Path) -> None:
    clawfile = """
        tasks:
          s:
            prompt: |
              Summarise the notes.

              Today is {{ today }}, for {{ usr }}.
            output: "reports/{{ tody }}.md"
    """
    assert error(tmp_path, clawfile) == "\n".join(
        [
            "clawfile.yaml:6: tasks.s.prompt: undefined template variable 'usr' "
            f"(known: {VARIABLES})",
            "clawfile.yaml:7: tasks.s.output: undefined template variable 'tody' "
            f"(known: {VARIABLES})",
        ]
    )


def test_item_needs_foreach(tmp_path: Path) -> None:
    clawfile = """
        tasks:
          inline:
            prompt: "Triage {{ item.path }}."
          file:
            prompt: prompts/triage.md
          fanout:
            prompt: prompts/triage.md
            foreach: "inbox/*.txt"
            output: "out/{{ item.stem }}.md"
    """
    files = {"prompts/triage.md": "Triage\n{{ item.path }}\n"}
    assert error(tmp_path, clawfile, files) == "\n".join(
        [
            "clawfile.yaml:3: tasks.inline.prompt: "
            "template variable 'item' is only defined for tasks with foreach or watch",
            "prompts/triage.md:2: template variable 'item' is only defined for tasks with "
            "foreach or watch (task 'file' has none)",
        ]
    )


def test_template_syntax_error(tmp_path: Path) -> None:
    files = {"prompts/a.j2": "Hello\n{% if today %}\nno end\n"}
    assert error(tmp_path, "tasks:\n  a:\n    prompt: prompts/a.j2\n", files) == (
        "prompts/a.j2:2: template syntax error: Unexpected end of template. Jinja was looking "
        "for the following tags: 'elif' or 'else' or 'endif'. The innermost block that needs "
        "to be closed is 'if'."
    )


def test_empty_prompt(tmp_path: Path) -> None:
    assert error(tmp_path, "tasks:\n  a:\n    prompt: ''\n") == (
        "clawfile.yaml:3: tasks.a.prompt: the prompt is empty"
    )


# --- schemas -------------------------------------------------------------------------------


def test_invalid_json_schema(tmp_path: Path) -> None:
    clawfile = """
        tasks:
          extract:
            prompt: hi
            schema:
              type: object
              properties:
                n: {type: strin}
    """
    assert error(tmp_path, clawfile) == (
        "clawfile.yaml:4: tasks.extract.schema: not a valid JSON Schema: "
        "at schema.properties.n.type: 'strin' is not valid under any of the given schemas"
    )


def test_check_task_with_schema(tmp_path: Path) -> None:
    clawfile = """
        tasks:
          review:
            prompt: hi
            check: true
            schema: {type: object}
    """
    assert error(tmp_path, clawfile) == (
        "clawfile.yaml:5: tasks.review.schema: a check task (check: true) cannot have a "
        "schema: its verdict has a fixed one, {ok, summary, findings}"
    )


# --- all at once ---------------------------------------------------------------------------


def test_several_errors_are_reported_together_in_line_order(tmp_path: Path) -> None:
    clawfile = """
        default: [summry]
        defaults:
          max_step: 10
        tasks:
          collect:
            prompt: prompts/collect.md
            tools: [read, bsh]
          summary:
            prompt: "Summarise {{ needs.collect.result }} of {{ todya }}"
            needs: [collect, archive]
            max_steps: 0
          report:
            prompt: prompts/missing.md
    """
    files = {"prompts/collect.md": "Collect {{ inputs }} as {{ whoami }}.\n"}
    assert error(tmp_path, clawfile, files) == "\n".join(
        [
            "clawfile.yaml:1: default[0]: unknown task 'summry' (did you mean 'summary'?)",
            "clawfile.yaml:3: defaults: unknown key 'max_step' (did you mean 'max_steps'?)",
            f"clawfile.yaml:7: tasks.collect.tools[1]: unknown tool 'bsh' (known: {TOOLS})",
            "clawfile.yaml:9: tasks.summary.prompt: undefined template variable 'todya' "
            f"(known: {VARIABLES})",
            "clawfile.yaml:10: tasks.summary.needs[1]: unknown task 'archive' "
            "(known: collect, summary, report)",
            "clawfile.yaml:11: tasks.summary.max_steps: must be greater than 0, got 0",
            "clawfile.yaml:13: tasks.report.prompt: prompt file 'prompts/missing.md' not found",
            f"prompts/collect.md:1: undefined template variable 'whoami' (known: {VARIABLES})",
        ]
    )


def test_defaults_are_validated_with_their_own_path(tmp_path: Path) -> None:
    clawfile = """
        defaults:
          prompt: prompts/shared.md
          tools: [bsh]
        tasks:
          a: {prompt: hi}
    """
    assert error(tmp_path, clawfile) == "\n".join(
        [
            "clawfile.yaml:2: defaults: 'prompt' cannot have a default: each task sets its own",
            f"clawfile.yaml:3: defaults.tools[0]: unknown tool 'bsh' (known: {TOOLS})",
        ]
    )


# --- valid clawfiles -----------------------------------------------------------------------

FULL = """
    version: 1
    model: local/qwen2.5:7b
    providers:
      local:
        base_url: http://localhost:11434/v1
        api_key_env: OLLAMA_API_KEY
        max_concurrency: 4
    defaults:
      max_steps: 10
      tools: [read, grep]
      temperature: 0
    default: [summary]
    tasks:
      collect:
        prompt: |
          Collect the notes of {{ today }}:
          {% for path in inputs %}- {{ path }}
          {% endfor %}
        inputs: "workspace/notes/*.md"
      summary:
        description: Summarise today's notes
        prompt: prompts/summary.md
        needs: collect
        output: "workspace/reports/{{ today }}.md"
        tools: [read, grep, ls, write]
        max_steps: 5
        permissions:
          write: ["workspace/reports/**"]
          bash: ["git diff*"]
        schedule: "0 23 * * *"
        tz: Europe/Paris
        budget: {max_tokens: 200000}
      triage:
        prompt: "Triage {{ item.path }} ({{ item.stem }})."
        foreach: "workspace/inbox/*.txt"
        schema: {type: object, required: [label]}
"""


def test_valid_clawfile_applies_defaults_where_tasks_are_silent(tmp_path: Path) -> None:
    files = {"prompts/summary.md": "Summarise {{ needs.collect.result }}.\n"}
    project = load(tmp_path, FULL, files)
    assert project.root == tmp_path.resolve()
    assert project.clawfile == tmp_path.resolve() / "clawfile.yaml"
    tasks = project.config.tasks
    assert list(tasks) == ["collect", "summary", "triage"]
    assert (tasks["collect"].max_steps, tasks["summary"].max_steps) == (10, 5)
    assert tasks["collect"].tool_names == ("read", "grep")
    assert tasks["summary"].tool_names == ("read", "grep", "ls", "write")
    assert tasks["triage"].temperature == 0
    assert tasks["collect"].inputs == ("workspace/notes/*.md",)  # one string = one glob
    assert tasks["summary"].needs == ("collect",)
    assert tasks["summary"].permissions.bash == ("git diff*",)
    assert tasks["triage"].json_schema == {"type": "object", "required": ["label"]}
    assert tasks["summary"].budget is not None and tasks["summary"].budget.max_tokens == 200000
    assert project.config.default == ("summary",)


def test_task_defaults_without_defaults(tmp_path: Path) -> None:
    task = load(tmp_path, "tasks:\n  a: {prompt: hi}\n").config.tasks["a"]
    assert task.tool_names == ("read", "grep", "ls", "find")
    assert (task.max_steps, task.timeout, task.catch_up, task.permissions.bash) == (
        30,
        600,
        "once",
        False,
    )


def test_prompt_source_inline_and_file(tmp_path: Path) -> None:
    files = {"prompts/summary.md": "Summarise {{ needs.collect.result }}.\n"}
    project = load(tmp_path, FULL, files)
    assert project.prompt_source("summary") == (
        "Summarise {{ needs.collect.result }}.\n",
        "prompts/summary.md",
    )
    text, name = project.prompt_source("collect")
    assert text.startswith("Collect the notes of {{ today }}:\n")
    assert name == "clawfile.yaml:tasks.collect.prompt"
    assert project.prompt_source("triage")[1] == "clawfile.yaml:tasks.triage.prompt"


@pytest.mark.parametrize(
    ("prompt", "is_file"),
    [
        ("prompts/summary.md", True),
        ("summary.j2", True),
        ("notes.txt", True),
        ("templates/summary", True),
        ("Summarise the notes.", False),
        ("Summarise.", False),
        ("Read notes.md and summarise", False),
        ("Line one\nprompts/x.md\n", False),
    ],
)
def test_which_prompts_are_files(prompt: str, is_file: bool) -> None:
    from claw_batch.config import prompt_file

    assert (prompt_file(prompt) is not None) == is_file


def test_find_clawfile_from_a_subdirectory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_project(tmp_path, "tasks:\n  a: {prompt: hi}\n")
    deep = tmp_path / "workspace" / "notes"
    deep.mkdir(parents=True)
    assert find_clawfile(deep) == tmp_path.resolve() / "clawfile.yaml"
    monkeypatch.chdir(deep)
    assert load_project(cache="off").root == tmp_path.resolve()


def test_no_clawfile_anywhere(tmp_path: Path) -> None:
    with pytest.raises(ClawfileError) as caught:
        find_clawfile(tmp_path)
    assert str(caught.value) == (
        f"no clawfile.yaml in {tmp_path.resolve()} or any parent directory; "
        "create one with `claw init` or pass -f FILE / -C DIR"
    )


def test_clawfile_yml_and_explicit_file(tmp_path: Path) -> None:
    (tmp_path / "clawfile.yml").write_text("tasks:\n  a: {prompt: hi}\n", encoding="utf-8")
    assert find_clawfile(tmp_path) == tmp_path.resolve() / "clawfile.yml"
    (tmp_path / "other.yaml").write_text("tasks:\n  b: {prompt: hi}\n", encoding="utf-8")
    project = load_project(tmp_path, Path("other.yaml"), cache="off")
    assert list(project.config.tasks) == ["b"]
    with pytest.raises(ClawfileError, match=r"^nope.yaml: no such file$"):
        load_project(tmp_path, Path("nope.yaml"), cache="off")


def test_resolve_model(tmp_path: Path) -> None:
    files = {"prompts/summary.md": "hi\n"}
    config = load(tmp_path, FULL, files).config
    local = config.providers["local"]
    assert resolve_model(config, "local/qwen2.5:7b") == ("local", local, "qwen2.5:7b")
    assert resolve_model(config, "gpt-4o-mini") == ("openai", None, "gpt-4o-mini")
    # A prefix that is not a provider is part of the name (OpenRouter's qwen/qwen-2.5-72b).
    assert resolve_model(config, "qwen/qwen-2.5-72b") == ("openai", None, "qwen/qwen-2.5-72b")


def test_resolve_model_uses_a_declared_openai_provider(tmp_path: Path) -> None:
    clawfile = "providers:\n  openai: {max_concurrency: 2}\ntasks:\n  a: {prompt: hi}\n"
    config = load(tmp_path, clawfile).config
    assert resolve_model(config, "gpt-4o") == ("openai", config.providers["openai"], "gpt-4o")


def test_loading_does_not_import_openai_nor_unused_validators(tmp_path: Path) -> None:
    make_project(tmp_path, "tasks:\n  a: {prompt: hi}\n")
    code = (
        "import sys; from claw_batch.clawfile.load import load_project; "
        f"load_project(__import__('pathlib').Path({str(tmp_path)!r}), cache='off'); "
        "print(sorted(m for m in ('openai', 'jsonschema', 'croniter') if m in sys.modules))"
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"


# --- executor: ------------------------------------------------------------------------------


def test_executor_defaults_to_local(tmp_path: Path) -> None:
    from claw_batch.config import Executor

    assert load(tmp_path, "tasks:\n  a: {prompt: hi}\n").config.executor == Executor()


def test_executor_key_is_read(tmp_path: Path) -> None:
    from claw_batch.config import Executor

    clawfile = """
        executor: {kind: ray, address: "10.0.0.5:6379", max_retries: 0}
        tasks:
          a: {prompt: hi}
    """
    assert load(tmp_path, clawfile).config.executor == Executor("ray", "10.0.0.5:6379", 0)
    clawfile = "executor: {kind: ray, address: '[::1]:6379'}\ntasks:\n  a: {prompt: hi}\n"
    assert load(tmp_path, clawfile).config.executor == Executor("ray", "[::1]:6379", 3)


def test_executor_errors_name_their_line(tmp_path: Path) -> None:
    clawfile = """
        tasks:
          a: {prompt: hi}
        executor:
          kind: rya
          address: head
          max_retries: -1
          retries: 2
    """
    assert error(tmp_path, clawfile) == (
        "clawfile.yaml:4: executor.kind: expected 'local' or 'ray', got 'rya'\n"
        "clawfile.yaml:5: executor.address: 'head': expected 'auto' or HOST:PORT (the Ray "
        "head's address, e.g. 10.0.0.5:6379)\n"
        "clawfile.yaml:6: executor.max_retries: must be at least 0, got -1\n"
        "clawfile.yaml:7: executor: unknown key 'retries' (did you mean 'max_retries'?)"
    )


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("true", "expected an integer, got true"),
        ("'3'", "expected an integer, got '3'"),
        ("1.5", "expected an integer, got 1.5"),
        ("101", "must be at most 100, got 101"),
    ],
)
def test_executor_max_retries_is_a_small_count(tmp_path: Path, value: str, said: str) -> None:
    clawfile = f"tasks:\n  a: {{prompt: hi}}\nexecutor: {{max_retries: {value}}}\n"
    assert error(tmp_path, clawfile) == f"clawfile.yaml:3: executor.max_retries: {said}"


@pytest.mark.parametrize("address", ["ray://h:10001", "h", "h:0", "h:65536", ":6379", "a b:1"])
def test_executor_address_is_auto_or_host_port(tmp_path: Path, address: str) -> None:
    clawfile = f"tasks:\n  a: {{prompt: hi}}\nexecutor: {{kind: ray, address: '{address}'}}\n"
    assert error(tmp_path, clawfile) == (
        f"clawfile.yaml:3: executor.address: {address!r}: expected 'auto' or HOST:PORT "
        "(the Ray head's address, e.g. 10.0.0.5:6379)"
    )


def test_executor_as_a_word_is_shown_its_form(tmp_path: Path) -> None:
    assert error(tmp_path, "tasks:\n  a: {prompt: hi}\nexecutor: ray\n") == (
        "clawfile.yaml:3: executor: expected a mapping such as {kind: ray, address: auto} "
        "(kind: local is the default), got 'ray'"
    )


def test_a_key_named_like_pydantics_key_marker_is_an_unknown_key(tmp_path: Path) -> None:
    # pydantic marks a dict key's own error with a `[key]` after it: one the file names
    # first is the file's (found by the fuzzer: it crashed claw validate).
    assert error(tmp_path, "'[key]': null\ntasks:\n  a: {prompt: hi}\n") == (
        "clawfile.yaml:1: unknown key '[key]' (valid keys: version, model, workspace, "
        "providers, defaults, default, tasks, prices, budget, cache, mcp_servers, executor, "
        "notify)"
    )
