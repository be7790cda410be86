"""What `claw cron print` prints: crontab lines, or systemd units, that call `claw run
--due` every minute for a project. Absolute paths throughout (cron starts with an almost
empty environment and the home directory as its working directory); output is appended to
a log file a person can read the next morning."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from claw_batch.config import Clawfile, Project, resolve_model

LOG = Path(".claw") / "cron.log"


def claw_command(project: Project, *args: str) -> str:
    """The claw of this interpreter, by absolute path, on this project."""
    argv = [sys.executable, "-m", "claw_batch", *args, "-C", str(project.root)]
    if project.clawfile.name not in ("clawfile.yaml", "clawfile.yml"):
        argv += ["-f", project.clawfile.name]
    return shlex.join(argv)


def key_variables(config: Clawfile, tasks: list[str]) -> list[str]:
    """The environment variables the tasks' providers read their API keys from: the
    default endpoint's OPENAI_API_KEY, a provider's `api_key_env` (none: a keyless one)."""
    found = []
    for name in tasks:
        _, provider, _ = resolve_model(config, config.tasks[name].model or config.model)
        variable = "OPENAI_API_KEY" if provider is None else provider.api_key_env
        if variable:
            found.append(variable)
    return sorted(set(found))


def reads_base_url(config: Clawfile, tasks: list[str]) -> bool:
    """Whether a task's provider takes its server from OPENAI_BASE_URL: the default one, or
    a provider without `base_url`. Without the variable, cron's runs call api.openai.com."""
    for name in tasks:
        _, provider, _ = resolve_model(config, config.tasks[name].model or config.model)
        if provider is None or not provider.base_url:
            return True
    return False


# Named, never shown: a base URL may hold a user and password.
OTHER_SERVER = "for a model server other than OpenAI's"


def _keys_line(config: Clawfile, tasks: list[str]) -> str:
    variables = key_variables(config, tasks)
    base_url = reads_base_url(config, tasks)
    if not variables and base_url:
        return (
            "# cron does not read your shell profile: these tasks' providers need no API key; "
            f"set OPENAI_BASE_URL=... at the top of the crontab {OTHER_SERVER}."
        )
    if not variables:
        return "# cron does not read your shell profile; these tasks' providers need no API key."
    also = f" (and OPENAI_BASE_URL=... {OTHER_SERVER})" if base_url else ""
    return (
        "# cron does not read your shell profile: set "
        + ", ".join(f"{v}=..." for v in variables)
        + f"{also} at the top of the crontab."
    )


def crontab(project: Project) -> str:
    scheduled = {n: t for n, t in project.config.tasks.items() if t.schedule}
    log = shlex.quote(str(project.root / LOG))
    lines = [
        f"# claw: {project.root}",
        "# `claw run --due` every minute runs each scheduled task once per slot (a ledger in",
        "# .claw/state.db); a slot missed while the machine was off is caught up or recorded.",
        _keys_line(project.config, list(scheduled)),
        "# `claw log` shows the runs.",
    ]
    for name, task in scheduled.items():
        zone = task.tz or "the machine's time zone"
        about = f" - {task.description}" if task.description else ""
        lines.append(f"#   {name}: {task.schedule} ({zone}, catch_up: {task.catch_up}){about}")
    if not scheduled:
        lines.append("#   (no task has a schedule: this line runs nothing until one does)")
    lines.append(f"* * * * * {claw_command(project, 'run', '--due')} >> {log} 2>&1")
    return "\n".join(lines) + "\n"


def _unit_keys(config: Clawfile) -> str:
    scheduled = [n for n, t in config.tasks.items() if t.schedule]
    variables = ", ".join(key_variables(config, scheduled))
    if reads_base_url(config, scheduled):
        read = f"{variables}; and " if variables else ""
        read += f"OPENAI_BASE_URL {OTHER_SERVER}"
        return f"the variables these tasks' providers read ({read}), e.g.:"
    if not variables:
        return "these tasks' providers need no API key; a file of variables would go here:"
    return f"the API key variables these tasks' providers read ({variables}), e.g.:"


def systemd_units(project: Project, name: str) -> dict[str, str]:
    """A oneshot service and a timer that starts it every minute."""
    service = f"""\
# {name}.service: claw run --due for {project.root}
[Unit]
Description=claw scheduled tasks in {project.root}

[Service]
Type=oneshot
WorkingDirectory={project.root}
ExecStart={claw_command(project, "run", "--due")}
# {_unit_keys(project.config)}
# EnvironmentFile=%h/.config/claw/env
# exit 75: another claw run holds the project; its slots are checked at the next minute
SuccessExitStatus=75
"""
    timer = f"""\
# {name}.timer: every minute; enable with `systemctl --user enable --now {name}.timer`
[Unit]
Description=claw scheduled tasks in {project.root}, every minute

[Timer]
OnCalendar=*-*-* *:*:00
AccuracySec=1s

[Install]
WantedBy=timers.target
"""
    return {f"{name}.service": service, f"{name}.timer": timer}
