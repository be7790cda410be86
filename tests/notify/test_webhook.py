"""The webhook target against a real HTTP server on 127.0.0.1: what it sends, and each way a
server fails it (an error, a redirect, silence, a hang-up, nobody listening). An error names
the host, never the URL's path (a Slack webhook's path is its secret)."""

from __future__ import annotations

import base64
import json

from notices import FANOUT_FAILED, keep, webhook
from receivers import CLOSE, HANG, TLS_RECORD, HttpReceiver, Silent, Trickle, free_port, within

from claw_batch import __version__
from claw_batch.config import Delivery
from claw_batch.notify.send import Sent, send
from claw_batch.notify.shapes import json_body

SECRET_PATH = "/services/T0001/B0002/XXXXsecretXXXX"


def deliver(delivery: Delivery, environ: dict[str, str] | None = None) -> tuple[Sent, list[float]]:
    waits: list[float] = []
    sent = send(delivery, FANOUT_FAILED, environ=environ or {}, redact=keep, sleep=waits.append)
    return sent, waits


def test_posts_the_json_payload_with_claws_headers() -> None:
    with HttpReceiver([200]) as hook:
        sent, waits = deliver(webhook(hook.url(SECRET_PATH + "?x=1")))
    assert sent == Sent("webhook 127.0.0.1", ok=True, attempts=1)
    [got] = hook.requests
    assert (got.method, got.path) == ("POST", SECRET_PATH + "?x=1")
    assert got.headers["Content-Type"] == "application/json"
    assert got.headers["User-Agent"] == f"claw/{__version__}"
    assert json.loads(got.body) == json_body(FANOUT_FAILED)
    assert waits == []


def test_a_server_error_is_retried_with_backoff() -> None:
    with HttpReceiver([500, 200]) as hook:
        sent, waits = deliver(webhook(hook.url(SECRET_PATH)))
    assert sent == Sent("webhook 127.0.0.1", ok=True, attempts=2)
    assert waits == [1.0]
    assert hook.requests[0].body == hook.requests[1].body


def test_always_500_gives_up_after_its_retries_without_the_url_in_the_error() -> None:
    with HttpReceiver([(500, {}, f"no route to {SECRET_PATH}".encode())]) as hook:
        sent, waits = deliver(webhook(hook.url(SECRET_PATH), retries=3))
    assert sent == Sent("webhook 127.0.0.1", False, 4, "webhook 127.0.0.1: HTTP 500")
    assert len(hook.requests) == 4
    assert waits == [1.0, 2.0, 4.0]


def test_the_backoff_doubles_up_to_30_s() -> None:
    with HttpReceiver([503]) as hook:
        sent, waits = deliver(webhook(hook.url(), retries=7))
    assert sent.attempts == 8
    assert waits == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]


def test_retry_after_is_honoured_within_the_cap() -> None:
    with HttpReceiver(
        [(429, {"Retry-After": "7"}, b""), (429, {"Retry-After": "999"}, b""), 200]
    ) as hook:
        sent, waits = deliver(webhook(hook.url()))
    assert sent.ok and sent.attempts == 3
    assert waits == [7.0, 30.0]


def test_a_refusal_is_not_retried_and_its_word_is_shown() -> None:
    with HttpReceiver([(400, {}, b"invalid_payload\n")]) as hook:
        sent, waits = deliver(webhook(hook.url(SECRET_PATH)))
    assert sent == Sent(
        "webhook 127.0.0.1", False, 1, "webhook 127.0.0.1: HTTP 400 (invalid_payload)"
    )
    assert len(hook.requests) == 1 and waits == []


def test_an_answer_that_echoes_the_secret_path_is_not_shown() -> None:
    with HttpReceiver([(404, {}, f"Not found: {SECRET_PATH}".encode())]) as hook:
        sent, _ = deliver(webhook(hook.url(SECRET_PATH)))
    assert sent.error == "webhook 127.0.0.1: HTTP 404"


def test_a_redirect_is_not_followed() -> None:
    with (
        HttpReceiver([200]) as elsewhere,
        HttpReceiver([(302, {"Location": elsewhere.url("/steal")}, b"")]) as hook,
    ):
        sent, _ = deliver(webhook(hook.url(SECRET_PATH)))
    assert sent == Sent(
        "webhook 127.0.0.1", False, 1, "webhook 127.0.0.1: HTTP 302 (a redirect: not followed)"
    )
    assert len(hook.requests) == 1
    assert elsewhere.requests == []


def test_a_server_that_never_answers_is_cut_at_the_timeout() -> None:
    with HttpReceiver([HANG]) as hook:
        sent, waits = deliver(webhook(hook.url(SECRET_PATH), timeout=0.5, retries=1))
    assert sent == Sent("webhook 127.0.0.1", False, 2, "webhook 127.0.0.1: timed out after 0.5 s")
    assert len(hook.requests) == 2 and waits == [1.0]


def test_a_server_that_accepts_and_says_nothing_is_cut_at_the_timeout() -> None:
    with Silent() as silent:
        sent, _ = deliver(webhook(f"http://127.0.0.1:{silent.port}/x", timeout=0.5, retries=0))
    assert sent.error == "webhook 127.0.0.1: timed out after 0.5 s"


def test_an_https_server_that_accepts_and_says_nothing_is_cut_at_the_timeout() -> None:
    with Silent() as silent:
        url = f"https://127.0.0.1:{silent.port}{SECRET_PATH}"
        sent, _ = within(30, lambda: deliver(webhook(url, timeout=0.5, retries=0)))
    assert sent.error == "webhook 127.0.0.1: timed out after 0.5 s"


def test_a_tls_handshake_that_never_ends_is_cut_at_the_timeout() -> None:
    """The handshake's record comes a byte at a time: each read is within the socket's
    timeout; the attempt's deadline cuts the handshake with the rest."""
    with Trickle(b"\x00", head=TLS_RECORD) as server:
        url = f"https://127.0.0.1:{server.port}{SECRET_PATH}"
        sent, _ = within(30, lambda: deliver(webhook(url, timeout=0.5, retries=0)))
    assert sent == Sent("webhook 127.0.0.1", False, 1, "webhook 127.0.0.1: timed out after 0.5 s")


def test_a_server_that_hangs_up_at_once() -> None:
    with HttpReceiver([CLOSE]) as hook:
        sent, _ = deliver(webhook(hook.url(), retries=0))
    assert sent.error in (
        "webhook 127.0.0.1: the server closed the connection without an answer",
        "webhook 127.0.0.1: Connection reset by peer",
    )


def test_nobody_listening() -> None:
    sent, waits = deliver(webhook(f"http://127.0.0.1:{free_port()}{SECRET_PATH}", retries=1))
    assert sent == Sent("webhook 127.0.0.1", False, 2, "webhook 127.0.0.1: connection refused")
    assert waits == [1.0]


def test_https_to_a_plain_http_server_fails_its_tls() -> None:
    with HttpReceiver([200]) as hook:
        sent, _ = deliver(webhook(f"https://127.0.0.1:{hook.port}{SECRET_PATH}", retries=0))
    assert not sent.ok
    assert sent.error is not None and sent.error.startswith("webhook 127.0.0.1: ")
    assert SECRET_PATH not in sent.error
    assert hook.requests == []


def test_the_url_from_an_environment_variable() -> None:
    delivery = Delivery(on=("failed",), kind="webhook", url_env="SLACK_HOOK", format="slack")
    with HttpReceiver([200]) as hook:
        sent, _ = deliver(delivery, {"SLACK_HOOK": hook.url(SECRET_PATH)})
    assert sent == Sent("webhook $SLACK_HOOK", True, 1)
    assert hook.requests[0].path == SECRET_PATH


def test_an_unset_url_env_is_a_failure_naming_the_variable() -> None:
    delivery = Delivery(on=("failed",), kind="webhook", url_env="SLACK_HOOK")
    sent, waits = deliver(delivery, {"OTHER": "x"})
    assert sent == Sent(
        "webhook $SLACK_HOOK",
        False,
        0,
        "webhook: the environment variable SLACK_HOOK (url_env) is not set",
    )
    assert waits == []


def test_a_url_that_is_no_http_url() -> None:
    delivery = Delivery(on=("failed",), kind="webhook", url_env="HOOK")
    sent, _ = deliver(delivery, {"HOOK": "file:///etc/passwd"})
    assert sent.error == "webhook: the URL is not an http(s) URL with a host"
    assert sent.attempts == 0


def test_a_login_in_the_url_is_sent_as_basic_auth_and_never_shown() -> None:
    with HttpReceiver([401]) as hook:
        url = f"http://bot:pa%3Ass@127.0.0.1:{hook.port}/hook"
        sent, _ = deliver(webhook(url))
    auth = hook.requests[0].headers["Authorization"]
    assert base64.b64decode(auth.removeprefix("Basic ")) == b"bot:pa:ss"
    assert sent.error == "webhook 127.0.0.1: HTTP 401"
