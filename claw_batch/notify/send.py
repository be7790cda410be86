"""Sending a notice through one delivery (config.Delivery): its shape for the target,
attempts with backoff, each cut at the delivery's timeout. Never raises for a delivery that
failed: the caller records what `Sent` says."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from claw_batch.config import Delivery
from claw_batch.notify import shapes
from claw_batch.notify.attempt import Miss
from claw_batch.notify.notice import Notice


@dataclass(frozen=True)
class Sent:
    target: str  # Delivery.target: nothing secret
    ok: bool
    attempts: int  # 0: none could be made (a variable unset, a URL unreadable, a header refused)
    error: str | None = None  # the last attempt's, redacted


BACKOFF_CAP = 30.0  # seconds between two attempts, at most


def send(
    delivery: Delivery,
    notice: Notice,
    *,
    environ: Mapping[str, str],
    redact: Callable[[str], str],
    sleep: Callable[[float], None] | None = None,
    project: Path | None = None,
) -> Sent:
    """Deliver `notice`; up to 1 + delivery.retries attempts, waiting 1 s, 2 s, 4 s… (at most
    BACKOFF_CAP, or what a server's Retry-After asks within it) between them. `sleep` (tests)
    replaces the backoff's waits. `environ` holds the variables the delivery names (url_env,
    user_env, password_env); a command target runs from a scrubbed copy of it, in a fresh
    empty folder, told where `project` (the project's root) is (notify.command)."""
    attempt = _attempt(delivery, _redacted(notice, redact), environ, redact, project)
    if isinstance(attempt, Miss):  # nothing to try: a variable unset, a header refused
        return Sent(delivery.target, False, 0, redact(attempt.error))
    wait = time.sleep if sleep is None else sleep
    tries = 1 + delivery.retries
    for n in range(1, tries + 1):
        miss = attempt()
        if miss is None:
            return Sent(delivery.target, True, n)
        if miss.final or n == tries:
            return Sent(delivery.target, False, n, redact(miss.error))
        wait(min(max(2.0 ** (n - 1), miss.wait or 0.0), BACKOFF_CAP))
    raise AssertionError("unreachable: the last attempt returns")


def preview(delivery: Delivery, notice: Notice) -> str:
    """What `claw run -n` prints for it: the target and the message's first line."""
    how = f" ({delivery.format})" if delivery.kind == "webhook" else ""
    how = " (output attached)" if delivery.kind == "email" and delivery.attach else how
    return f"would send to {delivery.target}{how}: {shapes.title(notice)}"


def _redacted(notice: Notice, redact: Callable[[str], str]) -> Notice:
    """Every text of the notice through `redact` (again): its maker redacted it already."""

    def r(text: str | None) -> str | None:
        return None if text is None else redact(text)

    failures = tuple(
        dataclasses.replace(f, item=redact(f.item), reason=r(f.reason), error=r(f.error))
        for f in notice.failures
    )
    return dataclasses.replace(
        notice,
        task=redact(notice.task),
        project=redact(notice.project),
        item=r(notice.item),
        reason=r(notice.reason),
        output=r(notice.output),
        excerpt=redact(notice.excerpt),
        show=redact(notice.show),
        failures=failures,
    )


def _attempt(
    delivery: Delivery,
    notice: Notice,
    environ: Mapping[str, str],
    redact: Callable[[str], str],
    project: Path | None,
) -> Callable[[], Miss | None] | Miss:
    """One attempt, ready to repeat (its message made once), or why none can be made."""
    if delivery.kind == "email":
        return _email(delivery, notice, environ, redact)
    if delivery.kind == "command":
        from claw_batch.notify import command

        payload = redact(_json(shapes.json_body(notice))).encode()
        return lambda: command.run(
            delivery.command, payload, timeout=delivery.timeout, environ=environ, project=project
        )
    from claw_batch.notify import webhook

    url = delivery.url
    if delivery.url_env is not None:
        url = environ.get(delivery.url_env)
        if not url:
            return Miss(
                f"webhook: the environment variable {delivery.url_env} (url_env) is not set"
            )
    url = url or ""
    if (wrong := webhook.checked(url)) is not None:
        return wrong
    body = redact(_json(shapes.BODIES[delivery.format](notice))).encode()
    return lambda: webhook.post(url, body, timeout=delivery.timeout)


def _email(
    delivery: Delivery,
    notice: Notice,
    environ: Mapping[str, str],
    redact: Callable[[str], str],
) -> Callable[[], Miss | None] | Miss:
    from claw_batch.notify import mail

    assert delivery.smtp is not None  # config.Delivery.of sets it for every e-mail target
    credentials = mail.login(delivery.smtp, delivery.sender or "", environ)
    if isinstance(credentials, Miss):
        return credentials
    attached = delivery.attach and bool(notice.excerpt)
    letter = mail.Letter(
        subject=shapes.title(notice),
        body=redact(shapes.text(notice, excerpt=not attached)),
        attachment=redact(notice.excerpt) if attached else None,
        attachment_name=mail.attachment_name(notice.output),
    )
    try:
        data = mail.message(delivery, letter).as_bytes()
    except (ValueError, TypeError) as e:  # a header with a line break, an address unreadable
        return Miss(f"email: the message cannot be made: {e}")
    return lambda: mail.deliver(delivery, data, credentials=credentials, timeout=delivery.timeout)


def _json(body: object) -> str:
    return json.dumps(body, ensure_ascii=False, indent=None)
