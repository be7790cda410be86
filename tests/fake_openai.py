"""A fake OpenAI-compatible endpoint: a real HTTP server in a thread, speaking the wire format.

Use it as `with FakeOpenAI() as srv:`, script it with `srv.enqueue(text("hi"), error(429))`
or `srv.handler = fn`, point a client at `srv.base_url`, and assert on `srv.requests`.

It also speaks the Files and Batches APIs (`srv.batch`, a `FakeBatches`): an uploaded JSONL
file of chat requests becomes a batch whose lines are answered from the same script, in file
order, when the batch is processed (on a retrieve once it is no longer held), so a scripted
multi-turn job runs the same through batches. Expiry, failed lines and the counters tests
assert on (uploads, batches created) are its attributes.
"""

from __future__ import annotations

import json
import re
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CREATED = 1_700_000_000


@dataclass(frozen=True)
class Reply:
    status: int = 200
    message: dict[str, Any] | None = None  # choices[0].message of a successful reply
    usage: tuple[int, int, int] = (10, 5, 0)  # prompt, completion, cached
    body: object = None  # sent as is (errors, deliberately odd replies); bytes verbatim
    chunks: tuple[object, ...] | None = None  # streamed as is; bytes verbatim
    headers: dict[str, str] = field(default_factory=dict)
    stall: float = 0.0  # seconds to stall before answering (after the first chunk if streaming)
    trickle: float = 0.0  # seconds between the bytes of the body (headers go at once)


def text(
    content: str | None,
    *,
    usage: tuple[int, int] = (10, 5),
    cached: int = 0,
    reasoning: str | None = None,
) -> Reply:
    message = {"role": "assistant", "content": content}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    return Reply(message=message, usage=(*usage, cached))


def echo_prompt(body: dict[str, Any]) -> Reply:
    """The same request always gets the same answer, the user prompt echoed: what makes
    early cutoff and reruns visible."""
    return text(f"answer to: {body['messages'][1]['content']}")


def call(name: str, args: dict[str, Any] | str, id: str | None = None) -> dict[str, Any]:
    arguments = args if isinstance(args, str) else json.dumps(args)
    return {"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}


def tool_calls(
    *calls: dict[str, Any],
    content: str | None = None,
    usage: tuple[int, int] = (10, 5),
    reasoning: str | None = None,
) -> Reply:
    numbered = [{**c, "id": c["id"] or f"call_fake_{n}"} for n, c in enumerate(calls)]
    message = {"role": "assistant", "content": content, "tool_calls": numbered}
    if reasoning is not None:  # DeepSeek's thinking mode: `reasoning_content` beside content
        message["reasoning_content"] = reasoning
    return Reply(message=message, usage=(*usage, 0))


def error(
    status: int,
    message: str = "fake error",
    *,
    code: str | None = None,
    type: str | None = None,
    retry_after: float | str | None = None,
) -> Reply:
    body = {"error": {"message": message, "type": type, "code": code, "param": None}}
    headers = {} if retry_after is None else {"Retry-After": str(retry_after)}
    return Reply(status=status, body=body, headers=headers)


def raw(body: object, *, status: int = 200, content_type: str | None = None) -> Reply:
    headers = {} if content_type is None else {"Content-Type": content_type}
    return Reply(status=status, body=body, headers=headers)


def raw_stream(*chunks: object) -> Reply:
    """A streamed reply of exactly these chunks (then `[DONE]`)."""
    return Reply(chunks=chunks)


def hang(seconds: float, then: Reply | None = None) -> Reply:
    """Stall `seconds` (after the first chunk when streaming), then answer `then`."""
    return replace(then or text("(late reply)"), stall=seconds)


def trickle(seconds: float, then: Reply | None = None) -> Reply:
    """Answer `then` one byte every `seconds`: never silent for long, never done soon."""
    return replace(then or text("(slow reply)"), trickle=seconds)


def completion_body(reply: Reply, model: str, n: int) -> object:
    if reply.body is not None:
        return reply.body
    message = reply.message or {}
    finish = "tool_calls" if message.get("tool_calls") else "stop"
    choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
    return {**_envelope(model, n, "chat.completion"), "choices": [choice], "usage": _usage(reply)}


def stream_chunks(reply: Reply, model: str, n: int, include_usage: bool) -> Iterator[object]:
    if reply.chunks is not None:
        yield from reply.chunks
        return
    message = reply.message or {}
    envelope = _envelope(model, n, "chat.completion.chunk")

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**envelope, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    yield chunk({"role": "assistant", "content": ""})
    for piece in _pieces(message.get("reasoning_content") or ""):  # DeepSeek's thinking mode
        yield chunk({"reasoning_content": piece})
    for piece in _pieces(message.get("content") or ""):
        yield chunk({"content": piece})
    for index, tc in enumerate(message.get("tool_calls") or []):
        head = {"index": index, "id": tc["id"], "type": "function"}
        function = {"name": tc["function"]["name"], "arguments": ""}
        yield chunk({"tool_calls": [{**head, "function": function}]})
        arguments = tc["function"]["arguments"]  # a JSON object is sent in one piece
        for piece in _pieces(arguments) if isinstance(arguments, str) else [arguments]:
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    yield chunk({}, "tool_calls" if message.get("tool_calls") else "stop")
    if include_usage:
        yield {**envelope, "choices": [], "usage": _usage(reply)}


def _envelope(model: str, n: int, obj: str) -> dict[str, Any]:
    return {"id": f"chatcmpl-fake{n}", "object": obj, "created": CREATED, "model": model}


def _usage(reply: Reply) -> dict[str, Any]:
    prompt, completion, cached = reply.usage
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def _pieces(s: str, n: int = 3) -> list[str]:
    size = max(1, -(-len(s) // n))
    return [s[i : i + size] for i in range(0, len(s), size)]


class FakeOpenAI:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.handler: Callable[[dict[str, Any]], Reply] | None = None
        self.latency = 0.0
        # Hung replies (`hang`) taken from the script and not over yet: a call that ended while
        # one still hangs did not wait for it, whatever the clock says.
        self.hanging = 0
        self.hung = threading.Event()  # set once a hung reply is taken: the request is in
        self._queue: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self.batch = FakeBatches(self)
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.fake = self
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def enqueue(self, *replies: Reply) -> None:
        with self._lock:
            self._queue.extend(replies)

    def start(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._closing.set()  # wakes stalled replies
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def next_reply(self, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, Reply]:
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)
            n = len(self.requests)
            if self._queue:
                return n, self._counted(self._queue.popleft())
        if self.handler is not None:
            reply = self.handler(body)
            with self._lock:
                return n, self._counted(reply)
        return n, error(500, "FakeOpenAI: the script ran out of replies", type="fake_script")

    def _counted(self, reply: Reply) -> Reply:
        if reply.stall > 0:
            self.hanging += 1
            self.hung.set()
        return reply

    def over(self, reply: Reply) -> None:
        """The handler is done with `reply`: answered, given up on, or the server closed."""
        with self._lock:
            self.hanging -= reply.stall > 0

    def wait(self, seconds: float) -> bool:
        """Sleep unless the server is closing; True if it is."""
        return self._closing.wait(seconds) if seconds > 0 else self._closing.is_set()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's default backlog of 5 refuses (or delays by a SYN retry, 1 s) most of
    # the connections that 32 jobs open at once.
    request_queue_size = 128
    fake: FakeOpenAI


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test output clean

    def do_POST(self) -> None:
        raw_body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path.startswith(("/v1/files", "/v1/batches")):
            status, answer = self.server.fake.batch.post(self.path, raw_body, self.headers)
            return self._json(status, answer)
        if self.path.rstrip("/") != "/v1/chat/completions":
            return self._json(404, {"error": {"message": f"no route {self.path}"}})
        body = json.loads(raw_body or b"{}")
        fake = self.server.fake
        n, reply = fake.next_reply(body, {k.lower(): v for k, v in self.headers.items()})
        try:
            if fake.wait(fake.latency):
                return
            if body.get("stream") and reply.status == 200 and reply.body is None:
                return self._stream(body, reply, n)
            if not fake.wait(reply.stall):
                model = body.get("model", "")
                answer = completion_body(reply, model, n)
                self._json(reply.status, answer, reply.headers, reply.trickle)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (its deadline): what some tests want
        finally:
            fake.over(reply)

    def do_GET(self) -> None:
        if self.path.startswith(("/v1/files", "/v1/batches")):
            status, answer = self.server.fake.batch.get(self.path)
            return self._json(status, answer)
        self._json(404, {"error": {"message": f"no route GET {self.path}"}})

    def _json(
        self,
        status: int,
        body: object,
        headers: dict[str, str] | None = None,
        trickle: float = 0.0,
    ) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        for name, value in {"Content-Type": "application/json", **(headers or {})}.items():
            self.send_header(name, value)
        self.end_headers()
        if not trickle:
            self.wfile.write(data)
            return
        self.wfile.flush()
        for i in range(len(data)):
            if self.server.fake.wait(trickle):
                return
            self.wfile.write(data[i : i + 1])
            self.wfile.flush()

    def _stream(self, body: dict[str, Any], reply: Reply, n: int) -> None:
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        chunks = stream_chunks(reply, body.get("model", ""), n, include_usage)
        for i, chunk in enumerate(chunks):
            if i == 1 and self.server.fake.wait(reply.stall):
                return  # a stalled stream: headers and the first chunk, then nothing
            data = chunk if isinstance(chunk, bytes) else json.dumps(chunk).encode()
            self.wfile.write(b"data: " + data + b"\n\n")
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")


class FakeBatches:
    """The Files and Batches endpoints of a FakeOpenAI, and what tests control of them."""

    def __init__(self, fake: FakeOpenAI) -> None:
        self.fake = fake
        self.enabled = True  # False: every files/batches route answers 404, as most servers do
        self.refuse: Reply | None = None  # every files/batches route answers this error
        self.held = False  # True: batches stay in_progress until a test lets them go
        self.polls_before_done = 0  # retrieves that answer in_progress before processing
        # The next batch processed expires after answering this many of its lines.
        self.expire_after: int | None = None
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, dict[str, Any]] = {}
        self.uploads = 0
        self.created = 0
        self.retrieves = 0
        self.created_event = threading.Event()  # set when a batch is created
        # Set: a create waits for this event (setting `creating` meanwhile), then fails with
        # a 503 and creates nothing: a client killed while it waited made no batch. With
        # `create_first`, it creates the batch before it waits: the reply was lost.
        self.create_gate: threading.Event | None = None
        self.create_first = False
        self.creating = threading.Event()
        self.fail_next: str | None = None  # the next batch processed `failed`, for this reason
        self._polls: dict[str, int] = {}
        self._lock = threading.Lock()

    def post(self, path: str, raw: bytes, headers: Any) -> tuple[int, object]:
        if self.refuse is not None:
            return self.refuse.status, self.refuse.body
        if not self.enabled:
            return 404, {"error": {"message": f"no route {path}"}}
        if path.rstrip("/") == "/v1/files":
            return self._upload(raw, headers.get("Content-Type", ""))
        if path.rstrip("/") == "/v1/batches":
            return self._create(json.loads(raw or b"{}"))
        match = re.fullmatch(r"/v1/batches/([^/]+)/cancel", path)
        if match and match[1] in self.batches:
            with self._lock:
                batch = self.batches[match[1]]
                if batch["status"] not in ("completed", "expired", "failed", "cancelled"):
                    self._process(batch, cancelled=True)
                return 200, batch
        return 404, {"error": {"message": f"no route {path}"}}

    def get(self, path: str) -> tuple[int, object]:
        if self.refuse is not None:
            return self.refuse.status, self.refuse.body
        if not self.enabled:
            return 404, {"error": {"message": f"no route GET {path}"}}
        if re.fullmatch(r"/v1/batches(\?.*)?", path):  # the latest first, as OpenAI lists them
            with self._lock:
                data = list(reversed(self.batches.values()))
            return 200, {"object": "list", "data": data, "has_more": False}
        match = re.fullmatch(r"/v1/files/([^/]+)/content", path)
        if match and match[1] in self.files:
            return 200, self.files[match[1]]
        match = re.fullmatch(r"/v1/batches/([^/]+)", path)
        if match and match[1] in self.batches:
            with self._lock:
                self.retrieves += 1
                batch = self.batches[match[1]]
                polls = self._polls[batch["id"]] = self._polls.get(batch["id"], 0) + 1
                due = polls > self.polls_before_done and not self.held
                if batch["status"] == "in_progress" and due:
                    self._process(batch)
                return 200, batch
        return 404, {"error": {"message": f"no route GET {path}"}}

    def _upload(self, raw: bytes, content_type: str) -> tuple[int, object]:
        fields = _multipart(raw, content_type)
        if fields.get("purpose") != b"batch" or "file" not in fields:
            return 400, {"error": {"message": "expected purpose=batch and a file"}}
        with self._lock:
            self.uploads += 1
            file_id = f"file-fake{len(self.files) + 1}"
            self.files[file_id] = fields["file"]
        size = len(fields["file"])
        return 200, _file(file_id, size, "batch")

    def _create(self, body: dict[str, Any]) -> tuple[int, object]:
        gate = self.create_gate
        if gate is not None and not self.create_first:
            self.creating.set()
            gate.wait(60)
            return 503, {"error": {"message": "the client went away"}}
        if body.get("input_file_id") not in self.files:
            return 400, {"error": {"message": f"no file {body.get('input_file_id')}"}}
        if body.get("endpoint") != "/v1/chat/completions" or body.get("completion_window") != "24h":
            return 400, {"error": {"message": "bad endpoint or completion_window"}}
        with self._lock:
            self.created += 1
            batch_id = f"batch_fake{self.created}"
            lines = self.files[body["input_file_id"]].decode().splitlines()
            batch = {
                "id": batch_id,
                "object": "batch",
                "endpoint": body["endpoint"],
                "errors": None,
                "input_file_id": body["input_file_id"],
                "completion_window": "24h",
                "status": "in_progress",
                "output_file_id": None,
                "error_file_id": None,
                "created_at": CREATED,
                "request_counts": {"total": len(lines), "completed": 0, "failed": 0},
            }
            self.batches[batch_id] = batch
        self.created_event.set()
        if gate is not None:
            self.creating.set()
            gate.wait(60)
        return 200, batch

    def _process(self, batch: dict[str, Any], *, cancelled: bool = False) -> None:
        """Answer the batch's lines from the script (under the lock)."""
        lines = self.files[batch["input_file_id"]].decode().splitlines()
        if self.fail_next is not None and not cancelled:
            errors_of = {"object": "list", "data": [{"code": "invalid", "message": self.fail_next}]}
            batch |= {"status": "failed", "errors": errors_of}
            self.fail_next = None
            return
        answered = 0 if cancelled else len(lines)
        status = "cancelled" if cancelled else "completed"
        if not cancelled and self.expire_after is not None:
            answered, status, self.expire_after = self.expire_after, "expired", None
        out: list[bytes] = []
        errors: list[bytes] = []
        self._lock.release()  # the script's handler may take its time
        try:
            for n, line in enumerate(lines[:answered], 1):
                request = json.loads(line)
                _, reply = self.fake.next_reply(request["body"], {})
                body = completion_body(reply, request["body"].get("model", ""), n)
                response = {"status_code": reply.status, "request_id": f"req_{n}", "body": body}
                record = {"id": f"batch_req_{n}", "custom_id": request["custom_id"]}
                record |= {"response": response, "error": None}
                (out if reply.status == 200 else errors).append(json.dumps(record).encode())
        finally:
            self._lock.acquire()
        for name, lines_of in (("output_file_id", out), ("error_file_id", errors)):
            if lines_of:
                file_id = f"file-fake{len(self.files) + 1}"
                self.files[file_id] = b"\n".join(lines_of) + b"\n"
                batch[name] = file_id
        counts = {"total": len(lines), "completed": len(out), "failed": len(errors)}
        batch |= {"status": status, "request_counts": counts}


def _file(file_id: str, size: int, purpose: str) -> dict[str, Any]:
    return {
        "id": file_id,
        "object": "file",
        "bytes": size,
        "created_at": CREATED,
        "filename": "batch.jsonl",
        "purpose": purpose,
        "status": "processed",
    }


def _multipart(raw: bytes, content_type: str) -> dict[str, bytes]:
    """The fields of a multipart/form-data body, by name."""
    match = re.search(r'boundary="?([^";]+)"?', content_type)
    if match is None:
        return {}
    fields: dict[str, bytes] = {}
    for part in raw.split(b"--" + match[1].encode())[1:]:
        head, _, body = part.partition(b"\r\n\r\n")
        name = re.search(rb'name="([^"]+)"', head)
        if name is not None:
            fields[name[1].decode()] = body.removesuffix(b"\r\n")
    return fields
