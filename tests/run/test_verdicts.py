"""Check verdicts: a failed one is given again, without a model call, while nothing the
check reads has changed; `on_error` decides whether an unreachable model fails the run."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI, error, text
from helpers import claw, make_project

CLAWFILE = """
    version: 1
    model: fake-model
    tasks:
      review:
        check: true
        inputs: [code.py]
        prompt: "Review code.py"
        tools: [read]
        {on_error}
"""
FAIL = json.dumps({"ok": False, "summary": "a bug", "findings": ["code.py:1: divides by zero"]})
PASS = json.dumps({"ok": True, "summary": "fine", "findings": []})


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as srv:
        yield srv


def review(root: Path, server: FakeOpenAI, *args: str) -> tuple[int, str]:
    env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-x"}
    # The fake model answers without reading the code: its requests are the same whatever the
    # code is, and the call cache would answer them (tests/run/test_callcache.py).
    r = claw(root, "run", "review", "--no-cache", *args, env=env)
    return r.exit_code, r.stderr


def test_a_failed_verdict_is_given_again_until_something_changes(
    tmp_path: Path, server: FakeOpenAI
) -> None:
    root = make_project(tmp_path / "p", CLAWFILE.format(on_error=""), {"code.py": "1/0\n"})
    server.handler = lambda body: text(FAIL)
    code, err = review(root, server)
    assert code == 1 and "code.py:1: divides by zero" in err
    assert len(server.requests) == 1

    code, err = review(root, server)  # the same code: the same verdict, no model call
    assert code == 1 and "code.py:1: divides by zero" in err and "a bug" in err
    assert len(server.requests) == 1

    code, _ = review(root, server, "-B")  # asked anew
    assert code == 1 and len(server.requests) == 2

    (root / "code.py").write_text("1/1\n")
    server.handler = lambda body: text(PASS)
    code, _ = review(root, server)
    assert code == 0 and len(server.requests) == 3
    (root / "code.py").write_text("1/0\n")  # back to the failing code: asked again, passes
    code, _ = review(root, server)
    assert code == 0 and len(server.requests) == 4


@pytest.mark.parametrize(
    ("setting", "expected"), [("", 1), ("on_error: block", 1), ("on_error: warn", 0)]
)
def test_on_error_decides_what_an_unreachable_model_does(
    tmp_path: Path, server: FakeOpenAI, setting: str, expected: int
) -> None:
    root = make_project(tmp_path / "p", CLAWFILE.format(on_error=setting), {"code.py": "x\n"})
    server.handler = lambda body: error(401, "invalid api key")
    code, err = review(root, server)
    assert code == expected
    if expected == 0:
        assert "on_error: warn, so it does not fail the run" in err
    server.handler = lambda body: text(FAIL)  # a verdict is a verdict, warn or not
    code, _ = review(root, server)
    assert code == 1
