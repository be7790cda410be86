"""Golden messages of `notify:` (claw_batch.notify), byte for byte as a real receiver got them:
each webhook format's body (an HTTP server on 127.0.0.1), the e-mail (aiosmtpd; its Date,
Message-ID and MIME boundary masked, the only parts that change from run to run) and a
command's stdin. One file per message in __snapshots__/test_notify_golden/, readable as is.

Re-create them after an intended change with
  python -m pytest tests/golden/test_notify_golden.py --snapshot-update
and read the diff."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from notices import FANOUT_FAILED, ONE_OK_TAINTED, PINGING, command, email, keep, webhook
from receivers import HttpReceiver, SmtpServer
from syrupy.assertion import SnapshotAssertion
from syrupy.extensions.single_file import SingleFileSnapshotExtension

from claw_batch.notify.notice import Notice
from claw_batch.notify.send import send

NOTICES = {"fanout": FANOUT_FAILED, "tainted": ONE_OK_TAINTED, "pinging": PINGING}
WRITE_STDIN = "import sys; open(sys.argv[1], 'wb').write(sys.stdin.buffer.read())"


class JsonFile(SingleFileSnapshotExtension):
    file_extension = "json"


class MailFile(SingleFileSnapshotExtension):
    file_extension = "eml"


def masked(mail: bytes) -> bytes:
    """The e-mail without what changes each time it is made."""
    mail = re.sub(rb"(?m)^Date: .*\r$", b"Date: <date>\r", mail)
    mail = re.sub(rb"(?m)^Message-ID: <[^>]*@", b"Message-ID: <id@", mail)
    return re.sub(rb"={15}\d+==", b"===============<boundary>==", mail)


@pytest.mark.parametrize("fmt", ["json", "slack", "discord", "teams"])
@pytest.mark.parametrize("case", list(NOTICES))
def test_webhook_body(fmt: str, case: str, snapshot: SnapshotAssertion) -> None:
    with HttpReceiver() as hook:
        sent = send(webhook(hook.url(), fmt), NOTICES[case], environ={}, redact=keep)
    assert sent.ok
    assert hook.requests[0].body == snapshot(extension_class=JsonFile)


@pytest.mark.parametrize("attach", [False, True], ids=["body", "attached"])
@pytest.mark.parametrize("case", list(NOTICES))
def test_email(attach: bool, case: str, snapshot: SnapshotAssertion) -> None:
    to = ("me@example.org", "team@example.org")
    with SmtpServer() as server:
        sent = send(email(server.port, to, attach=attach), NOTICES[case], environ={}, redact=keep)
    assert sent.ok, sent.error
    [mail] = server.mails
    assert (mail.mail_from, mail.rcpt_tos) == ("claw@example.org", list(to))
    assert masked(mail.content) == snapshot(extension_class=MailFile)


@pytest.mark.parametrize("case", list(NOTICES))
def test_command_stdin(case: str, tmp_path: Path, snapshot: SnapshotAssertion) -> None:
    got = tmp_path / "stdin.json"
    notice: Notice = NOTICES[case]
    delivery = command(sys.executable, "-c", WRITE_STDIN, str(got))
    assert send(delivery, notice, environ={}, redact=keep).ok
    assert got.read_bytes() == snapshot(extension_class=JsonFile)
