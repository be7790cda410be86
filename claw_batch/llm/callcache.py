"""The call cache: every complete model reply kept in `.claw/cache/calls.db` by the sha256 of
its request, so that a job that runs again — after `kill -9`, Ctrl-C, a timeout, a budget
stop, a failure — replays the turns whose requests are the same at no cost, then goes on live.

The key is the request as a canonical form, redacted as cassettes are (llm.cassette):
the endpoint (its base URL without credentials or query), the model, the messages — the
system prompt as `request.key_messages[0]` reads it (SystemPrompt.call_key: placeholders for
the time and the project's location, the daily notes without the entries claw's runner
appends, which change between runs without changing the question); the task prompt and the
rest as sent — the day (a task asked again on another day is a new request), the tools, the
temperature and the sample index (`-B` asks for the next one: nothing is replayed). Above
temperature 0, or with none set, a reply is a sample: the job is in the key too, and twins
are not made once. Never a key, a header, a timeout or a retry setting.

A job's requests only grow: each adds the last reply and the tool results to the one before.
The key is kept as a running hash per job, so a turn hashes its new messages only, never the
whole conversation again (issue 17: a turn's CPU must not grow with the conversation).

Only a complete answer is kept: not an error, a reply cut at max_tokens, a refusal, or an
empty one. At temperature 0, identical requests in flight at once are made once: the others
wait for the first and take its reply from the cache. The tool loop `peek`s before it
reserves a turn's budget: a replayed turn needs none. The store is bounded (`cache:
{max_size: ...}`): the entries used longest ago go first, at the end of a run. A cache
that cannot be read is a warning and live calls, never a failed job; one entry that cannot
be read is a miss, and removed.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from claw_batch import baton, cancel
from claw_batch.errors import LimitExceeded
from claw_batch.llm.base import LLM
from claw_batch.llm.callstore import CallStore
from claw_batch.llm.messages import ChatRequest, Completion, Message, ToolCall, ToolSpec
from claw_batch.llm.replyjson import (
    completion_from_json,
    completion_json,
    message_json,
    redacted,
    tools_json,
)

KEY_VERSION = 2  # a new canonical form: a new number, and the old entries are never found
NOT_KEPT = frozenset({"length", "content_filter", "refusal"})  # finish reasons
MAX_CHAINS = 10_000  # running hashes kept (one per job in flight): past it, they start again


def endpoint_identity(base_url: str | None) -> str:
    """The endpoint as the key names it: scheme, host, port and path, never credentials
    (`https://user:key@host`) nor a query (`?api-key=...`)."""
    if not base_url:
        return "openai:default"
    parts = urlsplit(base_url.strip())
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return "openai:" + urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


def cacheable(completion: Completion) -> bool:
    """A complete answer: not cut, not refused, not empty."""
    if completion.finish_reason in NOT_KEPT:
        return False
    message = completion.message
    return bool(message.tool_calls or (message.content or "").strip())


@dataclass
class _Chain:
    """A job's messages hashed so far: the hash, how many, and the last one (the same
    object, or the job's messages are not the ones hashed)."""

    hasher: Any  # hashlib's sha256 object
    count: int
    last: Message | None
    keys: tuple[Message, ...]
    live: bool = False  # a request of the job was asked of the model: the rest are new too
    missed: str | None = None  # the key `peek` just found nothing for
    # The last reply, and what the key hashes of it: redacted once, for the store and the key.
    reply: tuple[Message | None, bytes] = (None, b"")


class CachedLLM:
    """Answers from the cache what it holds; asks `inner` the rest, and keeps the answer."""

    def __init__(
        self,
        inner: LLM,
        store: CallStore,
        *,
        endpoint: str,
        day: str,
        redact: Callable[[str], str],
    ) -> None:
        self.inner = inner
        self.store = store
        self.endpoint = endpoint
        self.day = day  # the run's date: a request of another day is another request
        self.redact = redact
        self._chains: dict[str, _Chain] = {}  # by job
        self._tools: tuple[tuple[ToolSpec, ...], bytes] | None = None  # the specs, their JSON
        # The last system prompt hashed first: its text and the hash of it alone.
        self._first: tuple[str | None, Any] | None = None
        self._tails: dict[tuple[str, float | None, int], bytes] = {}
        self._inflight: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    def peek(self, request: ChatRequest) -> Completion | None:
        """The reply the cache holds for `request`, without asking the model; None: none.
        What the tool loop asks before it reserves budget: a replayed turn costs nothing, so
        a job a budget stopped replays what it paid for. A miss is remembered: `complete`
        does not look again."""
        chain = self._chain(request)
        if chain.live:
            return None
        key = self._key(chain, request)
        found = self._replayed(key)
        if found is None:
            chain.missed = key
        return found

    def complete(self, request: ChatRequest, *, deadline: float) -> Completion:
        chain = self._chain(request)
        key = self._key(chain, request)
        # A job that went live asks the cache no more: its requests hold a reply just paid
        # for, which no stored request can (a job it is the twin of follows it, and looks).
        look = not chain.live and chain.missed != key
        chain.missed = None
        if not _shared(request):  # a sample: the job's own, never a twin's to wait for
            found = self._replayed(key) if look else None
            return found if found is not None else self._asked(chain, key, request, deadline)
        while True:
            found = self._replayed(key) if look else None
            if found is not None:
                return found
            with self._lock:
                waiter = self._inflight.get(key)
                if waiter is None:
                    mine = self._inflight[key] = threading.Event()
            if waiter is None:
                break
            _wait(waiter, deadline)  # the same request in flight: its reply, when it comes
            look = True
        try:
            return self._asked(chain, key, request, deadline)
        finally:
            with self._lock:
                del self._inflight[key]
            mine.set()

    def _asked(self, chain: _Chain, key: str, request: ChatRequest, deadline: float) -> Completion:
        """The model's reply, kept when it is a complete answer."""
        completion = self.inner.complete(request, deadline=deadline)
        chain.live = True
        if cacheable(completion):
            message = self._redacted(completion.message)
            chain.reply = (completion.message, self._hashed(message))
            stored = completion_json(Completion(message, completion.usage, None, ""))
            stored["finish_reason"] = completion.finish_reason
            stored["model"] = self.redact(completion.model)
            self.store.put(key, stored, completion.usage.total_tokens)
        return completion

    def _replayed(self, key: str) -> Completion | None:
        data = self.store.get(key)
        if data is None:
            return None
        try:
            completion = completion_from_json(data)
        except (KeyError, TypeError, ValueError, AttributeError):
            return None  # an entry this claw cannot read: asked again, and stored anew
        return Completion(
            completion.message,
            completion.usage,
            completion.finish_reason,
            completion.model,
            replayed=True,
        )

    def key(self, request: ChatRequest) -> str:
        """The request's key: the job's messages hashed once each, then the rest."""
        return self._key(self._chain(request), request)

    def _key(self, chain: _Chain, request: ChatRequest) -> str:
        hasher = chain.hasher.copy()
        hasher.update(self._tools_digest(request.tools))
        tail = (request.model, request.temperature, request.sample)
        text = self._tails.get(tail)
        if text is None:
            # 0 from YAML and 0.0 from elsewhere are the same setting.
            temperature = None if request.temperature is None else float(request.temperature)
            fields = [KEY_VERSION, self.endpoint, request.model, self.day, temperature]
            text = self._tails[tail] = b"\x00" + _compact([*fields, request.sample])
        hasher.update(text)
        if not _shared(request):  # a sample is its job's: another job's is not its answer
            hasher.update(b"\x00" + _compact(request.job))
        return str(hasher.hexdigest())

    def _chain(self, request: ChatRequest) -> _Chain:
        messages, keys = request.messages, request.key_messages
        # A job's requests come from its one thread; a caller without a job name has no
        # chain of its own to share.
        chain = self._chains.get(request.job) if request.job else None
        if (
            chain is None
            or chain.keys is not keys
            or chain.count > len(messages)
            or (chain.count and messages[chain.count - 1] is not chain.last)
        ):
            if len(self._chains) >= MAX_CHAINS:
                self._chains.clear()
            chain = self._started(messages, keys)
            if request.job:
                self._chains[request.job] = chain
        for i in range(chain.count, len(messages)):
            shown = keys[0] if i == 0 and keys else messages[i]
            known, hashed = chain.reply
            chain.hasher.update(hashed if shown is known else self._message(shown))
        if len(messages) > chain.count:
            chain.count, chain.last = len(messages), messages[-1]
        return chain

    def _message(self, message: Message) -> bytes:
        """A message as the key hashes it. What the model said is redacted here (a replayed
        reply is the stored, redacted one, and must ask what the paid one asked next); the
        rest claw redacted before it was sent: tool results, prompts and their keys."""
        return self._hashed(self._redacted(message) if message.role == "assistant" else message)

    @staticmethod
    def _hashed(message: Message) -> bytes:
        # message_json's keys come in one order: no sorting needed.
        return json.dumps(message_json(message), separators=(",", ":")).encode() + b"\n"

    def _redacted(self, message: Message) -> Message:
        """A reply with its every text redacted."""
        redact = self.redact
        return Message(
            message.role,
            None if message.content is None else redact(message.content),
            tuple(
                ToolCall(redact(c.id), redact(c.name), redact(c.arguments))
                for c in message.tool_calls
            ),
            message.tool_call_id,
            None if message.reasoning is None else redact(message.reasoning),
        )

    def _started(self, messages: tuple[Message, ...], keys: tuple[Message, ...]) -> _Chain:
        """A new chain, with the first message hashed: the system prompt, the same text for
        every job of a task (agent.systemprompt hands out one object), hashed once for them."""
        chain = _Chain(hashlib.sha256(), 0, None, keys)
        if not messages:
            return chain
        first = keys[0] if keys else messages[0]
        known = self._first
        if known is not None and known[0] is first.content and first.role == "system":
            chain.hasher = known[1].copy()
        else:
            chain.hasher.update(self._message(first))
            if first.role == "system" and not first.tool_calls:
                self._first = (first.content, chain.hasher.copy())
        chain.count, chain.last = 1, messages[0]
        return chain

    def _tools_digest(self, tools: tuple[ToolSpec, ...]) -> bytes:
        """The sha256 of the tools' JSON (redacted), behind a separator."""
        known = self._tools  # the jobs of a task are handed the same specs (Tool.spec)
        if known is not None and _same(known[0], tools):
            return known[1]
        text = _compact(redacted(tools_json(tools), self.redact))
        digest = b"\x00" + hashlib.sha256(text).digest()
        self._tools = (tools, digest)
        return digest


def _shared(request: ChatRequest) -> bool:
    """Whether the reply is the request's, whichever job asks: at temperature 0 only. At any
    other (unset: the provider's default, usually 1) a reply is one sample; twins in a run
    are asked each, and a job replays only its own."""
    return request.temperature is not None and float(request.temperature) <= 0


def _same(a: tuple[ToolSpec, ...], b: tuple[ToolSpec, ...]) -> bool:
    return a is b or (len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True)))


def _compact(value: Any) -> bytes:
    # ensure_ascii: a newline in a string is written `\n`, so b"\n" ends a message alone.
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def _wait(event: threading.Event, deadline: float) -> None:
    """Until `event` is set; a deadline that passes first ends the job (as a provider's
    queue does: endpoints.Throttled), and so does a cancelled run."""
    with baton.released():
        while not event.wait(cancel.POLL):
            cancel.check()
            if time.monotonic() >= deadline:
                raise LimitExceeded(
                    "timeout: the job's deadline passed while it waited for the same request "
                    "of another job"
                )
