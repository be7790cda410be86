"""The checks of `notify:` that pydantic cannot make key by key: one clawfile-wide list, not
two; an SMTP login named whole; addresses that are addresses; `format:` only on a webhook.
And, for `claw validate` only, the variables the deliveries name that this environment does
not set (a warning: cron's environment is not this one)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from claw_batch.clawfile.yamlsource import Problem, YamlSource
from claw_batch.config import KeyPath

_WHOLE_LOGIN = (
    "user_env and password_env go together: name both variables (the login and its "
    "password), or neither for a server that takes no login"
)


def check(source: YamlSource) -> list[Problem]:
    """Problems of the `notify:` lists as written (top level, `defaults:`, each task)."""
    data = source.data
    problems = []
    defaults = data.get("defaults")
    if "notify" in data and isinstance(defaults, dict) and "notify" in defaults:
        problems.append(
            source.problem(
                ("notify",),
                "notify: is set both here and in defaults: (each is the clawfile-wide list); "
                "keep one",
            )
        )
    for at, entry in entries(source):
        problems += _entry(at, entry, source)
    return problems


def unset_variables(source: YamlSource, environ: Mapping[str, str]) -> list[Problem]:
    """A warning per variable a delivery names (url_env, user_env, password_env) that this
    environment does not set: a run would fail to deliver, naming it."""
    found = []
    for at, entry in entries(source):
        named: list[tuple[KeyPath, object]] = [((*at, "url_env"), entry.get("url_env"))]
        smtp = _mapping(_mapping(entry.get("email")).get("smtp"))
        named += [((*at, "email", "smtp", k), smtp.get(k)) for k in ("user_env", "password_env")]
        for path, name in named:
            if isinstance(name, str) and name and not environ.get(name):
                found.append(
                    source.problem(
                        path,
                        f"warning: {name} is not set in this environment: the delivery fails "
                        "until the run's environment sets it (cron's may)",
                    )
                )
    return found


def entries(source: YamlSource) -> Iterator[tuple[KeyPath, dict[Any, Any]]]:
    """Each delivery as written, with where it is."""
    data = source.data
    lists: list[tuple[KeyPath, object]] = [(("notify",), data.get("notify"))]
    lists.append((("defaults", "notify"), _mapping(data.get("defaults")).get("notify")))
    for name, task in _mapping(data.get("tasks")).items():
        lists.append((("tasks", name, "notify"), _mapping(task).get("notify")))
    for at, entries_ in lists:
        if isinstance(entries_, list):
            for index, entry in enumerate(entries_):
                if isinstance(entry, dict):
                    yield (*at, index), entry


def _entry(at: KeyPath, entry: dict[Any, Any], source: YamlSource) -> list[Problem]:
    problems = []
    email = entry.get("email")
    if "format" in entry and (email is not None or "command" in entry):
        kind = "an e-mail" if email is not None else "a command"
        problems.append(
            source.problem(
                (*at, "format"),
                f"format: shapes a webhook's message; {kind} delivery takes none "
                "(the e-mail's body is the output, a command gets the JSON payload on stdin)",
            )
        )
    if not isinstance(email, dict):
        return problems
    smtp = _mapping(email.get("smtp"))
    if ("user_env" in smtp) != ("password_env" in smtp):
        key = "user_env" if "user_env" in smtp else "password_env"
        problems.append(source.problem((*at, "email", "smtp", key), _WHOLE_LOGIN))
    to = email.get("to")
    addresses: list[tuple[KeyPath, object]] = (
        [((*at, "email", "to", i), a) for i, a in enumerate(to)]
        if isinstance(to, list)
        else [((*at, "email", "to"), to)]
    )
    addresses.append(((*at, "email", "from"), email.get("from")))
    for path, address in addresses:
        if isinstance(address, str) and not is_address(address):
            problems.append(
                source.problem(
                    path,
                    f"{address!r} is not an e-mail address: expected one such as "
                    "me@example.org (no spaces, no line breaks)",
                )
            )
    return problems


def is_address(text: str) -> bool:
    """An address a header can hold: local@domain, nothing that would end the header."""
    local, at, domain = text.rpartition("@")
    return bool(at and local and domain) and not any(c.isspace() for c in text)


def _mapping(value: object) -> dict[Any, Any]:
    return value if isinstance(value, dict) else {}
