"""`claw cron print`: crontab lines that really work when a shell runs them."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner, Result
from fake_openai import FakeOpenAI, text
from helpers import make_project

from claw_batch.cli import main

CLAWFILE = """
    version: 1
    model: fake-model
    tasks:
      nightly:
        description: Summarise the day
        prompt: "Summarise"
        output: report.md
        schedule: "0 23 * * *"
        tz: Europe/Berlin
        tools: []
      adhoc:
        prompt: "Not scheduled"
        output: adhoc.md
"""


def cron_print(root: Path, *args: str) -> Result:
    return CliRunner().invoke(main, ["cron", "print", *args, "-C", str(root)])


def test_the_crontab_line_runs_the_due_tasks(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", CLAWFILE)
    printed = cron_print(root)
    assert printed.exit_code == 0, printed.stderr
    lines = printed.stdout.splitlines()
    assert "#   nightly: 0 23 * * * (Europe/Berlin, catch_up: once) - Summarise the day" in lines
    assert not any("adhoc" in line for line in lines)
    entry = lines[-1]
    schedule, command = entry[: len("* * * * * ")], entry[len("* * * * * ") :]
    assert schedule == "* * * * * "
    assert shlex.split(command)[:3] == [sys.executable, "-m", "claw_batch"]
    assert command.endswith(f">> {root / '.claw' / 'cron.log'} 2>&1")
    with FakeOpenAI() as server:
        server.handler = lambda body: text("done")
        env = {
            "PATH": "/usr/bin:/bin",  # what cron gives: no venv, no profile
            "HOME": str(tmp_path),
            "OPENAI_BASE_URL": server.base_url,
            "OPENAI_API_KEY": "sk-x",
            "CLAW_NOW": "2026-11-23T23:01:00+01:00",
        }
        (root / ".claw").mkdir()
        done = subprocess.run(["sh", "-c", command], cwd=tmp_path, env=env, timeout=60)
        assert done.returncode == 0
        assert len(server.requests) == 1
    log = (root / ".claw" / "cron.log").read_text()
    assert "nightly: slot 2026-11-23 23:00 Europe/Berlin is due" in log
    assert (root / "report.md").is_file()


def test_systemd_units(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", CLAWFILE)
    printed = cron_print(root, "--systemd", "--name", "notes")
    assert printed.exit_code == 0, printed.stderr
    assert "# --- ~/.config/systemd/user/notes.service" in printed.stdout
    assert "# --- ~/.config/systemd/user/notes.timer" in printed.stdout
    assert f"ExecStart={sys.executable} -m claw_batch run --due -C {root}" in printed.stdout
    assert "OnCalendar=*-*-* *:*:00" in printed.stdout


KEYED = """
    version: 1
    model: fake-model
    providers:
      router: {base_url: "http://127.0.0.1:9/v1", api_key_env: ROUTER_KEY}
      local: {base_url: "http://127.0.0.1:9/v1"}
    tasks:
      nightly: {prompt: "p", output: a.md, schedule: "0 23 * * *", model: router/m}
      hourly: {prompt: "p", output: b.md, schedule: "0 * * * *"}
      offline: {prompt: "p", output: c.md, schedule: "0 1 * * *", model: local/m}
      adhoc: {prompt: "p", output: d.md, model: router/m}
"""


def test_the_crontab_names_the_key_variables_its_tasks_need(tmp_path: Path) -> None:
    """Issue 16, point 11: the clawfile's own variables, not `(OPENAI_API_KEY, api_key_env)`."""
    root = make_project(tmp_path / "p", KEYED)
    lines = cron_print(root).stdout.splitlines()
    assert (
        "# cron does not read your shell profile: set OPENAI_API_KEY=..., ROUTER_KEY=... (and "
        "OPENAI_BASE_URL=... for a model server other than OpenAI's) at the top of the crontab."
    ) in lines
    units = cron_print(root, "--systemd", "--name", "notes").stdout
    assert (
        "# the variables these tasks' providers read (OPENAI_API_KEY, ROUTER_KEY; and "
        "OPENAI_BASE_URL for a model server other than OpenAI's), e.g.:"
    ) in units.splitlines()


def test_keyless_providers_need_no_variable(tmp_path: Path) -> None:
    root = make_project(
        tmp_path / "p",
        """
        version: 1
        model: local/m
        providers:
          local: {base_url: "http://127.0.0.1:9/v1"}
        tasks:
          offline: {prompt: "p", output: c.md, schedule: "0 1 * * *"}
        """,
    )
    lines = cron_print(root).stdout.splitlines()
    assert "# cron does not read your shell profile; these tasks' providers need no API key." in (
        lines
    )


def test_the_default_provider_names_its_base_url_variable(tmp_path: Path) -> None:
    """Issue 16 (new users): without OPENAI_BASE_URL in the crontab, cron's runs call
    api.openai.com, not the local server the shell's profile names. The value is never
    printed: a base URL may hold a password."""
    root = make_project(tmp_path / "p", CLAWFILE)
    secret = "http://user:pw-0123456789@127.0.0.1:9/v1"
    printed = CliRunner().invoke(
        main, ["cron", "print", "-C", str(root)], env={"OPENAI_BASE_URL": secret}
    )
    assert (
        "# cron does not read your shell profile: set OPENAI_API_KEY=... (and OPENAI_BASE_URL=... "
        "for a model server other than OpenAI's) at the top of the crontab."
    ) in printed.stdout.splitlines()
    units = cron_print(root, "--systemd").stdout
    assert (
        "# the variables these tasks' providers read (OPENAI_API_KEY; and OPENAI_BASE_URL for a "
        "model server other than OpenAI's), e.g.:"
    ) in units.splitlines()
    assert "pw-0123456789" not in printed.stdout + units


def test_a_provider_without_base_url_reads_the_variable_too(tmp_path: Path) -> None:
    root = make_project(
        tmp_path / "p",
        """
        version: 1
        model: openai/m
        providers:
          openai: {}
        tasks:
          offline: {prompt: "p", output: c.md, schedule: "0 1 * * *"}
        """,
    )
    assert (
        "# cron does not read your shell profile: these tasks' providers need no API key; set "
        "OPENAI_BASE_URL=... at the top of the crontab for a model server other than OpenAI's."
    ) in cron_print(root).stdout.splitlines()
