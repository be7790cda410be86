"""A conversation's JSON, encoded a turn at a time.

The tool loop sends, each turn, the messages it sent the turn before (the same objects) and
the ones the turn added: their JSON is kept, keyed by the conversation's last message, and
the next request encodes only what is new. What a request costs to encode then does not grow
with the conversation (issue 17). Kept: one entry per conversation (a longer one replaces the
entry it extends), at most `budget` bytes in all; past that, everything is let go (mostly the
conversations of jobs that ended) and encoded again as needed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from claw_batch.llm.messages import Message, ToolSpec

BUDGET = 8 << 20  # bytes of JSON kept


def dumps(value: object) -> bytes:
    """Compact UTF-8 JSON, as the SDK encodes a request."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


class Encoder:
    def __init__(self, budget: int = BUDGET) -> None:
        self._budget = budget
        self._size = 0  # bytes kept; approximate when threads race, which only moves a clear
        # id(a request's last message) -> (the request's messages, their JSON joined by commas)
        self._conversations: dict[int, tuple[tuple[Message, ...], bytes]] = {}
        self._tools: dict[int, tuple[tuple[ToolSpec, ...], bytes]] = {}  # by id(the tuple)

    def messages(
        self, messages: tuple[Message, ...], to_wire: Callable[[Message], dict[str, Any]]
    ) -> bytes:
        """The messages' JSON objects joined by commas."""
        known, head = self._longest_known(messages)
        if known == len(messages):
            return head
        new = [dumps(to_wire(m)) for m in messages[known:]]
        joined = b",".join([head, *new] if known else new)
        self._keep(id(messages[-1]), (messages, joined))
        return joined

    def tools(
        self, tools: tuple[ToolSpec, ...], to_wire: Callable[[ToolSpec], dict[str, Any]]
    ) -> bytes:
        """The tools' JSON objects joined by commas (a job sends the same tuple each turn)."""
        hit = self._tools.get(id(tools))
        if hit is not None and hit[0] is tools:
            return hit[1]
        joined = b",".join([dumps(to_wire(t)) for t in tools])
        self._tools[id(tools)] = (tools, joined)
        self._count(len(joined))
        return joined

    def _longest_known(self, messages: tuple[Message, ...]) -> tuple[int, bytes]:
        """How many of the first messages an earlier request sent, and their JSON."""
        for end in range(len(messages), 0, -1):
            key = id(messages[end - 1])
            hit = self._conversations.get(key)
            if hit is None or len(hit[0]) != end or hit[0] != messages[:end]:
                continue  # tuples compare items by identity first: the same objects are not read
            # The longer conversation replaces the one it extends.
            if end < len(messages) and self._conversations.pop(key, None) is not None:
                self._size -= len(hit[1])
            return end, hit[1]
        return 0, b""

    def _keep(self, key: int, entry: tuple[tuple[Message, ...], bytes]) -> None:
        self._conversations[key] = entry
        self._count(len(entry[1]))

    def _count(self, size: int) -> None:
        self._size += size
        if self._size > self._budget:
            self._conversations.clear()
            self._tools.clear()
            self._size = 0
