"""`claw validate` of `notify:`: the checks across its keys (clawfile/notifychecks.py), each
with the file and line, and the unset variables a delivery names (a warning)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from helpers import claw, make_project

HEAD = """
version: 1
model: fake-model
"""


def validate(tmp_path: Path, clawfile: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    root = make_project(tmp_path / "p", HEAD + textwrap.dedent(clawfile).lstrip("\n"))
    r = claw(root, "validate", "-q", env=env)
    return r.exit_code, r.stderr


def test_notify_both_at_the_top_and_in_defaults_is_an_error(tmp_path: Path) -> None:
    code, err = validate(
        tmp_path,
        """
        notify:
          - {on: [failed], command: [notify-send, claw]}
        defaults:
          notify:
            - {on: [ok], command: [notify-send, claw]}
        tasks:
          a: {prompt: "A."}
        """,
    )
    assert code == 2
    assert err == (
        "claw: clawfile.yaml:3: notify: notify: is set both here and in defaults: (each is "
        "the clawfile-wide list); keep one\n"
    )


SMTP_HALF = """
tasks:
  a:
    prompt: "A."
    notify:
      - on: [failed]
        email:
          to: [me@example.org]
          from: claw@example.org
          smtp: {host: smtp.example.org, user_env: SMTP_USER}
"""


def test_an_smtp_login_without_its_password_is_an_error(tmp_path: Path) -> None:
    code, err = validate(tmp_path, SMTP_HALF)
    assert code == 2
    assert err == (
        "claw: clawfile.yaml:11: tasks.a.notify[0].email.smtp.user_env: user_env and "
        "password_env go together: name both variables (the login and its password), or "
        "neither for a server that takes no login\n"
    )
    code, err = validate(tmp_path, SMTP_HALF.replace("user_env: SMTP_USER", "password_env: PW"))
    assert code == 2 and "smtp.password_env: user_env and password_env go together" in err


def test_addresses_that_are_not_addresses_are_errors(tmp_path: Path) -> None:
    code, err = validate(
        tmp_path,
        """
        tasks:
          a:
            prompt: "A."
            notify:
              - on: [failed]
                email:
                  to: [me@example.org, "not an address"]
                  from: "claw@example.org\\r\\nBcc: all@example.org"
                  smtp: {host: smtp.example.org}
        """,
    )
    assert code == 2
    assert err == (
        "claw: clawfile.yaml:9: tasks.a.notify[0].email.to[1]: 'not an address' is not an "
        "e-mail address: expected one such as me@example.org (no spaces, no line breaks)\n"
        "claw: clawfile.yaml:10: tasks.a.notify[0].email.from: 'claw@example.org\\r\\nBcc: "
        "all@example.org' is not an e-mail address: expected one such as me@example.org "
        "(no spaces, no line breaks)\n"
    )


def test_format_on_an_email_or_command_delivery_is_an_error(tmp_path: Path) -> None:
    code, err = validate(
        tmp_path,
        """
        tasks:
          a:
            prompt: "A."
            notify:
              - {on: [failed], command: [notify-send, claw], format: slack}
              - on: [ok]
                format: json
                email: {to: me@example.org, from: c@example.org, smtp: {host: h}, attach: true}
        """,
    )
    assert code == 2
    assert err == (
        "claw: clawfile.yaml:7: tasks.a.notify[0].format: format: shapes a webhook's message; "
        "a command delivery takes none (the e-mail's body is the output, a command gets the "
        "JSON payload on stdin)\n"
        "claw: clawfile.yaml:9: tasks.a.notify[1].format: format: shapes a webhook's message; an "
        "e-mail delivery takes none (the e-mail's body is the output, a command gets the JSON "
        "payload on stdin)\n"
    )


def test_an_unknown_target_lists_the_valid_keys(tmp_path: Path) -> None:
    code, err = validate(
        tmp_path,
        """
        tasks:
          a:
            prompt: "A."
            notify:
              - {on: [failed], telegram: "@me"}
        """,
    )
    assert code == 2
    assert "tasks.a.notify[0]: unknown key 'telegram' (valid keys: on, webhook, url_env, " in err
    assert "email, command, timeout, retries)" in err


def test_an_unquoted_on_is_accepted_at_every_level(tmp_path: Path) -> None:
    for clawfile in (
        """
        notify:
          - on: [failed]
            command: [notify-send, claw]
        tasks:
          a: {prompt: "A."}
        """,
        """
        defaults:
          notify:
            - on: failed
              command: [notify-send, claw]
        tasks:
          a: {prompt: "A."}
        """,
        """
        tasks:
          a:
            prompt: "A."
            notify:
              - on: [ok, changed]
                webhook: https://hooks.example.org/x
        """,
    ):
        code, err = validate(tmp_path, clawfile)
        assert (code, err) == (0, ""), clawfile


def test_a_variable_a_delivery_names_that_is_unset_is_a_warning(tmp_path: Path) -> None:
    clawfile = """
        tasks:
          a:
            prompt: "A."
            notify:
              - {on: [failed], url_env: SLACK_HOOK}
              - on: [failed]
                email:
                  to: me@example.org
                  from: claw@example.org
                  smtp: {host: h, user_env: SMTP_USER, password_env: SMTP_PASSWORD}
        """
    code, err = validate(tmp_path, clawfile, env={"SMTP_USER": "me"})
    assert code == 0
    assert err == (
        "claw: clawfile.yaml:7: tasks.a.notify[0].url_env: warning: SLACK_HOOK is not set in "
        "this environment: the delivery fails until the run's environment sets it (cron's "
        "may)\n"
        "claw: clawfile.yaml:12: tasks.a.notify[1].email.smtp.password_env: warning: "
        "SMTP_PASSWORD is not set in this environment: the delivery fails until the run's "
        "environment sets it (cron's may)\n"
    )
    code, err = validate(
        tmp_path,
        clawfile,
        env={"SLACK_HOOK": "x", **dict.fromkeys(("SMTP_USER", "SMTP_PASSWORD"), "y")},
    )
    assert (code, err) == (0, "")
