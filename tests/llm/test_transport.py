"""transport: claw's HTTP/1.1 client, against real local servers (keep-alive, TLS, chunked
streams, servers that close idle connections)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAI, Reply, _Handler, error, stream_chunks, text
from helpers import make_project

from claw_batch.errors import ModelError
from claw_batch.llm.messages import ChatRequest, Completion, Message, Usage
from claw_batch.llm.openai_compat import OpenAICompatLLM

REQUEST = ChatRequest(model="m", messages=(Message("user", "hi"),))


class KeepAlive(_Handler):
    """HTTP/1.1, as real endpoints speak it: connections are kept, streams are chunked."""

    protocol_version = "HTTP/1.1"
    ports: list[int] = []  # noqa: RUF012  # the client port of every request, in order

    def do_POST(self) -> None:
        KeepAlive.ports.append(self.client_address[1])
        super().do_POST()

    def _stream(self, body: dict[str, Any], reply: Reply, n: int) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        events = [
            b"data: " + json.dumps(c).encode() + b"\n\n"
            for c in stream_chunks(reply, body.get("model", ""), n, include_usage=True)
        ]
        for event in [*events, b"data: [DONE]\n\n"]:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
        self.wfile.write(b"0\r\n\r\n")


class ClosesWhenIdle(KeepAlive):
    """Keeps nothing, and does not say so: what a server whose idle timeout ran out between
    two requests looks like to the client."""

    def do_POST(self) -> None:
        super().do_POST()
        self.close_connection = True


class HalfAnswers(KeepAlive):
    """Answers the first request on a connection, and the second one in part."""

    def do_POST(self) -> None:
        if self.client_address[1] in KeepAlive.ports:
            KeepAlive.ports.append(self.client_address[1])
            self.server.fake.requests.append({})
            self.wfile.write(b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"cho')
            self.close_connection = True
            return
        super().do_POST()


def serving(handler: type[_Handler]) -> Iterator[FakeOpenAI]:
    KeepAlive.ports = []
    with FakeOpenAI() as srv:
        srv._server.RequestHandlerClass = handler  # socketserver's documented attribute
        yield srv


@pytest.fixture
def srv() -> Iterator[FakeOpenAI]:
    yield from serving(KeepAlive)


def ask(llm: OpenAICompatLLM) -> Completion:
    return llm.complete(REQUEST, deadline=time.monotonic() + 10)


def test_calls_share_one_kept_connection(srv: FakeOpenAI) -> None:
    srv.enqueue(text("one"), error(400, "no"), text("three"))
    llm = OpenAICompatLLM(base_url=srv.base_url, api_key="k")
    assert ask(llm).message.content == "one"
    with pytest.raises(ModelError, match="HTTP 400: no"):
        ask(llm)
    assert ask(llm).message.content == "three"
    assert len(set(KeepAlive.ports)) == 1


def test_a_chunked_stream_and_the_call_after_it_on_the_same_connection(
    srv: FakeOpenAI,
) -> None:
    srv.enqueue(text("streamed", usage=(7, 2)), text("again"))
    llm = OpenAICompatLLM(base_url=srv.base_url, api_key="k", stream=True)
    assert ask(llm) == Completion(Message("assistant", "streamed"), Usage(7, 2), "stop", "m")
    assert ask(llm).message.content == "again"
    assert len(set(KeepAlive.ports)) == 1


def test_a_connection_the_server_closed_while_idle_is_replaced_and_the_request_sent_once() -> None:
    for srv in serving(ClosesWhenIdle):
        srv.enqueue(*(text(f"answer {n}") for n in range(3)))
        llm = OpenAICompatLLM(base_url=srv.base_url, api_key="k", max_attempts=1)
        answers = []
        for _ in range(3):
            answers.append(ask(llm).message.content)
            time.sleep(0.05)  # the server's close reaches the client
        assert answers == ["answer 0", "answer 1", "answer 2"]
        assert len(srv.requests) == 3  # each reached the server once
        assert len(set(KeepAlive.ports)) == 3


def test_a_reused_connection_that_failed_mid_reply_is_not_sent_again() -> None:
    for srv in serving(HalfAnswers):
        srv.enqueue(text("first"))
        llm = OpenAICompatLLM(base_url=srv.base_url, api_key="k", max_attempts=1)
        assert ask(llm).message.content == "first"
        with pytest.raises(ModelError) as exc:
            ask(llm)
        assert str(exc.value) == (
            f"model 'm' at {srv.base_url}: connection error: Connection error. after 1 "
            "attempts; the endpoint is down or overloaded, try again later"
        )
        assert len(srv.requests) == 2  # the second request went out once


def certificate(tmp_path: Path) -> tuple[Path, Path]:
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost"),
            *("-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"),
        ],
        check=True,
        capture_output=True,
    )
    return key, cert


@pytest.mark.skipif(shutil.which("openssl") is None, reason="makes its certificate with openssl")
def test_https_verifies_the_server_against_ssl_cert_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ssl

    key, cert = certificate(tmp_path)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert, key)
    for srv in serving(KeepAlive):
        srv._server.socket = server.wrap_socket(srv._server.socket, server_side=True)
        url = srv.base_url.replace("http://127.0.0.1", "https://localhost")
        srv.enqueue(text("over TLS"), text("and again"))
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
        llm = OpenAICompatLLM(base_url=url, api_key="k")
        assert ask(llm).message.content == "over TLS"
        assert ask(llm).message.content == "and again"
        assert len(set(KeepAlive.ports)) == 1

        monkeypatch.delenv("SSL_CERT_FILE")  # the system's CAs never signed it
        untrusted = OpenAICompatLLM(base_url=url, api_key="k", max_attempts=1)
        with pytest.raises(ModelError) as exc:
            ask(untrusted)
        assert str(exc.value) == (
            f"model 'm' at {url}: connection error: Connection error. after 1 attempts; "
            "the endpoint is down or overloaded, try again later"
        )
        assert len(srv.requests) == 2  # the untrusted server was never sent the request


# Runs the CLI, then says which of the heavy modules a model call once needed were loaded.
PROBE = """
import json, sys
from claw_batch.cli import main
try:
    main(sys.argv[1:], prog_name="claw")
except SystemExit as exc:
    code = exc.code
heavy = ("openai", "httpx2", "httpcore2", "pydantic")
loaded = {m: [n for n in sys.modules if n == m or n.startswith(m + ".")] for m in heavy}
print(json.dumps({"code": code, "loaded": sorted(m for m, names in loaded.items() if names)}))
"""
PROXIES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


@pytest.mark.parametrize("proxy", [False, True], ids=["direct", "through_a_proxy"])
def test_the_sdk_is_imported_only_behind_a_proxy(tmp_path: Path, proxy: bool) -> None:
    """issue 17: `import openai` alone takes 0.69 s, before a run's first request."""
    root = make_project(
        tmp_path, "version: 1\nmodel: fake-model\ntasks:\n  t: {prompt: go, output: t.md}\n"
    )
    env = {k: v for k, v in os.environ.items() if k.upper() not in PROXIES}
    if proxy:  # named, and bypassed for the fake: the call goes through the SDK all the same
        env |= {"HTTP_PROXY": "http://127.0.0.1:9", "NO_PROXY": "127.0.0.1"}
    with FakeOpenAI() as srv:
        srv.enqueue(text("done"))
        env |= {"OPENAI_BASE_URL": srv.base_url, "OPENAI_API_KEY": "sk-x"}
        done = subprocess.run(
            [sys.executable, "-c", PROBE, "run", "-C", str(root), "-q"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["code"] in (0, None), done.stderr
    assert (root / "t.md").read_text() == "done\n"
    # pydantic is claw's YAML boundary (and the tools' schemas), not the model call's.
    assert [m for m in report["loaded"] if m != "pydantic"] == (
        ["httpcore2", "httpx2", "openai"] if proxy else []
    )


def test_the_model_call_path_imports_none_of_the_sdks_modules() -> None:
    code = (
        "import sys, time\n"
        "from claw_batch.llm.openai_compat import OpenAICompatLLM\n"
        "from claw_batch.llm.messages import ChatRequest, Message\n"
        "llm = OpenAICompatLLM(base_url=sys.argv[1], api_key='k')\n"
        "llm.complete(ChatRequest('m', (Message('user', 'hi'),)), deadline=time.monotonic() + 30)\n"
        "heavy = ('openai', 'httpx2', 'httpcore2', 'pydantic', 'pydantic_core')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    env = {k: v for k, v in os.environ.items() if k.upper() not in PROXIES}
    with FakeOpenAI() as srv:
        srv.enqueue(text("hi"))
        done = subprocess.run(
            [sys.executable, "-c", code, srv.base_url],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.stdout == "[]\n", done.stderr
