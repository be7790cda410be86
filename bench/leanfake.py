"""A lean fake OpenAI-compatible endpoint for benchmarks, in a process of its own.

tests/fake_openai.FakeOpenAI is a thread per connection in the benchmark's own process: at
-j 200 its threads and the GIL they share cost CPU on the same two cores as the claw run being
measured, and the benchmark would time the server. This one is a single asyncio loop with a
hand-rolled HTTP/1.1 keep-alive reader (Content-Length bodies only: what OpenAI clients send),
answering POST /v1/chat/completions from a named script, streamed (SSE) when asked, after
--latency seconds. It timestamps every request with `time.monotonic()` (CLOCK_MONOTONIC, the
same clock in every process on the machine), so the parent can tell when the first request of
a child it spawned arrived.

Scripts (each request is answered from what the conversation holds so far):

- `done`: a one-line final answer at once (one turn a job);
- `triage`: read the `inbox/N.txt` named in the prompt, then `ls .`, then answer (three turns);
- `reader`: read data/f000.txt, data/f001.txt, ... one a turn, --turns of them, then answer.

GET /stats returns what the server saw since the last GET /stats (and starts counting anew):
arrival and reply times of each request, request body sizes and the server's CPU seconds.

    python bench/leanfake.py [--script done] [--latency 0] [--turns 100]

prints `port N` once it listens, and serves until stdin closes. From Python: `LeanServer`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

CREATED = 1_700_000_000
ITEM = re.compile(r"inbox/\d+\.txt")
Message = dict[str, Any]


# -- scripts: what the model answers -----------------------------------------------------------


def answer(content: str) -> Message:
    return {"role": "assistant", "content": content}


def tool_call(name: str, args: dict[str, Any]) -> Message:
    call = {"id": "call_0", "type": "function"}
    call["function"] = {"name": name, "arguments": json.dumps(args)}  # type: ignore[assignment]
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def turn_of(body: dict[str, Any]) -> int:
    return sum(1 for m in body.get("messages", ()) if m.get("role") == "assistant")


def done(body: dict[str, Any], turns: int) -> Message:
    return answer("done")


def triage(body: dict[str, Any], turns: int) -> Message:
    turn = turn_of(body)
    if turn == 0:
        prompt = str(body["messages"][-1].get("content"))
        item = ITEM.search(prompt)
        return tool_call("read", {"path": item[0] if item else "missing"})
    if turn == 1:
        return tool_call("ls", {"path": "."})
    return answer("triaged: the printer is on fire")


def reader(body: dict[str, Any], turns: int) -> Message:
    turn = turn_of(body)
    if turn < turns:
        return tool_call("read", {"path": f"data/f{turn:03d}.txt"})
    return answer("done")


SCRIPTS: dict[str, Callable[[dict[str, Any], int], Message]] = {
    "done": done,
    "triage": triage,
    "reader": reader,
}


def completion(message: Message, model: str, n: int) -> dict[str, Any]:
    finish = "tool_calls" if message.get("tool_calls") else "stop"
    return {
        "id": f"chatcmpl-lean{n}",
        "object": "chat.completion",
        "created": CREATED,
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def sse(message: Message, model: str, n: int) -> bytes:
    """The whole reply as one server-sent-events body: a role chunk, the content or the tool
    calls in one piece each, the finish and the usage."""
    head = {"id": f"chatcmpl-lean{n}", "object": "chat.completion.chunk", "created": CREATED}
    head["model"] = model

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    if message.get("content"):
        chunks.append(chunk({"content": message["content"]}))
    for i, call in enumerate(message.get("tool_calls") or ()):
        chunks.append(chunk({"tool_calls": [{"index": i, **call}]}))
    chunks.append(chunk({}, "tool_calls" if message.get("tool_calls") else "stop"))
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    chunks.append({**head, "choices": [], "usage": usage})
    lines = [b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks]
    return b"".join(lines) + b"data: [DONE]\n\n"


# -- the server ----------------------------------------------------------------------------------


class Recorder:
    """What the server saw since the last GET /stats."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.arrived: list[float] = []
        self.served: list[float] = []
        self.body_bytes: list[int] = []
        self.cpu = time.process_time()

    def snapshot(self) -> dict[str, Any]:
        stats = {
            "arrived": self.arrived,
            "served": self.served,
            "body_bytes": self.body_bytes,
            "cpu": time.process_time() - self.cpu,
        }
        self.reset()
        return stats


def response(status: int, body: bytes, content_type: str = "application/json") -> bytes:
    head = (
        f"HTTP/1.1 {status} {'OK' if status == 200 else 'Error'}\r\n"
        f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode("ascii") + body


class Server:
    def __init__(self, script: str, latency: float, turns: int) -> None:
        self.script = SCRIPTS[script]
        self.latency = latency
        self.turns = turns
        self.recorder = Recorder()
        self.count = 0

    async def connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                arrived = time.monotonic()
                request_line, *header_lines = head.decode("latin-1").split("\r\n")
                length = 0
                for line in header_lines:
                    name, _, value = line.partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                body = await reader.readexactly(length) if length else b""
                writer.write(await self.reply(request_line, body, arrived))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def reply(self, request_line: str, body: bytes, arrived: float) -> bytes:
        method, path, _ = request_line.split(" ", 2)
        if method == "GET" and path == "/stats":
            return response(200, json.dumps(self.recorder.snapshot()).encode())
        if method != "POST" or path.rstrip("/") != "/v1/chat/completions":
            return response(404, b'{"error": {"message": "no such route"}}')
        request = json.loads(body or b"{}")
        self.count += 1
        message = self.script(request, self.turns)
        if self.latency:
            await asyncio.sleep(self.latency)
        model = request.get("model", "")
        if request.get("stream"):
            data = response(200, sse(message, model, self.count), "text/event-stream")
        else:
            data = response(200, json.dumps(completion(message, model, self.count)).encode())
        recorder = self.recorder
        recorder.arrived.append(arrived)
        recorder.served.append(time.monotonic())
        recorder.body_bytes.append(len(body))
        return data


async def serve(script: str, latency: float, turns: int) -> None:
    server = Server(script, latency, turns)
    listener = await asyncio.start_server(server.connection, "127.0.0.1", 0, backlog=4096)
    port = listener.sockets[0].getsockname()[1]
    print(f"port {port}", flush=True)
    loop = asyncio.get_running_loop()
    stdin_closed = loop.run_in_executor(None, sys.stdin.buffer.read)
    async with listener:
        await stdin_closed


# -- from Python ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stats:
    arrived: list[float]  # time.monotonic() when each request's headers were read
    served: list[float]  # ... and when its reply was ready to send
    body_bytes: list[int]
    cpu: float  # the server's CPU seconds over the same stretch

    @property
    def requests(self) -> int:
        return len(self.arrived)


class LeanServer:
    """`with LeanServer("triage", latency=0.1) as srv:` point a client at `srv.base_url`;
    `srv.stats()` says what it saw since the last call."""

    def __init__(self, script: str = "done", latency: float = 0.0, turns: int = 100) -> None:
        argv = [sys.executable, __file__, "--script", script, "--latency", str(latency)]
        argv += ["--turns", str(turns)]
        self._argv = argv
        self._proc: subprocess.Popen[bytes] | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> LeanServer:
        proc = subprocess.Popen(self._argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self._proc = proc
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        if not line.startswith("port "):
            proc.kill()
            sys.exit(f"the lean server did not start: {line!r}")
        self.port = int(line.split()[1])
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        proc = self._proc
        if proc is not None:
            assert proc.stdin is not None
            proc.stdin.close()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def stats(self) -> Stats:
        url = f"http://127.0.0.1:{self.port}/stats"
        with urllib.request.urlopen(url, timeout=30) as reply:
            raw = json.loads(reply.read())
        return Stats(raw["arrived"], raw["served"], raw["body_bytes"], raw["cpu"])

    def env(self) -> dict[str, str]:
        """The environment of a claw child pointed at this server. Without
        PYTHONDONTWRITEBYTECODE (set on some machines): an installed claw has its modules
        compiled once, at install, not on every start."""
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        return {
            **env,
            "OPENAI_BASE_URL": self.base_url,
            "OPENAI_API_KEY": "sk-bench-0123456789abcdef",
            "NO_PROXY": "127.0.0.1",
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--script", choices=sorted(SCRIPTS), default="done")
    parser.add_argument("--latency", type=float, default=0.0)
    parser.add_argument("--turns", type=int, default=100, help="for the reader script")
    args = parser.parse_args()
    asyncio.run(serve(args.script, args.latency, args.turns))
    return 0


if __name__ == "__main__":
    sys.exit(main())
