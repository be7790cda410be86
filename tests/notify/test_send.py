"""send() and preview(): what every target shares. The message is redacted again as a whole,
`claw run -n` gets one line per delivery, and the modules of a target are imported only when
one is sent."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

from notices import FANOUT_FAILED, ONE_OK_TAINTED, command, email, keep, webhook
from receivers import HttpReceiver

from claw_batch.config import Delivery
from claw_batch.notify.send import preview, send
from claw_batch.safety.redact import Redactor

TITLE = (
    "claw: nightly-summary failed — 2 of 40 jobs failed, 1 hit a limit (run 20261127T230000-ab12)"
)


def test_preview_names_the_target_and_the_title() -> None:
    slack = Delivery(on=("failed",), kind="webhook", url_env="SLACK_HOOK", format="slack")
    hook = webhook("https://hooks.slack.com/services/T0/B0/secret", "discord")
    assert [
        preview(d, FANOUT_FAILED)
        for d in (
            slack,
            hook,
            email(25, ("me@example.org", "you@example.org")),
            email(25, attach=True),
            command("notify-send", "claw"),
        )
    ] == [
        f"would send to webhook $SLACK_HOOK (slack): {TITLE}",
        f"would send to webhook hooks.slack.com (discord): {TITLE}",
        f"would send to email me@example.org (+1): {TITLE}",
        f"would send to email me@example.org (output attached): {TITLE}",
        f"would send to command notify-send: {TITLE}",
    ]


def test_every_text_is_redacted_and_the_body_once_more() -> None:
    secret = "sk-proj-0123456789abcdefghijklmnopqrstuv"
    notice = dataclasses.replace(
        ONE_OK_TAINTED,
        excerpt=f"the key is {secret}\n",
        item=f"{secret}.py",
        run_id="20261127T230000-ab12",
    )
    # A redactor that also hides the run id: only the pass over the whole body sees the run id
    # inside the title, which the shapes make.
    redact = Redactor([secret, "20261127T230000-ab12"])
    for fmt in ("json", "slack", "discord", "teams"):
        with HttpReceiver() as hook:
            assert send(webhook(hook.url(), fmt), notice, environ={}, redact=redact).ok
        body = hook.requests[0].body.decode()
        assert secret not in body and "20261127T230000-ab12" not in body
        assert "[REDACTED]" in body
        json.loads(body)  # still JSON


def test_a_delivery_that_fails_never_raises() -> None:
    broken = [
        webhook(""),
        webhook("http://[::1"),
        webhook("http://127.0.0.1:99999/x"),
        email(1, retries=0),
        command("/nonexistent/program"),
    ]
    for delivery in broken:
        sent = send(delivery, FANOUT_FAILED, environ={}, redact=keep, sleep=lambda s: None)
        assert not sent.ok and sent.error


def test_sending_nothing_imports_no_target() -> None:
    """The run imports send() for every task with `notify:`: smtplib, email and http.client
    wait until a message goes that way."""
    heavy = ["smtplib", "email.message", "http.client", "tempfile"]
    code = (
        "import sys, json; import claw_batch.notify.send, claw_batch.notify.shapes;"
        f"print(json.dumps([m for m in {heavy!r} if m in sys.modules]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == []
