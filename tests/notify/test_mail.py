"""The e-mail target against a real SMTP server (aiosmtpd) on 127.0.0.1: the message as
received, a login from the environment, STARTTLS (asked for and missing: nothing sent in the
clear), and the servers that refuse, hang or are not there. A line break in a task name or an
item never becomes a header."""

from __future__ import annotations

import dataclasses
import email
import email.policy
from email.message import EmailMessage
from pathlib import Path

import pytest
from notices import FANOUT_FAILED, ONE_OK_TAINTED, keep
from notices import email as email_to
from receivers import TLS_RECORD, Silent, SmtpServer, Trickle, free_port, self_signed, within

from claw_batch.config import Delivery
from claw_batch.notify.send import Sent, send
from claw_batch.notify.shapes import title

TARGET = "email me@example.org"
LOGIN = {"SMTP_USER": "bot", "SMTP_PASSWORD": "correct horse battery"}


def deliver(delivery: Delivery, environ: dict[str, str] | None = None, notice=FANOUT_FAILED):  # type: ignore[no-untyped-def]
    waits: list[float] = []
    sent = send(delivery, notice, environ=environ or {}, redact=keep, sleep=waits.append)
    return sent, waits


def parsed(content: bytes) -> EmailMessage:
    return email.message_from_bytes(content, policy=email.policy.default)  # type: ignore[return-value]


def test_the_message_as_received() -> None:
    with SmtpServer() as server:
        sent, _ = deliver(email_to(server.port, ("me@example.org", "you@example.org")))
    assert sent == Sent("email me@example.org (+1)", True, 1)
    [mail] = server.mails
    assert mail.rcpt_tos == ["me@example.org", "you@example.org"]
    msg = parsed(mail.content)
    assert msg["From"] == "claw@example.org"
    assert msg["To"] == "me@example.org, you@example.org"
    assert msg["Subject"] == title(FANOUT_FAILED)
    assert msg["Date"] and msg["Message-ID"].endswith("@example.org>")
    body = msg.get_body()
    assert body is not None and "Shipped the résumé parser ✅" in body.get_content()


def test_the_output_attached_as_markdown() -> None:
    with SmtpServer() as server:
        sent, _ = deliver(email_to(server.port, attach=True))
    assert sent.ok
    msg = parsed(server.mails[0].content)
    [part] = msg.iter_attachments()
    assert part.get_content_type() == "text/markdown"
    assert part.get_filename() == "notes-2026-11-25.md"
    assert part.get_content().replace("\r\n", "\n") == FANOUT_FAILED.excerpt
    body = msg.get_body()
    assert body is not None and "résumé" not in body.get_content()


def test_a_login_from_the_environment() -> None:
    with SmtpServer(login=("bot", LOGIN["SMTP_PASSWORD"])) as server:
        delivery = email_to(server.port, user_env="SMTP_USER", password_env="SMTP_PASSWORD")
        sent, _ = deliver(delivery, LOGIN)
    assert sent == Sent(TARGET, True, 1)
    assert server.logins == ["bot"] and len(server.mails) == 1


def test_a_refused_login_is_not_retried() -> None:
    with SmtpServer(login=("bot", "another password")) as server:
        delivery = email_to(server.port, user_env="SMTP_USER", password_env="SMTP_PASSWORD")
        sent, waits = deliver(delivery, LOGIN)
    assert sent == Sent(
        TARGET,
        False,
        1,
        "smtp 127.0.0.1: login refused (535 5.7.8 Authentication credentials invalid)",
    )
    assert server.mails == [] and waits == []
    assert LOGIN["SMTP_PASSWORD"] not in (sent.error or "")


def test_an_unset_password_variable_is_named() -> None:
    delivery = email_to(free_port(), user_env="SMTP_USER", password_env="SMTP_PASSWORD")
    sent, _ = deliver(delivery, {"SMTP_USER": "bot"})
    assert sent == Sent(
        TARGET, False, 0, "smtp 127.0.0.1: the environment variable SMTP_PASSWORD is not set"
    )


def test_starttls_asked_of_a_server_without_it_sends_nothing() -> None:
    with SmtpServer() as server:
        sent, _ = deliver(email_to(server.port, starttls=True))
    assert sent == Sent(
        TARGET,
        False,
        1,
        "smtp 127.0.0.1: the server does not offer STARTTLS (starttls: true), so nothing was "
        "sent in the clear",
    )
    assert server.mails == []


def test_starttls_then_login(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cert, key = self_signed(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # trust it, as a system's store would
    with SmtpServer(login=("bot", LOGIN["SMTP_PASSWORD"]), tls=(cert, key)) as server:
        delivery = email_to(
            server.port, starttls=True, user_env="SMTP_USER", password_env="SMTP_PASSWORD"
        )
        sent, _ = deliver(delivery, LOGIN)
    assert sent == Sent(TARGET, True, 1)
    assert server.logins == ["bot"] and len(server.mails) == 1


def test_starttls_to_an_untrusted_certificate_fails(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    with SmtpServer(tls=(cert, key)) as server:
        sent, _ = deliver(email_to(server.port, starttls=True))
    assert not sent.ok
    assert (sent.error or "").startswith("smtp 127.0.0.1: its TLS certificate is not trusted")
    assert server.mails == []


def test_ssl_to_a_plain_server_fails() -> None:
    with SmtpServer() as server:
        sent, _ = deliver(email_to(server.port, ssl=True, retries=0))
    assert not sent.ok and (sent.error or "").startswith("smtp 127.0.0.1: ")
    assert server.mails == []


def test_a_server_that_never_answers_is_cut_at_the_timeout() -> None:
    with Silent() as silent:
        sent, waits = deliver(email_to(silent.port, timeout=0.5, retries=1))
    assert sent == Sent(TARGET, False, 2, "smtp 127.0.0.1: timed out after 0.5 s")
    assert waits == [1.0]


def test_an_endless_greeting_is_cut_at_the_timeout() -> None:
    """A server that trickles `220-` lines forever: every read gets a line within the socket's
    timeout; the attempt's deadline cuts it whole, the greeting included."""
    with Trickle(b"220-still greeting\r\n") as server:
        sent, _ = within(30, lambda: deliver(email_to(server.port, timeout=0.5, retries=0)))
    assert sent == Sent(TARGET, False, 1, "smtp 127.0.0.1: timed out after 0.5 s")


def test_a_tls_handshake_that_never_ends_is_cut_at_the_timeout() -> None:
    with Trickle(b"\x00", head=TLS_RECORD) as server:
        delivery = email_to(server.port, ssl=True, timeout=0.5, retries=0)
        sent, _ = within(30, lambda: deliver(delivery))
    assert sent == Sent(TARGET, False, 1, "smtp 127.0.0.1: timed out after 0.5 s")


def test_nobody_listening() -> None:
    sent, _ = deliver(email_to(free_port(), retries=0))
    assert sent == Sent(TARGET, False, 1, "smtp 127.0.0.1: connection refused")


def test_line_breaks_in_a_task_name_and_an_item_add_no_header() -> None:
    notice = dataclasses.replace(
        ONE_OK_TAINTED,
        task="review\r\nBcc: victim@example.org",
        item="a.py\nX-Injected: yes",
    )
    with SmtpServer() as server:
        sent, _ = deliver(email_to(server.port), notice=notice)
    assert sent.ok
    [mail] = server.mails
    assert mail.rcpt_tos == ["me@example.org"]
    msg = parsed(mail.content)
    assert msg["Bcc"] is None and msg["X-Injected"] is None
    assert msg["Subject"] == (
        "claw: review Bcc: victim@example.org changed for a.py X-Injected: yes "
        "(run 20261127T230000-ab12)"
    )


def test_a_line_break_in_an_address_is_a_failure_not_a_crash() -> None:
    with SmtpServer() as server:
        sent, _ = deliver(email_to(server.port, ("me@example.org\r\nBcc: victim@example.org",)))
    assert not sent.ok and sent.attempts == 0
    assert (sent.error or "").startswith("email: the message cannot be made: ")
    assert server.mails == []


def test_a_line_break_in_the_output_name_still_sends_the_mail() -> None:
    """A fan-out's output is named from its item, and a dropped file's name may hold a line
    break: the attachment's file name is made one line, and bounded, as the subject is."""
    notice = dataclasses.replace(
        FANOUT_FAILED, output="out/x\nBcc: victim@example.org" + "y" * 500 + ".md"
    )
    with SmtpServer() as server:
        sent, _ = deliver(email_to(server.port, attach=True), notice=notice)
    assert sent.ok, sent.error
    [mail] = server.mails
    assert mail.rcpt_tos == ["me@example.org"]
    msg = parsed(mail.content)
    assert msg["Bcc"] is None
    [part] = msg.iter_attachments()
    name = part.get_filename() or ""
    assert name.startswith("x Bcc: victim@example.org") and "\n" not in name
    assert len(name) <= 120
