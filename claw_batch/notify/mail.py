"""An e-mail target: the message (standard library `email`), sent through the delivery's SMTP
server (`smtplib`): TLS from the start (`ssl`) or by STARTTLS, never silently without it when
it was asked for; a login only from the environment variables it names. Both libraries are
imported only when an e-mail is sent."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from claw_batch.config import Delivery, Smtp
from claw_batch.notify import markup
from claw_batch.notify.attempt import Deadline, Miss, connect, seconds

if TYPE_CHECKING:
    import smtplib
    import socket
    from email.message import EmailMessage

SHOWN_CHARS = 200  # of a server's answer, in the error
NAME_CHARS = 100  # of the attachment's file name


@dataclass(frozen=True)
class Letter:
    """What one e-mail says: its subject (the title line), its body (the message, or the
    summary when the output is attached) and the attachment's text, if any."""

    subject: str
    body: str
    attachment: str | None = None
    attachment_name: str = "output.md"


def message(delivery: Delivery, letter: Letter) -> EmailMessage:
    """The e-mail as sent: From, To (every recipient), Subject, Date, Message-ID. A header
    value with a line break is refused (ValueError), never sent as a header of its own."""
    import email.policy
    import email.utils
    from email.message import EmailMessage

    msg = EmailMessage(policy=email.policy.SMTP)
    sender = delivery.sender or ""
    msg["From"] = sender
    msg["To"] = ", ".join(delivery.to)
    msg["Subject"] = letter.subject
    msg["Date"] = email.utils.formatdate(usegmt=True)
    # make_msgid's default domain is the host's FQDN: a DNS lookup, on a slow resolver seconds.
    domain = sender.rpartition("@")[2].strip("> ") or "localhost"
    msg["Message-ID"] = email.utils.make_msgid(domain=domain)
    # Quoted-printable: 7-bit lines any server takes (8bit needs its 8BITMIME), still readable.
    msg.set_content(letter.body, cte="quoted-printable")
    if letter.attachment is not None:
        msg.add_attachment(
            letter.attachment,
            subtype="markdown",
            filename=letter.attachment_name,
            cte="quoted-printable",
        )
    return msg


def attachment_name(output: str | None) -> str:
    """The output's file name, as the subject is made: one line (a fan-out's output is named
    from its item, and a file's name may hold a line break, which no header may), bounded."""
    name = markup.one_line(PurePosixPath(output).name) if output else ""
    return markup.cut(name, NAME_CHARS) if name else "output.md"


def login(smtp: Smtp, sender: str, environ: Mapping[str, str]) -> tuple[str, str] | Miss | None:
    """(user, password) from the variables `user_env`/`password_env` name (the user defaults
    to the sender); None when no login is asked; a Miss naming a variable that is not set."""
    names = [n for n in (smtp.user_env, smtp.password_env) if n]
    if not names:
        return None
    unset = [n for n in names if not environ.get(n)]
    if unset:
        return Miss(f"smtp {smtp.host}: the environment variable {unset[0]} is not set", final=True)
    if smtp.password_env is None:
        return Miss(f"smtp {smtp.host}: user_env without password_env: no password", final=True)
    user = environ[smtp.user_env] if smtp.user_env else sender
    return user, environ[smtp.password_env]


def deliver(
    delivery: Delivery, data: bytes, *, credentials: tuple[str, str] | None, timeout: float
) -> Miss | None:
    """Send the message `data` (as `message` made it, in bytes) to every recipient."""
    import smtplib

    smtp = delivery.smtp
    assert smtp is not None  # config.Delivery.of sets it for every e-mail target
    name = f"smtp {smtp.host}"
    client: smtplib.SMTP | None = None
    try:
        with Deadline(timeout) as deadline:
            try:
                client = _connected(smtp, timeout, deadline)
                return _exchange(client, deadline, smtp, delivery, data, credentials)
            except (OSError, smtplib.SMTPException) as e:
                return _missed(name, e, timeout, deadline.passed)
            finally:
                if client is not None:
                    _quit(client)
    finally:
        if client is not None:
            client.close()


def _connected(smtp: Smtp, timeout: float, deadline: Deadline) -> smtplib.SMTP:
    """A client connected to the server, its greeting read. Its socket is the deadline's
    before a byte is read from it: an endless greeting, or a TLS handshake that never ends,
    is cut with the rest of the attempt. (Given the host at once, as STARTTLS needs: it
    checks the certificate against the host the client was made with.)"""
    import smtplib
    import socket
    import ssl

    context = ssl.create_default_context() if smtp.ssl else None

    class Watched(smtplib.SMTP):
        def _get_socket(self, host: str, port: int, timeout: float) -> socket.socket:
            return connect(host, port, timeout, deadline, context)

    # The EHLO name: the default is the host's FQDN, a DNS lookup.
    local = socket.gethostname()
    return Watched(smtp.host, smtp.port, local_hostname=local, timeout=timeout)


def _exchange(
    client: smtplib.SMTP,
    deadline: Deadline,
    smtp: Smtp,
    delivery: Delivery,
    data: bytes,
    credentials: tuple[str, str] | None,
) -> Miss | None:
    import ssl

    client.ehlo_or_helo_if_needed()
    if smtp.starttls:
        if not client.has_extn("starttls"):
            return Miss(
                f"smtp {smtp.host}: the server does not offer STARTTLS (starttls: true), so "
                "nothing was sent in the clear",
                final=True,
            )
        client.starttls(context=ssl.create_default_context())
        deadline.watch(client.sock)
        client.ehlo()
    if credentials is not None:
        client.login(*credentials)
    refused = client.sendmail(delivery.sender or "", list(delivery.to), data)
    if refused:
        who = ", ".join(sorted(refused))
        return Miss(f"smtp {smtp.host}: refused {who} (sent to the others)", final=True)
    return None


def _quit(client: smtplib.SMTP) -> None:
    import smtplib

    if client.sock is None:
        return
    with contextlib.suppress(OSError, smtplib.SMTPException):
        client.quit()  # the message was sent, or the error in hand says more


def _missed(name: str, error: Exception, timeout: float, passed: bool) -> Miss:
    import smtplib
    import ssl

    if passed or isinstance(error, TimeoutError):
        return Miss(f"{name}: timed out after {seconds(timeout)}")
    if isinstance(error, ConnectionRefusedError):
        return Miss(f"{name}: connection refused")
    if isinstance(error, smtplib.SMTPAuthenticationError):
        return Miss(f"{name}: login refused ({_said(error)})", final=True)
    if isinstance(error, smtplib.SMTPNotSupportedError):
        return Miss(f"{name}: {error}", final=True)
    if isinstance(error, smtplib.SMTPRecipientsRefused):
        return Miss(f"{name}: refused every recipient", final=True)
    if isinstance(error, smtplib.SMTPResponseException):
        # 4yz is a transient refusal (retried), 5yz a permanent one
        return Miss(f"{name}: {_said(error)}", final=error.smtp_code >= 500)
    if isinstance(error, smtplib.SMTPServerDisconnected):
        return Miss(f"{name}: the server closed the connection")
    if isinstance(error, ssl.SSLCertVerificationError):
        return Miss(f"{name}: its TLS certificate is not trusted ({error.verify_message})")
    if isinstance(error, ssl.SSLError):
        return Miss(f"{name}: TLS failed ({error.reason or type(error).__name__})")
    return Miss(f"{name}: {getattr(error, 'strerror', None) or type(error).__name__}")


def _said(error: smtplib.SMTPResponseException) -> str:
    """`535 5.7.8 Authentication credentials invalid`: the server's answer, one line, bounded."""
    answer = error.smtp_error
    text = answer.decode(errors="replace") if isinstance(answer, bytes) else str(answer)
    line = " ".join(text.split())
    shown = "".join(ch for ch in line if ch.isprintable())[:SHOWN_CHARS]
    return f"{error.smtp_code} {shown}".strip()
