"""Generated clawfiles through `claw validate` and `claw run -n`: whatever the file holds,
claw ends with exit 0 or a clean exit 2, never a crash (exit 1, "unexpected error", a traceback).
And what validate accepts also runs for real, against the fake endpoint, without a crash.

The files are built from what breaks parsers and validators: random YAML, wrong types, huge and
odd numbers, control characters, deep nesting, aliases, hostile templates (sandbox escapes,
loops, undefined variables, bad syntax) and hostile paths ('..', absolute, NUL, very long,
.git/...). Derandomized by default, so that CI sees the same thousand files every run;
CLAW_FUZZ_PROFILE=explore searches afresh (and more), for a developer hunting new crashes.
"""

from __future__ import annotations

import os
import shutil
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fake_openai import FakeOpenAI, text
from helpers import WORKSPACE, claw
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

settings.register_profile(
    "ci",
    derandomize=True,
    database=None,  # nothing written under the project: the same files every run
    deadline=None,  # a render may take a while; run time is bounded by max_examples instead
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=False,
)
settings.register_profile("explore", parent=settings.get_profile("ci"), derandomize=False)
settings.load_profile(os.environ.get("CLAW_FUZZ_PROFILE", "ci"))
EXAMPLES = 250  # per test below: about a thousand in all

# --- the pieces ------------------------------------------------------------------------------

NUMBERS = st.sampled_from(
    [0, -0.0, 1, -1, 0.5, 2, 30, 2**31, 2**63, 2**70, -(2**70), 10**400, 1e308, 1e-308,
     float("inf"), float("-inf"), float("nan"), "1e400", "-1e400", "NaN", "0x10", "1_000"]
)  # fmt: skip
CONTROL = st.sampled_from(["\x00", "\x01", "\x07", "\x1b", "\x7f", "\x85", "\u2028", "\ufeff"])
ODD_TEXT = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs",)) | CONTROL, max_size=30
) | st.sampled_from(["", " ", "~", "*", "&a", "!!python/object:os.system", "\ud800"])

PATHS = st.sampled_from(
    ["out/a.md", "notes/*.md", "out/{{ item.stem }}.md", "{{ today }}.md", "out/", ".", "**",
     "..", "../x", "a/../../b", "/etc/passwd", "/", "~/x", ".git/config", ".git/hooks/pre-commit",
     ".claw/ledger.sqlite", "workspace/memory/x.md", "clawfile.yaml", "prompts/p.md",
     "out/\x00.md", "out/a\nb.md", "x" * 5000, "a/" * 300 + "b", "{a,..}/x", "[", "out/{{",
     "{{ read('/etc/passwd') }}", "out/{{ '\\ud800' }}.md", "out/{{ '../' * 3 }}x",
     "out/{{ 'x' * 10**6 }}", "\u202e.md", "out/%s.md", "C:\\x", "\\\\host\\share"]
)  # fmt: skip

TEMPLATES = st.sampled_from(
    ["Summarise {{ task }} for {{ today }}.", "{{ item.path }}", "{{ read(item.path) }}",
     "{{ cycler.__init__.__globals__.os.popen('id').read() }}",
     "{{ ''.__class__.__mro__[1].__subclasses__() }}", "{{ self._TemplateReference__context }}",
     "{{ inputs.append(1) }}", "{{ '{0.__class__}'.format(1) }}", "{{ lipsum(10) }}",
     "{{ range(10**12)|list }}", "{{ 'x' * 10**10 }}", "{{ 2 ** 10 ** 10 ** 10 }}",
     "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
     "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "{{ '%*d' % (10**9, 1) }}",
     "{{ '{:>999999999}'.format(1) }}", "{{ 'x'|center(10**10) }}", "{{ undefined_thing }}",
     "{{ needs.nope.result }}", "{{ git.staged_diff }}", "{% include 'prompts/p.md' %}",
     "{% include '../x' %}", "{% include 'clawfile.yaml' %}", "{{ x|nosuchfilter }}",
     "{{ 1/0 }}", "{{ [1][5] }}", "{% for loop in x %}{% endfor %}", "{{", "{% if %}", "}}",
     "{# unclosed", "{% endfor %}", "{{ '\\ud800' }}", "{{ ((((((((((((1)))))))))))) }}",
     "{{ " + "(" * 500 + "1" + ")" * 500 + " }}", "{% raw %}{{ x }}", "{{ read('.claw/x') }}",
     "{{ glob('/etc/*') }}", "{{ glob('**') | length }}", "{{ files|join(',') }}",
     "{{ item }}: {{ inputs|join(', ') }} {{ needs }} {{ now }} {{ git.head }}"]
)  # fmt: skip

SCALAR = st.one_of(st.none(), st.booleans(), st.integers(), NUMBERS, ODD_TEXT, PATHS, TEMPLATES)
JSONISH = st.recursive(
    SCALAR,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(ODD_TEXT, inner, max_size=4),
    max_leaves=12,
)

TOOLS = ["read", "write", "edit", "bash", "grep", "ls", "find", "remember", "memory_search"]
# MCP tool names: declared servers (below), an undeclared one, and the forms that are refused.
MCP_TOOLS = ["mcp.git.git_log", "mcp.git.*", "mcp.web.*", "mcp.gti.x", "mcp.git", "mcp.",
             "mcp..x", "mcp.a.b.c", "mcp.git.a b", "mcp.g__t.x", "mcp.git.\x00"]  # fmt: skip
# Servers whose command ends at once or whose URL nobody answers: a run that starts one
# fails fast, it does not wait.
MCP_SERVERS = st.dictionaries(
    st.sampled_from(["git", "web", "x.y", "a__b", "b_", "g" * 40, ""]),
    st.fixed_dictionaries(
        {},
        optional={
            "command": st.lists(st.sampled_from(["false", "python", "-c", "pass", "", "\x00"]),
                                max_size=3) | ODD_TEXT,
            "url": st.sampled_from(["http://127.0.0.1:9/mcp", "http://example.org/mcp",
                                    "https://u:p@h/mcp", "ftp://x"]) | ODD_TEXT,
            "headers_env": st.dictionaries(
                st.sampled_from(["Authorization", "X Y", ""]),
                st.sampled_from(["TOKEN", "sk-" + "a" * 40]),
                max_size=2,
            ),
            "headers": st.just({"Authorization": "Bearer x"}),
            "env": st.lists(st.sampled_from(["HOME", "OPENAI_API_KEY", "1X"]), max_size=2),
            "network": st.booleans() | NUMBERS,
            "read_only": st.booleans() | NUMBERS,
            "sandbox": st.sampled_from(["bubblewrap", "none", "docker"]),
            "timeout": NUMBERS,
            "startup_timeout": NUMBERS,
        },
    )
    | SCALAR,
    max_size=2,
)  # fmt: skip
TASK_VALUES: dict[str, Any] = {
    "description": ODD_TEXT,
    "inputs": st.lists(PATHS, max_size=3) | PATHS,
    "output": PATHS,
    "outputs": st.lists(PATHS, max_size=3),
    "needs": st.lists(st.sampled_from(["a", "b", "zz", "a*", ""]), max_size=3),
    "foreach": PATHS,
    "tools": st.lists(st.sampled_from([*TOOLS, *MCP_TOOLS, "bsh", ""]), max_size=4),
    "untrusted": st.fixed_dictionaries(
        {"allow": st.lists(st.sampled_from(["write", "read", *MCP_TOOLS]), max_size=2)}
    ),
    "permissions": st.fixed_dictionaries(
        {},
        optional={
            "write": st.lists(PATHS, max_size=3) | PATHS,
            "bash": st.booleans() | st.lists(ODD_TEXT, max_size=2) | ODD_TEXT,
            "network": st.booleans() | NUMBERS,
            "env": st.lists(st.sampled_from(["HOME", "OPENAI_API_KEY", "1X", "sk-" + "a" * 30]))
            | ODD_TEXT,
        },
    ),
    "schema": JSONISH
    | st.sampled_from([{"type": "object"}, {"type": "nope"}, {"$ref": "#/x"}])
    | st.builds(lambda n: _nested(n), st.integers(1, 60)),
    "schedule": st.sampled_from(["0 23 * * *", "* * * * * * *", "61 * * * *", "@daily", ""]),
    "tz": st.sampled_from(["UTC", "Europe/Paris", "europe/paris", "Nowhere/Else", "../x", ""]),
    "catch_up": st.sampled_from(["once", "skip", "always"]),
    "watch": st.lists(PATHS, max_size=2) | PATHS,
    "done": PATHS,
    "failed": PATHS,
    "hook": st.sampled_from(["pre-commit", "commit-msg", "pre-push", "post-merge"]),
    "check": st.booleans() | NUMBERS,
    "on_error": st.sampled_from(["block", "warn", "ignore"]),
    "model": st.sampled_from(["gpt-4o-mini", "local/x", "", "a" * 1000]) | ODD_TEXT,
    "temperature": NUMBERS,
    "max_steps": NUMBERS,
    "timeout": NUMBERS,
    "budget": st.fixed_dictionaries(
        {}, optional={k: NUMBERS for k in ("max_tokens", "max_usd", "per_day", "per_week")}
    ),
    "always": st.booleans() | NUMBERS,
    "skills": st.lists(st.sampled_from(["plain-report", "nope", "../x"]), max_size=2),
    "sandbox": st.sampled_from(["bubblewrap", "none", "docker"]),
}


def _nested(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"x": schema}}
    return schema


def mostly(usual: st.SearchStrategy[Any], odd: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """`usual` about four times in five: many generated files get past validation, into the
    run. (`one_of(usual, usual, ..., odd)` would not weigh: hypothesis picks among distinct
    strategies.)"""
    return st.sampled_from((True, True, True, True, False)).flatmap(
        lambda usual_one: usual if usual_one else odd
    )


@st.composite
def tasks(draw: st.DrawFn) -> dict[str, Any]:
    """A task with a prompt and some keys, each plausible or hostile."""
    task: dict[str, Any] = {"prompt": draw(mostly(TEMPLATES, st.just("prompts/p.md") | SCALAR))}
    for key in draw(st.lists(st.sampled_from(sorted(TASK_VALUES)), max_size=5, unique=True)):
        task[key] = draw(mostly(TASK_VALUES[key], JSONISH | SCALAR))
    return task


@st.composite
def clawfiles(draw: st.DrawFn) -> dict[str, Any]:
    name = mostly(st.sampled_from(["a", "b", "zz"]), st.sampled_from(["x y", "-a", "", "a" * 300]))
    data: dict[str, Any] = {"version": draw(mostly(st.just(1), SCALAR))}
    data["tasks"] = {n: draw(tasks()) for n in draw(st.lists(name, min_size=1, max_size=3))}
    optional = {
        "model": st.sampled_from(["gpt-4o-mini", "local/m"]) | SCALAR,
        "workspace": PATHS,
        "providers": st.dictionaries(
            st.sampled_from(["openai", "local", "x y"]),
            st.fixed_dictionaries(
                {},
                optional={
                    "base_url": st.sampled_from(["http://127.0.0.1:1/v1", "ftp://x", "http://["])
                    | ODD_TEXT,
                    "api_key_env": st.sampled_from(["MY_KEY", "sk-" + "a" * 40]) | ODD_TEXT,
                    "max_concurrency": NUMBERS,
                    "timeout": NUMBERS,
                    "stream": st.booleans(),
                },
            )
            | SCALAR,
            max_size=2,
        ),
        "defaults": tasks().map(
            lambda t: {k: v for k, v in t.items() if k not in ("prompt", "untrusted")}
        ),
        "default": st.lists(st.sampled_from(["a", "b", "nope"]), max_size=2) | SCALAR,
        "prices": st.dictionaries(
            st.sampled_from(["gpt-4o-mini", "m"]),
            st.fixed_dictionaries({"input": NUMBERS, "output": NUMBERS}) | SCALAR,
            max_size=2,
        ),
        "budget": st.fixed_dictionaries({}, optional={"per_day": NUMBERS, "per_week": NUMBERS}),
        "mcp_servers": MCP_SERVERS,
        "executor": st.fixed_dictionaries(
            {},
            optional={
                "kind": st.sampled_from(["local", "ray", "k8s"]),
                "address": st.sampled_from(["auto", "127.0.0.1:6379", "h", "ray://h:1"]) | ODD_TEXT,
                "max_retries": NUMBERS,
            },
        )
        | SCALAR,
    }
    for key in draw(st.lists(st.sampled_from(sorted(optional)), max_size=3, unique=True)):
        data[key] = draw(optional[key])
    return data


def dumped(data: Any) -> bytes:
    """YAML as a user might write it; a lone surrogate goes into the file as it is (which no
    UTF-8 text holds)."""
    text = yaml.safe_dump(data, allow_unicode=True, sort_keys=False, width=1000)
    return text.encode("utf-8", errors="surrogatepass")


@st.composite
def damaged(draw: st.DrawFn) -> bytes:
    """A generated clawfile, then maybe hit where YAML itself breaks: a raw control
    character, deep nesting, aliases (some a bomb), tabs, a truncated end."""
    text = dumped(draw(clawfiles()))
    how = draw(st.sampled_from(["none", "raw", "deep", "aliases", "bomb", "tab", "cut"]))
    if how == "raw":
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(CONTROL).encode("utf-8", errors="surrogatepass") + text[at:]
    elif how == "deep":
        depth = draw(st.sampled_from([45, 60, 1000, 5000]))
        text += b"defaults: {description: " + b"[" * depth + b"]" * depth + b"}\n"
    elif how in ("aliases", "bomb"):
        width, levels = (10, 9) if how == "bomb" else (2, 3)
        text += _aliases(width, levels)
    elif how == "tab":
        text = text.replace(b"\n  ", b"\n\t", 1)
    elif how == "cut":
        text = text[: draw(st.integers(0, len(text)))]
    return text


def _aliases(width: int, levels: int) -> bytes:
    """`defaults: {description: *top}` over `levels` anchors, each `width` of the one below."""
    lines = ["x0: &x0 [" + ", ".join(["v"] * width) + "]"]
    for i in range(1, levels):
        lines.append(f"x{i}: &x{i} [" + ", ".join([f"*x{i - 1}"] * width) + "]")
    lines.append(f"defaults: {{description: *x{levels - 1}}}")
    return ("\n".join(lines) + "\n").encode()


@st.composite
def random_yaml(draw: st.DrawFn) -> bytes:
    """Text that is YAML only by chance."""
    alphabet = st.sampled_from([*"abc :-[]{}&*!|>'\"#%@`,?\n\t\\", "tasks:", "  ", "\x00"])
    return "".join(draw(st.lists(alphabet, max_size=80))).encode("utf-8")


# --- the property ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One project directory for all the examples (its files are reset for each): a directory
    per example would cost more than the example, and grow claw's per-project caches."""
    return tmp_path_factory.mktemp("fuzz")


def holds_for(root: Path, clawfile: bytes, prompt: str = "Do {{ task }}.\n") -> None:
    fresh(root, clawfile, prompt)
    for command in (("validate",), ("run", "-n")):
        r = claw(root, *command)
        shown = f"claw {' '.join(command)} on:\n{clawfile!r}\nexit {r.exit_code}\n{r.stderr}"
        assert r.exit_code in (0, 2), shown
        assert "Traceback" not in r.stderr and "unexpected error" not in r.stderr, shown
        assert r.exit_code == 0 or "\nclaw: " in "\n" + r.stderr, shown


def fresh(root: Path, clawfile: bytes, prompt: str) -> None:
    """The project as each example starts it: nothing from the one before (.claw/ included)."""
    for child in root.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()
    files = {**WORKSPACE, "prompts/p.md": prompt, "notes/a.md": "a\n", "out/.keep": ""}
    for rel, content in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(content.encode("utf-8", errors="surrogatepass"))
    (root / "clawfile.yaml").write_bytes(clawfile)


@pytest.mark.slow
@settings(max_examples=EXAMPLES)
@given(clawfile=damaged())
def test_generated_clawfiles_never_crash(root: Path, clawfile: bytes) -> None:
    holds_for(root, clawfile)


@pytest.mark.slow
@settings(max_examples=EXAMPLES)
@given(data=clawfiles(), prompt=TEMPLATES | ODD_TEXT)
def test_generated_prompt_files_never_crash(root: Path, data: Any, prompt: str) -> None:
    """Every task's prompt is `prompts/p.md`, a generated template."""
    for task in data["tasks"].values():
        task["prompt"] = "prompts/p.md"
    holds_for(root, dumped(data), prompt)


@pytest.mark.slow
@settings(max_examples=EXAMPLES)
@given(clawfile=random_yaml())
def test_random_yaml_never_crashes(root: Path, clawfile: bytes) -> None:
    holds_for(root, clawfile)


@pytest.mark.slow
@settings(max_examples=EXAMPLES)
@given(data=st.dictionaries(ODD_TEXT, JSONISH, max_size=5) | JSONISH)
def test_any_document_never_crashes(root: Path, data: Any) -> None:
    holds_for(root, dumped(data))


@pytest.fixture(scope="module")
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as srv:
        srv.handler = lambda body: text("done")
        yield srv


@pytest.mark.slow
@settings(max_examples=100)
@given(data=clawfiles())
def test_what_validate_accepts_also_runs(root: Path, server: FakeOpenAI, data: Any) -> None:
    """A real `claw run` (against the fake endpoint) of each generated clawfile validate
    accepts: a job may fail or hit a limit (exit 1, 3), claw may not crash. Providers are
    left out: one on a closed port would spend the test's time on retries."""
    data.pop("providers", None)
    for settings_ in (data.get("defaults"), *data["tasks"].values()):
        if isinstance(settings_, dict):
            settings_.pop("model", None)
    fresh(root, dumped(data), "Do {{ task }}.\n")
    if claw(root, "validate").exit_code != 0:
        return
    env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-test"}
    r = claw(root, "run", "-k", env=env)
    shown = f"claw run on:\n{dumped(data)!r}\nexit {r.exit_code}\n{r.stderr}"
    assert r.exit_code in (0, 1, 2, 3), shown
    assert "Traceback" not in r.stderr and "unexpected error" not in r.stderr, shown


def test_odd_values_that_validate_accepts_also_run(tmp_path: Path) -> None:
    """Huge, tiny and signed numbers at the edge of what validation accepts, through a real
    run against the fake endpoint: a job that runs, not a crash."""
    root = tmp_path / "p"
    root.mkdir()
    clawfile = """
        version: 1
        providers:
          openai: {timeout: 1e300, max_concurrency: 1180591620717411303424}
        prices:
          gpt-4o-mini: {input: 1e300, output: 0}
        tasks:
          odd:
            prompt: "{{ '%.3f' % 2.5 }} {{ 10 ** 300 }} {{ '\\\\u00e9' }}"
            output: "out/{{ 'é' * 100 }}.md"
            temperature: -0.0
            max_steps: 1180591620717411303424
            timeout: 1e300
            budget: {max_tokens: 1180591620717411303424, per_day: 1e300}
    """
    (root / "clawfile.yaml").write_text(textwrap.dedent(clawfile), encoding="utf-8")
    with FakeOpenAI() as server:
        server.enqueue(text("done"))
        env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-test"}
        assert claw(root, "validate").exit_code == 0
        r = claw(root, "run", env=env)
    assert r.exit_code == 0, r.stderr
    assert (root / "out" / ("é" * 100 + ".md")).read_text(encoding="utf-8") == "done\n"
    assert server.requests[0]["messages"][1]["content"].startswith("2.500 1000")
