"""What a batch file holds: a line for each request (`Call`, awaited by the job that made
it), named by a digest of the request (`custom_id`), and files within the provider's limits
(`chunks`); claw_batch.llm.batch gathers and submits them."""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field

from claw_batch.llm import wire
from claw_batch.llm.cassette import canonical_request
from claw_batch.llm.messages import ChatRequest, Completion

MAX_REQUESTS = 50_000  # lines of one batch file (OpenAI's limit)
MAX_BYTES = 200 * 2**20  # bytes of one batch file (OpenAI's limit)


def custom_id(request: ChatRequest) -> str:
    """The request's id in a batch: a digest of what decides its answer (model, messages with
    the placeholders of `key_messages`, tools, sampling) and of the job that asks, so that the
    same request made again, by a run after a crash, finds its line."""
    canonical = {**canonical_request(request), "job": request.job}
    if request.sample:  # -B asks for a new sample: never a journalled reply
        canonical["sample"] = request.sample
    text = json.dumps(canonical, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return "claw-" + hashlib.sha256(text.encode()).hexdigest()[:40]


@dataclass(eq=False)
class Call:
    cid: str
    request: ChatRequest
    done: threading.Event = field(default_factory=threading.Event)
    completion: Completion | None = None
    error: BaseException | None = None
    attempts: int = 0
    abandoned: bool = False  # its job stopped waiting (Ctrl-C, --batch-wait): never answered

    def line(self) -> bytes:
        body = wire.request_json(self.request)
        head = json.dumps({"custom_id": self.cid, "method": "POST", "url": "/v1/chat/completions"})
        return head[:-1].encode() + b',"body":' + body + b"}\n"

    def answer(self, completion: Completion | None, error: BaseException | None = None) -> None:
        self.completion, self.error = completion, error
        self.done.set()


def chunks(calls: list[Call]) -> list[dict[str, list[Call]]]:
    """The calls by custom_id, in files within the provider's limits."""
    files: list[dict[str, list[Call]]] = [{}]
    size = 0
    for call in calls:
        chunk = files[-1]
        if call.cid in chunk:
            chunk[call.cid].append(call)
            continue
        length = len(call.line())
        if chunk and (len(chunk) >= MAX_REQUESTS or size + length > MAX_BYTES):
            chunk, size = {}, 0
            files.append(chunk)
        chunk[call.cid] = [call]
        size += length
    return [c for c in files if c]
